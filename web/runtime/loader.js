// loader.js: from a build's name to a running instance of the engine, in the browser and in Node.
//   probes     simdSupported / relaxedSimdSupported (WebAssembly.validate of tiny modules), and
//              enableNodeRelaxedSimd (Node 20's V8 flag)
//   builds     WASM_BUILDS: wasm/builds.json, the one list, through build/wasm/vitrine-builds.js
//              (which wasm/wasm.cmake writes from it: each browser build's .wasm named by a literal
//              new URL(...), its Emscripten glue imported statically -- patterns bundlers follow)
//   runtimes   Emscripten glue (ES module factories), clang reactors with our WASI shim (the
//              relaxed builds, browser and Node), node:wasi (the WASI builds, Node only)
// What it hands on, `low`: { exports: { name: fn } (every vtw_* function the instance exports, without
// the prefix), buffer() (the current memory buffer), module, memory (a shared one, else null), run and
// stack (what the thread pool's workers need) }. No file I/O here except reading the .wasm.
import { manifest, glue, urls } from '../../build/wasm/vitrine-builds.js';
import { importedMemoryPages } from './pool.js';
import { wasiShim } from './wasi-shim.js';

export const IS_NODE = typeof process !== 'undefined' && !!(process.versions && process.versions.node);
// Node's built-in modules, imported only when running in Node. Not a literal specifier, so that a
// bundler neither stubs it nor splits a chunk for it in a browser build.
export const nodeModule = (name) => import(/* @vite-ignore */ /* webpackIgnore: true */ `node:${name}`);

// (module (func (result v128) i32.const 0 i8x16.splat i8x16.popcnt)): valid only with SIMD128.
// (The SIMD builds also use bulk memory, which every engine with SIMD128 has: not probed.)
const SIMD_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8, 0, 65, 0, 253, 15, 253, 98, 11,
]);
// (module (func (result v128) f32.const 0 f32x4.splat (x3) f32x4.relaxed_madd)): valid only with
// relaxed SIMD (Chromium 114+ by default; Node 20 behind V8's --experimental-wasm-relaxed-simd).
const RELAXED_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 28, 1, 26, 0, 67, 0, 0, 0, 0, 253, 19, 67, 0, 0,
  0, 0, 253, 19, 67, 0, 0, 0, 0, 253, 19, 253, 133, 2, 11,
]);

export function simdSupported() {
  try {
    return WebAssembly.validate(SIMD_PROBE);
  } catch {
    return false;
  }
}
export function relaxedSimdSupported() {
  try {
    return WebAssembly.validate(RELAXED_PROBE);
  } catch {
    return false;
  }
}

/** Node 20 only: turn on V8's relaxed SIMD (--experimental-wasm-relaxed-simd) for this process,
 * so that the 'relaxed' build validates and compiles. Must run before the first wasm compile that
 * should see it; V8 flags are per process (workers started later inherit it). Returns whether
 * relaxed SIMD validates afterwards. A no-op in browsers and where it already validates. The CLI
 * and the Node tests call it; a library user decides for their own process. */
export async function enableNodeRelaxedSimd() {
  if (relaxedSimdSupported() || !IS_NODE) return relaxedSimdSupported();
  try {
    (await nodeModule('v8')).setFlagsFromString('--experimental-wasm-relaxed-simd');
  } catch {
    /* not V8 */
  }
  return relaxedSimdSupported();
}

const freeze = (x) =>
  Object.freeze(
    Array.isArray(x)
      ? x.map(freeze)
      : x && typeof x === 'object'
        ? Object.fromEntries(Object.entries(x).map(([k, v]) => [k, freeze(v)]))
        : x,
  );
/** The builds createVitrine can load (wasm/builds.json): name -> { runtime, simd, relaxed, threads,
 * mt, browser, files } (files: in build/wasm/ beside web/; threads: a shared-memory "-mt" file; mt:
 * this build's "-mt" twin; browser: runs in a browser). */
export const WASM_BUILDS = freeze(manifest.builds);
const canRun = (b) => (!b.simd || simdSupported()) && (!b.relaxed || relaxedSimdSupported());

/** The build a `wasm` option names: a name of WASM_BUILDS, 'wasi' (the first WASI build this host
 * validates), or none (the first of builds.json's `default` that validates). */
export function buildName(wasm) {
  const first = (names) => names.find((n) => canRun(WASM_BUILDS[n])) || names[names.length - 1];
  const name = wasm == null ? first(manifest.default) : wasm === 'wasi' ? first(manifest.wasi) : wasm;
  if (!Object.hasOwn(WASM_BUILDS, name))
    throw new Error(`unknown wasm build '${name}' (${[...Object.keys(WASM_BUILDS), 'wasi'].join(', ')})`);
  return name;
}
/** The build to fall back to when the first of `default` is absent (the relaxed build needs
 * clang-19): the next of `default` this host runs; null for any other build. */
export function fallbackBuild(name) {
  return name === manifest.default[0] ? manifest.default.slice(1).find((n) => canRun(WASM_BUILDS[n])) || null : null;
}

// ---- files ----------------------------------------------------------------------------------

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

// The Node-only builds' files (and a glue the build table does not import) are found by a URL
// made at run time from this base: not a literal, so bundlers neither copy nor follow them.
const WASM_BASE = '../../build/wasm/';

/** Loads build `name`: options { wasmDir, locateFile } as createVitrine's. Returns `low` (above). */
export async function loadBuild(name, options = {}) {
  const b = WASM_BUILDS[name],
    wasmFile = b.files.find((f) => f.endsWith('.wasm'));
  if (!b.browser && !IS_NODE)
    throw new Error(`the ${name} build runs in Node only; use wasm: '${manifest.default.join("', '")}'`);
  const dir = options.wasmDir || envWasmDir();
  let url = dir
    ? await fileUrl(dir, wasmFile)
    : urls[name]
      ? urls[name]()
      : new URL(WASM_BASE + wasmFile, import.meta.url);
  let factory = glue[name];
  if (b.runtime === 'emscripten' && (dir || !factory)) {
    const glueFile = b.files.find((f) => f.endsWith('.mjs'));
    const glueUrl = dir ? await fileUrl(dir, glueFile) : new URL(WASM_BASE + glueFile, import.meta.url);
    factory = (await import(/* @vite-ignore */ /* webpackIgnore: true */ glueUrl.href)).default;
  }
  if (options.locateFile) url = await toUrl(await options.locateFile(wasmFile, url));
  const bytes = await readBytes(url);
  if (b.runtime === 'emscripten') return startEmscripten(factory, bytes, b.threads);
  return b.runtime === 'reactor' ? startReactor(bytes) : startWasi(bytes);
}

// ---- runtimes ---------------------------------------------------------------------------------

// every vtw_* function of an export object (Emscripten's Module: `_vtw_*`), without the prefix
const vtwExports = (obj, prefix) =>
  Object.fromEntries(
    Object.keys(obj)
      .filter((k) => k.startsWith(prefix) && typeof obj[k] === 'function')
      .map((k) => [k.slice(prefix.length), obj[k]]),
  );

// Emscripten build: an ES module factory. We compile the bytes ourselves and hand the glue the
// instance (Emscripten 3.1.6 would otherwise try fetch() on a path in Node, and a bundler could
// not see which file it fetches); the compiled module is kept for the thread pool's workers.
// shared: a "-mt" build (-pthread: its memory is a SharedArrayBuffer).
async function startEmscripten(factory, bytes, shared) {
  const module = await WebAssembly.compile(bytes);
  let failed;
  const instantiated = new Promise((_, reject) => {
    failed = reject;
  });
  const M = await Promise.race([
    instantiated,
    factory({
      print: () => {},
      printErr: () => {},
      instantiateWasm(imports, receive) {
        WebAssembly.instantiate(module, imports).then((inst) => receive(inst, module), failed);
        return {};
      },
    }),
  ]);
  return {
    exports: vtwExports(M, '_vtw_'),
    // the glue re-points HEAPU8 when memory grows; a shared memory's .buffer is always current
    buffer: shared ? () => M.wasmMemory.buffer : () => M.HEAPU8.buffer,
    module,
    memory: shared ? M.wasmMemory : null,
    run: shared ? rawExportName(M, '_vtw_worker_run') : null,
    stack: shared ? { fn: rawExportName(M, 'stackRestore') } : null,
  };
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

/** A clang-built WASI-style reactor (build/wasm/<file>), browser or Node: compile, instantiate with
 * wasiShim() (+ `imports`, e.g. { env: { memory } } for a build that imports its memory), run
 * _initialize. Returns { fn(name), buffer(), instance, module } (and what createVitrine uses).
 * `memory`: the imported WebAssembly.Memory, if any (else the instance's export). */
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
  return {
    exports: vtwExports(ex, 'vtw_'),
    fn: (name) => ex[name],
    buffer: () => getMemory().buffer,
    instance,
    module,
    memory: pages != null ? memory : null,
    run: 'vtw_worker_run',
    stack: { global: '__stack_pointer' },
  };
}

// Node's WASI builds (node:wasi); a "-mt" one imports a shared memory
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
    exports: vtwExports(ex, 'vtw_'),
    buffer: () => mem.buffer,
    module,
    memory,
    run: 'vtw_worker_run',
    stack: { global: '__stack_pointer' },
  };
}
