// knn-worker.js: a Node worker thread of `vitrine train` that computes, on the second core while
// the main thread trains, the kNN accuracy of the untrained encoder (the same seeded
// initialisation, re-created; every readout) and of the raw pixels. Its engine runs on 1 thread, beside the
// training's pool; this keeps the main job's wall time down. workerData: { wasm, spec, initSeed, initBytes (--init), bank, query,
// stats (the run's mean / std), frozen, k, t, classes } with bank / query = { n, chans, size, pixels, labels }.
import { parentPort, workerData } from 'node:worker_threads';
import { createVitrine } from '../../vitrine.js';
import { pixelFeatures, knnAccuracy, knnReadouts } from '../../train/knn.js';

const w = workerData;
const all = (n) => Int32Array.from({ length: n }, (_, i) => i);
try {
  const t0 = performance.now();
  const opts = { k: w.k, t: w.t, classes: w.classes };
  const pixels = knnAccuracy(
    pixelFeatures(w.bank, all(w.bank.n), w.stats),
    w.bank.labels,
    pixelFeatures(w.query, all(w.query.n), w.stats),
    w.query.labels,
    opts,
  );
  const vt = await createVitrine({ wasm: w.wasm, threads: 1 });
  const model = vt.createModel(w.spec);
  model.initWeights(w.initSeed);
  for (const name of w.frozen) model.setRequiresGrad(name, false);
  if (w.initBytes) model.initFrom(w.initBytes); // --init: the encoder training started from
  model.normalization = w.stats; // the run's
  const initial = knnReadouts(model, w.bank, w.query, opts); // { mean, cls }
  model.dispose();
  parentPort.postMessage({ initial, pixels, seconds: (performance.now() - t0) / 1000 });
} catch (e) {
  parentPort.postMessage({ error: e.message });
}
