// charts.js: what the page draws on canvases, each with a text alternative (its aria-label): the
// loss of every step on a log axis with its running mean (coloured by the policy it ran under), and
// the reconstructions of the last batch. (The activation memory of a step: teach.js, from the
// engine's recorded step.)
import { $, S } from './state.js';

export function setupCanvas(c) {
  const ctx = c.getContext('2d');
  ctx.clearRect(0, 0, c.width, c.height);
  ctx.font = '12px system-ui, sans-serif';
  return ctx;
}

/** The running mean the loss line shows: an exponential moving average (weight 0.1), bias-corrected
 * at the start as Adam's moments are, so the first steps are not pulled towards 0. */
export function smooth(values, w = 0.1) {
  let m = 0,
    c = 0;
  return values.map((v) => {
    m = (1 - w) * m + w * v;
    c = (1 - w) * c + w;
    return m / c;
  });
}

export function drawLoss() {
  const c = $('loss-chart'),
    ctx = setupCanvas(c),
    W = c.width,
    H = c.height;
  const L = S.losses.filter((r) => Number.isFinite(r.loss) && r.loss > 0),
    pad = { l: 52, r: 10, t: 16, b: 26 };
  ctx.fillStyle = '#66707c';
  if (!L.length) {
    ctx.fillText('the loss of every step appears here', pad.l, H / 2);
    c.setAttribute('aria-label', 'no loss yet: the loss of every step appears here');
    return;
  }
  const maxStep = Math.max(S.run ? S.run.cfg.steps : 0, L[L.length - 1].step, 10);
  const xs = (s) => pad.l + ((W - pad.l - pad.r) * s) / maxStep;
  let lo = Infinity,
    hi = -Infinity;
  for (const r of L) {
    lo = Math.min(lo, r.loss);
    hi = Math.max(hi, r.loss);
  }
  // a log axis: the loss falls by factors, and the late steps stay readable
  let a = Math.log10(lo),
    b = Math.log10(hi);
  if (b - a < 0.1) {
    a -= 0.05;
    b += 0.05;
  }
  const ys = (v) => pad.t + ((H - pad.t - pad.b) * (b - Math.log10(v))) / (b - a);
  ctx.strokeStyle = '#dde1e6';
  ctx.beginPath();
  for (let i = 0; i <= 4; i++) {
    const v = 10 ** (a + ((b - a) * i) / 4);
    ctx.moveTo(pad.l, ys(v));
    ctx.lineTo(W - pad.r, ys(v));
    ctx.fillText(v.toPrecision(3), 4, ys(v) + 4);
  }
  ctx.stroke();
  ctx.fillText('0', pad.l, H - 8);
  ctx.fillText(`step ${maxStep}`, xs(maxStep) - 56, H - 8);
  ctx.fillText('loss (log scale)', pad.l + 4, 11);
  const color = (p) => (p === 'none' ? '#2f6fde' : '#d9731c');
  for (const r of L) {
    ctx.fillStyle = color(r.policy) + '55';
    ctx.fillRect(xs(r.step) - 1, ys(r.loss) - 1, 2, 2);
  }
  const m = smooth(L.map((r) => r.loss));
  ctx.lineWidth = 2;
  for (let i = 1; i < L.length; i++) {
    ctx.strokeStyle = color(L[i].policy);
    ctx.beginPath();
    ctx.moveTo(xs(L[i - 1].step), ys(m[i - 1]));
    ctx.lineTo(xs(L[i].step), ys(m[i]));
    ctx.stroke();
  }
  ctx.lineWidth = 1;
  ctx.fillStyle = '#2f6fde';
  ctx.fillRect(W - 230, 8, 10, 3);
  ctx.fillStyle = '#66707c';
  ctx.fillText('no checkpointing', W - 216, 13);
  ctx.fillStyle = '#d9731c';
  ctx.fillRect(W - 110, 8, 10, 3);
  ctx.fillStyle = '#66707c';
  ctx.fillText('checkpointing', W - 96, 13);
  ctx.fillText('dots: each step · line: running mean', W - 230, 27);
  const last = L[L.length - 1],
    best = L.reduce((x, r) => (r.loss < x.loss ? r : x));
  c.setAttribute(
    'aria-label',
    `Loss on a log scale, ${L.length} steps: ${L[0].loss.toPrecision(3)} at step ${L[0].step}, ` +
      `running mean ${m[m.length - 1].toPrecision(3)} at step ${last.step} (last step ${last.loss.toPrecision(3)}), lowest ${best.loss.toPrecision(3)} at step ${best.step}; ` +
      `${L.filter((r) => r.policy !== 'none').length} steps ran with checkpointing.`,
  );
}

export function drawRecon(v) {
  const c = $('recon'),
    ctx = setupCanvas(c),
    W = c.width;
  const labels = v.kind === 'mae' ? ['original', 'masked (75%)', 'reconstructed'] : ['original', 'input', 'predicted'];
  if (v.kind === 'mae' && S.run) labels[1] = `masked (${Math.round(100 * S.run.cfg.maskRatio)}%)`;
  const left = 96,
    gap = 4,
    n = Math.max(1, v.n);
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
  c.setAttribute(
    'aria-label',
    `${labels.join(', ')}: the first ${v.n} images of the batch at step ${v.step}, in three rows`,
  );
  void ctx;
}
