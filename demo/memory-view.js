// memory-view.js: the memory panel -- one training step's plan by kind against the browser budget
// the user chose (from the planner worker: the engine's numbers, demo/plan.js's words), the wasm
// memory the trainer holds, one row per policy, and the refusal of a configuration that does not fit.
import { $, S } from './state.js';
import { fmtBytes, MiB } from './plan.js';
import { planner, startPlanner } from './engine-client.js';
import { readForm, budgetBytes } from './form.js';
import { POLICY_LABEL } from './charts.js';

export function showRefusal(text, fits = false) {
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

export function renderMemory() {
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
export async function refreshPlan() {
  if (!S.ready) return null;
  const seq = ++planSeq;
  const cfg = S.run ? { ...S.run.cfg, checkpointing: $('ckpt').checked, policy: $('policy').value, resolved: undefined } : readForm();
  try {
    const res = await planner.call('plan', { cfg, budget: budgetBytes() });
    if (seq !== planSeq) return res;
    S.plan = res.report;
    renderMemory();
    if (res.linear > 768 * MiB) await startPlanner(); // its memory never shrinks
    return res;
  } catch (e) {
    if (seq === planSeq) { S.plan = null; $('mem-summary').textContent = e.message; $('mem-bars').textContent = ''; $('policy-table').textContent = ''; }
    return { error: e.message };
  }
}
export let planTimer = 0;
// a form change: the last refusal is stale; plan again shortly (typing)
export const planSoon = () => { if (!S.run) showRefusal(null); clearTimeout(planTimer); planTimer = setTimeout(refreshPlan, 200); };
