// plan.js: will a training configuration fit the tab's memory? Pure functions over a live Model
// (vitrine.js), shared by the planner and the trainer worker. The engine plans every byte of a
// step before it allocates anything (Model.plan): parameters, gradients, AdamW m and v, and the
// activation arena under a checkpointing policy. Here that plan is compared with the browser
// budget the user chose, and when it does not fit we look for a policy (or a batch) that does.

export const MiB = 1024 * 1024;
export const fmtBytes = (b) => (!Number.isFinite(b) ? 'more than 4 GiB (wasm32\'s limit)' : b >= 1024 * MiB ? `${(b / (1024 * MiB)).toFixed(2)} GiB` : `${(b / MiB).toFixed(1)} MiB`);

/** The sizes plan('loss') needs for one training step of `batch` images, as vt_train_step draws
 * them: MAE keeps n_keep = int((float)(L - 1) * (1.0f - ratio)) + 1 tokens (lightly's
 * random_token_mask, the class token kept); AIM gives a prefix mask. */
export function stepSizes(model, batch, maskRatio) {
  const { prefix, img, patch } = model.dims;
  const L = prefix + (img / patch) ** 2;
  if (model.kind === 'mae') {
    const f = Math.fround;
    const nKeep = Math.min(L, Math.trunc(f(f(L - 1) * f(1 - f(maskRatio)))) + 1);
    return { batch, tokensKept: nKeep, tokensMasked: L - nKeep };
  }
  return { batch, mask: true };
}

/** The plan of one step under `policy` (the model's policy is left at `policy`). The engine's
 * byte counts are size_t, 32 bits in wasm32: a plan past 4 GiB wraps around. Such a step cannot
 * run in wasm32 at all; we detect the wrap (activations grow about linearly with the batch, so
 * compare with batch 1 scaled) and report Infinity. The total is summed here, not taken. */
export function planStep(model, policy, sizes) {
  model.setGradCheckpointing(policy);
  const pl = model.plan('loss', sizes);
  if (sizes.batch > 1) {
    const one = model.plan('loss', { ...sizes, batch: 1 });
    if (one.activations * sizes.batch * 0.5 > pl.activations || one.activations * sizes.batch >= 2 ** 32) pl.activations = Infinity;
  }
  pl.total = pl.params + pl.grads + pl.optimizer + pl.activations;
  return pl;
}

/** 'auto' -> budget:BYTES with the bytes the budget leaves for activations (at least 1). */
export function resolvePolicy(model, policy, sizes, budget, extra = 0) {
  if (policy !== 'auto') return policy;
  const pl = planStep(model, 'none', sizes);
  return `budget:${Math.max(1, Math.floor(budget - (pl.params + pl.grads + pl.optimizer + extra)))}`;
}

export function candidatePolicies(depth, chosen) {
  const list = ['none', 'selective', 'block', 'sqrt'];
  for (const k of [2, 4]) if (k < depth) list.push(`every:${k}`);
  if (chosen && !list.includes(chosen)) list.push(chosen);
  return list;
}

/**
 * fitReport(model, { batch, maskRatio, policy, budget, extra }) -> {
 *   fits, policy, need, budget, plan: {params, grads, optimizer, activations, total},
 *   rows: [{ policy, activations, total, need, fits }]   every named policy, for teaching
 *   suggestion: { policy, text } | null, message }
 * `extra`: bytes the tab needs besides the plan (the wasm module's own memory, the batch).
 * The model's checkpointing policy is changed; the caller restores it.
 */
export function fitReport(model, { batch, maskRatio, policy, budget, extra = 0 }) {
  const sizes = stepSizes(model, batch, maskRatio);
  policy = resolvePolicy(model, policy, sizes, budget, extra);
  const rows = [];
  for (const p of candidatePolicies(model.dims.depth, policy)) {
    try {
      const pl = planStep(model, p, sizes);
      rows.push({ policy: p, activations: pl.activations, total: pl.total, need: pl.total + extra, fits: pl.total + extra <= budget });
    } catch (e) { rows.push({ policy: p, error: e.message }); }
  }
  let plan;
  try { plan = planStep(model, policy, sizes); } catch (e) {
    return { fits: false, policy, budget, rows, plan: null, need: NaN, suggestion: null, message: `policy ${policy}: ${e.message}` };
  }
  const need = plan.total + extra;
  const out = { fits: need <= budget, policy, need, budget, plan, rows, suggestion: null, message: '' };
  const parts = `parameters ${fmtBytes(plan.params)} + gradients ${fmtBytes(plan.grads)} + AdamW ${fmtBytes(plan.optimizer)} + ` +
    `activations ${fmtBytes(plan.activations)} + wasm/runtime ${fmtBytes(extra)}`;
  if (out.fits) {
    out.message = `Fits: ${fmtBytes(need)} of ${fmtBytes(budget)} (${parts}).`;
    return out;
  }
  const fixed = plan.params + plan.grads + plan.optimizer + extra;
  const avail = budget - fixed;
  let head = `Does not fit: with checkpointing '${policy}' one step needs ${fmtBytes(need)} (${parts}), the budget is ${fmtBytes(budget)}.`;
  if (avail <= 0) {
    out.message = `${head} Parameters, gradients and AdamW state alone need ${fmtBytes(fixed)}: no checkpointing policy helps; choose a smaller model or a larger budget.`;
    return out;
  }
  // budget:BYTES = the least re-computation whose activations fit (the engine searches)
  const bp = `budget:${Math.floor(avail)}`;
  try {
    const pl = planStep(model, bp, sizes);
    const named = rows.filter((r) => r.fits && r.policy !== 'none').map((r) => r.policy);
    out.suggestion = { policy: named[0] || bp, budgetPolicy: bp, activations: pl.activations, need: pl.total + extra, named };
    out.message = `${head} It fits with checkpointing ${named.length ? `'${named[0]}' (${fmtBytes(rows.find((r) => r.policy === named[0]).need)})` : ''}` +
      `${named.length ? ', or ' : ''}'budget:${fmtBytes(avail)}' (the least re-computation that fits: ${fmtBytes(pl.total + extra)}).`;
    return out;
  } catch (e) {
    const m = /needs (\d+) bytes \(policy ([^)]+)\)/.exec(e.message);
    const least = m ? Number(m[1]) : null;
    // the largest batch that fits under the best policy
    let lo = 0, hi = batch - 1;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      let ok = false;
      try { planStep(model, bp, stepSizes(model, mid, maskRatio)); ok = true; } catch { ok = false; }
      if (ok) lo = mid; else hi = mid - 1;
    }
    out.suggestion = lo > 0 ? { batch: lo, policy: m ? m[2] : 'block' } : null;
    out.message = `${head} Even the most memory-saving checkpointing${m ? ` ('${m[2]}', activations ${fmtBytes(least)})` : ''} does not fit` +
      (lo > 0 ? `; batch ${lo} would fit (with checkpointing 'budget:${fmtBytes(avail)}').` : '; choose a smaller model.');
    return out;
  }
}
