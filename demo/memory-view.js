// memory-view.js: the memory panel -- what the tab's trainer will hold for one configuration, part
// by part, against the browser budget the user chose (the planner worker: the engine's plan plus
// demo/plan.js's parts), the wasm memory the trainer holds now, one row per policy, and the refusal
// of a configuration that does not fit, with the fix it offers one click away.
import { $, S, page, clearStale } from './state.js';
import { fmtBytes, policyLabel, MiB } from './plan.js';
import { recomputeText as fmtRecompute, mflop } from '../web/widget/index.js';
import { planner, startPlanner } from './engine-client.js';
import { readForm, budgetBytes } from './form.js';
import { configKey } from './worker-data.js';

let fixAction = null;
/** A refusal (null: none). fix: { label, apply } offered as a button. */
export function showRefusal(text, fix = null) {
  $('refusal').hidden = !text;
  $('refusal-text').textContent = text || '';
  const b = $('refusal-fix');
  b.hidden = !fix;
  b.textContent = fix ? fix.label : '';
  fixAction = fix ? fix.apply : null;
}
export function wireRefusal() {
  $('refusal-fix').addEventListener('click', () => {
    const f = fixAction;
    // the button goes with the refusal: the focus goes to Start, which the fix presses
    $('start').focus();
    showRefusal(null);
    if (f) f();
  });
}

const COLORS = {
  'wasm module': '#b8c0ca',
  parameters: 'var(--params)',
  gradients: 'var(--grads)',
  'AdamW m, v': 'var(--opt)',
  activations: 'var(--act)',
  batch: '#8d99a6',
  reconstructions: '#c9a7e0',
  'saved state': '#7fb8a4',
  'its checked copy (reload)': '#a9d3c4',
};

function bar(label, segs, scale, limit) {
  const wrap = document.createElement('div');
  const l = document.createElement('div');
  l.className = 'bar-label';
  l.textContent = label;
  const b = document.createElement('div');
  b.className = 'bar';
  b.setAttribute('aria-hidden', 'true');
  wrap.append(l, b);
  let x = 0;
  for (const [w, color, title] of segs) {
    const s = document.createElement('div');
    s.className = 'seg';
    s.style.left = `${(100 * x) / scale}%`;
    s.style.width = `${Math.max(0, (100 * Math.min(w, scale - x)) / scale)}%`;
    s.style.background = color;
    s.title = `${title}: ${fmtBytes(w)}`;
    b.appendChild(s);
    x += w;
  }
  if (limit != null) {
    const lim = document.createElement('div');
    lim.className = 'limit';
    lim.style.left = `${Math.min(100, (100 * limit) / scale)}%`;
    lim.title = 'budget';
    b.appendChild(lim);
  }
  return wrap;
}

/** FLOPs the policy re-computes per step: the engine's plan (the same number as its recorded step:
 * tests/test_memory.c), with their share of a forward once the teaching view has recorded one. */
function recomputeText(flops) {
  const R = S.teach && S.teach.R,
    fwd = R && R.none && S.teach.key === S.planKey ? R.none.flops.forward : null;
  return fwd ? fmtRecompute(flops, fwd) : flops ? mflop(flops) : '0: nothing re-computed';
}

export function renderMemory() {
  const r = S.plan,
    budget = budgetBytes(),
    bars = $('mem-bars');
  bars.textContent = '';
  const t = $('policy-table');
  t.querySelectorAll('tr').forEach((tr) => tr.remove());
  if (!r || !r.plan) {
    $('mem-summary').textContent = r ? r.message : '';
    return;
  }
  const finite = (v) => (Number.isFinite(v) ? v : 4 * 1024 * MiB);
  const lin = S.mem ? S.mem.linear : 0;
  const gpu = S.mem && S.mem.gpu != null ? S.mem.gpu : null; // the GPU bytes held (webgpu backend)
  const scale = Math.max(budget, finite(r.need), lin, gpu || 0) * 1.04;
  const sum = $('mem-summary');
  const row = r.rows.find((x) => x.policy === r.policy);
  sum.textContent =
    `The trainer under '${policyLabel(r.policy)}' at batch ${S.run ? S.run.cfg.batch : readForm().batch} will hold ${fmtBytes(row ? row.need : r.need)} while training` +
    (r.keep && row && row.keepNeed !== row.need
      ? ` and ${fmtBytes(row.keepNeed)} when it keeps its state for a reload`
      : '') +
    ` of the ${fmtBytes(budget)} budget (${r.fits ? 'fits' : 'does not fit'})` +
    (r.fits && !r.keep ? '; not kept for a reload: saving its state would not fit.' : '.') +
    (r.policy !== 'none' && r.plan ? ` It re-computes ${recomputeText(r.plan.recomputeFlops)} per step.` : '') +
    (r.policy.startsWith('budget:') && r.fits && !r.plan.recomputeFlops
      ? ' The budget search chose to keep everything: the same computation as none.'
      : '');
  sum.classList.toggle('bad', !r.fits);
  bars.appendChild(
    bar(
      `planned: ${r.parts
        .filter(([, b]) => b > 0)
        .map(([n, b]) => `${n} ${fmtBytes(b)}`)
        .join(' · ')}`,
      r.parts.map(([n, b]) => [finite(b), COLORS[n] || '#999', n]),
      scale,
      budget,
    ),
  );
  if (S.mem && S.run) {
    bars.appendChild(
      bar(
        `this tab's trainer now: wasm memory ${fmtBytes(lin)}` +
          (S.mem.arena ? ` (activation arena ${fmtBytes(S.mem.arena.capacity)})` : '') +
          (lin > budget
            ? `: over the ${fmtBytes(budget)} budget chosen since (wasm memory never shrinks): Reset, and the next run starts a fresh engine`
            : lin > r.need
              ? `: more than planned for '${policyLabel(r.policy)}', as wasm memory never shrinks: it keeps what an earlier policy or run of this tab used`
              : ''),
        [[lin, '#8fb3e8', 'wasm linear memory']],
        scale,
        budget,
      ),
    );
    // on WebGPU the step's parameters, gradients, AdamW state and arena are GPU buffers laid out
    // as the plan says; wasm memory keeps the state the last sync brought back
    if (gpu != null)
      bars.appendChild(
        bar(
          `on the GPU now: ${fmtBytes(gpu)} of buffers (parameters, gradients, AdamW state, the step's arena and workspace, read-back buffers: what vitrine plan --backend webgpu plans)`,
          [[gpu, '#e0a458', 'GPU buffers']],
          scale,
          budget,
        ),
      );
  }
  const leg = document.createElement('div');
  leg.className = 'legend';
  for (const [n] of r.parts) {
    const s = document.createElement('span');
    s.innerHTML = `<i style="background:${COLORS[n] || '#999'}"></i>`;
    s.append(n);
    leg.appendChild(s);
  }
  leg.insertAdjacentHTML(
    'beforeend',
    '<span><i style="background:var(--bad)"></i>budget</span><span>(wasm memory grows, never shrinks)</span>',
  );
  bars.appendChild(leg);
  const head = document.createElement('tr');
  for (const h of [
    'policy',
    'activations',
    're-computed per step',
    'training',
    'kept for a reload',
    'fits the budget',
  ]) {
    const th = document.createElement('th');
    th.textContent = h;
    th.scope = 'col';
    head.appendChild(th);
  }
  t.appendChild(head);
  for (const row of r.rows) {
    const tr = document.createElement('tr');
    if (row.policy === r.policy) tr.className = 'current';
    tr.dataset.policy = row.policy;
    const heads = ['policy', 'activations', 're-computed per step', 'training', 'kept for a reload', 'fits the budget'];
    const cells = row.error
      ? [policyLabel(row.policy), row.error, '', '', '', '']
      : [
          policyLabel(row.policy),
          fmtBytes(row.activations),
          recomputeText(row.recomputeFlops),
          fmtBytes(row.need),
          fmtBytes(row.keepNeed),
          row.fits ? 'yes' : 'no',
        ];
    cells.forEach((c, i) => {
      const td = document.createElement(i ? 'td' : 'th');
      if (!i) td.scope = 'row';
      td.dataset.label = heads[i];
      td.textContent = c;
      if (i === 5) td.className = row.fits ? 'yes' : 'no';
      tr.appendChild(td);
    });
    t.appendChild(tr);
  }
}

let planSeq = 0;
/** Plans the form's configuration (or the run's, with the current checkpointing and budget). */
export async function refreshPlan(policy = null) {
  if (!S.ready) return null;
  const seq = ++planSeq;
  const form = readForm();
  const cfg = S.run
    ? {
        ...S.run.cfg,
        checkpointing: (policy || form.policy) !== 'none',
        policy: policy || form.policy,
        resolved: undefined,
      }
    : { ...form, ...(policy ? { policy, checkpointing: policy !== 'none' } : {}) };
  try {
    const res = await planner.call('plan', { cfg, budget: budgetBytes() });
    if (seq !== planSeq) return res;
    S.plan = res.report;
    try {
      S.planKey = configKey(cfg);
    } catch {
      S.planKey = null;
    }
    renderMemory();
    clearStale();
    // a timm preset's step takes seconds: the page says about how many before it starts (teach.js: showExpect)
    S.stepEstimate = res.stepSeconds == null ? null : { seconds: res.stepSeconds, batch: cfg.batch };
    page.showExpect();
    if (res.linear > 768 * MiB) await startPlanner(); // its memory never shrinks
    return res;
  } catch (e) {
    if (seq === planSeq) {
      S.plan = null;
      $('mem-summary').textContent = e.message;
      $('mem-bars').textContent = '';
    }
    return { error: e.message };
  }
}
export let planTimer = 0;
// a form change: the last refusal is stale; plan again shortly (typing)
export const planSoon = () => {
  if (!S.run) showRefusal(null);
  clearStale();
  clearTimeout(planTimer);
  planTimer = setTimeout(refreshPlan, 200);
};
