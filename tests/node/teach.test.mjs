// teach.test.mjs: what the checkpointing widget (web/widget/, the demo's "How checkpointing works"
// view) reads from the engine's recorded step (trace.js over Model.traceStep), for the default
// model: the arena's peak is the plan under every policy, the FLOPs by phase are the engine's
// summary's, the backward re-computes the blocks the policy drops (block: each but the last, just
// before its backward; every:2: a segment at a time), the blocks' kept and dropped bytes, the
// sqrt-against-block explanation's numbers; a budget that keeps everything is the same kernel
// calls as none and is not timed again; the step times' noise floor, busy machine and ties; and
// docs/demo.md's table is what bench/teach_policies.mjs prints for the engine as it is now.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createVitrine } from '../../web/vitrine.js';
import { TRAIN_PRESETS } from '../../web/train/presets.js';
import { WASM_DIR } from './util.mjs';
import {
  readTrace,
  blockMoments,
  recomputations,
  blockSizes,
  droppedBytes,
  chipText,
  quantile,
  median,
  pairedRatios,
  measureTimes,
  recordPolicies,
  timingSummary,
  tableRows,
  timesProse,
  distinctPolicies,
  sqrtProse,
  HALF_WAY,
  AGAIN,
} from '../../web/widget/index.js';
import { specFor } from '../../demo/worker-data.js';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

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
  // what each block drops against none: nothing under none, its internals under block, the same form on every row
  for (let b = 0; b < 4; b++) {
    assert.equal(droppedBytes(R.none, R.none, 0, b), 0);
    assert.equal(droppedBytes(R.block, R.none, 0, b), internals, `block ${b} drops its internals`);
  }
  for (const p of ['none', 'block', 'every:2', 'sqrt', 'selective'])
    for (let b = 0; b < 4; b++)
      assert.match(
        chipText(R[p], R.none, 0, b),
        /^keeps [\d.]+ [KM]iB \([a-z ]+\) · drops ([\d.]+ [KM]iB|nothing)$/,
        `${p} ${b}`,
      );
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

test('step times in interleaved rounds: every policy once a round and the baseline twice, the order rotated, a round stopped half way dropped', async () => {
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
      stopped: () => steps >= 3 + 4 * 2 + 1,
    },
  );
  assert.deepEqual(seen.slice(0, 3), policies, 'one warm-up step of each first');
  assert.deepEqual(
    seen.slice(3, 11),
    ['none', 'block', 'sqrt', 'none', 'block', 'sqrt', 'none', 'none'],
    'each round: every policy and none again, rotated by one',
  );
  assert.equal(r.aborted, true);
  for (const p of policies)
    assert.equal(r.ms[p].length, 2, `${p}: the third round, stopped after one step, is dropped`);
  assert.equal(r.again.length, 2);
  assert.deepEqual([...Object.values(r.ms).flat(), ...r.again], new Array(8).fill(1));
  vt.close();
});

test('what the times say: the noise floor from none timed twice, a busy machine, policies this machine cannot tell apart', () => {
  // quiet: none twice agrees within 1%; block 20% slower, clearly; sqrt and every:2 both ~35%, overlapping
  const none = [100, 101, 99, 100, 100];
  const quiet = {
    ms: {
      none,
      block: none.map((t, i) => t * [1.19, 1.2, 1.21, 1.2, 1.2][i]),
      sqrt: none.map((t, i) => t * [1.33, 1.36, 1.35, 1.34, 1.37][i]),
      'every:2': none.map((t, i) => t * [1.35, 1.36, 1.34, 1.36, 1.35][i]),
      selective: none.map((t, i) => t * [1.0, 1.01, 0.99, 1.0, 1.005][i]),
    },
    again: none.map((t, i) => t * [1.0, 1.005, 0.995, 1.01, 0.99][i]),
  };
  const s = timingSummary(quiet);
  assert.equal(s.rounds, 5);
  assert.equal(s.busy, false);
  assert.ok(s.noise.q1 >= 0.99 && s.noise.q3 <= 1.01, JSON.stringify(s.noise));
  assert.equal(s.byPolicy.block.distinct, true);
  assert.equal(s.byPolicy.sqrt.distinct, true);
  assert.equal(s.byPolicy.selective.distinct, false, 'within the noise of none timed twice');
  assert.ok(
    s.ties.some((g) => g.includes('sqrt') && g.includes('every:2')),
    JSON.stringify(s.ties),
  );
  assert.ok(!s.ties.some((g) => g.includes('block')), 'block stands apart');
  // a chain of overlaps does not make a group: a ~ b and b ~ c, but a and c apart
  const chain = timingSummary({
    ms: {
      none,
      a: none.map((t, i) => t * [1.05, 1.1, 1.12, 1.15, 1.2][i]), // middle half 1.10-1.15
      b: none.map((t, i) => t * [1.1, 1.14, 1.17, 1.2, 1.22][i]), // 1.14-1.20
      c: none.map((t, i) => t * [1.15, 1.19, 1.22, 1.25, 1.3][i]), // 1.19-1.25
    },
    again: quiet.again,
  });
  assert.deepEqual(chain.ties, [['a', 'b']], JSON.stringify(chain.byPolicy));
  // busy: none timed twice disagrees by some 20% either way
  const busy = { ms: quiet.ms, again: none.map((t, i) => t * [0.8, 1.25, 0.85, 1.22, 1.0][i]) };
  const b = timingSummary(busy);
  assert.equal(b.busy, true);
  assert.equal(b.byPolicy.block.distinct, false, '20% is inside what two timings of none disagree by');
  assert.equal(b.byPolicy.sqrt.distinct, true);
});

test('the comparison: a budget that keeps everything is none, not raced; the half-way budget says so; the table states the noise', async () => {
  const vt = await createVitrine({ threads: 1, wasmDir: WASM_DIR });
  const spec = specFor({ kind: 'mae', model: 'fmnist' });
  const all = recordPolicies(vt, { spec, batch: B, maskRatio: 0.75 }).results;
  const half = Object.keys(all).find((p) => p.startsWith('budget:'));
  assert.equal(all[half].note, HALF_WAY);
  assert.equal(all[half].same, undefined, 'the half-way budget re-computes something: its own computation');
  const R = recordPolicies(vt, {
    spec,
    batch: B,
    maskRatio: 0.75,
    policies: ['none', 'block', `budget:${1024 * 2 ** 20}`],
  }).results;
  const big = `budget:${1024 * 2 ** 20}`;
  assert.equal(R[big].same, 'none', 'a budget that keeps everything runs the kernel calls of none');
  assert.equal(R[big].note, undefined);
  assert.equal(R.block.same, undefined);
  assert.deepEqual(distinctPolicies(R), ['none', 'block']);
  const times = { ms: { none: [10, 11, 10], block: [12, 13, 12] }, again: [10, 11, 10.1] };
  const rows = Object.fromEntries(tableRows(R, times).map((r) => [r.policy, r]));
  assert.match(rows[big].cells[4], /^the same computation as none \(the same kernel calls\): not timed again$/);
  assert.match(rows.none.cells[3], /^0: nothing re-computed$/);
  assert.match(rows.block.cells[4], /^[\d.]+ ms \([\d.]+–[\d.]+\), 3 rounds$/);
  assert.match(rows.block.cells[5], /^1\.\d\d× \(/);
  assert.match(
    timesProse(R, times),
    /Timing none twice in each round, the second timing over the first had a median of 1\.00×/,
  );
  assert.match(timesProse(R, times), /runs the same kernel calls as none: one computation, timed once/);
  assert.equal(AGAIN, 'again');
  vt.close();
});

test("docs/demo.md's table is the widget's table of the engine as it is: every exact column (bench/teach_policies.mjs --doc writes it)", async () => {
  const doc = readFileSync(fileURLToPath(new URL('../../docs/demo.md', import.meta.url)), 'utf8');
  const sec = doc.slice(doc.indexOf('<!-- teach_policies: begin -->'), doc.indexOf('<!-- teach_policies: end -->'));
  const threads = Number(/(\d+) threads? as in the tab/.exec(sec)[1]);
  const rows = sec
    .split('\n')
    .filter((l) => l.startsWith('| ') && !l.startsWith('| policy'))
    .map((l) =>
      l
        .slice(2, -2)
        .split(' | ')
        .map((c) => c.replace(/\\\|/g, '|')),
    );
  assert.ok(rows.length >= 8, sec.slice(0, 400));
  // the same recording at the doc's thread count (the arena holds an attention scratch per thread)
  const vt = await createVitrine({ threads, wasmDir: WASM_DIR });
  const R = recordPolicies(vt, { spec: specFor({ kind: 'mae', model: 'fmnist' }), batch: 32, maskRatio: 0.75 }).results;
  vt.close();
  const want = tableRows(R).map((w) => [
    ...w.cells.slice(0, 4),
    `${(R[w.policy].stepBytes / 2 ** 20).toFixed(1)} MiB`,
    (R[w.policy].total / R.none.total).toFixed(2),
  ]);
  const got = rows.map((c) => [...c.slice(0, 4), c[6], c[7]]);
  assert.deepEqual(got, want);
});
