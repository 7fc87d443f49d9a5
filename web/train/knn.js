// knn.js: lightly-style kNN evaluation of an encoder's pooled features (what `vitrine train`
// reports for MAE / AIM) and the raw-pixel baseline beside it.
import { makeBatch, adapt } from '../formats/images.js';
import { AbortError } from '../errors.js';

// The evaluation's loops are generators that pause after each chunk of work: run() drives one
// straight through; runAsync() gives the event loop a turn between chunks (a Ctrl-C is heard,
// an AbortSignal checked).
function run(gen) {
  for (;;) {
    const { done, value } = gen.next();
    if (done) return value;
  }
}
const turn = () => new Promise((r) => (typeof setImmediate === 'function' ? setImmediate(r) : setTimeout(r, 0)));
async function runAsync(gen, signal, what) {
  for (;;) {
    const { done, value } = gen.next();
    if (done) return value;
    await turn();
    if (signal && signal.aborted) throw new AbortError(`${what}: interrupted`, 'aborted');
  }
}

/** The encoder's features of images `indices` of ds, in chunks, one encode pass for every
 * readout: { cls, mean } of Float32Array [n, D] (as { data, dim }).
 *   cls   the normed [CLS] token, encode(x)[:, 0]: lightly's forward with timm's default
 *         global_pool 'token' (null when the model has no prefix token, as AIM's)
 *   mean  the mean of the normed patch tokens, encode(x)[:, prefix:].mean(1): the pooling of
 *         timm's global_pool 'avg' on these tokens (an AIM encoder's forward is this pooling) */
export function features(model, ds, indices, chunk = 250) {
  return run(featureChunks(model, ds, indices, chunk));
}
function* featureChunks(model, ds, indices, chunk) {
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
    yield;
  }
  return { cls: cls && { data: cls, dim: D }, mean: { data: mean, dim: D } };
}
/** Readouts of features() that `vitrine train` reports, the first one the headline. */
export const READOUTS = ['mean', 'cls'];
/** kNN top-1 of every readout the model has: { mean, cls } (cls null without a prefix token). */
export function knnReadouts(model, bank, query, opts) {
  return run(readouts(model, bank, query, opts));
}
/** knnReadouts, giving the event loop a turn between chunks: rejects with an AbortError (kind
 * 'aborted') soon after `signal` aborts. */
export function knnReadoutsAsync(model, bank, query, opts, { signal = null } = {}) {
  return runAsync(readouts(model, bank, query, opts), signal, 'kNN evaluation');
}
function* readouts(model, bank, query, opts) {
  const all = (n) => Int32Array.from({ length: n }, (_, i) => i);
  const fb = yield* featureChunks(model, bank, all(bank.n), 250),
    fq = yield* featureChunks(model, query, all(query.n), 250),
    out = {};
  for (const r of READOUTS) out[r] = fb[r] ? yield* knnChunks(fb[r], bank.labels, fq[r], query.labels, opts) : null;
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
export function knnAccuracy(bank, bankLabels, queries, queryLabels, opts = {}) {
  return run(knnChunks(bank, bankLabels, queries, queryLabels, opts));
}
function* knnChunks(bank, bankLabels, queries, queryLabels, { k = 20, t = 0.1, classes = null } = {}) {
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
    if (q % 64 === 63) yield;
  }
  return nq ? correct / nq : NaN;
}
