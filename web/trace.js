// trace.js: the engine's recorded training step for JS (vtw_trace over vt_trace_train_step,
// src/trace.c; the format: docs/kernels.md). Recording runs no kernel and takes no step: the
// engine appends each kernel call of one training step -- forward, checkpointed re-computation,
// backward, optimizer -- to a list, with its arguments, FLOPs, buffer operands and the activation
// arena's allocations, under the model's checkpointing policy and thread count. The images,
// masks and labels are inputs of the list, not part of it: zeros stand for them here.
import { VitrineError } from './errors.js';

/**
 * traceStep(model, { batch, json = true }) -> the recorded step of `batch` images: the list
 * (format 'vitrine-trace/1': kernels, regions, chains, entries) or, with json false, the engine's
 * summary text (calls and FLOPs per kernel, FLOPs re-computed, the arena's peak, per block what is
 * kept, freed and re-computed). The model needs its trainer (trainerInit); a classifier records a
 * step of trainStepLabels.
 */
export function traceStep(model, { batch, json = true } = {}) {
  const vt = model._vt, c = model._c;
  if (typeof c.trace !== 'function') throw new VitrineError('this engine build records no steps (it lacks vtw_trace)', -1);
  if (!Number.isInteger(batch) || batch < 1) throw new VitrineError(`traceStep: batch must be a positive integer, got ${batch}`, -1);
  const { img, chans } = model.dims, n = batch * chans * img * img;
  const classifier = model.params().some((p) => p.name === 'head.weight') && model.kind === 'timm';
  const ptrs = [];
  try {
    const out = vt.alloc(8); ptrs.push(out);
    const pImg = vt.alloc(4 * n); ptrs.push(pImg);
    vt.u8().fill(0, pImg, pImg + 4 * n);
    let pLab = 0;
    if (classifier) { pLab = vt.alloc(4 * batch); ptrs.push(pLab); vt.u8().fill(0, pLab, pLab + 4 * batch); }
    vt.check(c.trace(model._h, -1, pImg, pLab, batch, json ? 1 : 0, out));
    const [p, len] = vt.u32(out, 2);
    const text = new TextDecoder().decode(vt.u8().slice(p, p + len));
    vt.free(p);
    return json ? JSON.parse(text) : text;
  } finally { ptrs.forEach((p) => vt.free(p)); }
}
