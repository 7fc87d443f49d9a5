// plan.js: will a training configuration fit the tab's memory? The engine plans every byte of a
// step before it allocates anything, and searches what fits a budget (Model.planTrainStep:
// parameters, gradients, AdamW m and v, the activation arena under a checkpointing policy; the
// least re-computation that fits, the smallest plan, the largest batch). The tab's trainer holds
// more than the step: the wasm module itself, the batch copied in, the reconstructions read out,
// and -- to keep the run for a reload -- the training state serialised in wasm memory (and, on the
// reload, read back beside its checked copy). Here all of that is added up, named part by part, so
// that the budget is a hard limit on the trainer's wasm memory (tests/node/demo-plan.test.mjs drives
// a real engine through the trainer's sequence and checks it stays under this reach), and the
// engine's answer is put into words for the page.

// one way to write bytes and policy names, the checkpointing widget's (web/widget/format.js)
export { MiB, fmtBytes, policyLabel } from '../web/widget/index.js';
import { MiB, fmtBytes, policyLabel } from '../web/widget/index.js';

/** The engine's plan of one training step of `batch` images under `policy`; with `budget` (bytes
 * for the whole tab) less `extra` (what the tab needs besides the plan), its fit search too. */
export function planStep(model, { batch, maskRatio, policy, budget = 0, extra = 0 }) {
  return model.planTrainStep({
    batch,
    maskRatio,
    policy,
    budget: budget ? Math.max(1, Math.floor(budget - extra)) : 0,
  });
}

/** 'auto' -> budget:BYTES with the bytes the budget leaves for activations (at least 1). */
export function resolvePolicy(model, policy, { batch, maskRatio, budget, extra = 0 }) {
  if (policy !== 'auto') return policy;
  const pl = planStep(model, { batch, maskRatio, policy: 'none' });
  return `budget:${Math.max(1, Math.floor(budget - (pl.params + pl.grads + pl.optimizer + extra)))}`;
}

/** Bytes of the training state file (vt_train_state_save: parameters, AdamW m and v, a safetensors
 * header), an upper bound: the header's entries (name, dtype, shape, offsets, a CRC each) are
 * counted at 2 x (name + 8) + 160 bytes, its metadata (configs, step, RNG) at 8 KiB. */
export function stateBytes(model, plan) {
  let header = 8192;
  for (const p of model.params()) header += (p.requiresGrad ? 3 : 1) * (2 * (p.name.length + 8) + 160);
  return plan.params + plan.optimizer + header;
}

/** What the tab's trainer holds besides the engine's plan, for `batch` images: the wasm module's
 * own memory (`baseline`: code, stack, the thread pool's stacks, measured when the engine starts)
 * with 1 MiB for the engine's small allocations (tables, a step's token indices, the allocator's
 * pages: 0.2 MiB measured), the batch copied into wasm memory and (MAE / AIM) the two images per
 * batch image read out for the reconstructions. */
export const BOOKKEEPING = MiB;
export function tabExtras(model, { batch, baseline }) {
  const { img, chans } = model.dims,
    input = batch * chans * img * img * 4;
  return {
    baseline: baseline + BOOKKEEPING,
    input,
    recon: model.kind === 'mae' || model.kind === 'aim' ? 2 * input : 0,
  };
}
const trainExtra = (x) => x.baseline + x.input + x.recon;

/** The wasm memory the trainer reaches: training alone, and kept for a reload (a save holds the
 * state file beside the step's memory; a reload holds the file and the engine's checked copy of
 * parameters and AdamW before any step). parts: [name, bytes] adding up to `keep`. */
export function tabReach(plan, x, state) {
  const fixed = x.baseline + plan.params + plan.grads + plan.optimizer;
  const train = fixed + plan.activations + x.input + x.recon;
  const save = fixed + plan.activations + x.input + Math.max(x.recon, state);
  const reload = fixed + state + plan.params + plan.optimizer;
  const keep = Math.max(save, reload);
  const parts = [
    ['wasm module', x.baseline],
    ['parameters', plan.params],
    ['gradients', plan.grads],
    ['AdamW m, v', plan.optimizer],
  ];
  if (save >= reload)
    parts.push(
      ['activations', plan.activations],
      ['batch', x.input],
      [x.recon >= state ? 'reconstructions' : 'saved state', Math.max(x.recon, state)],
    );
  else parts.push(['saved state', state], ['its checked copy (reload)', plan.params + plan.optimizer]);
  return {
    train,
    keep,
    parts,
    trainParts: [
      ...parts.slice(0, 4),
      ['activations', plan.activations],
      ['batch', x.input],
      ['reconstructions', x.recon],
    ],
  };
}

// every policy the engine's budget search tries for this model (Model.namedPolicies), and the one chosen
function candidatePolicies(model, chosen) {
  const list = model.namedPolicies();
  if (chosen && !list.includes(chosen)) list.push(chosen);
  return list;
}

/**
 * fitReport(model, { batch, maskRatio, policy, budget, baseline }) -> {
 *   fits, keep (the run is kept for a reload), policy, need (the trainer's wasm memory), budget,
 *   plan: {params, grads, optimizer, activations, total, recomputeFlops}, parts: [[name, bytes]],
 *   rows: [{ policy, activations, recomputeFlops, need, fits }]   every policy the engine tries
 *   suggestion: { policy, batch, need } | null (the fix offered with one click), message }
 */
export function fitReport(model, { batch, maskRatio, policy, budget, baseline }) {
  const x = tabExtras(model, { batch, baseline }),
    extra = trainExtra(x);
  policy = resolvePolicy(model, policy, { batch, maskRatio, budget, extra });
  const reachOf = (pl) => tabReach(pl, x, stateBytes(model, pl));
  const rows = [];
  for (const p of candidatePolicies(model, policy)) {
    try {
      const pl = planStep(model, { batch, maskRatio, policy: p }),
        r = reachOf(pl);
      rows.push({
        policy: p,
        activations: pl.activations,
        recomputeFlops: pl.recomputeFlops,
        need: r.train,
        keepNeed: r.keep,
        fits: pl.policyMet && r.train <= budget,
      });
    } catch (e) {
      rows.push({ policy: p, error: e.message });
    }
  }
  let r;
  try {
    r = planStep(model, { batch, maskRatio, policy, budget, extra });
  } catch (e) {
    return {
      fits: false,
      keep: false,
      policy,
      budget,
      rows,
      plan: null,
      parts: [],
      need: NaN,
      suggestion: null,
      message: `policy ${policy}: ${e.message}`,
    };
  }
  const plan = {
    params: r.params,
    grads: r.grads,
    optimizer: r.optimizer,
    activations: r.activations,
    total: r.total,
    recomputeFlops: r.recomputeFlops,
  };
  const reach = reachOf(r),
    fits = r.fits && r.policyMet && reach.train <= budget,
    keep = fits && reach.keep <= budget;
  const out = {
    fits,
    keep,
    policy,
    need: keep ? reach.keep : reach.train,
    budget,
    plan,
    parts: keep ? reach.parts : reach.trainParts,
    rows,
    suggestion: null,
    message: '',
  };
  const parts = out.parts
    .filter(([, b]) => b > 0)
    .map(([n, b]) => `${n} ${fmtBytes(b)}`)
    .join(' + ');
  if (fits) {
    out.message =
      `Fits: ${fmtBytes(out.need)} of ${fmtBytes(budget)} (${parts}).` +
      (keep
        ? ''
        : ` Not kept for a reload: saving and restoring its training state would take the trainer to ${fmtBytes(reach.keep)}.`);
    return out;
  }
  const fixed = baseline + plan.params + plan.grads + plan.optimizer;
  const head = `Does not fit: with checkpointing '${policyLabel(policy)}' and batch ${batch} the trainer ${r.policyMet ? 'needs' : 'needs at least'} ${fmtBytes(reach.train)} (${parts}); the budget is ${fmtBytes(budget)}.`;
  if (fixed >= budget) {
    out.message = `${head} Parameters, gradients and AdamW state alone need ${fmtBytes(fixed)}: no checkpointing policy helps; choose a smaller model or a larger budget.`;
    return out;
  }
  if (r.fit) {
    const named = rows.filter((row) => row.fits && row.policy !== 'none');
    const pick = named[0] || { policy: r.fit.policy, need: reachOf(r.fit).train };
    out.suggestion = { policy: pick.policy, batch, need: pick.need };
    out.message =
      `${head} It fits with checkpointing '${policyLabel(pick.policy)}' at batch ${batch} (${fmtBytes(pick.need)})` +
      (pick.policy === r.fit.policy
        ? ', the least re-computation that fits.'
        : `; the least re-computation that fits is '${policyLabel(r.fit.policy)}'.`);
    return out;
  }
  if (r.maxBatch > 0) {
    const p2 = planStep(model, { batch: r.maxBatch, maskRatio, policy: r.least.policy });
    const need = tabReach(p2, tabExtras(model, { batch: r.maxBatch, baseline }), stateBytes(model, p2)).train;
    out.suggestion = { policy: r.least.policy, batch: r.maxBatch, need };
    out.message =
      `${head} Even the most memory-saving checkpointing ('${policyLabel(r.least.policy)}', activations ${fmtBytes(r.least.activations)}) ` +
      `does not fit at batch ${batch}; batch ${r.maxBatch} with checkpointing '${policyLabel(r.least.policy)}' fits (${fmtBytes(need)}).`;
  } else
    out.message = `${head} Even the most memory-saving checkpointing ('${policyLabel(r.least.policy)}') does not fit at batch 1: choose a smaller model.`;
  return out;
}
