// fit.js: whether a training step fits a WebGPU device, before anything is recorded or allocated,
// and what does when it does not. The bytes come from the engine's own planner
// (vt_plan_train_step) in the whole-row layout a GPU records (wholeRows): the activation arena is
// the recorded step's to the byte; parameters, gradients and AdamW's m and v are the model's;
// the images are batch x C x S x S floats. The layout (step.js) puts every region in a buffer of
// its own once they do not fit one, so a step fits when each region is within maxBufferSize and
// within maxStorageBufferBindingSize (a call binds a whole region at most: AdamW binds the whole
// parameter region; within the arena a call binds the span of its operands, which the exact check
// on the recorded list -- deviceMisfit -- measures).

/**
 * fn() with model h recording for a device (vt_model_set_whole_rows): kernel calls over whole row
 * ranges (the MLP backward, im2col / col2im) instead of the CPU's cache-sized chunks -- fewer,
 * larger dispatches (a ViT-Ti/16 step at batch 64: 11,387 calls chunked); the wasm model's own
 * plans stay the CPU's (set back after).
 */
export function wholeRows(vt, h, fn) {
  vt.check(vt._c.model_set_whole_rows(h, 1));
  try {
    return fn();
  } finally {
    vt._c.model_set_whole_rows(h, 0);
  }
}

/**
 * Whether a recorded step (vitrine-trace/1) fits a device's limits as the backend lays it out
 * (step.js): every region within maxBufferSize, and every kernel call's operands in one region
 * within one binding (maxStorageBufferBindingSize). Returns null when it fits, else the first
 * limit it breaks, named, with the bytes.
 */
export function deviceMisfit(trace, limits) {
  const maxBuf = limits.maxBufferSize,
    maxBind = limits.maxStorageBufferBindingSize;
  for (const [r, bytes] of Object.entries(trace.regions))
    if (bytes > maxBuf) return `the ${r} region needs ${bytes} bytes, over maxBufferSize (${maxBuf})`;
  for (const e of trace.entries) {
    if (!e.call) continue;
    const span = {};
    for (const o of e.ops) {
      if (!o) continue;
      const s = span[o[0]] || (span[o[0]] = [Infinity, 0]);
      s[0] = Math.min(s[0], o[1]);
      s[1] = Math.max(s[1], o[1] + o[2]);
    }
    for (const [r, [lo, hi]] of Object.entries(span))
      if (hi - Math.floor(lo / 256) * 256 > maxBind)
        return `${e.call} binds ${hi - lo} bytes of the ${r} region at once, over maxStorageBufferBindingSize (${maxBind})`;
  }
  return null;
}

/** The GPU regions of a training step of `batch` images under `policy` (bytes), from the planner. */
export function stepRegions(model, batch, policy = model.gradCheckpointing) {
  const vt = model._vt,
    p = wholeRows(vt, model._h, () => model.planTrainStep({ batch, policy }));
  const { chans, img } = model.dims;
  return {
    params: p.params,
    grads: p.grads,
    adam_m: p.optimizer / 2,
    adam_v: p.optimizer / 2,
    arena: p.activations,
    images: 4 * batch * chans * img * img,
  };
}

/** The first region over a limit, named with its bytes and the limit's value; null when all fit. */
export function regionMisfit(regions, limits) {
  for (const [limit, max] of [
    ['maxBufferSize', limits.maxBufferSize],
    ['maxStorageBufferBindingSize', limits.maxStorageBufferBindingSize],
  ])
    for (const [r, bytes] of Object.entries(regions))
      if (bytes > max) return `the ${r} region needs ${bytes} bytes, over ${limit} (${max})`;
  return null;
}

/** The largest batch in [1, hi] whose step fits under `policy` (0: not even one image). */
export function maxBatch(model, policy, limits, hi) {
  const fits = (b) => !regionMisfit(stepRegions(model, b, policy), limits);
  if (!fits(1)) return 0;
  let lo = 1; // fits
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}

/**
 * What fits a device instead of a step of `batch` under `policy`: per policy (this one and the
 * model's named ones, 'none' first) the largest batch up to `batch` whose regions are within both
 * limits (a guaranteed fit as step.js lays regions out). Returns { fit: [{ policy, batch }], text }.
 */
export function whatFits(model, { batch, policy = model.gradCheckpointing, limits }) {
  const policies = [...new Set([policy, ...model.namedPolicies()])];
  const fit = policies.map((p) => ({ policy: p, batch: maxBatch(model, p, limits, batch) })).filter((f) => f.batch > 0);
  const text = fit.length
    ? `what fits this device: ${fit.map((f) => `batch ${f.batch} under ${f.policy}`).join(', ')}`
    : 'not one image fits this device under any policy';
  return { fit, text };
}
