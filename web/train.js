// train.js: what training runs are made of, for the loop (web/train-loop.js), the Node CLI
// (`vitrine train`) and the browser demo.
// No file I/O and no Node modules here: data sets are plain objects (see data.js), bytes are
// Uint8Arrays, and the caller writes files.
//
//   TRAIN_PRESETS / modelSpec()   the small default ViTs and their MAE decoder / AIM head
//   DataOrder                     seeded, resumable data order: a new permutation every epoch
//   features / knnAccuracy        lightly-style kNN evaluation of the encoder's pooled features
//   visualizeGrid                 originals / masked / reconstructions as one RGBA image
import { makeBatch, toRGBA, adapt } from './images.js';

/** Small ViTs for small images (Fashion-MNIST 28x28 grey). `fmnist`: patch 4 (7x7 = 49 patches
 * + [CLS]), embed_dim 64, depth 4, 4 heads (mlp_ratio 4); MAE decoder dim 64, depth 2, 4 heads,
 * predicting each masked patch normalised by its own mean and variance (the MAE paper's
 * norm_pix_loss: +1.4 kNN points after 1000 steps here; lightly's examples predict raw pixels);
 * AIM head hidden 128, 2 blocks. `fmnist-p7`: patch 7, embed_dim 128, the same depth, heads,
 * decoder and head. `fmnist-p7-mlp2` (the default of `vitrine train` and of `--objective
 * classify`): `fmnist-p7` with mlp_ratio 2. `fmnist-base` is twice as wide and 1.5x as deep
 * as `fmnist` (embed_dim 128, depth 6), for longer runs. timm presets (vit_tiny_patch16_224, ...)
 * work too, at 224x224 RGB. */
// every small preset's MAE decoder and AIM head (modelSpec copies them out)
const SMALL_HEADS = {
  mae: { decoder_dim: 64, decoder_depth: 2, decoder_heads: 4, norm_pix_loss: true },
  aim: { head_hidden_dim: 128, head_blocks: 2 },
};
export const TRAIN_PRESETS = {
  fmnist: {
    encoder: { img_size: 28, patch_size: 4, in_chans: 1, embed_dim: 64, depth: 4, num_heads: 4 },
    ...SMALL_HEADS,
  },
  // patch 7 (4x4 = 16 patches + [CLS]) at embed_dim 128 costs about what `fmnist` costs per MAE
  // step (fewer, wider tokens) and its features are twice as wide: better kNN per minute than
  // `fmnist` (README)
  'fmnist-p7': {
    encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 128, depth: 4, num_heads: 4 },
    ...SMALL_HEADS,
  },
  // the default: `fmnist-p7` with MLPs of 2x width instead of 4x. An MAE step costs 1/1.27 of
  // `fmnist-p7`'s at 2 threads, 1/1.5 at one (the MLPs and their GELU are most of it;
  // bench/classify_bench.mjs), and per step its kNN was as good (5000 steps: 83.25%; `fmnist-p7`
  // after 4000: 83.00%): the most kNN per minute measured (README)
  'fmnist-p7-mlp2': {
    encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 128, depth: 4, num_heads: 4, mlp_ratio: 2 },
    ...SMALL_HEADS,
  },
  'fmnist-base': {
    encoder: { img_size: 28, patch_size: 4, in_chans: 1, embed_dim: 128, depth: 6, num_heads: 4 },
    ...SMALL_HEADS,
  },
};

/** MAE decoders for a 224-px timm preset (Vitrine.createModel({ kind: 'mae', preset, config })):
 * `tab`, sized for a browser tab, the demo's default; `lightly`, lightly's MAE example's (and the
 * engine's default for a preset). Step times: bench/README.md, section 8. */
export const MAE_DECODERS = {
  tab: { label: 'sized for a tab: 128 wide, 2 deep, 4 heads', decoder_dim: 128, decoder_depth: 2, decoder_heads: 4 },
  lightly: {
    label: "lightly's MAE: 512 wide, 8 deep, 16 heads",
    decoder_dim: 512,
    decoder_depth: 8,
    decoder_heads: 16,
  },
};
/** The config (for createModel with a preset) of decoder `name` of MAE_DECODERS. */
export function maeDecoder(name) {
  const d = MAE_DECODERS[name];
  if (!d) throw new Error(`MAE decoder '${name}': use ${Object.keys(MAE_DECODERS).join(', ')}`);
  return { decoder_dim: d.decoder_dim, decoder_depth: d.decoder_depth, decoder_heads: d.decoder_heads };
}

/** What createModel takes for an objective ('mae' | 'aim') and a preset name or a config
 * (object or JSON text: { encoder: {...timm kwargs}, decoder_dim, ... } as the engine reads it). */
export function modelSpec(objective, { preset = 'fmnist', config = null } = {}) {
  if (objective !== 'mae' && objective !== 'aim') throw new Error(`objective '${objective}': use mae or aim`);
  if (config != null) return { kind: objective, config: typeof config === 'string' ? JSON.parse(config) : config };
  const p = TRAIN_PRESETS[preset];
  if (p) return { kind: objective, config: { encoder: { ...p.encoder }, ...p[objective] } };
  return { kind: objective, preset }; // a timm preset name (the engine checks it)
}

/** The encoder's weights under timm's keys: lightly's MAE backbone is backbone.vit.*, AIM's
 * backbone.* (a causal timm ViT). */
export function encoderPrefix(kind) {
  return kind === 'mae' ? 'backbone.vit.' : 'backbone.';
}

// ---- seeded randomness (a generator of our own: the same bits in every JS engine) -----------

/** splitmix32-style hash of 32-bit words -> uint32. */
export function hash32(...words) {
  let h = 0x9e3779b9;
  for (const w of words) {
    h = (h + (w >>> 0)) >>> 0;
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
    h = (h ^ (h >>> 16)) >>> 0;
  }
  return h;
}
/** mulberry32: () -> uint32. */
export function rng32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}
export const seedWords = (seed) => {
  const s = BigInt(seed);
  return [Number(s & 0xffffffffn), Number((s >> 32n) & 0xffffffffn)];
};

/** A seeded permutation of 0..n-1 (Fisher-Yates). */
export function permutation(n, seed) {
  const p = new Int32Array(n);
  for (let i = 0; i < n; i++) p[i] = i;
  const r = rng32(seed);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor((r() / 4294967296) * (i + 1));
    const t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  return p;
}

/** The order images are seen in: epoch e is permutation(n, hash(seed, e)); the image at global
 * position q (step s, slot j: q = s * batch + j) is perm(q / n)[q % n]. Nothing else to save:
 * the step count gives the cursor. */
export class DataOrder {
  constructor(n, seed) {
    if (!(n > 0)) throw new Error('DataOrder: no images');
    this.n = n;
    this.seed = String(seed);
    this._w = seedWords(seed);
    this._epoch = -1;
    this._perm = null;
  }
  at(q) {
    const e = Math.floor(q / this.n);
    if (e !== this._epoch) {
      this._perm = permutation(this.n, hash32(this._w[0], this._w[1], e));
      this._epoch = e;
    }
    return this._perm[q % this.n];
  }
  batch(step, B) {
    const out = new Int32Array(B);
    for (let j = 0; j < B; j++) out[j] = this.at(step * B + j);
    return out;
  }
}

// ---- evaluation -------------------------------------------------------------------------------

/** The encoder's features of images `indices` of ds, in chunks, one encode pass for every
 * readout: { cls, mean } of Float32Array [n, D] (as { data, dim }).
 *   cls   the normed [CLS] token, encode(x)[:, 0]: lightly's forward with timm's default
 *         global_pool 'token' (null when the model has no prefix token, as AIM's)
 *   mean  the mean of the normed patch tokens, encode(x)[:, prefix:].mean(1): the pooling of
 *         timm's global_pool 'avg' on these tokens (an AIM encoder's forward is this pooling) */
export function features(model, ds, indices, chunk = 250) {
  const P = model.dims.prefix,
    n = indices.length,
    { img, chans } = model.dims;
  let cls = null,
    mean = null,
    D = 0;
  for (let s = 0; s < n; s += chunk) {
    const idx = indices.subarray(s, Math.min(n, s + chunk));
    // images of another size or channel count: through the pixel pipeline a chunk at a time
    const x = model.encode(
      ds.size === img && ds.chans === chans
        ? makeBatch(ds, idx, null, model.normalization)
        : makeBatch(
            adapt(gather(ds, idx), img, chans),
            Int32Array.from(idx, (_, j) => j),
            null,
            model.normalization,
          ),
    ); // [b, T, D]
    const [b, T] = x.shape;
    if (!mean) {
      D = x.shape[2];
      mean = new Float32Array(n * D);
      if (P > 0) cls = new Float32Array(n * D);
    }
    for (let i = 0; i < b; i++) {
      const row = x.data.subarray(i * T * D, (i + 1) * T * D),
        o = (s + i) * D;
      if (cls) cls.set(row.subarray(0, D), o);
      const acc = new Float64Array(D);
      for (let t = P; t < T; t++) for (let d = 0; d < D; d++) acc[d] += row[t * D + d];
      for (let d = 0; d < D; d++) mean[o + d] = acc[d] / (T - P);
    }
  }
  return { cls: cls && { data: cls, dim: D }, mean: { data: mean, dim: D } };
}
/** Readouts of features() that `vitrine train` reports, the first one the headline. */
export const READOUTS = ['mean', 'cls'];
/** kNN top-1 of every readout the model has: { mean, cls } (cls null without a prefix token). */
export function knnReadouts(model, bank, query, opts) {
  const all = (n) => Int32Array.from({ length: n }, (_, i) => i);
  const fb = features(model, bank, all(bank.n)),
    fq = features(model, query, all(query.n)),
    out = {};
  for (const r of READOUTS) out[r] = fb[r] ? knnAccuracy(fb[r], bank.labels, fq[r], query.labels, opts) : null;
  return out;
}
/** The normalised pixels themselves as features (the raw-pixel baseline), at their own size. */
export function pixelFeatures(ds, indices, stats = {}) {
  return { data: makeBatch(ds, indices, null, stats), dim: ds.chans * ds.size * ds.size };
}
/** Images `idx` of a data set as a data set of their own. */
export function gather(ds, idx) {
  const per = ds.chans * ds.size * ds.size,
    pixels = new Uint8Array(idx.length * per);
  idx.forEach((i, j) => pixels.set(ds.pixels.subarray(i * per, (i + 1) * per), j * per));
  return { ...ds, n: idx.length, pixels, labels: ds.labels ? Int32Array.from(idx, (i) => ds.labels[i]) : null };
}

function l2normalize({ data, dim }) {
  const out = new Float32Array(data.length);
  for (let i = 0; i < data.length; i += dim) {
    let s = 0;
    for (let k = 0; k < dim; k++) s += data[i + k] * data[i + k];
    const r = s > 0 ? 1 / Math.sqrt(s) : 0;
    for (let k = 0; k < dim; k++) out[i + k] = data[i + k] * r;
  }
  return out;
}

/** kNN top-1 accuracy as lightly's benchmarks compute it (knn_predict): cosine similarity to
 * every bank feature, the k most similar vote for their class with weight exp(sim / t), the
 * class with the largest total wins (ties: the lower class index). Defaults k = 20, t = 0.1. */
export function knnAccuracy(bank, bankLabels, queries, queryLabels, { k = 20, t = 0.1, classes = null } = {}) {
  const D = bank.dim;
  if (queries.dim !== D) throw new Error(`kNN: bank features have ${D} dimensions, queries ${queries.dim}`);
  const B = l2normalize(bank),
    Q = l2normalize(queries);
  const nb = B.length / D,
    nq = Q.length / D;
  let C = classes || 0;
  if (!C) for (const l of [...bankLabels, ...queryLabels]) C = Math.max(C, l + 1);
  const kk = Math.min(k, nb),
    topS = new Float64Array(kk),
    topI = new Int32Array(kk),
    votes = new Float64Array(C);
  let correct = 0;
  for (let q = 0; q < nq; q++) {
    const qo = q * D;
    let n = 0;
    for (let b = 0; b < nb; b++) {
      const bo = b * D;
      let s = 0;
      for (let d = 0; d < D; d++) s += Q[qo + d] * B[bo + d];
      if (n < kk || s > topS[n - 1]) {
        // insertion into the sorted top-k (descending)
        let j = n < kk ? n++ : kk - 1;
        while (j > 0 && topS[j - 1] < s) {
          topS[j] = topS[j - 1];
          topI[j] = topI[j - 1];
          j--;
        }
        topS[j] = s;
        topI[j] = b;
      }
    }
    votes.fill(0);
    for (let j = 0; j < n; j++) votes[bankLabels[topI[j]]] += Math.exp(topS[j] / t);
    let best = 0;
    for (let c = 1; c < C; c++) if (votes[c] > votes[best]) best = c;
    if (best === queryLabels[q]) correct++;
  }
  return nq ? correct / nq : NaN;
}

/** Deterministic masks for showing reconstructions: MAE idx_keep / idx_mask as lightly's
 * random_token_mask lays them out (class token kept first; as many tokens kept as the engine's
 * training step keeps), AIM a prefix mask (the first quarter of the patches bidirectional). */
export function showMasks(model, batch, maskRatio = 0.75, seed = 7) {
  const { prefix, img, patch } = model.dims,
    N = (img / patch) ** 2,
    L = prefix + N;
  if (model.kind === 'aim') {
    const mask = new Uint8Array(batch * N);
    for (let b = 0; b < batch; b++) for (let j = 0; j < N; j++) mask[b * N + j] = j >= Math.floor(N / 4) ? 1 : 0;
    return { mask };
  }
  const nKeep = model.planTrainStep({ batch, maskRatio }).tokensKept,
    r = rng32(seed);
  const keep = new BigInt64Array(batch * nKeep),
    masked = new BigInt64Array(batch * (L - nKeep));
  for (let b = 0; b < batch; b++) {
    const p = Array.from(permutation(L - 1, r())).map((i) => i + 1);
    keep[b * nKeep] = 0n;
    p.slice(0, nKeep - 1).forEach((v, j) => {
      keep[b * nKeep + 1 + j] = BigInt(v);
    });
    p.slice(nKeep - 1).forEach((v, j) => {
      masked[b * (L - nKeep) + j] = BigInt(v);
    });
  }
  return { idxKeep: keep, idxMask: masked };
}

/** Three rows (original, masked, reconstruction) of `batch` images, each scaled by `zoom`, with
 * `gap` pixels between them: { width, height, data: RGBA Uint8ClampedArray }. */
export function visualizeGrid(model, images, vis, { zoom = 4, gap = 2, stats = {} } = {}) {
  const { img, chans } = model.dims,
    B = vis.shape[0],
    cell = img * zoom;
  const width = B * cell + (B + 1) * gap,
    height = 3 * cell + 4 * gap;
  const data = new Uint8ClampedArray(width * height * 4).fill(255);
  [images, vis.masked, vis.recon].forEach((src, row) => {
    for (let b = 0; b < B; b++) {
      const rgba = toRGBA(src, { chans, img }, b, stats);
      const x0 = gap + b * (cell + gap),
        y0 = gap + row * (cell + gap);
      for (let y = 0; y < cell; y++)
        for (let x = 0; x < cell; x++) {
          const s = 4 * (Math.floor(y / zoom) * img + Math.floor(x / zoom)),
            d = 4 * ((y0 + y) * width + x0 + x);
          data[d] = rgba[s];
          data[d + 1] = rgba[s + 1];
          data[d + 2] = rgba[s + 2];
          data[d + 3] = 255;
        }
    }
  });
  return { width, height, data };
}
