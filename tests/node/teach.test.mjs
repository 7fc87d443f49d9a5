// teach.test.mjs: what the demo's "How checkpointing works" view reads from the engine's recorded
// step (demo/trace-model.js over Model.traceStep), for the default model: the arena's peak is the
// plan under every policy, the FLOPs by phase are the engine's summary's, the backward re-computes
// the blocks the policy drops (block: each but the last, just before its backward; every:2: a
// segment at a time), the blocks' kept bytes, and the sqrt-against-block explanation's numbers.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createVitrine } from '../../web/vitrine.js';
import { TRAIN_PRESETS } from '../../web/train/presets.js';
import { WASM_DIR } from './util.mjs';
import { readTrace, blockMoments, recomputations, blockSizes } from '../../demo/trace-model.js';
import { quantile, median, pairedRatios, measureTimes } from '../../demo/teach-measure.js';
import { sqrtProse } from '../../demo/compare-view.js';
import { specFor } from '../../demo/worker-data.js';

const P = TRAIN_PRESETS.fmnist;
const B = 8;

test("the recorded step read for teaching: peaks, FLOPs, re-computations and kept bytes are the engine's", async () => {
  const vt = await createVitrine({ threads: 1, wasmDir: WASM_DIR });
  const m = vt.createModel({ kind: 'mae', config: { encoder: { ...P.encoder }, ...P.mae } });
  m.initWeights(1);
  m.trainerInit({ maskRatio: 0.75 });
  const R = {};
  for (const p of ['none', 'block', 'every:2', 'every:4', 'sqrt', 'selective']) {
    m.setGradCheckpointing(p);
    const r = (R[p] = readTrace(m.traceStep({ batch: B, json: true })));
    assert.equal(r.peak.bytes, r.planned, `${p}: the arena's highest point is the plan`);
    assert.equal(r.planned, m.planTrainStep({ batch: B }).activations);
    // the engine's own summary: "forward F, re-computed R (..), backward K" in GFLOP
    const sum = m.traceStep({ batch: B });
    const g =
      /forward ([\d.]+), re-computed ([\d.]+) \([\d.]+% of the forward\), backward ([\d.]+), optimizer ([\d.]+)/.exec(
        sum,
      );
    assert.ok(g, sum.slice(0, 300));
    ['forward', 'recompute', 'backward', 'optimizer'].forEach((k, i) =>
      assert.ok(Math.abs(r.flops[k] / 1e9 - Number(g[i + 1])) <= 0.0005, `${p} ${k}: ${r.flops[k]} vs ${g[i + 1]}`),
    );
    assert.equal(r.total, r.flops.forward + r.flops.recompute + r.flops.backward + r.flops.optimizer);
    for (const q of r.memory) assert.ok(q.live <= q.top && q.top <= r.planned);
    assert.equal(m.stepCount, 0, 'recording takes no step');
  }
  assert.equal(R.none.flops.recompute, 0);
  for (const p of ['block', 'every:2', 'sqrt', 'selective']) assert.ok(R[p].flops.recompute > 0, p);
  // block: each encoder block but the last re-computed, each right before its own backward
  assert.deepEqual(
    recomputations(R.block, 0).map((x) => x.block),
    [2, 1, 0],
  );
  const seq = (r, c) =>
    blockMoments(r, c)
      .filter((x) => x.phase !== 'forward')
      .map((x) => `${x.phase[0]}${x.block}`)
      .join(' ');
  assert.equal(seq(R.block, 0), 'b3 r2 b2 r1 b1 r0 b0');
  assert.equal(seq(R['every:2'], 0), 'r2 r3 b3 b2 r0 r1 b1 b0');
  assert.equal(seq(R.none, 0), 'b3 b2 b1 b0');
  assert.equal(seq(R.selective, 0), 'r3 b3 r2 b2 r1 b1 r0 b0');
  // what the forward keeps: everything under none, one input-sized buffer under block, matmul outputs under selective
  const { input, internals } = blockSizes(R.block, R.none, 0);
  const T = (P.encoder.img_size / P.encoder.patch_size) ** 2 + 1,
    D = P.encoder.embed_dim;
  const kept = Math.ceil((B * Math.round(T * 0.25) * D * 4) / 64) * 64; // tokens kept by the mask (0.75), 64-byte aligned
  assert.ok(input > 0 && input <= kept + 64 && input >= B * D * 4, `block input ${input}`);
  assert.ok(internals > 10 * input, `a block's internals (${internals}) dwarf its input (${input})`);
  assert.deepEqual(R.selective.blocks[0][0].keptNames.sort(), ['fc1_out', 'out', 'qkv']);
  assert.ok(
    R.sqrt.chains[0].segment === 2 && R.sqrt.peak.bytes > R.block.peak.bytes,
    'sqrt keeps more than block at depth 4',
  );
  // every:K from 2 on peaks where the 2-block decoder runs again whole, which the page says
  for (const p of ['every:2', 'every:4'])
    assert.deepEqual(R[p].moments[R[p].peak.moment], {
      ...R[p].moments[R[p].peak.moment],
      phase: 'recompute',
      chain: 1,
      block: 0,
    });
  const prose = sqrtProse(R);
  assert.match(prose, /Why sqrt loses to block here/);
  assert.match(
    prose,
    /Why the every:K curve is flat\.<\/b> [\d.]+ [KM]iB at K = 2, [\d.]+ [KM]iB at K = 4: for every K from 2 the\npeak falls in the decoder, as the re-computation of decoder block 0 begins/,
  );
  m.dispose();
});

test('quantiles of the step times', () => {
  assert.equal(median([5, 1, 3]), 3);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.equal(quantile([1, 2, 3, 4, 5], 0.25), 2);
  assert.equal(quantile([1, 2, 3, 4, 5], 0.75), 4);
  assert.ok(Number.isNaN(median([])));
  assert.deepEqual(
    pairedRatios({ none: [2, 4], block: [3, 5, 7] }, 'block'),
    [1.5, 1.25],
    'round by round, as far as both go',
  );
});

test('step times in interleaved rounds: every policy once a round, the order rotated, a round stopped half way dropped', async () => {
  const vt = await createVitrine({ threads: 1, wasmDir: WASM_DIR });
  const policies = ['none', 'block', 'sqrt'],
    seen = [];
  let clock = 0,
    steps = 0;
  const spec = specFor({ kind: 'mae', model: 'mini' });
  // the policies set on the model, in order, seen through its setGradCheckpointing; a clock that ticks 1 ms a reading
  const create = vt.createModel.bind(vt);
  vt.createModel = (sp) => {
    const m = create(sp),
      set = m.setGradCheckpointing.bind(m);
    m.setGradCheckpointing = (p) => {
      seen.push(p);
      return set(p);
    };
    return m;
  };
  const r = await measureTimes(
    vt,
    { spec, batch: 2, maskRatio: 0.75, policies, reps: 3, warmup: 1 },
    {
      now: () => clock++,
      onStep: async () => {
        steps++;
      },
      stopped: () => steps >= 3 + 3 * 2 + 1,
    },
  );
  assert.deepEqual(seen.slice(0, 3), policies, 'one warm-up step of each first');
  assert.deepEqual(seen.slice(3, 9), ['none', 'block', 'sqrt', 'block', 'sqrt', 'none'], 'each round rotated by one');
  assert.equal(r.aborted, true);
  for (const p of policies)
    assert.equal(r.ms[p].length, 2, `${p}: the third round, stopped after one step, is dropped`);
  assert.deepEqual(Object.values(r.ms).flat(), new Array(6).fill(1));
  vt.close();
});
