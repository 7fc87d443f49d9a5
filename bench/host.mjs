// host.mjs: the CPU a benchmark ran on and its vector ISA, as the figures name them.
import { readFileSync } from 'node:fs';

export function host() {
  let info = '';
  try { info = readFileSync('/proc/cpuinfo', 'utf8'); } catch { /* not Linux: unknown */ }
  const cpu = (/^model name\s*:\s*(.*)$/m.exec(info) || [])[1] || 'unknown CPU';
  const flags = ((/^flags\s*:(.*)$/m.exec(info) || [])[1] || '').split(/\s+/);
  const isa = flags.includes('avx512f') ? 'AVX-512 + AVX2 + FMA3' : flags.includes('avx2') ? 'AVX2 + FMA3' : flags.includes('fma') ? 'AVX + FMA3'
    : flags.includes('sse2') ? 'SSE2 (no FMA)' : process.arch;
  return { cpu, isa };
}
