// pool-worker.js: one worker of the engine's thread pool (web/runtime/pool.js), in a browser (a module
// Web Worker) or in Node (worker_threads). It instantiates the engine's wasm module a second time
// over the SAME shared WebAssembly.Memory, points that instance's stack pointer at a stack the
// main instance allocated for it, and calls the engine's worker loop (src/threads.c), which runs
// kernel slices until the pool shuts down. Only kernels ever run here: they call no imports and
// allocate nothing, so every import is a stub that throws, and neither the module's constructors
// nor WASI's initialisation run (its data was initialised once, by the main instance).

const IS_NODE = typeof process !== 'undefined' && !!(process.versions && process.versions.node);
let post;

function start({ module, memory, tid, stackTop, stack, run }) {
  try {
    const imports = {};
    for (const imp of WebAssembly.Module.imports(module)) {
      const ns = (imports[imp.module] ||= {});
      if (imp.kind === 'memory') ns[imp.name] = memory;
      else if (imp.kind === 'function')
        ns[imp.name] = () => {
          throw new Error(`pool worker ${tid}: import ${imp.module}.${imp.name} called`);
        };
      else throw new Error(`pool worker: cannot provide the ${imp.kind} import ${imp.module}.${imp.name}`);
    }
    const ex = new WebAssembly.Instance(module, imports).exports;
    // the stack pointer first: any call below would otherwise use the main thread's stack
    if (stack.global) ex[stack.global].value = stackTop;
    else ex[stack.fn](stackTop);
    post({ ready: tid });
    ex[run](tid); // returns at shutdown
    post({ done: tid });
  } catch (e) {
    post({ error: String((e && e.stack) || e), tid });
  }
}

if (IS_NODE) {
  const { parentPort } = await import(/* @vite-ignore */ /* webpackIgnore: true */ `node:${'worker_threads'}`); // not a literal: bundlers
  post = (m) => parentPort.postMessage(m);
  parentPort.once('message', start);
} else {
  post = (m) => self.postMessage(m);
  self.onmessage = (e) => start(e.data);
}
