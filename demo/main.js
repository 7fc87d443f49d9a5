// main.js: the demo page. Everything heavy runs in two module workers (worker.js): the trainer
// and the planner. This file reads the controls, draws (canvas), decodes the user's images and
// exposes its state as window.vitrineDemo (for people poking around, and for the browser test).
// The classify mode: the user's classes (class editor), held-out accuracy, prediction of a
// dropped image.
import { fmtBytes, MiB } from './plan.js';
import { fetchFmnistSample } from './sample.js';

const $ = (id) => document.getElementById(id);
const POLICY_LABEL = (p) => (p.startsWith('budget:') ? `budget:${fmtBytes(Number(p.slice(7)))}` : p);

// ---- workers ---------------------------------------------------------------------------------

class Rpc {
  constructor(name, onEvent) {
    this.name = name;
    this.next = 1;
    this.pending = new Map();
    this.w = new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name });
    this.w.onmessage = (e) => {
      const m = e.data;
      if (m.id && this.pending.has(m.id)) {
        const { res, rej } = this.pending.get(m.id);
        this.pending.delete(m.id);
        if (m.ok) res(m.result); else rej(new Error(m.error));
      } else if (onEvent) onEvent(m);
    };
    this.w.onerror = (e) => {
      e.preventDefault();
      const err = new Error(`${name} worker: ${e.message || 'failed to load (see the console)'}`);
      setStatus(err.message, true);
      for (const { rej } of this.pending.values()) rej(err);
      this.pending.clear();
    };
  }
  call(type, payload = {}, transfer = []) {
    const id = this.next++;
    return new Promise((res, rej) => {
      this.pending.set(id, { res, rej });
      this.w.postMessage({ id, type, ...payload }, transfer);
    });
  }
  terminate() { this.w.terminate(); }
}

// ---- state (window.vitrineDemo is this object) -------------------------------------------------

const S = {
  booted: false,      // start-up done (a saved run resumed, if any)
  ready: false, build: null, simdKernels: false, error: null,
  threads: 0, threadsNote: null, // the training engine's kernel threads, and why fewer than every core
  run: null,          // { cfg, dims, params, data } of the configured run
  running: false, step: 0, losses: [], stopped: null,
  policy: 'none',     // the run's current checkpointing policy
  plan: null,         // the last planner report
  refusal: null,      // text of the last refusal
  timeline: null,     // the last measure() result
  userImages: [],     // ImageBitmaps
  saved: null, resumed: false, lastSpeed: null, mem: null,
  // classify mode
  classes: [],        // [{ name, images: [ImageBitmap], bad: [file names that are not images] }]
  evals: [],          // [{ step, top1, n, confusion }] held-out accuracy of the run
  split: null,        // { train, heldOut } image counts of the run
  prediction: null,   // { file, step, top: [{ name, index, p }] } | { file, error }
  tabEncoder: null,   // { kind, step, model, custom }: the last MAE / AIM encoder trained in this tab
  initFile: null,     // { name, bytes } the safetensors file a classifier starts from
};
window.vitrineDemo = S;

// bad: shown in red; an error (not a refusal) is also kept in S.error
function setStatus(text, bad = false, isError = bad) {
  const el = $('status');
  el.textContent = text;
  el.style.color = bad ? '#ffb4a8' : '';
  if (isError) S.error = text;
}

let trainer, planner;
function startPlanner() { planner = new Rpc('planner'); return planner.call('init'); }

// ---- the form ----------------------------------------------------------------------------------

const CONFIG_IDS = ['kind', 'model', 'custom', 'batch', 'mask-ratio', 'lr', 'steps', 'warmup', 'seed', 'data', 'files',
  'init', 'init-file', 'pool', 'class-name', 'add-class', 'fmnist-classes', 'clear-classes'];
function readForm() {
  const num = (id) => Number($(id).value);
  return {
    kind: $('kind').value, model: $('model').value, custom: $('custom').value,
    batch: Math.max(1, Math.floor(num('batch'))), maskRatio: num('mask-ratio'), lr: num('lr'),
    steps: Math.max(1, Math.floor(num('steps'))), warmup: Math.max(0, Math.floor(num('warmup'))), seed: Math.max(0, Math.floor(num('seed'))),
    data: $('data').value, checkpointing: $('ckpt').checked, policy: $('policy').value,
    init: $('init').value, pool: $('pool').value, classes: S.classes.map((c) => c.name),
  };
}
function writeForm(cfg) {
  $('kind').value = cfg.kind; $('model').value = cfg.model; $('custom').value = cfg.custom;
  $('batch').value = cfg.batch; $('mask-ratio').value = cfg.maskRatio; $('lr').value = cfg.lr; $('steps').value = cfg.steps;
  $('warmup').value = cfg.warmup; $('seed').value = cfg.seed; $('data').value = cfg.data;
  $('ckpt').checked = !!cfg.checkpointing; $('policy').value = cfg.policy;
  if (cfg.init) $('init').value = cfg.init;
  if (cfg.pool) $('pool').value = cfg.pool;
  syncFormVisibility();
}
const budgetBytes = () => Number($('budget').value) * MiB;
const classifyMode = () => $('kind').value === 'classify';
function syncFormVisibility() {
  const cls = classifyMode();
  $('custom-wrap').hidden = $('model').value !== 'custom';
  $('mask-wrap').style.visibility = $('kind').value === 'mae' ? '' : 'hidden';
  $('mae-data').hidden = cls;
  $('classify-data').hidden = !cls;
  $('init-file-wrap').hidden = $('init').value !== 'file';
  $('classify-panel').hidden = !cls;
  $('recon-panel').hidden = cls;
  $('download-encoder').hidden = cls;
  $('download-full').hidden = cls;
  $('download-classifier').hidden = !cls;
}
function lockForm(locked) {
  for (const id of CONFIG_IDS) $(id).disabled = locked;
  $('lock-note').hidden = !locked;
  renderClasses();
}
function syncButtons() {
  const has = !!S.run;
  $('start').disabled = !S.ready || S.running;
  $('start').textContent = has && S.step > 0 ? 'Continue' : 'Start';
  $('pause').disabled = !S.running;
  $('measure').disabled = !has;
  $('download-encoder').disabled = !has;
  $('download-full').disabled = !has;
  $('download-classifier').disabled = !has;
  lockForm(has);
}

// ---- memory panel ----------------------------------------------------------------------------

function showRefusal(text, fits = false) {
  const el = $('refusal');
  el.hidden = !text;
  el.textContent = text || '';
  el.classList.toggle('fits', fits);
}

function bar(label, segs, scale, limit) {
  const b = document.createElement('div');
  b.className = 'bar';
  let x = 0;
  for (const [w, color, title] of segs) {
    const s = document.createElement('div');
    s.className = 'seg';
    s.style.left = `${(100 * x) / scale}%`;
    s.style.width = `${Math.max(0, (100 * Math.min(w, scale - x)) / scale)}%`;
    s.style.background = color;
    s.title = title;
    b.appendChild(s);
    x += w;
  }
  const l = document.createElement('div');
  l.className = 'label';
  l.textContent = label;
  b.appendChild(l);
  if (limit != null) {
    const lim = document.createElement('div');
    lim.className = 'limit';
    lim.style.left = `${Math.min(100, (100 * limit) / scale)}%`;
    lim.title = 'budget';
    b.appendChild(lim);
  }
  return b;
}

function renderMemory() {
  const r = S.plan, budget = budgetBytes(), bars = $('mem-bars');
  bars.textContent = '';
  if (!r || !r.plan) { $('mem-summary').textContent = r ? r.message : ''; $('policy-table').textContent = ''; return; }
  const p = r.plan, extra = r.need - p.total;
  const finite = (v) => (Number.isFinite(v) ? v : 4 * 1024 * MiB);
  const lin = S.mem ? S.mem.linear : 0;
  const scale = Math.max(budget, finite(r.need), lin) * 1.04;
  $('mem-summary').innerHTML = '';
  const sum = document.createElement('div');
  sum.textContent = `One training step under '${POLICY_LABEL(r.policy)}' needs ${fmtBytes(r.need)} of the ${fmtBytes(budget)} budget` +
    ` (${r.fits ? 'fits' : 'does not fit'}).`;
  sum.style.color = r.fits ? 'var(--ok)' : 'var(--bad)';
  $('mem-summary').appendChild(sum);
  bars.appendChild(bar(`plan: params ${fmtBytes(p.params)} · grads ${fmtBytes(p.grads)} · AdamW ${fmtBytes(p.optimizer)} · activations ${fmtBytes(p.activations)}`, [
    [p.params, 'var(--params)', 'parameters'], [p.grads, 'var(--grads)', 'gradients'], [p.optimizer, 'var(--opt)', 'AdamW m, v'],
    [finite(p.activations), 'var(--act)', 'activations'], [extra, '#b8c0ca', 'wasm module + batch'],
  ], scale, budget));
  if (S.mem) {
    const a = S.mem.arena ? S.mem.arena.capacity : 0;
    bars.appendChild(bar(`this tab's trainer: wasm memory ${fmtBytes(lin)}${a ? ` (activation arena ${fmtBytes(a)})` : ''}`, [[lin, '#8fb3e8', 'wasm linear memory']], scale, budget));
  }
  const leg = document.createElement('div');
  leg.className = 'legend';
  leg.innerHTML = '<span><i style="background:var(--params)"></i>parameters</span><span><i style="background:var(--grads)"></i>gradients</span>' +
    '<span><i style="background:var(--opt)"></i>AdamW m, v</span><span><i style="background:var(--act)"></i>activations</span>' +
    '<span><i style="background:#b8c0ca"></i>wasm module, batch</span><span><i style="background:var(--bad)"></i>budget</span>' +
    '<span>(wasm memory grows, never shrinks)</span>';
  bars.appendChild(leg);
  const t = $('policy-table');
  t.innerHTML = '<tr><th>policy</th><th>activations</th><th>step total</th><th>fits the budget</th></tr>';
  for (const row of r.rows) {
    const tr = document.createElement('tr');
    if (row.policy === r.policy) tr.className = 'current';
    const cells = row.error ? [POLICY_LABEL(row.policy), row.error, '', ''] :
      [POLICY_LABEL(row.policy), fmtBytes(row.activations), fmtBytes(row.need), row.fits ? 'yes' : 'no'];
    cells.forEach((c, i) => {
      const td = document.createElement('td');
      td.textContent = c;
      if (i === 3) td.className = row.fits ? 'yes' : 'no';
      tr.appendChild(td);
    });
    t.appendChild(tr);
  }
}

let planSeq = 0;
/** Plans the form's configuration (or the run's, with the current checkpointing and budget). */
async function refreshPlan() {
  if (!S.ready) return null;
  const seq = ++planSeq;
  const cfg = S.run ? { ...S.run.cfg, checkpointing: $('ckpt').checked, policy: $('policy').value, resolved: undefined } : readForm();
  try {
    const res = await planner.call('plan', { cfg, budget: budgetBytes() });
    if (seq !== planSeq) return res;
    S.plan = res.report;
    renderMemory();
    if (res.linear > 768 * MiB) { planner.terminate(); await startPlanner(); } // its memory never shrinks
    return res;
  } catch (e) {
    if (seq === planSeq) { S.plan = null; $('mem-summary').textContent = e.message; $('mem-bars').textContent = ''; $('policy-table').textContent = ''; }
    return { error: e.message };
  }
}
let planTimer = 0;
// a form change: the last refusal is stale; plan again shortly (typing)
const planSoon = () => { if (!S.run) showRefusal(null); clearTimeout(planTimer); planTimer = setTimeout(refreshPlan, 200); };

// ---- charts ----------------------------------------------------------------------------------

function setupCanvas(c) {
  const ctx = c.getContext('2d');
  ctx.clearRect(0, 0, c.width, c.height);
  ctx.font = '12px system-ui, sans-serif';
  return ctx;
}

function drawLoss() {
  const c = $('loss-chart'), ctx = setupCanvas(c), W = c.width, H = c.height;
  const L = S.losses, pad = { l: 48, r: 10, t: 12, b: 26 };
  ctx.fillStyle = '#66707c';
  if (!L.length) { ctx.fillText('the loss of every step appears here', pad.l, H / 2); return; }
  const maxStep = Math.max(S.run ? S.run.cfg.steps : 0, L[L.length - 1].step, 10);
  const xs = (s) => pad.l + ((W - pad.l - pad.r) * s) / maxStep;
  let lo = Infinity, hi = -Infinity;
  for (const r of L) if (Number.isFinite(r.loss)) { lo = Math.min(lo, r.loss); hi = Math.max(hi, r.loss); }
  if (hi - lo < 1e-6) { hi += 0.5; lo -= 0.5; }
  const ys = (v) => pad.t + ((H - pad.t - pad.b) * (hi - v)) / (hi - lo);
  ctx.strokeStyle = '#dde1e6';
  ctx.beginPath();
  for (let i = 0; i <= 4; i++) { const v = lo + ((hi - lo) * i) / 4; ctx.moveTo(pad.l, ys(v)); ctx.lineTo(W - pad.r, ys(v)); ctx.fillText(v.toPrecision(3), 4, ys(v) + 4); }
  ctx.stroke();
  ctx.fillText('0', pad.l, H - 8);
  ctx.fillText(`step ${maxStep}`, xs(maxStep) - 56, H - 8);
  ctx.lineWidth = 1.5;
  for (let i = 1; i < L.length; i++) {
    ctx.strokeStyle = L[i].policy === 'none' ? '#2f6fde' : '#d9731c';
    ctx.beginPath();
    ctx.moveTo(xs(L[i - 1].step), ys(L[i - 1].loss));
    ctx.lineTo(xs(L[i].step), ys(L[i].loss));
    ctx.stroke();
  }
  if (L.length === 1) { ctx.fillStyle = '#2f6fde'; ctx.fillRect(xs(L[0].step) - 2, ys(L[0].loss) - 2, 4, 4); }
  ctx.lineWidth = 1;
  ctx.fillStyle = '#2f6fde'; ctx.fillRect(W - 230, 8, 10, 3); ctx.fillStyle = '#66707c'; ctx.fillText('no checkpointing', W - 216, 13);
  ctx.fillStyle = '#d9731c'; ctx.fillRect(W - 110, 8, 10, 3); ctx.fillStyle = '#66707c'; ctx.fillText('checkpointing', W - 96, 13);
}

function drawRecon(v) {
  const c = $('recon'), ctx = setupCanvas(c), W = c.width;
  const labels = v.kind === 'mae' ? ['original', 'masked (75%)', 'reconstructed'] : ['original', 'input', 'predicted'];
  if (v.kind === 'mae' && S.run) labels[1] = `masked (${Math.round(100 * S.run.cfg.maskRatio)}%)`;
  const left = 96, gap = 4, n = Math.max(1, v.n);
  const cell = Math.min(80, Math.floor((W - left - gap * n) / n));
  c.height = 3 * (cell + gap) + 8;
  const ctx2 = setupCanvas(c);
  ctx2.imageSmoothingEnabled = false;
  const tile = document.createElement('canvas');
  tile.width = tile.height = v.size;
  const tctx = tile.getContext('2d');
  v.rows.forEach((row, r) => {
    ctx2.fillStyle = '#66707c';
    ctx2.fillText(labels[r], 4, r * (cell + gap) + cell / 2 + 4);
    row.forEach((rgba, b) => {
      tctx.putImageData(new ImageData(new Uint8ClampedArray(rgba), v.size, v.size), 0, 0);
      ctx2.drawImage(tile, left + b * (cell + gap), r * (cell + gap) + 4, cell, cell);
    });
  });
  $('recon-note').textContent = `step ${v.step}, the first ${v.n} images of the batch`;
  void ctx;
}

function drawTimelines() {
  const t = S.timeline;
  const pairs = [['tl-none', 'tl-none-cap'], ['tl-policy', 'tl-policy-cap']];
  if (!t) {
    pairs.forEach(([cid, cap], i) => {
      const ctx = setupCanvas($(cid));
      ctx.fillStyle = '#66707c';
      ctx.fillText(i ? 'with checkpointing: measured when a run is set up or the policy changes' : 'without checkpointing: measured when a run is set up', 20, 100);
      $(cap).textContent = '';
    });
    return;
  }
  let ymax = 1;
  for (const r of t.results) ymax = Math.max(ymax, r.skipped ? (Number.isFinite(r.planned) ? r.planned : 0) : Math.max(r.peak, r.planned));
  ymax *= 1.08;
  pairs.forEach(([cid, capId], i) => {
    const c = $(cid), ctx = setupCanvas(c), W = c.width, H = c.height, pad = { l: 58, r: 8, t: 10, b: 18 };
    const r = t.results[i];
    const ys = (v) => pad.t + (H - pad.t - pad.b) * (1 - v / ymax);
    ctx.strokeStyle = '#dde1e6';
    ctx.fillStyle = '#66707c';
    ctx.beginPath();
    for (let k = 0; k <= 4; k++) { const v = (ymax * k) / 4; ctx.moveTo(pad.l, ys(v)); ctx.lineTo(W - pad.r, ys(v)); ctx.fillText(fmtBytes(v).replace(' MiB', 'M').replace(' GiB', 'G'), 2, ys(v) + 4); }
    ctx.stroke();
    if (!r) {
      ctx.fillText('turn on checkpointing (or pick a policy) to compare', pad.l + 10, H / 2);
      $(capId).textContent = '';
      return;
    }
    if (r.skipped) {
      ctx.setLineDash([6, 4]);
      ctx.strokeStyle = '#c0392b';
      if (Number.isFinite(r.planned)) { ctx.beginPath(); ctx.moveTo(pad.l, ys(r.planned)); ctx.lineTo(W - pad.r, ys(r.planned)); ctx.stroke(); }
      ctx.setLineDash([]);
      ctx.fillStyle = '#c0392b';
      ctx.fillText(`'${POLICY_LABEL(r.policy)}' not run: the step would need ${fmtBytes(r.need)},`, pad.l + 10, H / 2 - 8);
      ctx.fillText(`over the budget. Dashed: its planned peak, ${fmtBytes(r.planned)} (plan only).`, pad.l + 10, H / 2 + 8);
      $(capId).textContent = `${POLICY_LABEL(r.policy)}: plan only (would not fit the budget): activations ${fmtBytes(r.planned)}`;
      return;
    }
    // filled: what the step needs at each moment (live: rises through the forward, falls through
    // the backward, with the re-computation bumps); thin line: the arena in use (its peak = plan)
    const n = r.bytes.length, xs = (k) => pad.l + ((W - pad.l - pad.r) * k) / Math.max(1, n - 1);
    const color = r.policy === 'none' ? '#2f6fde' : '#d9731c';
    const live = r.live || r.bytes;
    ctx.beginPath();
    ctx.moveTo(xs(0), ys(0));
    live.forEach((b, k) => ctx.lineTo(xs(k), ys(b)));
    ctx.lineTo(xs(n - 1), ys(0));
    ctx.closePath();
    ctx.fillStyle = color + '40';
    ctx.fill();
    ctx.beginPath();
    live.forEach((b, k) => (k ? ctx.lineTo(xs(k), ys(b)) : ctx.moveTo(xs(k), ys(b))));
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.stroke();
    ctx.lineWidth = 1;
    ctx.beginPath();
    r.bytes.forEach((b, k) => (k ? ctx.lineTo(xs(k), ys(b)) : ctx.moveTo(xs(k), ys(b))));
    ctx.strokeStyle = color + '99';
    ctx.setLineDash([2, 2]);
    ctx.stroke();
    ctx.setLineDash([]);
    if (r.backwardStart >= 0) {
      ctx.setLineDash([4, 3]);
      ctx.strokeStyle = '#1d232b';
      ctx.beginPath(); ctx.moveTo(xs(r.backwardStart), pad.t); ctx.lineTo(xs(r.backwardStart), H - pad.b); ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = '#1d232b';
      ctx.fillText('forward', pad.l + 4, H - 4);
      ctx.fillText('backward →', xs(r.backwardStart) + 4, H - 4);
    }
    ctx.fillStyle = color;
    ctx.fillText(`'${POLICY_LABEL(r.policy)}'  peak ${fmtBytes(r.peak)}`, pad.l + 6, pad.t + 12);
    $(capId).textContent = `${POLICY_LABEL(r.policy)}: peak ${fmtBytes(r.peak)} (planned ${fmtBytes(r.planned)}), ` +
      `${r.what || 'forward + backward'} ${r.ms.toFixed(0)} ms, ${n} arena events, batch ${t.batch}`;
  });
}

async function measure() {
  if (!S.run) return;
  try {
    S.timeline = await trainer.call('measure', { policy: $('policy').value, budget: budgetBytes() });
    drawTimelines();
  } catch (e) { setStatus(`timeline: ${e.message}`, true); }
}

// ---- worker events -----------------------------------------------------------------------------

function onTrainerEvent(m) {
  if (m.type === 'step') {
    S.losses.push({ step: m.step, loss: m.loss, hex: m.hex, policy: m.policy, ms: m.ms });
    S.step = m.step;
    S.policy = m.policy;
    S.lastSpeed = { ms: m.ms, ips: m.ips };
    if (m.mem) { S.mem = m.mem; renderMemory(); }
    $('stat-step').textContent = `${m.step} / ${S.run ? S.run.cfg.steps : '?'}`;
    $('stat-loss').textContent = m.loss.toFixed(4);
    $('stat-ms').textContent = `${m.ms.toFixed(1)} ms`;
    $('stat-ips').textContent = m.ips.toFixed(0);
    $('stat-policy').textContent = POLICY_LABEL(m.policy);
    scheduleDraw();
  } else if (m.type === 'viz') {
    drawRecon(m);
  } else if (m.type === 'eval') {
    S.evals.push({ step: m.step, top1: m.top1, n: m.n, confusion: m.confusion });
    renderEvals();
  } else if (m.type === 'stopped') {
    S.running = false;
    S.stopped = m.reason;
    setStatus(m.reason === 'done' ? `done: ${m.step} steps` : `stopped at step ${m.step}`);
    syncButtons();
  } else if (m.type === 'saved') {
    S.saved = m;
    $('storage-status').textContent = m.ok ? `Training state (${fmtBytes(m.bytes)}) kept in this browser at step ${m.step}: reload and it resumes.` : m.message;
  } else if (m.type === 'error') {
    S.running = false;
    setStatus(`training stopped: ${m.message}`, true);
    syncButtons();
  }
}
let drawPending = false;
function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; drawLoss(); });
}

// ---- own images ----------------------------------------------------------------------------------

async function addFiles(files) {
  const bad = [];
  let added = 0;
  for (const f of files) {
    if (S.userImages.length >= 1024) break;
    try { S.userImages.push(await createImageBitmap(f)); added++; } catch { bad.push(f.name); }
  }
  $('user-count').textContent = `${S.userImages.length} image${S.userImages.length === 1 ? '' : 's'} of yours` +
    (bad.length ? ` (not images: ${bad.join(', ')})` : '');
  const th = $('thumbs');
  th.textContent = '';
  for (const bm of S.userImages.slice(0, 24)) {
    const c = document.createElement('canvas');
    c.width = c.height = 28;
    c.getContext('2d').drawImage(bm, 0, 0, 28, 28);
    th.appendChild(c);
  }
  if (added && !S.run) { $('data').value = 'user'; planSoon(); }
}

/** Images at the model's size, as every image the page gives the engine (training images, the
 * classes' images, an image to predict): centre square crop, resized by the canvas; planar RGB
 * bytes [n, 3, S, S] (the worker turns them grey for a 1-channel model). */
function planarRGB(bitmaps, size) {
  const n = bitmaps.length, px = size * size, pixels = new Uint8Array(n * 3 * px);
  const c = document.createElement('canvas');
  c.width = c.height = size;
  const ctx = c.getContext('2d', { willReadFrequently: true });
  bitmaps.forEach((bm, i) => {
    const s = Math.min(bm.width, bm.height);
    ctx.clearRect(0, 0, size, size);
    ctx.imageSmoothingQuality = 'high';
    ctx.drawImage(bm, (bm.width - s) / 2, (bm.height - s) / 2, s, s, 0, 0, size, size);
    const d = ctx.getImageData(0, 0, size, size).data;
    for (let k = 0; k < px; k++) for (let ch = 0; ch < 3; ch++) pixels[i * 3 * px + ch * px + k] = d[4 * k + ch];
  });
  return pixels;
}
function userData(size) {
  return { name: 'your images', n: S.userImages.length, chans: 3, size, pixels: planarRGB(S.userImages, size) };
}

// ---- classify: the classes -----------------------------------------------------------------------

const MAX_CLASS_IMAGES = 4096; // over all classes
const classImageCount = () => S.classes.reduce((a, c) => a + c.images.length, 0);
function classMessage(text) {
  const el = $('class-msg');
  el.hidden = !text;
  el.textContent = text || '';
}

/** ImageBitmaps of the files the browser can decode; the others by name. */
async function decodeAll(files) {
  const ok = [], bad = [];
  for (const f of files) {
    try { ok.push(await createImageBitmap(f)); } catch { bad.push(f.name || 'a file'); }
  }
  return { ok, bad };
}

function addClass(name) {
  if (S.run) { classMessage('The classes are fixed while a run exists: Reset to change them.'); return null; }
  name = (name || '').trim() || `class ${S.classes.length + 1}`;
  if (S.classes.some((c) => c.name === name)) { classMessage(`There is already a class named '${name}'.`); return null; }
  const c = { name, images: [], bad: [] };
  S.classes.push(c);
  classMessage(null);
  renderClasses();
  planSoon();
  return c;
}

async function addToClass(c, files) {
  if (S.run) { classMessage('The classes are fixed while a run exists: Reset to change them.'); return; }
  if (!files.length) return;
  const { ok, bad } = await decodeAll(files);
  const room = Math.max(0, MAX_CLASS_IMAGES - classImageCount());
  c.images.push(...ok.slice(0, room));
  c.bad = bad;
  const parts = [];
  if (bad.length) parts.push(`not images this browser can decode, left out of '${c.name}': ${bad.join(', ')}`);
  if (ok.length > room) parts.push(`at most ${MAX_CLASS_IMAGES} images in all: ${ok.length - room} left out`);
  classMessage(parts.length ? parts.join('; ') : null);
  renderClasses();
}

function removeClass(i) {
  if (S.run) return;
  S.classes.splice(i, 1);
  classMessage(null);
  renderClasses();
  planSoon();
}

/** The ten classes of the built-in Fashion-MNIST sample (merged by name with the user's). */
async function fmnistClasses() {
  if (S.run) { classMessage('The classes are fixed while a run exists: Reset to change them.'); return; }
  $('fmnist-classes').disabled = true;
  setStatus('reading the Fashion-MNIST sample…');
  try {
    const d = await fetchFmnistSample(), px = d.size * d.size;
    const byName = new Map(S.classes.map((c) => [c.name, c]));
    const target = d.classes.map((name) => byName.get(name) || { name, images: [], bad: [] });
    const room = Math.max(0, MAX_CLASS_IMAGES - classImageCount());
    const n = Math.min(d.n, room), rgba = new Uint8ClampedArray(4 * px);
    for (let i = 0; i < n; i++) {
      for (let k = 0; k < px; k++) { const v = d.pixels[i * px + k]; rgba[4 * k] = rgba[4 * k + 1] = rgba[4 * k + 2] = v; rgba[4 * k + 3] = 255; }
      target[d.labels[i]].images.push(await createImageBitmap(new ImageData(rgba, d.size, d.size)));
    }
    for (const c of target) if (!byName.has(c.name)) S.classes.push(c);
    classMessage(null);
    setStatus(`${n} Fashion-MNIST images in ${d.classes.length} classes`);
  } catch (e) { classMessage(e.message); setStatus(e.message, true, false); }
  renderClasses();
  syncButtons();
  planSoon();
}

/** Which images are held out: every 5th over the classes in order (web/classify.js splitEval). */
function heldOutCounts() {
  let i = 0;
  return S.classes.map((c) => { let h = 0; for (let j = 0; j < c.images.length; j++, i++) if (i % 5 === 4) h++; return h; });
}

function thumb(bm, size = 24) {
  const c = document.createElement('canvas');
  c.width = c.height = size;
  const s = Math.min(bm.width, bm.height);
  c.getContext('2d').drawImage(bm, (bm.width - s) / 2, (bm.height - s) / 2, s, s, 0, 0, size, size);
  return c;
}

function renderClasses() {
  const list = $('class-list'), locked = !!S.run, held = heldOutCounts();
  list.textContent = '';
  S.classes.forEach((c, i) => {
    const card = document.createElement('div');
    card.className = 'class-card';
    card.dataset.class = String(i);
    const name = document.createElement('div');
    name.className = 'name';
    name.title = c.name;
    name.textContent = c.name + ' ';
    const count = document.createElement('span');
    count.className = 'count';
    count.textContent = `${c.images.length} image${c.images.length === 1 ? '' : 's'}${held[i] ? `, ${held[i]} held out` : ''}`;
    name.appendChild(count);
    const th = document.createElement('div');
    th.className = 'thumbs';
    for (const bm of c.images.slice(0, 20)) th.appendChild(thumb(bm));
    if (!c.images.length) th.textContent = 'no images yet: drop image files here';
    const tools = document.createElement('div');
    tools.className = 'tools';
    const add = document.createElement('label');
    add.className = 'filebtn';
    add.textContent = 'add images';
    const input = document.createElement('input');
    input.type = 'file';
    input.accept = 'image/*';
    input.multiple = true;
    input.disabled = locked;
    input.addEventListener('change', () => { addToClass(c, [...input.files]); input.value = ''; });
    add.appendChild(input);
    const rm = document.createElement('button');
    rm.textContent = 'remove';
    rm.disabled = locked;
    rm.addEventListener('click', () => removeClass(i));
    tools.append(add, rm);
    card.append(name, th, tools);
    if (c.bad.length) {
      const bad = document.createElement('div');
      bad.className = 'bad';
      bad.textContent = `not images: ${c.bad.join(', ')}`;
      card.appendChild(bad);
    }
    card.addEventListener('dragover', (e) => { e.preventDefault(); e.stopPropagation(); card.classList.add('over'); });
    card.addEventListener('dragleave', () => card.classList.remove('over'));
    card.addEventListener('drop', (e) => {
      e.preventDefault();
      e.stopPropagation();
      card.classList.remove('over');
      addToClass(c, [...e.dataTransfer.files]);
    });
    list.appendChild(card);
  });
  const n = classImageCount(), h = held.reduce((a, b) => a + b, 0);
  $('class-summary').textContent = S.classes.length ? `${S.classes.length} classes, ${n} images (${n - h} train, ${h} held out)` : 'no classes yet';
}

/** What stops a classify run from starting, in words (null: nothing). */
function classProblem(cfg) {
  if (S.classes.length < 2) return `Classify needs at least two classes (there ${S.classes.length === 1 ? 'is 1' : `are ${S.classes.length}`}): add classes and their images, or use the Fashion-MNIST sample.`;
  const empty = S.classes.find((c) => !c.images.length);
  if (empty) return `Class '${empty.name}' has no images: add some (its "add images" button, or drop files onto it), or remove it.`;
  if (classImageCount() - heldOutCounts().reduce((a, b) => a + b, 0) < 1) return 'No training images: add more images.';
  if (cfg.init === 'tab' && !S.tabEncoder) return 'No MAE / AIM encoder has been trained in this tab yet: train one first (then Reset and switch to classify), or start from random init.';
  if (cfg.init === 'file' && !S.initFile) return 'Choose the safetensors file to start from (or start from random init).';
  return null;
}

/** The classes' images at the model's size: planar RGB, labels, names. */
function classData(size) {
  const bitmaps = [], labels = [];
  S.classes.forEach((c, k) => c.images.forEach((bm) => { bitmaps.push(bm); labels.push(k); }));
  return { name: 'your classes', n: bitmaps.length, chans: 3, size, pixels: planarRGB(bitmaps, size), labels: Int32Array.from(labels),
    classes: S.classes.map((c) => c.name) };
}

/** A resumed classify run gives its classes' images back (at the model's size): the editor shows them. */
async function classesFrom(ud) {
  const px = ud.size * ud.size, rgba = new Uint8ClampedArray(4 * px);
  const classes = ud.classes.map((name) => ({ name, images: [], bad: [] }));
  for (let i = 0; i < ud.n; i++) {
    for (let k = 0; k < px; k++) {
      for (let ch = 0; ch < 3; ch++) rgba[4 * k + ch] = ud.pixels[i * 3 * px + ch * px + k];
      rgba[4 * k + 3] = 255;
    }
    classes[ud.labels[i]].images.push(await createImageBitmap(new ImageData(rgba, ud.size, ud.size)));
  }
  S.classes = classes;
  renderClasses();
}

function syncTabEncoder(info) {
  S.tabEncoder = info || null;
  const opt = $('init').querySelector('option[value=tab]');
  opt.disabled = !info;
  opt.textContent = info ? `the ${info.kind.toUpperCase()} encoder trained in this tab (model ${info.model}, step ${info.step})`
    : 'the MAE / AIM encoder trained in this tab (none yet)';
  if (!info && $('init').value === 'tab') $('init').value = 'random';
}

// ---- classify: accuracy and prediction -------------------------------------------------------------

function renderEvals() {
  const last = S.evals[S.evals.length - 1], names = S.run && S.run.cfg.classes ? S.run.cfg.classes : [];
  $('stat-acc').textContent = last ? `${(100 * last.top1).toFixed(1)}% (${Math.round(last.top1 * last.n)}/${last.n}) at step ${last.step}` : '–';
  $('acc-history').textContent = S.evals.length > 1 ? `held-out accuracy by step: ${S.evals.map((e) => `${e.step}: ${(100 * e.top1).toFixed(0)}%`).join(' · ')}` : '';
  const t = $('confusion');
  t.textContent = '';
  if (!last) return;
  const head = document.createElement('tr');
  head.innerHTML = '<th>true ↓ predicted →</th>';
  for (const n of names) { const th = document.createElement('th'); th.textContent = n; th.title = n; head.appendChild(th); }
  t.appendChild(head);
  last.confusion.forEach((row, i) => {
    const tr = document.createElement('tr');
    const th = document.createElement('th');
    th.textContent = names[i] || String(i);
    tr.appendChild(th);
    row.forEach((v, j) => { const td = document.createElement('td'); td.textContent = v; if (i === j) td.className = 'diag'; tr.appendChild(td); });
    t.appendChild(tr);
  });
}

function renderPrediction() {
  const ol = $('prediction'), p = S.prediction;
  ol.textContent = '';
  if (!p) return;
  if (p.error) { const li = document.createElement('li'); li.className = 'bad'; li.textContent = p.error; ol.appendChild(li); return; }
  for (const t of p.top) {
    const li = document.createElement('li');
    const b = document.createElement('b');
    b.textContent = t.name;
    const bar = document.createElement('span');
    bar.className = 'pbar';
    bar.style.width = `${Math.round(120 * t.p)}px`;
    li.append(b, ` ${(100 * t.p).toFixed(1)}%`, bar);
    ol.appendChild(li);
  }
}

async function onPredict(file) {
  if (!file) return;
  const ctx = $('predict-img').getContext('2d');
  ctx.clearRect(0, 0, 56, 56);
  if (!S.run || !S.run.cfg || S.run.cfg.kind !== 'classify') {
    S.prediction = { file: file.name, error: 'No classifier yet: in classify mode, add classes and press Start; then drop an image here.' };
    renderPrediction();
    return;
  }
  let bm;
  try { bm = await createImageBitmap(file); } catch {
    S.prediction = { file: file.name, error: `${file.name}: not an image this browser can decode` };
    renderPrediction();
    return;
  }
  ctx.drawImage(thumb(bm, 56), 0, 0);
  try {
    const size = S.run.dims.img, pixels = planarRGB([bm], size);
    const r = await trainer.call('predict', { pixels, size }, [pixels.buffer]);
    S.prediction = { file: file.name, step: r.step, top: r.top };
    setStatus(`${file.name}: ${r.top[0].name} (${(100 * r.top[0].p).toFixed(1)}%), the classifier at step ${r.step}`);
  } catch (e) { S.prediction = { file: file.name, error: e.message }; }
  renderPrediction();
}

// ---- actions -----------------------------------------------------------------------------------

function afterSetup(r) {
  S.run = { cfg: r.cfg, dims: r.dims, params: r.params, data: r.data };
  S.evals = (r.evals || []).map((e) => ({ step: e.step, top1: e.top1, n: e.n, confusion: e.confusion }));
  S.split = r.split || null;
  if ('tabEncoder' in r) syncTabEncoder(r.tabEncoder);
  if (r.cfg.kind === 'classify') {
    $('stat-heldout').textContent = r.split ? `${r.split.heldOut} of ${r.split.train + r.split.heldOut} images` : '–';
    $('stat-init').textContent = r.cfg.initFrom || 'random init';
    renderEvals();
  }
  S.step = r.step;
  S.losses = r.losses.map((l) => ({ step: l.step, loss: l.loss, hex: l.hex, policy: l.policy, ms: l.ms }));
  S.policy = r.policy;
  S.mem = r.mem;
  S.stopped = null;
  $('stat-step').textContent = `${r.step} / ${r.cfg.steps}`;
  $('stat-policy').textContent = POLICY_LABEL(r.policy);
  if (S.losses.length) $('stat-loss').textContent = S.losses[S.losses.length - 1].loss.toFixed(4);
  syncButtons();
  drawLoss();
}

async function ensureRun() {
  if (S.run) return true;
  const cfg = readForm();
  const cls = cfg.kind === 'classify';
  if (cls) {
    const problem = classProblem(cfg);
    classMessage(problem);
    if (problem) { setStatus(problem, true, false); return false; }
  } else if (cfg.data === 'user' && !S.userImages.length) { showRefusal('No images of yours yet: drop some image files, or train on the Fashion-MNIST sample.'); return false; }
  setStatus('planning…');
  const p = await refreshPlan();
  if (!p || p.error) { showRefusal(`Cannot set up this model: ${p ? p.error : 'the engine is not ready'}`); setStatus(''); return false; }
  if (!p.report.fits) {
    S.refusal = p.report.message;
    showRefusal(`Refused before running. ${p.report.message}`);
    setStatus('refused: does not fit the budget', true, false);
    return false;
  }
  S.refusal = null;
  showRefusal(null);
  cfg.resolved = p.report.policy;
  setStatus('setting up the model…');
  const ud = cls ? classData(p.dims.img) : cfg.data === 'user' ? userData(p.dims.img) : null;
  const init = cls && cfg.init === 'file' ? { name: S.initFile.name, bytes: S.initFile.bytes.slice() } : null;
  const r = await trainer.call('setup', { cfg, userData: ud, init }, [...(ud ? [ud.pixels.buffer] : []), ...(init ? [init.bytes.buffer] : [])]);
  afterSetup(r);
  setStatus(`${r.params.toLocaleString()} parameters, ${r.dims.img}x${r.dims.img}x${r.dims.chans}, data: ${r.data.name} (${r.data.n})` +
    (r.init ? `; started from ${r.init.what}: ${r.init.text}` : ''));
  await measure();
  return true;
}

async function onStart() {
  $('start').disabled = true;
  S.error = null;
  clearTimeout(planTimer);
  try {
    if (!(await ensureRun())) { syncButtons(); return; }
    await trainer.call('start');
    S.running = true;
    S.stopped = null;
    setStatus('training…');
  } catch (e) { setStatus(e.message, true); }
  syncButtons();
}

async function onPause() {
  try { await trainer.call('pause'); } catch (e) { setStatus(e.message, true); }
  S.running = false;
  setStatus(`paused at step ${S.step}`);
  syncButtons();
}

async function onReset() {
  // the MAE / AIM encoder of the run reset stays in the worker for a classifier to start from
  try { syncTabEncoder((await trainer.call('reset')).tabEncoder); } catch (e) { setStatus(e.message, true); }
  Object.assign(S, { run: null, running: false, step: 0, losses: [], stopped: null, timeline: null, resumed: false, mem: null, refusal: null, error: null,
    evals: [], split: null, prediction: null });
  $('stat-acc').textContent = '–'; $('stat-heldout').textContent = '–'; $('stat-init').textContent = '–';
  renderEvals(); renderPrediction(); classMessage(null);
  $('predict-img').getContext('2d').clearRect(0, 0, 56, 56);
  $('stat-step').textContent = '0'; $('stat-loss').textContent = '–'; $('stat-ms').textContent = '–'; $('stat-ips').textContent = '–'; $('stat-policy').textContent = '–';
  setupCanvas($('recon')); $('recon-note').textContent = '';
  $('storage-status').textContent = 'The training state is kept in this browser (IndexedDB): reload and it resumes.';
  showRefusal(null);
  drawLoss();
  drawTimelines();
  syncButtons();
  setStatus('reset');
  planSoon();
}

let prevCkpt = { checked: false, policy: 'block' };
async function onCheckpointing() {
  const want = $('ckpt').checked ? $('policy').value : 'none';
  if (!S.run) { prevCkpt = { checked: $('ckpt').checked, policy: $('policy').value }; planSoon(); return; }
  try {
    const r = await trainer.call('policy', { policy: want, budget: budgetBytes() });
    if (!r.ok) {
      $('ckpt').checked = prevCkpt.checked;
      $('policy').value = prevCkpt.policy;
      S.refusal = r.report.message;
      showRefusal(`Checkpointing not changed. ${r.report.message}`);
    } else {
      prevCkpt = { checked: $('ckpt').checked, policy: $('policy').value };
      S.policy = r.policy;
      showRefusal(null);
      setStatus(`checkpointing '${POLICY_LABEL(r.policy)}' from the next step (step ${S.step + 1})`);
    }
  } catch (e) { setStatus(e.message, true); }
  await refreshPlan();
  await measure();
}

function download(bytes, name) {
  const url = URL.createObjectURL(new Blob([bytes], { type: 'application/octet-stream' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
async function onDownload(full) {
  try {
    const r = await trainer.call('exportWeights', { full });
    const what = r.kind === 'classifier' ? 'classifier' : full ? 'full' : 'encoder-timm';
    download(r.bytes, `vitrine-${r.kind === 'classifier' ? '' : r.kind + '-'}${what}-step${r.step}.safetensors`);
    setStatus(`downloaded ${r.kind === 'classifier' ? 'the classifier (timm keys, head, class names: vitrine predict --weights reads it)'
      : full ? 'the full model (lightly keys)' : 'the encoder (timm keys)'}: ${fmtBytes(r.bytes.length)}`);
  } catch (e) { setStatus(e.message, true); }
}
async function onLoadWeights(file) {
  try {
    if (!(await ensureRun())) return;
    const bytes = new Uint8Array(await file.arrayBuffer());
    const r = await trainer.call('importWeights', { bytes, name: file.name }, [bytes.buffer]);
    setStatus(`loaded ${file.name} as ${r.as}`);
    S.step = r.step;
    S.losses = [];
    S.evals = [];
    if (S.run.cfg.kind === 'classify') { S.run.cfg = { ...S.run.cfg, initFrom: file.name }; $('stat-init').textContent = file.name; renderEvals(); }
    drawLoss();
    $('stat-step').textContent = `${r.step} / ${S.run.cfg.steps}`;
    syncButtons();
  } catch (e) { setStatus(e.message, true); }
}

// ---- start-up ----------------------------------------------------------------------------------

async function boot() {
  trainer = new Rpc('trainer', onTrainerEvent);
  let info;
  try {
    [info] = await Promise.all([trainer.call('init'), startPlanner()]);
  } catch (e) { setStatus(`the engine did not load: ${e.message}`, true); return; }
  S.build = info.build;
  S.simdKernels = info.simdKernels;
  S.threads = info.threads;
  S.threadsNote = info.threadsNote;
  const badge = $('build');
  // the training worker's engine runs a pool of info.threads threads (web/pool.js); without
  // cross-origin isolation (COOP/COEP headers: demo/serve.mjs sends them) it runs on 1 and says why
  badge.textContent = `wasm: ${info.build}${info.build === 'relaxed' ? ' (SIMD128 + fused multiply-add kernels)' : info.simdKernels ? ' (SIMD128 kernels)' : ''}` +
    `, ${info.threads} thread${info.threads === 1 ? '' : 's'}` + (info.threadsNote ? ` (${info.threadsNote.replace(/^1 thread: /, '')})` : '');
  badge.title = info.threadsNote || `kernels split over ${info.threads} threads (every core this browser reports), the same bits as 1 thread`;
  badge.classList.toggle('simd', info.simdKernels);
  const sel = $('model');
  for (const [k, label] of Object.entries(info.models)) sel.add(new Option(label === k ? `${k}: 28 px (train.js preset)` : label, k));
  for (const p of info.presets) sel.add(new Option(`${p} (224 px RGB: heavy for a tab)`, p));
  sel.add(new Option('custom config…', 'custom'));
  sel.value = 'fmnist';
  syncFormVisibility();

  for (const id of CONFIG_IDS) $(id).addEventListener('change', () => { syncFormVisibility(); planSoon(); });
  for (const id of ['batch', 'lr', 'mask-ratio', 'custom']) $(id).addEventListener('input', planSoon);
  $('budget').addEventListener('change', async () => { if (!S.run) showRefusal(null); await refreshPlan(); });
  $('ckpt').addEventListener('change', onCheckpointing);
  $('policy').addEventListener('change', () => { if ($('ckpt').checked || !S.run) onCheckpointing(); else measure(); });
  $('start').addEventListener('click', onStart);
  $('pause').addEventListener('click', onPause);
  $('reset').addEventListener('click', onReset);
  $('measure').addEventListener('click', measure);
  $('download-encoder').addEventListener('click', () => onDownload(false));
  $('download-full').addEventListener('click', () => onDownload(true));
  $('download-classifier').addEventListener('click', () => onDownload(true));
  // classify mode: the class editor, where to start from, prediction
  $('add-class').addEventListener('click', () => { if (addClass($('class-name').value)) $('class-name').value = ''; });
  $('class-name').addEventListener('keydown', (e) => { if (e.key === 'Enter') $('add-class').click(); });
  $('fmnist-classes').addEventListener('click', fmnistClasses);
  $('clear-classes').addEventListener('click', () => { if (S.run) return; S.classes = []; classMessage(null); renderClasses(); planSoon(); });
  $('init').addEventListener('change', () => {
    const t = S.tabEncoder;
    if ($('init').value === 'tab' && t) { $('model').value = t.model; if (t.model === 'custom') $('custom').value = t.custom; syncFormVisibility(); planSoon(); }
  });
  $('init-file').addEventListener('change', async (e) => {
    const f = e.target.files[0];
    S.initFile = f ? { name: f.name, bytes: new Uint8Array(await f.arrayBuffer()) } : null;
  });
  const cdata = $('classify-data');
  cdata.addEventListener('dragover', (e) => e.preventDefault());
  cdata.addEventListener('drop', (e) => { e.preventDefault(); classMessage(S.run ? 'The classes are fixed while a run exists: Reset to change them.' : 'Drop images onto a class (add a class first).'); });
  $('predict-file').addEventListener('change', (e) => { onPredict(e.target.files[0]); e.target.value = ''; });
  const pdrop = $('predict-drop');
  pdrop.addEventListener('dragover', (e) => { e.preventDefault(); pdrop.classList.add('over'); });
  pdrop.addEventListener('dragleave', () => pdrop.classList.remove('over'));
  pdrop.addEventListener('drop', (e) => { e.preventDefault(); pdrop.classList.remove('over'); onPredict(e.dataTransfer.files[0]); });
  $('files').addEventListener('change', (e) => addFiles([...e.target.files]));
  $('load-weights').addEventListener('change', (e) => { if (e.target.files[0]) onLoadWeights(e.target.files[0]); e.target.value = ''; });
  const drop = $('drop');
  drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => { e.preventDefault(); drop.classList.remove('over'); if (!S.run) addFiles([...e.dataTransfer.files]); });

  S.ready = true;
  renderClasses();
  drawLoss();
  drawTimelines();
  // a run kept in IndexedDB resumes
  try {
    const saved = await trainer.call('saved');
    if (saved) {
      writeForm(saved.cfg);
      prevCkpt = { checked: !!saved.cfg.checkpointing, policy: saved.cfg.policy };
      setStatus(`resuming the run kept in this browser (step ${saved.step})…`);
      const r = await trainer.call('setup', { resume: true });
      afterSetup(r);
      if (r.userData && r.userData.classes) await classesFrom(r.userData);
      S.resumed = true;
      setStatus(`resumed at step ${r.step} of ${r.cfg.steps}: press Continue`);
      $('storage-status').textContent = `Resumed from this browser's storage at step ${r.step}.`;
      await refreshPlan();
      await measure();
    } else {
      setStatus('ready');
      await refreshPlan();
    }
  } catch (e) { setStatus(`could not resume: ${e.message}`, true); await refreshPlan(); }
  syncButtons();
  S.booted = true;
}

boot();
