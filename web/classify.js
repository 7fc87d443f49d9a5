// classify.js: fine-tuning to labels -- timm's VisionTransformer with num_classes and its head,
// trained with cross-entropy (timm's label smoothing) by the engine (src/classify.c). For the Node
// CLI (`vitrine train --objective classify`, `vitrine predict`) and the browser demo: no file I/O
// and no Node modules here.
//
//   CLASSIFY_DEFAULTS   the training settings (lr, weight decay, label smoothing, clipping, pooling)
//   classifyTrainerOptions   trainerInit options of a run (seeds: init S, trainer S+1, data S+2)
//   classifierSpec      the model: a preset's encoder (or a timm config) + num_classes + pooling
//   splitEval           which images train and which are held out (every 5th of a folder)
//   ClassifyRun         model + labelled data set + order: one step at a time, resumable
//   evaluate            top-1 and the confusion matrix of a held-out set
//   predictTop          softmax of the logits -> the top classes with probabilities
//   parseAugment / augmentBatch   seeded training-time augmentation (flip, shift), resumable
import { TRAIN_PRESETS, TrainingRun, hash32, seedWords } from './train.js';
import { channelStats, makeBatch } from './images.js';
import { FORMATS } from './metadata.js';

/** The training settings of a classifier run, for the CLI and the demo alike: AdamW at lr with
 * weight decay, gradients clipped at norm clipNorm, timm's label smoothing, and the pooling of
 * timm's MAE fine-tuning (global_pool 'avg': the mean of the patch tokens, fc_norm): an MAE
 * encoder never trains its [CLS] token. lr 2e-3 with avg pooling: the settings of the Fashion-MNIST
 * runs that reached 90% (README; [CLS] at 1e-3, the old default, was only run from random init). */
export const CLASSIFY_DEFAULTS = { lr: 2e-3, weightDecay: 0.05, labelSmoothing: 0.1, clipNorm: 1.0, pool: 'avg' };
/** The `format` of a classifier file's vitrine_classifier metadata (class names, spec, img, chans). */
export const CLASSIFIER_FORMAT = FORMATS.classifier;

/** trainerInit options of a classifier run: lightly's cosine schedule after `warmup` linear steps
 * over `steps`; the trainer's seed is the run's seed + 1 (initWeights takes the seed, the data
 * order seed + 2). seed: a number, bigint or decimal string. */
export function classifyTrainerOptions({ lr = CLASSIFY_DEFAULTS.lr, warmup, steps, weightDecay = CLASSIFY_DEFAULTS.weightDecay,
  labelSmoothing = CLASSIFY_DEFAULTS.labelSmoothing, seed }) {
  return { lr, warmupSteps: warmup, totalSteps: steps, weightDecay, clipNorm: CLASSIFY_DEFAULTS.clipNorm, labelSmoothing,
    seed: BigInt(seed) + 1n };
}

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

/** Train / held-out indices. Fashion-MNIST: its train and test splits (test: all 10000). A folder:
 * every 5th image (i % 5 == 4) held out, the rest trained on. */
export function splitEval(train, test) {
  const range = (n) => Int32Array.from({ length: n }, (_, i) => i);
  if (test) return { trainSet: train, trainIdx: range(train.n), evalSet: test, evalIdx: range(test.n) };
  const all = Array.from(range(train.n));
  return { trainSet: train, trainIdx: Int32Array.from(all.filter((i) => i % 5 !== 4)), evalSet: train,
    evalIdx: Int32Array.from(all.filter((i) => i % 5 === 4)) };
}

/** Augmentation settings from text: 'none', or a comma list of 'flip' (horizontal, p = 0.5) and
 * 'shift:N' (translate by -N..N pixels each way, the uncovered border black: torchvision's
 * RandomCrop(size, padding=N) + RandomHorizontalFlip, as small-image classifiers train). */
export function parseAugment(text) {
  const a = { flip: false, shift: 0 };
  if (text === 'none') return a;
  for (const part of String(text).split(',')) {
    const m = /^shift:(\d{1,2})$/.exec(part);
    if (part === 'flip') a.flip = true;
    else if (m) a.shift = Number(m[1]);
    else throw new Error(`'${text}': use none, or flip and / or shift:N (N pixels, 0..99), comma-separated`);
  }
  return a;
}
export const augmentText = (a) => (a && (a.flip || a.shift) ? [a.flip && 'flip', a.shift && `shift:${a.shift}`].filter(Boolean).join(',') : 'none');

/** Augments a normalised batch [B, C, S, S] in place. Image j of step `step` draws its flip and
 * shift from hash32(seed, step, j): nothing to save, a resumed run draws the same. The border a
 * shift uncovers is raw pixel 0 (black), normalised as the rest. */
export function augmentBatch(buf, B, chans, size, aug, seed, step) {
  if (!aug || (!aug.flip && !aug.shift)) return buf;
  const [w0, w1] = seedWords(seed), px = size * size, per = chans * px, st = channelStats(chans), n = 2 * aug.shift + 1;
  const tmp = new Float32Array(px);
  for (let j = 0; j < B; j++) {
    const h = hash32(w0, w1, step, j), flip = aug.flip && (h & 1) === 1;
    const dx = aug.shift ? ((h >>> 1) % n) - aug.shift : 0, dy = aug.shift ? ((h >>> 9) % n) - aug.shift : 0;
    if (!flip && !dx && !dy) continue;
    for (let c = 0; c < chans; c++) {
      const img = buf.subarray(j * per + c * px, j * per + (c + 1) * px), fill = -st.mean[c] / st.std[c];
      tmp.set(img);
      for (let y = 0; y < size; y++) {
        const sy = y - dy;
        for (let x = 0; x < size; x++) {
          let sx = x - dx;
          if (flip) sx = size - 1 - sx; // flip the shifted image
          img[y * size + x] = sy >= 0 && sy < size && sx >= 0 && sx < size ? tmp[sy * size + sx] : fill;
        }
      }
    }
  }
  return buf;
}

/** One classifier training run over the images `indices` of a labelled data set (TrainingRun's
 * order and position) with their labels; augment: { flip, shift } (parseAugment), drawn from
 * augmentSeed, step and slot. */
export class ClassifyRun extends TrainingRun {
  constructor({ model, dataset, indices, batch, steps, dataSeed, augment = null, augmentSeed = 0n }) {
    if (!dataset.labels) throw new Error(`data set ${dataset.name} has no labels (sub-folders = classes)`);
    super({ model, dataset, indices, batch, steps, dataSeed });
    this._lab = new Int32Array(batch);
    this.augment = augment;
    this.augmentSeed = augmentSeed;
  }
  /** The images (normalised NCHW, a buffer reused by the next call) and labels of step `step`. */
  batchAt(step = this.step) {
    const idx = this.imagesAt(step);
    makeBatch(this.dataset, idx, this._buf);
    augmentBatch(this._buf, this.batch, this.dataset.chans, this.dataset.size, this.augment, this.augmentSeed, step);
    idx.forEach((i, j) => { this._lab[j] = this.dataset.labels[i]; });
    return { images: this._buf, labels: this._lab };
  }
  /** One step: { step (done so far), loss, seconds }. Throws on a non-finite loss (state kept). */
  trainOne() {
    const t0 = performance.now();
    const { images, labels } = this.batchAt();
    const loss = this.model.trainStepLabels(images, labels);
    return { step: this.step, loss, seconds: (performance.now() - t0) / 1000 };
  }
}

/** The logits of images `indices` of ds (timm's forward, no gradient), in chunks. */
export function logits(model, ds, indices, chunk = 250) {
  let out = null, C = 0;
  for (let s = 0; s < indices.length; s += chunk) {
    const idx = indices.subarray(s, Math.min(indices.length, s + chunk));
    const z = model.timmForward(makeBatch(ds, idx));
    if (!out) { C = z.shape[1]; out = new Float32Array(indices.length * C); }
    out.set(z.data, s * C);
  }
  return { data: out, classes: C };
}

/** Top-1 accuracy and the confusion matrix (rows: true class, columns: predicted) of images
 * `indices` of ds, `chunk` images per forward (the demo: its training batch, within its budget). */
export function evaluate(model, ds, indices, numClasses, chunk = 250) {
  const { data, classes: C } = logits(model, ds, indices, chunk);
  const K = numClasses || C, confusion = Array.from({ length: K }, () => new Array(K).fill(0));
  let correct = 0;
  for (let q = 0; q < indices.length; q++) {
    let best = 0;
    for (let c = 1; c < C; c++) if (data[q * C + c] > data[q * C + best]) best = c;
    const y = ds.labels[indices[q]];
    confusion[y][best]++;
    if (best === y) correct++;
  }
  return { top1: indices.length ? correct / indices.length : NaN, n: indices.length, confusion };
}

/** Softmax of one row of logits -> [{ index, name, p }] sorted by probability, the first k. */
export function predictTop(z, names, k = 3) {
  let mx = -Infinity;
  for (const v of z) mx = Math.max(mx, v);
  let s = 0;
  const e = Array.from(z, (v) => { const x = Math.exp(v - mx); s += x; return x; });
  return e.map((x, i) => ({ index: i, name: names && names[i] != null ? names[i] : String(i), p: x / s }))
    .sort((a, b) => b.p - a.p || a.index - b.index).slice(0, k);
}
