// compare-view.js: every policy on the page's model side by side -- a table (what a block keeps,
// the arena's peak, FLOPs re-computed and their share of a forward, step time: median and middle
// half of interleaved rounds, against none the median of each round's ratio), a plot of memory
// against time with one point per policy and every:K as a curve with the sqrt point ringed -- and,
// from the model's own numbers, why sqrt can lose to block.
import { fmtBytes, policyLabel } from './plan.js';
import { chainName, mflop, ordinal } from './schedule-view.js';
import { blockSizes } from './trace-model.js';
import { quantile, median, pairedRatios } from './teach-measure.js';

const NS = 'http://www.w3.org/2000/svg';
const el = (name, attrs = {}, parent = null, text = null) => {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text != null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
};
const K = (p, depth) =>
  p === 'block' ? 1 : /^every:(\d+)$/.test(p) ? Number(p.slice(6)) : p === 'none' ? depth + 1 : 0;
const pct = (f, fwd) => `${((100 * f) / fwd).toFixed(0)}%`;

/** The policies to compare, in the table's order: none, block, every:2.., sqrt, selective, budget. */
export const order = (policies, depth) =>
  [...policies].sort((a, b) => {
    const rank = (p) =>
      p === 'none' ? 0 : p === 'block' || p.startsWith('every:') ? 1 : p === 'sqrt' ? 2 : p === 'selective' ? 3 : 4;
    return rank(a) - rank(b) || K(a, depth) - K(b, depth);
  });

const WORDS = { full: 'everything', input: 'the input', selective: 'matmul outputs', none: 'nothing' };
/** What the encoder's blocks keep, in words: one phrase, or runs of blocks. */
export function keeps(r) {
  const st = r.chains[0].store,
    seg = r.chains[0].segment;
  if (new Set(st).size === 1) return st[0] === 'input' ? "each block's input" : WORDS[st[0]] || st[0];
  if (seg > 1 && st.every((x, i) => x === (i % seg ? 'none' : 'input'))) return `every ${ordinal(seg)} block's input`;
  const runs = [];
  st.forEach((x, i) => {
    const last = runs[runs.length - 1];
    if (last && last.x === x) last.to = i;
    else runs.push({ x, from: i, to: i });
  });
  return runs
    .map((q) => `${q.from === q.to ? `block ${q.from}` : `blocks ${q.from}–${q.to}`}: ${WORDS[q.x] || q.x}`)
    .join('; ');
}

// a policy's step time against none's in the same round: the median ratio, and the middle half when it is not none
const ratio = (times, p) => {
  const q = times ? pairedRatios(times, p) : [];
  return !q.length
    ? '–'
    : p === 'none'
      ? '1×'
      : `${median(q).toFixed(2)}× (${quantile(q, 0.25).toFixed(2)}–${quantile(q, 0.75).toFixed(2)})`;
};

/** A policy's name in the table: sqrt with its segment length in each chain, a budget with where it lies. */
export const policyName = (p, r) =>
  policyLabel(p) +
  (p === 'sqrt'
    ? ` (segments of ${r.chains.map((c, i) => `${c.segment} in the ${chainName(r, i)}`).join(', ')})`
    : p.startsWith('budget:')
      ? ' (half way between none and block)'
      : '');

/** The table: one row per policy of `R` (readTrace results by policy), with times { [policy]: [ms] }. */
export function renderCompareTable(table, R, times, fwd) {
  table.querySelectorAll('tr').forEach((tr) => tr.remove());
  const cols = [
    'policy',
    'the encoder keeps',
    'arena peak',
    're-computed per step',
    'step time: median (middle half of the rounds)',
    "vs none: median of the rounds' ratios",
  ];
  const tr0 = table.appendChild(document.createElement('tr'));
  for (const h of cols) {
    const th = document.createElement('th');
    th.scope = 'col';
    th.textContent = h;
    tr0.appendChild(th);
  }
  const depth = R.none.chains[0].depth;
  for (const p of order(Object.keys(R), depth)) {
    const r = R[p],
      t = times && times[p],
      med = t ? median(t) : NaN;
    const tr = document.createElement('tr');
    tr.dataset.policy = p;
    const cells = [
      policyName(p, r),
      keeps(r),
      fmtBytes(r.peak.bytes),
      r.flops.recompute
        ? `${mflop(r.flops.recompute)} (${pct(r.flops.recompute, fwd)} of a forward)`
        : p.startsWith('budget:')
          ? '0: nothing needed re-computing'
          : '0',
      t && t.length
        ? `${med.toFixed(1)} ms (${quantile(t, 0.25).toFixed(1)}–${quantile(t, 0.75).toFixed(1)}, ${t.length} rounds)`
        : '–',
      ratio(times, p),
    ];
    cells.forEach((c, i) => {
      const td = document.createElement(i ? 'td' : 'th');
      if (!i) td.scope = 'row';
      td.textContent = c;
      if (i === 3) td.dataset.recompute = String(r.flops.recompute);
      tr.appendChild(td);
    });
    table.appendChild(tr);
  }
}

/** The plot: x = step time (measured median, the middle half of the rounds as a bar) or, before measuring, FLOPs per
 * step; y = the arena's peak. every:K (block = K 1) joined as a curve, sqrt ringed. */
export function drawComparePlot(svg, R, times) {
  svg.textContent = '';
  const measured = !!(times && Object.keys(times).length);
  const depth = R.none.chains[0].depth,
    pts = [];
  for (const p of Object.keys(R)) {
    const t = measured && times[p] && times[p].length ? times[p] : null;
    if (measured && !t) continue;
    pts.push({
      p,
      x: t ? median(t) : R[p].total / 1e9,
      lo: t ? quantile(t, 0.25) : null,
      hi: t ? quantile(t, 0.75) : null,
      y: R[p].peak.bytes,
    });
  }
  const Lx = 64,
    Rx = 500,
    Ty = 16,
    By = 270;
  const xmin = Math.min(...pts.map((q) => q.lo ?? q.x)) * 0.97,
    xmax = Math.max(...pts.map((q) => q.hi ?? q.x)) * 1.03;
  const ymax = Math.max(...pts.map((q) => q.y)) * 1.08;
  const xs = (v) => Lx + ((Rx - Lx) * (v - xmin)) / Math.max(1e-9, xmax - xmin),
    ys = (v) => By - ((By - Ty) * v) / ymax;
  el('line', { x1: Lx, y1: By, x2: Rx, y2: By, stroke: '#66707c' }, svg);
  el('line', { x1: Lx, y1: Ty, x2: Lx, y2: By, stroke: '#66707c' }, svg);
  for (let i = 0; i <= 4; i++) {
    const v = (ymax * i) / 4,
      xv = xmin + ((xmax - xmin) * i) / 4;
    el('text', { x: Lx - 4, y: ys(v) + 4, class: 'axis', 'text-anchor': 'end' }, svg, fmtBytes(v).replace(' MiB', ''));
    el(
      'text',
      { x: xs(xv), y: By + 14, class: 'axis', 'text-anchor': 'middle' },
      svg,
      Number(xv.toPrecision(3)).toString(),
    );
  }
  el(
    'text',
    { x: (Lx + Rx) / 2, y: By + 30, class: 'axis', 'text-anchor': 'middle' },
    svg,
    measured ? 'step time, ms (median; bar: the middle half of the rounds)' : 'GFLOP per step (not timed yet)',
  );
  el('text', { x: 4, y: 10, class: 'axis' }, svg, 'arena peak, MiB');
  const curve = pts
    .filter((q) => q.p === 'block' || q.p.startsWith('every:'))
    .sort((a, b) => K(a.p, depth) - K(b.p, depth));
  if (curve.length > 1)
    el(
      'path',
      {
        d: curve.map((q, i) => `${i ? 'L' : 'M'}${xs(q.x)},${ys(q.y)}`).join(''),
        fill: 'none',
        stroke: '#d9731c',
        'stroke-width': 1.5,
        class: 'everyk',
      },
      svg,
    );
  // labels placed one by one, each moved down past any it would overlap (about 6.5 px a character, 13 px a line)
  const placed = [],
    place = (x, y, text, end) => {
      const w = 6.5 * text.length,
        box = () => ({ x0: end ? x - w : x, x1: end ? x : x + w, y0: y - 11, y1: y + 2 });
      const hits = (b) => placed.some((o) => b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1);
      for (let i = 0; i < 8 && hits(box()); i++) y += 13;
      placed.push(box());
      return y;
    };
  for (const q of pts) {
    if (q.lo != null)
      el(
        'line',
        {
          x1: xs(q.lo),
          x2: xs(q.hi),
          y1: ys(q.y),
          y2: ys(q.y),
          stroke: '#8d99a6',
          'stroke-width': 3,
          'stroke-opacity': 0.5,
        },
        svg,
      );
    const k = K(q.p, depth);
    el(
      'circle',
      {
        cx: xs(q.x),
        cy: ys(q.y),
        r: q.p === 'sqrt' ? 7 : 4,
        fill: q.p === 'sqrt' ? 'none' : q.p === 'none' ? '#2f6fde' : '#d9731c',
        stroke: q.p === 'sqrt' ? '#1d232b' : 'none',
        'stroke-width': 2,
        'data-policy': q.p,
      },
      svg,
    );
    const label =
      q.p === 'block'
        ? 'block (K=1)'
        : q.p.startsWith('every:')
          ? `K=${k}`
          : q.p === 'sqrt'
            ? `sqrt (K=${R.sqrt.chains[0].segment})`
            : policyLabel(q.p);
    const below = q.p === 'sqrt' || q.p === 'selective' || (q.p.startsWith('every:') && k % 2 === 1);
    const x = xs(q.x) + (q.p === 'block' ? -8 : 8),
      y = place(x, ys(q.y) + (below ? 16 : -7), label, q.p === 'block');
    el('text', { x, y, class: 'pt', 'text-anchor': q.p === 'block' ? 'end' : 'start' }, svg, label);
  }
  return pts;
}

/** Why sqrt can lose to block on this model, in the model's own numbers. */
export function sqrtProse(R) {
  if (!R.sqrt || !R.block || !R.none) return '';
  const r0 = R.none,
    c = 0,
    n = r0.chains[c].depth,
    k = R.sqrt.chains[c].segment,
    { input: a, internals: b } = blockSizes(R.block, R.none, c);
  const ratio = b / a,
    fwd = r0.flops.forward,
    where = (r) => {
      const m = r.moments[r.peak.moment];
      return m.chain >= 0 && m.block >= 0
        ? `as the ${m.phase === 'recompute' ? 're-computation' : m.phase} of ${chainName(r, m.chain)} block ${m.block} begins`
        : `as the ${m.phase} outside the blocks begins`;
    };
  const sqrtWins = R.sqrt.peak.bytes < R.block.peak.bytes;
  return `<p><b>Why ${sqrtWins ? 'sqrt beats block' : 'sqrt loses to block'} here.</b> The √n rule comes from chains whose layers keep about as much as
they pass on. A transformer block does not: in this ${chainName(r0, c)} a block's input is ${fmtBytes(a)}, but its internals (what its
backward needs: the LayerNorms' inputs, q, k and v, the attention probabilities, the MLP's hidden layer before and after the GELU)
are ${fmtBytes(b)}, ${ratio.toFixed(1)} times as much. Under <code>block</code> the step keeps ${n} inputs (${fmtBytes(n * a)}) and
re-computes one block at a time into a slot of ${fmtBytes(b)}. Under <code>sqrt</code> (K = ${k} at depth ${n}) it keeps
${Math.ceil(n / k)} inputs (${fmtBytes(Math.ceil(n / k) * a)}), but re-running a ${k}-block segment holds ${k} blocks' internals at once
(${fmtBytes(k * b)}): it saves ${fmtBytes((n - Math.ceil(n / k)) * a)} of inputs and spends ${fmtBytes((k - 1) * b)} more on the slot.
With internals r = ${ratio.toFixed(1)} times the input, the segment length that keeps least is √(n / r) = ${Math.sqrt(n / ratio).toFixed(2)}:
${Math.sqrt(n / ratio) < 1.5 ? 'below 2, so every block is its own segment, which is <code>block</code>' : `about ${Math.round(Math.sqrt(n / ratio))}`}; and
<code>sqrt</code> keeps less than <code>block</code> only in chains deeper than r² ≈ ${Math.round(ratio * ratio)} blocks.</p>
<p>The whole step's peak is the arena's highest point, wherever it falls: ${fmtBytes(R.block.peak.bytes)} under block (${where(R.block)}),
${fmtBytes(R.sqrt.peak.bytes)} under sqrt (${where(R.sqrt)}). And sqrt re-computes more: ${pct(R.sqrt.flops.recompute, fwd)} of a forward
against ${pct(R.block.flops.recompute, fwd)} for block, because a segment runs again whole, while under block the last block of each
chain is not re-run at all: its internals are still in the slot when the backward begins.</p>${everyKProse(R, where)}`;
}

/** When every:K's peak stays put as K grows because another chain (the MAE decoder, the AIM head) sets it. */
function everyKProse(R, where) {
  const depth = R.none.chains[0].depth,
    ks = Object.keys(R)
      .filter((p) => /^every:\d+$/.test(p) && K(p, depth) > 1)
      .sort((a, b) => K(a, depth) - K(b, depth));
  if (ks.length < 2) return '';
  const at = ks.map((p) => R[p].moments[R[p].peak.moment].chain),
    c = at[0];
  if (c <= 0 || at.some((x) => x !== c)) return '';
  const r = R[ks[0]],
    d = r.chains[c].depth,
    { input: a } = blockSizes(R.block, R.none, c),
    { input: a0 } = blockSizes(R.block, R.none, 0);
  return `<p><b>Why the every:K curve is flat.</b> ${ks.map((p) => `${fmtBytes(R[p].peak.bytes)} at K = ${K(p, depth)}`).join(', ')}: for every K from 2 the
peak falls in the ${chainName(r, c)}, ${where(r)}. K applies to every chain, and the ${chainName(r, c)} has ${d} block${d === 1 ? '' : 's'}, so from K = ${d} on
it is one segment re-run whole; its blocks carry ${fmtBytes(a)} each against the encoder's ${fmtBytes(a0)}, so they, not the encoder's K, set the peak.</p>`;
}
