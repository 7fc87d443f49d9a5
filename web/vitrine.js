// vitrine.js: the JavaScript shell of the vitrine engine, one ES module for the browser and Node.
//
// It loads one wasm build (the relaxed-SIMD reactor where the host validates relaxed SIMD, else
// Emscripten SIMD128 where it validates SIMD, else Emscripten scalar; in Node also the WASI
// reactor builds), wraps wasm/exports.c in a small class API,
// copies images in (ImageData, ImageBitmap, Float32Array NCHW) and copies results out.
// Rules kept everywhere below: typed-array views over wasm memory are built fresh for each use
// (memory may grow on any call), pointers are read with `>>> 0`, and an engine failure becomes a
// VitrineError carrying the engine's message and status. Training (initWeights, trainerInit,
// trainStep, save/loadTrainState, visualize) calls the engine's trainer (src/trainer.c); the loop
// around it is web/train.js. No file I/O here except reading the .wasm.

import { startPool, hostCores, threadsUnavailableReason, importedMemoryPages } from './pool.js';

const IS_NODE = typeof process !== 'undefined' && !!(process.versions && process.versions.node);

const KINDS = { timm: 0, lightly: 1, causal: 2, mae: 3, aim: 4 };
const FN = { encode: 0, forward: 1, intermediates: 2, intermediates_norm: 3, loss: 4, timm_forward: 5 };
const POLICY_TEXT_MAX = 48; // VT_POLICY_TEXT_MAX (src/vitrine.h): a policy name's buffer
const TIMELINE_MAX = 4096; // VT_TIMELINE_MAX (src/vitrine.h): arena events the engine keeps
export const IMAGENET_MEAN = [0.485, 0.456, 0.406];
export const IMAGENET_STD = [0.229, 0.224, 0.225];

/** Per-channel mean / std for a model of `chans` channels. Given 3 values (ImageNet's by default)
 * and a 1-channel model, the grey channel (the average of R, G, B) uses the average of the three
 * (ImageNet: mean 0.449, std 0.226); given one value, every channel uses it. */
export function channelStats(chans, { mean = IMAGENET_MEAN, std = IMAGENET_STD } = {}) {
  const avg = (a) => a.reduce((x, y) => x + y, 0) / a.length;
  const pick = (a) => (chans === 1 ? [a.length === 1 ? a[0] : avg(a)] : Array.from({ length: chans }, (_, c) => a[c % a.length]));
  return { mean: pick(mean), std: pick(std) };
}

/** Normalised NCHW floats (image b of `batch`) -> RGBA bytes (W*H*4), undoing mean / std
 * (as channelStats); grey images are repeated over R, G, B. For showing inputs and reconstructions. */
export function toRGBA(nchw, { chans, img }, b = 0, opts = {}) {
  const { mean, std } = channelStats(chans, opts);
  const px = img * img, base = b * chans * px, out = new Uint8ClampedArray(4 * px);
  for (let i = 0; i < px; i++) {
    for (let k = 0; k < 3; k++) {
      const c = chans === 1 ? 0 : k % chans;
      out[4 * i + k] = Math.round(255 * (nchw[base + c * px + i] * std[c] + mean[c]));
    }
    out[4 * i + 3] = 255;
  }
  return out;
}

// (module (func (result v128) i32.const 0 i8x16.splat i8x16.popcnt)): valid only with SIMD128.
const SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10,
  10, 1, 8, 0, 65, 0, 253, 15, 253, 98, 11]);

export function simdSupported() {
  try { return WebAssembly.validate(SIMD_PROBE); } catch { return false; }
}

/** VitrineError.code for each vt_status: its name in src/status.h (tests/node/errors.test.mjs
 * checks the two against each other). Errors found in JS carry the status the engine would give. */
export const STATUS_CODES = Object.freeze({ [-1]: 'VT_ERR_ARG', [-2]: 'VT_ERR_NOMEM', [-3]: 'VT_ERR_FORMAT',
  [-4]: 'VT_ERR_MISMATCH', [-5]: 'VT_ERR_NUMERIC', [-6]: 'VT_ERR_BUDGET', [-7]: 'VT_ERR_STATE', [-8]: 'VT_ERR_IO' });

// (module (func (result v128) f32.const 0 f32x4.splat (x3) f32x4.relaxed_madd)): valid only with
// relaxed SIMD (Chromium 114+ by default; Node 20 behind V8's --experimental-wasm-relaxed-simd).
const RELAXED_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10,
  28, 1, 26, 0, 67, 0, 0, 0, 0, 253, 19, 67, 0, 0, 0, 0, 253, 19, 67, 0, 0, 0, 0, 253, 19, 253, 133, 2, 11]);

export function relaxedSimdSupported() {
  try { return WebAssembly.validate(RELAXED_PROBE); } catch { return false; }
}

/** Node 20 only: turn on V8's relaxed SIMD (--experimental-wasm-relaxed-simd) for this process,
 * so that the 'relaxed' build validates and compiles. Must run before the first wasm compile that
 * should see it; V8 flags are per process (workers started later inherit it). Returns whether
 * relaxed SIMD validates afterwards. A no-op in browsers and where it already validates. The CLI
 * and the Node tests call it; a library user decides for their own process. */
export async function enableNodeRelaxedSimd() {
  if (relaxedSimdSupported() || !IS_NODE) return relaxedSimdSupported();
  try { (await nodeModule('v8')).setFlagsFromString('--experimental-wasm-relaxed-simd'); } catch { /* not V8 */ }
  return relaxedSimdSupported();
}

export class VitrineError extends Error {
  constructor(message, status) {
    super(message);
    this.name = 'VitrineError';
    this.status = status;                                 // the engine's vt_status (negative)
    this.code = STATUS_CODES[status] || 'VT_ERR_UNKNOWN'; // e.g. 'VT_ERR_ARG'
  }
}

// ---- loading -------------------------------------------------------------------------------

// The wasm builds this shell can load: the one list. createVitrine() picks from it, the package
// ships exactly its files (scripts/prepack.mjs checks build/wasm/vitrine-* against it; package.json
// "files" takes build/wasm/vitrine-*) and tests/package checks the tarball. A new build: one entry
// here, and its name in vitrine.d.ts's WasmBuild (tests/package checks that the two agree).
// Each browser build's .wasm is named by a literal new URL('...', import.meta.url), the pattern
// bundlers (Vite, webpack, Parcel) recognise: they copy the file and rewrite the URL. Its
// Emscripten glue (a small ES module factory) is imported statically, so that a bundler follows it
// too (a dynamic import() would split a chunk, which Vite's default worker format cannot hold).
// The WASI builds run in Node only: their URL is not a literal, so bundlers leave them out.
import createSimdModule from '../build/wasm/vitrine-simd.mjs';
import createScalarModule from '../build/wasm/vitrine-scalar.mjs';
import createSimdMtModule from '../build/wasm/vitrine-simd-mt.mjs';

// wasm / glue: the file names (wasm is what locateFile is given); url: where the .wasm is by
// default; extra: any other file of the build that must ship (none yet).
const WASM_BASE = '../build/wasm/';
const BUILDS = {
  simd: { runtime: 'emscripten', simd: true, mt: 'simd-mt', wasm: 'vitrine-simd.wasm', glue: 'vitrine-simd.mjs', factory: createSimdModule,
    url: () => new URL('../build/wasm/vitrine-simd.wasm', import.meta.url) },
  scalar: { runtime: 'emscripten', simd: false, wasm: 'vitrine-scalar.wasm', glue: 'vitrine-scalar.mjs', factory: createScalarModule,
    url: () => new URL('../build/wasm/vitrine-scalar.wasm', import.meta.url) },
  // SIMD128 + relaxed SIMD's fused multiply-add: a clang-19 reactor (no glue), loaded with our own
  // WASI shim (wasiShim below), in the browser as in Node
  relaxed: { runtime: 'reactor', simd: true, mt: 'relaxed-mt', wasm: 'vitrine-relaxed.wasm',
    url: () => new URL('../build/wasm/vitrine-relaxed.wasm', import.meta.url) },
  'wasi-simd': { runtime: 'wasi', simd: true, mt: 'wasi-simd-mt', wasm: 'vitrine-wasi-simd.wasm' },
  'wasi-scalar': { runtime: 'wasi', simd: false, wasm: 'vitrine-wasi-scalar.wasm' },
  // The shared-memory ("-mt") file of each build that has threads (mt above): the same engine over
  // a SharedArrayBuffer, for the pool of web/pool.js (same bits at any thread count). Separate
  // files because a module importing shared memory cannot run without cross-origin isolation.
  // Emscripten's -pthread glue names a worker file of its own (never started: the pool is ours),
  // which a bundler follows, so it ships too.
  'simd-mt': { runtime: 'emscripten', simd: true, threads: true, wasm: 'vitrine-simd-mt.wasm', glue: 'vitrine-simd-mt.mjs',
    factory: createSimdMtModule, extra: ['vitrine-simd-mt.worker.js'],
    url: () => new URL('../build/wasm/vitrine-simd-mt.wasm', import.meta.url) },
  'relaxed-mt': { runtime: 'reactor', simd: true, threads: true, wasm: 'vitrine-relaxed-mt.wasm',
    url: () => new URL('../build/wasm/vitrine-relaxed-mt.wasm', import.meta.url) },
  'wasi-simd-mt': { runtime: 'wasi', simd: true, threads: true, wasm: 'vitrine-wasi-simd-mt.wasm' },
};

/** The builds createVitrine can load: name -> { runtime, simd, threads, files } (files: in build/wasm/
 * beside web/; threads: a shared-memory "-mt" file). */
export const WASM_BUILDS = Object.freeze(Object.fromEntries(Object.entries(BUILDS).map(([name, b]) => [name,
  Object.freeze({ runtime: b.runtime, simd: b.simd, threads: !!b.threads, files: Object.freeze([b.glue, b.wasm, ...(b.extra || [])].filter(Boolean)) })])));

// Node's built-in modules, imported only when running in Node. Not a literal specifier, so that a
// bundler neither stubs it nor splits a chunk for it in a browser build.
const nodeModule = (name) => import(/* @vite-ignore */ /* webpackIgnore: true */ `node:${name}`);

// In Node, $VITRINE_WASM_DIR or $VITRINE_BUILD/wasm replace the files beside this module (tests, benchmarks).
function envWasmDir() {
  if (!IS_NODE) return null;
  const env = process.env;
  if (env.VITRINE_WASM_DIR) return env.VITRINE_WASM_DIR;
  if (env.VITRINE_BUILD) return env.VITRINE_BUILD.replace(/\/?$/, '/') + 'wasm';
  return null;
}

// A URL, or a string: an absolute URL, else in Node a file path, in a browser relative to the page / worker.
async function toUrl(where) {
  if (where instanceof URL) return where;
  const s = String(where);
  if (/^[a-z][a-z0-9+.-]*:/i.test(s) && !(IS_NODE && /^[a-z]:[\\/]/i.test(s))) return new URL(s);
  if (IS_NODE) {
    const [{ pathToFileURL }, { resolve }] = await Promise.all([nodeModule('url'), nodeModule('path')]);
    return pathToFileURL(resolve(s));
  }
  return new URL(s, globalThis.location ? globalThis.location.href : import.meta.url);
}

// A directory (URL or string as toUrl) + file name -> URL.
async function fileUrl(dir, name) {
  const d = await toUrl(dir);
  return new URL(name, d.href.endsWith('/') ? d : d.href + '/');
}

async function readBytes(url) {
  if (IS_NODE && url.protocol === 'file:') {
    const [{ readFile }, { fileURLToPath }] = await Promise.all([nodeModule('fs/promises'), nodeModule('url')]);
    return new Uint8Array(await readFile(fileURLToPath(url)));
  }
  const res = await fetch(url);
  if (!res.ok) throw new Error(`cannot load ${url}: HTTP ${res.status}`);
  return new Uint8Array(await res.arrayBuffer());
}

// Emscripten build: an ES module factory. We compile the bytes ourselves and hand the glue the
// instance (Emscripten 3.1.6 would otherwise try fetch() on a path in Node, and a bundler could
// not see which file it fetches); the compiled module is kept for the thread pool's workers.
// shared: a "-mt" build (-pthread: its memory is a SharedArrayBuffer).
async function startEmscripten(factory, bytes, shared) {
  const module = await WebAssembly.compile(bytes);
  let failed;
  const instantiated = new Promise((_, reject) => { failed = reject; });
  const M = await Promise.race([instantiated, factory({
    print: () => {}, printErr: () => {},
    instantiateWasm(imports, receive) {
      WebAssembly.instantiate(module, imports).then((inst) => receive(inst, module), failed);
      return {};
    },
  })]);
  return {
    fn: (name) => M['_' + name],
    // the glue re-points HEAPU8 when memory grows; a shared memory's .buffer is always current
    buffer: shared ? () => M.wasmMemory.buffer : () => M.HEAPU8.buffer,
    module, memory: shared ? M.wasmMemory : null,
    run: shared ? rawExportName(M, '_vtw_worker_run') : null,
    stack: shared ? { fn: rawExportName(M, 'stackRestore') } : null,
  };
}

// A WASI-preview1 import object of our own for the clang-built reactors ('relaxed'), so they run
// in the browser as in Node without node:wasi. The engine does no I/O: wasi-libc links only
// fd_write / fd_seek / fd_close (stdio) into it; stdout/stderr lines go to the console, other
// descriptors are EBADF, and any other preview1 function the module imports answers ENOSYS.
// getMemory() is read at each call (the memory is the instance's export, or an imported one).
export class WasiExit extends Error {
  constructor(code) { super(`wasm called proc_exit(${code})`); this.code = code; }
}
export function wasiShim(getMemory, module = null) {
  const ERR = { SUCCESS: 0, BADF: 8, INVAL: 28, NOSYS: 52, SPIPE: 70 };
  const dv = () => new DataView(getMemory().buffer);
  const bytes = (p, n) => new Uint8Array(getMemory().buffer, p >>> 0, n >>> 0).slice(); // copy: shared memory can't be decoded
  const pending = { 1: '', 2: '' };
  const stdio = (fd) => fd === 0 || fd === 1 || fd === 2;
  const now = (id) => (id === 0 ? BigInt(Date.now()) * 1000000n
    : BigInt(Math.round((globalThis.performance ? performance.now() : Date.now()) * 1e6)));
  const w = {
    fd_write(fd, iovs, n, nwritten) {
      if (fd !== 1 && fd !== 2) return ERR.BADF;
      const d = dv();
      let total = 0, text = '';
      for (let i = 0; i < n; i++) {
        const p = d.getUint32(iovs + 8 * i, true), len = d.getUint32(iovs + 8 * i + 4, true);
        text += new TextDecoder().decode(bytes(p, len));
        total += len;
      }
      const lines = (pending[fd] + text).split('\n');
      pending[fd] = lines.pop();
      for (const l of lines) (fd === 1 ? console.log : console.error)(l);
      dv().setUint32(nwritten, total, true);
      return ERR.SUCCESS;
    },
    fd_seek: (fd) => (stdio(fd) ? ERR.SPIPE : ERR.BADF),
    fd_close: (fd) => (stdio(fd) ? ERR.SUCCESS : ERR.BADF),
    fd_fdstat_get(fd, p) {
      if (!stdio(fd)) return ERR.BADF;
      const d = dv();
      d.setUint8(p, 2); d.setUint16(p + 2, 0, true); // character device, no flags
      d.setBigUint64(p + 8, 0xffffffffffffffffn, true); d.setBigUint64(p + 16, 0xffffffffffffffffn, true);
      return ERR.SUCCESS;
    },
    fd_prestat_get: () => ERR.BADF, // no pre-opened directories
    environ_sizes_get(count, size) { dv().setUint32(count, 0, true); dv().setUint32(size, 0, true); return ERR.SUCCESS; },
    environ_get: () => ERR.SUCCESS,
    args_sizes_get(count, size) { dv().setUint32(count, 0, true); dv().setUint32(size, 0, true); return ERR.SUCCESS; },
    args_get: () => ERR.SUCCESS,
    clock_time_get(id, _precision, out) {
      if (id > 3) return ERR.INVAL;
      dv().setBigUint64(out, now(id), true);
      return ERR.SUCCESS;
    },
    clock_res_get(id, out) { dv().setBigUint64(out, 1000n, true); return ERR.SUCCESS; },
    random_get(p, n) {
      for (let o = 0; o < n; o += 65536) {
        const chunk = new Uint8Array(Math.min(65536, n - o));
        globalThis.crypto.getRandomValues(chunk);
        new Uint8Array(getMemory().buffer, (p >>> 0) + o, chunk.length).set(chunk);
      }
      return ERR.SUCCESS;
    },
    sched_yield: () => ERR.SUCCESS,
    proc_exit(code) { throw new WasiExit(code); },
  };
  if (module) // whatever else the module imports from preview1: ENOSYS
    for (const imp of WebAssembly.Module.imports(module))
      if (imp.module === 'wasi_snapshot_preview1' && imp.kind === 'function' && !(imp.name in w)) w[imp.name] = () => ERR.NOSYS;
  return { wasi_snapshot_preview1: w };
}

/** A clang-built WASI-style reactor (build/wasm/<file>), browser or Node: compile, instantiate with
 * wasiShim() (+ `imports`, e.g. { env: { memory } } for a build that imports its memory), run
 * _initialize. Returns the low-level { fn(name), buffer(), instance, module } the Vitrine class
 * takes. `memory`: the imported WebAssembly.Memory, if any (else the instance's export). */
export async function loadReactor(dir, file, options = {}) {
  return startReactor(await readBytes(await fileUrl(dir, file)), options);
}

// A build linked with --import-memory (a "-mt" file) gets a new shared memory of the size it asks
// for, and what the pool needs: the module, the memory, the worker loop and the stack pointer.
async function startReactor(bytes, { imports = {}, memory = null } = {}) {
  const module = await WebAssembly.compile(bytes);
  const pages = memory ? null : importedMemoryPages(bytes);
  if (pages != null) {
    memory = new WebAssembly.Memory({ initial: pages, maximum: 65536, shared: true });
    imports = { ...imports, env: { ...(imports.env || {}), memory } };
  }
  let instance = null;
  const getMemory = () => memory || instance.exports.memory;
  const shim = wasiShim(getMemory, module);
  instance = await WebAssembly.instantiate(module, { ...imports, ...shim });
  if (typeof instance.exports._initialize === 'function') instance.exports._initialize();
  const ex = instance.exports;
  return { fn: (name) => ex[name], buffer: () => getMemory().buffer, instance, module,
    memory: pages != null ? memory : null, run: 'vtw_worker_run', stack: { global: '__stack_pointer' } };
}

// Emscripten -O3 minifies the wasm export names; its JS wrapper for `name` says which one it
// calls (Module["asm"]["xy"]), or is that raw export itself once it has been called.
function rawExportName(M, name) {
  const f = M[name];
  const m = /Module\["asm"\]\["([^"]+)"\]/.exec(String(f));
  if (m) return m[1];
  for (const [k, v] of Object.entries(M.asm || {})) if (v === f) return k;
  throw new Error(`cannot find the wasm export behind ${name}`);
}

// Node's WASI builds: 'wasi-simd', 'wasi-scalar', 'wasi-simd-mt' (imports a shared memory)
async function startWasi(bytes) {
  const { WASI } = await nodeModule('wasi');
  const module = await WebAssembly.compile(bytes);
  const wasi = new WASI({ version: 'preview1', args: [], env: {}, returnOnExit: true });
  const imports = { ...wasi.getImportObject() }; // (not extensible as returned)
  const pages = importedMemoryPages(bytes);
  let memory = null;
  if (pages != null) {
    memory = new WebAssembly.Memory({ initial: pages, maximum: 65536, shared: true });
    imports.env = { memory };
  }
  const instance = await WebAssembly.instantiate(module, imports);
  const ex = instance.exports;
  // node:wasi finds the memory among the exports; an imported one is not there
  wasi.initialize(memory ? { exports: { _initialize: ex._initialize, memory } } : instance);
  const mem = memory || ex.memory;
  return {
    fn: (name) => ex[name], buffer: () => mem.buffer,
    module, memory, run: 'vtw_worker_run', stack: { global: '__stack_pointer' },
  };
}

/**
 * createVitrine({ wasm, threads, locateFile, wasmDir })
 * wasm: a name of WASM_BUILDS ('relaxed' | 'simd' | 'scalar' | 'wasi-simd' | 'wasi-scalar', or a
 * shared-memory file 'relaxed-mt' | 'simd-mt' | 'wasi-simd-mt', asked for even at 1 thread) or 'wasi'.
 * Default: 'relaxed' (SIMD128 + fused multiply-add) where relaxed SIMD validates, else 'simd'
 * where SIMD128 validates, else 'scalar'. The default trades bit-identity with the SIMD128 build
 * for ~1.5-2x speed: 'relaxed' rounds each multiply-add once, so its bits differ from 'simd''s
 * (both pass parity; see wasm/README.md for which builds agree bitwise). Ask for wasm: 'simd'
 * to get the same bits on every host. In Node 20, relaxed SIMD needs enableNodeRelaxedSimd()
 * first. 'wasi' is the WASI SIMD build where SIMD validates (else WASI scalar), Node only.
 * threads: default every core the host reports. More than 1 loads the build's shared-memory
 * ("-mt") file and starts a pool of workers (same bits at any thread count); where that cannot be
 * (no cross-origin isolation in a browser, a scalar build) the engine runs on 1 thread and
 * `threadsNote` says why. vt.build names the build without "-mt"; vt.threaded says whether the
 * shared-memory file is loaded.
 * locateFile(file, url): where to fetch the build's .wasm instead (e.g. 'vitrine-simd.wasm' and the
 * URL beside this module -> a URL or string), for apps that serve it from elsewhere.
 * wasmDir: a directory holding both the Emscripten glue (.mjs) and the .wasm of a build made
 * elsewhere (in Node also $VITRINE_WASM_DIR / $VITRINE_BUILD); its glue is imported at run time,
 * which bundlers do not follow.
 */
export async function createVitrine(options = {}) {
  const simd = simdSupported();
  let name = options.wasm || (relaxedSimdSupported() ? 'relaxed' : simd ? 'simd' : 'scalar');
  if (name === 'wasi') name = simd ? 'wasi-simd' : 'wasi-scalar';
  if (!Object.hasOwn(BUILDS, name)) throw new Error(`unknown wasm build '${name}' (${[...Object.keys(BUILDS), 'wasi'].join(', ')})`);
  let threads = options.threads == null ? await hostCores() : options.threads;
  if (!Number.isInteger(threads) || threads < 1 || threads > 64)
    throw new VitrineError(`threads must be an integer in [1, 64], got ${options.threads}`, -1);
  const forceMt = !!BUILDS[name].threads;
  let build = forceMt ? name.slice(0, -3) : name;
  let note = null;
  const threadsFor = (b) => { // the thread count build b can have here (note: why fewer)
    if (threads <= 1 && !forceMt) return threads;
    const why = threadsUnavailableReason() || (BUILDS[b].mt ? null : `the ${b} build has no threads`);
    if (!why) return threads;
    if (forceMt) throw new Error(`wasm build ${name}: ${why}`);
    note = `1 thread: ${why}`;
    return 1;
  };
  const fileOf = (b) => (threads > 1 || forceMt ? BUILDS[b].mt : b);
  threads = threadsFor(build);
  let low;
  try {
    low = await loadBuild(fileOf(build), options);
  } catch (e) { // the default's relaxed file is not there (built without clang-19): SIMD128
    if (options.wasm || build !== 'relaxed') throw e;
    build = simd ? 'simd' : 'scalar';
    threads = threadsFor(build);
    low = await loadBuild(fileOf(build), options);
  }
  const vt = new Vitrine(low, build);
  vt.threaded = !!low.memory;
  vt.threadsNote = note;
  if (threads > 1) {
    const c = vt._c;
    vt._pool = await startPool({
      module: low.module, memory: low.memory, malloc: (n) => c.malloc(n),
      setThreads: (n, w) => c.set_threads(n, w), ready: () => c.threads_ready(),
      shutdown: () => c.threads_shutdown(), run: low.run, stack: low.stack,
    }, threads);
  }
  return vt;
}

async function loadBuild(name, options) {
  const b = BUILDS[name];
  if (b.runtime === 'wasi' && !IS_NODE) throw new Error(`the WASI build runs in Node only; use wasm: 'simd' or 'scalar'`);
  const dir = options.wasmDir || envWasmDir();
  let url = dir ? await fileUrl(dir, b.wasm) : b.url ? b.url() : new URL(WASM_BASE + b.wasm, import.meta.url);
  let factory = b.factory;
  if (dir && b.runtime === 'emscripten') {
    const glue = await fileUrl(dir, b.glue);
    factory = (await import(/* @vite-ignore */ /* webpackIgnore: true */ glue.href)).default;
  }
  if (options.locateFile) url = await toUrl(await options.locateFile(b.wasm, url));
  const bytes = await readBytes(url);
  if (b.runtime === 'emscripten') return startEmscripten(factory, bytes, !!b.threads);
  return b.runtime === 'reactor' ? startReactor(bytes) : startWasi(bytes);
}

// ---- the engine ------------------------------------------------------------------------------

export class Vitrine {
  constructor(low, build) {
    this._low = low;
    this.build = build;
    const names = ['vtw_last_error', 'vtw_kernels_simd', 'vtw_preset_name',
      'vtw_model_create', 'vtw_model_dims', 'vtw_model_free', 'vtw_param_count', 'vtw_param_name',
      'vtw_param_ndim', 'vtw_param_dim', 'vtw_param_numel', 'vtw_param_data', 'vtw_param_grad',
      'vtw_param_requires_grad', 'vtw_set_requires_grad', 'vtw_zero_grad', 'vtw_load_safetensors', 'vtw_init_from',
      'vtw_save_safetensors', 'vtw_forward', 'vtw_output_count', 'vtw_output', 'vtw_loss_value',
      'vtw_backward', 'vtw_set_grad_checkpointing', 'vtw_get_grad_checkpointing', 'vtw_plan', 'vtw_plan_train_step',
      'vtw_arena_stats', 'vtw_activation_timeline', 'vtw_release_activations', 'vtw_parity_run',
      'vtw_init_weights', 'vtw_train_config_default', 'vtw_trainer_init', 'vtw_train_step', 'vtw_train_step_labels', 'vtw_train_step_count',
      'vtw_train_lr', 'vtw_train_state_save', 'vtw_train_state_load', 'vtw_loss_visualize',
      'vtw_set_threads', 'vtw_threads_max', 'vtw_threads_ready', 'vtw_threads_shutdown', 'vtw_threads_set_min_work',
      'vtw_threads_chunks_run',
      'malloc', 'free'];
    this._c = {};
    for (const n of names) {
      const f = low.fn(n);
      if (typeof f !== 'function') throw new Error(`wasm build ${build} does not export ${n}`);
      this._c[n.replace(/^vtw_/, '')] = f;
    }
    this.simdKernels = this._c.kernels_simd() === 1;
    this._pool = null;
    this.threaded = false; // the shared-memory (-mt) file is loaded
    this.threadsNote = null;
  }

  /** Threads the engine's kernels use (1 + pool workers). */
  get threads() { return this._c.threads_max(); }
  /** Bytes of linear memory the pool's worker stacks take (besides the plan's per-thread scratch). */
  get threadStackBytes() { return this._pool ? this._pool.stackBytes : 0; }
  /** Stops the pool's workers; the engine goes on with 1 thread. */
  close() {
    if (this._pool) { this._pool.close(); this._pool = null; }
  }
  /** Tests: split even the smallest shapes over the threads (true), or the default rule (false). */
  _splitEverything(on) { this._c.threads_set_min_work(on ? 0 : -1); }
  /** Tests: chunks of pooled loops each thread has run so far ([caller, worker 1, ...]). */
  _chunksRun() { return Array.from({ length: this.threads }, (_, t) => this._c.threads_chunks_run(t)); }

  // Fresh views on every use: never keep one across a call into wasm.
  u8() { return new Uint8Array(this._low.buffer()); }
  f32(ptr, n) { return new Float32Array(this._low.buffer(), ptr >>> 0, n); }
  f64(ptr, n) { return new Float64Array(this._low.buffer(), ptr >>> 0, n); }
  u32(ptr, n) { return new Uint32Array(this._low.buffer(), ptr >>> 0, n); }
  i32(ptr, n) { return new Int32Array(this._low.buffer(), ptr >>> 0, n); }

  alloc(bytes) {
    const p = this._c.malloc(Math.max(1, bytes)) >>> 0;
    if (!p) throw new VitrineError(`out of memory: malloc(${bytes}) failed (wasm memory ${this.u8().length} bytes)`, -2);
    return p;
  }
  free(p) { if (p) this._c.free(p); }
  copyIn(bytes) { // a typed array -> a new wasm allocation
    const src = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const p = this.alloc(src.length);
    this.u8().set(src, p);
    return p;
  }
  cstring(ptr) {
    ptr >>>= 0;
    if (!ptr) return null;
    const u8 = this.u8();
    let end = ptr;
    while (u8[end]) end++;
    return new TextDecoder().decode(u8.slice(ptr, end)); // a copy: decode() refuses shared memory
  }
  str(s) { return this.copyIn(new TextEncoder().encode(String(s) + '\0')); }
  // Runs fn(...ptrs) with C strings made from strs, freed afterwards.
  withStrings(strs, fn) {
    const ptrs = [];
    try {
      for (const s of strs) ptrs.push(s == null ? 0 : this.str(s));
      return fn(...ptrs);
    } finally { ptrs.forEach((p) => this.free(p)); }
  }
  error(status) {
    const msg = this.cstring(this._c.last_error()) || 'unknown error';
    return new VitrineError(msg, status);
  }
  check(rc) { if (rc < 0) throw this.error(rc); return rc; }

  presets() {
    const out = [];
    for (let i = 0; ; i++) { const n = this.cstring(this._c.preset_name(i)); if (!n) break; out.push(n); }
    return out;
  }

  /** createModel({ preset, config, kind }): kind timm | lightly | causal | mae | aim (default
   * timm); either a timm preset name or a config (object or JSON text; MAE/AIM: {encoder, ...}). */
  createModel({ preset, config, kind = 'timm' } = {}) {
    if (!(kind in KINDS)) throw new VitrineError(`unknown model kind '${kind}' (${Object.keys(KINDS).join(', ')})`, -1);
    const json = config == null ? null : typeof config === 'string' ? config : JSON.stringify(config);
    const bytes = json == null ? 0 : new TextEncoder().encode(json).length;
    const h = this.withStrings([preset || '', json], (p, j) => this._c.model_create(KINDS[kind], p, j, bytes));
    this.check(h);
    return new Model(this, h, kind);
  }

  /** Runs a parity file (parity-format.md) through the engine's parity harness. Returns its
   * result; `json` holds the result as the harness wrote it (what the CLIs print), with `file` in
   * it when given; with dump, `dump` holds the safetensors bytes of what the engine computed.
   * readError: the file could not be read (bytes are ignored): a failed result saying so. */
  parity(bytes, { policy = null, dump = false, file = null, readError = null } = {}) {
    const u8 = bytes == null ? new Uint8Array(0) : bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const p = this.copyIn(u8);
    const out = this.alloc(16);
    try {
      const rc = this.withStrings([policy || '', file || '', readError || ''],
        (pol, f, re) => this._c.parity_run(p, u8.byteLength, pol, dump ? 1 : 0, f, re, out));
      const [jp, jl, dp, dl] = this.u32(out, 4);
      const json = jp ? new TextDecoder().decode(this.u8().slice(jp, jp + jl)) : null;
      const result = json ? JSON.parse(json) : { pass: false, status: rc, error: this.cstring(this._c.last_error()), tensors: [] };
      result.json = json;
      if (dp) result.dump = this.u8().slice(dp, dp + dl);
      this.free(jp);
      this.free(dp);
      return result;
    } finally { this.free(p); this.free(out); }
  }

  /** The wasm linear memory, in bytes. */
  memory() { return { linear: this._low.buffer().byteLength }; }
}

// ---- images ----------------------------------------------------------------------------------

function isImageLike(x) {
  return x && typeof x === 'object' && typeof x.width === 'number' && typeof x.height === 'number' &&
    (x.data instanceof Uint8ClampedArray || x.data instanceof Uint8Array);
}
function isBitmap(x) { return typeof ImageBitmap !== 'undefined' && x instanceof ImageBitmap; }

// ImageBitmap -> ImageData of size S x S (resized) through an OffscreenCanvas (browser only).
function bitmapToImageData(bm, S) {
  if (typeof OffscreenCanvas === 'undefined') throw new Error('ImageBitmap input needs OffscreenCanvas');
  const ctx = new OffscreenCanvas(S, S).getContext('2d');
  ctx.drawImage(bm, 0, 0, S, S);
  return ctx.getImageData(0, 0, S, S);
}

// Images -> Float32Array NCHW. Float32Array passes through (its length is checked); ImageData /
// ImageBitmap (one or an array) are normalised with mean / std (ImageNet by default; a 1-channel
// model takes the grey average (R+G+B)/3 with the channel average of mean / std: channelStats).
function toNCHW(images, dims, opts = {}) {
  const { img, chans } = dims;
  const { mean, std } = channelStats(chans, opts);
  const per = chans * img * img;
  if (images instanceof Float32Array) {
    if (images.length === 0 || images.length % per)
      throw new VitrineError(`images: length ${images.length} is not a positive multiple of C*H*W = ${chans}*${img}*${img} = ${per}`, -1);
    return { data: images, batch: images.length / per };
  }
  const list = Array.isArray(images) ? images : [images];
  if (!list.length) throw new VitrineError('images: empty list', -1);
  const out = new Float32Array(list.length * per);
  list.forEach((im, b) => {
    if (isBitmap(im)) im = bitmapToImageData(im, img);
    if (!isImageLike(im)) throw new VitrineError('images: expected Float32Array (NCHW), ImageData or ImageBitmap', -1);
    if (im.width !== img || im.height !== img)
      throw new VitrineError(`images: ImageData is ${im.width}x${im.height}, the model takes ${img}x${img}`, -1);
    const px = img * img;
    for (let i = 0; i < px; i++) {
      const r = im.data[4 * i] / 255, g = im.data[4 * i + 1] / 255, bl = im.data[4 * i + 2] / 255;
      if (chans === 1) out[b * per + i] = ((r + g + bl) / 3 - mean[0]) / std[0];
      else {
        const rgb = [r, g, bl];
        for (let c = 0; c < chans; c++) out[b * per + c * px + i] = (rgb[c % 3] - mean[c]) / std[c];
      }
    }
  });
  return { data: out, batch: list.length };
}

// Index lists [B, K] (flat or nested; numbers or bigints) -> BigInt64Array, K.
function toIndices(name, x, batch) {
  if (x == null) return null;
  const flat = x instanceof BigInt64Array ? x : BigInt64Array.from((Array.isArray(x) ? x.flat() : Array.from(x)).map((v) => BigInt(v)));
  if (flat.length % batch) throw new VitrineError(`${name}: ${flat.length} indices are not [batch=${batch}, K]`, -1);
  return { data: flat, k: flat.length / batch };
}
function toMask(x) {
  if (x == null) return null;
  return Uint8Array.from((Array.isArray(x) ? x.flat() : Array.from(x)).map((v) => (v ? 1 : 0)));
}

// ---- models ----------------------------------------------------------------------------------

// A view of a model's memory that cannot outlive the model: every access checks that the model is
// alive (after dispose() it throws a VitrineError: writing through an old view would wreck the next
// model in the same memory) and rebuilds the view when the wasm memory has grown (which detaches
// plain views). Reads and writes go through a Proxy: for bulk work take .slice() or .set(array).
function liveView(model, make) {
  let view = make();
  const current = () => {
    if (!model._h) throw new VitrineError('the model was disposed: its parameter views are gone', -7);
    if (view.length === 0 && view.byteOffset === 0) view = make(); // detached by memory growth
    return view;
  };
  return new Proxy(view, {
    get(_, k) {
      const v = current(), x = Reflect.get(v, k, v);
      return typeof x === 'function' ? x.bind(v) : x;
    },
    set(_, k, x) { return Reflect.set(current(), k, x); },
    has(_, k) { return Reflect.has(current(), k); },
    ownKeys() { return Reflect.ownKeys(current()); },
    getOwnPropertyDescriptor(_, k) { return Reflect.getOwnPropertyDescriptor(current(), k); },
    defineProperty(_, k, d) { return Reflect.defineProperty(current(), k, d); },
  });
}

export class Model {
  constructor(vt, handle, kind) {
    this._vt = vt;
    this._h = handle;
    this.kind = kind;
    this._inputs = [];   // wasm allocations of the last forward's inputs (kept for backward)
    this._last = null;   // { fn, batch, nImages, sizes } of the last forward
    const d = vt.alloc(32);
    try {
      vt.check(vt._c.model_dims(handle, d));
      const [, img, patch, chans, dim, depth, heads, prefix] = vt.i32(d, 8);
      this.dims = { img, patch, chans, dim, depth, heads, prefix };
    } finally { vt.free(d); }
  }
  get _c() { if (!this._h) throw new VitrineError('model is disposed', -7); return this._vt._c; }

  dispose() {
    if (!this._h) return;
    this._freeInputs();
    this._vt._c.model_free(this._h);
    this._h = 0;
  }
  _freeInputs() { this._inputs.forEach((p) => this._vt.free(p)); this._inputs = []; }

  /** requires_grad for parameters named `name` or under `name.` ('' = all). Returns the count. */
  setRequiresGrad(name, on = true) {
    const c = this._c;
    return this._vt.check(this._vt.withStrings([name], (n) => c.set_requires_grad(this._h, n, on ? 1 : 0)));
  }
  zeroGrad() { this._c.zero_grad(this._h); }

  /** 'none' | 'block' | 'every:K' | 'sqrt' | 'budget:BYTES' | 'selective' */
  setGradCheckpointing(policy) {
    const c = this._c;
    if (policy === true) policy = 'block';
    if (policy === false || policy == null) policy = 'none';
    this._vt.check(this._vt.withStrings([policy], (p) => c.set_grad_checkpointing(this._h, p)));
  }
  get gradCheckpointing() { return this._vt.cstring(this._c.get_grad_checkpointing(this._h)); }

  /** The parameter table. data / grad are views of the model's memory (Float32Array-like): they
   * follow memory growth and throw a VitrineError once the model is disposed, as do the entries'
   * getters. grad is null for a frozen parameter. */
  params() {
    const c = this._c, vt = this._vt, h = this._h, self = this;
    const n = vt.check(c.param_count(h));
    const out = [];
    for (let i = 0; i < n; i++) {
      const ndim = vt.check(c.param_ndim(h, i));
      const shape = [];
      for (let d = 0; d < ndim; d++) shape.push(vt.check(c.param_dim(h, i, d)));
      const numel = c.param_numel(h, i);
      out.push({
        name: vt.cstring(c.param_name(h, i)), shape, numel,
        get requiresGrad() { return self._c.param_requires_grad(h, i) === 1; },
        get data() { self._c; return liveView(self, () => vt.f32(c.param_data(h, i), numel)); },
        get grad() {
          if (!(self._c.param_grad(h, i) >>> 0)) return null;
          return liveView(self, () => vt.f32(c.param_grad(h, i) >>> 0, numel)); // the layout moves with requires_grad
        },
      });
    }
    return out;
  }

  loadSafetensors(bytes, { modelPrefix = '', filePrefix = '' } = {}) {
    const vt = this._vt, c = this._c;
    const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const p = vt.copyIn(u8);
    try {
      vt.check(vt.withStrings([modelPrefix, filePrefix], (mp, fp) => c.load_safetensors(this._h, p, u8.length, mp, fp)));
    } finally { vt.free(p); }
  }
  /** Starts this model from the weights of a timm VisionTransformer state_dict (head or not),
   * lightly's MaskedVisionTransformerTIMM (vit.*) or MAE / AIM models, or vitrine's own files
   * (encoder, full model, training checkpoint): the key layout is recognised by itself. Returns
   * { source, filePrefix, loaded, skipped, missing, posEmbed, notes: ['tensor [shape]: why', ...] };
   * posEmbed: 'none' | 'sincos_frozen' | 'trainable' | 'learned_now_trainable'. strict: any
   * skipped tensor (or an encoder parameter the file lacks) throws and changes nothing. Call it
   * before the trainer is set up. */
  initFrom(bytes, { strict = false } = {}) {
    const vt = this._vt, c = this._c;
    const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const p = vt.copyIn(u8), out = vt.alloc(8);
    try {
      vt.check(c.init_from(this._h, p, u8.length, strict ? 1 : 0, out));
      const [jp, jl] = vt.u32(out, 2);
      const r = JSON.parse(new TextDecoder().decode(vt.u8().slice(jp, jp + jl)));
      vt.free(jp);
      return { source: r.source, filePrefix: r.file_prefix, loaded: r.loaded, skipped: r.skipped, missing: r.missing,
        posEmbed: r.pos_embed, notes: r.notes };
    } finally { vt.free(p); vt.free(out); }
  }
  saveSafetensors({ modelPrefix = '', filePrefix = '' } = {}) {
    const vt = this._vt, c = this._c;
    const out = vt.alloc(8);
    try {
      vt.check(vt.withStrings([modelPrefix, filePrefix], (mp, fp) => c.save_safetensors(this._h, mp, fp, out)));
      const [p, n] = vt.u32(out, 2);
      const bytes = vt.u8().slice(p, p + n);
      vt.free(p);
      return bytes;
    } finally { vt.free(out); }
  }

  // ---- calls ----
  _run(fn, images, opts = {}) {
    const vt = this._vt, c = this._c;
    const { data, batch } = toNCHW(images, this.dims, opts);
    const idxMask = toIndices('idxMask', opts.idxMask, batch);
    const idxKeep = toIndices('idxKeep', opts.idxKeep, batch);
    const mask = toMask(opts.mask);
    if (mask) { // [B, N]: the whole sequence, prefix tokens included; the engine reads B * N bytes
      const N = (this.dims.img / this.dims.patch) ** 2 + this.dims.prefix;
      if (mask.length !== batch * N) throw new VitrineError(`mask: ${mask.length} values, [batch=${batch}, ${N} tokens] needs ${batch * N}`, -1);
    }
    this._freeInputs();
    this._last = null;
    const put = (arr) => { if (!arr) return 0; const p = vt.copyIn(arr); this._inputs.push(p); return p; };
    const pImg = put(data), pMask = put(idxMask && idxMask.data), pKeep = put(idxKeep && idxKeep.data), pM = put(mask);
    const needGrad = opts.needGrad ? 1 : 0;
    vt.check(c.forward(this._h, fn, pImg, batch, pMask, idxMask ? idxMask.k : 0, pKeep, idxKeep ? idxKeep.k : 0,
      pM, opts.isCausal === false ? 0 : 1, needGrad));
    this._last = { fn, batch, nImages: data.length, sizes: { batch, nMask: idxMask ? idxMask.k : 0, nKeep: idxKeep ? idxKeep.k : 0, mask: !!mask, needGrad: !!needGrad } };
  }
  _outputShape(i) {
    const vt = this._vt, c = this._c;
    const s = vt.alloc(24);
    try {
      if (!(c.output(this._h, i, s, s + 16) >>> 0)) throw vt.error(-1);
      return Array.from(vt.i32(s, vt.i32(s + 16, 1)[0]));
    } finally { vt.free(s); }
  }
  /** Output i of the last call, copied out: { data: Float32Array, shape }. */
  output(i = 0) {
    const vt = this._vt, c = this._c;
    const s = vt.alloc(24);
    try {
      const p = c.output(this._h, i, s, s + 16) >>> 0;
      if (!p) throw vt.error(-1);
      const ndim = vt.i32(s + 16, 1)[0];
      const shape = Array.from(vt.i32(s, ndim));
      const n = shape.reduce((a, b) => a * b, 1);
      return { data: vt.f32(p, n).slice(), shape };
    } finally { vt.free(s); }
  }
  outputCount() { return this._c.output_count(this._h); }

  /** lightly encode / timm forward_features: [B, T, D]. opts: idxMask, idxKeep, mask, isCausal,
   * needGrad (keep what backward needs), mean, std (for ImageData). */
  encode(images, opts) { this._run(FN.encode, images, opts); return this.output(0); }
  /** lightly forward: the pooled [B, D] (no fc_norm, no head). */
  forward(images, opts) { this._run(FN.forward, images, opts); return this.output(0); }
  /** timm VisionTransformer.forward: forward_features, then forward_head (pool -> fc_norm ->
   * head): [B, num_classes] ([B, D] without a head, [B, T, .] with global_pool ''). */
  timmForward(images, opts) { this._run(FN.timm_forward, images, opts); return this.output(0); }
  /** { out, intermediates: [B, T, D] per block }; opts.norm applies the final norm to each. */
  forwardIntermediates(images, opts = {}) {
    this._run(opts.norm ? FN.intermediates_norm : FN.intermediates, images, opts);
    const n = this.outputCount();
    const intermediates = [];
    for (let i = 1; i < n; i++) intermediates.push(this.output(i));
    return { out: this.output(0), intermediates };
  }
  /** MAE / AIM training loss (a number). */
  loss(images, opts) { this._run(FN.loss, images, opts); return this._c.loss_value(this._h); }

  /** Backward of the last call made with needGrad. douts: upstream gradient per output
   * (Float32Array or null; omit for a loss). Parameter gradients accumulate unless
   * paramGrads: false. With inputGrad: true, returns { dimages: Float32Array }. */
  backward({ douts = [], inputGrad = false, paramGrads = true } = {}) {
    const vt = this._vt, c = this._c;
    if (!this._last) throw new VitrineError('backward needs a forward (with needGrad) first', -7);
    if (!Array.isArray(douts)) throw new VitrineError('backward: douts must be an array (one entry per output)', -1);
    const nOut = this.outputCount();
    if (douts.length > nOut) throw new VitrineError(`backward: ${douts.length} upstream gradients, the call has ${nOut} outputs`, -1);
    douts.forEach((d, i) => { // each as long as its output: the engine reads that many floats
      if (d == null) return;
      const want = this._outputShape(i).reduce((a, b) => a * b, 1);
      if (!(d instanceof Float32Array) || d.length !== want)
        throw new VitrineError(`backward: douts[${i}] has ${d.length} values${d instanceof Float32Array ? '' : ` (${d.constructor && d.constructor.name})`}, output ${i} has ${want} (a Float32Array)`, -1);
    });
    const ptrs = [];
    try {
      const dp = douts.map((d) => { if (!d) return 0; const p = vt.copyIn(d); ptrs.push(p); return p; });
      const arr = vt.alloc(4 * Math.max(1, dp.length)); ptrs.push(arr);
      vt.u32(arr, dp.length).set(dp);
      let dimg = 0;
      if (inputGrad) { dimg = vt.alloc(4 * this._last.nImages); ptrs.push(dimg); vt.f32(dimg, this._last.nImages).fill(0); }
      vt.check(c.backward(this._h, dp.length ? arr : 0, dp.length, dimg, paramGrads ? 1 : 0));
      return inputGrad ? { dimages: vt.f32(dimg, this._last.nImages).slice() } : {};
    } finally { ptrs.forEach((p) => vt.free(p)); }
  }

  /** Bytes a call needs, by kind, before anything is allocated. fn: encode | forward |
   * intermediates | intermediates_norm | loss. */
  plan(fn = 'encode', { batch = 1, tokensKept = 0, tokensMasked = 0, mask = false, needGrad = true } = {}) {
    const vt = this._vt, c = this._c;
    if (!(fn in FN)) throw new VitrineError(`unknown call '${fn}' (${Object.keys(FN).join(', ')})`, -1);
    const out = vt.alloc(40);
    try {
      vt.check(c.plan(this._h, FN[fn], batch, tokensMasked, tokensKept, mask ? 1 : 0, needGrad ? 1 : 0, out));
      const [params, grads, optimizer, activations, total] = vt.f64(out, 5);
      return { params, grads, optimizer, activations, total };
    } finally { vt.free(out); }
  }

  /** The plan of one trainStep(images of `batch`) before anything is allocated, from the engine
   * (vt_plan_train_step): bytes by kind, the tokens an MAE step keeps / masks per image, and
   * against `budget` (bytes for the whole plan; 0 = no search): whether it fits, the policy with
   * the least re-computation that fits (`fit`), the policy with the smallest plan (`least`) and
   * the largest batch that fits (`maxBatch`). maskRatio null: the trainer's (or the default);
   * policy null: the model's. The model is not changed. */
  planTrainStep({ batch, maskRatio = null, policy = null, budget = 0 } = {}) {
    const vt = this._vt, c = this._c;
    const out = vt.alloc(22 * 8), names = vt.alloc(2 * POLICY_TEXT_MAX);
    try {
      const pol = policy == null ? this.gradCheckpointing : policy;
      vt.check(vt.withStrings([pol], (p) => c.plan_train_step(this._h, batch, maskRatio == null ? -1 : maskRatio, p, budget, out, names)));
      const o = Array.from(vt.f64(out, 22));
      const bytes = (i) => ({ params: o[i], grads: o[i + 1], optimizer: o[i + 2], activations: o[i + 3], total: o[i + 4] });
      const fitPolicy = vt.cstring(names), leastPolicy = vt.cstring(names + POLICY_TEXT_MAX);
      return {
        ...bytes(0), policyMet: o[5] === 1, tokensKept: o[6], tokensMasked: o[7], recomputeFlops: o[8], fits: o[9] === 1,
        fit: fitPolicy ? { policy: fitPolicy, ...bytes(10), recomputeFlops: o[15] } : null,
        least: leastPolicy ? { policy: leastPolicy, ...bytes(16) } : null,
        maxBatch: o[21],
      };
    } finally { vt.free(out); vt.free(names); }
  }

  /** Memory by kind: planned (for the last call) and used (measured), plus the wasm linear size. */
  memory() {
    const vt = this._vt, c = this._c;
    const out = vt.alloc(24);
    let planned = null;
    try {
      vt.check(c.arena_stats(this._h, out));
      const [arenaPlanned, peak, capacity] = vt.f64(out, 3);
      let params = 0, grads = 0;
      this.params().forEach((p, i) => { params += 4 * p.numel; if (c.param_grad(this._h, i) >>> 0) grads += 4 * p.numel; });
      if (this._last && this._last.train) {
        const { params, grads, optimizer, activations, total } = this.planTrainStep({ batch: this._last.batch });
        planned = { params, grads, optimizer, activations, total };
      } else if (this._last) {
        const s = this._last.sizes;
        const fnName = Object.keys(FN).find((k) => FN[k] === this._last.fn);
        planned = this.plan(fnName, { batch: s.batch, tokensKept: s.nKeep, tokensMasked: s.nMask, mask: s.mask, needGrad: s.needGrad });
      }
      return {
        linear: vt._low.buffer().byteLength,
        planned,
        used: { params, grads, activations: peak },
        arena: { planned: arenaPlanned, peak, capacity },
      };
    } finally { vt.free(out); }
  }
  /** The last call's activation memory as the engine's arena saw it, one entry per arena event:
   * bytes = arena in use (max = measured peak), live = minus what the backward has finished with
   * (rises through the forward, falls through the backward); backwardStart = where the backward
   * began (-1 if none). */
  activationTimeline() {
    const vt = this._vt, c = this._c;
    const out = vt.alloc(2 * 8 * TIMELINE_MAX), b = vt.alloc(4);
    try {
      const n = c.activation_timeline(this._h, out, TIMELINE_MAX, b);
      vt.check(n);
      const all = vt.f64(out, 2 * TIMELINE_MAX);
      return {
        bytes: Array.from(all.subarray(0, n)),
        live: Array.from(all.subarray(TIMELINE_MAX, TIMELINE_MAX + n)),
        backwardStart: new Int32Array(vt._low.buffer(), b, 1)[0],
      };
    } finally { vt.free(out); vt.free(b); }
  }
  releaseActivations() { this._c.release_activations(this._h); this._last = null; }

  // ---- training (MAE / AIM models; src/trainer.c) ----

  /** timm / lightly initialisation for the model's kind, seeded (the same seed gives the same
   * bits everywhere). MAE: xavier Linears, frozen sin-cos pos_embed; see vt_init_weights. */
  initWeights(seed = 0) {
    const [lo, hi] = seedHalves(seed);
    this._vt.check(this._c.init_weights(this._h, lo, hi));
    this._last = null;
  }

  /** The engine's default training settings for this model's kind (lightly's benchmarks). */
  trainDefaults() {
    const vt = this._vt, c = this._c;
    const out = vt.alloc(80);
    try {
      vt.check(c.train_config_default(KINDS[this.kind], out));
      const [lr, beta1, beta2, eps, weightDecay, warmupSteps, totalSteps, clipNorm, maskRatio, labelSmoothing] = vt.f64(out, 10);
      return { lr, beta1, beta2, eps, weightDecay, warmupSteps, totalSteps, clipNorm, maskRatio, labelSmoothing, seed: 0 };
    } finally { vt.free(out); }
  }

  /** Makes an MAE / AIM model, or a timm classifier (kind timm, num_classes > 0: trainStepLabels),
   * trainable: AdamW state, the seeded mask generator, step 0. Options not given take
   * trainDefaults(); totalSteps 0 = constant lr, else lightly's cosine warmup; labelSmoothing:
   * timm's (classifier). */
  trainerInit(options = {}) {
    const vt = this._vt, c = this._c;
    const known = ['lr', 'beta1', 'beta2', 'eps', 'weightDecay', 'warmupSteps', 'totalSteps', 'clipNorm', 'maskRatio', 'labelSmoothing', 'seed'];
    for (const k of Object.keys(options)) {
      if (!known.includes(k)) throw new VitrineError(`trainerInit: unknown option '${k}' (${known.join(', ')})`, -1);
    }
    const t = { ...this.trainDefaults() };
    for (const k of known) if (options[k] != null) t[k] = options[k];
    const cfg = vt.alloc(80);
    try {
      vt.f64(cfg, 10).set([t.lr, t.beta1, t.beta2, t.eps, t.weightDecay, t.warmupSteps, t.totalSteps, t.clipNorm, t.maskRatio, t.labelSmoothing].map(Number));
      const [lo, hi] = seedHalves(t.seed);
      vt.check(c.trainer_init(this._h, cfg, lo, hi));
    } finally { vt.free(cfg); }
    this._last = null;
    return t;
  }

  /** One training step (seeded masks, loss, backward, clipping, AdamW at the scheduled lr) on
   * images: Float32Array NCHW (normalised) or ImageData / ImageBitmap (one or a list, normalised
   * as for forward). `batch`, when given, must match. Returns the loss. A non-finite loss or
   * gradient throws a VitrineError (code 'VT_ERR_NUMERIC') and changes nothing: the last good state
   * is kept. The step's images stay in wasm memory until the next call, for visualize(). */
  trainStep(images, batch, opts = {}) {
    const vt = this._vt, c = this._c;
    const x = toNCHW(images, this.dims, opts);
    if (batch != null && batch !== x.batch)
      throw new VitrineError(`trainStep: batch ${batch} given, the images hold ${x.batch}`, -1);
    this._freeInputs();
    this._last = null;
    const pImg = vt.copyIn(x.data);
    this._inputs.push(pImg);
    const pLoss = vt.alloc(4);
    let rc;
    try {
      rc = c.train_step(this._h, pImg, x.batch, pLoss);
      if (rc < 0) throw vt.error(rc);
      const loss = vt.f32(pLoss, 1)[0];
      this._last = { fn: FN.loss, batch: x.batch, nImages: x.data.length, train: true };
      return loss;
    } finally { vt.free(pLoss); }
  }

  /** A classifier's training step: cross-entropy (timm's label smoothing from trainerInit) on
   * labels (Int32Array or array of class indices, one per image), backward, clipping, AdamW.
   * Images as for trainStep. Returns the loss; a non-finite one throws and changes nothing. */
  trainStepLabels(images, labels, opts = {}) {
    const vt = this._vt, c = this._c;
    const x = toNCHW(images, this.dims, opts);
    const y = Int32Array.from(labels);
    if (y.length !== x.batch)
      throw new VitrineError(`trainStepLabels: ${y.length} labels for ${x.batch} images`, -1);
    this._freeInputs();
    this._last = null;
    const pImg = vt.copyIn(x.data), pLab = vt.alloc(4 * y.length);
    this._inputs.push(pImg);
    new Int32Array(vt._low.buffer(), pLab >>> 0, y.length).set(y);
    const pLoss = vt.alloc(4);
    try {
      const rc = c.train_step_labels(this._h, pImg, pLab, x.batch, pLoss);
      if (rc < 0) throw vt.error(rc);
      this._last = { fn: FN.loss, batch: x.batch, nImages: x.data.length, train: true, classify: true };
      return vt.f32(pLoss, 1)[0];
    } finally { vt.free(pLoss); vt.free(pLab); }
  }

  /** Steps done (the AdamW step count; it comes back with loadTrainState). */
  get stepCount() { return this._c.train_step_count(this._h); }
  /** The learning rate the schedule gives at `step` (default: the next step). */
  lr(step = this.stepCount) { return this._c.train_lr(this._h, step); }

  /** Everything a resumed run needs (parameters, AdamW m / v, step, mask generator, configs) as
   * safetensors bytes; loadTrainState continues bit for bit. */
  saveTrainState() {
    const vt = this._vt, c = this._c;
    const out = vt.alloc(8);
    try {
      vt.check(c.train_state_save(this._h, out));
      const [p, n] = vt.u32(out, 2);
      const bytes = vt.u8().slice(p, p + n);
      vt.free(p);
      return bytes;
    } finally { vt.free(out); }
  }
  /** All or nothing; the model's config must be the saved one (initWeights first, so the same
   * parameters are frozen). */
  loadTrainState(bytes) {
    const vt = this._vt, c = this._c;
    const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const p = vt.copyIn(u8);
    try { vt.check(c.train_state_load(this._h, p, u8.length)); } finally { vt.free(p); }
    this._last = null;
  }

  /** After a loss() forward or a trainStep(): { masked, recon, shape [B, C, H, W] }, normalised
   * NCHW like the input. masked: MAE's masked patches set to 0 (the mean colour), the input
   * elsewhere (AIM: the input); recon: the predicted patches (de-normalised per patch under
   * norm_pix_loss) over the masked ones, the input elsewhere (AIM: every patch predicted). After
   * trainStep the prediction is the one of the step's forward (parameters before its update). */
  visualize() {
    const vt = this._vt, c = this._c;
    if (!this._last || this._last.fn !== FN.loss)
      throw new VitrineError('visualize needs a loss forward (loss() or trainStep()) first', -7);
    const n = this._last.nImages, { chans, img } = this.dims;
    const pm = vt.alloc(4 * n), pr = vt.alloc(4 * n);
    try {
      vt.check(c.loss_visualize(this._h, pm, pr));
      return { masked: vt.f32(pm, n).slice(), recon: vt.f32(pr, n).slice(), shape: [this._last.batch, chans, img, img] };
    } finally { vt.free(pm); vt.free(pr); }
  }
}

// A seed (number >= 0 below 2^53, or bigint below 2^64) -> [lo, hi] 32-bit halves.
function seedHalves(seed) {
  let s;
  try { s = BigInt(seed); } catch { s = -1n; }
  if (s < 0n || s >= 1n << 64n) throw new VitrineError(`seed must be an integer in [0, 2^64), got ${seed}`, -1);
  return [Number(s & 0xffffffffn), Number(s >> 32n)];
}

/** The header of safetensors bytes: { length, header } -- the JSON header (tensor entries and
 * __metadata__) and its length in bytes (the data section starts at 8 + length). The one reader
 * of the format in JS; the engine reads the tensors. */
export function readSafetensorsHeader(bytes) {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  if (u8.length < 8) throw new VitrineError('safetensors: shorter than its 8-byte header length', -3);
  const n = Number(new DataView(u8.buffer, u8.byteOffset, 8).getBigUint64(0, true));
  if (n > u8.length - 8) throw new VitrineError(`safetensors: header of ${n} bytes in a file of ${u8.length}`, -3);
  let h;
  try { h = JSON.parse(new TextDecoder().decode(u8.subarray(8, 8 + n))); } catch (e) {
    throw new VitrineError(`safetensors: bad header JSON (${e.message})`, -3);
  }
  if (!h || typeof h !== 'object' || Array.isArray(h)) throw new VitrineError('safetensors: the header is not a JSON object', -3);
  return { length: n, header: h };
}

/** The __metadata__ of safetensors bytes ({} when none; e.g. a training state: format, kind,
 * model_config, train_config, step, rng, grad_checkpointing). */
export function readSafetensorsMeta(bytes) {
  return readSafetensorsHeader(bytes).header.__metadata__ || {};
}
