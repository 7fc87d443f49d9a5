// train.js: `vitrine train`, a training run of any registered objective (web/train/objectives/:
// MAE, the main job; AIM; classify; one a module adds with --objective-module). Its flags are the
// option registry's (web/train/options.js and the objective's module) for the objective asked for;
// the run is the Trainer's (web/train/trainer.js, in a worker thread), driven by web/cli/run.js;
// what the run reports is its objective's report (web/cli/reports/: 'encoder' -- the kNN top-1 of
// the encoder beside the untrained encoder's and raw pixels', reconstructions; 'classifier' --
// held-out top-1, confusion; any other: plain.js).
import path from 'node:path';
import { DEFAULT_MAX_PIXELS } from '../train/node-data.js';
import { readSafetensorsMeta } from '../formats/safetensors.js';
import { OPTIONS, own } from '../train/options.js';
import { isTrainPreset } from '../train/objectives/self-supervised.js';
import {
  objectiveNamed,
  objectiveNames,
  registerObjective,
  runDefault,
  objectiveModules,
} from '../train/objectives/index.js';
import { CliError, UsageError, decimal } from './args.js';
import { loadEngineFor, specDims, checkBatch, engineFlags, namesHelp } from './engine.js';
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
  AUGMENT_FLAGS,
  scheduleOptions,
} from './run.js';
import { flagsOf } from './flags.js';
import encoder from './reports/encoder.js';
import classifier from './reports/classifier.js';
import plain from './reports/plain.js';

const REPORTS = { encoder, classifier };
const reportOf = (obj) => (own(REPORTS, obj.report) ? REPORTS[obj.report] : plain);
const DEFAULT_OUT = 'out',
  DEFAULT_SAVE_EVERY = 200;

// the options of a run that the command line gives in its own way (or not at all)
const NOT_FLAGS = new Set(['val', 'maxPixels', 'signal', 'gpu', 'cacheBytes', 'frozen', 'evalEvery', 'evalChunk']);

/** The command for `objective` (its flags: the registry's, the objective's, its report's). */
export function trainCommand(obj) {
  const report = reportOf(obj),
    decls = Object.fromEntries(Object.entries({ ...OPTIONS, ...obj.options }).filter(([k]) => !NOT_FLAGS.has(k)));
  const evaluates = !!obj.evaluate;
  const flags = flagsOf(decls, obj);
  flags.objective = {
    ...flags.objective,
    value: objectiveNames().join('|'),
    help: `what to train (default ${OPTIONS.objective.default}): ${objectiveNames()
      .map((n) => `${n}, ${objectiveNamed(n).summary}`)
      .join(';\n')}`,
    parse: (v, flag) => objectiveNamed(v, flag).name,
  };
  flags['objective-module'] = {
    value: 'FILE',
    key: 'objectiveModule',
    help: 'a module whose default export is an objective to register (docs/api.md, Objectives)',
  };
  if (evaluates) {
    flags['val-dir'] = {
      value: 'DIR',
      help: 'held-out images: a folder with the same classes (default: every 5th image of --data;\nFashion-MNIST: its test set)',
    };
    flags['val-split'] = {
      value: 'F',
      help: `held-out share of --data instead (default ${runDefault(obj, 'val')}: every 5th image; 0: none)`,
      parse: decimal(0, 1, { open: true }),
    };
  } else delete flags['eval-max'];
  Object.assign(flags, AUGMENT_FLAGS, {
    'max-image-mp': {
      value: 'N',
      help: `refuse images over N megapixels, from their header (default ${DEFAULT_MAX_PIXELS / 1e6})`,
      parse: decimal(0, 1e6),
    },
    out: {
      value: 'DIR',
      help: `where ${Object.values(report.files).join(', ')} go (default ${DEFAULT_OUT})`,
    },
    'require-crc': { type: 'boolean', help: 'with --resume: refuse a checkpoint without CRC-32s of its tensors' },
    json: { type: 'boolean', help: 'end the output with one JSON line' },
    ...report.options,
    ...engineFlags(),
  });
  flags['save-every'].help = `write the checkpoint every N steps (default ${DEFAULT_SAVE_EVERY}; and at the end)`;
  const isDefault = obj.name === OPTIONS.objective.default;
  return {
    name: 'train',
    summary: 'train a ViT: MAE / AIM pre-training (the main job), a classifier (--objective classify), ...',
    usage: isDefault
      ? 'vitrine train [options]          (vitrine train --objective classify --help: the classifier)'
      : `vitrine train --objective ${obj.name} [options]`,
    description: `Trains with objective ${obj.name}: ${obj.summary}.\n${DESCRIPTIONS[obj.report] || "Saves the run's weights and a resumable checkpoint."}`,
    options: flags,
    helpHint: isDefault ? 'train' : `train --objective ${obj.name}`,
    moreHelp: namesHelp,
    main: ({ values, given }) => train(obj, { ...values, given }),
  };
}

const DESCRIPTIONS = {
  encoder:
    "Then reports the kNN top-1 accuracy of its encoder beside the untrained encoder's and raw\npixels'; saves its weights (timm keys), a resumable checkpoint and a picture of reconstructions.",
  classifier:
    "Fine-tunes timm's VisionTransformer (num_classes, pool -> fc_norm -> head) to labels with\ncross-entropy (timm's label smoothing), AdamW, cosine schedule; reports top-1 and the confusion\nmatrix on held-out images (Fashion-MNIST: the whole test set; a folder: every 5th image).",
};

// the value of --name in argv (--name V or --name=V), or undefined
function argOf(argv, name) {
  const i = argv.findIndex((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (i < 0) return undefined;
  return argv[i].includes('=') ? argv[i].slice(name.length + 3) : argv[i + 1];
}

export const command = {
  name: 'train',
  summary: 'train a ViT: MAE / AIM pre-training (the main job), a classifier (--objective classify), ...',
  /** The command of the objective --objective names (after --objective-module registers one). */
  async route(argv) {
    const mod = argOf(argv, 'objective-module');
    if (mod != null)
      try {
        await registerObjective(mod);
      } catch (e) {
        throw new UsageError(`--objective-module: ${e.message}`);
      }
    const name = argOf(argv, 'objective') ?? OPTIONS.objective.default;
    if (argv.includes('--help') || argv.includes('-h') || objectiveNames().includes(name))
      return trainCommand(objectiveNamed(objectiveNames().includes(name) ? name : OPTIONS.objective.default));
    throw new UsageError(`--objective: '${name}' (use ${objectiveNames().join(' or ')})`);
  },
};

// The run's settings: from the options, or from the checkpoint being resumed (then its bytes too).
function trainSettings(obj, o) {
  if (o.resume) {
    if (o.weights)
      throw new CliError('--init starts a new run; --resume continues one (its weights come from the checkpoint)', 2);
    refuseOnResume(o.given, obj);
    const what = obj.name === OPTIONS.objective.default ? 'vitrine train' : `vitrine train --objective ${obj.name}`;
    const c = readCheckpoint(o.resume, obj.runKey, what, o.data ?? null, { requireCrc: !!o.requireCrc });
    if (c.run.objective !== obj.name)
      throw new CliError(`${o.resume}: a checkpoint of objective ${c.run.objective}, not ${obj.name} (--objective)`, 2);
    return { run: c.run, resumeBytes: c.bytes, step: c.step };
  }
  if (o.requireCrc) throw new CliError('--require-crc is for --resume FILE', 2);
  if (o.weightsStrict && !o.weights) throw new CliError('--init-strict needs --init FILE', 2);
  const config = o.config != null ? readConfig(o.config) : null;
  const init = o.weights == null ? null : /^https?:/i.test(o.weights) ? o.weights : path.resolve(o.weights);
  return {
    run: {
      objective: obj.name,
      // a config replaces a train preset; under a timm architecture it is the decoder / head
      preset: config && (o.model == null || isTrainPreset(o.model)) ? null : (o.model ?? null),
      config,
      batch: o.batch ?? runDefault(obj, 'batch'),
      data: o.data ? path.resolve(o.data) : 'fashion-mnist',
      init,
    },
    resumeBytes: null,
    step: 0,
  };
}

// The objective of the run a checkpoint file continues, when it says (else null: readCheckpoint
// names what is wrong with it)
function objectiveOfCheckpoint(file) {
  try {
    const meta = readSafetensorsMeta(readInput(file));
    for (const name of objectiveNames()) {
      const key = objectiveNamed(name).runKey;
      if (!own(meta, key) || typeof meta[key] !== 'string') continue;
      const run = JSON.parse(meta[key]);
      if (run && (run.objective === name || (run.objective == null && key !== 'vitrine_run')))
        return objectiveNamed(name);
    }
  } catch {
    /* named when it is read */
  }
  return null;
}

// What a local --init file says of the encoder it holds (its metadata, for an objective that
// builds its model from it), or null (a URL; a file that cannot be read is named when the run reads it).
function initMeta(init) {
  if (!init || /^https?:/i.test(init)) return null;
  try {
    return { meta: readSafetensorsMeta(readInput(init)), name: `--init ${init}` };
  } catch {
    return null;
  }
}

// Before the Trainer is made: the engine (the checkpoint's build), the checkpoint's training state
// (Vitrine.checkTrainState), the model's spec and one batch at its size checked by the engine --
// all before anything is allocated or any image is read at that size. The engine stays for the
// report when it restores the trained model (report.keepsEngine).
async function checkRun(o, obj, report, { run, resumeBytes }, options) {
  const vt = await loadEngineFor(
    { ...o, backend: undefined, threads: report.keepsEngine ? o.threads : 1 },
    run,
    resumeBytes && o.resume,
  );
  try {
    if (resumeBytes) checkState(vt, o.resume, resumeBytes);
    let spec = run.spec,
      from = resumeBytes ? { file: o.resume, field: obj.specInState ? 'model_config' : `${obj.runKey}.spec` } : null;
    if (!spec) {
      const weights = initMeta(run.init),
        probe = {};
      try {
        spec = obj.spec(options, { weights, run: probe });
      } catch (e) {
        if (e.field) throw new CliError(e.message);
        throw new CliError(e.message, 2);
      }
      if (probe.preset === null) from = { file: run.init, field: 'timm_kwargs', what: 'damaged encoder metadata' };
    }
    checkBatch(run.batch * ((resumeBytes ? run.gradAccum : options.gradAccum) || 1), specDims(vt, spec, { from }));
  } catch (e) {
    vt.close();
    throw e;
  }
  if (report.keepsEngine) return vt;
  vt.close();
  return null;
}

// The Trainer's options of the run: a resumed one's (the checkpoint says the rest), or a new one's
// from the flags (what the objective defaults is left to the run, but steps: the CLI's default)
function trainerOptions(obj, o, { run, resumeBytes }) {
  const fmnist = run.data === 'fashion-mnist';
  const val =
    o.valDir != null
      ? dataOption(path.resolve(o.valDir))
      : o.valSplit != null
        ? o.valSplit
        : fmnist && obj.evaluate
          ? 'fashion-mnist:test'
          : undefined;
  if (resumeBytes)
    return { resume: resumeBytes, resumeName: o.resume, data: dataOption(run.data), val, policy: o.policy };
  const own = {};
  for (const k of Object.keys(obj.options || {})) if (o[k] !== undefined) own[k] = o[k];
  return {
    objective: obj.name,
    model: run.preset ?? undefined,
    config: run.config ?? undefined,
    data: dataOption(run.data),
    val,
    weights: run.init ?? undefined,
    weightsStrict: !!o.weightsStrict,
    batch: run.batch,
    steps: o.epochs == null ? (o.steps ?? runDefault(obj, 'steps')) : undefined,
    seed: o.seed ?? runDefault(obj, 'seed'),
    policy: o.policy || runDefault(obj, 'policy'),
    trainMax: o.trainMax,
    runInfo: { data: run.data, init: run.init },
    ...own,
    ...scheduleOptions(o),
  };
}

async function train(obj, o) {
  if (o.resume && !o.given.has('objective')) obj = objectiveOfCheckpoint(o.resume) || obj; // the checkpoint says
  const report = reportOf(obj);
  const say = (s) => process.stderr.write(s + '\n');
  const warn = (s) => say(`vitrine train: warning: ${s}`);
  if (o.maxImageMp === 0) throw new CliError("--max-image-mp: '0' megapixels admits no image", 2);
  if (o.out === '') throw new CliError('--out: an empty folder name', 2);
  if (o.valDir != null && o.valSplit != null) throw new CliError('--val-dir and --val-split: give one', 2);
  const t0 = performance.now(),
    settings = trainSettings(obj, o),
    { run, resumeBytes } = settings,
    outDir = o.out || DEFAULT_OUT;
  if (o.stopAt != null) stopAtOf(o, run, settings.step); // at or below a resumed run's step: nothing to do
  // a resumed run continues bit for bit only in the build that trained it (fused and unfused
  // multiply-adds round differently): keep the checkpoint's build unless told otherwise
  if (run.wasm && o.wasm && o.wasm !== run.wasm)
    warn(`the run was trained with the ${run.wasm} build; continuing with ${o.wasm} changes the bits`);
  const outputs = new Outputs(
    outDir,
    Object.fromEntries(Object.entries(report.files).map(([k, f]) => [k, path.join(outDir, f)])),
  );
  const maxPixels = (o.maxImageMp ?? DEFAULT_MAX_PIXELS / 1e6) * 1e6;
  const ctx = { o, obj, resumeBytes, outputs, say, warn, t0, maxPixels, stopAt: o.stopAt ?? null, vt: null };
  // Ctrl-C / SIGTERM after the steps (the report's evaluation): heard here, said by the report
  // (during the steps runTrainer hears them: the run stops at a step boundary)
  const stop = new AbortController();
  ctx.signal = stop.signal;
  const onSig = (sig) => {
    if (!ctx.finishing) return;
    ctx.interrupted = ctx.interrupted || sig;
    stop.abort();
  };
  process.on('SIGINT', onSig);
  process.on('SIGTERM', onSig);
  try {
    const options = trainerOptions(obj, o, settings);
    Object.assign(options, {
      wasm: o.wasm || run.wasm,
      threads: o.threads,
      backend: o.backend,
      stopAt: o.stopAt ?? undefined,
      valMax: o.valMax,
      maxPixels,
      noEval: report.noEval(o),
      evalChunk: 250,
      objectiveModules: objectiveModules(),
      cliFlags: true, // the run's messages name these flags
    });
    ctx.vt = await checkRun(o, obj, report, settings, options);
    const loop = await runTrainer({
      options,
      outputs,
      saveEvery: o.checkpointEvery ?? DEFAULT_SAVE_EVERY,
      warn,
      onReady: (i, engine) => {
        ctx.info = i;
        ctx.engine = engine;
        if (i.init) sayInit(i.init, i.run.init);
        report.onReady(ctx, i, engine); // (says the run's line, and what it starts beside it)
      },
    });
    const info = ctx.info;
    const { status, stepped, saveError } = endRun(loop, {
      outputs,
      resumeFile: resumeBytes && o.resume,
      batch: info ? info.run.batch * (info.run.gradAccum || 1) : 0,
      info,
    });
    if (!stepped && loop.interrupted) return status;
    Object.assign(ctx, { loop, saveError, finishing: true });
    await report.finish(ctx);
    if (!ctx.interrupted || status) return status;
    if (!ctx.saidInterrupt) say(`vitrine train: interrupted (${ctx.interrupted}) as the results were written`);
    return ctx.interrupted === 'SIGINT' ? 130 : 143;
  } finally {
    process.off('SIGINT', onSig);
    process.off('SIGTERM', onSig);
    if (report.cleanUp) report.cleanUp(ctx);
    if (ctx.vt) ctx.vt.close();
    outputs.cleanUp();
  }
}
