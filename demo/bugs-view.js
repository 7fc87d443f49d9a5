// bugs-view.js: the results of the two lightly bugs run live (teach-worker.js maskDemo, frozenDemo)
// as tables, a small chart and sentences: what a checkpoint that dropped the AIM mask computed
// instead; and, behind a frozen preprocessing, what PyTorch's re-entrant checkpoint computed (no
// gradient for the checkpointed blocks) beside vitrine's checkpointed step, the gradients that
// differ named.
const NS = 'http://www.w3.org/2000/svg';
const g3 = (v) => (v === 0 ? '0' : Math.abs(v) < 1e-3 ? v.toExponential(2) : v.toPrecision(3));

function table(t, head, rows) {
  t.querySelectorAll('tr').forEach((tr) => tr.remove());
  t.classList.add('stack');
  const h = t.appendChild(document.createElement('tr'));
  for (const c of head) {
    const th = document.createElement('th');
    th.scope = 'col';
    th.textContent = c;
    h.appendChild(th);
  }
  for (const r of rows) {
    const tr = t.appendChild(document.createElement('tr'));
    r.forEach((c, i) => {
      const td = document.createElement(i ? 'td' : 'th');
      if (!i) td.scope = 'row';
      td.dataset.label = head[i];
      td.textContent = c;
      tr.appendChild(td);
    });
  }
}

/** Bars of the largest output difference per token of image 0, the prefix boundary marked; y: that
 * difference (0 to its largest), x: the token. */
function rowChart(d, prefix) {
  const svg = document.createElementNS(NS, 'svg'),
    W = 460,
    L = 44,
    T = 18,
    H = 90,
    n = d.length,
    mx = Math.max(...d) || 1;
  svg.setAttribute('viewBox', `0 0 ${W} ${T + H + 34}`);
  svg.setAttribute('class', 'rowchart');
  svg.setAttribute('role', 'img');
  svg.setAttribute(
    'aria-label',
    `largest difference per token of the first image, without the mask against with it: ` +
      `${d.filter((v) => v > 0).length} of ${n} tokens differ; the largest, ${g3(mx)}, at token ${d.indexOf(mx)}; the prefix is tokens 0 to ${prefix - 1}`,
  );
  const add = (name, attrs, text = null) => {
    const e = document.createElementNS(NS, name);
    for (const [k, x] of Object.entries(attrs)) e.setAttribute(k, x);
    if (text != null) e.textContent = text;
    svg.appendChild(e);
    return e;
  };
  add('text', { x: 0, y: 11, class: 'axis' }, 'largest |output difference| in the token (without the mask − with it)');
  add('line', { x1: L, x2: L, y1: T, y2: T + H, stroke: '#66707c' });
  add('text', { x: L - 4, y: T + 8, class: 'axis', 'text-anchor': 'end' }, g3(mx));
  add('text', { x: L - 4, y: T + H, class: 'axis', 'text-anchor': 'end' }, '0');
  const bw = (W - L - 2) / n;
  d.forEach((v, i) => {
    const h = (H * v) / mx;
    add('rect', {
      x: L + 2 + i * bw,
      y: T + H - h,
      width: Math.max(1, bw - 1),
      height: h,
      fill: i < prefix ? '#8a4fd1' : '#c0392b',
    });
  });
  add('text', { x: L, y: T + H + 14, class: 'axis' }, `token 0 … ${n - 1} of the first image:`);
  add('text', { x: L, y: T + H + 28, class: 'axis' }, 'purple, the prefix (both ways); red, the causal part');
  return svg;
}

export function renderMask(res) {
  const d = res.dropped,
    c = res.ckpt;
  table(
    document.getElementById('mask-result'),
    ['compared with the masked step', 'outputs: largest |difference|', 'gradients: largest |difference|', 'same bits?'],
    [
      [
        'without mask / is_causal (what the buggy checkpoint computed)',
        `${g3(d.outMax)} (outputs up to ${g3(d.outScale)}); ${d.rowsDiffer} of ${res.tokens} tokens differ`,
        `${g3(d.gradMax)} (gradients up to ${g3(d.gradScale)})`,
        'no',
      ],
      [
        "vitrine's checkpointed step, mask kept ('block')",
        g3(c.outMax),
        g3(c.gradMax),
        c.outSame && c.gradSame ? `yes: outputs and all ${c.tensors} gradients` : 'NO',
      ],
    ],
  );
  const box = document.getElementById('bug-mask');
  box.querySelectorAll('svg.rowchart').forEach((s) => s.remove());
  box.insertBefore(rowChart(d.rowMax, res.prefix[0]), document.getElementById('mask-prose'));
  document.getElementById('mask-prose').textContent =
    `An AIM encoder of this page's size (depth ${res.depth}, ${res.N} tokens an image), its prefixes ` +
    `${res.prefix.join(' and ')} tokens long. Without the mask every token of every image attends to all the others, so every output differs ` +
    `(${d.rowsDiffer} of ${res.tokens}), and so does every gradient: the encoder's blocks' gradient norms read ` +
    `${d.norms.map(g3).join(', ')} instead of ${res.masked.norms.map(g3).join(', ')}. The differences are small at initialisation, where ` +
    'attention is spread almost evenly, and grow as it sharpens; small or not, it is another model being trained. With the mask kept through ' +
    `the re-computation, the checkpointed step is the plain one bit for bit.`;
}

/** Frozen preprocessing: per encoder block, its gradient under vitrine's checkpointed step and under
 * PyTorch's re-entrant one (lightly before the fix), then the rest of the model; the gradients
 * that differ named. */
export function renderFrozen(res) {
  const norm = (ts) => Math.sqrt(ts.reduce((s, t) => s + t.fixed * t.fixed, 0));
  const rows = [];
  for (let b = 0; b < res.depth; b++) {
    const ts = res.tensors.filter((t) => t.block === b),
      lost = ts.filter((t) => t.bug == null);
    rows.push([
      `encoder block ${b} (${ts.length} tensors)`,
      g3(norm(ts)),
      lost.length === ts.length ? 'no gradient' : g3(Math.sqrt(ts.reduce((s, t) => s + (t.bug || 0) ** 2, 0))),
      ts.every((t) => t.same) ? 'no: the same bits' : `yes: ${ts.filter((t) => !t.same).length} of ${ts.length}`,
    ]);
  }
  const rest = res.tensors.filter((t) => t.block < 0);
  rows.push([
    `the rest: final norm, decoder / head (${rest.length} tensors)`,
    g3(norm(rest)),
    rest.every((t) => t.bug != null) ? g3(Math.sqrt(rest.reduce((s, t) => s + t.bug * t.bug, 0))) : 'some missing',
    rest.every((t) => t.same) ? 'no: the same bits' : `yes: ${rest.filter((t) => !t.same).length} of ${rest.length}`,
  ]);
  table(
    document.getElementById('frozen-result'),
    [
      'gradients, preprocessing frozen',
      "vitrine, checkpointed ('block'): gradient norm",
      'PyTorch re-entrant (lightly before the fix)',
      'differ?',
    ],
    rows,
  );
  const list = document.getElementById('frozen-differ');
  list.textContent = '';
  const sum = document.createElement('summary');
  sum.textContent = `The ${res.differ.length} gradients that differ (vitrine has them; the re-entrant checkpoint left them empty)`;
  const ul = document.createElement('ul');
  for (const n of res.differ) {
    const li = document.createElement('li');
    li.textContent = n;
    ul.appendChild(li);
  }
  list.append(sum, ul);
  list.hidden = !res.differ.length;
  document.getElementById('frozen-prose').textContent =
    `${res.frozen.join(', ')} frozen (${res.frozenCount} tensors without a gradient, ` +
    `${res.patchGrad ? 'yet one has a gradient: WRONG' : 'none of them given one'}), so the first block's input needs no gradient. ` +
    `Under PyTorch's re-entrant checkpoint every checkpointed encoder block then gets no gradient at all: ${res.differ.length} of the ${res.trainable} tensors ` +
    'that should train stay as they are, with no error; the loss and every gradient after the blocks are unchanged, which is why it went unnoticed. ' +
    `vitrine's checkpointed step gives every block its gradient, and all ${res.trainable} gradients and the loss (${g3(res.loss)}) are ` +
    `${res.same && res.lossSame ? 'the same bits' : 'NOT the same bits'} as without checkpointing.`;
}
