// encoder.js: what `vitrine train` reports for an objective that pre-trains an encoder (report
// 'encoder': MAE, AIM) -- the kNN top-1 of the trained encoder beside the untrained encoder's and
// raw pixels' (those two computed by a worker thread on the second core while the first trains:
// knn-worker.js), the encoder's weights (timm keys), a picture of reconstructions, and the report
// (text, and with --json one line). The trained model is restored in this thread from the run's
// checkpoint, in the build the run trained with.
import { Worker } from 'node:worker_threads';
import { encoderPrefix } from '../../train/presets.js';
import { knnReadoutsAsync, READOUTS, gather } from '../../train/knn.js';
import { AbortError } from '../../errors.js';
import { showMasks, visualizeGrid } from '../../train/visualize.js';
import { loadFashionMNIST, openImageFolder } from '../../train/node-data.js';
import { makeBatch, resizeCrop, channelStats, adapt, IMAGENET_MEAN, IMAGENET_STD } from '../../formats/images.js';
import { whole, decimal, CliError } from '../args.js';
import { encodePng, readInput, why } from '../io.js';
import { loadEngine, backendNote } from '../engine.js';

const EVAL = { bank: 10000, queries: 2000, k: 20, t: 0.1, show: 8 };

/** The kNN evaluation's options (lightly's knn_predict: k neighbours, votes exp(sim / t)). */
const KNN_OPTIONS = {
  'eval-bank': { value: 'N', help: `kNN bank: training images (default ${EVAL.bank})`, parse: whole(1, 10000000) },
  'eval-queries': { value: 'N', help: `kNN queries: test images (default ${EVAL.queries})`, parse: whole(1, 10000000) },
  'knn-k': { value: 'K', help: `kNN: neighbours that vote (default ${EVAL.k})`, parse: whole(1, 100000) },
  'knn-t': { value: 'T', help: `kNN: vote weight exp(similarity / T) (default ${EVAL.t})`, parse: decimal(1e-6, 1e6) },
};

// images `idx` of a folder decoded at the model's size and channels (a data set of bytes)
function decodeFolder(f, idx, size, chans) {
  const per = chans * size * size,
    pixels = new Uint8Array(idx.length * per);
  idx.forEach((i, j) => {
    const im = f.decode(i);
    pixels.set(resizeCrop(im.data, im.width, im.height, 4, size, chans), j * per);
  });
  return { n: idx.length, chans, size, pixels, labels: Int32Array.from(idx, (i) => f.labels[i]), classes: f.classes };
}

// kNN bank / queries: Fashion-MNIST: the first N train images / first M test images (28x28: the
// encoder resizes them a chunk at a time); a labelled folder: every 5th image is a query, the
// others the bank (then both capped), decoded at the model's size.
function evalSets(data, dims, nBank, nQuery, maxPixels) {
  const range = (n) => Array.from({ length: n }, (_, i) => i);
  if (data === 'fashion-mnist') {
    const train = loadFashionMNIST('train'),
      test = loadFashionMNIST('test');
    return {
      bank: gather(train, range(Math.min(nBank, train.n))),
      query: gather(test, range(Math.min(nQuery, test.n))),
    };
  }
  const f = openImageFolder(data, { maxPixels, onWarning: () => {} }); // the trainer said what it skipped
  if (!f.labels || f.n < 5) return null;
  const all = range(f.n);
  return {
    bank: decodeFolder(f, all.filter((i) => i % 5 !== 4).slice(0, nBank), dims.img, dims.chans),
    query: decodeFolder(f, all.filter((i) => i % 5 === 4).slice(0, nQuery), dims.img, dims.chans),
  };
}

/** The kNN bank and queries, and a worker that evaluates the untrained encoder and raw pixels on
 * them on the other core while this one trains. null when the data have no classes. */
function startSideEvaluation(o, eng, run, info, seed, warn, initBytes = null, maxPixels) {
  const sets = evalSets(run.data, info.dims, o.evalBank ?? EVAL.bank, o.evalQueries ?? EVAL.queries, maxPixels);
  if (!sets) {
    warn(`${run.data}: no classes (sub-folders) or fewer than 5 images, so no kNN evaluation`);
    return null;
  }
  const knnOpts = {
    k: o.knnK ?? EVAL.k,
    t: o.knnT ?? EVAL.t,
    classes: Math.max(sets.bank.classes ? sets.bank.classes.length : 0, 1 + Math.max(...sets.bank.labels)),
  };
  const spec = run.spec.config ? { kind: run.spec.kind, config: run.spec.config, preset: run.spec.preset } : run.spec;
  const stats = channelStats(info.dims.chans, info.normalization);
  const worker = new Worker(new URL('./knn-worker.js', import.meta.url), {
    workerData: {
      wasm: eng.build,
      spec,
      initSeed: seed,
      initBytes,
      bank: sets.bank,
      query: sets.query,
      stats,
      frozen: run.frozen || [],
      ...knnOpts,
    },
  });
  const initial = new Promise((resolve) => {
    worker.once('message', (m) => {
      resolve(m);
      worker.terminate();
    });
    worker.once('error', (e) => resolve({ error: e.message }));
  });
  return { sets, knnOpts, worker, initial };
}

/** The kNN top-1 accuracy of the trained encoder (here) beside the untrained one and raw pixels
 * (from the side evaluation). */
async function knnResults(model, side, say, warn, signal) {
  const { sets, knnOpts } = side,
    te = performance.now();
  say(`vitrine train: kNN evaluation (bank ${sets.bank.n}, queries ${sets.query.n}) ...`);
  const trained = await knnReadoutsAsync(model, sets.bank, sets.query, knnOpts, { signal }); // { mean, cls }
  const knn = { trained, initial: null, pixels: null };
  const s = await Promise.race([
    side.initial,
    new Promise((_, reject) => {
      const stop = () => reject(new AbortError('kNN evaluation: interrupted', 'aborted'));
      if (signal.aborted) stop();
      else signal.addEventListener('abort', stop, { once: true });
    }),
  ]);
  if (s.error) warn(`evaluation of the initial encoder failed: ${s.error}`);
  else {
    knn.initial = s.initial;
    knn.pixels = s.pixels;
  }
  say(`vitrine train: kNN evaluation ${((performance.now() - te) / 1000).toFixed(1)} s`);
  return knn;
}

/** The encoder's weights (timm keys, pretrained_cfg) and a picture of reconstructions of the first
 * images (Fashion-MNIST's test set, or the folder's). A write that fails stops the run;
 * reconstructions that cannot be computed (the parameters of a run stopped by a NaN) are only
 * warned about. */
function writeResults(model, run, outputs, warn, maxPixels) {
  outputs.write(outputs.paths.weights, model.saveSafetensors({ modelPrefix: encoderPrefix(run.spec.kind) }));
  let png;
  try {
    const { img, chans } = model.dims;
    let shown;
    if (run.data === 'fashion-mnist') {
      const test = loadFashionMNIST('test');
      shown = gather(
        test,
        Array.from({ length: Math.min(EVAL.show, test.n) }, (_, i) => i),
      );
    } else {
      const f = openImageFolder(run.data, { maxPixels, onWarning: () => {} });
      shown = decodeFolder(
        { ...f, labels: f.labels || new Int32Array(f.n) },
        Array.from({ length: Math.min(EVAL.show, f.n) }, (_, i) => i),
        img,
        chans,
      );
    }
    const x = makeBatch(
      adapt(shown, img, chans),
      Int32Array.from({ length: shown.n }, (_, i) => i),
      null,
      model.normalization,
    );
    model.loss(x, showMasks(model, shown.n, run.maskRatio ?? 0.75));
    png = encodePng(visualizeGrid(model, x, model.visualize(), { stats: model.normalization }));
  } catch (e) {
    warn(`no reconstructions: ${e.message}`);
    return;
  }
  outputs.write(outputs.paths.image, png);
}
/** The report on stdout (and, with --json, one JSON line after it). */
function report(
  o,
  { run, model, side, knn, paths, finished, step, lastLoss, seconds, trained, trainSeconds, threads },
) {
  const pct = (v) => (v == null ? 'n/a' : (100 * v).toFixed(2) + '%');
  // the headline readout: the first of READOUTS this model has (the others beside it)
  const readout = knn.trained ? READOUTS.find((r) => knn.trained[r] != null) : null;
  const pick = (x, r) => (x && x[r] != null ? x[r] : null);
  const NAMES = { mean: 'mean of patch tokens', cls: '[CLS]' };
  const others = (x) =>
    READOUTS.filter((r) => r !== readout && pick(knn.trained, r) != null)
      .map((r) => ` (${NAMES[r]} ${pct(pick(x, r))})`)
      .join('');
  process.stdout.write(
    `${finished ? 'trained' : 'stopped at'} step ${step}/${run.steps} (${run.spec.kind.toUpperCase()}, ${run.preset || 'config'}, batch ${run.batch}${run.gradAccum > 1 ? ` x ${run.gradAccum}` : ''}, grad checkpointing ${model.gradCheckpointing}) in ${seconds.toFixed(1)} s\n` +
      `loss ${run.lossFirst != null ? run.lossFirst.toFixed(4) : 'n/a'} (first step) -> ${lastLoss != null ? lastLoss.toFixed(4) : 'n/a'} (last)\n` +
      (side && readout
        ? `kNN top-1 (cosine, k=${side.knnOpts.k}, votes exp(sim/${side.knnOpts.t}); bank ${side.sets.bank.n}, queries ${side.sets.query.n}; features: ${NAMES[readout]}): ` +
          `trained ${pct(pick(knn.trained, readout))}${others(knn.trained)}, initial ${pct(pick(knn.initial, readout))}${others(knn.initial)}, raw pixels ${pct(knn.pixels)}\n`
        : '') +
      `encoder weights (timm keys)  ${paths.weights}\ntraining checkpoint          ${paths.state}\nreconstructions              ${paths.image}\n`,
  );
  if (!o.json) return;
  const perReadout = {};
  for (const r of READOUTS) {
    perReadout[`knn_trained_${r}`] = pick(knn.trained, r);
    perReadout[`knn_initial_${r}`] = pick(knn.initial, r);
  }
  process.stdout.write(
    JSON.stringify({
      steps: step,
      loss_first: run.lossFirst ?? null,
      loss_last: lastLoss ?? null,
      knn_readout: readout,
      knn_trained: pick(knn.trained, readout),
      knn_initial: pick(knn.initial, readout),
      knn_pixels: knn.pixels,
      ...perReadout,
      seconds: Number(seconds.toFixed(3)),
      threads,
      train_seconds: Number(trainSeconds.toFixed(3)),
      images_per_second: Number(((trained * run.batch * (run.gradAccum || 1)) / trainSeconds).toFixed(2)),
      weights: paths.weights,
      image: paths.image,
      checkpoint: paths.state,
    }) + '\n',
  );
}

// The trained model in this thread (kNN, reconstructions): the run's model with its checkpoint, in
// the engine the run was checked with (the build the run trained with: --wasm, else the
// checkpoint's, else the default, as the worker picks it).
function restoreModel(vt, obj, r, state) {
  const model = vt.createModel(r.spec);
  try {
    model.setGradCheckpointing(r.policy);
    model.initWeights(BigInt(r.seed));
    if (r.frozen) {
      model.setRequiresGrad('', true);
      for (const name of r.frozen) model.setRequiresGrad(name, false);
    }
    model.trainerInit({ ...obj.trainer(r), ...(r.minLr ? { minLr: r.minLr } : {}) });
    model.loadTrainState(state);
    model.normalization =
      r.mean != null
        ? { mean: r.mean, std: r.std, source: 'the run' }
        : { mean: IMAGENET_MEAN, std: IMAGENET_STD, source: 'ImageNet' };
  } catch (e) {
    model.dispose();
    throw new CliError(e.message);
  }
  return model;
}

/** The report of an encoder's run (web/cli/train.js calls these). */
export default {
  files: { weights: 'encoder.safetensors', state: 'checkpoint.safetensors', image: 'reconstructions.png' },
  options: KNN_OPTIONS,
  keepsEngine: true, // the trained model is restored in this thread
  noEval: () => true, // the kNN evaluation is this thread's
  startLine({ o, stopAt }, i, engine) {
    const r = i.run,
      { img, chans, patch, dim, depth } = i.dims,
      s = r.steps;
    return (
      `vitrine train: ${r.spec.kind.toUpperCase()} ${r.preset || 'config'} ${img}x${img}x${chans} patch ${patch} dim ${dim} depth ${depth}, ` +
      `${i.images} images (${r.data}), batch ${r.batch}${r.gradAccum > 1 ? ` x ${r.gradAccum} accumulated` : ''}, steps ${i.step ? i.step + '..' : ''}${Math.min(s, stopAt ?? s)}/${s}, lr ${r.lr}` +
      `${r.minLr ? ` -> ${r.minLr}` : ''}${r.spec.kind === 'mae' && r.maskRatio != null ? `, mask ratio ${r.maskRatio}` : ''}, normalisation ${i.normalization.source}, grad checkpointing ${i.policy}, ` +
      `wasm ${engine.build}, ${engine.threads} thread${engine.threads === 1 ? '' : 's'}${engine.threadsNote ? ` (${engine.threadsNote})` : ''}` +
      backendNote(engine, o.backend)
    );
  },
  // the untrained encoder's and raw pixels' kNN on the other core while this one trains
  onReady(ctx, i, engine) {
    const { o, resumeBytes, stopAt, maxPixels, warn, say } = ctx,
      r = i.run;
    say(this.startLine(ctx, i, engine));
    if (o.noEval || (stopAt ?? r.steps) < r.steps) return;
    let initBytes = null;
    if (r.init && !resumeBytes)
      try {
        initBytes = readInput(r.init);
      } catch (e) {
        warn(`--init ${r.init}: ${why(e)}`);
      }
    ctx.side = startSideEvaluation(o, { build: engine.build }, r, i, BigInt(r.seed), warn, initBytes, maxPixels);
  },
  async finish(ctx) {
    const { o, obj, loop, outputs, say, warn, saveError, maxPixels, t0 } = ctx,
      { result } = loop,
      r = result.run;
    if (!result.checkpoint) {
      // the engine would not save the state (an update made it non-finite): no results of it either
      say(`vitrine train: wrote what it could from step ${result.step}: nothing`);
      return;
    }
    if (ctx.vt.build !== ctx.engine.build) {
      ctx.vt.close();
      ctx.vt = null;
      ctx.vt = await loadEngine({ wasm: ctx.engine.build, threads: o.threads });
    } // the worker's build, for its bits
    const model = restoreModel(ctx.vt, obj, r, result.checkpoint);
    try {
      try {
        writeResults(model, r, outputs, warn, maxPixels);
      } catch (e) {
        throw new CliError(`${e.message} (${outputs.stateNote()})`);
      }
      if (loop.error || saveError)
        say(`vitrine train: wrote what it could from step ${result.step}: ${outputs.wrote.join(', ') || 'nothing'}`);
      const side = ctx.side;
      let knn = { trained: null, initial: null, pixels: null };
      if (side && !loop.interrupted && !loop.error && !saveError)
        try {
          if (ctx.signal.aborted) throw new AbortError('kNN evaluation: interrupted', 'aborted');
          knn = await knnResults(model, side, say, warn, ctx.signal);
        } catch (e) {
          if (!(e instanceof AbortError)) throw e;
          // Ctrl-C / SIGTERM: what was written stays, the report is not made
          ctx.saidInterrupt = true;
          say(
            `vitrine train: interrupted during the kNN evaluation (${ctx.interrupted}); the checkpoint of step ${result.step} is intact in ${outputs.paths.state}, the encoder weights in ${outputs.paths.weights}`,
          );
          return;
        }
      report(o, {
        run: r,
        model,
        side,
        knn,
        paths: outputs.paths,
        finished: result.step >= r.steps,
        step: result.step,
        lastLoss: result.lossLast ?? r.lossFirst ?? null,
        seconds: (performance.now() - t0) / 1000,
        trained: result.trained,
        trainSeconds: result.trainSeconds,
        threads: ctx.engine.threads,
      });
    } finally {
      model.dispose();
    }
  },
  cleanUp(ctx) {
    if (ctx.side) ctx.side.worker.terminate();
  },
};
