// classify-cli.js: `vitrine train --objective classify` and `vitrine predict` (called by cli.js).
//   train: timm's VisionTransformer with num_classes fine-tuned to labels (Fashion-MNIST or a
//          folder whose sub-folders are classes) from random init, a `vitrine train` encoder or
//          timm / lightly weights (--init); top-1 and the confusion matrix on held-out images;
//          writes classifier.safetensors (timm keys, head included; class names in its metadata)
//          and a resumable checkpoint.
//   predict: the top classes with probabilities for each image; unreadable images are named and
//          skipped (exit status 1 when any was), the others still predicted.
import path from 'node:path';
import { createVitrine, readSafetensorsMeta } from './vitrine.js';
import { loadFashionMNIST, loadImageFolder, adapt, writeAtomic, decodeImage, resizeCrop, DataError, readRegularFile, makeDirs,
  resumedData, DEFAULT_MAX_PIXELS } from './data.js';
import { TRAIN_PRESETS, withMetadata, makeBatch } from './train.js';
import { classifierSpec, splitEval, ClassifyRun, evaluate, predictTop, CLASSIFY_DEFAULTS, CLASSIFIER_FORMAT, classifyTrainerOptions,
  parseAugment, augmentText } from './classify.js';

const DEFAULTS = { preset: 'fmnist-p7-mlp2', batch: 128, steps: 3500, policy: 'block', out: 'out', seed: '0', saveEvery: 200,
  labelSmoothing: CLASSIFY_DEFAULTS.labelSmoothing, pool: CLASSIFY_DEFAULTS.pool, lr: CLASSIFY_DEFAULTS.lr, weightDecay: CLASSIFY_DEFAULTS.weightDecay,
  augment: 'none' };
const WEIGHTS = 'classifier.safetensors', STATE = 'classify-checkpoint.safetensors', FORMAT = CLASSIFIER_FORMAT;

export const CLASSIFY_HELP = `usage: vitrine train --objective classify [options]
  Fine-tunes timm's VisionTransformer (num_classes, pool -> fc_norm -> head) to labels with
  cross-entropy (timm's label smoothing), AdamW, cosine schedule; reports top-1 and the confusion
  matrix on held-out images (Fashion-MNIST: the whole test set; a folder: every 5th image).
  --preset NAME | --config JSON|FILE   the encoder (${Object.keys(TRAIN_PRESETS).join(', ')}; default ${DEFAULTS.preset})
  --data DIR                   a folder whose sub-folders are classes (default: Fashion-MNIST)
  --init FILE                  start from weights: out/encoder.safetensors of vitrine train (MAE / AIM),
                               a timm or lightly state_dict (default: random init); the encoder's
                               architecture comes from the file's timm_kwargs unless --preset / --config
  --pool token|avg             [CLS] token, or mean of patch tokens + fc_norm (default ${DEFAULTS.pool})
  --batch B, --steps N, --lr LR, --warmup N, --weight-decay W   (default ${DEFAULTS.batch}, ${DEFAULTS.steps}, ${DEFAULTS.lr}, 5% of steps, ${DEFAULTS.weightDecay})
  --label-smoothing S          timm's LabelSmoothingCrossEntropy smoothing (default ${DEFAULTS.labelSmoothing})
  --augment SPEC               none, or flip and / or shift:N: horizontal flip, translation by up to N
                               pixels (torchvision's RandomHorizontalFlip + RandomCrop padding N) (default ${DEFAULTS.augment})
  --grad-checkpointing POLICY  none | block | every:K | sqrt | selective | budget:BYTES (default ${DEFAULTS.policy})
  --seed S                     initialisation S, data order S+2, augmentation S+3 (default 0)
  --train-max N, --eval-max N  use only the first N training / held-out images
  --out DIR                    ${WEIGHTS}, ${STATE} (default out)
  --save-every N, --stop-at STEP, --resume FILE   as vitrine train
  --max-image-mp N             refuse images over N megapixels, from their header (default ${DEFAULT_MAX_PIXELS / 1e6})
  --no-eval, --json, --wasm BUILD, --threads N`;
export const PREDICT_USAGE = 'usage: vitrine predict --weights FILE [--top K] [--json] [--wasm BUILD] [--threads N] IMAGE...';

class Failure extends Error { constructor(m, status = 1) { super(m); this.status = status; } }
const STRERROR = { ENOENT: 'No such file or directory', EACCES: 'Permission denied', EISDIR: 'Is a directory' };
const why = (e) => (e instanceof DataError ? e.message : STRERROR[e.code] || e.message);
// Input files (weights, checkpoints, configs, images): regular files only (a FIFO or /dev/zero
// would hang a plain read), at most 1 GiB.
const readInput = (file) => new Uint8Array(readRegularFile(file, 1 << 30));
// Strict numbers (as cli.js): decimal only, within what the engine counts.
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
function whole(flag, v, min, max) {
  if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) throw new Failure(`${flag}: '${v}' is not a whole number in ${min}..${max}`, 2);
  return Number(v);
}
function decimal(flag, v, min, max, maxOpen = false) {
  const x = Number(v);
  if (!DECIMAL.test(v) || !(x >= min && (maxOpen ? x < max : x <= max))) throw new Failure(`${flag}: '${v}' is not a decimal number in [${min}, ${max}${maxOpen ? ')' : ']'}`, 2);
  return x;
}

function parseArgs(args) {
  const o = { given: new Set() };
  const flags = { '--objective': 'objective', '--preset': 'preset', '--config': 'config', '--data': 'data', '--init': 'init',
    '--pool': 'pool', '--batch': 'batch', '--steps': 'steps', '--lr': 'lr', '--warmup': 'warmup', '--weight-decay': 'weightDecay',
    '--label-smoothing': 'labelSmoothing', '--augment': 'augment', '--grad-checkpointing': 'policy', '--seed': 'seed', '--train-max': 'trainMax',
    '--eval-max': 'evalMax', '--out': 'out', '--save-every': 'saveEvery', '--stop-at': 'stopAt', '--resume': 'resume', '--wasm': 'wasm',
    '--threads': 'threads', '--max-image-mp': 'maxImageMp' };
  // [min, max] of the whole numbers; decimals: [min, max] (maxOpen: [min, max))
  const ints = { batch: [1, 65536], steps: [1, 2000000000], warmup: [0, 2000000000], trainMax: [1, 2 ** 31 - 1], evalMax: [1, 2 ** 31 - 1],
    saveEvery: [1, 2000000000], stopAt: [0, 2000000000], threads: [1, 64] };
  const nums = { lr: [0, 1000], weightDecay: [0, 1000], labelSmoothing: [0, 1, true], maxImageMp: [0, 1e6] };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--json') o.json = true;
    else if (a === '--no-eval') o.noEval = true;
    else if (a === '--help' || a === '-h') o.help = true;
    else if (flags[a]) {
      if (i + 1 >= args.length) throw new Failure(`${a} needs a value`, 2);
      const k = flags[a], v = args[++i];
      o[k] = ints[k] ? whole(a, v, ...ints[k]) : nums[k] ? decimal(a, v, ...nums[k]) : v;
      o.given.add(k);
    } else throw new Failure(`unknown option ${a}`, 2);
  }
  if (o.seed != null) whole('--seed', o.seed, 0, 2 ** 53 - 3); // seed + 2 stays exact
  if (o.pool != null && !['token', 'avg'].includes(o.pool)) throw new Failure(`--pool: '${o.pool}' (use token or avg)`, 2);
  if (o.maxImageMp === 0) throw new Failure("--max-image-mp: '0' megapixels admits no image", 2);
  if (o.out === '') throw new Failure('--out: an empty folder name', 2);
  return o;
}

// Fashion-MNIST (adapted to the model later) or a folder read at the encoder's size
function loadData(dir, encoder, warn, maxPixels) {
  try {
    if (!dir) return { train: loadFashionMNIST('train'), test: loadFashionMNIST('test'), source: 'fashion-mnist' };
    return { train: loadImageFolder(dir, { size: encoder.img_size, chans: encoder.in_chans ?? 3, maxPixels, onWarning: warn }), test: null, source: path.resolve(dir) };
  } catch (e) { throw new Failure(e.message); }
}

// The run's settings (from the options, or from the checkpoint resumed) and the checkpoint bytes.
function settings(o) {
  if (o.resume) {
    const fixed = ['preset', 'config', 'init', 'pool', 'batch', 'steps', 'lr', 'warmup', 'weightDecay', 'labelSmoothing', 'augment', 'seed', 'trainMax']
      .filter((k) => o.given.has(k));
    if (fixed.length) throw new Failure(`--resume takes ${fixed.map((k) => '--' + k.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase())).join(', ')} from the checkpoint; leave them out`, 2);
    let bytes, meta;
    try { bytes = readInput(o.resume); } catch (e) { throw new Failure(`cannot read ${o.resume}: ${why(e)}`); }
    try { meta = readSafetensorsMeta(bytes); } catch (e) { throw new Failure(`${o.resume}: not a safetensors file (${e.message})`); }
    if (meta.format !== 'vitrine-train/1' || !meta.vitrine_classify) throw new Failure(`${o.resume}: not a checkpoint of vitrine train --objective classify`);
    const run = checkedRun(o.resume, meta.vitrine_classify);
    try { run.data = resumedData(o.resume, run.data, o.data); } catch (e) { throw new Failure(e.message, 2); }
    run.policy = o.policy || meta.grad_checkpointing || DEFAULTS.policy;
    return { run, resumeBytes: bytes };
  }
  const steps = o.steps ?? DEFAULTS.steps;
  let config = null;
  if (o.config != null) {
    try { config = JSON.parse(o.config.trim().startsWith('{') ? o.config : new TextDecoder().decode(readInput(o.config))); } catch (e) {
      throw new Failure(`--config: ${e.code || e instanceof DataError ? `cannot read ${o.config}: ${why(e)}` : `not JSON (${e.message})`}`, 2);
    }
  } else if (o.init != null && o.preset == null) config = initArchitecture(o.init);
  return { run: { preset: config ? null : o.preset || DEFAULTS.preset, config, data: o.data ? path.resolve(o.data) : 'fashion-mnist',
    init: o.init ? path.resolve(o.init) : null, pool: o.pool || DEFAULTS.pool, batch: o.batch ?? DEFAULTS.batch, steps,
    lr: o.lr ?? DEFAULTS.lr, warmup: o.warmup ?? Math.round(steps * 0.05), weightDecay: o.weightDecay ?? DEFAULTS.weightDecay,
    labelSmoothing: o.labelSmoothing ?? DEFAULTS.labelSmoothing, augment: augmentOption(o.augment ?? DEFAULTS.augment), seed: o.seed || DEFAULTS.seed, trainMax: o.trainMax ?? null,
    policy: o.policy || DEFAULTS.policy }, resumeBytes: null };
}

// The encoder an --init file was trained as, when it says (vitrine's encoder.safetensors carries
// timm's constructor arguments, `timm_kwargs`): the classifier is built to match it, so
// `--init out/encoder.safetensors` needs no --preset. null when the file does not say (a timm /
// lightly state_dict): the preset is used. The engine checks every value when it builds the model.
function initArchitecture(file) {
  let meta;
  try { meta = readSafetensorsMeta(readInput(file)); } catch (e) { return null; } // named again, with the reason, when --init reads it
  if (typeof meta.timm_kwargs !== 'string') return null;
  let kw;
  try { kw = JSON.parse(meta.timm_kwargs); } catch (e) { throw new Failure(`--init ${file}: timm_kwargs in its metadata is not JSON (${e.message})`); }
  if (!kw || typeof kw !== 'object' || Array.isArray(kw)) throw new Failure(`--init ${file}: timm_kwargs in its metadata is not an object`);
  const { num_classes, global_pool, ...encoder } = kw; // the classifier's own come from the data and --pool
  return { encoder };
}

// --augment text -> its canonical form (a usage error when it does not parse)
function augmentOption(text) {
  try { return augmentText(parseAugment(text)); } catch (e) { throw new Failure(`--augment: ${e.message}`, 2); }
}

// The run stored in a checkpoint is untrusted input: every field the run uses is range-checked.
function checkedRun(file, text) {
  const bad = (what) => new Failure(`${file}: damaged checkpoint metadata (${what})`);
  let run;
  try { run = JSON.parse(text); } catch (e) { throw bad(`vitrine_classify is not JSON: ${e.message}`); }
  if (!run || typeof run !== 'object' || Array.isArray(run)) throw bad('vitrine_classify is not an object');
  const isInt = (v, min, max) => Number.isInteger(v) && v >= min && v <= max;
  for (const [k, min, max] of [['batch', 1, 65536], ['steps', 1, 2000000000], ['warmup', 0, 2000000000]])
    if (!isInt(run[k], min, max)) throw bad(`${k} ${JSON.stringify(run[k])}`);
  for (const [k, max] of [['lr', 1000], ['weightDecay', 1000], ['labelSmoothing', 1]])
    if (!(typeof run[k] === 'number' && run[k] >= 0 && run[k] <= max)) throw bad(`${k} ${JSON.stringify(run[k])}`);
  if (typeof run.seed !== 'string' || !/^\d{1,16}$/.test(run.seed) || Number(run.seed) > 2 ** 53 - 3) throw bad(`seed ${JSON.stringify(run.seed)}`);
  if (typeof run.data !== 'string' || !run.data) throw bad(`data ${JSON.stringify(run.data)}`);
  if (!['token', 'avg'].includes(run.pool)) throw bad(`pool ${JSON.stringify(run.pool)}`);
  for (const k of ['trainMax', 'trainN']) if (run[k] != null && !isInt(run[k], 1, 2 ** 31 - 1)) throw bad(`${k} ${JSON.stringify(run[k])}`);
  if (run.lossFirst != null && typeof run.lossFirst !== 'number') throw bad(`lossFirst ${JSON.stringify(run.lossFirst)}`);
  if (!run.spec || typeof run.spec !== 'object' || Array.isArray(run.spec)) throw bad('spec is not an object');
  // absent in checkpoints written before augmentation existed: those runs trained without
  if (run.augment == null) run.augment = 'none';
  try { if (typeof run.augment !== 'string') throw new Error('not text'); parseAugment(run.augment); } catch (e) { throw bad(`augment ${JSON.stringify(run.augment)}`); }
  return run;
}

export async function cmdTrainClassify(args) {
  let o;
  try { o = parseArgs(args); } catch (e) { process.stderr.write(`vitrine train: ${e.message} (vitrine train --objective classify --help lists the options)\n`); return 2; }
  if (o.help) { process.stdout.write(CLASSIFY_HELP + '\n'); return 0; }
  try { return await trainClassify(o); } catch (e) {
    if (!(e instanceof Failure)) throw e;
    process.stderr.write(`vitrine train: ${e.message}\n`);
    return e.status;
  }
}

async function trainClassify(o) {
  const say = (s) => process.stderr.write(s + '\n'), warn = (s) => say(`vitrine train: warning: ${s}`);
  const t0 = performance.now();
  const { run, resumeBytes } = settings(o);
  const seed = BigInt(run.seed);
  // data first: the number of classes makes the head
  let encoder;
  try { encoder = (run.spec || classifierSpec({ preset: run.preset, config: run.config, numClasses: 2, pool: run.pool })).config; } catch (e) { throw new Failure(e.message, 2); }
  const raw = loadData(run.data === 'fashion-mnist' ? null : run.data, encoder, warn, (o.maxImageMp ?? DEFAULT_MAX_PIXELS / 1e6) * 1e6);
  if (!raw.train.labels || !raw.train.classes) throw new Failure(`${run.data}: no classes (a folder needs at least two sub-folders of images)`);
  const classes = raw.train.classes;
  let vt, model;
  try { vt = await createVitrine({ wasm: o.wasm, threads: o.threads }); } catch (e) { throw new Failure(e.message, 2); }
  let initReport = null;
  try {
    run.spec = run.spec || classifierSpec({ preset: run.preset, config: run.config, numClasses: classes.length, pool: run.pool });
    model = vt.createModel(run.spec);
    model.setGradCheckpointing(run.policy);
    model.initWeights(seed);
    if (run.init && !resumeBytes) {
      let bytes;
      try { bytes = readInput(run.init); } catch (e) { throw new Failure(`--init ${run.init}: ${why(e)}`); }
      initReport = model.initFrom(bytes);
      say(`vitrine train: --init ${run.init}: ${initReport.source}, ${initReport.loaded} tensors loaded, ${initReport.skipped} skipped, ${initReport.missing} missing`);
      for (const n of initReport.notes) say(`  ${n}`);
    }
    model.trainerInit(classifyTrainerOptions(run));
    if (resumeBytes) model.loadTrainState(resumeBytes);
  } catch (e) { if (e instanceof Failure) throw e; throw new Failure(`${resumeBytes ? o.resume + ': ' : ''}${e.message}`); }
  const data = { train: adapt(raw.train, model.dims.img, model.dims.chans), test: raw.test && adapt(raw.test, model.dims.img, model.dims.chans) };
  const sp = splitEval(data.train, data.test);
  let trainIdx = sp.trainIdx, evalIdx = sp.evalIdx;
  if (run.trainMax) trainIdx = trainIdx.subarray(0, run.trainMax);
  if (o.evalMax) evalIdx = evalIdx.subarray(0, o.evalMax);
  if (run.trainN != null && run.trainN !== trainIdx.length) throw new Failure(`${o.resume}: the run trained on ${run.trainN} images, ${run.data} now gives ${trainIdx.length}`);
  run.trainN = trainIdx.length;
  if (!evalIdx.length) warn('no held-out images (a folder needs at least 5), so no evaluation');

  const outDir = o.out || DEFAULTS.out, statePath = path.join(outDir, STATE), weightsPath = path.join(outDir, WEIGHTS);
  try { makeDirs(outDir); } catch (e) { throw new Failure(`--out ${e.message}`, 2); }
  const runMeta = () => JSON.stringify({ ...run, config: run.config });
  const save = () => writeAtomic(statePath, withMetadata(model.saveTrainState(), { vitrine_classify: runMeta() }));
  const cr = new ClassifyRun({ model, dataset: sp.trainSet, indices: trainIdx, batch: run.batch, steps: run.steps, dataSeed: seed + 2n,
    augment: parseAugment(run.augment), augmentSeed: seed + 3n });
  const stopAt = Math.min(run.steps, o.stopAt ?? run.steps), startStep = cr.step;
  say(`vitrine train: classify ${run.preset || (o.init && o.config == null && !resumeBytes ? 'encoder of --init' : 'config')} ${model.dims.img}x${model.dims.img}x${model.dims.chans} dim ${model.dims.dim} depth ${model.dims.depth}, ` +
    `${classes.length} classes, pool ${run.pool}, ${trainIdx.length} training images (${run.data}), ${evalIdx.length} held out, batch ${run.batch}, ` +
    `steps ${startStep ? startStep + '..' : ''}${stopAt}/${run.steps}, lr ${run.lr}, label smoothing ${run.labelSmoothing}, augment ${run.augment}, ` +
    `init ${run.init ? path.basename(run.init) : 'random'}, grad checkpointing ${model.gradCheckpointing}, wasm ${vt.build}`);
  let interrupted = false, error = null, lossFirst = run.lossFirst ?? null, lossLast = null, rate = 0;
  const onSig = () => { interrupted = true; };
  process.on('SIGINT', onSig); process.on('SIGTERM', onSig);
  const tTrain = performance.now(), every = Math.max(1, Math.round(run.steps / 10));
  try {
    while (cr.step < stopAt && !interrupted) {
      let r;
      try { r = cr.trainOne(); } catch (e) { error = e; break; }
      if (lossFirst == null) { lossFirst = r.loss; run.lossFirst = r.loss; }
      lossLast = r.loss;
      rate = rate ? 0.9 * rate + 0.1 * (run.batch / r.seconds) : run.batch / r.seconds;
      if (r.step % every === 0 || r.step === stopAt) say(`step ${r.step}/${run.steps} loss ${r.loss.toFixed(4)} | ${rate.toFixed(0)} img/s | epoch ${cr.epoch.toFixed(2)}`);
      if (r.step % (o.saveEvery ?? DEFAULTS.saveEvery) === 0 && r.step < stopAt) {
        try { save(); } catch (e) { warn(`cannot write ${statePath}: ${e.message} (the previous checkpoint is kept)`); }
      }
      if (r.step % 10 === 0) await new Promise(setImmediate); // let signals in
    }
  } finally { process.off('SIGINT', onSig); process.off('SIGTERM', onSig); }
  const trainSeconds = (performance.now() - tTrain) / 1000, done = cr.step - startStep;
  try { save(); } catch (e) { throw new Failure(`cannot write ${statePath}: ${e.message}`); }
  if (error) say(`vitrine train: ${error.message}\nthe last good state (step ${cr.step}) is in ${statePath}`);
  else if (interrupted) say(`vitrine train: interrupted at step ${cr.step}; continue with --resume ${statePath}`);
  say(`vitrine train: ${done} steps in ${trainSeconds.toFixed(1)} s (${done ? (done * run.batch / trainSeconds).toFixed(0) : 0} img/s)`);
  const meta = { format: FORMAT, classes, spec: run.spec, img: model.dims.img, chans: model.dims.chans };
  writeAtomic(weightsPath, withMetadata(model.saveSafetensors(), { vitrine_classifier: JSON.stringify(meta) }));
  let ev = null;
  const te = performance.now();
  if (!o.noEval && !error && !interrupted && cr.step >= run.steps && evalIdx.length) {
    ev = evaluate(model, sp.evalSet, evalIdx, classes.length);
    say(`vitrine train: evaluation of ${ev.n} images ${((performance.now() - te) / 1000).toFixed(1)} s`);
  }
  const seconds = (performance.now() - t0) / 1000;
  process.stdout.write(`${cr.step >= run.steps ? 'trained' : 'stopped at'} step ${cr.step}/${run.steps} (classify, ${classes.length} classes, batch ${run.batch}, ` +
    `init ${run.init ? path.basename(run.init) : 'random'}) in ${seconds.toFixed(1)} s\n` +
    `loss ${lossFirst != null ? lossFirst.toFixed(4) : 'n/a'} (first step) -> ${lossLast != null ? lossLast.toFixed(4) : 'n/a'} (last)\n` +
    (ev ? `top-1 ${(100 * ev.top1).toFixed(2)}% on ${ev.n} held-out images (${run.data === 'fashion-mnist' ? 'the Fashion-MNIST test set' : 'every 5th image'})\n` +
      confusionText(ev.confusion, classes) : '') +
    `classifier weights (timm keys, head)  ${weightsPath}\ntraining checkpoint                   ${statePath}\n`);
  if (o.json) {
    process.stdout.write(JSON.stringify({ objective: 'classify', steps: cr.step, loss_first: lossFirst, loss_last: lossLast,
      top1: ev ? ev.top1 : null, eval_images: ev ? ev.n : 0, classes, confusion: ev ? ev.confusion : null,
      train_images_per_second: done ? Number((done * run.batch / trainSeconds).toFixed(1)) : null, train_seconds: Number(trainSeconds.toFixed(3)),
      seconds: Number(seconds.toFixed(3)), init: run.init, init_report: initReport, weights: weightsPath, checkpoint: statePath }) + '\n');
  }
  model.dispose();
  return error ? 1 : 0;
}

function confusionText(conf, classes) {
  const w = Math.max(5, ...conf.flat().map((v) => String(v).length)) + 1;
  const short = classes.map((c) => c.slice(0, w - 1));
  let s = `confusion (rows: true, columns: predicted)\n${' '.repeat(14)}${short.map((c) => c.padStart(w)).join('')}\n`;
  conf.forEach((row, i) => { s += `${classes[i].slice(0, 13).padEnd(14)}${row.map((v) => String(v).padStart(w)).join('')}\n`; });
  return s;
}

// ---- predict ------------------------------------------------------------------------------------

export async function cmdPredict(args) {
  let weights = null, top = 3, json = false, wasm, threads;
  const images = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i], more = i + 1 < args.length;
    if (a === '--weights' && more) weights = args[++i];
    else if (a === '--top' && more) { try { top = whole(a, args[++i], 1, 1000); } catch (e) { process.stderr.write(`vitrine predict: ${e.message}\n`); return 2; } }
    else if (a === '--threads' && more) { try { threads = whole(a, args[++i], 1, 64); } catch (e) { process.stderr.write(`vitrine predict: ${e.message}\n`); return 2; } }
    else if (a === '--wasm' && more) wasm = args[++i];
    else if (a === '--json') json = true;
    else if (a.startsWith('--')) { process.stderr.write(`vitrine predict: unknown option ${a}\n${PREDICT_USAGE}\n`); return 2; }
    else images.push(a);
  }
  if (!weights || !images.length || !(top >= 1)) { process.stderr.write(PREDICT_USAGE + '\n'); return 2; }
  let bytes, meta;
  try { bytes = readInput(weights); } catch (e) { process.stderr.write(`vitrine predict: cannot read ${weights}: ${why(e)}\n`); return 1; }
  try { meta = JSON.parse(readSafetensorsMeta(bytes).vitrine_classifier || 'null'); } catch (e) { meta = null; }
  if (!meta || meta.format !== FORMAT) {
    process.stderr.write(`vitrine predict: ${weights}: not a classifier of vitrine train --objective classify (no class names in its metadata)\n`);
    return 1;
  }
  let vt, model;
  try {
    vt = await createVitrine({ wasm, threads });
    model = vt.createModel(meta.spec);
    model.loadSafetensors(bytes);
  } catch (e) { process.stderr.write(`vitrine predict: ${weights}: ${e.message}\n`); return 1; }
  let failed = 0;
  const results = [];
  for (const file of images) {
    let pixels;
    try {
      const im = decodeImage(new Uint8Array(readRegularFile(file)));
      if (!(im.width > 0 && im.height > 0)) throw new DataError(`empty image ${im.width}x${im.height}`);
      pixels = resizeCrop(im.data, im.width, im.height, 4, meta.img, meta.chans);
    } catch (e) {
      failed++;
      const text = e.code ? STRERROR[e.code] || e.message : e instanceof DataError ? e.message : `cannot decode (${e.message})`;
      process.stderr.write(`vitrine predict: ${file}: ${text}\n`);
      results.push({ file, error: text });
      continue;
    }
    const ds = { n: 1, chans: meta.chans, size: meta.img, pixels };
    const z = model.timmForward(makeBatch(ds, Int32Array.of(0)));
    const t = predictTop(z.data, meta.classes, Math.min(top, meta.classes.length));
    results.push({ file, top: t.map(({ name, index, p }) => ({ class: name, index, p: Number(p.toFixed(6)) })) });
    if (!json) process.stdout.write(`${file}: ${t.map(({ name, p }) => `${name} ${(100 * p).toFixed(1)}%`).join(', ')}\n`);
  }
  if (json) process.stdout.write(JSON.stringify(results) + '\n');
  model.dispose();
  return failed ? 1 : 0;
}
