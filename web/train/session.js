// session.js: the one training loop of vitrine. A Session is a run set up (model, data,
// normalisation, trainer, the checkpoint it resumes), stepping on request: the Trainer's worker
// (web/train/trainer.js: Node worker thread, browser Web Worker), the CLI through the Trainer, and
// the demo's worker all run this. What differs between objectives is their module's
// (web/train/objectives/); the options are web/train/options.js's. No file I/O and no Node module
// here (web/train/datasets.js opens Node's folders itself).
//
// The run's settings (`run`, below) are kept in every checkpoint's metadata under the objective's
// runKey -- `vitrine_run` for MAE / AIM, `vitrine_classify` for a classifier, the keys vitrine has
// always written -- so that a checkpoint alone resumes bit for bit: the data order is a seeded
// permutation per epoch found again from the step count, augmentation is drawn from (seed, step,
// slot), the masks from the engine's generator in the state. Seeds: initialisation S, trainer
// (masks) S+1, data order S+2, augmentation S+3.
import { DataOrder } from './data-order.js';
import { openSource, splitFraction, Batches, DataError, DEFAULT_CACHE_BYTES } from './datasets.js';
import { parseAugment, augmentText } from './augment.js';
import { runFromCheckpoint } from './checkpoint.js';
import { OPTIONS, OptionError, own, nameOf, show } from './options.js';
import { isTrainPreset } from './objectives/self-supervised.js';
import { TRAIN_PRESETS } from './presets.js';
import { objectiveNamed, runDefault, checkRunOptions } from './objectives/index.js';
import { readWeights, resolveNormalization, TIMM_PRETRAINED } from '../formats/pretrained.js';
import { channelStats } from '../formats/images.js';
import { withMetadata, readSafetensorsMeta } from '../formats/safetensors.js';
import { VitrineError } from '../errors.js';

export { runFromCheckpoint };

const now = () => (typeof performance !== 'undefined' ? performance.now() : Date.now());

/** The peak learning rate of a new run: the objective's default for `images` a step. */
export function defaultLr(obj, images) {
  const lr = runDefault(obj, 'lr');
  return typeof lr === 'function' ? lr(images) : lr;
}

/** The model a new run of `o.objective` trains (the engine's spec), from its options: a train
 * preset, a timm architecture (timm's create_model with imgSize / patchSize / inChans), or a
 * config; a classifier's head has one output per class (classes: their names; the CLI checks the
 * spec before the data are read, with a stand-in). ctx.weights: what the run starts from (a
 * classifier on a vitrine encoder takes its timm_kwargs). */
export function runSpec(o, classes = ['a', 'b'], ctx = {}) {
  return objectiveNamed(o.objective).spec(o, { classes, ...ctx });
}

// the engine's training step on the model's backend (labels: a classifier's)
const engineStep = (model, { images, labels, n }) =>
  labels ? model.trainStepLabelsAsync(images, labels) : model.trainStepAsync(images, n);

/**
 * One run, set up. Session.open(vt, options, hooks) -> Session; then loop() steps it. Options (the
 * Trainer's, web/train/options.js; data descriptions as web/train/datasets.js reads them):
 *   objective (a registered one: 'mae' | 'aim' | 'classify' | ...); model: a train preset
 *   (fmnist-p7-mlp2, ...), a timm architecture (vit_tiny_patch16_224, ...: timm's create_model with
 *   imgSize, patchSize), or the engine's { encoder, ... } / timm kwargs (config); the objective's
 *   own (maskRatio; classify: pool, labelSmoothing);
 *   weights: { bytes, name } or what readWeights takes (the run's start; strict: weightsStrict);
 *   data, val (a description, or a fraction held out), trainMax, valMax;
 *   steps | epochs, batch, gradAccum, lr, minLr, warmup | warmupEpochs, weightDecay, policy, seed,
 *   augment, mean / std, stopAt, checkpointEvery, evalEvery,
 *   resume: checkpoint bytes (the run's settings come from it; policy may change);
 *   runInfo: fields kept in the checkpoint beside the run's (the CLI's data path, --init file);
 *   cacheBytes, maxPixels, frozen (names not trained).
 * hooks: { log(text), onLoad(progress), signal (an AbortSignal: a URL being read stops) }.
 */
export class Session {
  static async open(vt, options, hooks = {}) {
    checkRunOptions(options);
    const s = new Session(vt, hooks);
    try {
      await s._open(options);
    } catch (e) {
      s.dispose();
      throw e;
    }
    return s;
  }
  constructor(vt, hooks) {
    this.vt = vt;
    this.log = hooks.log || (() => {});
    this.onLoad = hooks.onLoad || null;
    this.signal = hooks.signal || null; // aborts a URL being read (weights, images)
    this.model = null;
    this.lossLast = null;
    // the operation in flight on the model's backend (a step or a sync), one at a time
    this.stepping = null;
  }

  // The run: its settings (new, or the checkpoint's), its data, its model started from its weights,
  // its normalisation, the trainer (and the checkpoint's state), its batches.
  async _open(o) {
    const { run, resume, policyField } = resume0(this.vt, o);
    this.objectiveDef = objectiveNamed(run.objective); // what the objective's module says (web/train/objectives/)
    this.objective = this.objectiveDef.name;
    this.cacheBytes = o.cacheBytes ?? DEFAULT_CACHE_BYTES;
    this.cli = !!o.cliFlags; // messages name the command line's flags (the CLI's run), else the API's options
    if (!resume) checkModelName(this.vt, o.model, this.cli);
    const data = await openData(
      o,
      this.objectiveDef,
      resume && run,
      (m) => this.log(`warning: ${m}`),
      this.cli,
      this.signal,
    );
    if (!resume) Object.assign(run, newRun(o, this.objectiveDef, data, this.cli));
    run[this.objectiveDef.countKey] = data.trainIdx.length;
    if (!run.wasm) run.wasm = this.vt.build; // a resumed run keeps its bits only in the build that trained it
    if (this.objectiveDef.labels) run.classes = data.classes;
    this.run = run;
    const weights = resume || o.weights == null ? null : await this._readWeights(o);
    if (weights) run.init = run.init || weights.name;
    if (!run.spec) run.spec = o.spec || runSpec(o, data.classes || [], { weights, run });
    this.model = this._makeModel(o, weights, policyField);
    this._normalise(o, weights);
    this._startTrainer(resume, o);
    this._prepareBatches(data);
  }

  async _readWeights(o) {
    const src = o.weights.bytes || o.weights;
    // a file path named as the option that gave it (a URL names itself; the CLI names its files)
    const path = typeof src === 'string' && !this.cli && !/^(https?|file|blob|data):/i.test(src);
    return readWeights(src, {
      onProgress: this.onLoad,
      signal: this.signal,
      stallSeconds: o.urlStallSeconds ?? undefined,
      timeoutSeconds: o.urlTimeoutSeconds ?? undefined,
      name: o.weights.name || o.weightsName || (path ? `weights ${src}` : null),
    });
  }

  // the model: created, its policy set, initialised (seed), its frozen parameters, the weights
  _makeModel(o, weights, policyField) {
    const run = this.run,
      model = createModelNaming(this.vt, run.spec, o, this.cli);
    this.model = model;
    this.arch =
      run.spec.preset || (typeof run.preset === 'string' && own(TIMM_PRETRAINED, run.preset) ? run.preset : null);
    setPolicy(model, run.policy, policyField, o.resumeName);
    model.initWeights(BigInt(run.seed));
    const frozenNames = run.frozen || o.frozen;
    if (frozenNames) {
      // exactly the run's: weights it started from may have made a frozen one trainable
      model.setRequiresGrad('', true);
      for (const name of frozenNames)
        try {
          model.setRequiresGrad(name, false);
        } catch (e) {
          throw new OptionError('frozen', e.message); // (the engine's message names the parameter)
        }
    }
    this.initReport = null;
    if (weights) {
      try {
        this.initReport = { ...model.initFrom(weights.bytes, { strict: !!o.weightsStrict }), name: weights.name };
      } catch (e) {
        // (initFrom names its option `strict`: here it is the run's weightsStrict)
        const strict = e.field === 'strict',
          field = strict ? nameOf('weightsStrict', this.cli) : e.field;
        const message = strict ? e.message.replace(/^strict:/, `${field}:`) : e.message;
        throw Object.assign(new VitrineError(`${weights.name}: ${message}`, e.status || -1), field ? { field } : {});
      }
    }
    return model;
  }

  // normalisation: given, the weights', the architecture's (timm), ImageNet's; kept in the run
  _normalise(o, weights) {
    const run = this.run,
      model = this.model,
      chans = model.dims.chans;
    for (const k of ['mean', 'std'])
      if (o[k] != null && o[k].length !== 1 && o[k].length !== chans)
        throw new OptionError(
          nameOf(k, this.cli),
          `${o[k].length} values for a model of ${chans} channel${chans === 1 ? '' : 's'} (give 1${chans === 1 ? '' : ` or ${chans}`})`,
        );
    if (run.mean == null) {
      const n = resolveNormalization({
        mean: o.mean ?? null,
        std: o.std ?? null,
        meta: weights && weights.meta,
        arch: this.arch,
        what: weights && weights.name,
      });
      const st = channelStats(model.dims.chans, n);
      this.normalizationSource = n.source;
      if (!n.isDefault) {
        run.mean = st.mean;
        run.std = st.std;
      } // absent: ImageNet's, what runs before this kept
    } else this.normalizationSource = 'the checkpoint';
    this.stats = run.mean != null ? { mean: run.mean, std: run.std } : {};
    model.normalization = { ...channelStats(model.dims.chans, this.stats), source: this.normalizationSource };
    run.frozen = model
      .params()
      .filter((p) => !p.requiresGrad)
      .map((p) => p.name);
  }

  // the trainer (the objective's settings of the run), and a resumed run's state
  _startTrainer(resume, o) {
    const run = this.run,
      model = this.model;
    this.trainerOptions = {
      ...this.objectiveDef.trainer(run),
      ...(run.minLr ? { minLr: run.minLr } : {}),
      gradAccum: run.gradAccum || 1,
    };
    model.trainerInit(this.trainerOptions);
    // a mask ratio so small that it masks no patch of this model (the engine would refuse its first step)
    if (this.objectiveDef.masks)
      try {
        model.planTrainStep({ batch: 1 });
      } catch (e) {
        throw new OptionError(
          nameOf('maskRatio', this.cli),
          e.message.replace(/^mask_ratio \S+ /, `${run.maskRatio} `),
        );
      }
    if (resume) {
      try {
        model.loadTrainState(resume);
      } catch (e) {
        throw new VitrineError(`${o.resumeName || 'resume'}: ${e.message}`, e.status || -1);
      }
    }
    // what the backend steps (a recorded step replays one micro-batch)
    const { limits, name } = this.vt.backend;
    if ((run.gradAccum || 1) > limits.gradAccum)
      throw Object.assign(
        new VitrineError(
          `gradAccum ${run.gradAccum}: ${limits.gradAccumWhy || `the ${name} backend steps at most ${limits.gradAccum}`}; use backend wasm`,
          -1,
        ),
        { field: 'gradAccum' },
      );
  }

  // batches at the model's size, in the run's order
  _prepareBatches({ train, valSource, trainIdx, valIdx, classes }) {
    const run = this.run,
      seed = BigInt(run.seed),
      { img, chans } = this.model.dims;
    this.effBatch = run.batch * (run.gradAccum || 1);
    if (this.effBatch * chans * img * img * 4 > 2 ** 31)
      throw new VitrineError(
        `batch ${this.effBatch}: one batch of ${img}x${img}x${chans} images is ${((this.effBatch * chans * img * img * 4) / 2 ** 30).toFixed(1)} GiB, more than wasm memory holds`,
        -2,
      );
    Object.assign(this, { train, trainIdx, valSource, valIdx, classes });
    this.augment = parseAugment(run.augment ?? 'none');
    this.batches = new Batches(train, {
      size: img,
      chans,
      stats: this.stats,
      augment: this.augment,
      augmentSeed: seed + 3n,
      cacheBytes: this.cacheBytes,
    });
    this.valBatches = valSource
      ? valSource === train
        ? this.batches
        : new Batches(valSource, { size: img, chans, stats: this.stats, cacheBytes: this.cacheBytes / 4 })
      : null;
    this.order = new DataOrder(trainIdx.length, seed + 2n);
    this._buf = new Float32Array(this.effBatch * chans * img * img);
    this._labels = new Int32Array(this.effBatch);
    this.startStep = this.model.stepCount;
    this.lossFirst = run.lossFirst ?? null;
  }

  get step() {
    return this.model.stepCount;
  }
  /** Whether the model's newest state stays on its backend's device between steps (webgpu): a
   * caller reading or changing it between steps of a loop of its own syncs first. */
  get stateOnDevice() {
    return this.vt.backend.limits.stateOnDevice;
  }
  get steps() {
    return this.run.steps;
  }
  get epoch() {
    return (this.step * this.effBatch) / this.trainIdx.length;
  }

  /** The images (normalised, augmented; a buffer the next call reuses) and labels of step `step`. */
  async batchAt(step = this.step) {
    const B = this.effBatch,
      pos = this.order.batch(step, B),
      idx = Int32Array.from(pos, (p) => this.trainIdx[p]);
    const images = await this.batches.batch(idx, step, this._buf);
    if (this.train.labels)
      idx.forEach((i, j) => {
        this._labels[j] = this.train.labels[i];
      });
    return { images, labels: this.objectiveDef.labels ? this._labels : null, indices: idx };
  }

  /** One training step: { step (done so far), loss, seconds, lr, images }. Throws the engine's
   * VitrineError on a non-finite loss (the model keeps its last good state). */
  async stepOnce() {
    const t0 = now(),
      m = this.model,
      lr = m.lr(m.stepCount);
    const { images, labels } = await this.batchAt();
    const step = this.objectiveDef.step || engineStep;
    let loss;
    try {
      loss = await this._turn(() => step(m, { images, labels, n: this.effBatch, step: m.stepCount, run: this.run }));
    } catch (e) {
      try {
        await this.sync();
      } catch {
        /* a lost device: the model is back at its last sync already */
      }
      throw e;
    }
    if (this.run.lossFirst == null) this.run.lossFirst = this.lossFirst = loss;
    this.lossLast = loss;
    return { step: m.stepCount, loss, lr, seconds: (now() - t0) / 1000, images };
  }

  /** Brings the model's newest state from the GPU to wasm memory (the WebGPU backend; else
   * nothing): checkpoint(), weights(), evaluate() and predict() read it there. loop() syncs at its
   * checkpoints, evaluations and end; between steps of a loop of its own, a caller syncs first. */
  async sync() {
    if (this.model) await this._turn(() => this.model.sync());
  }
  // one operation on the model's backend at a time (a step, a sync)
  async _turn(op) {
    while (this.stepping) await this.stepping.catch(() => {});
    const p = (this.stepping = op());
    try {
      return await p;
    } finally {
      if (this.stepping === p) this.stepping = null;
    }
  }

  /** The memory of the step: planned (the engine's plan, bytes by kind) and measured (the
   * parameters, gradients and the arena's peak), the wasm memory, and on the WebGPU backend the GPU
   * bytes held (gpu). */
  memory() {
    const mm = this.model.memory();
    return {
      planned: mm.planned,
      measured: { params: mm.used.params, grads: mm.used.grads, activations: mm.arena.peak },
      wasm: mm.linear,
      ...(mm.gpu != null ? { gpu: mm.gpu } : {}),
    };
  }

  /** What the run measures on its held-out images (a classifier: top-1 and the confusion matrix,
   * chunks of `chunk`), or null. */
  async evaluate(chunk = 250) {
    return this.objectiveDef.evaluate ? this.objectiveDef.evaluate(this, chunk) : null;
  }

  /** The checkpoint: the engine's training state with the run's settings (resumable bit for bit). */
  checkpoint() {
    const run = { ...this.run };
    if (this.objectiveDef.specInState) delete run.spec;
    return withMetadata(this.model.saveTrainState(), { [this.objectiveDef.runKey]: JSON.stringify(run) });
  }

  /** What the run makes: its objective's (a classifier: timm keys, head; class names, spec,
   * normalisation in the metadata: what `vitrine predict` reads; MAE / AIM: the encoder, timm keys,
   * timm_kwargs, pretrained_cfg). */
  weights() {
    return this.objectiveDef.weights ? this.objectiveDef.weights(this) : this.model.saveSafetensors();
  }

  /** A classifier's top classes of images: Float32Array NCHW (normalised), or images of any size
   * through the pixel pipeline: Blob / File (decoded by the browser), ImageBitmap, { width,
   * height, data } RGBA pixels (ImageData). Returns per image [{ index, name, p }]. */
  async predict(images, { topk = 3 } = {}) {
    if (!this.objectiveDef.predict)
      throw new VitrineError(`predict: the run trains ${this.objectiveDef.name}, which does not predict classes`, -7);
    return this.objectiveDef.predict(this, images, { topk });
  }

  /**
   * Steps until stopAt (default: the run's end) or until control.stop() says so at a step
   * boundary; control.pause() awaited between steps when it returns a promise. emit(name, data):
   * 'step' { step, steps, epoch, loss, lr, seconds, imagesPerSecond, memory (every 20 steps) },
   * 'eval' (every evalEvery steps and at the end), 'checkpoint' { step, bytes } every
   * checkpointEvery steps; a promise emit returns for a step is waited for before the next step.
   * On the WebGPU backend the state is synced (sync()) before a checkpoint or an evaluation and at
   * the end. Returns { status: 'done' | 'stopped' | 'aborted', error }.
   */
  async loop({
    stopAt = this.run.steps,
    checkpointEvery = 0,
    evalEvery = 0,
    evalChunk = 250,
    emit = () => {},
    control = {},
    yieldEvery = 1,
  } = {}) {
    const stop = Math.min(stopAt, this.run.steps),
      t0 = now();
    let status = 'stopped',
      error = null,
      n = 0;
    // disposed while the loop waited (the demo's reset during a step): aborted, nothing more read
    const gone = () => !this.model;
    for (;;) {
      if (n++ % yieldEvery === 0) await yieldNow();
      if (control.paused && control.paused()) await control.waitResume();
      if ((control.aborted && control.aborted()) || gone()) {
        status = 'aborted';
        break;
      }
      if (this.step >= stop) {
        status = this.step >= this.run.steps ? 'done' : 'stopped';
        break;
      }
      let r;
      try {
        r = await this.stepOnce();
      } catch (e) {
        // (aborted while a batch's images were read: the model is at the last step's boundary)
        if (gone() || (control.aborted && control.aborted())) {
          status = 'aborted';
          break;
        }
        error = e;
        status = 'error';
        break;
      }
      if (gone()) {
        status = 'aborted';
        break;
      }
      const ev = {
        step: r.step,
        steps: this.run.steps,
        epoch: this.epoch,
        loss: r.loss,
        lr: r.lr,
        seconds: r.seconds,
        imagesPerSecond: this.effBatch / r.seconds,
        images: r.images,
      };
      if (r.step % 20 === 1 || r.step === stop) ev.memory = this.memory();
      const w = emit('step', ev);
      if (w && typeof w.then === 'function') await w; // (the demo saves between GPU steps)
      if (gone()) {
        status = 'aborted';
        break;
      }
      const cp = checkpointEvery && r.step % checkpointEvery === 0 && r.step < stop,
        ev2 = evalEvery && r.step % evalEvery === 0 && r.step < this.run.steps;
      if (cp || ev2) {
        try {
          await this.sync();
        } catch (e) {
          error = e;
          status = 'error';
          break;
        }
        if (gone()) {
          status = 'aborted';
          break;
        }
      }
      if (cp) emit('checkpoint', { step: r.step, bytes: this.checkpoint() });
      if (ev2) {
        const e = await this.evaluate(evalChunk);
        if (e) emit('eval', e);
      }
    }
    if (!error)
      try {
        await this.sync();
      } catch (e) {
        error = e;
        status = 'error';
      }
    this.trainSeconds = (this.trainSeconds || 0) + (now() - t0) / 1000;
    if (!gone()) this.trained = this.step - this.startStep;
    return { status, error };
  }

  dispose() {
    if (this.model) {
      this.model.dispose();
      this.model = null;
    }
  }
}

// ---- setting a run up ------------------------------------------------------------------------

// A model named by a string: a train preset's own name or a timm architecture the engine builds
// (never a name of Object.prototype: '__proto__', 'toString' resolve to nothing here).
function checkModelName(vt, model, cli) {
  if (typeof model !== 'string' || isTrainPreset(model) || vt.presets().includes(model)) return;
  throw new OptionError(
    nameOf('model', cli),
    `${JSON.stringify(model)} is not a train preset (${Object.keys(TRAIN_PRESETS).join(', ')}) nor a timm architecture the engine builds (${vt.presets().join(', ')})`,
  );
}

// the engine's config fields an option sets over an architecture's encoder (objectives' encoderOverrides)
const ENCODER_OPTIONS = { img_size: 'imgSize', patch_size: 'patchSize', in_chans: 'inChans' };
// createModel, its refusal of the encoder an option set over an architecture (imgSize, patchSize,
// inChans) naming those options, not a config the caller never gave
function createModelNaming(vt, spec, o, cli) {
  try {
    return vt.createModel(spec);
  } catch (e) {
    const text = String(e.message || '');
    if (!text.startsWith('config: ')) throw e;
    // the fields the message names that an option set (the options win over a config's)
    const [first, ...rest] = Object.keys(ENCODER_OPTIONS)
      .filter((f) => o[ENCODER_OPTIONS[f]] != null && text.includes(f))
      .sort((a, b) => text.indexOf(a) - text.indexOf(b))
      .map((f) => ENCODER_OPTIONS[f]);
    if (!first) throw e;
    const others = rest.length ? ` (with ${rest.map((k) => `${nameOf(k, cli)} ${show(o[k])}`).join(', ')})` : '';
    throw new OptionError(nameOf(first, cli), `${show(o[first])}${others}: ${text.slice('config: '.length)}`);
  }
}

// A resumed run's settings (the checkpoint's, checked; the engine's part of it checked too) and
// where its policy comes from, or a new run's start: { run, resume, policyField }.
function resume0(vt, o) {
  if (!o.resume) return { run: { objective: objectiveNamed(o.objective).name }, resume: null, policyField: null };
  const resume = o.resume instanceof Uint8Array ? o.resume : new Uint8Array(o.resume);
  const what = o.resumeName || 'resume'; // the option, as messages name the checkpoint it gave
  let meta;
  try {
    meta = readSafetensorsMeta(resume);
  } catch (e) {
    throw new VitrineError(`${what}: not a checkpoint (${e.message})`, e.status || -3);
  }
  const c = runFromCheckpoint(meta, what);
  const run = c.run;
  // the engine's part (train_config, step, rng, the CRC-32s) checked before data or a model are made for it
  try {
    vt.checkTrainState(resume);
  } catch (e) {
    throw new VitrineError(`${what}: ${e.message}`, e.status || -1);
  }
  // the policy: the one asked for, else the state's (what the engine wrote), else the run's
  const policyField = o.policy
    ? null
    : c.policy != null
      ? 'grad_checkpointing'
      : run.policy != null
        ? `${objectiveNamed(run.objective).runKey}.policy`
        : null;
  run.policy = o.policy || c.policy || run.policy || OPTIONS.policy.default;
  return { run, resume, policyField };
}

// The run's data: its sources, the split (a held-out fraction, or held-out data), its classes
// checked when the objective trains on labels (against a resumed run's): { train, valSource,
// trainIdx, valIdx, classes }.
async function openData(o, obj, resumed, warn, cli, signal) {
  const srcOpts = {
    maxPixels: o.maxPixels,
    signal,
    urlStallSeconds: o.urlStallSeconds ?? undefined,
    urlTimeoutSeconds: o.urlTimeoutSeconds ?? undefined,
    onWarning: warn,
    raise: cli ? '--max-image-mp raises it' : 'maxPixels raises it',
  };
  const train = await openSource(o.data, { ...srcOpts, what: nameOf('data', cli) });
  let valSource = null,
    trainIdx,
    valIdx = null;
  if (o.val != null && typeof o.val === 'object') {
    valSource = await openSource(o.val, { ...srcOpts, what: nameOf('val', cli) });
    trainIdx = Int32Array.from({ length: train.n }, (_, i) => i);
    valIdx = Int32Array.from({ length: valSource.n }, (_, i) => i);
  } else {
    // the held-out share: the resumed run's (what its data order was made of), the one given, the objective's
    const f =
      typeof resumed?.val === 'number' ? resumed.val : typeof o.val === 'number' ? o.val : runDefault(obj, 'val');
    const sp = splitFraction(train.n, f || 0);
    trainIdx = sp.train;
    if (sp.val.length) {
      valSource = train;
      valIdx = sp.val;
    }
  }
  const trainMax = resumed ? resumed.trainMax : o.trainMax;
  if (trainMax) trainIdx = trainIdx.subarray(0, trainMax);
  if (o.valMax && valIdx) valIdx = valIdx.subarray(0, o.valMax);
  if (!trainIdx.length)
    throw new DataError(
      `${train.name}: no training images (${train.n} in all, ${valIdx ? valIdx.length : 0} held out)`,
    );
  if (obj.labels) checkClasses(train, valSource, resumed, o.resumeName);
  const n = resumed ? resumed[obj.countKey] : null;
  if (n != null && n !== trainIdx.length)
    throw new DataError(
      `the run trained on ${n} images; ${train.name} now gives ${trainIdx.length}: the data order would differ`,
    );
  return { train, valSource, trainIdx, valIdx, classes: train.classes };
}

// A run on labels: its data has 2 classes or more, held-out data the same classes, a resumed run
// the classes (and head) it trained on.
function checkClasses(train, valSource, resumed, resumeName) {
  const classes = train.classes;
  if (!train.labels) {
    const names = train.classNames || [];
    throw new DataError(
      `${train.name}: ${names.length === 1 ? `one class (${names[0]}); a classifier needs at least 2` : 'no classes'} (a folder needs a sub-folder of images per class; other data: labels)`,
    );
  }
  if (classes.length < 2)
    throw new DataError(`${train.name}: one class (${classes[0]}); a classifier needs at least 2`);
  if (
    valSource &&
    valSource !== train &&
    valSource.classes &&
    JSON.stringify(valSource.classes) !== JSON.stringify(classes)
  )
    throw new DataError(
      `val: its classes (${valSource.classes.join(', ')}) are not the training data's (${classes.join(', ')})`,
    );
  if (valSource && !valSource.labels) throw new DataError(`val: ${valSource.name} has no labels`);
  const nc = resumed && resumed.spec.config ? resumed.spec.config.num_classes : classes.length; // the head the checkpoint's spec makes
  if (nc !== classes.length)
    throw new DataError(
      `${resumeName || 'resume'}: the run trained on ${nc} classes, ${train.name} has ${classes.length}`,
    );
  if (resumed && resumed.classes && JSON.stringify(resumed.classes) !== JSON.stringify(classes))
    throw new DataError(
      `the run trained on the classes ${resumed.classes.join(', ')}; the data now has ${classes.join(', ')}`,
    );
}

// A new run's settings from its options (the objective's defaults where none is given): what its
// checkpoint keeps (data: openData's).
function newRun(o, obj, { train, trainIdx }, cli = false) {
  const n = trainIdx.length,
    batch = o.batch ?? runDefault(obj, 'batch'),
    gradAccum = o.gradAccum ?? OPTIONS.gradAccum.default;
  const perEpoch = n / (batch * gradAccum);
  const steps = o.steps ?? (o.epochs != null ? Math.max(1, Math.ceil(o.epochs * perEpoch)) : null);
  if (!(Number.isInteger(steps) && steps >= 1)) throw new VitrineError('steps: give steps or epochs', -1);
  const warmup =
    o.warmup ?? (o.warmupEpochs != null ? Math.round(o.warmupEpochs * perEpoch) : Math.round(steps * WARMUP_SHARE));
  const run = {
    preset: typeof o.model === 'string' ? o.model : o.model == null && o.config == null ? 'fmnist-p7-mlp2' : null,
    batch,
    steps,
    lr: o.lr ?? defaultLr(obj, batch * gradAccum),
    warmup,
    seed: String(o.seed ?? OPTIONS.seed.default),
    policy: o.policy || OPTIONS.policy.default,
    data: train.name,
    ...o.runInfo,
  };
  if (gradAccum !== 1) run.gradAccum = gradAccum;
  // the schedule's floor under its peak (the engine's rule), named here as the caller gave it
  if (o.minLr > run.lr)
    throw new OptionError(
      nameOf('minLr', cli),
      `${o.minLr} is above the peak learning rate ${run.lr}${o.lr == null ? ` (the default ${nameOf('lr', cli)} at ${batch * gradAccum} images a step)` : ` (${nameOf('lr', cli)})`}`,
    );
  if (o.minLr) run.minLr = o.minLr;
  if (o.imgSize != null) run.imgSize = o.imgSize;
  const augment = o.augment != null ? augmentText(parseAugment(o.augment)) : undefined;
  Object.assign(run, obj.settings({ ...o, augment }));
  if (o.trainMax != null && !own(run, 'trainMax')) run.trainMax = o.trainMax; // (a resumed run reads as many)
  if (typeof o.val === 'number') run.val = o.val; // (and holds out as many)
  if (o.epochs != null) run.epochs = o.epochs;
  return run;
}
/** A new run's warm-up when none is given: this share of its steps. */
const WARMUP_SHARE = 0.05;

// The checkpointing policy: a refusal names the option, or the checkpoint's field it came from.
function setPolicy(model, policy, policyField, resumeName) {
  try {
    model.setGradCheckpointing(policy);
  } catch (e) {
    if (policyField)
      throw Object.assign(
        new VitrineError(`${resumeName || 'resume'}: damaged checkpoint metadata: ${policyField}: ${e.message}`, -3),
        { field: policyField },
      );
    throw Object.assign(new VitrineError(e.message, e.status || -1), { field: 'policy' });
  }
}

// a macrotask boundary: messages (abort, pause, predict) get in between steps
const yieldNow =
  typeof setImmediate === 'function'
    ? () => new Promise((r) => setImmediate(r))
    : () =>
        new Promise((r) => {
          const ch = new MessageChannel();
          ch.port1.onmessage = () => r();
          ch.port2.postMessage(0);
        });
