// train.js: `vitrine train`, the main job -- an MAE (or AIM) ViT trained through the wasm engine on
// Fashion-MNIST or a folder of images, then the kNN top-1 of its encoder beside the untrained
// encoder's and raw pixels' (train-results.js), its weights, a resumable checkpoint and a picture
// of reconstructions. `--objective classify` is web/cli/classify.js. The training loop is the
// Trainer's (web/train/trainer.js, in a worker thread); web/cli/run.js runs it for both.
import path from 'node:path';
import { DEFAULT_MAX_PIXELS } from '../train/node-data.js';
import { TRAIN_PRESETS } from '../train/presets.js';
import { IMAGENET_MEAN, IMAGENET_STD } from '../formats/images.js';
import { defaultLr, runSpec } from '../train/session.js';
import { CliError, whole, decimal, oneOf, seed } from './args.js';
import {
  ENGINE_OPTIONS,
  BACKEND_OPTION,
  namesHelp,
  loadEngine,
  loadEngineFor,
  specDims,
  checkBatch,
} from './engine.js';
import { readInput, readConfig, why, Outputs } from './io.js';
import {
  readCheckpoint,
  checkState,
  refuseOnResume,
  stopAtOf,
  runTrainer,
  endRun,
  dataOption,
  sayInit,
  SCHEDULE_OPTIONS,
  scheduleOptions,
} from './run.js';
import { startSideEvaluation, knnResults, writeResults, report, KNN_OPTIONS } from './train-results.js';
import { command as classify } from './classify.js';

export const TRAIN_DEFAULTS = {
  objective: 'mae',
  preset: 'fmnist-p7-mlp2',
  batch: 64,
  steps: 5000,
  policy: 'block',
  out: 'out',
  seed: '0',
  maskRatio: 0.5,
  saveEvery: 200,
};
export { defaultLr };
const STATE_FILE = 'checkpoint.safetensors',
  WEIGHTS_FILE = 'encoder.safetensors',
  IMAGE_FILE = 'reconstructions.png';
const COUNT = 2000000000;

/** The options train shares with `plan` (what model, what step). */
export const MODEL_OPTIONS = {
  preset: {
    value: 'NAME',
    alias: 'model',
    help: `${Object.keys(TRAIN_PRESETS).join(', ')} (default ${TRAIN_DEFAULTS.preset}), or a timm architecture`,
  },
  config: {
    value: 'JSON|FILE',
    help: 'the model as the engine reads it instead of a preset:\n{"encoder": {timm kwargs}, "decoder_dim": ...}',
  },
  batch: {
    value: 'B',
    short: 'b',
    alias: 'batch-size',
    help: `images per step (default ${TRAIN_DEFAULTS.batch}; with --grad-accum-steps K: per micro-batch)`,
    parse: whole(1, 65536),
  },
  'mask-ratio': {
    value: 'R',
    help: `MAE: the share of patches masked, 0 <= R < 1 (default ${TRAIN_DEFAULTS.maskRatio})`,
    parse: decimal(),
  },
  'grad-checkpointing': {
    value: 'POLICY',
    key: 'policy',
    help: `checkpointing policy (default ${TRAIN_DEFAULTS.policy}; see below)`,
  },
};

export const command = {
  name: 'train',
  summary: 'train an MAE / AIM ViT (the main job), or a classifier (--objective classify)',
  usage: 'vitrine train [options]          (vitrine train --objective classify --help: the classifier)',
  description:
    'Trains an MAE (or AIM) ViT through the WebAssembly engine, then reports the kNN top-1\n' +
    "accuracy of its encoder beside the untrained encoder's and raw pixels'; saves its weights\n" +
    '(timm keys), a resumable checkpoint and a picture of reconstructions.',
  options: {
    objective: {
      value: 'mae|aim|classify',
      help: `what to train (default ${TRAIN_DEFAULTS.objective}; classify: its own options)`,
      parse: oneOf('mae', 'aim'),
    },
    ...MODEL_OPTIONS,
    data: {
      value: 'DIR',
      help: 'a folder of PNG / JPEG images (sub-folders = classes) instead of Fashion-MNIST\n(with --resume: the folder, named again; no path is read from the checkpoint)',
    },
    'max-image-mp': {
      value: 'N',
      help: `refuse images over N megapixels, from their header (default ${DEFAULT_MAX_PIXELS / 1e6})`,
      parse: decimal(0, 1000),
    },
    steps: {
      value: 'N',
      help: `training steps, the length of the cosine schedule (default ${TRAIN_DEFAULTS.steps})`,
      parse: whole(1, COUNT),
    },
    ...SCHEDULE_OPTIONS,
    lr: {
      value: 'LR',
      help: 'peak learning rate (default mae 2e-3, aim 1e-3, times batch / 64)',
      parse: decimal(0, 1000),
    },
    warmup: { value: 'N', help: 'warm-up steps (default 5% of --steps)', parse: whole(0, COUNT) },
    seed: { value: 'S', help: 'initialisation S, masks S+1, data order S+2 (default 0)', parse: seed },
    out: {
      value: 'DIR',
      help: `where ${WEIGHTS_FILE}, ${STATE_FILE}, ${IMAGE_FILE} go (default ${TRAIN_DEFAULTS.out})`,
    },
    'save-every': {
      value: 'N',
      help: `write the checkpoint every N steps (default ${TRAIN_DEFAULTS.saveEvery}; and at the end)`,
      parse: whole(1, COUNT),
    },
    'stop-at': {
      value: 'STEP',
      help: 'stop after STEP steps (checkpoint written, no evaluation): resume later',
      parse: whole(1, COUNT),
    },
    resume: {
      value: 'FILE|DIR',
      help: 'continue a checkpoint bit for bit (model, schedule, batch, data, seed come from it),\nor a run PyTorch trained (a folder of python/vitrine_continue.py: docs/scale-out.md)',
    },
    'require-crc': { type: 'boolean', help: 'with --resume: refuse a checkpoint without CRC-32s of its tensors' },
    init: {
      value: 'FILE',
      help: 'start from the weights in FILE: timm (head or not), lightly or vitrine safetensors;\nthe layout is recognised; what cannot be used is named and skipped',
    },
    'init-strict': { type: 'boolean', help: 'with --init: any skipped tensor is an error' },
    ...KNN_OPTIONS,
    'no-eval': { type: 'boolean', help: 'skip the kNN evaluation' },
    json: { type: 'boolean', help: 'end the output with one JSON line' },
    ...ENGINE_OPTIONS,
    ...BACKEND_OPTION,
  },
  /** `--objective classify`: the classifier's command, with its own options. */
  route(argv) {
    const i = argv.findIndex((a) => a === '--objective' || a.startsWith('--objective='));
    const v = i < 0 ? null : argv[i].includes('=') ? argv[i].slice(12) : argv[i + 1];
    return v === 'classify' ? classify : this;
  },
  moreHelp: namesHelp,
  main: ({ values, given }) => train({ ...values, given }),
};

// The run's settings: from the options, or from the checkpoint being resumed (then its bytes too).
function trainSettings(o) {
  if (o.resume) {
    if (o.init)
      throw new CliError('--init starts a new run; --resume continues one (its weights come from the checkpoint)', 2);
    refuseOnResume(o.given, [
      'objective',
      'preset',
      'config',
      'batch',
      'steps',
      'epochs',
      'lr',
      'minLr',
      'warmup',
      'warmupEpochs',
      'maskRatio',
      'seed',
      'weightDecay',
      'gradAccum',
      'augment',
      'hflip',
      'scale',
      'ratio',
      'mean',
      'std',
      'imgSize',
    ]);
    const c = readCheckpoint(o.resume, 'vitrine_run', 'vitrine train', o.data ?? null, { requireCrc: !!o.requireCrc });
    return { run: c.run, resumeBytes: c.bytes, step: c.step };
  }
  if (o.requireCrc) throw new CliError('--require-crc is for --resume FILE', 2);
  const objective = o.objective || TRAIN_DEFAULTS.objective;
  const config = o.config != null ? readConfig(o.config) : null;
  if (o.initStrict && !o.init) throw new CliError('--init-strict needs --init FILE', 2);
  return {
    run: {
      objective,
      preset: config ? null : o.preset || TRAIN_DEFAULTS.preset,
      config,
      batch: o.batch ?? TRAIN_DEFAULTS.batch,
      data: o.data ? path.resolve(o.data) : 'fashion-mnist',
      init: o.init ? path.resolve(o.init) : null,
    },
    resumeBytes: null,
    step: 0,
  };
}

// Before the Trainer is made: the engine (the checkpoint's build), the checkpoint's training state
// (Vitrine.checkTrainState), the model's spec and one batch at its size checked by the engine --
// all before anything is allocated or any image is read at that size. The engine stays for the
// results (restoreModel).
async function checkRun(o, { run, resumeBytes }, options) {
  // (on wasm whatever the --backend: the steps' backend is the Trainer's)
  const vt = await loadEngineFor({ ...o, backend: undefined }, run, resumeBytes && o.resume);
  try {
    if (resumeBytes) checkState(vt, o.resume, resumeBytes);
    const spec = resumeBytes ? run.spec : runSpec(options);
    checkBatch(
      run.batch * ((resumeBytes ? run.gradAccum : options.gradAccum) || 1),
      specDims(vt, spec, { from: resumeBytes ? { file: o.resume, field: 'model_config' } : null }),
    );
  } catch (e) {
    vt.close();
    throw e;
  }
  return vt;
}

async function train(o) {
  const say = (s) => process.stderr.write(s + '\n');
  const warn = (s) => say(`vitrine train: warning: ${s}`);
  if (o.maxImageMp === 0) throw new CliError("--max-image-mp: '0' megapixels admits no image", 2);
  if (o.maskRatio != null && !(o.maskRatio >= 0 && o.maskRatio < 1))
    throw new CliError(`--mask-ratio: ${o.maskRatio} is not in [0, 1)`, 2);
  if (o.out === '') throw new CliError('--out: an empty folder name', 2);
  const t0 = performance.now(),
    settings = trainSettings(o),
    { run, resumeBytes } = settings,
    outDir = o.out || TRAIN_DEFAULTS.out;
  if (o.stopAt != null) stopAtOf(o, run, settings.step); // at or below a resumed run's step: nothing to do
  // a resumed run continues bit for bit only in the build that trained it (fused and unfused
  // multiply-adds round differently): keep the checkpoint's build unless told otherwise
  if (run.wasm && o.wasm && o.wasm !== run.wasm)
    warn(`the run was trained with the ${run.wasm} build; continuing with ${o.wasm} changes the bits`);
  const outputs = new Outputs(outDir, {
    state: path.join(outDir, STATE_FILE),
    weights: path.join(outDir, WEIGHTS_FILE),
    image: path.join(outDir, IMAGE_FILE),
  });
  const stopAt = o.stopAt ?? null,
    maxPixels = (o.maxImageMp ?? DEFAULT_MAX_PIXELS / 1e6) * 1e6;
  let side = null,
    vt = null;
  try {
    const options = resumeBytes
      ? { resume: resumeBytes, resumeName: o.resume, data: dataOption(run.data), policy: o.policy }
      : {
          objective: run.objective,
          model: run.preset || undefined,
          config: run.config ?? undefined,
          data: dataOption(run.data),
          batch: run.batch,
          steps: o.epochs == null ? (o.steps ?? TRAIN_DEFAULTS.steps) : undefined,
          maskRatio: o.maskRatio ?? TRAIN_DEFAULTS.maskRatio,
          seed: o.seed || TRAIN_DEFAULTS.seed,
          policy: o.policy || TRAIN_DEFAULTS.policy,
          weights: run.init ?? undefined,
          weightsStrict: !!o.initStrict,
          runInfo: { data: run.data, init: run.init },
          ...scheduleOptions(o),
        };
    Object.assign(options, {
      wasm: o.wasm || run.wasm,
      threads: o.threads,
      backend: o.backend,
      stopAt: stopAt ?? undefined,
      maxPixels,
      noEval: true,
    });
    vt = await checkRun(o, { run, resumeBytes }, options);
    let eng = null,
      info = null;
    const loop = await runTrainer({
      options,
      outputs,
      saveEvery: o.saveEvery ?? TRAIN_DEFAULTS.saveEvery,
      warn,
      onReady: (i, engine) => {
        info = i;
        eng = engine;
        const r = i.run,
          { img, chans, patch, dim, depth } = i.dims,
          s = i.run.steps;
        if (i.init) sayInit(i.init, r.init);
        say(
          `vitrine train: ${r.spec.kind.toUpperCase()} ${r.preset || 'config'} ${img}x${img}x${chans} patch ${patch} dim ${dim} depth ${depth}, ` +
            `${i.images} images (${r.data}), batch ${r.batch}${r.gradAccum > 1 ? ` x ${r.gradAccum} accumulated` : ''}, steps ${i.step ? i.step + '..' : ''}${Math.min(s, stopAt ?? s)}/${s}, lr ${r.lr}` +
            `${r.minLr ? ` -> ${r.minLr}` : ''}${r.spec.kind === 'mae' && r.maskRatio != null ? `, mask ratio ${r.maskRatio}` : ''}, normalisation ${i.normalization.source}, grad checkpointing ${i.policy}, ` +
            `wasm ${engine.build}, ${engine.threads} thread${engine.threads === 1 ? '' : 's'}${engine.threadsNote ? ` (${engine.threadsNote})` : ''}` +
            `, backend ${engine.backend.name}${engine.backend.name === 'wasm' && !o.backend ? '' : ` (${engine.backend.reason})`}`,
        );
        if (!o.noEval && (stopAt ?? s) >= s) {
          let initBytes = null;
          if (r.init && !resumeBytes)
            try {
              initBytes = readInput(r.init);
            } catch (e) {
              warn(`--init ${r.init}: ${why(e)}`);
            }
          side = startSideEvaluation(o, { build: engine.build }, r, i, BigInt(r.seed), warn, initBytes, maxPixels);
        }
      },
    });
    const { status, stepped, saveError } = endRun(loop, {
      outputs,
      resumeFile: resumeBytes && o.resume,
      batch: info ? info.run.batch * (info.run.gradAccum || 1) : 0,
      info,
    });
    if (!stepped && loop.interrupted) return status;
    const { result } = loop,
      r = result.run;
    if (!result.checkpoint) {
      // the engine would not save the state (an update made it non-finite): no results of it either
      say(`vitrine train: wrote what it could from step ${result.step}: nothing`);
      return status;
    }
    if (vt.build !== eng.build) {
      vt.close();
      vt = null;
      vt = await loadEngine({ wasm: eng.build, threads: o.threads });
    } // the worker's build, for its bits
    const model = await restoreModel(vt, r, result.checkpoint);
    try {
      try {
        writeResults(model, r, outputs, warn, maxPixels);
      } catch (e) {
        throw new CliError(`${e.message} (${outputs.stateNote()})`);
      }
      if (loop.error || saveError)
        say(`vitrine train: wrote what it could from step ${result.step}: ${outputs.wrote.join(', ') || 'nothing'}`);
      const knn =
        side && !loop.interrupted && !loop.error && !saveError
          ? await knnResults(model, side, say, warn)
          : { trained: null, initial: null, pixels: null };
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
        threads: eng.threads,
      });
    } finally {
      model.dispose();
    }
    return status;
  } finally {
    if (side) side.worker.terminate();
    if (vt) vt.close();
    outputs.cleanUp();
  }
}

// The trained model in this thread (kNN, reconstructions): the run's model with its checkpoint, in
// the engine checkRun loaded (the build the run trained with: --wasm, else the checkpoint's, else
// the default, as the worker picks it).
async function restoreModel(vt, r, state) {
  const model = vt.createModel(r.spec);
  try {
    model.setGradCheckpointing(r.policy);
    model.initWeights(BigInt(r.seed));
    if (r.frozen) {
      model.setRequiresGrad('', true);
      for (const name of r.frozen) model.setRequiresGrad(name, false);
    }
    model.trainerInit({
      lr: r.lr,
      warmupSteps: r.warmup,
      totalSteps: r.steps,
      maskRatio: r.maskRatio ?? 0.75,
      seed: BigInt(r.seed) + 1n,
      ...(r.weightDecay != null ? { weightDecay: r.weightDecay } : {}),
      ...(r.minLr ? { minLr: r.minLr } : {}),
    });
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
