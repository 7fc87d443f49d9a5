// webgpu-matrix.test.mjs: one training step of every timm width users train (ViT-Ti / S / B at patch
// 16 and 32, 224 px: 197 or 50 tokens, 3 / 6 / 12 heads) with every objective (MAE, AIM, classify)
// at batch 1 and 2, recorded and replayed on the WebGPU backend (SwiftShader), against the wasm
// build: the loss and every parameter's gradient within the parity rule (err = max|gpu - wasm| /
// max|wasm| <= 1e-4 per tensor); under `block` (which re-computes the first encoder block) the GPU
// gives the bits of `none`, so `block` is within the rule too. Depth is shrunk to two encoder
// blocks (one is never re-computed: the last block's backward follows its forward), one MAE
// decoder block, one AIM head block; widths, token counts, head counts and the MAE decoder (512
// wide, 16 heads) are the real ones: they pick the kernels (split-K with a bias, the attention's
// batched products, chunking). The AIM head is as wide as the encoder (its MLP 4x): lightly's
// 2048-wide head (MLP 8192) runs the same kernels at ~45 GFLOP a step, more than this whole
// matrix on a software adapter. Then the families built on timm's options, ViT-B/16 classify at
// batch 1 with the same checks: CLIP (pre-norm, QuickGELU, eps 1e-5; it stands for the plain
// ViT-B/16 cell, see COVERED), SigLIP with tanh GELU and attention pooling, DeiT distilled. One
// device, one pipeline cache for the whole matrix. Needs an adapter (fails without:
// webgpu-util.mjs). Prints the matrix with its times.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createVitrine } from '../../web/vitrine.js';
import { WASM_DIR } from './util.mjs';
import { testGpu, rand, rel, sameBits } from './webgpu-util.mjs';

const TOL = 1e-4; // ../shared/docs/parity-format.md
const WIDTHS = {
  vit_tiny: { embed_dim: 192, num_heads: 3 },
  vit_small: { embed_dim: 384, num_heads: 6 },
  vit_base: { embed_dim: 768, num_heads: 12 },
};
const PATCHES = [16, 32];
const OBJECTIVES = ['mae', 'aim', 'classify'];
const BATCHES = [1, 2];
const CLASSES = 10;
// VITRINE_MATRIX=vit_small_patch16 (a substring of "<width>_patch<p> <objective> b<batch>") runs a part
const only = process.env.VITRINE_MATRIX || '';

await testGpu().then((g) => g.destroy()); // no adapter: the test fails, saying what is missing
const gpuVt = await createVitrine({
  wasm: 'simd',
  threads: 1,
  wasmDir: WASM_DIR,
  backend: 'webgpu',
  gpu: { swiftshader: true },
});
const cpuVt = await createVitrine({ wasm: 'simd', threads: 1, wasmDir: WASM_DIR });
after(() => {
  gpuVt.close();
  cpuVt.close();
});

function spec(width, patch, objective) {
  const encoder = { img_size: 224, patch_size: patch, in_chans: 3, depth: 2, ...WIDTHS[width] };
  if (objective === 'classify') return { kind: 'timm', config: { ...encoder, num_classes: CLASSES } };
  if (objective === 'mae') return { kind: 'mae', config: { encoder, decoder_depth: 1 } };
  return { kind: 'aim', config: { encoder, head_blocks: 1, head_hidden_dim: encoder.embed_dim } };
}

// one training step from seed-1 weights: the loss and each parameter's gradient (copies)
async function step(vt, sp, batch, policy) {
  const m = vt.createModel(sp);
  try {
    m.initWeights(1);
    m.setGradCheckpointing(policy);
    m.trainerInit({ lr: 1e-3, seed: 2 });
    const x = rand(batch * 3 * 224 * 224, 7 + batch);
    const labels = sp.kind === 'timm' ? Array.from({ length: batch }, (_, i) => (3 * i + 1) % CLASSES) : null;
    const gpu = vt === gpuVt;
    const loss = labels
      ? gpu
        ? await m.trainStepLabelsAsync(x, labels)
        : m.trainStepLabels(x, labels)
      : gpu
        ? await m.trainStepAsync(x, batch)
        : m.trainStep(x, batch);
    // the GPU's gradients read straight from its gradient region (a sync would bring the
    // parameters and AdamW's moments too), each at its parameter's place in the wasm layout
    const all = gpu ? new Float32Array(await m._backend.step.read('grads')) : null,
      base = gpu ? m.region('grads').byteOffset : 0;
    const grads = m
      .params()
      .filter((p) => p.grad)
      .map((p) => {
        const at = (p.grad.byteOffset - base) / 4;
        return { name: p.name, data: gpu ? all.slice(at, at + p.numel) : p.grad.slice() };
      });
    const recomputed = gpu ? m._backend.step.calls.filter((e) => e.phase === 'recompute').length : 0;
    const kernels = gpu ? new Set(m._backend.step.calls.map((e) => e.call)) : null;
    return { loss, grads, recomputed, kernels };
  } finally {
    m.dispose();
  }
}

const rows = [];
after(() => {
  if (!rows.length) return;
  console.log('# preset x objective x batch x policy -> loss err, worst gradient err (tensor), seconds (GPU step)');
  for (const r of rows) console.log(`# ${r}`);
});

// ViT-B/16 classify at batch 1 is the CLIP family's cell below: the very products (197 rows, N and K
// of 768 / 2304 / 3072 / 10), the same attention (197 tokens, 12 heads), with a pre-norm LayerNorm and
// QuickGELU besides (its patch embedding has no bias: the same GEMM with the bias flag off)
const COVERED = 'vit_base_patch16 classify b1';

for (const width of Object.keys(WIDTHS))
  for (const patch of PATCHES)
    for (const objective of OBJECTIVES)
      for (const batch of BATCHES) {
        const name = `${width}_patch${patch} ${objective} b${batch}`;
        if (!name.includes(only) || name === COVERED) continue;
        test(`${name}: the GPU step = the wasm step within the rule; block = none bit for bit`, () =>
          cell(name, spec(width, patch, objective), batch));
      }

// the GPU's step under none and block against wasm's under none (returns the kernels the GPU ran)
async function cell(name, sp, batch) {
  const cpu = await step(cpuVt, sp, batch, 'none');
  const t0 = performance.now(),
    c0 = process.cpuUsage();
  const none = await step(gpuVt, sp, batch, 'none');
  const t1 = performance.now(),
    c1 = process.cpuUsage();
  const block = await step(gpuVt, sp, batch, 'block');
  const t2 = performance.now(),
    c2 = process.cpuUsage();
  const secs = (a, b, ca, cb) =>
    `${((b - a) / 1000).toFixed(1)} s (cpu ${((cb.user + cb.system - ca.user - ca.system) / 1e6).toFixed(1)} s)`;
  const lossErr = Math.abs(none.loss - cpu.loss) / Math.abs(cpu.loss);
  let worst = { err: 0, name: '' };
  assert.deepEqual(
    none.grads.map((g) => g.name),
    cpu.grads.map((g) => g.name),
  );
  none.grads.forEach((g, i) => {
    const e = rel(g.data, cpu.grads[i].data);
    if (!(e <= worst.err)) worst = { err: e, name: g.name };
  });
  rows.push(
    `${name} none  loss ${lossErr.toExponential(1)}  grad ${worst.err.toExponential(1)} (${worst.name})  ${secs(t0, t1, c0, c1)}`,
    `${name} block (${block.recomputed} calls re-computed) = none bit for bit  ${secs(t1, t2, c1, c2)}`,
  );
  assert.ok(block.recomputed > 0, 'block re-computes a block (else it is none)');
  assert.ok(lossErr <= TOL, `loss ${none.loss} on the GPU, ${cpu.loss} on wasm: ${lossErr}`);
  assert.ok(worst.err <= TOL, `gradient ${worst.name}: err ${worst.err}`);
  assert.ok(sameBits(Float32Array.of(block.loss), Float32Array.of(none.loss)), 'block: the loss of none');
  block.grads.forEach((g, i) => assert.ok(sameBits(g.data, none.grads[i].data), `block: ${g.name} of none`));
  return none.kernels;
}

// issue 36: the families built on timm's options, at ViT-B/16 width (768, 12 heads, 224 px), two
// blocks, classify at batch 1: what each runs besides the matrix's kernels is checked to be there
const FAMILIES = {
  // OpenAI CLIP: pre_norm (norm_pre), QuickGELU, LayerNorm eps 1e-5
  clip_b16: {
    preset: 'vit_base_patch16_clip_quickgelu_224',
    config: {},
    kernels: ['quick_gelu_forward', 'quick_gelu_backward'],
  },
  // SigLIP-B/16 with tanh GELU (SigLIP 2's act_layer): no class token, attention pooling (map)
  siglip_b16: {
    preset: 'vit_base_patch16_siglip_224',
    config: { act_layer: 'gelu_tanh' },
    kernels: ['gelu_tanh_forward', 'gelu_tanh_backward', 'cross_attention_forward', 'cross_attention_backward'],
  },
  // DeiT with its distillation token (198 tokens) and second head
  deit_distilled_b16: { preset: 'deit_base_distilled_patch16_224', config: {}, kernels: [] },
};
for (const [family, f] of Object.entries(FAMILIES)) {
  const name = `${family} classify b1`;
  if (!name.includes(only) && !(family === 'clip_b16' && COVERED.includes(only))) continue;
  test(`${name} (${f.preset}, 2 blocks): the GPU step = the wasm step within the rule; block = none bit for bit`, async () => {
    const sp = { kind: 'timm', preset: f.preset, config: { ...f.config, depth: 2, num_classes: CLASSES } };
    const ran = await cell(name, sp, 1);
    for (const k of f.kernels) assert.ok(ran.has(k), `${family}: the GPU step runs ${k}`);
  });
}
