// peers/jaxjs_webgpu_page.mjs: the page of bench/jaxjs_webgpu.mjs, in Chromium: the ViT classifier
// step of jax-js on its WebGPU backend (peers/jaxjs_step.mjs) and vitrine's recorded step replayed
// on WebGPU (web/webgpu/backend.js: trainStepLabelsAsync), on the adapter the browser gives. The
// Node side drives it through window.peerBench:
//   setup({ preset, depth, batch })  both models, from the weights PyTorch's check had (peers/vit.mjs)
//   check()                          both first two steps against PyTorch's (GET /ref.safetensors):
//                                    jax-js's losses and gradients, vitrine's losses (its first step
//                                    records the step and compiles its pipelines: its time apart)
//   jaxjsStep() / vitrineStep()      one step each, its wall time in ms (the loss read back: done)
import * as jax from '/jax/index.js';
import {
  PRESETS,
  CLASSES,
  compareWithTorch,
  encodeSafetensors,
  lossCheck,
  makeInputs,
  makeWeights,
  referenceOf,
  timmKey,
} from './vit.mjs';
import { jaxjsStep } from './jaxjs_step.mjs';
import { createVitrine } from '/web/vitrine.js';

let jx = null,
  vt = null,
  model = null,
  inputs = null;
const losses = { jaxjs: [], vitrine: [] };

async function setup({ preset, depth, batch }) {
  const devices = await jax.init('webgpu');
  if (!devices.includes('webgpu')) throw new Error('jax-js: no WebGPU device (navigator.gpu gave no adapter)');
  jax.defaultDevice('webgpu');
  const [D, , H] = PRESETS[preset];
  inputs = makeInputs(batch);
  const weights = makeWeights(D, depth);
  jx = jaxjsStep(jax, { preset, depth, weights, inputs });
  vt = await createVitrine({ threads: 1, backend: 'webgpu' });
  model = vt.createModel({
    kind: 'timm',
    config: { img_size: 224, patch_size: 16, in_chans: 3, embed_dim: D, depth, num_heads: H, num_classes: CLASSES },
  });
  model.setGradCheckpointing('none');
  model.initWeights(1);
  model.initFrom(encodeSafetensors(new Map([...weights].map(([k, v]) => [timmKey(k), v]))), { strict: true });
  // bench/step_bench.mjs --job vit's trainer: AdamW at a constant lr, no clipping, no smoothing
  model.trainerInit({ lr: 1.5e-4, clipNorm: 0, labelSmoothing: 0, weightDecay: 0.05, warmupSteps: 0, totalSteps: 0 });
  const a = vt.backend.adapter || {};
  return {
    vitrine_backend: vt.backend.name,
    adapter: {
      vendor: a.vendor,
      architecture: a.architecture,
      device: a.device,
      description: a.description,
      software: !!a.software,
    },
    jaxjs: 'webgpu',
    user_agent: navigator.userAgent,
  };
}

const readLoss = async (loss) => (await loss.data())[0]; // runs the whole jitted step

async function check() {
  const l = [await readLoss(jx.step())];
  const grads = await jx.grads();
  l.push(await readLoss(jx.step()));
  losses.jaxjs.push(...l);
  const t = performance.now();
  await vitrineStep();
  const first = performance.now() - t;
  await vitrineStep();
  const ref = referenceOf(await (await fetch('/ref.safetensors')).arrayBuffer());
  const c = compareWithTorch({ losses: l, grads }, ref);
  const v = lossCheck(losses.vitrine, ref);
  return {
    jaxjs: { ...c, grads: undefined, torch: ref.torch },
    vitrine: { ok: !v.problems.length, why: v.problems[0] || null, losses: v.rows },
    vitrine_first_ms: first,
  };
}

async function jaxjsStep_() {
  const t = performance.now();
  losses.jaxjs.push(await readLoss(jx.step()));
  return performance.now() - t;
}
async function vitrineStep() {
  const t = performance.now();
  losses.vitrine.push(await model.trainStepLabelsAsync(inputs.images, inputs.labels));
  return performance.now() - t;
}

window.peerBench = { setup, check, jaxjsStep: jaxjsStep_, vitrineStep, losses: () => losses };
window.peerBenchReady = true;
