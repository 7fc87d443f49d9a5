// create.js: createVitrine, from options to a running engine -- the build chosen and loaded
// (web/runtime/loader.js), its thread pool started (pool.js), where its training steps run chosen
// (the wasm engine, or the WebGPU backend of web/webgpu/, imported only when asked for).
import {
  buildName,
  fallbackBuild,
  loadBuild,
  WASM_BUILDS,
  IS_NODE,
  relaxedSimdSupported,
  enableNodeRelaxedSimd,
} from './loader.js';
import { startPool, hostCores, threadsUnavailableReason } from './pool.js';
import { Vitrine } from './engine.js';
import { wasmBackend } from './backend.js';
import { VitrineError } from '../errors.js';

/**
 * createVitrine({ wasm, threads, locateFile, wasmDir, backend, gpu }) -> Promise<Vitrine>
 * wasm: a name of WASM_BUILDS (wasm/builds.json; a shared-memory "-mt" file is asked for even at 1
 * thread) or 'wasi'.
 * Default: 'relaxed' (SIMD128 + fused multiply-add) where relaxed SIMD validates, else 'simd'
 * where SIMD128 validates, else 'scalar' (wasm/builds.json's `default`). The default trades
 * bit-identity with the SIMD128 build for ~1.5-2x speed: 'relaxed' rounds each multiply-add once,
 * so its bits differ from 'simd''s (both pass parity; see wasm/README.md for which builds agree
 * bitwise). Ask for wasm: 'simd' to get the same bits on every host. In Node 20, relaxed SIMD
 * needs enableNodeRelaxedSimd() first. 'wasi': the WASI SIMD build where SIMD validates, Node only.
 * threads: default every core the host reports. More than 1 loads the build's shared-memory
 * ("-mt") file and starts a pool of workers (same bits at any thread count); where that cannot be
 * (no cross-origin isolation in a browser, a scalar build, workers that fail to start) the engine
 * runs on 1 thread and `threadsNote` says why; a worker that dies later (a browser reclaiming
 * memory) leaves the engine running on the others (vt.threads, threadsNote), and close() returns.
 * vt.build names the build without "-mt"; vt.threaded says whether the shared-memory file is loaded.
 * locateFile(file, url): where to fetch the build's .wasm instead (e.g. 'vitrine-simd.wasm' and the
 * URL beside this module -> a URL or string), for apps that serve it from elsewhere.
 * wasmDir: a directory holding both the Emscripten glue (.mjs) and the .wasm of a build made
 * elsewhere (in Node also $VITRINE_WASM_DIR / $VITRINE_BUILD); its glue is imported at run time,
 * which bundlers do not follow.
 * backend: where training steps run -- 'wasm' (the default), 'webgpu' (the engine's recorded step
 * replayed on a WebGPU adapter, software ones included; throws a GpuError when there is none) or
 * 'auto' (WebGPU on a hardware adapter, else wasm). vt.backend (web/runtime/backend.js: name,
 * reason, adapter, limits) says which and why; models train with trainStepAsync on it. gpu: options of
 * the adapter request ({ swiftshader: true } in Node: Chromium's SwiftShader, no GPU needed).
 */
export async function createVitrine(options = {}) {
  const name = buildName(options.wasm);
  if (options.wasm != null && WASM_BUILDS[name].relaxed) await relaxedOrSay(name);
  let threads = options.threads == null ? await hostCores() : options.threads;
  if (!Number.isInteger(threads) || threads < 1 || threads > 64)
    throw new VitrineError(
      `threads must be an integer in [1, 64], got ${typeof options.threads === 'string' ? `the string ${JSON.stringify(options.threads)}` : String(options.threads)}`,
      -1,
    );
  const forceMt = WASM_BUILDS[name].threads;
  let build = forceMt ? Object.keys(WASM_BUILDS).find((b) => WASM_BUILDS[b].mt === name) : name;
  let note = null;
  const threadsFor = (b) => {
    // the thread count build b can have here (note: why fewer)
    if (threads <= 1 && !forceMt) return threads;
    const why = threadsUnavailableReason() || (WASM_BUILDS[b].mt ? null : `the ${b} build has no threads`);
    if (!why) return threads;
    if (forceMt) throw new Error(`wasm build ${name}: ${why}`);
    note = `1 thread: ${why}`;
    return 1;
  };
  const fileOf = (b) => (threads > 1 || forceMt ? WASM_BUILDS[b].mt : b);
  threads = threadsFor(build);
  let low;
  try {
    low = await loadBuild(fileOf(build), options);
  } catch (e) {
    // the default's file is not there (the relaxed build needs clang-19): the next one
    const next = options.wasm ? null : fallbackBuild(build);
    if (!next) throw e;
    build = next;
    note = null;
    threads = threadsFor(build);
    low = await loadBuild(fileOf(build), options);
  }
  const vt = new Vitrine(low, build);
  vt.threaded = !!low.memory;
  vt.threadsNote = note;
  if (options.backend != null && options.backend !== 'wasm') {
    // the WebGPU modules only when asked for
    const { webgpuBackend } = await import('../webgpu/backend.js');
    const be = await webgpuBackend(options.backend, options.gpu || {});
    vt.backend = be.fallback ? wasmBackend(be.fallback, be.adapter) : be;
  } else vt.backend = wasmBackend(options.backend ? 'asked for (backend: wasm)' : 'the default');
  if (threads > 1) {
    const c = vt._c;
    try {
      vt._pool = await startPool(
        {
          module: low.module,
          memory: low.memory,
          malloc: (n) => c.malloc(n),
          setThreads: (n, w) => c.set_threads(n, w),
          ready: () => c.threads_ready(),
          quit: () => c.threads_quit(),
          lost: (n) => c.threads_lost(n),
          shutdown: () => c.threads_shutdown(),
          run: low.run,
          stack: low.stack,
        },
        threads,
        {
          onLost: (note) => {
            vt.threadsNote = note;
          },
        },
      );
    } catch (e) {
      // the pool could not start: the engine runs on this thread, and says why
      vt.threadsNote = `1 thread: ${e.message}`;
    }
  }
  return vt;
}

// A relaxed build asked for by name: Node 20 turns relaxed SIMD on here (a V8 flag, for this
// process; what enableNodeRelaxedSimd does); where it still does not validate, one sentence says
// what to do instead of the compiler's error.
async function relaxedOrSay(name) {
  if (relaxedSimdSupported()) return;
  if (IS_NODE && (await enableNodeRelaxedSimd())) return;
  throw new VitrineError(
    IS_NODE
      ? `wasm '${name}': this Node (${process.version}) does not validate relaxed SIMD even with --experimental-wasm-relaxed-simd; ask for wasm: 'simd' (or leave wasm out: the fastest build this host runs)`
      : `wasm '${name}': this browser does not validate relaxed SIMD; ask for wasm: 'simd' (or leave wasm out: the fastest build this host runs)`,
    -1,
  );
}
