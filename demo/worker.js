// worker.js: the demo's engine side, a module Web Worker. Two of them run: the trainer (one
// model, its training run, weights, IndexedDB) and the planner
// (creates a configuration's model only to plan it, so a refused configuration never grows the
// trainer's memory; wasm memory never shrinks). Messages in: {id, type, ...}; replies carry the
// same id. Unsolicited messages (step, viz, eval, stopped, error) have no id.
// The training loop is the library's (web/train/session.js's Session, what train() runs in its own
// worker and the CLI runs through it): MAE and AIM on unlabelled images, classify (timm's
// VisionTransformer with a head on the user's classes; the CLI's settings, split, evaluation and
// prediction). This file sets a Session up from the page's form and steps it between the page's
// messages (checkpointing switched, weights exported). Models and data:
// worker-data.js.
import {
  createVitrine,
  simdSupported,
  toRGBA,
  makeBatch,
  Session,
  TRAIN_PRESETS,
  MAE_DECODERS,
  encoderPrefix,
  showMasks,
  checkTrainOptions,
} from '../web/vitrine.js';
import { fitReport, fmtBytes } from './plan.js';
import {
  DEMO_MODELS,
  specFor,
  encoderOf,
  policyOf,
  loadFmnist,
  idbGet,
  idbPut,
  idbDel,
  MAX_SAVED,
} from './worker-data.js';

const f32hex = (x) => {
  const b = new DataView(new ArrayBuffer(4));
  b.setFloat32(0, x);
  return b.getUint32(0).toString(16).padStart(8, '0');
};
const now = () => performance.now();

let vt = null;
let baseline = 0; // the wasm memory of a fresh engine (module, stack, heap start)
const post = (msg, transfer = []) => self.postMessage(msg, transfer);

// ---- the trainer ------------------------------------------------------------------------------

let run = null; // { cfg, session, model, src, losses, userData, evals }
let running = false,
  loopToken = 0,
  lastViz = 0,
  lastSave = 0,
  saving = null;

// The encoder of the last MAE / AIM run of this tab (kept when that run is reset or replaced), for
// a classifier to start from: { bytes (timm keys), kind, step, model, custom }. Memory only.
let tabEncoder = null;
function stashEncoder() {
  if (!run || run.cfg.kind === 'classify' || run.model.stepCount === 0) return;
  const m = run.model;
  tabEncoder = {
    bytes: m.saveSafetensors({ modelPrefix: encoderPrefix(m.kind) }),
    kind: m.kind,
    step: m.stepCount,
    model: run.cfg.model,
    custom: run.cfg.custom,
  };
}
const tabEncoderInfo = () =>
  tabEncoder
    ? { kind: tabEncoder.kind, step: tabEncoder.step, model: tabEncoder.model, custom: tabEncoder.custom }
    : null;

// The weights a new classifier starts from: the encoder trained in this tab or a file (init: { bytes, name }).
function classifierWeights(cfg, init) {
  if (cfg.init === 'tab') {
    if (!tabEncoder)
      throw new Error(
        'no MAE / AIM encoder has been trained in this tab yet: train one (then Reset), or start from random init',
      );
    if (JSON.stringify(encoderOf(tabEncoder)) !== JSON.stringify(encoderOf(cfg)))
      throw new Error(
        `the encoder trained in this tab is model '${tabEncoder.model}': choose that model to start from it`,
      );
    return {
      bytes: tabEncoder.bytes,
      name: `the ${tabEncoder.kind.toUpperCase()} encoder trained in this tab (step ${tabEncoder.step})`,
    };
  }
  if (cfg.init === 'file') {
    if (!init || !init.bytes) throw new Error('choose the safetensors file to start from');
    return { bytes: new Uint8Array(init.bytes), name: init.name };
  }
  return null;
}
const initText = (r) => {
  const pos = {
    sincos_frozen: 'sin-cos pos_embed frozen',
    learned_now_trainable: 'learned pos_embed trains',
    trainable: 'pos_embed trains',
    none: 'no pos_embed loaded',
  }[r.posEmbed];
  return `${r.source}: ${r.loaded} tensors loaded${r.resampled ? ` (${r.resampled} resampled)` : ''}, ${r.skipped} skipped${r.notes.length ? ` (${r.notes.join('; ')})` : ''}; ${pos}`;
};

// The Session's options of the page's form: the model (worker-data.js), the data (the sample or the
// user's images, at the model's size; a classifier's classes), the schedule, the seed.
function sessionOptions(cfg, src) {
  return {
    ...formOptions(cfg),
    spec: specFor(cfg),
    data: { kind: 'pixels', ...src },
    runInfo: { data: src.name },
  };
}
// the run's options the form states, as typed: checked by the library's validator (the planner
// says what it refuses before anything runs; Session.open checks them again)
function formOptions(cfg) {
  const cls = cfg.kind === 'classify';
  return {
    objective: cls ? 'classify' : cfg.kind,
    batch: cfg.batch,
    steps: cfg.steps,
    lr: cfg.lr,
    warmup: cfg.warmup,
    seed: Number.isInteger(cfg.seed) ? String(cfg.seed) : cfg.seed,
    policy: policyOf(cfg),
    ...(cls ? {} : { maskRatio: cfg.maskRatio }),
  };
}

function memInfo() {
  const m = run && run.model;
  const out = { linear: vt.memory().linear, baseline };
  if (m) {
    const mm = m.memory();
    out.arena = mm.arena;
    out.used = mm.used;
    if (mm.gpu != null) out.gpu = mm.gpu; // the GPU bytes held (webgpu backend)
  }
  return out;
}

// wasm memory never shrinks: an engine that grew past the budget of the next run (an earlier, larger
// run) is replaced by a fresh one, so that the budget bounds what this run's trainer holds
async function freshEngineFor(budget) {
  if (!budget || vt.memory().linear <= budget) return;
  const backend = vt.backend.name; // the backend init settled on
  vt.close();
  vt = await createVitrine({ backend });
  baseline = vt.memory().linear;
}

async function setup({ cfg, userData, resume, init, budget, keep = true }) {
  stop();
  if (saving) await saving;
  stashEncoder();
  if (run) {
    run.session.dispose();
    run = null;
  }
  await freshEngineFor(budget);
  const saved = resume ? await idbGet() : null;
  if (resume && !saved) throw new Error('nothing saved to resume');
  if (saved) {
    cfg = saved.cfg;
    userData = saved.userData || null;
  }
  const cls = cfg.kind === 'classify';
  const src = cls || cfg.data === 'user' ? userData : await loadFmnist();
  if (!src || !src.n)
    throw new Error(cls ? 'no images in your classes yet' : 'no images: pick or drop some image files first');
  const weights = cls && !saved ? classifierWeights(cfg, init) : null;
  const session = await Session.open(vt, {
    ...sessionOptions(cfg, src),
    weights: weights || undefined,
    resume: saved ? saved.state : undefined,
    resumeName: 'the run kept in this browser',
  });
  const initReport = session.initReport && { what: weights.name, text: initText(session.initReport) };
  if (initReport) cfg = { ...cfg, initFrom: initReport.what };
  // keep: the plan leaves room to save the training state for a reload (demo/plan.js tabReach)
  run = {
    cfg,
    session,
    model: session.model,
    src,
    losses: saved ? saved.losses || [] : [],
    userData: cls || cfg.data === 'user' ? userData : null,
    evals: saved ? saved.evals || [] : [],
    every: Math.max(1, Math.round(cfg.steps / 10)),
    keep: saved ? true : keep,
    viz: saved ? saved.viz || null : null,
  };
  const m = run.model,
    params = m.params().reduce((a, p) => a + p.numel, 0);
  const out = {
    cfg,
    dims: m.dims,
    params,
    step: m.stepCount,
    losses: run.losses,
    policy: m.gradCheckpointing,
    data: { name: src.name, n: src.n },
    mem: memInfo(),
    resumed: !!saved,
    evals: run.evals,
    tabEncoder: tabEncoderInfo(),
    init: initReport,
    viz: run.viz,
    keep: run.keep,
  };
  if (cls) {
    out.split = { train: session.trainIdx.length, heldOut: session.valIdx ? session.valIdx.length : 0 };
    if (saved) out.userData = run.userData; // the classes' images (at the model's size), for the page's class editor
  }
  return out;
}

function stop() {
  running = false;
  loopToken++;
}

// The run stepped by the library's loop; between steps the page's messages get in (the loop
// yields), a stop (pause, reset, a new setup) is taken at the next step boundary.
async function loop(token) {
  const { session, cfg } = run,
    cls = cfg.kind === 'classify';
  const r = await session.loop({
    evalEvery: cls ? run.every : 0,
    evalChunk: cfg.batch,
    control: { aborted: () => !running || token !== loopToken },
    emit: (name, ev) => (name === 'step' ? onStep(ev) : name === 'eval' ? onEval(ev) : undefined),
  });
  if (token !== loopToken || !run) return;
  if (r.error) {
    running = false;
    post({ type: 'error', where: 'train', message: r.error.message, step: run.model.stepCount });
    return;
  }
  if (r.status === 'done') {
    running = false;
    if (cls) {
      const e = await session.evaluate(cfg.batch);
      if (token !== loopToken || !run) return; // reset meanwhile
      if (e) onEval(e);
    }
    post({ type: 'stopped', reason: 'done', step: run.model.stepCount });
    await persist();
  }
}

function onStep(ev) {
  const m = run.model,
    s = ev.step - 1;
  const rec = {
    step: ev.step,
    loss: ev.loss,
    hex: f32hex(ev.loss),
    ms: ev.seconds * 1000,
    policy: m.gradCheckpointing,
    lr: ev.lr,
  };
  run.losses.push(rec);
  const msg = { type: 'step', ...rec, ips: ev.imagesPerSecond };
  const t = now();
  if (t - lastViz > 700 || ev.step >= run.cfg.steps || s === 0) {
    lastViz = t;
    // (a GPU step's forward stays on the GPU: no reconstructions while training there)
    if (run.cfg.kind !== 'classify' && !onGpu()) {
      run.viz = vizOf(ev.images);
      post({ type: 'viz', ...run.viz });
    }
    msg.mem = memInfo();
  }
  post(msg);
  if (t - lastSave > 5000) {
    lastSave = t;
    if (onGpu()) return persist(); // the loop waits: the state comes back from the GPU between steps
    persist();
  }
}

// With backend webgpu the Session steps on the GPU (Model.trainStepAsync: MAE, AIM and classify);
// a message waits for a GPU step in flight and brings the model's state back to wasm memory
// (Session.sync) before its handler reads or changes it
const onGpu = () => !!(run && run.session.stateOnDevice);

function onEval(e) {
  if (run.evals.length && run.evals[run.evals.length - 1].step === e.step) return;
  const rec = { step: e.step, top1: e.top1, n: e.n, confusion: e.confusion, ms: e.seconds * 1000 };
  run.evals.push(rec);
  post({ type: 'eval', ...rec });
}

// originals / masked / reconstructions of the first images of the last step, as RGBA bytes
function vizOf(x, n = 8) {
  const m = run.model,
    v = m.visualize(),
    { img, chans } = m.dims,
    st = run.session.stats;
  const k = Math.min(n, v.shape[0]),
    rows = [[], [], []];
  for (let b = 0; b < k; b++) {
    rows[0].push(toRGBA(x, { chans, img }, b, st));
    rows[1].push(toRGBA(v.masked, { chans, img }, b, st));
    rows[2].push(toRGBA(v.recon, { chans, img }, b, st));
  }
  return { size: img, n: k, rows, kind: m.kind, step: m.stepCount };
}

async function persist() {
  // a save in flight holds an earlier step: wait for it, then save this one (pausing during a
  // periodic save used to keep the earlier step, and a reload resumed from there)
  while (saving) await saving;
  if (!run || !run.keep) return;
  const r = run;
  await r.session.sync(); // the GPU's newest state into wasm memory (webgpu backend; else nothing)
  if (run !== r) return; // reset or replaced meanwhile
  const state = run.session.checkpoint(); // the training state with the run's settings
  if (state.length > MAX_SAVED) {
    post({
      type: 'saved',
      ok: false,
      message: `training state ${fmtBytes(state.length)}: too large to keep in the browser`,
    });
    return;
  }
  const rec = {
    cfg: run.cfg,
    step: run.model.stepCount,
    state,
    losses: run.losses,
    evals: run.evals,
    userData: run.userData,
    viz: run.viz,
    savedAt: Date.now(),
  };
  saving = idbPut(rec)
    .then(
      () => post({ type: 'saved', ok: true, step: rec.step, bytes: state.length }),
      (e) => post({ type: 'saved', ok: false, message: `IndexedDB: ${e && e.message}` }),
    )
    .finally(() => {
      saving = null;
    });
  return saving;
}

function setPolicy({ policy, budget }) {
  const m = run.model,
    cur = m.gradCheckpointing;
  const r = fitReport(m, { batch: run.cfg.batch, maskRatio: run.cfg.maskRatio, policy, budget, baseline });
  if (!r.fits) {
    m.setGradCheckpointing(cur);
    return { ok: false, policy: cur, report: r };
  }
  m.setGradCheckpointing(r.policy); // from the next step on
  run.session.run.policy = r.policy;
  if (r.policy !== 'none') run.cfg = { ...run.cfg, checkpointing: true, policy, resolved: r.policy };
  else run.cfg = { ...run.cfg, checkpointing: false };
  return { ok: true, policy: r.policy, report: r };
}

/** The classifier's top classes for one image: bytes [chans, size, size] at the model's size and
 * channels (the page's pixel pipeline, as for the classes' images). */
async function predict({ pixels, size, chans: c }) {
  if (!run || run.cfg.kind !== 'classify') throw new Error('no classifier yet: set up a classify run first');
  const m = run.model,
    { img, chans } = m.dims;
  if (size !== img || c !== chans || pixels.length !== chans * img * img)
    throw new Error(`predict: a ${size}x${size}x${c} image, the model takes ${img}x${img}x${chans}`);
  const [top] = await run.session.predict(
    makeBatch({ chans, size, pixels }, Int32Array.of(0), null, run.session.stats),
    { topk: Math.min(3, run.cfg.classes.length) },
  );
  return { top, step: m.stepCount };
}

// ---- the planner ------------------------------------------------------------------------------

let planModel = null,
  planKey = '';
function plan({ cfg, budget }) {
  checkTrainOptions(formOptions(cfg)); // a field out of range is named, with what it takes
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
  return { report, dims: m.dims, params, linear: vt.memory().linear, stepSeconds: stepEstimate(m, cfg, key) };
}

// A timm preset's step takes seconds: before a run starts, the page says about how many. One
// forward pass of one image is timed here (after one untimed pass: the wasm's optimised tier),
// then times 3 (the backward does twice the forward's work) times the batch. Small models: null.
let estimateKey = '',
  fwdSeconds = 0;
function stepEstimate(m, cfg, key) {
  if (cfg.kind === 'classify' || !vt.presets().includes(cfg.model)) return null;
  if (key !== estimateKey) {
    const { img, chans } = m.dims,
      x = new Float32Array(chans * img * img);
    const masks = showMasks(m, 1, cfg.maskRatio);
    m.loss(x, masks);
    const t = performance.now();
    m.loss(x, masks);
    fwdSeconds = (performance.now() - t) / 1e3;
    m.releaseActivations();
    estimateKey = key;
  }
  return 3 * fwdSeconds * cfg.batch;
}

// ---- messages ---------------------------------------------------------------------------------

const handlers = {
  async init({ backend = 'wasm' }) {
    let fallback = null;
    try {
      vt = await createVitrine({ backend });
    } catch (e) {
      // webgpu asked for and refused: wasm, saying why
      fallback = `${backend} asked for: ${e.message}`;
      vt = await createVitrine();
    }
    baseline = vt.memory().linear;
    const be = { name: vt.backend.name, reason: fallback || vt.backend.reason, adapter: vt.backend.adapter };
    return {
      backend: be,
      build: vt.build,
      simdKernels: vt.simdKernels,
      simd: simdSupported(),
      presets: vt.presets(),
      policies: vt.policies(),
      baseline,
      threads: vt.threads,
      threadsNote: vt.threadsNote,
      isolated: globalThis.crossOriginIsolated === true,
      models: {
        ...Object.fromEntries(Object.entries(DEMO_MODELS).map(([k, v]) => [k, v.label])),
        ...Object.fromEntries(Object.keys(TRAIN_PRESETS).map((k) => [k, k])),
      },
      decoders: Object.fromEntries(Object.entries(MAE_DECODERS).map(([k, v]) => [k, v.label])),
    };
  },
  plan,
  setup,
  async saved() {
    const s = await idbGet();
    return s ? { cfg: s.cfg, step: s.step, savedAt: s.savedAt, bytes: s.state.length } : null;
  },
  start() {
    if (!run) throw new Error('no model: set one up first');
    if (run.model.stepCount >= run.cfg.steps)
      throw new Error(`all ${run.cfg.steps} steps are done: Reset to train again`);
    if (!running) {
      running = true;
      loop(++loopToken);
    }
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
    if (run) {
      run.session.dispose();
      run = null;
    }
    await idbDel();
    return { mem: { linear: vt.memory().linear, baseline }, tabEncoder: tabEncoderInfo() };
  },
  predict,
  policy: (msg) => setPolicy(msg),
  memory: () => memInfo(),
  exportWeights({ full }) {
    const m = run.model;
    // a classifier: timm keys with the head, the class names and normalisation in the metadata
    // (what `vitrine predict --weights` reads)
    if (run.cfg.kind === 'classify')
      return { bytes: run.session.weights(), kind: 'classifier', step: m.stepCount, full: true };
    const bytes = full ? m.saveSafetensors() : m.saveSafetensors({ modelPrefix: encoderPrefix(m.kind) });
    return { bytes, kind: m.kind, step: m.stepCount, full: !!full };
  },
  importWeights({ bytes, name }) {
    const m = run.model,
      s = run.session;
    const u8 = new Uint8Array(bytes);
    // this run's own training state resumes it; any other file starts training from its weights,
    // its layout (timm, lightly, vitrine) recognised by the engine (Model.initFrom)
    try {
      m.loadTrainState(u8);
      return { as: 'training state', step: m.stepCount };
    } catch {
      /* not this run's state */
    }
    const r = m.initFrom(u8);
    // a new start: step 0, fresh AdamW (and the gradient layout of a pos_embed that now trains)
    m.trainerInit(s.trainerOptions);
    s.run.lossFirst = null;
    s.startStep = 0;
    run.losses = [];
    run.evals = [];
    if (run.cfg.kind === 'classify') run.cfg = { ...run.cfg, initFrom: name || 'a safetensors file' };
    return { as: initText(r), step: m.stepCount, report: r };
  },
};

let chain = Promise.resolve(); // one message at a time (between training steps)
self.onmessage = (e) => {
  const msg = e.data;
  chain = chain.then(async () => {
    try {
      if (run) await run.session.sync(); // after a GPU step in flight, the state back in wasm memory (webgpu)
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
