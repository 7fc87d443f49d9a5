// bugs-view.js: the results of the two lightly bugs run live (teach-worker.js maskDemo, frozenDemo)
// as tables, a small chart and sentences: what a checkpoint that dropped the AIM mask computed
// instead, and that checkpointed blocks behind a frozen patch embedding still get their gradients.
const NS = 'http://www.w3.org/2000/svg';
const g3 = (v) => (v === 0 ? '0' : Math.abs(v) < 1e-3 ? v.toExponential(2) : v.toPrecision(3));

function table(t, head, rows) {
  t.querySelectorAll('tr').forEach((tr) => tr.remove());
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
      td.textContent = c;
      tr.appendChild(td);
    });
  }
}

/** Bars of the largest output difference per token of image 0, the prefix boundary marked. */
function rowChart(d, prefix) {
  const svg = document.createElementNS(NS, 'svg'),
    W = 460,
    H = 90,
    n = d.length,
    mx = Math.max(...d) || 1;
  svg.setAttribute('viewBox', `0 0 ${W} ${H + 18}`);
  svg.setAttribute('class', 'rowchart');
  svg.setAttribute('role', 'img');
  svg.setAttribute(
    'aria-label',
    `largest difference per token of the first image, without the mask against with it: ` +
      `${d.filter((v) => v > 0).length} of ${n} tokens differ; the largest, ${g3(mx)}, at token ${d.indexOf(mx)}; the prefix is tokens 0 to ${prefix - 1}`,
  );
  const bw = W / n;
  d.forEach((v, i) => {
    const r = document.createElementNS(NS, 'rect');
    const h = (H * v) / mx;
    Object.entries({
      x: i * bw,
      y: H - h,
      width: Math.max(1, bw - 1),
      height: h,
      fill: i < prefix ? '#8a4fd1' : '#c0392b',
    }).forEach(([k, x]) => r.setAttribute(k, x));
    svg.appendChild(r);
  });
  const t = document.createElementNS(NS, 'text');
  t.setAttribute('x', 0);
  t.setAttribute('y', H + 14);
  t.setAttribute('class', 'axis');
  t.textContent = `token 0 … ${n - 1}: purple, the prefix (both ways); red, the causal part`;
  svg.appendChild(t);
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

export function renderFrozen(res) {
  const rows = res.plain.map((v, b) => [
    `encoder block ${b}`,
    g3(v),
    g3(res.ckpt[b]),
    v > 0 && res.ckpt[b] > 0 ? 'yes' : 'NO',
  ]);
  table(
    document.getElementById('frozen-result'),
    ['with the patch embedding frozen', "gradient norm, plain ('none')", "checkpointed ('block')", 'gets a gradient?'],
    rows,
  );
  document.getElementById('frozen-prose').textContent =
    `${res.frozen.join(', ')} frozen (${res.frozenCount} tensors without a gradient, ` +
    `${res.patchGrad ? 'yet one has a gradient: WRONG' : 'none of them given one'}); ${res.trainable} tensors train. Every block gets its gradient ` +
    `under checkpointing, and all ${res.trainable} gradients and the loss (${g3(res.loss)}) are ${res.same && res.lossSame ? 'the same bits' : 'NOT the same bits'} ` +
    "as without it. Under PyTorch's re-entrant checkpoint these blocks would have had no gradient.";
}
