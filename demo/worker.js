// worker.js: the demo's engine side, a module Web Worker. Two of them run: the trainer (one
// model, the training loop, the activation timelines, weights, IndexedDB) and the planner
// (creates a configuration's model only to plan it, so a refused configuration never grows the
// trainer's memory; wasm memory never shrinks). Messages in: {id, type, ...}; replies carry the
// same id. Unsolicited messages (step, viz, timeline, stopped, error) have no id.
import { createVitrine, simdSupported, toRGBA } from '../web/vitrine.js';
import { TRAIN_PRESETS, modelSpec, encoderPrefix, DataOrder, makeBatch, showMasks } from '../web/train.js';
import { fitReport, planStep, resolvePolicy, fmtBytes } from './plan.js';

// Demo models beside train.js's: `mini` is small enough to train at a glance (and in the tests).
export const DEMO_MODELS = {
  mini: {
    label: 'mini: 28 px, patch 7, dim 48, depth 3 (fast)',
    encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 48, depth: 3, num_heads: 3 },
    mae: { decoder_dim: 32, decoder_depth: 1, decoder_heads: 2 },
    aim: { head_hidden_dim: 64, head_blocks: 1 },
  },
  'rgb32-tiny': {
    label: 'rgb32-tiny: 32 px RGB, patch 4, dim 192, depth 12 (vit_tiny at 32 px)',
    encoder: { img_size: 32, patch_size: 4, in_chans: 3, embed_dim: 192, depth: 12, num_heads: 3 },
    mae: { decoder_dim: 128, decoder_depth: 2, decoder_heads: 4 },
    aim: { head_hidden_dim: 256, head_blocks: 2 },
  },
};

/** cfg.model: a DEMO_MODELS or TRAIN_PRESETS key, a timm preset name, or 'custom' (cfg.custom:
 * JSON text as the engine reads it: { encoder: {...timm kwargs}, decoder_dim, ... }). */
export function specFor(cfg) {
  if (cfg.model === 'custom') {
    let config;
    try { config = JSON.parse(cfg.custom); } catch (e) { throw new Error(`custom config: not JSON (${e.message})`); }
    return { kind: cfg.kind, config };
  }
  const d = DEMO_MODELS[cfg.model];
  if (d) return { kind: cfg.kind, config: { encoder: { ...d.encoder }, ...d[cfg.kind] } };
  if (TRAIN_PRESETS[cfg.model]) return modelSpec(cfg.kind, { preset: cfg.model });
  return { kind: cfg.kind, preset: cfg.model };
}
// the policy a config trains under ('auto' is resolved by the planner into budget:BYTES)
const policyOf = (cfg) => (cfg.checkpointing ? cfg.resolved || cfg.policy : 'none');
const f32hex = (x) => { const b = new DataView(new ArrayBuffer(4)); b.setFloat32(0, x); return b.getUint32(0).toString(16).padStart(8, '0'); };
const now = () => performance.now();

let vt = null;
let baseline = 0;      // the wasm memory of a fresh engine (module, stack, heap start)
const post = (msg, transfer = []) => self.postMessage(msg, transfer);

// ---- data -------------------------------------------------------------------------------------

let fmnist = null; // { name, n, chans: 1, size: 28, pixels, labels, classes }
async function loadFmnist() {
  if (fmnist) return fmnist;
  const base = new URL('../build/demo-data/', import.meta.url);
  const [meta, px, lb] = await Promise.all([
    fetch(new URL('fmnist-sample.json', base)).then((r) => { if (!r.ok) throw new Error(`Fashion-MNIST sample missing (HTTP ${r.status}): run node demo/serve.mjs, which prepares it`); return r.json(); }),
    fetch(new URL('fmnist-sample.bin', base)).then((r) => r.arrayBuffer()),
    fetch(new URL('fmnist-sample-labels.bin', base)).then((r) => r.arrayBuffer()),
  ]);
  fmnist = { name: 'fashion-mnist sample', n: meta.n, chans: 1, size: meta.width, pixels: new Uint8Array(px), labels: new Uint8Array(lb), classes: meta.classes };
  return fmnist;
}

// One image of a source data set (bytes [chans, size, size]) -> [chans, S, S] bytes: bilinear
// resize (align_corners=False), grey <-> colour (grey = mean of R, G, B; colour repeats grey).
function adaptImage(src, i, S, C, out, off) {
  const s = src.size, sc = src.chans, per = sc * s * s, base = i * per, px = s * s;
  const scale = s / S;
  for (let y = 0; y < S; y++) {
    const fy = Math.max(0, (y + 0.5) * scale - 0.5), y0 = Math.min(s - 1, Math.floor(fy)), y1 = Math.min(s - 1, y0 + 1), wy = fy - y0;
    for (let x = 0; x < S; x++) {
      const fx = Math.max(0, (x + 0.5) * scale - 0.5), x0 = Math.min(s - 1, Math.floor(fx)), x1 = Math.min(s - 1, x0 + 1), wx = fx - x0;
      const sample = (c) => {
        const o = base + c * px;
        const a = src.pixels[o + y0 * s + x0], b = src.pixels[o + y0 * s + x1], cc = src.pixels[o + y1 * s + x0], d = src.pixels[o + y1 * s + x1];
        return (a * (1 - wx) + b * wx) * (1 - wy) + (cc * (1 - wx) + d * wx) * wy;
      };
      const vals = [];
      for (let c = 0; c < sc; c++) vals.push(sample(c));
      for (let c = 0; c < C; c++) {
        const v = C === 1 && sc > 1 ? (vals[0] + vals[1 % sc] + vals[2 % sc]) / 3 : vals[c % sc];
        out[off + c * S * S + y * S + x] = Math.round(v);
      }
    }
  }
}

/** The data set at the model's size and channels: adapted once when small, else per batch. */
function makeSource(src, S, C) {
  const per = C * S * S;
  if (src.size === S && src.chans === C) return { ds: src, get: (idx) => makeBatch(src, idx) };
  if (src.n * per <= 64 * 1024 * 1024) {
    const pixels = new Uint8Array(src.n * per);
    for (let i = 0; i < src.n; i++) adaptImage(src, i, S, C, pixels, i * per);
    const ds = { ...src, chans: C, size: S, pixels };
    return { ds, get: (idx) => makeBatch(ds, idx) };
  }
  return {
    ds: src,
    get: (idx) => {
      const pixels = new Uint8Array(idx.length * per);
      idx.forEach((i, j) => adaptImage(src, i, S, C, pixels, j * per));
      return makeBatch({ chans: C, size: S, pixels }, Int32Array.from(idx, (_, j) => j));
    },
  };
}

// ---- IndexedDB (the training state, so that a reload resumes) --------------------------------

const DB_NAME = 'vitrine-demo', STORE = 'runs', KEY = 'current';
function db() {
  return new Promise((res, rej) => {
    const r = indexedDB.open(DB_NAME, 1);
    r.onupgradeneeded = () => r.result.createObjectStore(STORE);
    r.onsuccess = () => res(r.result);
    r.onerror = () => rej(r.error);
  });
}
async function idb(mode, fn) {
  const d = await db();
  try {
    return await new Promise((res, rej) => {
      const tx = d.transaction(STORE, mode), req = fn(tx.objectStore(STORE));
      tx.oncomplete = () => res(req.result);
      tx.onerror = tx.onabort = () => rej(tx.error);
    });
  } finally { d.close(); }
}
const idbGet = () => idb('readonly', (s) => s.get(KEY));
const idbPut = (v) => idb('readwrite', (s) => s.put(v, KEY));
const idbDel = () => idb('readwrite', (s) => s.delete(KEY));
const MAX_SAVED = 256 * 1024 * 1024;

// ---- the trainer ------------------------------------------------------------------------------

let run = null;       // { cfg, model, src, get, order, losses, userData }
let running = false, loopToken = 0, lastViz = 0, lastSave = 0, saving = null;

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

async function setup({ cfg, userData, resume }) {
  stop();
  if (run) { run.model.dispose(); run = null; }
  const saved = resume ? await idbGet() : null;
  if (resume && !saved) throw new Error('nothing saved to resume');
  if (saved) { cfg = saved.cfg; userData = saved.userData || null; }
  const spec = specFor(cfg);
  const model = vt.createModel(spec);
  try {
    const { img, chans } = model.dims;
    const src = cfg.data === 'user' ? userData : await loadFmnist();
    if (!src || !src.n) throw new Error('no images: pick or drop some image files first');
    model.initWeights(cfg.seed);
    model.trainerInit({ lr: cfg.lr, warmupSteps: cfg.warmup, totalSteps: cfg.steps, maskRatio: cfg.maskRatio, seed: cfg.seed });
    model.setGradCheckpointing(policyOf(cfg));
    const { get } = makeSource(src, img, chans);
    run = { cfg, model, src, get, order: new DataOrder(src.n, cfg.seed), losses: [], userData: cfg.data === 'user' ? userData : null };
    if (saved) {
      model.loadTrainState(saved.state);
      run.losses = saved.losses || [];
    }
  } catch (e) {
    model.dispose();
    run = null;
    throw e;
  }
  const params = run.model.params().reduce((a, p) => a + p.numel, 0);
  return { cfg, dims: run.model.dims, params, step: run.model.stepCount, losses: run.losses, policy: run.model.gradCheckpointing,
    data: { name: run.src.name, n: run.src.n }, mem: memInfo(), resumed: !!saved };
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
    if (!stepOnce()) return;
    await yieldNow();
  }
}

function stepOnce() {
  const m = run.model, s = m.stepCount, B = run.cfg.batch;
  const x = batchAt(s);
  const lr = m.lr(s);
  const t0 = now();
  let loss;
  try { loss = m.trainStep(x, B); } catch (e) {
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
    post({ type: 'viz', ...vizOf(x) });
    msg.mem = memInfo();
  }
  post(msg);
  if (t - lastSave > 5000) { lastSave = t; persist(); }
  return true;
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
  if (!run) return;
  const state = run.model.saveTrainState();
  if (state.length > MAX_SAVED) {
    post({ type: 'saved', ok: false, message: `training state ${fmtBytes(state.length)}: too large to keep in the browser` });
    return;
  }
  const rec = { cfg: run.cfg, step: run.model.stepCount, state, losses: run.losses, userData: run.userData, savedAt: Date.now() };
  saving = idbPut(rec).then(() => post({ type: 'saved', ok: true, step: rec.step, bytes: state.length }),
    (e) => post({ type: 'saved', ok: false, message: `IndexedDB: ${e && e.message}` })).finally(() => { saving = null; });
  return saving;
}

/** One forward + backward under 'none' and under the chosen policy, on the next batch, with
 * fixed masks: the arena's own account of each. Parameters, optimizer and the mask generator are
 * untouched (the next trainStep zeroes the gradients), so training continues bit for bit. */
function measure({ policy, budget }) {
  const m = run.model, cur = m.gradCheckpointing, B = run.cfg.batch;
  const x = batchAt(m.stepCount);
  const masks = showMasks(m, B, run.cfg.maskRatio, 7);
  const extra = baseline + x.byteLength, sizes = { batch: B, maskRatio: run.cfg.maskRatio };
  const out = [];
  try {
    const other = resolvePolicy(m, policy || (cur === 'none' ? 'block' : cur), { ...sizes, budget, extra });
    for (const p of other === 'none' ? ['none'] : ['none', other]) {
      const pl = planStep(m, { ...sizes, policy: p });
      if (!pl.policyMet || pl.total + extra > budget) { out.push({ policy: p, planned: pl.activations, need: pl.total + extra, skipped: true }); continue; }
      m.setGradCheckpointing(p);
      const t0 = now();
      m.loss(x, { ...masks, needGrad: true });
      m.backward();
      const ms = now() - t0;
      const tl = m.activationTimeline();
      const peak = tl.bytes.reduce((a, b) => Math.max(a, b), 0);
      out.push({ policy: p, bytes: tl.bytes, live: tl.live, backwardStart: tl.backwardStart, planned: pl.activations, peak, ms });
    }
  } finally {
    m.zeroGrad();
    m.setGradCheckpointing(cur);
    m.releaseActivations();
  }
  return { results: out, step: m.stepCount, batch: B };
}

function setPolicy({ policy, budget }) {
  const m = run.model, cur = m.gradCheckpointing;
  const x = run.cfg.batch * m.dims.chans * m.dims.img ** 2 * 4;
  const r = fitReport(m, { batch: run.cfg.batch, maskRatio: run.cfg.maskRatio, policy, budget, extra: baseline + x });
  if (!r.fits) { m.setGradCheckpointing(cur); return { ok: false, policy: cur, report: r }; }
  m.setGradCheckpointing(r.policy); // from the next step on
  if (r.policy !== 'none') run.cfg = { ...run.cfg, checkpointing: true, policy, resolved: r.policy };
  else run.cfg = { ...run.cfg, checkpointing: false };
  return { ok: true, policy: r.policy, report: r };
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
  const m = planModel, { img, chans } = m.dims;
  const x = cfg.batch * chans * img * img * 4;
  const report = fitReport(m, { batch: cfg.batch, maskRatio: cfg.maskRatio, policy: policyOf(cfg), budget, extra: baseline + x });
  const params = m.params().reduce((a, p) => a + p.numel, 0);
  return { report, dims: m.dims, params, linear: vt.memory().linear };
}

// ---- messages ---------------------------------------------------------------------------------

const handlers = {
  async init() {
    vt = await createVitrine();
    baseline = vt.memory().linear;
    return { build: vt.build, simdKernels: vt.simdKernels, simd: simdSupported(), presets: vt.presets(), baseline,
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
    if (run) { run.model.dispose(); run = null; }
    await idbDel();
    return { mem: { linear: vt.memory().linear, baseline } };
  },
  policy: (msg) => setPolicy(msg),
  measure: (msg) => measure(msg),
  memory: () => memInfo(),
  exportWeights({ full }) {
    const m = run.model;
    const bytes = full ? m.saveSafetensors() : m.saveSafetensors({ modelPrefix: encoderPrefix(m.kind) });
    return { bytes, kind: m.kind, step: m.stepCount, full: !!full };
  },
  importWeights({ bytes }) {
    const m = run.model, cfg = run.cfg;
    const u8 = new Uint8Array(bytes);
    // this run's own training state resumes it; any other file starts training from its weights,
    // its layout (timm, lightly, vitrine) recognised by the engine (Model.initFrom)
    try { m.loadTrainState(u8); return { as: 'training state', step: m.stepCount }; } catch { /* not this run's state */ }
    const r = m.initFrom(u8);
    // a new start: step 0, fresh AdamW (and the gradient layout of a pos_embed that now trains)
    m.trainerInit({ lr: cfg.lr, warmupSteps: cfg.warmup, totalSteps: cfg.steps, maskRatio: cfg.maskRatio, seed: cfg.seed });
    run.losses = [];
    const pos = { sincos_frozen: 'sin-cos pos_embed frozen', learned_now_trainable: 'learned pos_embed trains', trainable: 'pos_embed trains', none: 'no pos_embed loaded' }[r.posEmbed];
    return { as: `${r.source}: ${r.loaded} tensors loaded, ${r.skipped} skipped${r.notes.length ? ` (${r.notes.join('; ')})` : ''}; ${pos}`,
      step: m.stepCount, report: r };
  },
};

let chain = Promise.resolve(); // one message at a time (between training steps)
self.onmessage = (e) => {
  const msg = e.data;
  chain = chain.then(async () => {
    try {
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
