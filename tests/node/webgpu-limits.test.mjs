// webgpu-limits.test.mjs: a training step over a WebGPU device's limits is refused before anything
// is computed, naming the limit (maxBufferSize: a region; maxStorageBufferBindingSize: a region, or
// the span one kernel call binds), the batch and policy asked for, and per policy the largest
// batch that fits (web/webgpu/fit.js); the model is left as it was. At ViT-B widths: on the
// software adapter's own limits (1 GiB) and on a device whose limits are lowered on purpose to
// WebGPU's defaults (requestGpu({ limits }): 256 MiB buffers, 128 MiB bindings, what many
// adapters give), where a step that fits runs over split buffers with the bits of the full device.
// plan --backend webgpu gives the bytes a step holds on the GPU (the same bytes the backend then
// holds) and the largest batch per policy; a batch far past every limit (6000) is named, not a
// wasm out-of-memory (issue 39, defect 11). Needs an adapter (fails without: webgpu-util.mjs).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createVitrine } from '../../web/vitrine.js';
import { GpuError } from '../../web/webgpu/device.js';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { deviceMisfit, gpuPlan, largestBatch, regionMisfit, stepRegions } from '../../web/webgpu/fit.js';
import { REPO, WASM_DIR } from './util.mjs';
import { testGpu, rand, sameBits } from './webgpu-util.mjs';

const MiB = 2 ** 20;
const DEFAULTS = { maxBufferSize: 256 * MiB, maxStorageBufferBindingSize: 128 * MiB };

await testGpu().then((g) => g.destroy()); // no adapter: the tests fail, saying what is missing
const engines = [];
async function engine(gpu) {
  const vt = await createVitrine({ wasm: 'simd', threads: 1, wasmDir: WASM_DIR, backend: 'webgpu', gpu });
  engines.push(vt);
  return vt;
}
after(() => engines.forEach((vt) => vt.close()));

const vitB = (patch, depth) => ({
  kind: 'timm',
  config: { img_size: 224, patch_size: patch, in_chans: 3, embed_dim: 768, num_heads: 12, depth, num_classes: 10 },
});
const labels = (b) => Array.from({ length: b }, (_, i) => i % 10);
const trace = (vt, m, b) => m.recordStep({ batch: b, labels: labels(b) });
// "what fits this device: batch 7 under none, batch 8 under block, ..." -> { none: 7, block: 8, ... }
const fitsOf = (message) =>
  Object.fromEntries([...message.matchAll(/batch (\d+) under ([\w:]+)/g)].slice(1).map((x) => [x[2], Number(x[1])]));

test("ViT-B/16 (12 blocks) on the software adapter's limits: batch 8 under none is refused with what fits", async () => {
  const vt = await engine({ swiftshader: true }),
    limits = vt.backend.gpu.limits;
  const m = vt.createModel({ kind: 'timm', preset: 'vit_base_patch16_224', config: { num_classes: 10 } });
  try {
    m.trainerInit({ seed: 1 });
    // the planner's arena is the recorded step's, to the byte (what the refusal is computed from)
    assert.equal(stepRegions(m, 2, 'none').arena, trace(vt, m, 2).regions.arena);
    const arena = stepRegions(m, 8, 'none').arena;
    assert.ok(arena > limits.maxBufferSize, `${arena} bytes fit ${limits.maxBufferSize}: choose another batch`);
    let err;
    await assert.rejects(
      m.trainStepLabelsAsync(rand(8 * 3 * 224 * 224, 1), labels(8)).catch((e) => {
        err = e;
        throw e;
      }),
      (e) => e instanceof GpuError && e.kind === 'limit',
    );
    assert.match(
      err.message,
      new RegExp(
        `^the arena region needs ${arena} bytes, over maxBufferSize \\(${limits.maxBufferSize}\\), at batch 8 under none; what fits this device: batch \\d+ under none, batch 8 under block`,
      ),
    );
    assert.match(err.message, /intact/); // (backend.js: the weights are never lost to a refusal)
    assert.equal(m.stepCount, 0);
    // each batch named fits, one more does not (the recorded list's exact check agrees where it is
    // recorded: block at 8)
    const fit = fitsOf(err.message);
    assert.ok(fit.none >= 1 && fit.none < 8, JSON.stringify(fit));
    assert.ok(stepRegions(m, fit.none, 'none').arena <= limits.maxBufferSize);
    assert.ok(
      stepRegions(m, fit.none + 1, 'none').arena > Math.min(limits.maxBufferSize, limits.maxStorageBufferBindingSize),
    );
    m.setGradCheckpointing('block');
    assert.equal(deviceMisfit(trace(vt, m, 8), limits), null);
  } finally {
    m.dispose();
  }
});

test("a device lowered to WebGPU's default limits: ViT-B widths refused by name, a step that fits runs over split buffers with the full device's bits", async () => {
  const low = await engine({ swiftshader: true, limits: DEFAULTS }),
    full = await engine({ swiftshader: true });
  assert.equal(low.backend.gpu.limits.maxBufferSize, DEFAULTS.maxBufferSize);
  assert.equal(low.backend.gpu.limits.maxStorageBufferBindingSize, DEFAULTS.maxStorageBufferBindingSize);
  const refused = async (spec, b, policy, re) => {
    const m = low.createModel(spec);
    try {
      m.setGradCheckpointing(policy);
      m.trainerInit({ seed: 1 });
      await assert.rejects(m.trainStepLabelsAsync(rand(b * 3 * 224 * 224, 2), labels(b)), (e) => {
        assert.ok(e instanceof GpuError && e.kind === 'limit', e.message);
        assert.match(e.message, re);
        return true;
      });
      assert.equal(m.stepCount, 0);
    } finally {
      m.dispose();
    }
  };
  // 5 blocks of ViT-B: 36 M parameters, more than one binding (a call over every gradient, AdamW
  // over every parameter): nothing fits
  await refused(
    vitB(16, 5),
    1,
    'none',
    /^\w+ binds \d+ bytes of the (params|grads|adam_m|adam_v) region at once, over maxStorageBufferBindingSize \(134217728\), at batch 1 under none; not one image fits this device under any policy/,
  );
  // 2 blocks at batch 12: the arena over the buffer limit (before recording)
  await refused(
    vitB(16, 2),
    12,
    'none',
    /^the arena region needs \d+ bytes, over maxBufferSize \(268435456\), at batch 12 under none; what fits this device: batch \d under none, batch \d+ under block/,
  );
  // at batch 6 the arena fits a buffer but the attention's operands span more than one binding
  // (the recorded list's exact check)
  await refused(
    vitB(16, 2),
    6,
    'none',
    /^attention_forward binds \d+ bytes of the arena region at once, over maxStorageBufferBindingSize \(134217728\), at batch 6 under none; what fits this device: batch \d under none/,
  );
  // ViT-B/32, one block, one image: fits the lowered device in several buffers; the same bits
  const run = async (vt) => {
    const m = vt.createModel(vitB(32, 1));
    try {
      m.initWeights(1);
      m.trainerInit({ seed: 1 });
      const loss = await m.trainStepLabelsAsync(rand(3 * 224 * 224, 3), labels(1));
      const layout = m._backend.step.layout;
      await m.sync();
      return { loss: Float32Array.of(loss), grads: m.params()[0].grad.slice(), layout };
    } finally {
      m.dispose();
    }
  };
  const a = await run(low),
    b = await run(full);
  assert.equal(a.layout.single, false);
  assert.equal(b.layout.single, true);
  assert.ok(sameBits(a.loss, b.loss) && sameBits(a.grads, b.grads), 'the lowered device = the full one, bit for bit');
});

test('the planned GPU bytes are what a step and a sync then hold, to the byte; the largest batch per policy fits', async () => {
  const vt = await engine({ swiftshader: true }),
    gpu = vt.backend.gpu;
  const m = vt.createModel({
    kind: 'mae',
    config: {
      encoder: { img_size: 32, patch_size: 8, in_chans: 3, embed_dim: 64, depth: 2, num_heads: 4 },
      decoder_dim: 32,
      decoder_depth: 1,
      decoder_heads: 4,
    },
  });
  try {
    m.initWeights(1);
    m.setGradCheckpointing('block');
    m.trainerInit({ seed: 1 });
    const contract = vt.manifest.kernels;
    const p = gpuPlan(m, { batch: 3, gpu, contract });
    assert.ok(p.fits && p.recorded && p.workspace > 0, JSON.stringify(p));
    await m.trainStepAsync(rand(3 * 3 * 32 * 32, 4), 3);
    await m.sync();
    assert.equal(m._backend.bytes, p.total, 'planned bytes = the buffers and read-back buffers held');
    // against small limits: the largest batch fits them, one more does not
    const limits = { maxBufferSize: 4 * MiB, maxStorageBufferBindingSize: 2 * MiB };
    for (const policy of ['none', 'block']) {
      const b = largestBatch(m, policy, limits);
      assert.ok(b >= 1, policy);
      assert.equal(regionMisfit(stepRegions(m, b, policy), limits), null);
      assert.match(regionMisfit(stepRegions(m, b + 1, policy), limits), /over maxStorageBufferBindingSize \(2097152\)/);
    }
    assert.ok(largestBatch(m, 'block', limits) > largestBatch(m, 'none', limits));
  } finally {
    m.dispose();
  }
});

test('vitrine plan --backend webgpu for ViT-S/16 and ViT-B/16: bytes against the limits, the largest batch per policy; batch 6000 names the limit', () => {
  const plan = (...args) =>
    spawnSync(
      process.execPath,
      [path.join(REPO, 'web/cli.js'), 'plan', '--backend', 'webgpu', '--wasm', 'simd', ...args],
      {
        encoding: 'utf8',
        env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR, VITRINE_WEBGPU: 'swiftshader' },
      },
    );
  const big = plan('--preset', 'vit_base_patch16_224', '--batch', '6000');
  assert.equal(big.status, 0, big.stderr);
  assert.doesNotMatch(big.stdout + big.stderr, /out of memory/);
  assert.match(big.stdout, /does not fit: the arena region needs \d+ bytes, over maxBufferSize \(1073741824\)/);
  const m = /largest batch that fits this adapter, per policy [^:]*: block (\d+), none (\d+)/.exec(big.stdout);
  assert.ok(m && Number(m[1]) > Number(m[2]) && Number(m[2]) >= 1, big.stdout);
  const s = plan('--preset', 'vit_small_patch16_224', '--batch', '8', '--json');
  assert.equal(s.status, 0, s.stderr);
  const w = JSON.parse(s.stdout).webgpu;
  assert.equal(w.fits, true);
  assert.equal(w.recorded, true);
  assert.equal(w.total, w.buffers + w.staging);
  assert.ok(w.regions.arena > 0 && w.workspace > 0);
  assert.ok(w.max_batch.block > w.max_batch.none && w.max_batch.none >= 8, JSON.stringify(w.max_batch));
});
