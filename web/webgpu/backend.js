// backend.js: the WebGPU backend of a Model -- the engine's own training step, recorded once
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
import { GpuStep, parseContract } from './step.js';
import { deviceMisfit, regionMisfit, stepRegions, whatFits, wholeRows } from './fit.js';
import { VitrineError } from '../errors.js';
import { toNCHW } from '../formats/images.js';

const STATE = ['params', 'grads', 'adam_m', 'adam_v']; // regions that live across steps
const INPUT = { idx_keep: 'idxKeep', idx_mask: 'idxMask', mask: 'mask' }; // region -> step_inputs field
const SCALARS = 32; // bytes of vt_scalars

/**
 * Chooses the backend createVitrine({ backend }) asks for: 'wasm' (the default), 'webgpu' (a
 * WebGPU adapter, software ones included, or a GpuError saying why not) or 'auto' (WebGPU on a
 * hardware adapter, else wasm with the reason: a software adapter such as SwiftShader is a CPU
 * rasteriser, slower than the wasm engine). Returns { name, reason, adapter, gpu }.
 */
export async function chooseBackend(backend = 'wasm', opts = {}) {
  if (backend === 'wasm' || backend == null)
    return { name: 'wasm', reason: 'asked for (backend: wasm)', adapter: null, gpu: null };
  if (backend !== 'webgpu' && backend !== 'auto')
    throw new VitrineError(`backend must be 'webgpu', 'wasm' or 'auto', got '${backend}'`, -1);
  let gpu;
  try {
    gpu = await requestGpu(opts);
  } catch (e) {
    if (backend === 'webgpu') throw e;
    return { name: 'wasm', reason: `no WebGPU: ${e.message}`, adapter: null, gpu: null };
  }
  const adapter = gpu.info,
    named = adapterName(adapter);
  if (backend === 'auto' && adapter.software) {
    gpu.destroy();
    return {
      name: 'wasm',
      reason: `the only WebGPU adapter is a software one (${adapterName({ ...adapter, software: false })}), slower than wasm`,
      adapter,
      gpu: null,
    };
  }
  return {
    name: 'webgpu',
    reason: `${backend === 'auto' ? 'auto: ' : ''}WebGPU adapter ${named}`,
    adapter,
    gpu,
  };
}

/** The GPU side of one Model (model._gpu): its recorded step and the state it holds. */
export class GpuTrainer {
  constructor(model, gpu) {
    this.model = model;
    this.vt = model._vt;
    this.gpu = gpu;
    this.kernels = kernelsOf(gpu); // one pipeline cache a device
    this.pool = new BufferPool(gpu);
    this.step = null; // the GpuStep of the current recording
    this.key = null; // what it was recorded for
    this.dirty = false; // the GPU holds state newer than wasm memory
    this.stale = true; // wasm memory holds state newer than the GPU
    this.recordings = 0; // how many times a step was recorded (tests: not every step)
    this.synced = null; // { state: saveTrainState bytes, step } of the last upload / pull
  }

  // the training state of the last sync, to go back to when the GPU fails
  _snapshot() {
    this.synced = { state: this.model.saveTrainState(), step: this.model.stepCount };
  }

  /** GPU bytes held (the step's buffers, the pool's, the read-back buffers). */
  get bytes() {
    return this.pool.bytes + this.pool.stagingBytes;
  }

  /** The wasm state changed (weights loaded, trainer set up): upload it before the next GPU step. */
  invalidate({ rerecord = false } = {}) {
    if (this.dirty)
      throw new VitrineError("the model's newest state is on the GPU: await model.sync() before changing it", -7);
    this.stale = true;
    if (rerecord) this.key = null;
  }

  // The recording for a step of `batch` images (labels: a classifier's): the same as the last one
  // unless what decides the list changed.
  async _recording(batch, labels) {
    const m = this.model;
    const key = JSON.stringify([batch, !!labels, m.gradCheckpointing, this.vt.threads]);
    if (this.step && key === this.key) return this.step;
    if (this.step && this.dirty) await this.pull(); // the state moves through wasm memory
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
    const trace = wholeRows(this.vt, m._h, () =>
      m.traceStep({ batch, labels: labels ? Array.from(labels) : null, json: true }),
    );
    const why = deviceMisfit(trace, limits);
    if (why) throw refuse(why);
    if (!this.vt._contract)
      this.vt._contract = parseContract(
        new TextDecoder().decode(this.vt.takeBytes((o) => this.vt._c.kernel_contract(o))),
      );
    this.step = await GpuStep.create(this.kernels, this.pool, trace, this.vt._contract, `${m.kind} step b${batch}`);
    this.key = key;
    this.stale = true;
    this.recordings++;
    return this.step;
  }

  // wasm region r of the model: a Uint8Array view (fresh: memory may grow), or null
  _region(r) {
    const vt = this.vt,
      id = vt.manifest.regions.indexOf(r),
      pb = vt.alloc(8);
    try {
      const p = this.vt._c.model_region(this.model._h, id, pb) >>> 0,
        n = vt.f64(pb, 1)[0];
      return p ? new Uint8Array(vt._low.buffer(), p, n) : null;
    } finally {
      vt.free(pb);
    }
  }

  _upload() {
    for (const r of STATE) {
      const need = this.step.trace.regions[r];
      if (!need) continue;
      const src = this._region(r);
      if (!src || src.length < need)
        throw new VitrineError(`the model has no ${r} of ${need} bytes to upload (trainerInit first?)`, -7);
      this.step.write(r, 0, src.slice(0, need)); // a copy: the shared memory of a threaded build
    }
    this.stale = false;
    this._snapshot();
  }

  /** Copies the GPU's parameters, gradients and AdamW state into wasm memory (after a GPU step). */
  async pull() {
    if (!this.step || !this.dirty) return;
    const got = {};
    for (const r of STATE) if (this.step.trace.regions[r]) got[r] = new Uint8Array(await this.step.read(r));
    for (const [r, bytes] of Object.entries(got)) this._region(r).set(bytes);
    this.dirty = false;
    this._snapshot();
  }

  /** One training step on the GPU (Model.trainStepAsync): returns the loss; a non-finite loss or
   * gradient throws VT_ERR_NUMERIC and changes nothing (AdamW skipped on the GPU, the generator
   * goes back), as the wasm step does. */
  async trainStep(images, batch, labels = null, opts = {}) {
    const m = this.model,
      vt = this.vt,
      c = vt._c,
      x = toNCHW(images, m.dims, m._stats(opts));
    if (batch != null && batch !== x.batch)
      throw new VitrineError(`trainStepAsync: batch ${batch} given, the images hold ${x.batch}`, -1);
    if (labels && labels.length !== x.batch)
      throw new VitrineError(`trainStepAsync: ${labels.length} labels for ${x.batch} images`, -1);
    const pImg = vt.copyIn(x.data),
      pLab = labels ? vt.copyIn(labels) : 0;
    const L = vt._layout('step_inputs'),
      pIn = vt.alloc(L.bytes),
      pSc = vt.alloc(SCALARS);
    let begun = false;
    try {
      const s = await this._recording(x.batch, labels);
      if (this.stale) this._upload();
      vt.check(c.train_step_begin(m._h, pImg, pLab, x.batch, pIn, pSc));
      begun = true;
      const where = vt.readLayout('step_inputs', pIn);
      s.write('images', 0, x.data);
      if (labels) s.write('labels', 0, labels);
      for (const [r, f] of Object.entries(INPUT)) {
        const need = s.trace.regions[r];
        if (!need) continue;
        if (!where[f]) throw new VitrineError(`the recorded step reads ${r}, which this step does not draw`, -7);
        s.write(r, 0, vt.u8().slice(where[f], where[f] + need));
      }
      s.write('scalars', 0, vt.u8().slice(pSc, pSc + SCALARS));
      this.dirty = true; // from here the GPU's state is the newest (AdamW may have run)
      s.run();
      const sc = new Uint8Array(await s.read('scalars', 0, SCALARS));
      vt.u8().set(sc, pSc);
      begun = false;
      const loss = vt.f32(pSc, 1)[0];
      const rc = c.train_step_end(m._h, pSc);
      m._last = { fn: 'loss', batch: x.batch, nImages: x.data.length, train: true, gpu: true };
      if (rc < 0) {
        const e = vt.error(rc);
        e.loss = loss;
        throw e;
      }
      return loss;
    } catch (e) {
      if (begun) {
        // the GPU failed mid-step: the generator goes back, the step is not counted
        const nf = new Float32Array(SCALARS / 4);
        nf[4] = 1;
        vt.u8().set(new Uint8Array(nf.buffer), pSc);
        c.train_step_end(m._h, pSc);
      }
      if (e instanceof GpuError) this._fail(e);
      throw e;
    } finally {
      vt.free(pImg);
      vt.free(pLab);
      vt.free(pIn);
      vt.free(pSc);
    }
  }

  // A GPU failure: what the GPU held is given up; the model goes back to its last sync.
  _fail(e) {
    this._drop();
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

  destroy() {
    this._drop();
    this.pool.destroy();
  }
}

export { deviceMisfit, wholeRows }; // (fit.js)
