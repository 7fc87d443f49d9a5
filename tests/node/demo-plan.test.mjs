// demo-plan.test.mjs: the demo's budget is a hard limit on the trainer's wasm memory. demo/plan.js
// adds up what the trainer (demo/worker.js) holds -- the module, the engine's plan, the batch, the
// reconstructions, the training state saved for a reload and read back on it -- and this test
// drives a fresh engine through the trainer's own sequence (create, AdamW, steps, reconstructions,
// saves; then a reload: create, load, steps, save) for the browser builds that grow memory
// differently (the relaxed reactor's sbrk on 2 threads as in the page, Emscripten's), checking the wasm memory never exceeds
// the reach and the state file never exceeds its bound. Also: a refusal names the policy and the
// batch of the fix it offers, and that fix fits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createVitrine } from '../../web/vitrine.js';
import { WASM_DIR, RELAXED } from './util.mjs';
import { fitReport, tabExtras, tabReach, stateBytes, MiB } from '../../demo/plan.js';

const FMNIST = {
  encoder: { img_size: 28, patch_size: 4, in_chans: 1, embed_dim: 64, depth: 4, num_heads: 4 },
  decoder_dim: 64,
  decoder_depth: 2,
  decoder_heads: 4,
};
const RGB32 = {
  encoder: { img_size: 32, patch_size: 4, in_chans: 3, embed_dim: 96, depth: 3, num_heads: 3 },
  head_hidden_dim: 128,
  head_blocks: 1,
};

function images(n) {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = Math.sin(i * 0.37);
  return x;
}

for (const build of [RELAXED ? 'relaxed' : null, 'simd'].filter(Boolean)) {
  for (const [kind, config, batch, policy] of [
    ['mae', FMNIST, 64, 'none'],
    ['aim', RGB32, 24, 'block'],
    ['mae', FMNIST, 48, 'sqrt'],
  ]) {
    test(`${build}: ${kind} batch ${batch} '${policy}': the trainer's wasm memory stays within the planned reach, saving and reloading included`, async () => {
      const spec = { kind, config };
      const start = async () => {
        const vt = await createVitrine({ wasm: build, threads: build === 'relaxed' ? 2 : 1, wasmDir: WASM_DIR });
        return { vt, baseline: vt.memory().linear };
      };
      const { vt, baseline } = await start();
      const m = vt.createModel(spec);
      m.initWeights(1);
      m.trainerInit({ lr: 1e-3, maskRatio: 0.75, seed: 1 });
      m.setGradCheckpointing(policy);
      const plan = m.planTrainStep({ batch });
      const x = tabExtras(m, { batch, baseline }),
        state = stateBytes(m, plan),
        reach = tabReach(plan, x, state);
      assert.equal(
        reach.parts.reduce((a, [, b]) => a + b, 0),
        reach.keep,
        'the named parts add up to the reach',
      );
      const imgs = images(x.input / 4);
      let saved = null,
        high = 0;
      const look = (v) => {
        high = Math.max(high, v.memory().linear);
      };
      for (let s = 0; s < 3; s++) {
        m.trainStep(imgs, batch);
        look(vt);
        m.visualize();
        look(vt);
        saved = m.saveTrainState();
        look(vt);
        assert.ok(saved.length <= state, `state file ${saved.length} bytes, bound ${state}`);
        assert.ok(state - saved.length < 64 * 1024 + 0.01 * saved.length, 'the bound is close');
      }
      assert.ok(
        high <= reach.keep,
        `${build}: wasm memory ${(high / MiB).toFixed(2)} MiB > planned reach ${(reach.keep / MiB).toFixed(2)} MiB`,
      );
      // Emscripten starts with 16 MiB of heap (in the baseline, partly free); the reactor with what it uses
      if (build === 'relaxed')
        assert.ok(
          high >= reach.keep - 2 * MiB,
          `the reach is close to what the trainer holds (${(high / MiB).toFixed(2)} vs ${(reach.keep / MiB).toFixed(2)} MiB)`,
        );
      m.dispose();
      vt.close();
      // the reload: a fresh engine, the state read back, training goes on
      const b = await start();
      const m2 = b.vt.createModel(spec);
      m2.initWeights(1);
      m2.trainerInit({ lr: 1e-3, maskRatio: 0.75, seed: 1 });
      m2.setGradCheckpointing(policy);
      m2.loadTrainState(saved);
      high = b.vt.memory().linear;
      for (let s = 0; s < 2; s++) {
        m2.trainStep(imgs, batch);
        m2.visualize();
        m2.saveTrainState();
        high = Math.max(high, b.vt.memory().linear);
      }
      const reach2 = tabReach(plan, tabExtras(m2, { batch, baseline: b.baseline }), state);
      assert.ok(
        high <= reach2.keep,
        `${build} reload: wasm memory ${(high / MiB).toFixed(2)} MiB > planned reach ${(reach2.keep / MiB).toFixed(2)} MiB`,
      );
      m2.dispose();
      b.vt.close();
    });
  }
}

test('a refusal names the policy and batch it offers, and that offer fits', async () => {
  const vt = await createVitrine({ threads: 1, wasmDir: WASM_DIR });
  const baseline = vt.memory().linear;
  const m = vt.createModel({
    kind: 'mae',
    config: { ...FMNIST, encoder: { ...FMNIST.encoder, embed_dim: 128, depth: 6 } },
  });
  for (const [batch, budget] of [
    [512, 256 * MiB],
    [4096, 256 * MiB],
  ]) {
    const r = fitReport(m, { batch, maskRatio: 0.75, policy: 'none', budget, baseline });
    assert.equal(r.fits, false);
    assert.ok(r.suggestion, r.message);
    const { policy, batch: b2 } = r.suggestion;
    assert.match(r.message, new RegExp(`'${policy.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}'`));
    assert.match(r.message, new RegExp(`batch ${b2}\\b`));
    const again = fitReport(m, { batch: b2, maskRatio: 0.75, policy, budget, baseline });
    assert.equal(again.fits, true, again.message);
    assert.ok(again.need <= budget);
    if (batch === 4096) assert.ok(b2 < batch, 'no policy fits batch 4096: a smaller batch is offered');
  }
  m.dispose();
  vt.close();
});
