// charts.js: what the page draws on canvases: the loss of every step (coloured by the policy it
// ran under), the reconstructions of the last batch, and one step's activation memory as the
// engine's arena saw it, without and with checkpointing.
import { $, S } from './state.js';
import { fmtBytes } from './plan.js';

export const POLICY_LABEL = (p) => (p.startsWith('budget:') ? `budget:${fmtBytes(Number(p.slice(7)))}` : p);

export function setupCanvas(c) {
  const ctx = c.getContext('2d');
  ctx.clearRect(0, 0, c.width, c.height);
  ctx.font = '12px system-ui, sans-serif';
  return ctx;
}

export function drawLoss() {
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

export function drawRecon(v) {
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

export function drawTimelines() {
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
