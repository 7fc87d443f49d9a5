// util.mjs: shared helpers of the Node tests (not a test file itself).
// The repo is two levels up; the fixtures are ../shared/fixtures beside it (never copied); the
// build directory is $VITRINE_BUILD or <repo>/build, holding wasm/ and the native vitrine.
import { readFileSync, readdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createVitrine, readSafetensorsHeader, enableNodeRelaxedSimd } from '../../web/vitrine.js';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const FIXTURES = path.resolve(REPO, '../shared/fixtures');
export const BUILD = path.resolve(process.env.VITRINE_BUILD || path.join(REPO, 'build'));
export const WASM_DIR = path.join(BUILD, 'wasm');
export const NATIVE = path.join(BUILD, 'vitrine');

export const fixtureNames = () => readdirSync(FIXTURES).filter((f) => f.endsWith('.safetensors')).sort();
export const fixture = (name) => readFileSync(path.join(FIXTURES, name));

// node:wasi prints an ExperimentalWarning on first use; drop only that one.
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) => {
  const type = typeof rest[0] === 'string' ? rest[0] : rest[0] && rest[0].type;
  if (type === 'ExperimentalWarning' && String(warning).includes('WASI')) return;
  return emitWarning.call(process, warning, ...rest);
};

// Node 20: relaxed SIMD is behind a V8 flag; set it before any test compiles wasm.
export const RELAXED = await enableNodeRelaxedSimd();
export const NATIVE_FMA = path.join(BUILD, 'vitrine-fma');
// this CPU has FMA3 (x86-64; V8 then fuses f32x4.relaxed_madd) or is arm64 (always fused)
export const HOST_FMA = process.arch === 'arm64' || (process.arch === 'x64' && (() => {
  try { return /^flags\s*:.*\bfma\b/m.test(readFileSync('/proc/cpuinfo', 'utf8')); } catch { return false; }
})());

// The builds the suite must pass: each plain file on 1 thread, and each shared-memory ("-mt")
// file with its pool on every core (tests/node/threads.test.mjs: the same bits at any count).
// (wasm/builds.json, the one list of builds; MT_BUILDS: its shared-memory files)
const LISTED = JSON.parse(readFileSync(path.join(REPO, 'wasm/builds.json'), 'utf8')).builds;
export const BUILDS = Object.keys(LISTED);
export const MT_BUILDS = BUILDS.filter((b) => LISTED[b].threads);
const engines = new Map();
export function engine(build) {
  if (!engines.has(build))
    engines.set(build, createVitrine({ wasm: build, wasmDir: WASM_DIR, threads: build.endsWith('-mt') ? undefined : 1 }));
  return engines.get(build);
}

// The tensors of safetensors bytes (the shell's header reader): { meta, tensors: { name: { dtype, shape, bytes } } }.
export function readSafetensors(buf) {
  const u8 = buf instanceof Uint8Array ? buf : new Uint8Array(buf);
  const { length: n, header } = readSafetensorsHeader(u8);
  const meta = header.__metadata__ || {};
  delete header.__metadata__;
  const tensors = {};
  for (const [k, v] of Object.entries(header)) {
    const [a, b] = v.data_offsets;
    tensors[k] = { dtype: v.dtype, shape: v.shape, bytes: u8.slice(8 + n + a, 8 + n + b) };
  }
  return { meta, tensors };
}
export const f32 = (t) => new Float32Array(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength / 4);

// max|a - b| / max|b|, the parity-format error.
export function relErr(a, b) {
  let d = 0, m = 0;
  for (let i = 0; i < b.length; i++) { d = Math.max(d, Math.abs(a[i] - b[i])); m = Math.max(m, Math.abs(b[i])); }
  return m > 0 ? d / m : d;
}

/** A real full disk: a tmpfs of `kib` KiB, unmounted after test t (root only; t skips, saying so,
 * elsewhere). Returns its folder, or null when skipped. */
export function tmpfs(t, kib) {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-tmpfs-'));
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${kib}k`, 'tmpfs', dir], { encoding: 'utf8' });
  if (r.status !== 0) { rmSync(dir, { recursive: true, force: true }); t.skip(`cannot mount a tmpfs here (${(r.stderr || '').trim() || 'not root'})`); return null; }
  t.after(() => { spawnSync('umount', [dir]); rmSync(dir, { recursive: true, force: true }); });
  return dir;
}
