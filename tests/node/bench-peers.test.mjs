// The benchmark's peers are checked against PyTorch before they are timed (bench/peers/vit.mjs's
// compareWithTorch under the parity rule; bench/jaxjs_vit.mjs refuses to time a step that
// disagrees). Here: the comparison catches a wrong loss, a wrong or missing gradient and a
// transposed one; and jax-js's own step at the real ViT-Ti widths (one block) passes the check and
// is timed, while the same step with its pad keys left in attention is refused, untimed. No time
// is asserted. The jax-js part needs /usr/bin/python3 with torch (else skipped, saying so).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  PARITY,
  compareWithTorch,
  lossCheck,
  makeWeights,
  toPeerLayout,
  fromPeerLayout,
} from '../../bench/peers/vit.mjs';
import { REPO } from './util.mjs';

// a reference of two tensors and two steps, as bench/peers/vit.mjs referenceOf gives it
const ref = () => ({
  losses64: [6.5, 5.4],
  losses32: [6.5000001, 5.4000002],
  grads64: new Map([
    ['head.weight', Float32Array.from([1, -2, 3, -4, 5, -6])],
    ['head.bias', Float32Array.from([0.5, -0.25])],
  ]),
  grads32: new Map([
    ['head.weight', Float32Array.from([1, -2, 3, -4, 5, -6.00001])],
    ['head.bias', Float32Array.from([0.5, -0.25])],
  ]),
  torch: 'test',
});
const ours = () => ({ losses: [6.5, 5.4], grads: new Map([...ref().grads64].map(([k, v]) => [k, v.slice()])) });

test('the check passes a step that agrees, and reports PyTorch float32 beside it', () => {
  const c = compareWithTorch(ours(), ref());
  assert.equal(c.ok, true, c.why);
  assert.equal(c.worst.err, 0);
  assert.ok(c.torch32_worst > 0 && c.torch32_worst < PARITY);
  assert.equal(c.grad_norm, c.torch_grad_norm);
});

test('the check refuses a wrong loss, a wrong, missing or transposed gradient', () => {
  const loss = ours();
  loss.losses[1] *= 1 + 3 * PARITY; // step 2's loss: the update went wrong
  let c = compareWithTorch(loss, ref());
  assert.equal(c.ok, false);
  assert.match(c.why, /^1 disagreement\(s\) with PyTorch; first: loss of step 2: /);

  const grad = ours();
  grad.grads.get('head.weight')[5] = -6 * (1 + 2 * PARITY); // err = 6 * 2e-4 / 6 > 1e-4
  c = compareWithTorch(grad, ref());
  assert.equal(c.ok, false);
  assert.match(c.why, /gradient head\.weight: err 2\.0\de-4/);
  assert.equal(c.worst.key, 'head.weight');

  const missing = ours();
  missing.grads.delete('head.bias');
  assert.match(compareWithTorch(missing, ref()).why, /gradient head\.bias: missing/);

  // the same values in another layout: the norm agrees, the check must not
  const t = ours();
  t.grads.set('head.weight', Float32Array.from([1, -4, -2, 5, 3, -6]));
  c = compareWithTorch(t, ref());
  assert.equal(c.ok, false);
  assert.ok(Math.abs(c.grads[0].norm - c.grads[0].torch_norm) < 1e-12);

  const nan = ours();
  nan.losses[0] = NaN;
  assert.deepEqual(
    lossCheck(nan.losses, ref()).problems.map((p) => p.slice(0, 17)),
    ['loss of step 1: N'],
  );
});

test('the peers layout round-trips every parameter of the model', () => {
  const w = makeWeights(192, 1);
  for (const [key, { shape, data }] of w) {
    const p = toPeerLayout(key, shape, data);
    assert.deepEqual(fromPeerLayout(key, shape, p.data), data, key);
  }
  const pe = w.get('patch_embed.weight'); // [192, 3, 16, 16] -> [768, 192]: [c*256 + i*16 + j, d]
  assert.deepEqual(toPeerLayout('patch_embed.weight', pe.shape, pe.data).shape, [768, 192]);
  assert.equal(toPeerLayout('patch_embed.weight', pe.shape, pe.data).data[5 * 192 + 7], pe.data[7 * 768 + 5]);
});

const PY = process.env.VITRINE_PYTHON || '/usr/bin/python3';
const torchSkip =
  spawnSync(PY, ['-c', 'import torch, numpy'], { encoding: 'utf8' }).status === 0
    ? false
    : `${PY} with torch and numpy not found: jax-js's check against PyTorch skipped`;
if (torchSkip) console.log(`# ${torchSkip}`);

const jaxjs = (...extra) => {
  const r = spawnSync(
    process.execPath,
    [join(REPO, 'bench/jaxjs_vit.mjs'), '--depth', '1', '--steps', '1', '--warmup', '0', ...extra],
    { encoding: 'utf8', cwd: REPO },
  );
  const lines = r.stdout.trim().split('\n');
  return { status: r.status, out: JSON.parse(lines[lines.length - 1]), stderr: r.stderr };
};

test(
  "jax-js's step passes PyTorch's check and is timed; with its pad keys unmasked it is refused",
  { skip: torchSkip, timeout: 120_000 },
  () => {
    const good = jaxjs();
    assert.equal(good.status, 0, good.stderr + JSON.stringify(good.out));
    assert.equal(good.out.check.ok, true);
    assert.ok(good.out.check.worst.err <= PARITY);
    assert.equal(good.out.check.losses.length, 2);
    assert.equal(good.out.tokens_padded, 200);
    assert.equal(good.out.ms.length, 1);

    const bad = jaxjs('--unmasked-pad');
    assert.equal(bad.status, 1);
    assert.equal(bad.out.check.ok, false);
    assert.match(bad.out.error, /^not timed: \d+ disagreement\(s\) with PyTorch/);
    assert.equal(bad.out.ms, undefined);
    assert.equal(bad.out.ms_per_step, undefined);
  },
);

// bench/run.mjs's section 3 from a results.json (--from, --out elsewhere): jax-js's time against
// vitrine's is a paired ratio over the rounds it was timed in; a round whose check refused the step
// is said, not counted.
test('bench/run.mjs: the jax-js column and the rounds it refused', () => {
  const dir = mkdtempSync(join(tmpdir(), 'vitrine-bench-peers-'));
  try {
    const checked = {
      ok: true,
      losses: [{ err: 1e-7 }, { err: 2e-7 }],
      worst: { key: 'blocks.9.norm2.weight', err: 3.5e-6 },
      torch32_worst: 2e-6,
      grad_norm: 48.9324,
      torch_grad_norm: 48.9324,
    };
    const round = (round, vms, jaxjs) => ({
      batch: 1,
      round,
      load: 1,
      vitrine: { runs: [{ label: 'this tree relaxed 1t', root: REPO, ms_median: vms, ms: [vms] }] },
      jaxjs: { jaxjs: '0.1.25', attention: 'sdpa', batch: 1, ...jaxjs },
    });
    const R = {
      date: '2026-12-07T00:00:00Z',
      commit: 'test',
      notes: [],
      host: { cpu: 'a test CPU', cores: 2, isa: 'AVX2 + FMA3', fma: true, node: 'v20', v8: '11' },
      sections: {
        one_core: {
          rounds: [
            round(0, 100, { ms_per_step: 300, check: checked }),
            round(1, 100, { error: 'not timed: 3 disagreement(s) with PyTorch; first: x', check: { ok: false } }),
            round(2, 200, { ms_per_step: 640, check: checked }),
          ],
        },
      },
    };
    writeFileSync(join(dir, 'in.json'), JSON.stringify(R));
    const r = spawnSync(
      process.execPath,
      [join(REPO, 'bench/run.mjs'), '--from', join(dir, 'in.json'), '--out', join(dir, 'out')],
      {
        encoding: 'utf8',
      },
    );
    assert.equal(r.status, 0, r.stderr);
    const md = readFileSync(join(dir, 'out/results.md'), 'utf8');
    const row = md.split('\n').find((l) => l.startsWith('| 1 | 3 |'));
    assert.ok(row, md);
    // columns: ... | TF.js ms | jax-js ms | vitrine / PyTorch | TF.js / vitrine | jax-js / vitrine | ...
    const cells = row.split('|').map((c) => c.trim());
    assert.equal(cells[7], '470'); // median of 300 and 640
    assert.equal(cells[10], '3.10 (3.00–3.20)');
    assert.match(
      md,
      /jax-js 0\.1\.25, attention sdpa; .*a test CPU, whose own ISA is AVX2 \+ FMA3\)\. Checked against PyTorch in 2 of 3 processes: .*every gradient tensor err ≤ 3\.5e-6/,
    );
    assert.match(md, /\*\*jax-js b1 round 1: not timed\*\*: not timed: 3 disagreement\(s\) with PyTorch; first: x\./);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
