// classify.js: fine-tuning to labels as a training objective -- timm's VisionTransformer with
// num_classes and its head, trained with cross-entropy (timm's label smoothing) by the engine
// (src/classify.c): the model (a train preset's encoder, a timm architecture, a config, or the
// encoder a vitrine encoder file states), its settings, what a checkpoint keeps, and what the run
// makes (a classifier file with its class names), measures (held-out top-1, confusion) and answers
// (predict). For the loop, the Node CLI (`vitrine train --objective classify`, `vitrine predict`)
// and the browser demo: no file I/O and no Node modules here.
//
//   CLASSIFY_DEFAULTS   the training settings (lr, weight decay, label smoothing, clipping, pooling)
//   classifyTrainerOptions   trainerInit options of a run (seeds: init S, trainer S+1, data S+2)
//   classifierSpec      the model: a preset's encoder (or a timm config) + num_classes + pooling
//   predictTop          softmax of the logits -> the top classes (web/runtime/classifier.js's)
import { TRAIN_PRESETS } from '../presets.js';
import { FORMATS, MAX_CLASSES, checkEncoder, MetadataError, object, optional, show } from '../../formats/metadata.js';
import { channelStats } from '../../formats/images.js';
import { predictTop, classifierBatch } from '../../runtime/classifier.js';
import { pretrainedCfg } from '../../formats/pretrained.js';
import { withMetadata } from '../../formats/safetensors.js';
import { timmSpec } from '../../runtime/engine.js';
import { VitrineError } from '../../errors.js';
import { number, word, whole, ownValue, MAX_IMAGES } from '../options.js';
import { isTrainPreset, encoderOverrides, configObject } from './self-supervised.js';

/** The training settings of a classifier run, for the CLI and the demo alike: AdamW at lr with
 * weight decay, gradients clipped at norm clipNorm, timm's label smoothing, and the pooling of
 * timm's MAE fine-tuning (global_pool 'avg': the mean of the patch tokens, fc_norm): an MAE
 * encoder never trains its [CLS] token. lr 2e-3 with avg pooling: the settings of the Fashion-MNIST
 * runs that reached 90% (README; [CLS] at 1e-3, the old default, was only run from random init). */
export { predictTop };

export const CLASSIFY_DEFAULTS = { lr: 2e-3, weightDecay: 0.05, labelSmoothing: 0.1, clipNorm: 1.0, pool: 'avg' };
/** trainerInit's options of a classifier run (the Session's, and vitrine trace's step): lightly's
 * cosine schedule after `warmup` linear steps over `steps`; the trainer's seed is the run's seed + 1
 * (initWeights takes the seed, the data order seed + 2). seed: a number, bigint or decimal string. */
export function classifyTrainerOptions({
  lr = CLASSIFY_DEFAULTS.lr,
  warmup,
  steps,
  weightDecay = CLASSIFY_DEFAULTS.weightDecay,
  labelSmoothing = CLASSIFY_DEFAULTS.labelSmoothing,
  seed,
}) {
  return {
    lr,
    warmupSteps: warmup,
    totalSteps: steps,
    weightDecay,
    clipNorm: CLASSIFY_DEFAULTS.clipNorm,
    labelSmoothing,
    seed: BigInt(seed) + 1n,
  };
}
/** The `format` of a classifier file's vitrine_classifier metadata (class names, spec, img, chans). */
export const CLASSIFIER_FORMAT = FORMATS.classifier;

/** The classifier createModel takes: kind timm, the preset's encoder (or config.encoder) with
 * num_classes and global_pool ('token': the [CLS] token, as timm's default and lightly's MAE
 * encoder; 'avg': the mean of the patch tokens with fc_norm, as timm's MAE fine-tuning). */
export function classifierSpec({ preset = 'fmnist', config = null, numClasses, pool = 'token' }) {
  if (!(numClasses >= 2)) throw new Error(`a classifier needs at least 2 classes, got ${numClasses}`);
  let encoder;
  if (config != null) {
    const c = configObject(config); // { encoder: kwargs } or the kwargs
    encoder = { ...(c.encoder ?? c) };
  } else if (isTrainPreset(preset)) {
    encoder = { ...ownValue(TRAIN_PRESETS, preset).encoder };
  } else {
    throw new Error(`classifier preset '${preset}': use ${Object.keys(TRAIN_PRESETS).join(', ')} or --config`);
  }
  return { kind: 'timm', config: { ...encoder, num_classes: numClasses, global_pool: pool } }; // timm kwargs
}

/** An encoder file's timm_kwargs (web/formats/metadata.js checkEncoder: a damaged entry names its
 * field, "<name>: damaged encoder metadata: timm_kwargs...") without what the classifier's head
 * takes from the data and pool; null when the file has none (a timm / lightly state_dict). */
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

// A classifier's pooling: timm's default ([CLS], 'token') for a timm architecture (fine-tuning its
// supervised weights as timm does), else timm's MAE fine-tuning's ('avg' + fc_norm: CLASSIFY_DEFAULTS).
const defaultPool = (model) => (typeof model === 'string' && !isTrainPreset(model) ? 'token' : CLASSIFY_DEFAULTS.pool);

const POOL = {
  flag: 'pool',
  value: 'token|avg',
  type: word('token', 'avg'),
  run: 'always',
  help: "[CLS] token, or mean of patch tokens + fc_norm (default avg; a timm architecture:\ntoken, timm's default)",
};
const LABEL_SMOOTHING = {
  flag: 'label-smoothing',
  value: 'S',
  type: number(0, 1, { open: true }),
  run: 'always',
  help: "timm's LabelSmoothingCrossEntropy smoothing (default 0.1)",
};

/** The classifier objective (web/train/objectives/index.js says what each field is). */
export default {
  name: 'classify',
  summary: "fine-tunes timm's VisionTransformer to labels (cross-entropy, label smoothing)",
  labels: true,
  runKey: 'vitrine_classify',
  countKey: 'trainN',
  report: 'classifier',
  torch: {
    module: 'timm.VisionTransformer',
    encoder: (mc) => mc,
    parts: () => ({}),
    loss: (tc) => ({ kind: 'cross_entropy', label_smoothing: Math.fround(tc.label_smoothing ?? 0) }),
    lossRanges: { label_smoothing: [0, 1] },
    // the classifier's model file also loads into timm as it is
    weightsMeta: (model) => ({ timm_kwargs: JSON.stringify(model.timm_kwargs) }),
  },
  defaults: {
    batch: 128,
    steps: 3500,
    lr: CLASSIFY_DEFAULTS.lr,
    weightDecay: CLASSIFY_DEFAULTS.weightDecay,
    labelSmoothing: CLASSIFY_DEFAULTS.labelSmoothing,
    pool: CLASSIFY_DEFAULTS.pool,
    val: 0.2,
  },
  options: { pool: POOL, labelSmoothing: LABEL_SMOOTHING },
  runRules: {
    weightDecay: number(0, 1000).check,
    trainMax: optional(whole(1, MAX_IMAGES).check),
    trainN: optional(whole(1, MAX_IMAGES).check),
    config: optional(object()),
    spec: object(),
  },
  /** A classifier run's spec: a config with a head of 2.. classes and the run's pooling. */
  checkSpec(spec, run, key) {
    if (!spec.config) throw new MetadataError(`${key}.spec.config`, 'missing (a classifier run states its config)');
    const nc = spec.config.num_classes;
    if (!(Number.isInteger(nc) && nc >= 2 && nc <= MAX_CLASSES))
      throw new MetadataError(
        `${key}.spec.config.num_classes`,
        `${show(nc)} is not a whole number in 2..${MAX_CLASSES}`,
      );
    if (spec.config.global_pool !== run.pool)
      throw new MetadataError(
        `${key}.spec.config.global_pool`,
        `${show(spec.config.global_pool)} is not the run's pool ${show(run.pool)}`,
      );
  },
  /** The model: a timm architecture (timm's create_model with num_classes, global_pool and
   * imgSize / patchSize / inChans), a train preset's encoder or a config (timm kwargs), or -- no
   * model asked for -- the encoder the weights' timm_kwargs state (a vitrine encoder file; then
   * ctx.run.preset is null); a head of one output per class. */
  spec(o, { classes = ['a', 'b'], weights = null, run = null } = {}) {
    const arch = typeof o.model === 'string' ? o.model : null,
      over = encoderOverrides(o),
      pool = o.pool || defaultPool(o.model),
      numClasses = classes.length;
    const kw = o.model == null && o.config == null && weights ? encoderKwargs(weights.meta, weights.name) : null;
    if (kw) {
      if (run) run.preset = null;
      return classifierSpec({ config: { encoder: kw }, numClasses, pool });
    }
    // a timm architecture with config's timm kwargs over it: timm's create_model(name, **kwargs)
    if (arch && !isTrainPreset(arch))
      return timmSpec(arch, { ...timmKwargs(o.config), ...over, num_classes: numClasses, global_pool: pool });
    const config = o.config != null ? o.config : arch ? null : o.model && typeof o.model === 'object' ? o.model : null;
    const s = classifierSpec({ preset: arch || 'fmnist-p7-mlp2', config, numClasses, pool });
    return { ...s, config: { ...s.config, ...over } };
  },
  settings(o) {
    return {
      config: o.config ?? null,
      pool: o.pool || defaultPool(o.model),
      weightDecay: o.weightDecay ?? CLASSIFY_DEFAULTS.weightDecay,
      labelSmoothing: o.labelSmoothing ?? CLASSIFY_DEFAULTS.labelSmoothing,
      augment: o.augment ?? 'none',
      trainMax: o.trainMax ?? null,
    };
  },
  trainer(run) {
    return classifyTrainerOptions({
      lr: run.lr,
      warmup: run.warmup,
      steps: run.steps,
      weightDecay: run.weightDecay,
      labelSmoothing: run.labelSmoothing,
      seed: run.seed,
    });
  },
  /** The classifier: timm keys, head; class names, spec, normalisation in the metadata (what
   * `vitrine predict` and loadClassifier read). */
  weights(session) {
    const m = session.model;
    const meta = {
      format: CLASSIFIER_FORMAT,
      classes: session.classes,
      spec: session.run.spec,
      img: m.dims.img,
      chans: m.dims.chans,
    };
    return withMetadata(m.saveSafetensors(), {
      vitrine_classifier: JSON.stringify(meta),
      pretrained_cfg: pretrainedCfg({
        ...channelStats(m.dims.chans, session.stats),
        chans: m.dims.chans,
        img: m.dims.img,
        numClasses: session.classes.length,
      }),
    });
  },
  /** Top-1 and the confusion matrix on the held-out images (chunks of `chunk`). */
  async evaluate(session, chunk = 250) {
    if (!session.valIdx || !session.valIdx.length) return null;
    const m = session.model,
      K = session.classes.length,
      confusion = Array.from({ length: K }, () => new Array(K).fill(0));
    const src = session.valSource,
      idx = session.valIdx,
      t0 = now();
    let correct = 0;
    await session.sync(); // (the WebGPU backend: the newest state)
    for (let s = 0; s < idx.length; s += chunk) {
      const part = idx.subarray(s, Math.min(idx.length, s + chunk));
      const z = m.timmForward(await session.valBatches.batch(part)),
        C = z.shape[1];
      for (let q = 0; q < part.length; q++) {
        let best = 0;
        for (let c = 1; c < C; c++) if (z.data[q * C + c] > z.data[q * C + best]) best = c;
        const y = src.labels[part[q]];
        confusion[y][best]++;
        if (best === y) correct++;
      }
    }
    return { step: session.step, top1: correct / idx.length, n: idx.length, confusion, seconds: (now() - t0) / 1000 };
  },
  /** The top classes of images: Float32Array NCHW (normalised), or images of any size through the
   * pixel pipeline (web/runtime/classifier.js classifierBatch: every image source of a page). Per
   * image [{ index, name, p }]. */
  async predict(session, images, { topk = 3 } = {}) {
    const x = await classifierBatch(images, session.model.dims, session.stats);
    await session.sync(); // (the WebGPU backend: the newest state)
    const z = session.model.timmForward(x),
      C = z.shape[1];
    return Array.from({ length: z.shape[0] }, (_, b) =>
      predictTop(z.data.subarray(b * C, (b + 1) * C), session.classes, Math.min(topk, C)),
    );
  },
};

const now = () => (typeof performance !== 'undefined' ? performance.now() : Date.now());
