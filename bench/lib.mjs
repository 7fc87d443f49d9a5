// lib.mjs: what the benchmark scripts of bench/ share: the host (CPU, its vector ISA, the load
// average), the statistics (median, range, paired ratios), running a program pinned to cores, and
// the peak loop as a wasm module (peak_module.c) to time beside a training step.
import { spawnSync } from 'node:child_process';
import { readFileSync, existsSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

// ---- the host ---------------------------------------------------------------------------------

/** CPU model, cores, the host's vector ISA (what PyTorch / OpenBLAS can use; wasm has 128-bit
 * vectors whatever the host), Node and V8. */
export function hostInfo() {
  let flags = [],
    info = '';
  try {
    info = readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    /* not Linux */
  }
  flags = (info.match(/^flags\s*:(.*)$/m) || ['', ''])[1].trim().split(/\s+/);
  const isa = flags.includes('avx512f')
    ? 'AVX-512 + AVX2 + FMA3'
    : flags.includes('avx2')
      ? 'AVX2 + FMA3'
      : flags.includes('fma')
        ? 'AVX + FMA3'
        : flags.includes('sse2')
          ? 'SSE2 (no FMA)'
          : process.arch;
  // a VM's model name may hide the generation ("AMD EPYC"): AMD's cpu family tells it
  const family = Number((info.match(/^cpu family\s*:\s*(\d+)/m) || [])[1]);
  const zen = /AuthenticAMD/.test(info)
    ? { 23: 'Zen / Zen 2', 25: flags.includes('avx512f') ? 'Zen 4' : 'Zen 3', 26: 'Zen 5' }[family]
    : null;
  const model = os.cpus()[0]?.model || 'unknown CPU';
  return {
    cpu: zen && !model.includes('Zen') ? `${model} (${zen})` : model,
    cores: os.cpus().length,
    isa,
    fma: flags.includes('fma') || process.arch === 'arm64',
    node: process.version,
    v8: process.versions.v8,
    taskset: hasTaskset(),
  };
}
/** The 1-minute load average, rounded (printed beside every measurement). */
export const load1 = () => Number(os.loadavg()[0].toFixed(2));
export const loadavg = () => os.loadavg().map((x) => Number(x.toFixed(2)));

let tasksetKnown = null;
export function hasTaskset() {
  if (tasksetKnown == null) tasksetKnown = spawnSync('taskset', ['-c', '0', 'true']).status === 0;
  return tasksetKnown;
}

// ---- statistics -------------------------------------------------------------------------------

const finite = (a) => a.filter((x) => x != null && Number.isFinite(x));
export function median(a) {
  const s = finite(a).sort((x, y) => x - y),
    n = s.length;
  return n ? (n % 2 ? s[n >> 1] : (s[n / 2 - 1] + s[n / 2]) / 2) : null;
}
export const min = (a) => (finite(a).length ? Math.min(...finite(a)) : null);
export const max = (a) => (finite(a).length ? Math.max(...finite(a)) : null);
/** { median, min, max, n } of a list */
export const summary = (a) => ({ median: median(a), min: min(a), max: max(a), n: finite(a).length });
/** per-round ratios a[i] / b[i] and their summary */
export function paired(a, b) {
  const r = a.map((x, i) => (x != null && b[i] != null && b[i] !== 0 ? x / b[i] : null));
  return { ratios: r, ...summary(r) };
}

// ---- formatting -------------------------------------------------------------------------------

export const f = (x, d = 1) => (x == null || !Number.isFinite(x) ? '–' : Number(x).toFixed(d));
/** "1.23 (1.10–1.31)": a median and its range */
export const fr = (s, d = 2) => (s && s.median != null ? `${f(s.median, d)} (${f(s.min, d)}–${f(s.max, d)})` : '–');
export const pct = (s, d = 0) =>
  s && s.median != null ? `${f(100 * s.median, d)}% (${f(100 * s.min, d)}–${f(100 * s.max, d)})` : '–';

// ---- verdicts ---------------------------------------------------------------------------------

/** The verdict on a thread-speedup target (section 9): 'yes', '**no**', or -- when the peak loop
 * (registers only, no memory, no synchronisation), timed on 2 threads against 1 in the same rounds,
 * itself scaled less than the target -- not measurable: the two vCPUs then had fewer than two
 * cores' multiply-add units (hyperthreads of one core on the host), and no program could. */
export function threadVerdict(speedup, target, ceiling) {
  if (speedup == null || !Number.isFinite(speedup)) return '–';
  if (speedup >= target) return 'yes';
  if (ceiling != null && Number.isFinite(ceiling) && ceiling < target)
    return `not measurable here (the peak loop's own 2t/1t: ${f(ceiling, 2)})`;
  return '**no**';
}
/** Below this 2t/1t of the peak loop in any of its probes a run says that its two vCPUs shared one core. */
export const SHARED_CORE = 1.5;

// ---- running programs -------------------------------------------------------------------------

/** Runs cmd with args (pinned to `cpus`, e.g. '0' or '0,1', when taskset exists), returns
 * { status, objects: the JSON objects it printed (one document or one per line), stderr }. */
export function runJSON(cmd, args, { env = {}, cpus = null, cwd = ROOT, timeoutMs = 0 } = {}) {
  const [c, a] = cpus && hasTaskset() ? ['taskset', ['-c', cpus, cmd, ...args]] : [cmd, args];
  const r = spawnSync(c, a, {
    cwd,
    encoding: 'utf8',
    maxBuffer: 256 << 20,
    env: { ...process.env, ...env },
    ...(timeoutMs ? { timeout: timeoutMs } : {}),
  });
  const out = r.stdout || '';
  let objects = [];
  try {
    objects = [JSON.parse(out)];
  } catch {
    objects = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .flatMap((l) => {
        try {
          return [JSON.parse(l)];
        } catch {
          return [];
        }
      });
  }
  return { status: r.status, signal: r.signal, objects, stderr: r.stderr || '' };
}

// ---- clocks -------------------------------------------------------------------------------------

/** A clock in ms: 'wall' (performance.now) or 'cpu' (this process's CPU time, user + system, all
 * its threads). On a busy machine a process pinned to one core is charged only for the time it
 * ran: another process's share of that core is not counted (its caches' effects still are). Wall
 * time is the only clock for a thread speedup. */
export function clockOf(kind = 'wall') {
  if (kind === 'cpu')
    return () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1e3;
    };
  if (kind !== 'wall') throw new Error(`clock: 'wall' or 'cpu', not ${kind}`);
  return () => performance.now();
}

// ---- the peak loop in JavaScript's hands --------------------------------------------------------

/** build/wasm/peak-{relaxed,simd}.wasm of a build directory: { name, gflops() } runs the 12-chain
 * multiply-add loop once (~3 ms) and returns its GFLOP/s, timed by `clock` (clockOf); null when
 * the file is missing. */
export async function loadPeak(buildDir, kind = 'relaxed', clock = clockOf('wall')) {
  const file = join(buildDir, 'wasm', `peak-${kind}.wasm`);
  if (!existsSync(file)) return null;
  if (kind === 'relaxed') (await import('node:v8')).setFlagsFromString('--experimental-wasm-relaxed-simd');
  const mod = await WebAssembly.compile(readFileSync(file));
  // a reactor that calls nothing: every import (wasi's, if any) is a stub
  const imports = {};
  for (const imp of WebAssembly.Module.imports(mod)) (imports[imp.module] ||= {})[imp.name] = () => 0;
  const inst = await WebAssembly.instantiate(mod, imports);
  inst.exports._initialize?.();
  const iters = 200000;
  const gflops = () => {
    const t = clock();
    const fl = inst.exports.peak(iters);
    return fl / ((clock() - t) * 1e6);
  };
  for (let i = 0; i < 20; i++) gflops(); // V8 tiers the loop up on a later call
  return { name: kind === 'relaxed' ? 'f32x4.relaxed_madd, 12 chains' : 'f32x4 mul+add, 12 chains', gflops };
}

/** Node 20's flags for jax-js (bench/jaxjs_vit.mjs): its einsum and attention use iterator helpers,
 * its Wasm kernels relaxed SIMD's fused multiply-add. */
export const JAXJS_NODE_FLAGS = ['--harmony-iterator-helpers', '--experimental-wasm-relaxed-simd'];
