// classify.js: `vitrine train --objective classify` -- timm's VisionTransformer with num_classes,
// fine-tuned to labels (Fashion-MNIST or a folder whose sub-folders are classes) from random init,
// a `vitrine train` encoder or timm / lightly weights (--init); top-1 and the confusion matrix on
// held-out images; classifier.safetensors (timm keys, head included; class names in its metadata,
// what `vitrine predict` reads) and a resumable checkpoint. The settings are web/classify.js's (the
// demo trains with the same), the loop is web/cli/run.js's (the main job's).
import path from 'node:path';
import { loadFashionMNIST, loadImageFolder, DEFAULT_MAX_PIXELS } from '../data.js';
import { adapt } from '../images.js';
import { readSafetensorsMeta, withMetadata } from '../safetensors.js';
import { TRAIN_PRESETS } from '../train.js';
import { classifierSpec, splitEval, ClassifyRun, evaluate, CLASSIFY_DEFAULTS, CLASSIFIER_FORMAT, classifyTrainerOptions,
  parseAugment, augmentText } from '../classify.js';
import { CliError, whole, decimal, oneOf, seed } from './args.js';
import { loadEngine, specDims, checkBatch, ENGINE_OPTIONS, namesHelp } from './engine.js';
import { checkEncoder } from '../metadata.js';
import { readInput, readConfig, why, Outputs } from './io.js';
import { readCheckpoint, checkState, refuseOnResume, stopAtOf, setPolicy, trainSteps, endSteps } from './run.js';

const DEFAULTS = { preset: 'fmnist-p7-mlp2', batch: 128, steps: 3500, policy: 'block', out: 'out', seed: '0', saveEvery: 200,
  augment: 'none', ...CLASSIFY_DEFAULTS };
const WEIGHTS = 'classifier.safetensors', STATE = 'classify-checkpoint.safetensors', COUNT = 2000000000;

export const command = {
  name: 'train',
  usage: 'vitrine train --objective classify [options]',
  description: 'Fine-tunes timm\'s VisionTransformer (num_classes, pool -> fc_norm -> head) to labels with\n' +
    'cross-entropy (timm\'s label smoothing), AdamW, cosine schedule; reports top-1 and the confusion\n' +
    'matrix on held-out images (Fashion-MNIST: the whole test set; a folder: every 5th image).',
  options: {
    objective: { value: 'classify', help: 'this command (mae, aim: vitrine train --help)', parse: oneOf('classify') },
    preset: { value: 'NAME', help: `the encoder: ${Object.keys(TRAIN_PRESETS).join(', ')} (default ${DEFAULTS.preset})` },
    config: { value: 'JSON|FILE', help: 'the encoder as timm kwargs instead of a preset' },
    data: { value: 'DIR', help: 'a folder whose sub-folders are classes (default: Fashion-MNIST)' },
    init: { value: 'FILE', help: 'start from weights: out/encoder.safetensors of vitrine train (MAE / AIM), a timm or\nlightly state_dict (default: random init); the encoder\'s architecture comes from the\nfile\'s timm_kwargs unless --preset / --config' },
    pool: { value: 'token|avg', help: `[CLS] token, or mean of patch tokens + fc_norm (default ${DEFAULTS.pool})`, parse: oneOf('token', 'avg') },
    batch: { value: 'B', help: `images per step (default ${DEFAULTS.batch})`, parse: whole(1, 65536) },
    steps: { value: 'N', help: `training steps (default ${DEFAULTS.steps})`, parse: whole(1, COUNT) },
    lr: { value: 'LR', help: `peak learning rate (default ${DEFAULTS.lr})`, parse: decimal(0, 1000) },
    warmup: { value: 'N', help: 'warm-up steps (default 5% of --steps)', parse: whole(0, COUNT) },
    'weight-decay': { value: 'W', help: `AdamW weight decay (default ${DEFAULTS.weightDecay})`, parse: decimal(0, 1000) },
    'label-smoothing': { value: 'S', help: `timm's LabelSmoothingCrossEntropy smoothing (default ${DEFAULTS.labelSmoothing})`, parse: decimal(0, 1, { open: true }) },
    augment: { value: 'SPEC', help: `none, or flip and / or shift:N: horizontal flip, translation by up to N pixels\n(torchvision's RandomHorizontalFlip + RandomCrop padding N) (default ${DEFAULTS.augment})` },
    'grad-checkpointing': { value: 'POLICY', key: 'policy', help: `checkpointing policy (default ${DEFAULTS.policy}; see below)` },
    seed: { value: 'S', help: 'initialisation S, data order S+2, augmentation S+3 (default 0)', parse: seed },
    'train-max': { value: 'N', help: 'use only the first N training images', parse: whole(1, 2 ** 31 - 1) },
    'eval-max': { value: 'N', help: 'use only the first N held-out images', parse: whole(1, 2 ** 31 - 1) },
    out: { value: 'DIR', help: `where ${WEIGHTS} and ${STATE} go (default ${DEFAULTS.out})` },
    'save-every': { value: 'N', help: `write the checkpoint every N steps (default ${DEFAULTS.saveEvery}; and at the end)`, parse: whole(1, COUNT) },
    'stop-at': { value: 'STEP', help: 'stop after STEP steps (checkpoint written, no evaluation)', parse: whole(1, COUNT) },
    resume: { value: 'FILE', help: 'continue a checkpoint bit for bit' },
    'require-crc': { type: 'boolean', help: 'with --resume: refuse a checkpoint without CRC-32s of its tensors' },
    'max-image-mp': { value: 'N', help: `refuse images over N megapixels, from their header (default ${DEFAULT_MAX_PIXELS / 1e6})`, parse: decimal(0, 1e6) },
    'no-eval': { type: 'boolean', help: 'skip the held-out evaluation' },
    json: { type: 'boolean', help: 'end the output with one JSON line' },
    ...ENGINE_OPTIONS,
  },
  helpHint: 'train --objective classify',
  moreHelp: namesHelp,
  main: ({ values, given }) => trainClassify({ ...values, given }),
};

// --augment text -> its canonical form (a usage error when it does not parse)
function augmentOption(text) {
  try { return augmentText(parseAugment(text)); } catch (e) { throw new CliError(`--augment: ${e.message}`, 2); }
}

// The encoder an --init file was trained as, when it says (vitrine's encoder.safetensors carries
// timm's constructor arguments, `timm_kwargs`): the classifier is built to match it, so
// `--init out/encoder.safetensors` needs no --preset. null when the file does not say (a timm /
// lightly state_dict): the preset is used. The engine checks every value when it builds the model.
function initArchitecture(file) {
  let meta, kw;
  try { meta = readSafetensorsMeta(readInput(file)); } catch (e) { return null; } // named again, with the reason, when --init reads it
  try { kw = checkEncoder(meta); } catch (e) { throw new CliError(`--init ${file}: damaged encoder metadata: ${e.message}`); }
  if (!kw) return null;
  const { num_classes, global_pool, ...encoder } = kw; // the classifier's own come from the data and --pool
  return { encoder };
}

// The run's settings (from the options, or from the checkpoint resumed) and the checkpoint bytes.
function settings(o) {
  if (o.resume) {
    refuseOnResume(o.given, ['preset', 'config', 'init', 'pool', 'batch', 'steps', 'lr', 'warmup', 'weightDecay', 'labelSmoothing', 'augment', 'seed', 'trainMax']);
    const c = readCheckpoint(o.resume, 'vitrine_classify', 'vitrine train --objective classify', o.data ?? null, { requireCrc: !!o.requireCrc });
    const run = { ...c.run, spec: c.spec, augment: c.run.augment ?? 'none' }; // checkpoints written before augmentation trained without
    run.policy = o.policy || c.policy || DEFAULTS.policy;
    return { run, resumeBytes: c.bytes, step: c.step, policyFromFile: !o.policy && c.policy != null };
  }
  if (o.requireCrc) throw new CliError('--require-crc is for --resume FILE', 2);
  const steps = o.steps ?? DEFAULTS.steps;
  const config = o.config != null ? readConfig(o.config) : o.init != null && o.preset == null ? initArchitecture(o.init) : null;
  return { run: { preset: config ? null : o.preset || DEFAULTS.preset, config, data: o.data ? path.resolve(o.data) : 'fashion-mnist',
    init: o.init ? path.resolve(o.init) : null, pool: o.pool || DEFAULTS.pool, batch: o.batch ?? DEFAULTS.batch, steps,
    lr: o.lr ?? DEFAULTS.lr, warmup: o.warmup ?? Math.round(steps * 0.05), weightDecay: o.weightDecay ?? DEFAULTS.weightDecay,
    labelSmoothing: o.labelSmoothing ?? DEFAULTS.labelSmoothing, augment: augmentOption(o.augment ?? DEFAULTS.augment), seed: o.seed || DEFAULTS.seed,
    trainMax: o.trainMax ?? null, policy: o.policy || DEFAULTS.policy }, resumeBytes: null, step: 0, policyFromFile: false };
}

// Fashion-MNIST (adapted to the model later) or a folder read at the model's size
function loadData(dir, { img, chans }, warn, maxPixels) {
  try {
    if (!dir) return { train: loadFashionMNIST('train'), test: loadFashionMNIST('test') };
    return { train: loadImageFolder(dir, { size: img, chans, maxPixels, onWarning: warn }), test: null };
  } catch (e) { throw new CliError(e.message); }
}

// The classifier's spec and the dims of its model, checked by the engine before any data are read
// at its size: the stored spec of a resumed run, else the encoder of --preset / --config / --init
// (its head sized later by the data's classes).
function checkedSpec(vt, o, run) {
  if (run.spec) return { spec: run.spec, dims: specDims(vt, run.spec, { from: { file: o.resume, field: 'vitrine_classify.spec' } }) };
  let spec;
  try { spec = classifierSpec({ preset: run.preset, config: run.config, numClasses: 2, pool: run.pool }); } catch (e) { throw new CliError(e.message, 2); }
  const init = run.config && o.config == null ? o.init : null; // the encoder --init's timm_kwargs describe
  return { spec: null, dims: specDims(vt, spec, init ? { from: { file: init, field: 'timm_kwargs', what: 'damaged encoder metadata' } } : {}) };
}

// The model: the classifier's spec from the data's classes, initialised, --init's weights, trainer, checkpoint.
function openClassifier(vt, o, { run, resumeBytes, policyFromFile }, classes, say) {
  let model, initReport = null;
  const nc = run.spec ? run.spec.config.num_classes : classes.length;
  if (nc !== classes.length) throw new CliError(`${o.resume}: the run trained on ${nc} classes, ${run.data} has ${classes.length}`);
  try {
    run.spec = run.spec || classifierSpec({ preset: run.preset, config: run.config, numClasses: classes.length, pool: run.pool });
    model = vt.createModel(run.spec);
    setPolicy(model, run.policy, { fromFile: policyFromFile ? o.resume : null });
    model.initWeights(BigInt(run.seed));
    if (run.init && !resumeBytes) {
      let bytes;
      try { bytes = readInput(run.init); } catch (e) { throw new CliError(`--init ${run.init}: ${why(e)}`); }
      initReport = model.initFrom(bytes);
      say(`vitrine train: --init ${run.init}: ${initReport.source}, ${initReport.loaded} tensors loaded, ${initReport.skipped} skipped, ${initReport.missing} missing`);
      for (const n of initReport.notes) say(`  ${n}`);
    }
    model.trainerInit(classifyTrainerOptions(run));
    if (resumeBytes) model.loadTrainState(resumeBytes);
  } catch (e) { if (e instanceof CliError) throw e; throw new CliError(`${resumeBytes ? o.resume + ': ' : ''}${e.message}`); }
  return { model, initReport };
}

async function trainClassify(o) {
  const say = (s) => process.stderr.write(s + '\n'), warn = (s) => say(`vitrine train: warning: ${s}`);
  if (o.maxImageMp === 0) throw new CliError("--max-image-mp: '0' megapixels admits no image", 2);
  if (o.out === '') throw new CliError('--out: an empty folder name', 2);
  const t0 = performance.now(), st = settings(o), { run, resumeBytes } = st, seed = BigInt(run.seed);
  const stopAt = stopAtOf(o, run, st.step);
  const vt = await loadEngine({ wasm: o.wasm, threads: o.threads });
  if (resumeBytes) checkState(vt, o.resume, resumeBytes);
  // the spec checked by the engine, then the data read at its size: the number of classes makes the head
  const { dims } = checkedSpec(vt, o, run);
  checkBatch(run.batch, dims);
  const raw = loadData(run.data === 'fashion-mnist' ? null : run.data, dims, warn, (o.maxImageMp ?? DEFAULT_MAX_PIXELS / 1e6) * 1e6);
  if (!raw.train.labels || !raw.train.classes) throw new CliError(`${run.data}: no classes (a folder needs at least two sub-folders of images)`);
  const classes = raw.train.classes;
  const { model, initReport } = openClassifier(vt, o, st, classes, say);
  const { img, chans } = model.dims;
  const sp = splitEval(adapt(raw.train, img, chans), raw.test && adapt(raw.test, img, chans));
  const trainIdx = run.trainMax ? sp.trainIdx.subarray(0, run.trainMax) : sp.trainIdx, evalIdx = o.evalMax ? sp.evalIdx.subarray(0, o.evalMax) : sp.evalIdx;
  if (run.trainN != null && run.trainN !== trainIdx.length) throw new CliError(`${o.resume}: the run trained on ${run.trainN} images, ${run.data} now gives ${trainIdx.length}`);
  run.trainN = trainIdx.length;
  if (!evalIdx.length) warn('no held-out images (a folder needs at least 5), so no evaluation');

  const outDir = o.out || DEFAULTS.out;
  const outputs = new Outputs(outDir, { state: path.join(outDir, STATE), weights: path.join(outDir, WEIGHTS) });
  try {
    const save = (step) => {
      try { outputs.write(outputs.paths.state, withMetadata(model.saveTrainState(), { vitrine_classify: JSON.stringify(run) })); } catch (e) {
        throw new CliError(`${e.message}; ${outputs.stateNote()}`);
      }
      outputs.savedStep = step;
    };
    const tr = new ClassifyRun({ model, dataset: sp.trainSet, indices: trainIdx, batch: run.batch, steps: run.steps, dataSeed: seed + 2n,
      augment: parseAugment(run.augment), augmentSeed: seed + 3n });
    const initName = run.init ? path.basename(run.init) : 'random';
    say(`vitrine train: classify ${run.preset || (o.init && o.config == null && !resumeBytes ? 'encoder of --init' : 'config')} ${img}x${img}x${chans} dim ${model.dims.dim} depth ${model.dims.depth}, ` +
      `${classes.length} classes, pool ${run.pool}, ${trainIdx.length} training images (${run.data}), ${evalIdx.length} held out, batch ${run.batch}, ` +
      `steps ${tr.step ? tr.step + '..' : ''}${stopAt}/${run.steps}, lr ${run.lr}, label smoothing ${run.labelSmoothing}, augment ${run.augment}, ` +
      `init ${initName}, grad checkpointing ${model.gradCheckpointing}, wasm ${vt.build}`);
    const loop = await trainSteps({ tr, model, run, stopAt, saveEvery: o.saveEvery ?? DEFAULTS.saveEvery, save, warn });
    const { status, stepped, saveError } = endSteps(loop, { tr, run, outputs, save, resumeFile: resumeBytes && o.resume });
    if (!stepped && loop.interrupted) return status;
    const meta = { format: CLASSIFIER_FORMAT, classes, spec: run.spec, img, chans };
    try { outputs.write(outputs.paths.weights, withMetadata(model.saveSafetensors(), { vitrine_classifier: JSON.stringify(meta) })); } catch (e) {
      throw new CliError(`${e.message} (${outputs.stateNote()})`);
    }
    if (loop.error || saveError) say(`vitrine train: wrote what it could from step ${tr.step}: ${outputs.wrote.join(', ')}`);
    let ev = null;
    const te = performance.now();
    if (!o.noEval && !loop.error && !saveError && !loop.interrupted && tr.step >= run.steps && evalIdx.length) {
      ev = evaluate(model, sp.evalSet, evalIdx, classes.length);
      say(`vitrine train: evaluation of ${ev.n} images ${((performance.now() - te) / 1000).toFixed(1)} s`);
    }
    const seconds = (performance.now() - t0) / 1000, done = tr.step - loop.startStep, { lastLoss, trainSeconds } = loop;
    process.stdout.write(`${tr.step >= run.steps ? 'trained' : 'stopped at'} step ${tr.step}/${run.steps} (classify, ${classes.length} classes, batch ${run.batch}, ` +
      `init ${initName}) in ${seconds.toFixed(1)} s\n` +
      `loss ${run.lossFirst != null ? run.lossFirst.toFixed(4) : 'n/a'} (first step) -> ${lastLoss != null ? lastLoss.toFixed(4) : 'n/a'} (last)\n` +
      (ev ? `top-1 ${(100 * ev.top1).toFixed(2)}% on ${ev.n} held-out images (${run.data === 'fashion-mnist' ? 'the Fashion-MNIST test set' : 'every 5th image'})\n` +
        confusionText(ev.confusion, classes) : '') +
      `classifier weights (timm keys, head)  ${outputs.paths.weights}\ntraining checkpoint                   ${outputs.paths.state}\n`);
    if (o.json) {
      process.stdout.write(JSON.stringify({ objective: 'classify', steps: tr.step, loss_first: run.lossFirst ?? null, loss_last: lastLoss,
        top1: ev ? ev.top1 : null, eval_images: ev ? ev.n : 0, classes, confusion: ev ? ev.confusion : null,
        train_images_per_second: done ? Number((done * run.batch / trainSeconds).toFixed(1)) : null, train_seconds: Number(trainSeconds.toFixed(3)),
        seconds: Number(seconds.toFixed(3)), init: run.init, init_report: initReport, weights: outputs.paths.weights, checkpoint: outputs.paths.state }) + '\n');
    }
    model.dispose();
    return status;
  } finally { outputs.cleanUp(); }
}

function confusionText(conf, classes) {
  const w = Math.max(5, ...conf.flat().map((v) => String(v).length)) + 1;
  const short = classes.map((c) => c.slice(0, w - 1));
  let s = `confusion (rows: true, columns: predicted)\n${' '.repeat(14)}${short.map((c) => c.padStart(w)).join('')}\n`;
  conf.forEach((row, i) => { s += `${classes[i].slice(0, 13).padEnd(14)}${row.map((v) => String(v).padStart(w)).join('')}\n`; });
  return s;
}
