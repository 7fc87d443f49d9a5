// classify.js: `vitrine train --objective classify` -- timm's VisionTransformer with num_classes,
// fine-tuned to labels (Fashion-MNIST or a folder whose sub-folders are classes) from random init,
// a `vitrine train` encoder or timm / lightly weights (--init); top-1 and the confusion matrix on
// held-out images; classifier.safetensors (timm keys, head included; class names and normalisation
// in its metadata, what `vitrine predict` reads) and a resumable checkpoint. The settings are
// web/train/objectives/classify.js's (the demo trains with the same); the training loop is the Trainer's
// (web/train/trainer.js, in a worker thread), run by web/cli/run.js as for the main job.
import path from 'node:path';
import { DEFAULT_MAX_PIXELS } from '../train/node-data.js';
import { TRAIN_PRESETS } from '../train/presets.js';
import { CLASSIFY_DEFAULTS, classifierSpec } from '../train/objectives/classify.js';
import { TIMM_PRETRAINED } from '../formats/pretrained.js';
import { CliError, whole, decimal, oneOf, seed } from './args.js';
import { loadEngine, specDims, checkBatch, ENGINE_OPTIONS, BACKEND_OPTION, namesHelp } from './engine.js';
import { readSafetensorsMeta } from '../formats/safetensors.js';
import { runSpec, encoderKwargs } from '../train/session.js';
import { readInput, readConfig, Outputs } from './io.js';
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

const DEFAULTS = {
  preset: 'fmnist-p7-mlp2',
  batch: 128,
  steps: 3500,
  policy: 'block',
  out: 'out',
  seed: '0',
  saveEvery: 200,
  augment: 'none',
  ...CLASSIFY_DEFAULTS,
};
const WEIGHTS = 'classifier.safetensors',
  STATE = 'classify-checkpoint.safetensors',
  COUNT = 2000000000;

export const command = {
  name: 'train',
  usage: 'vitrine train --objective classify [options]',
  description:
    "Fine-tunes timm's VisionTransformer (num_classes, pool -> fc_norm -> head) to labels with\n" +
    "cross-entropy (timm's label smoothing), AdamW, cosine schedule; reports top-1 and the confusion\n" +
    'matrix on held-out images (Fashion-MNIST: the whole test set; a folder: every 5th image).',
  options: {
    objective: { value: 'classify', help: 'this command (mae, aim: vitrine train --help)', parse: oneOf('classify') },
    preset: {
      value: 'NAME',
      alias: 'model',
      help: `the encoder: ${Object.keys(TRAIN_PRESETS).join(', ')} (default ${DEFAULTS.preset}), or a timm\narchitecture (one of the ${Object.keys(TIMM_PRETRAINED).length} timm presets below: timm's create_model)`,
    },
    config: { value: 'JSON|FILE', help: 'the encoder as timm kwargs instead of a preset' },
    data: { value: 'DIR', help: 'a folder whose sub-folders are classes (default: Fashion-MNIST)' },
    'val-dir': {
      value: 'DIR',
      help: 'held-out images: a folder with the same classes (default: every 5th image of --data;\nFashion-MNIST: its test set)',
    },
    'val-split': {
      value: 'F',
      help: 'held-out share of --data instead (0.2: every 5th image; 0: none)',
      parse: decimal(0, 1, { open: true }),
    },
    init: {
      value: 'FILE|URL',
      help: "start from weights: out/encoder.safetensors of vitrine train (MAE / AIM), a timm or\nlightly state_dict, a file or an http(s) URL (default: random init); the encoder's\narchitecture comes from the file's timm_kwargs unless --preset / --config; a pos_embed /\npatch_embed of another size is resampled as timm does",
    },
    'init-strict': { type: 'boolean', help: 'with --init: any skipped tensor is an error' },
    pool: {
      value: 'token|avg',
      help: `[CLS] token, or mean of patch tokens + fc_norm (default ${DEFAULTS.pool}; a timm architecture:\ntoken, timm's default)`,
      parse: oneOf('token', 'avg'),
    },
    batch: {
      value: 'B',
      short: 'b',
      alias: 'batch-size',
      help: `images per step (default ${DEFAULTS.batch}; with --grad-accum-steps K: per micro-batch)`,
      parse: whole(1, 65536),
    },
    steps: { value: 'N', help: `training steps (default ${DEFAULTS.steps})`, parse: whole(1, COUNT) },
    lr: { value: 'LR', help: `peak learning rate (default ${DEFAULTS.lr})`, parse: decimal(0, 1000) },
    warmup: { value: 'N', help: 'warm-up steps (default 5% of --steps)', parse: whole(0, COUNT) },
    ...SCHEDULE_OPTIONS,
    'label-smoothing': {
      value: 'S',
      help: `timm's LabelSmoothingCrossEntropy smoothing (default ${DEFAULTS.labelSmoothing})`,
      parse: decimal(0, 1, { open: true }),
    },
    'grad-checkpointing': {
      value: 'POLICY',
      key: 'policy',
      help: `checkpointing policy (default ${DEFAULTS.policy}; see below)`,
    },
    seed: { value: 'S', help: 'initialisation S, data order S+2, augmentation S+3 (default 0)', parse: seed },
    'train-max': { value: 'N', help: 'use only the first N training images', parse: whole(1, 2 ** 31 - 1) },
    'eval-max': { value: 'N', help: 'use only the first N held-out images', parse: whole(1, 2 ** 31 - 1) },
    out: { value: 'DIR', help: `where ${WEIGHTS} and ${STATE} go (default ${DEFAULTS.out})` },
    'save-every': {
      value: 'N',
      help: `write the checkpoint every N steps (default ${DEFAULTS.saveEvery}; and at the end)`,
      parse: whole(1, COUNT),
    },
    'stop-at': {
      value: 'STEP',
      help: 'stop after STEP steps (checkpoint written, no evaluation)',
      parse: whole(1, COUNT),
    },
    resume: {
      value: 'FILE|DIR',
      help: 'continue a checkpoint bit for bit, or a run PyTorch trained (a folder: docs/scale-out.md)',
    },
    'require-crc': { type: 'boolean', help: 'with --resume: refuse a checkpoint without CRC-32s of its tensors' },
    'max-image-mp': {
      value: 'N',
      help: `refuse images over N megapixels, from their header (default ${DEFAULT_MAX_PIXELS / 1e6})`,
      parse: decimal(0, 1e6),
    },
    'no-eval': { type: 'boolean', help: 'skip the held-out evaluation' },
    json: { type: 'boolean', help: 'end the output with one JSON line' },
    ...ENGINE_OPTIONS,
    ...BACKEND_OPTION,
  },
  helpHint: 'train --objective classify',
  moreHelp: namesHelp,
  main: ({ values, given }) => trainClassify({ ...values, given }),
};

// The run's settings (from the options, or from the checkpoint resumed) and the checkpoint bytes.
function settings(o) {
  if (o.resume) {
    refuseOnResume(o.given, [
      'preset',
      'config',
      'init',
      'pool',
      'batch',
      'steps',
      'epochs',
      'lr',
      'minLr',
      'warmup',
      'warmupEpochs',
      'weightDecay',
      'labelSmoothing',
      'augment',
      'hflip',
      'scale',
      'ratio',
      'seed',
      'trainMax',
      'gradAccum',
      'mean',
      'std',
      'imgSize',
      'valSplit',
    ]);
    const c = readCheckpoint(o.resume, 'vitrine_classify', 'vitrine train --objective classify', o.data ?? null, {
      requireCrc: !!o.requireCrc,
    });
    return { run: c.run, resumeBytes: c.bytes, step: c.step };
  }
  if (o.requireCrc) throw new CliError('--require-crc is for --resume FILE', 2);
  if (o.initStrict && !o.init) throw new CliError('--init-strict needs --init FILE', 2);
  const config = o.config != null ? readConfig(o.config) : null;
  const init = o.init == null ? null : /^https?:/i.test(o.init) ? o.init : path.resolve(o.init);
  return {
    run: {
      preset: config ? null : o.preset || (init ? null : DEFAULTS.preset),
      config,
      data: o.data ? path.resolve(o.data) : 'fashion-mnist',
      init,
    },
    resumeBytes: null,
    step: 0,
  };
}

// The encoder an --init file (a local one) was trained as, when it says (vitrine's
// encoder.safetensors carries timm's constructor arguments, timm_kwargs: the classifier is built to
// match it): its kwargs checked as the run checks them (web/train/session.js encoderKwargs), or null.
function initKwargs(file) {
  let meta;
  try {
    meta = readSafetensorsMeta(readInput(file));
  } catch (e) {
    return null;
  } // named again, with the reason, when the run reads it
  try {
    return encoderKwargs(meta, `--init ${file}`);
  } catch (e) {
    throw new CliError(e.message);
  }
}

// Before the Trainer is made, with the engine and nothing allocated: a resumed checkpoint's
// training state (Vitrine.checkTrainState); the classifier's spec -- the stored one, else the one
// --preset / --config / --init's encoder give (a stand-in head: the data's classes size it) -- and
// one batch at its size, so that no image is read at a size the engine refuses.
async function checkRun(o, { run, resumeBytes }, options) {
  const vt = await loadEngine({ wasm: o.wasm, threads: 1 });
  try {
    if (resumeBytes) checkState(vt, o.resume, resumeBytes);
    let spec = run.spec,
      from = resumeBytes ? { file: o.resume, field: 'vitrine_classify.spec' } : null;
    if (!spec) {
      const kw =
        options.model == null && options.config == null && run.init && !/^https?:/i.test(run.init)
          ? initKwargs(run.init)
          : null;
      try {
        spec = kw
          ? classifierSpec({ config: { encoder: kw }, numClasses: 2, pool: options.pool || CLASSIFY_DEFAULTS.pool })
          : runSpec(options);
      } catch (e) {
        throw new CliError(e.message, 2);
      }
      if (kw) from = { file: run.init, field: 'timm_kwargs', what: 'damaged encoder metadata' };
    }
    checkBatch(run.batch * ((resumeBytes ? run.gradAccum : options.gradAccum) || 1), specDims(vt, spec, { from }));
  } finally {
    vt.close();
  }
}

async function trainClassify(o) {
  const say = (s) => process.stderr.write(s + '\n'),
    warn = (s) => say(`vitrine train: warning: ${s}`);
  if (o.maxImageMp === 0) throw new CliError("--max-image-mp: '0' megapixels admits no image", 2);
  if (o.out === '') throw new CliError('--out: an empty folder name', 2);
  if (o.valDir != null && o.valSplit != null) throw new CliError('--val-dir and --val-split: give one', 2);
  const t0 = performance.now(),
    st = settings(o),
    { run, resumeBytes } = st;
  if (o.stopAt != null) stopAtOf(o, run, st.step); // at or below a resumed run's step: nothing to do
  const fmnist = run.data === 'fashion-mnist',
    maxPixels = (o.maxImageMp ?? DEFAULT_MAX_PIXELS / 1e6) * 1e6;
  const val =
    o.valDir != null
      ? dataOption(path.resolve(o.valDir))
      : o.valSplit != null
        ? o.valSplit
        : fmnist
          ? 'fashion-mnist:test'
          : undefined;
  const outDir = o.out || DEFAULTS.out;
  const outputs = new Outputs(outDir, { state: path.join(outDir, STATE), weights: path.join(outDir, WEIGHTS) });
  try {
    const options = resumeBytes
      ? { resume: resumeBytes, resumeName: o.resume, data: dataOption(run.data), val, policy: o.policy }
      : {
          objective: 'classify',
          model: run.preset ?? undefined,
          config: run.config ?? undefined,
          pool: o.pool,
          data: dataOption(run.data),
          val,
          weights: run.init ?? undefined,
          weightsStrict: !!o.initStrict,
          batch: o.batch ?? DEFAULTS.batch,
          steps: o.epochs == null ? (o.steps ?? DEFAULTS.steps) : undefined,
          labelSmoothing: o.labelSmoothing,
          seed: o.seed || DEFAULTS.seed,
          policy: o.policy || DEFAULTS.policy,
          trainMax: o.trainMax,
          runInfo: { data: run.data, init: run.init },
          ...scheduleOptions(o),
        };
    Object.assign(options, {
      wasm: o.wasm,
      threads: o.threads,
      backend: o.backend,
      stopAt: o.stopAt,
      valMax: o.evalMax,
      maxPixels,
      noEval: !!o.noEval,
      evalChunk: 250,
    });
    if (!resumeBytes) run.batch = options.batch;
    await checkRun(o, st, options);
    let info = null,
      initReport = null;
    const loop = await runTrainer({
      options,
      outputs,
      saveEvery: o.saveEvery ?? DEFAULTS.saveEvery,
      warn,
      memory: true,
      onReady: (i, engine) => {
        info = i;
        initReport = i.init;
        const r = i.run,
          { img, chans, dim, depth } = i.dims;
        if (i.init) sayInit(i.init, r.init);
        if (!i.heldOut) warn('no held-out images (a folder needs at least 5), so no evaluation');
        say(
          `vitrine train: classify ${r.preset || (r.init && !r.config && !resumeBytes ? 'encoder of --init' : 'config')} ${img}x${img}x${chans} dim ${dim} depth ${depth}, ` +
            `${i.classes.length} classes, pool ${r.pool}, ${i.images} training images (${r.data}), ${i.heldOut} held out, batch ${r.batch}${r.gradAccum > 1 ? ` x ${r.gradAccum} accumulated` : ''}, ` +
            `steps ${i.step ? i.step + '..' : ''}${Math.min(r.steps, o.stopAt ?? r.steps)}/${r.steps}, lr ${r.lr}${r.minLr ? ` -> ${r.minLr}` : ''}, label smoothing ${r.labelSmoothing}, augment ${r.augment}, ` +
            `normalisation ${i.normalization.source}, init ${r.init ? path.basename(r.init) : 'random'}, grad checkpointing ${i.policy}, wasm ${engine.build}` +
            `, backend ${engine.backend.name}${engine.backend.name === 'wasm' && !o.backend ? '' : ` (${engine.backend.reason})`}`,
        );
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
      r = result.run,
      classes = result.classes,
      ev = result.eval;
    if (result.weights) {
      // (none when the engine would not save the state: an update made it non-finite)
      try {
        outputs.write(outputs.paths.weights, result.weights);
      } catch (e) {
        throw new CliError(`${e.message} (${outputs.stateNote()})`);
      }
    }
    if (loop.error || saveError)
      say(`vitrine train: wrote what it could from step ${result.step}: ${outputs.wrote.join(', ') || 'nothing'}`);
    if (ev) say(`vitrine train: evaluation of ${ev.n} images ${ev.seconds.toFixed(1)} s`);
    const seconds = (performance.now() - t0) / 1000,
      done = result.trained,
      trainSeconds = result.trainSeconds,
      lastLoss = result.lossLast ?? r.lossFirst ?? null;
    const initName = r.init ? path.basename(r.init) : 'random';
    process.stdout.write(
      `${result.step >= r.steps ? 'trained' : 'stopped at'} step ${result.step}/${r.steps} (classify, ${classes.length} classes, batch ${r.batch}, ` +
        `init ${initName}) in ${seconds.toFixed(1)} s\n` +
        `loss ${r.lossFirst != null ? r.lossFirst.toFixed(4) : 'n/a'} (first step) -> ${lastLoss != null ? lastLoss.toFixed(4) : 'n/a'} (last)\n` +
        (ev
          ? `top-1 ${(100 * ev.top1).toFixed(2)}% on ${ev.n} held-out images (${o.valDir ? o.valDir : fmnist ? 'the Fashion-MNIST test set' : 'every 5th image'})\n` +
            confusionText(ev.confusion, classes)
          : '') +
        `classifier weights (timm keys, head)  ${outputs.paths.weights}\ntraining checkpoint                   ${outputs.paths.state}\n`,
    );
    if (o.json) {
      process.stdout.write(
        JSON.stringify({
          objective: 'classify',
          steps: result.step,
          loss_first: r.lossFirst ?? null,
          loss_last: lastLoss,
          top1: ev ? ev.top1 : null,
          eval_images: ev ? ev.n : 0,
          classes,
          confusion: ev ? ev.confusion : null,
          train_images_per_second: done
            ? Number(((done * r.batch * (r.gradAccum || 1)) / trainSeconds).toFixed(1))
            : null,
          train_seconds: Number(trainSeconds.toFixed(3)),
          seconds: Number(seconds.toFixed(3)),
          init: r.init ?? null,
          init_report: initReport,
          normalization: { mean: r.mean ?? null, std: r.std ?? null },
          weights: outputs.paths.weights,
          checkpoint: outputs.paths.state,
        }) + '\n',
      );
    }
    return status;
  } finally {
    outputs.cleanUp();
  }
}

function confusionText(conf, classes) {
  const w = Math.max(5, ...conf.flat().map((v) => String(v).length)) + 1;
  const short = classes.map((c) => c.slice(0, w - 1));
  let s = `confusion (rows: true, columns: predicted)\n${' '.repeat(14)}${short.map((c) => c.padStart(w)).join('')}\n`;
  conf.forEach((row, i) => {
    s += `${classes[i].slice(0, 13).padEnd(14)}${row.map((v) => String(v).padStart(w)).join('')}\n`;
  });
  return s;
}
