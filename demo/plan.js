// plan.js: will a training configuration fit the tab's memory? The engine plans every byte of a
// step before it allocates anything, and searches what fits a budget (Model.planTrainStep:
// parameters, gradients, AdamW m and v, the activation arena under a checkpointing policy; the
// least re-computation that fits, the smallest plan, the largest batch). Here its answer is put
// into words for the page, and the teaching table plans one row per named policy. Nothing here
// computes sizes: only the engine's numbers, compared with the budget the user chose.

export const MiB = 1024 * 1024;
export const fmtBytes = (b) => (!Number.isFinite(b) ? '–' : b >= 1024 * MiB ? `${(b / (1024 * MiB)).toFixed(2)} GiB` : `${(b / MiB).toFixed(1)} MiB`);
const label = (p) => (p.startsWith('budget:') ? `budget:${fmtBytes(Number(p.slice(7)))}` : p);

/** The engine's plan of one training step of `batch` images under `policy`; with `budget` (bytes
 * for the whole tab) less `extra` (what the tab needs besides the plan), its fit search too. */
export function planStep(model, { batch, maskRatio, policy, budget = 0, extra = 0 }) {
  return model.planTrainStep({ batch, maskRatio, policy, budget: budget ? Math.max(1, Math.floor(budget - extra)) : 0 });
}

/** 'auto' -> budget:BYTES with the bytes the budget leaves for activations (at least 1). */
export function resolvePolicy(model, policy, { batch, maskRatio, budget, extra = 0 }) {
  if (policy !== 'auto') return policy;
  const pl = planStep(model, { batch, maskRatio, policy: 'none' });
  return `budget:${Math.max(1, Math.floor(budget - (pl.params + pl.grads + pl.optimizer + extra)))}`;
}

// every policy the engine's budget search tries for this model (Model.namedPolicies), and the one chosen
function candidatePolicies(model, chosen) {
  const list = model.namedPolicies();
  if (chosen && !list.includes(chosen)) list.push(chosen);
  return list;
}

/**
 * fitReport(model, { batch, maskRatio, policy, budget, extra }) -> {
 *   fits, policy, need, budget, plan: {params, grads, optimizer, activations, total},
 *   rows: [{ policy, activations, total, need, fits }]   every policy the engine tries, for teaching
 *   suggestion: { policy, fit, named } | { batch, policy } | null, message }
 * `extra`: bytes the tab needs besides the plan (the wasm module's own memory, the batch).
 */
export function fitReport(model, { batch, maskRatio, policy, budget, extra = 0 }) {
  policy = resolvePolicy(model, policy, { batch, maskRatio, budget, extra });
  const rows = [];
  for (const p of candidatePolicies(model, policy)) {
    try {
      const pl = planStep(model, { batch, maskRatio, policy: p });
      rows.push({ policy: p, activations: pl.activations, total: pl.total, need: pl.total + extra, fits: pl.policyMet && pl.total + extra <= budget });
    } catch (e) { rows.push({ policy: p, error: e.message }); }
  }
  let r;
  try { r = planStep(model, { batch, maskRatio, policy, budget, extra }); } catch (e) {
    return { fits: false, policy, budget, rows, plan: null, need: NaN, suggestion: null, message: `policy ${policy}: ${e.message}` };
  }
  const plan = { params: r.params, grads: r.grads, optimizer: r.optimizer, activations: r.activations, total: r.total };
  const need = r.total + extra;
  const out = { fits: r.fits, policy, need, budget, plan, rows, suggestion: null, message: '' };
  const parts = `parameters ${fmtBytes(plan.params)} + gradients ${fmtBytes(plan.grads)} + AdamW ${fmtBytes(plan.optimizer)} + ` +
    `activations ${fmtBytes(plan.activations)} + wasm/runtime ${fmtBytes(extra)}`;
  if (out.fits) {
    out.message = `Fits: ${fmtBytes(need)} of ${fmtBytes(budget)} (${parts}).`;
    return out;
  }
  const fixed = plan.params + plan.grads + plan.optimizer + extra;
  const head = `Does not fit: with checkpointing '${label(policy)}' one step ${r.policyMet ? 'needs' : 'needs at least'} ${fmtBytes(need)} (${parts}), the budget is ${fmtBytes(budget)}.`;
  if (fixed >= budget) {
    out.message = `${head} Parameters, gradients and AdamW state alone need ${fmtBytes(fixed)}: no checkpointing policy helps; choose a smaller model or a larger budget.`;
    return out;
  }
  if (r.fit) {
    const named = rows.filter((row) => row.fits && row.policy !== 'none').map((row) => row.policy);
    const least = `the least re-computation that fits: ${fmtBytes(r.fit.total + extra)}`;
    out.suggestion = { policy: named[0] || r.fit.policy, fit: r.fit.policy, named };
    out.message = `${head} It fits with checkpointing ` + (named[0] === r.fit.policy ? `'${named[0]}' (${least}).`
      : (named.length ? `'${named[0]}' (${fmtBytes(rows.find((row) => row.policy === named[0]).need)}), or ` : '') + `'${label(r.fit.policy)}' (${least}).`);
    return out;
  }
  out.suggestion = r.maxBatch > 0 ? { batch: r.maxBatch, policy: r.least.policy } : null;
  out.message = `${head} Even the most memory-saving checkpointing ('${r.least.policy}', activations ${fmtBytes(r.least.activations)}) does not fit` +
    (r.maxBatch > 0 ? `; batch ${r.maxBatch} would fit.` : '; choose a smaller model.');
  return out;
}
