// pool.js: the engine's thread pool. The engine's wasm module is instantiated once more per
// worker over the one shared WebAssembly.Memory (web/runtime/pool-worker.js); each worker runs
// src/threads.c's loop on a stack of its own. Works for every "-mt" build: Emscripten
// (-pthread: shared memory, but Emscripten's pthread_create is never used) and WASI reactors
// (clang, --shared-memory --import-memory). Needs SharedArrayBuffer: Node, or a browser page that
// is cross-origin isolated (COOP same-origin + COEP require-corp).

const IS_NODE = typeof process !== 'undefined' && !!(process.versions && process.versions.node);
// Node's built-in modules, imported only in Node; not a literal specifier, so that a bundler
// neither stubs it nor splits a chunk for it in a browser build (as web/vitrine.js's nodeModule)
const nodeModule = (name) => import(/* @vite-ignore */ /* webpackIgnore: true */ `node:${name}`);

/** Node: the options of a worker thread of ours. A worker inherits the process's flags, but one of
 * a file refuses to start with --input-type (`node --input-type=module -e '...'` would leave every
 * worker dead at birth): then the flags a worker takes are given without it (V8's, such as
 * --liftoff, are the process's already, and a worker refuses them given). */
export function nodeWorkerOptions() {
  const argv = process.execArgv;
  if (!argv.some((a) => a === '--input-type' || a.startsWith('--input-type='))) return {};
  const execArgv = [];
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].split('=')[0];
    if (name === '--input-type') {
      if (!argv[i].includes('=')) i++; // (its value follows)
    } else if (process.allowedNodeEnvironmentFlags.has(name)) execArgv.push(argv[i]);
  }
  return { execArgv };
}

/** Node: a worker thread of module `url` (worker_threads' Worker), with nodeWorkerOptions(). (Here,
 * not at the caller: a bundler reads new Worker(new URL(...), options) and needs static options.) */
export function nodeWorker(Worker, url) {
  const o = nodeWorkerOptions();
  return o.execArgv ? new Worker(url, o) : new Worker(url);
}

export const STACK_BYTES = 1024 * 1024; // per worker, as the main thread of every build: the GEMM packs 404 KB on it

/** Every core the host reports. */
export async function hostCores() {
  if (IS_NODE) {
    const os = await nodeModule('os');
    return os.availableParallelism ? os.availableParallelism() : os.cpus().length;
  }
  return (typeof navigator !== 'undefined' && navigator.hardwareConcurrency) || 1;
}

/** null if shared memory (so threads) can be had here, else why not. */
export function threadsUnavailableReason() {
  if (typeof SharedArrayBuffer === 'undefined' || typeof Atomics === 'undefined')
    return IS_NODE
      ? 'this Node has no SharedArrayBuffer'
      : 'the page is not cross-origin isolated (it needs Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp), so SharedArrayBuffer is unavailable';
  if (!IS_NODE && globalThis.crossOriginIsolated === false)
    return 'the page is not cross-origin isolated (it needs Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp)';
  return null;
}

/** The initial page count of a module's imported memory (parsed from its import section), or null. */
export function importedMemoryPages(bytes) {
  let p = 8;
  const u = () => {
    let r = 0,
      s = 0,
      b;
    do {
      b = bytes[p++];
      r += (b & 0x7f) * 2 ** s;
      s += 7;
    } while (b & 0x80);
    return r;
  };
  while (p < bytes.length) {
    const id = bytes[p++],
      size = u(),
      end = p + size;
    if (id === 2) {
      const n = u();
      for (let i = 0; i < n; i++) {
        for (let k = 0; k < 2; k++) {
          const len = u();
          p += len;
        } // module, name
        const kind = bytes[p++];
        if (kind === 0)
          u(); // function: type index
        else if (kind === 1) {
          p++;
          const f = bytes[p++];
          u();
          if (f & 1) u();
        } // table
        else if (kind === 2) {
          p++;
          return u();
        } // memory: flags, initial
        else if (kind === 3) p += 2; // global: type, mutability
      }
      return null;
    }
    p = end;
  }
  return null;
}

/** How long (ms) workers may take to start (instantiate the module, enter the loop), and to leave
 * the loop at close(): past these, the pool goes on without the workers that did not. */
export const POOL_TIMEOUTS = { start: 60000, close: 2000 };

/**
 * Starts n-1 workers and hands the engine n threads. engine: { module (WebAssembly.Module),
 * memory (shared WebAssembly.Memory), malloc (fn), setThreads (fn(n, callerCanWait)), ready (fn),
 * quit (fn), lost (fn(n)), shutdown (fn), run (export name of vtw_worker_run), stack: { global:
 * name } | { fn: name } }. onLost(note): a worker died after the start (its error / exit event, or
 * an error it reported): the engine goes on with the workers left, or with one thread, and the
 * note says so. A worker that fails to start, or is not in the loop within POOL_TIMEOUTS.start,
 * fails the start (the caller goes on with one thread). A worker that dies inside a job cannot be
 * recovered from: that job waits for it forever (only the engine's kernels run in workers, so a
 * worker dies from outside: a terminated worker, a browser reclaiming memory).
 * Returns { threads, live, workers, stackBytes, close() }.
 */
export async function startPool(engine, n, { onLost = () => {}, timeouts = {} } = {}) {
  const T = { ...POOL_TIMEOUTS, ...timeouts },
    workers = [],
    stacks = [],
    lost = new Set();
  let WorkerCtor,
    started = false,
    closed = false;
  if (IS_NODE) WorkerCtor = (await nodeModule('worker_threads')).Worker;
  else WorkerCtor = globalThis.Worker;
  if (!WorkerCtor) throw new Error('no Worker here: threads need Web Workers');
  const url = new URL('./pool-worker.js', import.meta.url);
  const pool = {
    threads: n,
    /** Threads that run jobs now: the caller and the workers alive. */
    get live() {
      return closed ? 1 : n - lost.size;
    },
    workers,
    stackBytes: 0,
    /** Stops the workers (bounded: one that does not leave within POOL_TIMEOUTS.close is counted
     * lost and terminated); returns the workers that did not leave. */
    close() {
      if (closed) return 0;
      closed = true;
      engine.quit(); // workers leave their loop at once
      const t0 = Date.now();
      while (engine.ready() > 0 && Date.now() - t0 < T.close) {
        /* a few microseconds when every worker is alive */
      }
      const stuck = Math.max(0, engine.ready());
      if (stuck) engine.lost(stuck);
      engine.shutdown();
      workers.forEach((w) => w.terminate());
      workers.length = 0;
      return stuck;
    },
  };
  // a worker gone after the start: the engine stops counting it (between engine calls: events are
  // handled on this thread, never inside a job)
  let startError = null; // a worker that failed before the pool started: the start fails at once
  const gone = (tid, why) => {
    if (!started) {
      startError = startError || new Error(`pool worker ${tid}: ${why}`);
      return;
    }
    if (closed || lost.has(tid)) return;
    lost.add(tid);
    engine.lost(1);
    const left = n - lost.size;
    onLost(`${left} thread${left === 1 ? '' : 's'}: pool worker ${tid} stopped (${why})`);
  };
  const ready = [];
  try {
    for (let tid = 1; tid < n; tid++) {
      const base = engine.malloc(STACK_BYTES + 16) >>> 0;
      if (!base) throw new Error('out of memory for a worker stack');
      stacks.push(base);
      const stackTop = (base + STACK_BYTES) & ~15;
      const w = IS_NODE ? new WorkerCtor(url, nodeWorkerOptions()) : new WorkerCtor(url, { type: 'module' });
      if (IS_NODE) w.unref(); // a worker blocked in the engine's loop must not keep Node alive
      workers.push(w);
      ready.push(
        new Promise((resolve, reject) => {
          const off = () => (IS_NODE ? w.off('message', onMsg) : w.removeEventListener('message', onMsg));
          const onMsg = (m) => {
            const d = IS_NODE ? m : m.data;
            // listening keeps a Node worker's port referenced: stop once it has started (a Node worker
            // that fails later ends with an 'exit'; a browser's may stay, having said so here)
            if (d.ready === tid) {
              if (IS_NODE) off();
              resolve();
            } else if (d.error) {
              if (IS_NODE) off();
              reject(new Error(d.error));
              gone(tid, d.error.split('\n')[0]);
            }
          };
          const failed = (why) => {
            reject(new Error(`pool worker ${tid}: ${why}`));
            gone(tid, why);
          };
          if (IS_NODE) {
            w.on('message', onMsg);
            w.once('error', (e) => failed(e.message));
            w.once('exit', (code) => failed(`exit code ${code}`));
          } else {
            w.addEventListener('message', onMsg);
            w.addEventListener('error', (e) => failed(e.message || 'a worker error'));
          }
        }),
      );
      w.postMessage({
        module: engine.module,
        memory: engine.memory,
        tid,
        stackTop,
        stack: engine.stack,
        run: engine.run,
      });
    }
    pool.stackBytes = stacks.length * (STACK_BYTES + 16);
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`pool: workers not started within ${T.start} ms`)), T.start);
    });
    try {
      await Promise.race([Promise.all(ready), late]);
    } finally {
      clearTimeout(timer);
    }
    // 'ready' is posted just before a worker enters the loop: wait until all are inside
    for (const t0 = Date.now(); engine.ready() < n - 1;) {
      if (startError) throw startError;
      if (Date.now() - t0 > T.start)
        throw new Error(`pool: only ${engine.ready()} of ${n - 1} workers entered the loop within ${T.start} ms`);
      await new Promise((r) => setTimeout(r, 1));
    }
    const callerCanWait = IS_NODE || typeof window === 'undefined'; // a browser's main thread must spin
    const got = engine.setThreads(n, callerCanWait ? 1 : 0);
    if (got !== n) throw new Error(`pool: the engine refused ${n} threads (${got})`);
    started = true;
  } catch (e) {
    closed = true;
    try {
      engine.shutdown();
    } catch {
      /* engine gone */
    }
    workers.forEach((w) => w.terminate());
    ready.forEach((p) => p.catch(() => {})); // the others' rejections, once terminated, are expected
    throw e;
  }
  return pool;
}
