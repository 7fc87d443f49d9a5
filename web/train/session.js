// session.js: the one training loop of vitrine. A Session is a run set up (model, data,
// normalisation, trainer, the checkpoint it resumes), stepping on request: the Trainer's worker
// (web/train/trainer.js: Node worker thread, browser Web Worker), the CLI through the Trainer, and the
// demo's worker all run this. No file I/O and no Node module here (web/train/datasets.js opens Node's
// folders itself).
//
// The run's settings (`run`, below) are kept in every checkpoint's metadata -- `vitrine_run` for
// MAE / AIM, `vitrine_classify` for a classifier, the keys vitrine has always written -- so that a
// checkpoint alone resumes bit for bit: the data order is a seeded permutation per epoch found
// again from the step count, augmentation is drawn from (seed, step, slot), the masks from the
// engine's generator in the state. Seeds: initialisation S, trainer (masks) S+1, data order S+2,
// augmentation S+3.
import { TRAIN_PRESETS, modelSpec, encoderPrefix } from './presets.js';
import { DataOrder } from './data-order.js';
import {
  classifierSpec,
  classifyTrainerOptions,
  CLASSIFY_DEFAULTS,
  CLASSIFIER_FORMAT,
  predictTop,
} from './objectives/classify.js';
import { openSource, splitFraction, Batches, DataError, DEFAULT_CACHE_BYTES } from './datasets.js';
import { parseAugment, augmentText } from './augment.js';
import { runFromCheckpoint, RUN_KEY } from './checkpoint.js';
import { readWeights, resolveNormalization, pretrainedCfg, TIMM_PRETRAINED } from '../formats/pretrained.js';
import { channelStats, decodeBlob, bitmapPixels, resizeCrop, makeBatch } from '../formats/images.js';
import { withMetadata, readSafetensorsMeta } from '../formats/safetensors.js';
import { checkEncoder, MetadataError } from '../formats/metadata.js';
import { timmSpec } from '../runtime/engine.js';
import { VitrineError } from '../errors.js';

export { runFromCheckpoint, RUN_KEY };
export const OBJECTIVES = ['mae', 'aim', 'classify'];
/** Defaults of a run (the CLI's): MAE / AIM lr scales with the batch (defaultLr). */
export const RUN_DEFAULTS = {
  batch: { mae: 64, aim: 64, classify: 128 },
  policy: 'block',
  maskRatio: 0.5,
  seed: '0',
  gradAccum: 1,
  warmupShare: 0.05,
  augment: 'none',
  valFraction: 0.2,
};
// peak learning rate: lightly's MAE 1.5e-4 * batch / 256 and AIM 1e-3 * batch / 4096 are for
// hundreds of epochs; a short run needs more (measured on Fashion-MNIST: docs/experiments.md)
export const defaultLr = (objective, batch) =>
  objective === 'classify' ? CLASSIFY_DEFAULTS.lr : ((objective === 'mae' ? 2e-3 : 1e-3) * batch) / 64;

const now = () => (typeof performance !== 'undefined' ? performance.now() : Date.now());

// A classifier's pooling: timm's default ([CLS], 'token') for a timm architecture (fine-tuning its
// supervised weights as timm does), else timm's MAE fine-tuning's ('avg' + fc_norm: CLASSIFY_DEFAULTS).
const defaultPool = (model) => (typeof model === 'string' && !TRAIN_PRESETS[model] ? 'token' : CLASSIFY_DEFAULTS.pool);

// config given with a timm architecture: timm kwargs (an object, or its JSON text) over it
function timmKwargs(config) {
  if (config == null) return {};
  let v = config;
  if (typeof v === 'string')
    try {
      v = JSON.parse(v);
    } catch (e) {
      throw new VitrineError(`config: not JSON (${e.message})`, -1);
    }
  if (!v || typeof v !== 'object' || Array.isArray(v))
    throw new VitrineError('config: timm kwargs over the architecture (an object), e.g. { depth: 6 }', -1);
  return v;
}

/** The model a new run trains (the engine's spec): the objective's model on a train preset, a timm
 * architecture (timm's create_model with imgSize / patchSize; a classifier's with config's timm kwargs
 * over it), or a config; a classifier's head has
 * one output per class (classes: their names; the CLI checks the spec before the data are read,
 * with a stand-in). (Classify from an encoder file: its timm_kwargs, Session._open.) */
export function runSpec(o, classes = ['a', 'b']) {
  const arch = typeof o.model === 'string' ? o.model : null;
  const over = { img_size: o.imgSize, patch_size: o.patchSize, in_chans: o.inChans };
  Object.keys(over).forEach((k) => over[k] === undefined && delete over[k]);
  if (o.objective === 'classify') {
    const pool = o.pool || defaultPool(o.model),
      numClasses = classes.length;
    // a timm architecture with config's timm kwargs over it: timm's create_model(name, **kwargs)
    if (arch && !TRAIN_PRESETS[arch])
      return timmSpec(arch, { ...timmKwargs(o.config), ...over, num_classes: numClasses, global_pool: pool });
    const config = o.config != null ? o.config : arch ? null : o.model && typeof o.model === 'object' ? o.model : null;
    const s = classifierSpec({ preset: arch || 'fmnist-p7-mlp2', config, numClasses, pool });
    return { ...s, config: { ...s.config, ...over } };
  }
  if (arch && !TRAIN_PRESETS[arch])
    return { kind: o.objective, preset: arch, config: Object.keys(over).length ? over : null };
  const s = modelSpec(o.objective, {
    preset: arch || 'fmnist-p7-mlp2',
    config: o.config != null ? o.config : o.model && typeof o.model === 'object' ? o.model : null,
  });
  if (Object.keys(over).length) s.config = { ...s.config, encoder: { ...s.config.encoder, ...over } };
  return s;
}

/**
 * One run, set up. Session.open(vt, options, hooks) -> Session; then loop() steps it. Options (the
 * Trainer's, data descriptions as web/train/datasets.js reads them):
 *   objective 'mae' | 'aim' | 'classify'; model: a train preset (fmnist-p7-mlp2, ...), a timm
 *   architecture (vit_tiny_patch16_224, ...: timm's create_model with imgSize, patchSize), or the
 *   engine's { encoder, ... } / timm kwargs (config); pool (classify: 'avg' | 'token');
 *   weights: { bytes, name } or what readWeights takes (the run's start; strict: weightsStrict);
 *   data, val (a description, or a fraction held out), trainMax, valMax;
 *   steps | epochs, batch, gradAccum, lr, minLr, warmup | warmupEpochs, weightDecay, labelSmoothing,
 *   maskRatio, policy, seed, augment, mean / std, stopAt, checkpointEvery, evalEvery,
 *   resume: checkpoint bytes (the run's settings come from it; policy may change);
 *   runInfo: fields kept in the checkpoint beside the run's (the CLI's data path, --init file);
 *   cacheBytes, maxPixels, frozen (names not trained).
 * hooks: { log(text), onLoad(progress) }.
 */
export class Session {
  static async open(vt, options, hooks = {}) {
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
    this.model = null;
    this.lossLast = null;
    // the WebGPU backend (createVitrine({ backend: 'webgpu' })): each step replayed on the GPU
    // (Model.trainStepAsync), the newest state left there until sync(); `stepping` is the GPU
    // operation in flight (a step or a sync), one at a time
    this.gpu = !!(vt.backend && vt.backend.name === 'webgpu');
    this.stepping = null;
  }

  async _open(o) {
    let run,
      resume = null,
      policyField = null;
    if (o.resume) {
      resume = o.resume instanceof Uint8Array ? o.resume : new Uint8Array(o.resume);
      const what = o.resumeName || 'the checkpoint',
        c = runFromCheckpoint(readSafetensorsMeta(resume), what);
      run = c.run;
      // the engine's part (train_config, step, rng, the CRC-32s) checked before data or a model are made for it
      try {
        this.vt.checkTrainState(resume);
      } catch (e) {
        throw new VitrineError(`${what}: ${e.message}`, e.status || -1);
      }
      // the policy: the one asked for, else the state's (what the engine wrote), else the run's
      policyField = o.policy
        ? null
        : c.policy != null
          ? 'grad_checkpointing'
          : run.policy != null
            ? `${RUN_KEY[run.objective]}.policy`
            : null;
      run.policy = o.policy || c.policy || run.policy || RUN_DEFAULTS.policy;
    } else {
      if (!OBJECTIVES.includes(o.objective))
        throw new VitrineError(`objective ${JSON.stringify(o.objective)}: use ${OBJECTIVES.join(', ')}`, -1);
      run = { objective: o.objective };
    }
    const objective = run.objective,
      cls = objective === 'classify';
    this.objective = objective;
    this.cacheBytes = o.cacheBytes ?? DEFAULT_CACHE_BYTES;

    // data: the sources, their classes, the split
    const srcOpts = { maxPixels: o.maxPixels, onWarning: (m) => this.log(`warning: ${m}`) };
    const train = await openSource(o.data, srcOpts);
    let valSource = null,
      trainIdx,
      valIdx = null;
    if (o.val != null && typeof o.val === 'object') {
      valSource = await openSource(o.val, srcOpts);
      trainIdx = Int32Array.from({ length: train.n }, (_, i) => i);
      valIdx = Int32Array.from({ length: valSource.n }, (_, i) => i);
    } else {
      const f = typeof o.val === 'number' ? o.val : cls ? RUN_DEFAULTS.valFraction : 0;
      const sp = splitFraction(train.n, f);
      trainIdx = sp.train;
      if (sp.val.length) {
        valSource = train;
        valIdx = sp.val;
      }
    }
    const trainMax = resume ? run.trainMax : o.trainMax;
    if (trainMax) trainIdx = trainIdx.subarray(0, trainMax);
    if (o.valMax && valIdx) valIdx = valIdx.subarray(0, o.valMax);
    if (!trainIdx.length)
      throw new DataError(
        `${train.name}: no training images (${train.n} in all, ${valIdx ? valIdx.length : 0} held out)`,
      );
    const classes = train.classes;
    if (cls) {
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
      const nc = resume && run.spec.config ? run.spec.config.num_classes : classes.length; // the head the checkpoint's spec makes
      if (nc !== classes.length)
        throw new DataError(
          `${o.resumeName || 'the checkpoint'}: the run trained on ${nc} classes, ${train.name} has ${classes.length}`,
        );
      if (resume && run.classes && JSON.stringify(run.classes) !== JSON.stringify(classes))
        throw new DataError(
          `the run trained on the classes ${run.classes.join(', ')}; the data now has ${classes.join(', ')}`,
        );
    }
    const nKey = cls ? 'trainN' : 'dataN';
    if (resume && run[nKey] != null && run[nKey] !== trainIdx.length)
      throw new DataError(
        `the run trained on ${run[nKey]} images; ${train.name} now gives ${trainIdx.length}: the data order would differ`,
      );

    // the run's settings (a new run: from the options)
    if (!resume) {
      const batch = o.batch ?? RUN_DEFAULTS.batch[objective],
        gradAccum = o.gradAccum ?? RUN_DEFAULTS.gradAccum;
      const perEpoch = trainIdx.length / (batch * gradAccum);
      const steps = o.steps ?? (o.epochs != null ? Math.max(1, Math.ceil(o.epochs * perEpoch)) : null);
      if (!(Number.isInteger(steps) && steps >= 1)) throw new VitrineError('steps: give steps or epochs', -1);
      const warmup =
        o.warmup ??
        (o.warmupEpochs != null ? Math.round(o.warmupEpochs * perEpoch) : Math.round(steps * RUN_DEFAULTS.warmupShare));
      Object.assign(run, {
        preset: typeof o.model === 'string' ? o.model : o.model == null && o.config == null ? 'fmnist-p7-mlp2' : null,
        batch,
        steps,
        lr: o.lr ?? defaultLr(objective, batch * gradAccum),
        warmup,
        seed: String(o.seed ?? RUN_DEFAULTS.seed),
        policy: o.policy || RUN_DEFAULTS.policy,
        data: train.name,
        ...o.runInfo,
      });
      if (gradAccum !== 1) run.gradAccum = gradAccum;
      if (o.minLr) run.minLr = o.minLr;
      if (o.imgSize != null) run.imgSize = o.imgSize;
      if (cls)
        Object.assign(run, {
          config: o.config ?? null,
          pool: o.pool || defaultPool(o.model),
          weightDecay: o.weightDecay ?? CLASSIFY_DEFAULTS.weightDecay,
          labelSmoothing: o.labelSmoothing ?? CLASSIFY_DEFAULTS.labelSmoothing,
          augment: augmentText(parseAugment(o.augment ?? RUN_DEFAULTS.augment)),
          trainMax: o.trainMax ?? null,
        });
      else {
        run.maskRatio = o.maskRatio ?? RUN_DEFAULTS.maskRatio;
        if (o.weightDecay != null) run.weightDecay = o.weightDecay;
        if (o.augment != null && o.augment !== 'none') run.augment = augmentText(parseAugment(o.augment));
      }
      if (o.epochs != null) run.epochs = o.epochs;
    }
    run[nKey] = trainIdx.length;
    if (!run.wasm) run.wasm = this.vt.build; // a resumed run keeps its bits only in the build that trained it
    if (cls) run.classes = classes;
    this.run = run;

    // the model: created, initialised (seed), started from the weights, the trainer, the state
    const seed = BigInt(run.seed),
      vt = this.vt;
    let weights = null;
    if (!resume && o.weights != null) {
      weights = await readWeights(o.weights.bytes || o.weights, {
        onProgress: this.onLoad,
        name: o.weights.name || o.weightsName,
      });
      run.init = run.init || weights.name;
    }
    if (!run.spec) {
      let spec = o.spec || runSpec(o, classes || []);
      const kw =
        cls && !o.spec && o.model == null && o.config == null && weights
          ? encoderKwargs(weights.meta, weights.name)
          : null;
      if (kw) {
        // an encoder of vitrine train: its architecture
        spec = classifierSpec({ config: { encoder: kw }, numClasses: classes.length, pool: run.pool });
        run.preset = null;
      }
      run.spec = spec;
    }
    const model = (this.model = vt.createModel(run.spec));
    this.arch = run.spec.preset || (typeof run.preset === 'string' && TIMM_PRETRAINED[run.preset] ? run.preset : null);
    try {
      model.setGradCheckpointing(run.policy);
    } catch (e) {
      // named: the option, or the checkpoint's field
      if (policyField)
        throw Object.assign(
          new VitrineError(
            `${o.resumeName || 'the checkpoint'}: damaged checkpoint metadata: ${policyField}: ${e.message}`,
            -3,
          ),
          { field: policyField },
        );
      throw Object.assign(new VitrineError(e.message, e.status || -1), { field: 'policy' });
    }
    model.initWeights(seed);
    const frozenNames = run.frozen || o.frozen;
    if (frozenNames) {
      // exactly the run's: weights it started from may have made a frozen one trainable
      model.setRequiresGrad('', true);
      for (const name of frozenNames) model.setRequiresGrad(name, false);
    }
    this.initReport = null;
    if (weights) {
      try {
        this.initReport = { ...model.initFrom(weights.bytes, { strict: !!o.weightsStrict }), name: weights.name };
      } catch (e) {
        throw new VitrineError(`${weights.name}: ${e.message}`, e.status || -1);
      }
    }
    // normalisation: given, the weights', the architecture's (timm), ImageNet's; kept in the run
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
    this.trainerOptions = {
      ...(cls
        ? classifyTrainerOptions({
            lr: run.lr,
            warmup: run.warmup,
            steps: run.steps,
            weightDecay: run.weightDecay,
            labelSmoothing: run.labelSmoothing,
            seed,
          })
        : {
            lr: run.lr,
            warmupSteps: run.warmup,
            totalSteps: run.steps,
            seed: seed + 1n,
            maskRatio: run.maskRatio ?? 0.75,
            ...(run.weightDecay != null ? { weightDecay: run.weightDecay } : {}),
          }),
      ...(run.minLr ? { minLr: run.minLr } : {}),
      gradAccum: run.gradAccum || 1,
    };
    model.trainerInit(this.trainerOptions);
    if (resume) {
      try {
        model.loadTrainState(resume);
      } catch (e) {
        throw new VitrineError(`${o.resumeName || 'the checkpoint'}: ${e.message}`, e.status || -1);
      }
    }

    // the GPU replays one recorded step; K micro-batches sum their losses outside the recording
    if (this.gpu && (run.gradAccum || 1) > 1)
      throw Object.assign(
        new VitrineError(
          `gradAccum ${run.gradAccum}: accumulated steps do not run on the WebGPU backend (a step of K micro-batches is not one recording); use backend wasm`,
          -1,
        ),
        { field: 'gradAccum' },
      );

    // batches at the model's size, in the run's order
    const { img, chans } = model.dims;
    this.effBatch = run.batch * (run.gradAccum || 1);
    if (this.effBatch * chans * img * img * 4 > 2 ** 31)
      throw new VitrineError(
        `batch ${this.effBatch}: one batch of ${img}x${img}x${chans} images is ${((this.effBatch * chans * img * img * 4) / 2 ** 30).toFixed(1)} GiB, more than wasm memory holds`,
        -2,
      );
    this.train = train;
    this.trainIdx = trainIdx;
    this.valSource = valSource;
    this.valIdx = valIdx;
    this.classes = classes;
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
    this.startStep = model.stepCount;
    this.lossFirst = run.lossFirst ?? null;
  }

  get step() {
    return this.model.stepCount;
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
    return { images, labels: this.objective === 'classify' ? this._labels : null, indices: idx };
  }

  /** One training step: { step (done so far), loss, seconds, lr, images }. Throws the engine's
   * VitrineError on a non-finite loss (the model keeps its last good state). */
  async stepOnce() {
    const t0 = now(),
      m = this.model,
      lr = m.lr(m.stepCount);
    const { images, labels } = await this.batchAt();
    let loss;
    if (this.gpu) {
      try {
        loss = await this._gpuTurn(() =>
          labels ? m.trainStepLabelsAsync(images, labels) : m.trainStepAsync(images, this.effBatch),
        );
      } catch (e) {
        try {
          await this.sync();
        } catch {
          /* a lost device: the model is back at its last sync already */
        }
        throw e;
      }
    } else loss = labels ? m.trainStepLabels(images, labels) : m.trainStep(images, this.effBatch); // gradAccum: the engine's micro-batches
    if (this.run.lossFirst == null) this.run.lossFirst = this.lossFirst = loss;
    this.lossLast = loss;
    return { step: m.stepCount, loss, lr, seconds: (now() - t0) / 1000, images };
  }

  /** Brings the model's newest state from the GPU to wasm memory (the WebGPU backend; else
   * nothing): checkpoint(), weights(), evaluate() and predict() read it there. loop() syncs at its
   * checkpoints, evaluations and end; between steps of a loop of its own, a caller syncs first. */
  async sync() {
    if (this.gpu && this.model) await this._gpuTurn(() => this.model.sync());
  }
  async _gpuTurn(op) {
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

  /** A classifier's top-1 and confusion matrix on the held-out images (chunks of `chunk`). */
  async evaluate(chunk = 250) {
    if (this.objective !== 'classify' || !this.valIdx || !this.valIdx.length) return null;
    const m = this.model,
      K = this.classes.length,
      confusion = Array.from({ length: K }, () => new Array(K).fill(0));
    const src = this.valSource,
      idx = this.valIdx,
      t0 = now();
    let correct = 0;
    await this.sync(); // (the WebGPU backend: the newest state)
    for (let s = 0; s < idx.length; s += chunk) {
      const part = idx.subarray(s, Math.min(idx.length, s + chunk));
      const z = m.timmForward(await this.valBatches.batch(part)),
        C = z.shape[1];
      for (let q = 0; q < part.length; q++) {
        let best = 0;
        for (let c = 1; c < C; c++) if (z.data[q * C + c] > z.data[q * C + best]) best = c;
        const y = src.labels[part[q]];
        confusion[y][best]++;
        if (best === y) correct++;
      }
    }
    return { step: this.step, top1: correct / idx.length, n: idx.length, confusion, seconds: (now() - t0) / 1000 };
  }

  /** The checkpoint: the engine's training state with the run's settings (resumable bit for bit). */
  checkpoint() {
    const run = { ...this.run };
    if (this.objective !== 'classify') delete run.spec;
    return withMetadata(this.model.saveTrainState(), { [RUN_KEY[this.objective]]: JSON.stringify(run) });
  }

  /** What the run makes: a classifier (timm keys, head; class names, spec, normalisation in the
   * metadata: what `vitrine predict` reads) or the encoder (timm keys, timm_kwargs, pretrained_cfg). */
  weights() {
    const m = this.model;
    if (this.objective !== 'classify') return m.saveSafetensors({ modelPrefix: encoderPrefix(m.kind) });
    const meta = {
      format: CLASSIFIER_FORMAT,
      classes: this.classes,
      spec: this.run.spec,
      img: m.dims.img,
      chans: m.dims.chans,
    };
    return withMetadata(m.saveSafetensors(), {
      vitrine_classifier: JSON.stringify(meta),
      pretrained_cfg: pretrainedCfg({
        ...channelStats(m.dims.chans, this.stats),
        chans: m.dims.chans,
        img: m.dims.img,
        numClasses: this.classes.length,
      }),
    });
  }

  /** A classifier's top classes of images: Float32Array NCHW (normalised), or images of any size
   * through the pixel pipeline: Blob / File (decoded by the browser), ImageBitmap, { width,
   * height, data } RGBA pixels (ImageData). Returns per image [{ index, name, p }]. */
  async predict(images, { topk = 3 } = {}) {
    if (this.objective !== 'classify')
      throw new VitrineError('predict: the run trains an MAE / AIM encoder, not a classifier', -7);
    const { img, chans } = this.model.dims;
    let x = images;
    if (!(images instanceof Float32Array)) {
      const list = Array.isArray(images) ? images : [images],
        per = chans * img * img,
        px = new Uint8Array(list.length * per);
      for (let b = 0; b < list.length; b++) {
        let im = list[b];
        if (typeof Blob !== 'undefined' && im instanceof Blob) im = await decodeBlob(im);
        else if (typeof ImageBitmap !== 'undefined' && im instanceof ImageBitmap) im = bitmapPixels(im);
        if (!im || !(im.width > 0) || !(im.height > 0) || !im.data || im.data.length !== 4 * im.width * im.height)
          throw new VitrineError(
            `predict: image ${b} is not a Float32Array, Blob, ImageBitmap or RGBA pixels { width, height, data }`,
            -1,
          );
        px.set(resizeCrop(im.data, im.width, im.height, 4, img, chans), b * per);
      }
      x = makeBatch(
        { chans, size: img, pixels: px },
        Int32Array.from(list, (_, i) => i),
        null,
        this.stats,
      );
    }
    await this.sync(); // (the WebGPU backend: the newest state)
    const z = this.model.timmForward(x),
      C = z.shape[1];
    return Array.from({ length: z.shape[0] }, (_, b) =>
      predictTop(z.data.subarray(b * C, (b + 1) * C), this.classes, Math.min(topk, C)),
    );
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
        if (gone()) {
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

/** An encoder file's timm_kwargs (web/formats/metadata.js checkEncoder: a damaged entry names its field,
 * "<name>: damaged encoder metadata: timm_kwargs...") without what the classifier's head takes
 * from the data and pool; null when the file has none (a timm / lightly state_dict). */
export function encoderKwargs(meta, name) {
  let kw;
  try {
    kw = checkEncoder(meta);
  } catch (e) {
    if (e instanceof MetadataError)
      throw Object.assign(new VitrineError(`${name}: damaged encoder metadata: ${e.message}`, -3), { field: e.field });
    throw e;
  }
  if (!kw) return null;
  const { num_classes, global_pool, ...encoder } = kw; // the classifier's own come from the data and pool
  void num_classes;
  void global_pool;
  return encoder;
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
