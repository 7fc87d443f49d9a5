// compare.js: every policy on one model side by side -- a table (what a block keeps, the arena's
// peak, FLOPs re-computed and their share of a forward, step time: median and middle half of
// interleaved rounds, against none the median of each round's ratio, and whether this machine can
// tell it from none at all), a plot of memory against time with one point per policy and every:K
// as a curve with the sqrt point ringed -- and, from the model's own numbers, why sqrt can lose to
// block. The table's cells come from tableRows(), which bench/teach_policies.mjs prints for docs/demo.md.
import { fmtBytes, policyLabel, mflop, ordinal, pct, recomputeText, msText, ratioText } from './format.js';
import { chainName, el, textWidth } from './schedule.js';
import { blockSizes } from './trace.js';
import { timingSummary, median, quantile } from './measure.js';

const K = (p, depth) =>
  p === 'block' ? 1 : /^every:(\d+)$/.test(p) ? Number(p.slice(6)) : p === 'none' ? depth + 1 : 0;

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

/** A policy's name in the table: sqrt with its segment length in each chain, a budget with its note
 * (recordPolicies: the one half way between none and block; the page's own, 'the page's budget'). */
export const policyName = (p, r) =>
  policyLabel(p) +
  (p === 'sqrt'
    ? ` (segments of ${r.chains.map((c, i) => `${c.segment} in the ${chainName(r, i)}`).join(', ')})`
    : r.note
      ? ` (${r.note})`
      : '');

export const COLUMNS = [
  'policy',
  'the encoder keeps',
  'arena peak',
  're-computed per step',
  'step time: median (middle half of the rounds)',
  "vs none: median of the rounds' ratios (middle half)",
];

/**
 * tableRows(R, times) -> [{ policy, cells: [text per COLUMNS], recompute, same, distinct }] in the
 * table's order: R (readTrace results by policy, recordPolicies'), times ({ ms, again } of
 * measureTimes, or null). A policy with the same kernel calls as another says so and is not timed;
 * a time whose ratio to none this machine cannot tell from two timings of none says so.
 */
export function tableRows(R, times = null) {
  const depth = R.none.chains[0].depth,
    fwd = R.none.flops.forward;
  const sum = times && times.ms && times.ms.none && times.ms.none.length ? timingSummary(times) : null;
  return order(Object.keys(R), depth).map((p) => {
    const r = R[p],
      t = sum && sum.byPolicy[p];
    let time, vs;
    if (r.same) {
      time = `the same computation as ${policyLabel(r.same)} (the same kernel calls): not timed again`;
      vs = '';
    } else if (!t) {
      time = sum ? 'not timed' : '–';
      vs = '–';
    } else {
      time = `${msText(t.ms)}, ${t.ms.n} rounds`;
      vs =
        p === 'none'
          ? '1×'
          : `${ratioText(t.ratio)}${t.distinct ? '' : ': not distinguishable from none on this machine'}`;
    }
    return {
      policy: p,
      cells: [policyName(p, r), keeps(r), fmtBytes(r.peak.bytes), recomputeText(r.flops.recompute, fwd), time, vs],
      recompute: r.flops.recompute,
      same: r.same || null,
      distinct: t ? t.distinct : null,
    };
  });
}

/** The table: one row per policy (tableRows); the columns of step times only once there are times.
 * On a narrow screen each row stacks its cells, each with its column's name (data-label). */
export function renderCompareTable(table, R, times = null) {
  table.querySelectorAll('tr').forEach((tr) => tr.remove());
  const timed = !!(times && times.ms && times.ms.none && times.ms.none.length),
    n = timed ? COLUMNS.length : 4;
  const tr0 = table.appendChild(document.createElement('tr'));
  for (const h of COLUMNS.slice(0, n)) {
    const th = document.createElement('th');
    th.scope = 'col';
    th.textContent = h;
    tr0.appendChild(th);
  }
  for (const row of tableRows(R, times)) {
    const tr = document.createElement('tr');
    tr.dataset.policy = row.policy;
    if (row.same) tr.dataset.same = row.same;
    row.cells.slice(0, n).forEach((c, i) => {
      if (row.same && i === 5) return;
      const td = document.createElement(i ? 'td' : 'th');
      if (!i) td.scope = 'row';
      td.dataset.label = COLUMNS[i];
      td.textContent = c;
      if (i === 3) td.dataset.recompute = String(row.recompute);
      if (row.same && i === 4) td.colSpan = 2;
      tr.appendChild(td);
    });
    table.appendChild(tr);
  }
}

/** In words, what the times say: the noise floor (none timed twice a round), a busy machine, and which
 * policies this machine cannot tell apart. '' before any time. */
export function timesProse(R, times) {
  if (!times || !times.ms || !times.ms.none || !times.ms.none.length) return '';
  const s = timingSummary(times),
    out = [];
  if (s.noise)
    out.push(
      `Timing none twice in each round, the second timing over the first had a median of ${s.noise.median.toFixed(2)}× and a middle half of ` +
        `${s.noise.q1.toFixed(2)}–${s.noise.q3.toFixed(2)}×: differences of that size are noise here.`,
    );
  if (s.busy)
    out.push(
      'This machine was busy: two timings of the same computation commonly disagreed by more than 5%, so only large differences in time mean anything.',
    );
  const same = Object.keys(s.byPolicy).filter((p) => s.byPolicy[p].ratio && !s.byPolicy[p].distinct);
  if (same.length) out.push(`Not distinguishable from none on this machine: ${same.map(policyLabel).join(', ')}.`);
  for (const g of s.ties)
    out.push(
      `Not distinguishable from each other on this machine: ${g.map(policyLabel).join(', ')} (the middle halves of their ratios overlap).`,
    );
  const twins = Object.keys(R).filter((p) => R[p].same);
  if (twins.length)
    out.push(
      `${twins.map((p) => `${policyLabel(p)} runs the same kernel calls as ${policyLabel(R[p].same)}`).join('; ')}: one computation, timed once.`,
    );
  return out.join(' ');
}

/** The plot at `width` CSS pixels: x = step time (measured median, the middle half of the rounds as
 * a bar) or, before measuring, FLOPs per step; y = the arena's peak. every:K (block = K 1) joined as
 * a curve, sqrt ringed; a policy that is the same computation as another is one point, both named.
 * Each label goes to the first place around its point that overlaps no point, no label and no edge. */
export function drawComparePlot(svg, R, times, { width = 520 } = {}) {
  svg.textContent = '';
  const Wt = Math.max(300, Math.min(640, Math.round(width))),
    Ht = Math.round(Math.min(340, Math.max(260, Wt * 0.62)));
  svg.setAttribute('viewBox', `0 0 ${Wt} ${Ht}`);
  svg.setAttribute('width', Wt);
  svg.setAttribute('height', Ht);
  const ms = times && times.ms,
    measured = !!(ms && ms.none && ms.none.length);
  const depth = R.none.chains[0].depth,
    pts = [];
  for (const p of Object.keys(R)) {
    if (R[p].same) continue;
    const t = measured && ms[p] && ms[p].length ? ms[p] : null;
    if (measured && !t) continue;
    const twins = Object.keys(R).filter((q) => R[q].same === p);
    pts.push({
      p,
      twins,
      x: t ? median(t) : R[p].total / 1e9,
      lo: t ? quantile(t, 0.25) : null,
      hi: t ? quantile(t, 0.75) : null,
      y: R[p].peak.bytes,
    });
  }
  const Lx = 52,
    Rx = Wt - 14,
    Ty = 24,
    By = Ht - 46;
  const xmin = Math.min(...pts.map((q) => q.lo ?? q.x)),
    xmax = Math.max(...pts.map((q) => q.hi ?? q.x)),
    pad = Math.max(1e-9, xmax - xmin) * 0.08;
  const x0 = xmin - pad,
    x1 = xmax + pad,
    ymax = Math.max(...pts.map((q) => q.y)) * 1.1;
  const xs = (v) => Lx + ((Rx - Lx) * (v - x0)) / Math.max(1e-9, x1 - x0),
    ys = (v) => By - ((By - Ty) * v) / ymax;
  el('line', { x1: Lx, y1: By, x2: Rx, y2: By, stroke: '#66707c' }, svg);
  el('line', { x1: Lx, y1: Ty, x2: Lx, y2: By, stroke: '#66707c' }, svg);
  const ticks = Wt < 420 ? 3 : 4;
  for (let i = 0; i <= ticks; i++) {
    const v = (ymax * i) / ticks,
      xv = x0 + ((x1 - x0) * i) / ticks;
    el('text', { x: Lx - 4, y: ys(v) + 4, class: 'axis', 'text-anchor': 'end' }, svg, (v / 2 ** 20).toFixed(1));
    el(
      'text',
      { x: xs(xv), y: By + 14, class: 'axis', 'text-anchor': i === 0 ? 'start' : i === ticks ? 'end' : 'middle' },
      svg,
      Number(xv.toPrecision(3)).toString(),
    );
  }
  el(
    'text',
    { x: (Lx + Rx) / 2, y: By + 32, class: 'axis', 'text-anchor': 'middle' },
    svg,
    measured ? 'step time, ms (median; bar: middle half of the rounds)' : 'GFLOP per step (not timed yet)',
  );
  el('text', { x: 4, y: 13, class: 'axis' }, svg, 'arena peak, MiB');
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
  // points first (labels avoid them all), then labels
  const boxes = [];
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
    const rr = q.p === 'sqrt' ? 7 : 4;
    el(
      'circle',
      {
        cx: xs(q.x),
        cy: ys(q.y),
        r: rr,
        fill: q.p === 'sqrt' ? 'none' : q.p === 'none' ? '#2f6fde' : '#d9731c',
        stroke: q.p === 'sqrt' ? '#1d232b' : 'none',
        'stroke-width': 2,
        'data-policy': q.p,
      },
      svg,
    );
    boxes.push({ x0: xs(q.x) - rr - 1, x1: xs(q.x) + rr + 1, y0: ys(q.y) - rr - 1, y1: ys(q.y) + rr + 1 });
  }
  // the curve is in the way too: small boxes along each of its segments
  for (let i = 1; i < curve.length; i++) {
    const [ax, ay, bx, by] = [xs(curve[i - 1].x), ys(curve[i - 1].y), xs(curve[i].x), ys(curve[i].y)],
      n = Math.ceil(Math.hypot(bx - ax, by - ay) / 5);
    for (let j = 0; j <= n; j++) {
      const x = ax + ((bx - ax) * j) / n,
        y = ay + ((by - ay) * j) / n;
      boxes.push({ x0: x - 1.5, x1: x + 1.5, y0: y - 1.5, y1: y + 1.5 });
    }
  }
  // the spread bars: avoided when a place off them is free, else a label may lie on one (they are light)
  const bars = pts
    .filter((q) => q.lo != null)
    .map((q) => ({ x0: xs(q.lo), x1: xs(q.hi), y0: ys(q.y) - 2, y1: ys(q.y) + 2 }));
  const over = (list, b) => list.some((o) => b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1);
  const hits = (b) => over(boxes, b);
  const inside = (b) => b.x0 >= Lx + 2 && b.x1 <= Wt - 2 && b.y0 >= Ty - 6 && b.y1 <= By - 2;
  // by distance from the point: right, left, above, below, then the diagonals, then further out
  const spots = [];
  for (const d of [0, 10, 22, 36])
    spots.push([8 + d, 4, 'start'], [-8 - d, 4, 'end'], [0, -10 - d, 'middle'], [0, 16 + d, 'middle']);
  for (const d of [0, 14, 28])
    spots.push([8, -8 - d, 'start'], [-8, -8 - d, 'end'], [8, 16 + d, 'start'], [-8, 16 + d, 'end']);
  for (const q of pts) {
    const k = K(q.p, depth);
    const name = (p) =>
      p === 'block'
        ? 'block (K=1)'
        : p.startsWith('every:')
          ? `K=${K(p, depth)}`
          : p === 'sqrt'
            ? `sqrt (K=${R.sqrt.chains[0].segment})`
            : policyLabel(p);
    const label = [q.p, ...q.twins].map(name).join(' = ');
    const t = el('text', { class: 'pt', 'data-policy': q.p }, svg, label);
    const w = textWidth(t),
      cx = xs(q.x),
      cy = ys(q.y),
      h = 12;
    const box = ([dx, dy, anchor]) => {
      const x = cx + dx,
        left = anchor === 'start' ? x : anchor === 'end' ? x - w : x - w / 2;
      return { x, y: cy + dy, anchor, b: { x0: left - 1, x1: left + w + 1, y0: cy + dy - h + 2, y1: cy + dy + 3 } };
    };
    let pick =
      spots.map(box).find((s) => inside(s.b) && !hits(s.b) && !over(bars, s.b)) ||
      spots.map(box).find((s) => inside(s.b) && !hits(s.b));
    if (!pick) pick = spots.map(box).find((s) => inside(s.b)) || box(spots[0]);
    t.setAttribute('x', pick.x);
    t.setAttribute('y', pick.y);
    t.setAttribute('text-anchor', pick.anchor);
    boxes.push(pick.b);
    void k;
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
