// train-results.js: what `vitrine train` (MAE / AIM) reports besides its checkpoint: the kNN
// top-1 of the trained encoder beside the untrained encoder's and raw pixels' (those two computed
// by a worker thread on the second core while the first trains: web/eval-worker.js), the encoder's
// weights (timm keys), a picture of reconstructions, and the report (text, and with --json one line).
import { Worker } from 'node:worker_threads';
import { encoderPrefix, knnReadouts, READOUTS, showMasks, visualizeGrid } from '../train.js';
import { makeBatch } from '../images.js';
import { encodePng } from './io.js';

const EVAL = { bank: 10000, queries: 2000, k: 20, t: 0.1, show: 8 };

// kNN bank / queries: Fashion-MNIST: the first N train images / first M test images; a labelled
// folder: every 5th image is a query, the others the bank (then both capped).
function evalSets(data, nBank, nQuery) {
  const bytes = (ds, idx) => {
    const per = ds.chans * ds.size * ds.size, out = new Uint8Array(idx.length * per);
    idx.forEach((i, j) => out.set(ds.pixels.subarray(i * per, (i + 1) * per), j * per));
    return out;
  };
  const sub = (ds, idx) => ({ n: idx.length, chans: ds.chans, size: ds.size, labels: Int32Array.from(idx, (i) => ds.labels[i]),
    pixels: bytes(ds, idx), classes: ds.classes });
  const range = (n) => Array.from({ length: n }, (_, i) => i);
  if (data.test) return { bank: sub(data.train, range(Math.min(nBank, data.train.n))), query: sub(data.test, range(Math.min(nQuery, data.test.n))) };
  if (!data.train.labels || data.train.n < 5) return null;
  const all = range(data.train.n);
  return { bank: sub(data.train, all.filter((i) => i % 5 !== 4).slice(0, nBank)), query: sub(data.train, all.filter((i) => i % 5 === 4).slice(0, nQuery)) };
}

/** The kNN bank and queries, and a worker that evaluates the untrained encoder and raw pixels on
 * them on the other core while this one trains. null when the data have no classes. */
export function startSideEvaluation(o, vt, run, data, seed, warn, initBytes = null) {
  const sets = evalSets(data, o.evalBank ?? EVAL.bank, o.evalQueries ?? EVAL.queries);
  if (!sets) { warn(`${run.data}: no classes (sub-folders) or fewer than 5 images, so no kNN evaluation`); return null; }
  const knnOpts = { k: EVAL.k, t: EVAL.t, classes: Math.max(sets.bank.classes ? sets.bank.classes.length : 0, 1 + Math.max(...sets.bank.labels)) };
  const spec = run.spec.config ? { kind: run.spec.kind, config: run.spec.config } : run.spec;
  const worker = new Worker(new URL('../eval-worker.js', import.meta.url), {
    workerData: { wasm: vt.build, spec, initSeed: seed, initBytes, bank: sets.bank, query: sets.query, ...knnOpts },
  });
  const initial = new Promise((resolve) => {
    worker.once('message', (m) => { resolve(m); worker.terminate(); });
    worker.once('error', (e) => resolve({ error: e.message }));
  });
  return { sets, knnOpts, worker, initial };
}

/** The kNN top-1 accuracy of the trained encoder (here) beside the untrained one and raw pixels
 * (from the side evaluation). */
export async function knnResults(model, side, say, warn) {
  const { sets, knnOpts } = side, te = performance.now();
  const knn = { trained: knnReadouts(model, sets.bank, sets.query, knnOpts), initial: null, pixels: null }; // { mean, cls }
  const s = await side.initial;
  if (s.error) warn(`evaluation of the initial encoder failed: ${s.error}`);
  else { knn.initial = s.initial; knn.pixels = s.pixels; }
  say(`vitrine train: kNN evaluation ${((performance.now() - te) / 1000).toFixed(1)} s`);
  return knn;
}

/** The encoder's weights (timm keys) and a picture of reconstructions of the first images. A
 * write that fails stops the run; reconstructions that cannot be computed (the parameters of a
 * run stopped by a NaN) are only warned about. */
export function writeResults(model, run, data, outputs, warn) {
  outputs.write(outputs.paths.weights, model.saveSafetensors({ modelPrefix: encoderPrefix(run.spec.kind) }));
  const showDs = data.test || data.train, nShow = Math.min(EVAL.show, showDs.n);
  const showImgs = makeBatch(showDs, Int32Array.from({ length: nShow }, (_, i) => i));
  let png;
  try {
    model.loss(showImgs, showMasks(model, nShow, run.maskRatio ?? 0.75));
    png = encodePng(visualizeGrid(model, showImgs, model.visualize()));
  } catch (e) { warn(`no reconstructions: ${e.message}`); return; }
  outputs.write(outputs.paths.image, png);
}

/** The report on stdout (and, with --json, one JSON line after it). */
export function report(o, { vt, run, model, side, knn, paths, finished, step, lastLoss, seconds, trained, trainSeconds }) {
  const pct = (v) => (v == null ? 'n/a' : (100 * v).toFixed(2) + '%');
  // the headline readout: the first of READOUTS this model has (the others beside it)
  const readout = knn.trained ? READOUTS.find((r) => knn.trained[r] != null) : null;
  const pick = (x, r) => (x && x[r] != null ? x[r] : null);
  const NAMES = { mean: 'mean of patch tokens', cls: '[CLS]' };
  const others = (x) => READOUTS.filter((r) => r !== readout && pick(knn.trained, r) != null).map((r) => ` (${NAMES[r]} ${pct(pick(x, r))})`).join('');
  process.stdout.write(
    `${finished ? 'trained' : 'stopped at'} step ${step}/${run.steps} (${run.spec.kind.toUpperCase()}, ${run.preset || 'config'}, batch ${run.batch}, grad checkpointing ${model.gradCheckpointing}) in ${seconds.toFixed(1)} s\n` +
    `loss ${run.lossFirst != null ? run.lossFirst.toFixed(4) : 'n/a'} (first step) -> ${lastLoss != null ? lastLoss.toFixed(4) : 'n/a'} (last)\n` +
    (side && readout ? `kNN top-1 (cosine, k=${side.knnOpts.k}, votes exp(sim/${side.knnOpts.t}); bank ${side.sets.bank.n}, queries ${side.sets.query.n}; features: ${NAMES[readout]}): ` +
      `trained ${pct(pick(knn.trained, readout))}${others(knn.trained)}, initial ${pct(pick(knn.initial, readout))}${others(knn.initial)}, raw pixels ${pct(knn.pixels)}\n` : '') +
    `encoder weights (timm keys)  ${paths.weights}\ntraining checkpoint          ${paths.state}\nreconstructions              ${paths.image}\n`);
  if (!o.json) return;
  const perReadout = {};
  for (const r of READOUTS) { perReadout[`knn_trained_${r}`] = pick(knn.trained, r); perReadout[`knn_initial_${r}`] = pick(knn.initial, r); }
  process.stdout.write(JSON.stringify({ steps: step, loss_first: run.lossFirst ?? null, loss_last: lastLoss ?? null,
    knn_readout: readout, knn_trained: pick(knn.trained, readout), knn_initial: pick(knn.initial, readout), knn_pixels: knn.pixels,
    ...perReadout, seconds: Number(seconds.toFixed(3)),
    threads: vt.threads, train_seconds: Number(trainSeconds.toFixed(3)),
    images_per_second: Number((trained * run.batch / trainSeconds).toFixed(2)),
    weights: paths.weights, image: paths.image, checkpoint: paths.state }) + '\n');
}
