// main.js: the demo page. Everything heavy runs in two module workers (worker.js): the trainer
// and the planner. This file reads the controls, draws (canvas), decodes the user's images and
// exposes its state as window.vitrineDemo (for people poking around, and for the browser test).
import { fmtBytes, MiB } from './plan.js';

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

const CONFIG_IDS = ['kind', 'model', 'custom', 'batch', 'mask-ratio', 'lr', 'steps', 'warmup', 'seed', 'data', 'files'];
function readForm() {
  const num = (id) => Number($(id).value);
  return {
    kind: $('kind').value, model: $('model').value, custom: $('custom').value,
    batch: Math.max(1, Math.floor(num('batch'))), maskRatio: num('mask-ratio'), lr: num('lr'),
    steps: Math.max(1, Math.floor(num('steps'))), warmup: Math.max(0, Math.floor(num('warmup'))), seed: Math.max(0, Math.floor(num('seed'))),
    data: $('data').value, checkpointing: $('ckpt').checked, policy: $('policy').value,
  };
}
function writeForm(cfg) {
  $('kind').value = cfg.kind; $('model').value = cfg.model; $('custom').value = cfg.custom;
  $('batch').value = cfg.batch; $('mask-ratio').value = cfg.maskRatio; $('lr').value = cfg.lr; $('steps').value = cfg.steps;
  $('warmup').value = cfg.warmup; $('seed').value = cfg.seed; $('data').value = cfg.data;
  $('ckpt').checked = !!cfg.checkpointing; $('policy').value = cfg.policy;
  syncFormVisibility();
}
const budgetBytes = () => Number($('budget').value) * MiB;
function syncFormVisibility() {
  $('custom-wrap').hidden = $('model').value !== 'custom';
  $('mask-wrap').style.visibility = $('kind').value === 'mae' ? '' : 'hidden';
}
function lockForm(locked) {
  for (const id of CONFIG_IDS) $(id).disabled = locked;
  $('lock-note').hidden = !locked;
}
function syncButtons() {
  const has = !!S.run;
  $('start').disabled = !S.ready || S.running;
  $('start').textContent = has && S.step > 0 ? 'Continue' : 'Start';
  $('pause').disabled = !S.running;
  $('measure').disabled = !has;
  $('download-encoder').disabled = !has;
  $('download-full').disabled = !has;
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
      `forward + backward ${r.ms.toFixed(0)} ms, ${n} arena events, batch ${t.batch}`;
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

/** The user's images at the model's size: centre square crop, resized by the canvas; planar RGB
 * bytes [n, 3, S, S] (the worker turns them grey for a 1-channel model). */
function userData(size) {
  const n = S.userImages.length, px = size * size, pixels = new Uint8Array(n * 3 * px);
  const c = document.createElement('canvas');
  c.width = c.height = size;
  const ctx = c.getContext('2d', { willReadFrequently: true });
  S.userImages.forEach((bm, i) => {
    const s = Math.min(bm.width, bm.height);
    ctx.clearRect(0, 0, size, size);
    ctx.imageSmoothingQuality = 'high';
    ctx.drawImage(bm, (bm.width - s) / 2, (bm.height - s) / 2, s, s, 0, 0, size, size);
    const d = ctx.getImageData(0, 0, size, size).data;
    for (let k = 0; k < px; k++) for (let ch = 0; ch < 3; ch++) pixels[i * 3 * px + ch * px + k] = d[4 * k + ch];
  });
  return { name: 'your images', n, chans: 3, size, pixels };
}

// ---- actions -----------------------------------------------------------------------------------

function afterSetup(r) {
  S.run = { cfg: r.cfg, dims: r.dims, params: r.params, data: r.data };
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
  if (cfg.data === 'user' && !S.userImages.length) { showRefusal('No images of yours yet: drop some image files, or train on the Fashion-MNIST sample.'); return false; }
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
  const ud = cfg.data === 'user' ? userData(p.dims.img) : null;
  const r = await trainer.call('setup', { cfg, userData: ud }, ud ? [ud.pixels.buffer] : []);
  afterSetup(r);
  setStatus(`${r.params.toLocaleString()} parameters, ${r.dims.img}x${r.dims.img}x${r.dims.chans}, data: ${r.data.name} (${r.data.n})`);
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
  try { await trainer.call('reset'); } catch (e) { setStatus(e.message, true); }
  Object.assign(S, { run: null, running: false, step: 0, losses: [], stopped: null, timeline: null, resumed: false, mem: null, refusal: null, error: null });
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
    download(r.bytes, `vitrine-${r.kind}-${full ? 'full' : 'encoder-timm'}-step${r.step}.safetensors`);
    setStatus(`downloaded ${full ? 'the full model (lightly keys)' : 'the encoder (timm keys)'}: ${fmtBytes(r.bytes.length)}`);
  } catch (e) { setStatus(e.message, true); }
}
async function onLoadWeights(file) {
  try {
    if (!(await ensureRun())) return;
    const bytes = new Uint8Array(await file.arrayBuffer());
    const r = await trainer.call('importWeights', { bytes }, [bytes.buffer]);
    setStatus(`loaded ${file.name} as ${r.as}`);
    S.step = r.step;
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
  $('files').addEventListener('change', (e) => addFiles([...e.target.files]));
  $('load-weights').addEventListener('change', (e) => { if (e.target.files[0]) onLoadWeights(e.target.files[0]); e.target.value = ''; });
  const drop = $('drop');
  drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => { e.preventDefault(); drop.classList.remove('over'); if (!S.run) addFiles([...e.dataTransfer.files]); });

  S.ready = true;
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
