// classify.js: fine-tuning to labels -- timm's VisionTransformer with num_classes and its head,
// trained with cross-entropy (timm's label smoothing) by the engine (src/classify.c); the run is
// web/train/session.js's. For the loop, the Node CLI (`vitrine train --objective classify`, `vitrine
// predict`) and the browser demo: no file I/O and no Node modules here.
//
//   CLASSIFY_DEFAULTS   the training settings (lr, weight decay, label smoothing, clipping, pooling)
//   classifyTrainerOptions   trainerInit options of a run (seeds: init S, trainer S+1, data S+2)
//   classifierSpec      the model: a preset's encoder (or a timm config) + num_classes + pooling
//   predictTop          softmax of the logits -> the top classes with probabilities
import { TRAIN_PRESETS } from '../presets.js';
import { FORMATS } from '../../formats/metadata.js';

/** The training settings of a classifier run, for the CLI and the demo alike: AdamW at lr with
 * weight decay, gradients clipped at norm clipNorm, timm's label smoothing, and the pooling of
 * timm's MAE fine-tuning (global_pool 'avg': the mean of the patch tokens, fc_norm): an MAE
 * encoder never trains its [CLS] token. lr 2e-3 with avg pooling: the settings of the Fashion-MNIST
 * runs that reached 90% (README; [CLS] at 1e-3, the old default, was only run from random init). */
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
    const c = typeof config === 'string' ? JSON.parse(config) : config;
    encoder = { ...(c.encoder || c) };
  } else if (TRAIN_PRESETS[preset]) {
    encoder = { ...TRAIN_PRESETS[preset].encoder };
  } else {
    throw new Error(`classifier preset '${preset}': use ${Object.keys(TRAIN_PRESETS).join(', ')} or --config`);
  }
  return { kind: 'timm', config: { ...encoder, num_classes: numClasses, global_pool: pool } }; // timm kwargs
}

/** Softmax of one row of logits -> [{ index, name, p }] sorted by probability, the first k. */
export function predictTop(z, names, k = 3) {
  let mx = -Infinity;
  for (const v of z) mx = Math.max(mx, v);
  let s = 0;
  const e = Array.from(z, (v) => {
    const x = Math.exp(v - mx);
    s += x;
    return x;
  });
  return e
    .map((x, i) => ({ index: i, name: names && names[i] != null ? names[i] : String(i), p: x / s }))
    .sort((a, b) => b.p - a.p || a.index - b.index)
    .slice(0, k);
}
