// schedule-view.js: one recorded training step drawn (SVG) -- a row per block, the moments of the
// step on a time axis weighted by FLOPs (forward, re-computation, backward), what each block's
// forward keeps, and below on the same axis the activation arena (allocated, still needed), the
// re-computation shaded and the peak marked -- and the words for each moment of the step.
import { fmtBytes } from './plan.js';
import { stepMoments } from './trace-model.js';

const NS = 'http://www.w3.org/2000/svg';
export const COLOR = { forward: '#2f6fde', recompute: '#d9731c', backward: '#8a4fd1', optimizer: '#3aa38f' };
const CHAIN = { enc: 'encoder', dec: 'decoder', head: 'AIM head' };
export const chainName = (r, c) => (c < 0 ? 'outside the blocks' : CHAIN[r.chains[c].name] || r.chains[c].name);
const STORE = { full: 'everything', input: 'its input', none: 'nothing', selective: 'matmul outputs' };
export const ordinal = (k) =>
  `${k}${k % 10 === 1 && k % 100 !== 11 ? 'st' : k % 10 === 2 && k % 100 !== 12 ? 'nd' : k % 10 === 3 && k % 100 !== 13 ? 'rd' : 'th'}`;
export const mflop = (f) => (f >= 1e9 ? `${(f / 1e9).toFixed(2)} GFLOP` : `${(f / 1e6).toFixed(1)} MFLOP`);

function el(name, attrs = {}, parent = null, text = null) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text != null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

/** What the forward keeps of block b of chain c, in words (the engine's buffer names). A block's
 * `out` is the next block's input: under every:K the last block of a segment writes the stored
 * input of the next segment. */
export function keptText(r, c, b) {
  const k = r.blocks[c][b],
    bytes = fmtBytes(k.kept);
  if (k.store === 'none')
    return k.kept
      ? `nothing for its own backward (it is re-computed with its segment); its output, ${bytes}, stays as block ${b + 1}'s input, where the next segment starts`
      : 'nothing: it is re-computed with its segment';
  if (k.store === 'input')
    return `its input; what it writes, ${k.keptNames.join(', ') || 'its output'} (${bytes}), is kept as the next block's input`;
  return `${STORE[k.store] || k.store}: ${k.keptNames.join(', ')} (${bytes})`;
}
/** The chip before a block's row: what it keeps, and the bytes of that. */
function chip(r, c, b) {
  const k = r.blocks[c][b];
  return k.store === 'none' ? 'nothing' : `${STORE[k.store] || k.store}${k.kept ? ` · ${fmtBytes(k.kept)}` : ''}`;
}

/**
 * drawSchedule(svg, r, { cursor, ymax }) draws readTrace(...) result r; cursor: the index of the
 * highlighted moment of stepMoments(r) (-1: none); ymax: the bytes of the memory axis (the same
 * for every policy, so they compare). Each moment's rect carries data-phase, data-chain,
 * data-block, data-t0, data-t1 (FLOPs), and a <title>.
 */
export function drawSchedule(svg, r, { cursor = -1, ymax = r.peak.bytes } = {}) {
  svg.textContent = '';
  const rows = [];
  r.chains.forEach((ch, c) => {
    for (let b = 0; b < ch.depth; b++) rows.push({ c, b });
  });
  rows.push({ c: -1, b: -1 });
  const L = 250,
    R = 990,
    W = R - L,
    rowH = 16,
    top = 24,
    memTop = top + rows.length * (rowH + 2) + 26,
    memH = 120,
    H = memTop + memH + 34;
  svg.setAttribute('viewBox', `0 0 1000 ${H}`);
  const xs = (t) => L + (W * t) / Math.max(1, r.total);
  const defs = el('defs', {}, svg);
  const pat = el(
    'pattern',
    { id: 'hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
    defs,
  );
  el('rect', { width: 6, height: 6, fill: COLOR.recompute }, pat);
  el('line', { x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#fff', 'stroke-width': 2, 'stroke-opacity': 0.5 }, pat);
  el('text', { x: L, y: 14, class: 'axis' }, svg, 'time →  (each kernel call as wide as its FLOPs)');
  el('text', { x: 4, y: 14, class: 'axis' }, svg, 'block: what its forward keeps');
  const rowY = new Map();
  rows.forEach(({ c, b }, i) => {
    const y = top + i * (rowH + 2);
    rowY.set(`${c}/${b}`, y);
    el('rect', { x: L, y, width: W, height: rowH, fill: i % 2 ? '#f7f8fa' : '#eef0f3' }, svg);
    const label = c < 0 ? 'outside the blocks' : `${chainName(r, c)} ${b}`;
    el('text', { x: 4, y: y + 12, class: 'row' }, svg, label);
    if (c >= 0) {
      el('text', { x: 96, y: y + 12, class: 'chip' }, svg, chip(r, c, b));
    }
  });
  const ms = stepMoments(r),
    cur = ms[cursor];
  ms.forEach((m, i) => {
    const y = rowY.get(m.inBlock ? `${m.chain}/${m.block}` : '-1/-1');
    const x0 = xs(m.t0),
      w = Math.max(1.2, xs(m.t1) - x0);
    const rect = el(
      'rect',
      {
        x: x0,
        y: y + 1,
        width: w,
        height: rowH - 2,
        fill: m.phase === 'recompute' ? 'url(#hatch)' : COLOR[m.phase],
        class: `moment${i === cursor ? ' current' : ''}`,
        'data-phase': m.phase,
        'data-chain': m.inBlock ? m.chain : -1,
        'data-block': m.inBlock ? m.block : -1,
        'data-t0': m.t0,
        'data-t1': m.t1,
        'data-index': i,
      },
      svg,
    );
    el(
      'title',
      {},
      rect,
      `${m.phase}, ${m.inBlock ? `${chainName(r, m.chain)} block ${m.block}` : 'outside the blocks'}: ${mflop(m.flops)}`,
    );
  });
  // the arena over the same time: re-computation bands, allocated (filled), still needed (line), the peak
  const ys = (v) => memTop + memH * (1 - v / Math.max(1, ymax));
  el('text', { x: 4, y: memTop + 12, class: 'row' }, svg, 'activation arena');
  el('text', { x: 4, y: memTop + 28, class: 'chip' }, svg, `axis to ${fmtBytes(ymax)}`);
  el('rect', { x: L, y: memTop, width: W, height: memH, fill: '#fafbfc', stroke: '#dde1e6' }, svg);
  for (const m of r.moments)
    if (m.phase === 'recompute')
      el(
        'rect',
        {
          x: xs(m.t0),
          y: memTop,
          width: Math.max(1, xs(m.t1) - xs(m.t0)),
          height: memH,
          fill: COLOR.recompute,
          'fill-opacity': 0.18,
          class: 'band',
        },
        svg,
      );
  // step paths: each value holds until the next event
  let dTop = `M${xs(0)},${ys(0)}`,
    dLive = `M${xs(0)},${ys(0)}`,
    lt = 0,
    ll = 0;
  for (const p of r.memory) {
    dTop += `L${xs(p.t)},${ys(lt)}L${xs(p.t)},${ys(p.top)}`;
    dLive += `L${xs(p.t)},${ys(ll)}L${xs(p.t)},${ys(p.live)}`;
    lt = p.top;
    ll = p.live;
  }
  dTop += `L${xs(r.total)},${ys(lt)}L${xs(r.total)},${ys(0)}Z`;
  dLive += `L${xs(r.total)},${ys(ll)}`;
  el(
    'path',
    { d: dTop, fill: '#e39b3a', 'fill-opacity': 0.35, stroke: '#e39b3a', 'stroke-width': 1, class: 'allocated' },
    svg,
  );
  el('path', { d: dLive, fill: 'none', stroke: '#1d232b', 'stroke-width': 1.4, class: 'live' }, svg);
  const px = xs(r.peak.t),
    py = ys(r.peak.bytes);
  el('circle', { cx: px, cy: py, r: 4, fill: '#c0392b', class: 'peak' }, svg);
  el(
    'text',
    { x: Math.min(px + 6, R - 150), y: Math.max(py - 4, memTop + 10), class: 'peak-label' },
    svg,
    `peak ${fmtBytes(r.peak.bytes)} (the plan: ${fmtBytes(r.planned)})`,
  );
  if (cur)
    el(
      'line',
      {
        x1: xs(cur.t1),
        x2: xs(cur.t1),
        y1: top - 4,
        y2: memTop + memH,
        stroke: '#1d232b',
        'stroke-dasharray': '3 3',
        class: 'cursor',
      },
      svg,
    );
  // the phases under the axis
  const b0 = r.moments.find((m) => m.phase === 'backward'),
    o0 = r.moments.find((m) => m.phase === 'optimizer');
  const yAxis = memTop + memH + 16;
  el('text', { x: L, y: yAxis, class: 'axis' }, svg, `forward ${mflop(r.flops.forward)}`);
  if (b0) {
    el('line', { x1: xs(b0.t0), x2: xs(b0.t0), y1: memTop, y2: yAxis + 4, stroke: '#66707c' }, svg);
    el(
      'text',
      { x: xs(b0.t0) + 4, y: yAxis, class: 'axis' },
      svg,
      `backward ${mflop(r.flops.backward)} + re-computed ${mflop(r.flops.recompute)} →`,
    );
  }
  if (o0)
    el(
      'text',
      { x: R, y: yAxis + 14, class: 'axis', 'text-anchor': 'end' },
      svg,
      `AdamW ${mflop(r.flops.optimizer)} · ${mflop(r.total)} in all`,
    );
  return { moments: ms };
}

/** The arena at time t: { top, live } (the last event at or before t). */
export function memoryAt(r, t) {
  let p = r.memory[0];
  for (const q of r.memory) {
    if (q.t > t) break;
    p = q;
  }
  return p;
}

/** One moment of the step in words. */
export function describeMoment(r, m) {
  const mem = memoryAt(r, m.t1),
    at = `Arena after it: ${fmtBytes(mem.top)} allocated, ${fmtBytes(mem.live)} still needed.`;
  if (!m.inBlock) {
    const what =
      m.phase === 'optimizer'
        ? 'Gradient clipping and AdamW: every parameter updated once'
        : m.phase === 'forward'
          ? 'Outside the blocks, forward: patch embedding, positions, masking, norms, the embedding between the chains, the prediction and the loss'
          : 'Outside the blocks, backward: the loss, the prediction and the norms, back to the patch embedding';
    return `${what} (${mflop(m.flops)}). ${at}`;
  }
  const who = `${chainName(r, m.chain)} block ${m.block}`,
    seg = r.chains[m.chain].segment;
  if (m.phase === 'forward')
    return `Forward of ${who} (${mflop(m.flops)}). It keeps for the backward ${keptText(r, m.chain, m.block)}. ${at}`;
  if (m.phase === 'recompute') {
    const first = m.block - (m.block % seg);
    return (
      `Re-computation: ${who}'s forward runs again (${mflop(m.flops)}) from ` +
      (seg > 1
        ? `the stored input of block ${first}, the start of its ${seg}-block segment, keeping this time everything its backward needs`
        : 'its stored input, into the re-computation slot') +
      `. The backward of ${seg > 1 ? 'the segment' : 'this block'} follows. ${at}`
    );
  }
  return `Backward of ${who} (${mflop(m.flops)}): the gradients of its weights and of its input; after it the block's buffers are done with. ${at}`;
}
