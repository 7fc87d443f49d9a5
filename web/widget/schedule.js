// schedule.js: one recorded training step drawn (SVG) -- a row per block, the moments of the step
// on a time axis weighted by FLOPs (forward, re-computation, backward), what each block's forward
// keeps and what it drops against `none`, and below on the same axis the activation memory as the
// textbook figure draws it (what is still needed: rising through the forward, falling through the
// backward, a bump at each re-computation) over what the arena has allocated (the plan reserves its
// highest point) -- and the words for each moment of the step. Drawn at the width it is shown at
// (one SVG unit = one CSS pixel), so that its text is as large on a phone as on a desktop.
import { fmtBytes, mflop } from './format.js';
import { stepMoments, droppedBytes } from './trace.js';

const NS = 'http://www.w3.org/2000/svg';
export const COLOR = { forward: '#2f6fde', recompute: '#d9731c', backward: '#8a4fd1', optimizer: '#3aa38f' };
const CHAIN = { enc: 'encoder', dec: 'decoder', head: 'AIM head' };
export const chainName = (r, c) => (c < 0 ? 'outside the blocks' : CHAIN[r.chains[c].name] || r.chains[c].name);
const STORE = { full: 'everything', input: 'its input', none: 'nothing', selective: 'matmul outputs' };

export function el(name, attrs = {}, parent = null, text = null) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text != null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
/** The width of an SVG text element as drawn (an estimate when it is not rendered: 0.58 em a character). */
export function textWidth(t) {
  let w = 0;
  try {
    w = t.getComputedTextLength();
  } catch {
    w = 0;
  }
  return w > 0 ? w : 0.58 * (parseFloat(getComputedStyle(t).fontSize) || 11) * t.textContent.length;
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
/** The words before a block's row, the same form for every block: the bytes it keeps (what they
 * are) and the bytes it drops against none, re-computed in the backward. */
export function chipText(r, none, c, b) {
  const k = r.blocks[c][b],
    d = none ? droppedBytes(r, none, c, b) : 0;
  const what =
    k.store === 'full'
      ? 'everything'
      : k.store === 'input'
        ? 'input'
        : k.store === 'none'
          ? k.kept
            ? 'output'
            : 'nothing'
          : STORE[k.store] || k.store;
  return `keeps ${fmtBytes(k.kept)} (${what}) · drops ${d ? fmtBytes(d) : 'nothing'}`;
}

/**
 * drawSchedule(svg, r, { cursor, ymax, none, width }) draws readTrace(...) result r at `width` CSS
 * pixels; cursor: the index of the highlighted moment of stepMoments(r) (-1: none); ymax: the bytes
 * of the memory axis (the same for every policy, so they compare); none: the recorded step under
 * 'none' (for what each block drops). Each moment's rect carries data-phase, data-chain,
 * data-block, data-t0, data-t1 (FLOPs), and a <title>. Narrower than 640 px, each row's words sit
 * on a line above its bar.
 */
export function drawSchedule(svg, r, { cursor = -1, ymax = r.peak.bytes, none = null, width = 1000 } = {}) {
  svg.textContent = '';
  const Wt = Math.max(300, Math.round(width));
  const rows = [];
  r.chains.forEach((ch, c) => {
    for (let b = 0; b < ch.depth; b++)
      rows.push({ c, b, label: `${chainName(r, c)} ${b}`, chip: chipText(r, none, c, b) });
  });
  rows.push({ c: -1, b: -1, label: 'outside the blocks', chip: '' });
  // wide: the words left of the bars when they take at most 45% of the width; else on a line above each bar
  const probe = (text, cls) => {
    const t = el('text', { x: 0, y: -100, class: cls }, svg, text),
      w = textWidth(t);
    t.remove();
    return w;
  };
  const labelW = Math.max(...rows.map((q) => probe(q.label, 'row'))),
    chipW = Math.max(...rows.map((q) => (q.chip ? probe(q.chip, 'chip') : 0)));
  const chipX = 4 + labelW + 10,
    narrow = chipX + chipW + 14 > 0.45 * Wt;
  const L = narrow ? 6 : Math.ceil(chipX + chipW + 14),
    R = Wt - 8,
    W = R - L,
    bar = 15,
    rowH = narrow ? bar + 16 : bar + 3,
    top = narrow ? 40 : 26;
  const memTop = top + rows.length * rowH + 46,
    memH = narrow ? 110 : 130;
  const xs = (t) => L + (W * t) / Math.max(1, r.total);
  const defs = el('defs', {}, svg);
  const hatchId = `hatch-${Math.random().toString(36).slice(2, 8)}`;
  const pat = el(
    'pattern',
    { id: hatchId, width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
    defs,
  );
  el('rect', { width: 6, height: 6, fill: COLOR.recompute }, pat);
  el('line', { x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#fff', 'stroke-width': 2, 'stroke-opacity': 0.5 }, pat);
  if (narrow) {
    el('text', { x: 6, y: 14, class: 'axis' }, svg, 'each block: what its forward keeps and drops;');
    el('text', { x: 6, y: 28, class: 'axis' }, svg, 'time → (each kernel call as wide as its FLOPs)');
  } else {
    el('text', { x: 4, y: 15, class: 'axis' }, svg, 'block: what its forward keeps and drops');
    el('text', { x: L, y: 15, class: 'axis' }, svg, 'time →  (each kernel call as wide as its FLOPs)');
  }
  const rowY = new Map();
  rows.forEach(({ c, b, label, chip }, i) => {
    const y0 = top + i * rowH,
      y = narrow ? y0 + 14 : y0;
    rowY.set(`${c}/${b}`, y);
    el('rect', { x: L, y, width: W, height: bar, fill: i % 2 ? '#f7f8fa' : '#eef0f3' }, svg);
    const ty = narrow ? y0 + 11 : y + 11.5;
    const lt = el('text', { x: narrow ? 6 : 4, y: ty, class: 'row' }, svg, label);
    if (chip)
      el(
        'text',
        { x: narrow ? 6 + textWidth(lt) + 8 : chipX, y: ty, class: 'chip', 'data-chain': c, 'data-block': b },
        svg,
        chip,
      );
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
        height: bar - 2,
        fill: m.phase === 'recompute' ? `url(#${hatchId})` : COLOR[m.phase],
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
  // the memory over the same time: re-computation bands, allocated (dashed), still needed (filled), the peak
  const ys = (v) => memTop + memH * (1 - v / Math.max(1, ymax));
  const mL = L,
    titleY = memTop - 26;
  el('text', { x: narrow ? 6 : 4, y: titleY, class: 'row' }, svg, `activation memory (axis to ${fmtBytes(ymax)})`);
  el('rect', { x: mL, y: memTop, width: W, height: memH, fill: '#fafbfc', stroke: '#dde1e6' }, svg);
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
          'fill-opacity': 0.16,
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
  dTop += `L${xs(r.total)},${ys(lt)}`;
  dLive += `L${xs(r.total)},${ys(ll)}L${xs(r.total)},${ys(0)}Z`;
  el(
    'path',
    { d: dLive, fill: '#e39b3a', 'fill-opacity': 0.55, stroke: '#9a5a00', 'stroke-width': 1.2, class: 'live' },
    svg,
  );
  el(
    'path',
    { d: dTop, fill: 'none', stroke: '#1d232b', 'stroke-width': 1.2, 'stroke-dasharray': '4 3', class: 'allocated' },
    svg,
  );
  const px = xs(r.peak.t),
    py = ys(r.peak.bytes);
  el('circle', { cx: px, cy: py, r: 4, fill: '#c0392b', class: 'peak' }, svg);
  // the peak's words on the line above the box, over the mark (moved in to fit), a dotted line down to it
  const pl = el(
    'text',
    { x: px, y: memTop - 8, class: 'peak-label', 'text-anchor': 'middle' },
    svg,
    `peak ${fmtBytes(r.peak.bytes)} (the plan: ${fmtBytes(r.planned)})`,
  );
  const plw = textWidth(pl),
    lx = Math.max(mL + plw / 2, Math.min(R - plw / 2, px));
  pl.setAttribute('x', lx);
  el('line', { x1: px, x2: px, y1: memTop - 5, y2: py - 4, stroke: '#b02a1e', 'stroke-dasharray': '1 2' }, svg);
  // the moment shown: a dashed line at its end, over the bars and the memory (not over the rows' words)
  if (cur) {
    const x = xs(cur.t1),
      spans = narrow ? [...rowY.values()].map((y) => [y, y + bar]) : [[top - 4, top + rows.length * rowH]];
    spans.push([memTop, memTop + memH]);
    el(
      'path',
      {
        d: spans.map(([y0, y1]) => `M${x},${y0}V${y1}`).join(''),
        stroke: '#1d232b',
        'stroke-dasharray': '3 3',
        fill: 'none',
        class: 'cursor',
      },
      svg,
    );
  }
  // the key, then the phases under the axis, each on a line of its own when it would not fit beside the last
  let y = memTop + memH + 16;
  const key = (x, what, attrs) => {
    el('rect', { x, y: y - 9, width: 16, height: 10, ...attrs }, svg);
    return el('text', { x: x + 20, y, class: 'axis' }, svg, what);
  };
  let x = mL;
  const k1 = key(x, 'still needed', { fill: '#e39b3a', 'fill-opacity': 0.55, stroke: '#9a5a00' });
  x += 20 + textWidth(k1) + 14;
  if (x + 140 > R) {
    x = mL;
    y += 16;
  }
  el(
    'line',
    { x1: x, x2: x + 16, y1: y - 4, y2: y - 4, stroke: '#1d232b', 'stroke-width': 1.2, 'stroke-dasharray': '4 3' },
    svg,
  );
  const k2 = el('text', { x: x + 20, y, class: 'axis' }, svg, 'allocated (the arena)');
  x += 20 + textWidth(k2) + 14;
  if (r.flops.recompute) {
    if (x + 120 > R) {
      x = mL;
      y += 16;
    }
    key(x, 're-computation', { fill: COLOR.recompute, 'fill-opacity': 0.16 });
  }
  y += 18;
  const b0 = r.moments.find((m) => m.phase === 'backward'),
    o0 = r.moments.find((m) => m.phase === 'optimizer');
  const f = el('text', { x: mL, y, class: 'axis' }, svg, `forward ${mflop(r.flops.forward)}`);
  if (b0) {
    const xb = xs(b0.t0);
    el('line', { x1: xb, x2: xb, y1: memTop, y2: memTop + memH, stroke: '#66707c' }, svg);
    const text = `backward ${mflop(r.flops.backward)} + re-computed ${mflop(r.flops.recompute)} →`;
    const t = el('text', { x: xb + 4, y, class: 'axis' }, svg, text);
    if (xb + 4 < mL + textWidth(f) + 10 || xb + 4 + textWidth(t) > R) {
      y += 15;
      t.setAttribute('y', y);
      if (xb + 4 + textWidth(t) > R) t.setAttribute('x', mL);
    }
  }
  if (o0) {
    y += 15;
    el(
      'text',
      { x: R, y, class: 'axis', 'text-anchor': 'end' },
      svg,
      `AdamW ${mflop(r.flops.optimizer)} · ${mflop(r.total)} in all`,
    );
  }
  const H = y + 8;
  svg.setAttribute('viewBox', `0 0 ${Wt} ${H}`);
  svg.setAttribute('width', Wt);
  svg.setAttribute('height', H);
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
    at = `After it: ${fmtBytes(mem.live)} still needed, ${fmtBytes(mem.top)} allocated.`;
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
  return `Backward of ${who} (${mflop(m.flops)}): the gradients of its weights and of its input; after it the block's buffers are no longer needed. ${at}`;
}
