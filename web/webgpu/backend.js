// backend.js: the WebGPU backend -- the interface of web/runtime/backend.js (record, upload, run,
// read scalars, sync, free, limits) for the engine's own training step, recorded once
// (docs/kernels.md, "Running a step elsewhere") and replayed on the GPU (step.js) over the model's
// real state. The C engine keeps deciding what is computed: the plan, the checkpointing policy,
// the masks (vt_train_step_begin draws them as vt_train_step would), the learning rate, whether
// the step counts (vt_train_step_end). The GPU holds parameters, gradients, AdamW's m and v and
// the activation arena laid out as the recorded list says; each step uploads the images, the
// masks / indices / labels and the 32-byte scalars region, replays, and reads back the scalars
// alone (loss, non-finite flag). The list is recorded again only when the batch, the policy, the
// trainable set or the trainer change.
//
// State: after a GPU step the newest weights are on the GPU (`dirty`); pull() copies them (and
// AdamW's state, the gradients) back into wasm memory, where saving, evaluating and the wasm step
// read them. Anything that writes the model's state in wasm (initWeights, loadTrainState, ...)
// marks the GPU copy stale: the next GPU step uploads it first. A GPU failure (device lost, out of
// memory, a shader that does not compile) throws a GpuError and puts the model back to its last
// sync (the training state saved at the last upload / pull: weights, AdamW, step count, mask
// generator, all consistent): the weights are never lost to a broken device, and the message says
// how many GPU steps were given up.
import { GpuError, adapterName, requestGpu } from './device.js';
import { BufferPool } from './buffers.js';
import { kernelsOf } from './kernels.js';
import { GpuStep } from './step.js';
import { deviceMisfit, regionMisfit, stepRegions, whatFits } from './fit.js';
import { VitrineError } from '../errors.js';

const STATE = ['params', 'grads', 'adam_m', 'adam_v']; // regions that live across steps
const GRAD_ACCUM_WHY =
  'accumulated steps do not run on the WebGPU backend (a step of K micro-batches is not one recording)';

/**
 * The backend createVitrine({ backend }) asks for, when it is not plain wasm: 'webgpu' (a WebGPU
 * adapter, software ones included, or a GpuError saying why not) or 'auto' (WebGPU on a hardware
 * adapter, else wasm with the reason: a software adapter such as SwiftShader is a CPU rasteriser,
 * slower than the wasm engine). Returns the WebGPU backend (web/runtime/backend.js's interface),
 * or { fallback: why } for wasm.
 */
export async function webgpuBackend(backend, opts = {}) {
  if (backend !== 'webgpu' && backend !== 'auto')
    throw new VitrineError(`backend must be 'webgpu', 'wasm' or 'auto', got '${backend}'`, -1);
  let gpu;
  try {
    gpu = await requestGpu(opts);
  } catch (e) {
    if (backend === 'webgpu') throw e;
    return { fallback: `no WebGPU: ${e.message}` };
  }
  const adapter = gpu.info,
    named = adapterName(adapter);
  if (backend === 'auto' && adapter.software) {
    gpu.destroy();
    return {
      fallback: `the only WebGPU adapter is a software one (${adapterName({ ...adapter, software: false })}), slower than wasm`,
      adapter,
    };
  }
  const be = {
    name: 'webgpu',
    reason: `${backend === 'auto' ? 'auto: ' : ''}WebGPU adapter ${named}`,
    adapter,
    limits: {
      gradAccum: 1,
      gradAccumWhy: GRAD_ACCUM_WHY,
      stateOnDevice: true,
      maxBufferSize: gpu.limits.maxBufferSize,
      maxStorageBufferBindingSize: gpu.limits.maxStorageBufferBindingSize,
    },
  };
  // the device and the operations stay off the enumerable fields (vt.backend is posted as data)
  return Object.defineProperties(be, {
    gpu: { value: gpu },
    open: { value: (model, vt) => new GpuStepBackend(model, vt, gpu) },
    close: { value: () => gpu.destroy() },
  });
}

/** The GPU side of one Model: its recorded step and the state it holds. */
export class GpuStepBackend {
  constructor(model, vt, gpu) {
    this.model = model;
    this.vt = vt; // the engine: its threads decide the recording, its manifest states the kernel contract
    this.gpu = gpu;
    this.kernels = kernelsOf(gpu); // one pipeline cache a device
    this.pool = new BufferPool(gpu);
    this.step = null; // the GpuStep of the current recording
    this.key = null; // what it was recorded for
    this.dirty = false; // the GPU holds state newer than wasm memory
    this.stale = true; // wasm memory holds state newer than the GPU
    this.recordings = 0; // how many times a step was recorded (tests: not every step)
    this.synced = null; // { state: saveTrainState bytes, step } of the last upload / pull
    this.scalars = null; // the last step's scalars, read back
  }

  // the training state of the last sync, to go back to when the GPU fails
  _snapshot() {
    this.synced = { state: this.model.saveTrainState(), step: this.model.stepCount };
  }

  /** GPU bytes held (the step's buffers, the pool's, the read-back buffers). */
  get bytes() {
    return this.pool.bytes + this.pool.stagingBytes;
  }
  memory() {
    return { gpu: this.bytes };
  }

  /** Wasm memory is about to be read (`writes`: written): refused while the GPU holds newer
   * state; a write makes the GPU copy stale (rerecord: and the recording, its shape changed). */
  touch(what, { writes = true, rerecord = false } = {}) {
    if (this.dirty)
      throw new VitrineError(
        `${what}: the model's newest state is on the GPU (trainStepAsync): await model.sync() first`,
        -7,
      );
    if (!writes) return;
    this.stale = true;
    if (rerecord) this.key = null;
  }

  /** The recording for a step of `batch` images (labels: a classifier's): the same as the last one
   * unless what decides the list changed. */
  async record({ batch, labels }) {
    const m = this.model;
    const key = JSON.stringify([batch, !!labels, m.gradCheckpointing, this.vt.threads]);
    if (this.step && key === this.key) return this.step;
    if (this.step && this.dirty) await this.sync(); // the state moves through wasm memory
    this._drop();
    // a step over the device's limits is refused before it is recorded (the planner's bytes: a
    // region over maxBufferSize), or once recorded (a call's binding over
    // maxStorageBufferBindingSize), naming the limit and what fits instead
    const limits = this.gpu.limits,
      refuse = (why) =>
        new GpuError(
          'limit',
          `${why}, at batch ${batch} under ${m.gradCheckpointing}; ${whatFits(m, { batch, limits }).text}`,
        );
    const over = regionMisfit(stepRegions(m, batch), { ...limits, maxStorageBufferBindingSize: Infinity });
    if (over) throw refuse(over);
    const trace = m.recordStep({ batch, labels });
    const why = deviceMisfit(trace, limits);
    if (why) throw refuse(why);
    this.step = await GpuStep.create(
      this.kernels,
      this.pool,
      trace,
      this.vt.manifest.kernels,
      `${m.kind} step b${batch}`,
    );
    this.key = key;
    this.stale = true;
    this.recordings++;
    return this.step;
  }

  /** The model's parameters, gradients and AdamW state from wasm memory to the GPU. */
  upload() {
    for (const r of STATE) {
      const need = this.step.trace.regions[r];
      if (!need) continue;
      const src = this.model.region(r);
      if (!src || src.length < need)
        throw new VitrineError(`the model has no ${r} of ${need} bytes to upload (trainerInit first?)`, -7);
      this.step.write(r, 0, src.slice(0, need)); // a copy: the shared memory of a threaded build
    }
    this.stale = false;
    this._snapshot();
  }

  /** Copies the GPU's parameters, gradients and AdamW state into wasm memory (after a GPU step). */
  async sync() {
    if (!this.step || !this.dirty) return;
    const got = {};
    for (const r of STATE) if (this.step.trace.regions[r]) got[r] = new Uint8Array(await this.step.read(r));
    for (const [r, bytes] of Object.entries(got)) this.model.region(r).set(bytes);
    this.dirty = false;
    this._snapshot();
  }

  /** The last step's scalars as the GPU left them: { loss }. */
  readScalars() {
    return { loss: this.scalars ? new Float32Array(this.scalars.buffer, this.scalars.byteOffset, 1)[0] : null };
  }

  /** One training step on the GPU (Model.trainStepAsync): returns the loss; a non-finite loss or
   * gradient throws VT_ERR_NUMERIC and changes nothing (AdamW skipped on the GPU, the generator
   * goes back), as the wasm step does. */
  async run(images, { batch = null, labels = null, opts = {} } = {}) {
    let s = null;
    try {
      return await this.model.stepElsewhere(
        images,
        { batch, labels, opts },
        {
          before: async (x) => {
            s = await this.record({ batch: x.batch, labels });
            if (this.stale) this.upload();
          },
          run: async ({ x, inputs, scalars }) => {
            s.write('images', 0, x.data);
            if (labels) s.write('labels', 0, labels);
            for (const r of ['idx_keep', 'idx_mask', 'mask']) {
              const need = s.trace.regions[r];
              if (!need) continue;
              if (!inputs[r]) throw new VitrineError(`the recorded step reads ${r}, which this step does not draw`, -7);
              s.write(r, 0, inputs[r](need));
            }
            s.write('scalars', 0, scalars);
            this.dirty = true; // from here the GPU's state is the newest (AdamW may have run)
            s.run();
            this.scalars = new Uint8Array(await s.read('scalars', 0, scalars.length));
            return this.scalars;
          },
        },
      );
    } catch (e) {
      if (e instanceof GpuError) this._fail(e);
      throw e;
    }
  }

  // A GPU failure: what the GPU held is given up; the model goes back to its last sync.
  _fail(e) {
    this._drop();
    if (this.model.disposed) return; // (the model's dispose() freed the device's side: nothing to restore)
    const lost = this.synced ? this.model.stepCount - this.synced.step : 0;
    this.dirty = false;
    this.stale = true;
    if (lost > 0) this.model.loadTrainState(this.synced.state);
    e.message +=
      lost > 0
        ? `; the model is back at step ${this.synced.step}, its last sync to wasm memory (${lost} GPU step${lost === 1 ? '' : 's'} lost)`
        : "; the model's state in wasm memory is intact";
  }

  _drop() {
    this.step?.destroy();
    this.step = null;
    this.key = null;
  }

  free() {
    this._drop();
    this.pool.destroy();
  }
}

export { deviceMisfit }; // (fit.js)
