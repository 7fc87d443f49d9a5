// plan.test.mjs: Model.planTrainStep, the engine's plan of a training step, through the shell:
// the step it plans is the step trainStep runs (the arena it sizes, the tokens its masks keep),
// and its search of what fits a budget answers in fields (no error text to parse).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { engine } from './util.mjs';
import { showMasks } from '../../web/train/visualize.js';

const ENC = { img_size: 16, patch_size: 4, in_chans: 1, embed_dim: 16, depth: 3, num_heads: 2 };
const CONFIGS = {
  mae: { encoder: ENC, decoder_dim: 16, decoder_depth: 2, decoder_heads: 2 },
  aim: { encoder: ENC, head_hidden_dim: 16, head_blocks: 2 },
};
const B = 3;

for (const kind of ['mae', 'aim']) {
  test(`${kind}: planTrainStep is the step trainStep runs, and what fits a budget`, async () => {
    const vt = await engine('simd');
    const m = vt.createModel({ kind, config: CONFIGS[kind] });
    try {
      m.initWeights(1);
      m.trainerInit({ maskRatio: 0.6, seed: 2 });
      const { prefix, img, patch } = m.dims,
        L = prefix + (img / patch) ** 2;
      const images = new Float32Array(B * img * img).map((_, i) => Math.sin(i));
      for (const policy of ['none', 'block', 'selective', 'every:2']) {
        m.setGradCheckpointing(policy);
        const p = m.planTrainStep({ batch: B });
        assert.equal(p.tokensKept + p.tokensMasked, kind === 'mae' ? L : p.tokensKept);
        if (kind === 'mae')
          assert.equal(showMasks(m, B, 0.6).idxKeep.length, B * p.tokensKept, 'showMasks keeps what a step keeps');
        assert.deepEqual(
          m.planTrainStep({ batch: B, maskRatio: 0.6, policy }),
          p,
          "the trainer's ratio and policy are the defaults",
        );
        m.trainStep(images, B);
        const mem = m.memory();
        assert.equal(mem.arena.planned, p.activations, `${policy}: the step's arena is the plan`);
        assert.equal(mem.planned.total, p.total);
      }
      m.setGradCheckpointing('none');
      const none = m.planTrainStep({ batch: B, budget: 1 });
      assert.equal(none.fits, false);
      assert.equal(none.fit, null);
      assert.equal(none.maxBatch, 0);
      assert.ok(none.least && none.least.total < none.total, 'a smaller plan than none exists');
      const roomy = m.planTrainStep({ batch: B, budget: none.total });
      assert.equal(roomy.fits, true);
      assert.equal(roomy.fit.policy, 'none');
      assert.equal(roomy.fit.recomputeFlops, 0);
      const tight = m.planTrainStep({ batch: B, budget: none.least.total });
      assert.equal(tight.fits, false);
      assert.ok(tight.fit && tight.fit.total <= none.least.total && tight.fit.recomputeFlops > 0, 'checkpointing fits');
      const below = m.planTrainStep({ batch: B, budget: none.least.total - 1 });
      assert.equal(below.fit, null);
      assert.ok(below.maxBatch < B, 'a smaller batch');
      if (below.maxBatch > 0) assert.ok(m.planTrainStep({ batch: below.maxBatch, budget: none.least.total - 1 }).fit);
      const unmet = m.planTrainStep({ batch: B, policy: 'budget:1', budget: none.total });
      assert.equal(unmet.policyMet, false);
      assert.equal(unmet.total, none.least.total, 'an unmet budget policy plans the smallest layout');
      assert.equal(m.gradCheckpointing, 'none', 'planning changes no policy');
      assert.throws(
        () => m.planTrainStep({ batch: 0 }),
        (e) => e.code === 'VT_ERR_ARG' || /batch/.test(e.message),
      );
    } finally {
      m.dispose();
    }
  });
}
