// train.js: `vitrine train`, the main job -- an MAE (or AIM) ViT trained through the wasm engine on
// Fashion-MNIST or a folder of images, then the kNN top-1 of its encoder beside the untrained
// encoder's and raw pixels' (train-results.js), its weights, a resumable checkpoint and a picture
// of reconstructions. `--objective classify` is web/cli/classify.js. The loop is web/cli/run.js.
import path from 'node:path';
import { loadFashionMNIST, loadImageFolder, DEFAULT_MAX_PIXELS } from '../data.js';
import { adapt } from '../images.js';
import { withMetadata } from '../safetensors.js';
import { TRAIN_PRESETS, modelSpec, TrainingRun } from '../train.js';
import { CliError, whole, decimal, oneOf, seed } from './args.js';
import { loadEngineFor, specDims, checkBatch, ENGINE_OPTIONS, BACKEND_OPTION, namesHelp } from './engine.js';
import { readInput, readConfig, why, Outputs } from './io.js';
import { readCheckpoint, checkState, refuseOnResume, stopAtOf, setPolicy, trainSteps, endSteps } from './run.js';
import { startSideEvaluation, knnResults, writeResults, report } from './train-results.js';
import { command as classify } from './classify.js';

export const TRAIN_DEFAULTS = { objective: 'mae', preset: 'fmnist-p7-mlp2', batch: 64, steps: 5000, policy: 'block', out: 'out',
  seed: '0', maskRatio: 0.5, saveEvery: 200 };
// peak learning rate: lightly's MAE 1.5e-4 * batch / 256 and AIM 1e-3 * batch / 4096 are for
// hundreds of epochs; a short run needs more (measured on Fashion-MNIST: docs/experiments.md)
export const defaultLr = (objective, batch) => (objective === 'mae' ? 2e-3 : 1e-3) * batch / 64;
const STATE_FILE = 'checkpoint.safetensors', WEIGHTS_FILE = 'encoder.safetensors', IMAGE_FILE = 'reconstructions.png';
const COUNT = 2000000000;

/** The options train shares with `plan` (what model, what step). */
export const MODEL_OPTIONS = {
  preset: { value: 'NAME', help: `${Object.keys(TRAIN_PRESETS).join(', ')} (default ${TRAIN_DEFAULTS.preset}), or a timm preset` },
  config: { value: 'JSON|FILE', help: 'the model as the engine reads it instead of a preset:\n{"encoder": {timm kwargs}, "decoder_dim": ...}' },
  batch: { value: 'B', help: `images per step (default ${TRAIN_DEFAULTS.batch})`, parse: whole(1, 65536) },
  'mask-ratio': { value: 'R', help: `MAE: the share of patches masked, 0 <= R < 1 (default ${TRAIN_DEFAULTS.maskRatio})`, parse: decimal() },
  'grad-checkpointing': { value: 'POLICY', key: 'policy', help: `checkpointing policy (default ${TRAIN_DEFAULTS.policy}; see below)` },
};

export const command = {
  name: 'train',
  summary: 'train an MAE / AIM ViT (the main job), or a classifier (--objective classify)',
  usage: 'vitrine train [options]          (vitrine train --objective classify --help: the classifier)',
  description: 'Trains an MAE (or AIM) ViT through the WebAssembly engine, then reports the kNN top-1\n' +
    'accuracy of its encoder beside the untrained encoder\'s and raw pixels\'; saves its weights\n' +
    '(timm keys), a resumable checkpoint and a picture of reconstructions.',
  options: {
    objective: { value: 'mae|aim|classify', help: `what to train (default ${TRAIN_DEFAULTS.objective}; classify: its own options)`, parse: oneOf('mae', 'aim') },
    ...MODEL_OPTIONS,
    data: { value: 'DIR', help: 'a folder of PNG / JPEG images (sub-folders = classes) instead of Fashion-MNIST\n(with --resume: the folder, named again; no path is read from the checkpoint)' },
    'max-image-mp': { value: 'N', help: `refuse images over N megapixels, from their header (default ${DEFAULT_MAX_PIXELS / 1e6})`, parse: decimal(0, 1000) },
    steps: { value: 'N', help: `training steps, the length of the cosine schedule (default ${TRAIN_DEFAULTS.steps})`, parse: whole(1, COUNT) },
    lr: { value: 'LR', help: 'peak learning rate (default mae 2e-3, aim 1e-3, times batch / 64)', parse: decimal(0, 1000) },
    warmup: { value: 'N', help: 'warm-up steps (default 5% of --steps)', parse: whole(0, COUNT) },
    seed: { value: 'S', help: 'initialisation S, masks S+1, data order S+2 (default 0)', parse: seed },
    out: { value: 'DIR', help: `where ${WEIGHTS_FILE}, ${STATE_FILE}, ${IMAGE_FILE} go (default ${TRAIN_DEFAULTS.out})` },
    'save-every': { value: 'N', help: `write the checkpoint every N steps (default ${TRAIN_DEFAULTS.saveEvery}; and at the end)`, parse: whole(1, COUNT) },
    'stop-at': { value: 'STEP', help: 'stop after STEP steps (checkpoint written, no evaluation): resume later', parse: whole(1, COUNT) },
    resume: { value: 'FILE', help: 'continue a checkpoint bit for bit (model, schedule, batch, data, seed come from it)' },
    'require-crc': { type: 'boolean', help: 'with --resume: refuse a checkpoint without CRC-32s of its tensors' },
    init: { value: 'FILE', help: 'start from the weights in FILE: timm (head or not), lightly or vitrine safetensors;\nthe layout is recognised; what cannot be used is named and skipped' },
    'init-strict': { type: 'boolean', help: 'with --init: any skipped tensor is an error' },
    'eval-bank': { value: 'N', help: 'kNN bank: training images (default 10000)', parse: whole(1, 10000000) },
    'eval-queries': { value: 'N', help: 'kNN queries: test images (default 2000)', parse: whole(1, 10000000) },
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
    if (o.init) throw new CliError('--init starts a new run; --resume continues one (its weights come from the checkpoint)', 2);
    refuseOnResume(o.given, ['objective', 'preset', 'config', 'batch', 'steps', 'lr', 'warmup', 'maskRatio', 'seed']);
    const c = readCheckpoint(o.resume, 'vitrine_run', 'vitrine train', o.data ?? null, { requireCrc: !!o.requireCrc });
    const run = { ...c.run, spec: c.spec, policy: o.policy || c.policy || TRAIN_DEFAULTS.policy };
    return { run, resumeBytes: c.bytes, step: c.step, policyFromFile: !o.policy && c.policy != null };
  }
  if (o.requireCrc) throw new CliError('--require-crc is for --resume FILE', 2);
  const objective = o.objective || TRAIN_DEFAULTS.objective, batch = o.batch ?? TRAIN_DEFAULTS.batch, steps = o.steps ?? TRAIN_DEFAULTS.steps;
  const config = o.config != null ? readConfig(o.config) : null;
  if (o.initStrict && !o.init) throw new CliError('--init-strict needs --init FILE', 2);
  return { run: {
    objective, preset: config ? null : (o.preset || TRAIN_DEFAULTS.preset), batch, steps,
    lr: o.lr ?? defaultLr(objective, batch), warmup: o.warmup ?? Math.round(steps * 0.05), maskRatio: o.maskRatio ?? TRAIN_DEFAULTS.maskRatio,
    seed: o.seed || TRAIN_DEFAULTS.seed, data: o.data ? path.resolve(o.data) : 'fashion-mnist',
    spec: modelSpec(objective, { preset: o.preset || TRAIN_DEFAULTS.preset, config }),
    policy: o.policy || TRAIN_DEFAULTS.policy, init: o.init ? path.resolve(o.init) : null,
  }, resumeBytes: null, step: 0, policyFromFile: false };
}

const POS_EMBED_SAYS = {
  none: 'pos_embed: not loaded',
  sincos_frozen: "pos_embed: lightly's sin-cos table, frozen (as lightly's MAE / AIM keep it)",
  trainable: 'pos_embed: loaded, trainable',
  learned_now_trainable: "pos_embed: a learned one (not the sin-cos table): trainable (lightly's objective would freeze a sin-cos table)",
};

// --init FILE: the weights it holds, over the seeded initialisation (before the trainer is set up)
function initFromFile(model, file, strict, say) {
  let bytes, r;
  try { bytes = readInput(file); } catch (e) { throw new CliError(`--init: cannot read ${file}: ${why(e)}`); }
  try { r = model.initFrom(bytes, { strict }); } catch (e) { throw new CliError(`--init ${file}: ${e.message}`); }
  say(`vitrine train: --init ${file}: ${r.source}: ${r.loaded} tensors loaded (trainable unless noted), ${r.skipped} skipped, ` +
    `${r.missing} encoder parameters not in the file (kept as initialised)`);
  for (const n of r.notes) say(`  ${n}`);
  say(`  ${POS_EMBED_SAYS[r.posEmbed] || r.posEmbed}`);
  return bytes;
}

// The engine and the model: initialised (seed) or started from --init's weights, trainer ready
// (masks: seed + 1), the checkpoint loaded over both when resuming.
async function openModel(o, { run, resumeBytes, policyFromFile }, seed, say, warn) {
  let model, initBytes = null;
  // a resumed run continues bit for bit only in the build that trained it (fused and unfused
  // multiply-adds round differently): keep the checkpoint's build unless told otherwise
  if (run.wasm && o.wasm && o.wasm !== run.wasm) warn(`the run was trained with the ${run.wasm} build; continuing with ${o.wasm} changes the bits`);
  const vt = await loadEngineFor(o, run, resumeBytes && o.resume);
  if (!run.wasm) run.wasm = vt.build;
  if (resumeBytes) checkState(vt, o.resume, resumeBytes);
  // the spec checked before anything is allocated for it, one batch against wasm's memory
  checkBatch(run.batch, specDims(vt, run.spec, { from: resumeBytes ? { file: o.resume, field: 'model_config' } : null }));
  try {
    model = vt.createModel(run.spec);
    setPolicy(model, run.policy, { fromFile: policyFromFile ? o.resume : null });
    model.initWeights(seed);
    if (run.init && !resumeBytes) initBytes = initFromFile(model, run.init, !!o.initStrict, say);
    model.trainerInit({ lr: run.lr, warmupSteps: run.warmup, totalSteps: run.steps, maskRatio: run.maskRatio ?? 0.75, seed: seed + 1n });
    if (resumeBytes) model.loadTrainState(resumeBytes);
  } catch (e) {
    if (e instanceof CliError) throw e;
    throw new CliError(`${resumeBytes ? o.resume + ': ' : ''}${e.message}`);
  }
  return { vt, model, initBytes };
}

// The images at the model's size; a resumed run must find as many as it trained on.
function trainData(o, run, model, warn) {
  const { img, chans } = model.dims, maxPixels = (o.maxImageMp ?? DEFAULT_MAX_PIXELS / 1e6) * 1e6;
  let data;
  try {
    data = run.data === 'fashion-mnist'
      ? { train: adapt(loadFashionMNIST('train'), img, chans), test: adapt(loadFashionMNIST('test'), img, chans) }
      : { train: loadImageFolder(run.data, { size: img, chans, onWarning: warn, maxPixels }), test: null };
  } catch (e) { throw new CliError(e.message); }
  if (run.dataN != null && run.dataN !== data.train.n)
    throw new CliError(`${o.resume}: the run trained on ${run.dataN} images of ${run.data}, it now holds ${data.train.n}: the data order would differ`);
  run.dataN = data.train.n;
  return data;
}

// --backend webgpu: each step replayed on the GPU (Model.trainStepAsync); the state comes back to
// wasm memory (model.sync) where the loop saves it -- every saveEvery steps, at the end, after a
// failed step -- and nowhere else
function gpuSteps(tr, model, saveEvery, stopAt) {
  tr.trainOne = async () => {
    try {
      const r = await tr.trainOneAsync();
      if (r.step % saveEvery === 0 || r.step >= stopAt) await model.sync();
      return r;
    } catch (e) { await model.sync(); throw e; }
  };
}

async function train(o) {
  const say = (s) => process.stderr.write(s + '\n');
  const warn = (s) => say(`vitrine train: warning: ${s}`);
  if (o.maxImageMp === 0) throw new CliError("--max-image-mp: '0' megapixels admits no image", 2);
  if (o.maskRatio != null && !(o.maskRatio >= 0 && o.maskRatio < 1)) throw new CliError(`--mask-ratio: ${o.maskRatio} is not in [0, 1)`, 2);
  if (o.out === '') throw new CliError('--out: an empty folder name', 2);
  const t0 = performance.now(), settings = trainSettings(o), { run, resumeBytes } = settings, seed = BigInt(run.seed), outDir = o.out || TRAIN_DEFAULTS.out;
  const stopAt = stopAtOf(o, run, settings.step);
  const outputs = new Outputs(outDir, { state: path.join(outDir, STATE_FILE), weights: path.join(outDir, WEIGHTS_FILE), image: path.join(outDir, IMAGE_FILE) });
  let side = null;
  try {
    const { vt, model, initBytes } = await openModel(o, settings, seed, say, warn);
    const data = trainData(o, run, model, warn), { img, chans } = model.dims;
    side = !o.noEval && stopAt >= run.steps ? startSideEvaluation(o, vt, run, data, seed, warn, initBytes) : null;
    const save = (step) => {
      try {
        outputs.write(outputs.paths.state, withMetadata(model.saveTrainState(), { vitrine_run: JSON.stringify({ ...run, spec: undefined }) }));
      } catch (e) { throw new CliError(`${e.message}; ${outputs.stateNote()}`); }
      outputs.savedStep = step;
    };
    const tr = new TrainingRun({ model, dataset: data.train, batch: run.batch, steps: run.steps, dataSeed: seed + 2n });
    say(`vitrine train: ${run.spec.kind.toUpperCase()} ${run.preset || 'config'} ${img}x${img}x${chans} patch ${model.dims.patch} dim ${model.dims.dim} depth ${model.dims.depth}, ` +
      `${data.train.n} images (${run.data}), batch ${run.batch}, steps ${tr.step ? tr.step + '..' : ''}${stopAt}/${run.steps}, lr ${run.lr}${run.spec.kind === 'mae' && run.maskRatio != null ? `, mask ratio ${run.maskRatio}` : ''}, grad checkpointing ${model.gradCheckpointing}, wasm ${vt.build}, ${vt.threads} thread${vt.threads === 1 ? '' : 's'}${vt.threadsNote ? ` (${vt.threadsNote})` : ''}, backend ${vt.backend.name}${vt.backend.name === 'wasm' && !o.backend ? '' : ` (${vt.backend.reason})`}`);
    const saveEvery = o.saveEvery ?? TRAIN_DEFAULTS.saveEvery;
    if (vt.backend.name === 'webgpu') gpuSteps(tr, model, saveEvery, stopAt);
    const loop = await trainSteps({ tr, model, run, stopAt, saveEvery, save, warn });
    const { status, stepped, saveError } = endSteps(loop, { tr, run, outputs, save, resumeFile: resumeBytes && o.resume });
    if (!stepped && loop.interrupted) return status;
    try { writeResults(model, run, data, outputs, warn); } catch (e) { throw new CliError(`${e.message} (${outputs.stateNote()})`); }
    if (loop.error || saveError) say(`vitrine train: wrote what it could from step ${tr.step}: ${outputs.wrote.join(', ') || 'nothing'}`);
    const knn = side && !loop.interrupted && !loop.error && !saveError ? await knnResults(model, side, say, warn) : { trained: null, initial: null, pixels: null };
    report(o, { vt, run, model, side, knn, paths: outputs.paths, finished: tr.step >= run.steps, step: tr.step, lastLoss: loop.lastLoss,
      seconds: (performance.now() - t0) / 1000, trained: tr.step - loop.startStep, trainSeconds: loop.trainSeconds });
    model.dispose();
    if (vt.backend.name === 'webgpu') vt.close(); // the device would keep Node running
    return status;
  } finally {
    if (side) side.worker.terminate();
    outputs.cleanUp();
  }
}
