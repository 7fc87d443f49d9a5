// backend.js: where a model's training steps run -- the one interface every backend implements
// (as ggml's ggml-backend-impl.h: a table of operations its scheduler calls without asking which
// device it has), and the wasm engine's own backend. The WebGPU backend (web/webgpu/backend.js)
// implements the same operations; createVitrine({ backend }) picks one (web/runtime/create.js), and
// Model and Session only call these.
//
// A backend (vt.backend):
//   name, reason, adapter   what it is ('wasm' | 'webgpu'), why it was chosen, its adapter (or null)
//   limits                  what it can step: { gradAccum: the micro-batches one step may sum (a
//                           recorded step replays one), gradAccumWhy, stateOnDevice: the newest
//                           state stays on the device between steps (sync() brings it back),
//                           maxBufferSize, maxStorageBufferBindingSize: the device's, or null }
//   open(model, vt)         the model's state on the backend (vt: its engine), opened for a
//                           recorded step: a StepBackend
//   close()                 frees the device (the engine goes on with the wasm backend)
// A StepBackend:
//   record({ batch, labels })  the step the backend replays, recorded by the engine (wasm: none)
//   upload()                the model's state from wasm memory to the backend
//   run(images, { batch, labels }) -> Promise<loss>   one training step (recorded and uploaded
//                           first when its shape or the state changed)
//   readScalars()           the last step's scalars: { loss } (the device's, read back)
//   sync() -> Promise       the backend's newest state back into wasm memory
//   touch(what, { writes, rerecord })   wasm memory is about to be read (written): refused while
//                           the backend holds newer state; a write makes its copy stale
//   memory()                what it holds, for Model.memory(): {} (wasm), { gpu: bytes } (webgpu)
//   free()

/** The wasm engine as a backend: its steps run in wasm memory, nothing to record, upload or sync. */
export function wasmBackend(reason = 'the default', adapter = null) {
  const be = {
    name: 'wasm',
    reason,
    adapter,
    limits: {
      gradAccum: 65536,
      gradAccumWhy: null,
      stateOnDevice: false,
      maxBufferSize: null,
      maxStorageBufferBindingSize: null,
    },
  };
  return Object.defineProperties(be, { open: { value: (model) => new WasmStep(model) }, close: { value: () => {} } });
}

class WasmStep {
  constructor(model) {
    this.model = model;
    this.loss = null;
  }
  record() {
    return null; // the engine runs its own step
  }
  upload() {}
  async run(images, { batch = null, labels = null, opts = {} } = {}) {
    this.loss = labels
      ? this.model.trainStepLabels(images, labels, opts)
      : this.model.trainStep(images, batch ?? undefined, opts); // gradAccum: the engine's micro-batches
    return this.loss;
  }
  readScalars() {
    return { loss: this.loss };
  }
  async sync() {}
  touch() {}
  memory() {
    return {};
  }
  free() {}
}
