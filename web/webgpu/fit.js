// fit.js: whether a training step fits a WebGPU device, before anything is recorded or allocated,
// and what does when it does not. The bytes come from the engine's own planner
// (vt_plan_train_step) in the whole-row layout a GPU records (model.wholeRows): the activation arena is
// the recorded step's to the byte; parameters, gradients and AdamW's m and v are the model's;
// the images are batch x C x S x S floats. The layout (step.js) puts every region in a buffer of
// its own once they do not fit one, so a step fits when each region is within maxBufferSize and
// within maxStorageBufferBindingSize (a call binds a whole region at most: AdamW binds the whole
// parameter region; within the arena a call binds the span of its operands, which the exact check
// on the recorded list -- deviceMisfit -- measures).
import { kernelsOf } from './kernels.js';
import { stepWorkspace } from './step.js';
import { STAGING_CHUNK } from './buffers.js';

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
  const p = model.wholeRows(() => model.planTrainStep({ batch, policy }));
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

// wasm memory the recorder may use for a step: the GPU backend records every step in wasm first,
// where the model's state, the arena and the images then live (wasm32: 4 GiB, less code, stacks
// and the recorded list)
export const RECORDER_BYTES = 2 ** 32 - 2 ** 28;

/** The first limit a step's regions break, named with the bytes and the limit's value: a region
 * over maxBufferSize or maxStorageBufferBindingSize, or all of them over what the wasm recorder
 * can hold (RECORDER_BYTES); null when all fit. */
export function regionMisfit(regions, limits) {
  for (const [limit, max] of [
    ['maxBufferSize', limits.maxBufferSize],
    ['maxStorageBufferBindingSize', limits.maxStorageBufferBindingSize],
  ])
    for (const [r, bytes] of Object.entries(regions))
      if (bytes > max) return `the ${r} region needs ${bytes} bytes, over ${limit} (${max})`;
  const all = Object.values(regions).reduce((a, b) => a + b, 0);
  if (all > RECORDER_BYTES)
    return `the step needs ${all} bytes of wasm memory while it is recorded (its regions), over the ${RECORDER_BYTES} the wasm recorder can hold`;
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

/** The largest batch up to `cap` whose step fits under `policy` (both limits, every region), found
 * by doubling then halving over the planner (nothing recorded or allocated); 0: not one image. */
export function largestBatch(model, policy, limits, cap = 65536) {
  const fits = (b) => !regionMisfit(stepRegions(model, b, policy), limits);
  if (!fits(1)) return 0;
  let hi = 2;
  while (hi <= cap && fits(hi)) hi *= 2;
  return hi > cap ? cap : maxBatch(model, policy, limits, hi);
}

/**
 * The GPU bytes of a training step of `batch` under `policy` against a device's limits: the
 * regions (the planner's; once the step fits maxBufferSize it is recorded, and then the recorded
 * list's regions and the exact binding check), the kernels' workspace (from the recorded calls),
 * the read-back buffers, and whether it fits (`limit`: the first limit broken, or the wasm
 * recorder's out-of-memory: the GPU backend records every step in wasm memory first).
 * gpu: a Gpu (device.js); contract: the engine's kernel contract (vt.manifest.kernels); labels: a classifier's (any values).
 */
export function gpuPlan(model, { batch, policy = model.gradCheckpointing, gpu, contract, labels = null }) {
  const limits = gpu.limits;
  let regions = stepRegions(model, batch, policy),
    workspace = null,
    recorded = false;
  let limit = regionMisfit(regions, { ...limits, maxStorageBufferBindingSize: Infinity });
  if (!limit) {
    const was = model.gradCheckpointing;
    model.setGradCheckpointing(policy);
    try {
      const trace = model.recordStep({ batch, labels });
      regions = { ...trace.regions };
      workspace = stepWorkspace(kernelsOf(gpu), trace, contract);
      recorded = true;
      limit = deviceMisfit(trace, limits);
    } catch (e) {
      if (!/out of memory/i.test(e.message)) throw e;
      limit = `the step cannot be recorded (the wasm recorder holds the arena too): ${e.message}`;
    } finally {
      model.setGradCheckpointing(was);
    }
  }
  const up = (n) => Math.ceil(n / 256) * 256;
  const buffers = Object.values(regions).reduce((s, b) => s + up(b), 0) + up(workspace || 0);
  // read-back buffers (buffers.js): the scalars' after each step, and one a sync reads every state
  // region through, in pieces of at most STAGING_CHUNK
  const state = Math.max(regions.params || 0, regions.grads || 0, regions.adam_m || 0, regions.adam_v || 0),
    staging = 256 + Math.min(STAGING_CHUNK + 256, 2 ** Math.ceil(Math.log2(Math.max(up(state), 256))));
  return { regions, workspace, recorded, buffers, staging, total: buffers + staging, fits: !limit, limit };
}
