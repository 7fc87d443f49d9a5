// worker.js: the demo's engine side, a module Web Worker. Two of them run: the trainer (one
// model, the training loop, weights, IndexedDB) and the planner
// (creates a configuration's model only to plan it, so a refused configuration never grows the
// trainer's memory; wasm memory never shrinks). Messages in: {id, type, ...}; replies carry the
// same id. Unsolicited messages (step, viz, eval, stopped, error) have no id.
// Objectives: MAE and AIM (Model.trainStep on unlabelled images) and classify (timm's
// VisionTransformer with a head, Model.trainStepLabels on the user's classes; web/classify.js:
// the CLI's settings, split, evaluation and prediction). Models and data: worker-data.js.
import { createVitrine, simdSupported, toRGBA } from '../web/vitrine.js';
import { TRAIN_PRESETS, encoderPrefix, DataOrder } from '../web/train.js';
import { adapt, makeBatch } from '../web/images.js';
import { withMetadata } from '../web/safetensors.js';
import { classifyTrainerOptions, splitEval, ClassifyRun, evaluate, predictTop, CLASSIFIER_FORMAT } from '../web/classify.js';
import { fitReport, fmtBytes } from './plan.js';
import { DEMO_MODELS, specFor, encoderOf, policyOf, loadFmnist, makeSource, ADAPT_MAX, idbGet, idbPut, idbDel, MAX_SAVED } from './worker-data.js';

const f32hex = (x) => { const b = new DataView(new ArrayBuffer(4)); b.setFloat32(0, x); return b.getUint32(0).toString(16).padStart(8, '0'); };
const now = () => performance.now();

let vt = null;
let baseline = 0;      // the wasm memory of a fresh engine (module, stack, heap start)
const post = (msg, transfer = []) => self.postMessage(msg, transfer);

// ---- the trainer ------------------------------------------------------------------------------

let run = null;       // { cfg, model, src, get, order, losses, userData, cls, evals }
let running = false, loopToken = 0, lastViz = 0, lastSave = 0, saving = null;
// cls (classify runs): { cr: ClassifyRun, ds (at the model's size), evalIdx, every }; evals: [{ step, top1, n, confusion }]

// The encoder of the last MAE / AIM run of this tab (kept when that run is reset or replaced), for
// a classifier to start from: { bytes (timm keys), kind, step, model, custom }. Memory only.
let tabEncoder = null;
function stashEncoder() {
  if (!run || run.cls || run.model.stepCount === 0) return;
  const m = run.model;
  tabEncoder = { bytes: m.saveSafetensors({ modelPrefix: encoderPrefix(m.kind) }), kind: m.kind, step: m.stepCount, model: run.cfg.model, custom: run.cfg.custom };
}
const tabEncoderInfo = () => (tabEncoder ? { kind: tabEncoder.kind, step: tabEncoder.step, model: tabEncoder.model, custom: tabEncoder.custom } : null);

// trainerInit options: classify as `vitrine train --objective classify` (web/classify.js)
const trainerOptions = (cfg) => (cfg.kind === 'classify'
  ? classifyTrainerOptions({ lr: cfg.lr, warmup: cfg.warmup, steps: cfg.steps, seed: cfg.seed })
  : { lr: cfg.lr, warmupSteps: cfg.warmup, totalSteps: cfg.steps, maskRatio: cfg.maskRatio, seed: cfg.seed });

// Starts a new classifier from the encoder trained in this tab or a file (init: { bytes }).
function classifierInit(model, cfg, init) {
  let bytes = init && init.bytes, what = init && init.name;
  if (cfg.init === 'tab') {
    if (!tabEncoder) throw new Error('no MAE / AIM encoder has been trained in this tab yet: train one (then Reset), or start from random init');
    if (JSON.stringify(encoderOf(tabEncoder)) !== JSON.stringify(encoderOf(cfg)))
      throw new Error(`the encoder trained in this tab is model '${tabEncoder.model}': choose that model to start from it`);
    bytes = tabEncoder.bytes;
    what = `the ${tabEncoder.kind.toUpperCase()} encoder trained in this tab (step ${tabEncoder.step})`;
  } else if (cfg.init === 'file') {
    if (!bytes) throw new Error('choose the safetensors file to start from');
  } else return null;
  const r = model.initFrom(new Uint8Array(bytes));
  return { what, text: initText(r), report: r };
}
const initText = (r) => {
  const pos = { sincos_frozen: 'sin-cos pos_embed frozen', learned_now_trainable: 'learned pos_embed trains', trainable: 'pos_embed trains', none: 'no pos_embed loaded' }[r.posEmbed];
  return `${r.source}: ${r.loaded} tensors loaded, ${r.skipped} skipped${r.notes.length ? ` (${r.notes.join('; ')})` : ''}; ${pos}`;
};
const frozenNames = (m) => m.params().filter((p) => !p.requiresGrad).map((p) => p.name);

function batchAt(step) {
  const idx = run.order.batch(step, run.cfg.batch);
  return run.get(idx);
}

function memInfo() {
  const m = run && run.model;
  const out = { linear: vt.memory().linear, baseline };
  if (m) {
    const mm = m.memory();
    out.arena = mm.arena;
    out.used = mm.used;
  }
  return out;
}

// wasm memory never shrinks: an engine that grew past the budget of the next run (an earlier, larger
// run) is replaced by a fresh one, so that the budget bounds what this run's trainer holds
async function freshEngineFor(budget) {
  if (!budget || vt.memory().linear <= budget) return;
  vt.close();
  vt = await createVitrine();
  baseline = vt.memory().linear;
}

async function setup({ cfg, userData, resume, init, budget, keep = true }) {
  stop();
  if (saving) await saving;
  stashEncoder();
  if (run) { run.model.dispose(); run = null; }
  await freshEngineFor(budget);
  const saved = resume ? await idbGet() : null;
  if (resume && !saved) throw new Error('nothing saved to resume');
  if (saved) { cfg = saved.cfg; userData = saved.userData || null; }
  const cls = cfg.kind === 'classify';
  const spec = specFor(cfg);
  const model = vt.createModel(spec);
  let initReport = null;
  try {
    const { img, chans } = model.dims;
    const src = cls || cfg.data === 'user' ? userData : await loadFmnist();
    if (!src || !src.n) throw new Error(cls ? 'no images in your classes yet' : 'no images: pick or drop some image files first');
    model.initWeights(cfg.seed);
    if (cls && saved) for (const name of cfg.frozen || []) model.setRequiresGrad(name, false); // the saved run's layout
    else if (cls) {
      initReport = classifierInit(model, cfg, init);
      cfg = { ...cfg, frozen: frozenNames(model), initFrom: initReport && initReport.what };
    }
    model.trainerInit(trainerOptions(cfg));
    model.setGradCheckpointing(policyOf(cfg));
    // keep: the plan leaves room to save the training state for a reload (demo/plan.js tabReach)
    run = { cfg, model, src, losses: [], userData: cls || cfg.data === 'user' ? userData : null, cls: null, evals: [], keep: saved ? true : keep, viz: null };
    if (cls) {
      if (src.n * chans * img * img > ADAPT_MAX) throw new Error(`${src.n} images at ${img}x${img}x${chans} are too many for the tab: remove some`);
      const ds = adapt(src, img, chans), sp = splitEval(ds);
      if (!sp.trainIdx.length) throw new Error('no training images: add more images to your classes');
      const cr = new ClassifyRun({ model, dataset: ds, indices: sp.trainIdx, batch: cfg.batch, steps: cfg.steps, dataSeed: BigInt(cfg.seed) + 2n });
      run.cls = { cr, ds, evalIdx: sp.evalIdx, every: Math.max(1, Math.round(cfg.steps / 10)) };
    } else {
      run.get = makeSource(src, img, chans).get;
      run.order = new DataOrder(src.n, cfg.seed);
    }
    if (saved) {
      model.loadTrainState(saved.state);
      run.losses = saved.losses || [];
      run.evals = saved.evals || [];
      run.viz = saved.viz || null;
    }
  } catch (e) {
    model.dispose();
    run = null;
    throw e;
  }
  const params = run.model.params().reduce((a, p) => a + p.numel, 0);
  const out = { cfg, dims: run.model.dims, params, step: run.model.stepCount, losses: run.losses, policy: run.model.gradCheckpointing,
    data: { name: run.src.name, n: run.src.n }, mem: memInfo(), resumed: !!saved, evals: run.evals, tabEncoder: tabEncoderInfo(),
    init: initReport && { what: initReport.what, text: initReport.text }, viz: run.viz, keep: run.keep };
  if (run.cls) {
    out.split = { train: run.cls.cr.indices.length, heldOut: run.cls.evalIdx.length };
    if (saved) out.userData = run.userData; // the classes' images (at the model's size), for the page's class editor
  }
  return out;
}

function stop() { running = false; loopToken++; }

const yieldNow = () => new Promise((r) => { const ch = new MessageChannel(); ch.port1.onmessage = () => r(); ch.port2.postMessage(0); });

async function loop(token) {
  while (running && token === loopToken) {
    const m = run.model;
    if (m.stepCount >= run.cfg.steps) {
      running = false;
      post({ type: 'stopped', reason: 'done', step: m.stepCount });
      await persist();
      return;
    }
    if (!(await stepOnce())) return;
    await yieldNow();
  }
}

// MAE / AIM steps on the GPU with backend webgpu (Model.trainStepAsync; the classifier's stay on
// wasm); messages wait for a GPU step in flight (`stepping`), and whatever reads the model's state
// in wasm memory syncs it first (gpuSync)
const onGpu = () => vt.backend.name === 'webgpu' && run && !run.cls;
let stepping = null;
async function gpuSync() { if (run && onGpu()) await run.model.sync(); }

async function stepOnce() {
  const m = run.model, s = m.stepCount, B = run.cfg.batch;
  const x = run.cls ? null : batchAt(s);
  const lr = m.lr(s);
  const t0 = now();
  let loss;
  try {
    if (onGpu()) {
      stepping = m.trainStepAsync(x, B);
      try { loss = await stepping; } finally { stepping = null; }
    } else loss = run.cls ? run.cls.cr.trainOne().loss : m.trainStep(x, B);
  } catch (e) {
    running = false;
    post({ type: 'error', where: 'train', message: e.message, step: s });
    return false;
  }
  const ms = now() - t0;
  const rec = { step: s + 1, loss, hex: f32hex(loss), ms, policy: m.gradCheckpointing, lr };
  run.losses.push(rec);
  const msg = { type: 'step', ...rec, ips: (B * 1000) / ms };
  const t = now();
  if (t - lastViz > 700 || s + 1 >= run.cfg.steps || s === 0) {
    lastViz = t;
    if (!run.cls && !onGpu()) { run.viz = vizOf(x); post({ type: 'viz', ...run.viz }); } // (a GPU step's forward stays on the GPU)
    msg.mem = memInfo();
  }
  post(msg);
  if (run.cls && ((s + 1) % run.cls.every === 0 || s + 1 >= run.cfg.steps)) evalNow();
  if (t - lastSave > 5000) { lastSave = t; persist(); }
  return true;
}

/** Held-out top-1 and confusion matrix now (every 5th image of the classes, as splitEval), in
 * chunks of the training batch (inference of a batch needs less than its training step). */
function evalNow() {
  const { cls, model, cfg } = run, step = model.stepCount;
  if (!cls.evalIdx.length || (run.evals.length && run.evals[run.evals.length - 1].step === step)) return;
  const t0 = now();
  const ev = evaluate(model, cls.ds, cls.evalIdx, cfg.classes.length, cfg.batch);
  const rec = { step, top1: ev.top1, n: ev.n, confusion: ev.confusion, ms: now() - t0 };
  run.evals.push(rec);
  post({ type: 'eval', ...rec });
}

// originals / masked / reconstructions of the first images of the last step, as RGBA bytes
function vizOf(x, n = 8) {
  const m = run.model, v = m.visualize(), { img, chans } = m.dims;
  const k = Math.min(n, v.shape[0]), rows = [[], [], []];
  for (let b = 0; b < k; b++) {
    rows[0].push(toRGBA(x, { chans, img }, b));
    rows[1].push(toRGBA(v.masked, { chans, img }, b));
    rows[2].push(toRGBA(v.recon, { chans, img }, b));
  }
  return { size: img, n: k, rows, kind: m.kind, step: m.stepCount };
}

async function persist() {
  // a save in flight holds an earlier step: wait for it, then save this one (pausing during a
  // periodic save used to keep the earlier step, and a reload resumed from there)
  while (saving) await saving;
  if (!run || !run.keep) return;
  await gpuSync();
  const state = run.model.saveTrainState();
  if (state.length > MAX_SAVED) {
    post({ type: 'saved', ok: false, message: `training state ${fmtBytes(state.length)}: too large to keep in the browser` });
    return;
  }
  const rec = { cfg: run.cfg, step: run.model.stepCount, state, losses: run.losses, evals: run.evals, userData: run.userData, viz: run.viz, savedAt: Date.now() };
  saving = idbPut(rec).then(() => post({ type: 'saved', ok: true, step: rec.step, bytes: state.length }),
    (e) => post({ type: 'saved', ok: false, message: `IndexedDB: ${e && e.message}` })).finally(() => { saving = null; });
  return saving;
}

function setPolicy({ policy, budget }) {
  const m = run.model, cur = m.gradCheckpointing;
  const r = fitReport(m, { batch: run.cfg.batch, maskRatio: run.cfg.maskRatio, policy, budget, baseline });
  if (!r.fits) { m.setGradCheckpointing(cur); return { ok: false, policy: cur, report: r }; }
  m.setGradCheckpointing(r.policy); // from the next step on
  if (r.policy !== 'none') run.cfg = { ...run.cfg, checkpointing: true, policy, resolved: r.policy };
  else run.cfg = { ...run.cfg, checkpointing: false };
  return { ok: true, policy: r.policy, report: r };
}

/** The classifier's top classes for one image: bytes [chans, size, size] at the model's size and
 * channels (the page's pixel pipeline, as for the classes' images). */
function predict({ pixels, size, chans: c }) {
  if (!run || !run.cls) throw new Error('no classifier yet: set up a classify run first');
  const m = run.model, { img, chans } = m.dims, classes = run.cfg.classes;
  if (size !== img || c !== chans || pixels.length !== chans * img * img) throw new Error(`predict: a ${size}x${size}x${c} image, the model takes ${img}x${img}x${chans}`);
  const z = m.timmForward(makeBatch({ chans, size, pixels }, Int32Array.of(0)));
  return { top: predictTop(z.data, classes, Math.min(3, classes.length)), step: m.stepCount };
}

// ---- the planner ------------------------------------------------------------------------------

let planModel = null, planKey = '';
function plan({ cfg, budget }) {
  const spec = specFor(cfg);
  const key = JSON.stringify(spec);
  if (key !== planKey) {
    if (planModel) planModel.dispose();
    planModel = null;
    planKey = '';
    planModel = vt.createModel(spec); // parameters + gradients: the planner's memory, not the trainer's
    planKey = key;
  }
  const m = planModel;
  const report = fitReport(m, { batch: cfg.batch, maskRatio: cfg.maskRatio, policy: policyOf(cfg), budget, baseline });
  const params = m.params().reduce((a, p) => a + p.numel, 0);
  return { report, dims: m.dims, params, linear: vt.memory().linear };
}

// ---- messages ---------------------------------------------------------------------------------

const handlers = {
  async init({ backend = 'wasm' }) {
    let fallback = null;
    try { vt = await createVitrine({ backend }); } catch (e) { // webgpu asked for and refused: wasm, saying why
      fallback = `${backend} asked for: ${e.message}`;
      vt = await createVitrine();
    }
    baseline = vt.memory().linear;
    const be = { name: vt.backend.name, reason: fallback || vt.backend.reason, adapter: vt.backend.adapter };
    return { backend: be, build: vt.build, simdKernels: vt.simdKernels, simd: simdSupported(), presets: vt.presets(), policies: vt.policies(), baseline,
      threads: vt.threads, threadsNote: vt.threadsNote, isolated: globalThis.crossOriginIsolated === true,
      models: { ...Object.fromEntries(Object.entries(DEMO_MODELS).map(([k, v]) => [k, v.label])), ...Object.fromEntries(Object.keys(TRAIN_PRESETS).map((k) => [k, k])) } };
  },
  plan,
  setup,
  async saved() {
    const s = await idbGet();
    return s ? { cfg: s.cfg, step: s.step, savedAt: s.savedAt, bytes: s.state.length } : null;
  },
  start() {
    if (!run) throw new Error('no model: set one up first');
    if (run.model.stepCount >= run.cfg.steps) throw new Error(`all ${run.cfg.steps} steps are done: Reset to train again`);
    if (!running) { running = true; loop(++loopToken); }
    return { step: run.model.stepCount };
  },
  async pause() {
    const was = running;
    stop();
    if (run && was) await persist();
    return { step: run ? run.model.stepCount : 0 };
  },
  async reset() {
    stop();
    if (saving) await saving;
    stashEncoder();
    if (run) { run.model.dispose(); run = null; }
    await idbDel();
    return { mem: { linear: vt.memory().linear, baseline }, tabEncoder: tabEncoderInfo() };
  },
  predict,
  policy: (msg) => setPolicy(msg),
  memory: () => memInfo(),
  async exportWeights({ full }) {
    await gpuSync();
    const m = run.model;
    if (run.cls) {
      // timm keys with the head, the class names in the metadata: what `vitrine predict --weights` reads
      const meta = { format: CLASSIFIER_FORMAT, classes: run.cfg.classes, spec: specFor(run.cfg), img: m.dims.img, chans: m.dims.chans };
      return { bytes: withMetadata(m.saveSafetensors(), { vitrine_classifier: JSON.stringify(meta) }), kind: 'classifier', step: m.stepCount, full: true };
    }
    const bytes = full ? m.saveSafetensors() : m.saveSafetensors({ modelPrefix: encoderPrefix(m.kind) });
    return { bytes, kind: m.kind, step: m.stepCount, full: !!full };
  },
  importWeights({ bytes, name }) {
    const m = run.model, cfg = run.cfg;
    const u8 = new Uint8Array(bytes);
    // this run's own training state resumes it; any other file starts training from its weights,
    // its layout (timm, lightly, vitrine) recognised by the engine (Model.initFrom)
    try { m.loadTrainState(u8); return { as: 'training state', step: m.stepCount }; } catch { /* not this run's state */ }
    const r = m.initFrom(u8);
    // a new start: step 0, fresh AdamW (and the gradient layout of a pos_embed that now trains)
    m.trainerInit(trainerOptions(cfg));
    run.losses = [];
    run.evals = [];
    if (run.cls) run.cfg = { ...cfg, frozen: frozenNames(m), initFrom: name || 'a safetensors file' };
    return { as: initText(r), step: m.stepCount, report: r };
  },
};

let chain = Promise.resolve(); // one message at a time (between training steps)
self.onmessage = (e) => {
  const msg = e.data;
  chain = chain.then(async () => {
    try {
      while (stepping) await stepping.catch(() => {}); // not in the middle of a GPU step
      const h = handlers[msg.type];
      if (!h) throw new Error(`unknown message ${msg.type}`);
      const result = await h(msg);
      const transfer = result && result.bytes instanceof Uint8Array ? [result.bytes.buffer] : [];
      post({ id: msg.id, ok: true, result }, transfer);
    } catch (err) {
      post({ id: msg.id, ok: false, error: err && err.message ? err.message : String(err) });
    }
  });
};
