// trace.test.mjs: the step as data through the wasm builds. Every replay case of the C test
// (harness/replay.c: each objective's training step and the encoder calls with their backward,
// under every checkpointing policy) recorded, replayed over fresh buffers and compared bit for
// bit with the real step -- all of them through the default build (relaxed SIMD), through its
// scalar references, and in its threaded build at every core with splitting forced; the training
// steps under block through every other build. Also: the list Model.traceStep and `vitrine trace`
// record for the default model is the native engine's (the list is the engine's, not the build's),
// and docs/kernels.md holds the engine's kernel table.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { BUILDS, engine, NATIVE, REPO, WASM_DIR } from './util.mjs';
import { TRAIN_PRESETS } from '../../web/train/presets.js';

// the oracle's exports (wasm/exports.c); the trace itself goes through Model.traceStep
function oracle(vt) {
  return {
    cases: vt._c.replay_case_count(),
    run(i, policy, reference) {
      const err = vt.alloc(700);
      try {
        const rc = vt._c.replay_run(i, policy, reference, err, 700);
        return { rc, message: vt.cstring(err) };
      } finally {
        vt.free(err);
      }
    },
    contract: () => new TextDecoder().decode(vt.takeBytes((out) => vt._c.kernel_contract(out))),
  };
}

function replayAll(vt, { policies, references, only }) {
  const r = oracle(vt);
  assert.ok(r.cases >= 15, `${r.cases} replay cases`);
  let n = 0;
  for (let i = 0; i < r.cases; i++)
    for (const p of policies)
      for (const ref of references) {
        const { rc, message } = r.run(i, p, ref);
        if (only && !only(message)) continue;
        assert.equal(rc, 1, `${vt.build} x${vt.threads} ${ref ? 'reference' : 'fast'}: ${message}`);
        n++;
      }
  return n;
}
const ALL_POLICIES = [0, 1, 2, 3, 4, 5]; // none, block, every:2, sqrt, selective, budget

test("relaxed: every replay case under every policy, this build's kernels and the references, bit for bit", async () => {
  const vt = await engine('relaxed');
  assert.ok(replayAll(vt, { policies: ALL_POLICIES, references: [0, 1] }) >= 180);
});

test('relaxed-mt: every case under every policy at every core, split down to the smallest shapes', async () => {
  const vt = await engine('relaxed-mt');
  vt._splitEverything(true);
  try {
    replayAll(vt, { policies: ALL_POLICIES, references: [0] });
  } finally {
    vt._splitEverything(false);
  }
});

for (const build of BUILDS.filter((b) => b !== 'relaxed' && b !== 'relaxed-mt'))
  test(`${build}: the training steps under block replay bit for bit`, async () => {
    const vt = await engine(build);
    replayAll(vt, { policies: [1], references: [0], only: (m) => m.includes(' step') });
  });

test("Model.traceStep and vitrine trace: the list of the default model is the native engine's; the kernel table is docs/kernels.md's", async () => {
  const vt = await engine('relaxed');
  const p = TRAIN_PRESETS['fmnist-p7-mlp2'];
  const model = vt.createModel({ kind: 'mae', config: { encoder: { ...p.encoder }, ...p.mae } });
  const B = 4;
  try {
    model.initWeights(0);
    model.setGradCheckpointing('block');
    model.trainerInit({ maskRatio: 0.75, clipNorm: 0 });
    const list = model.traceStep({ batch: B, json: true });
    const native = execFileSync(
      NATIVE,
      [
        'trace',
        '--preset',
        'fmnist-p7-mlp2',
        '--batch',
        String(B),
        '--threads',
        '1',
        '--grad-checkpointing',
        'block',
        '--json',
      ],
      { encoding: 'utf8' },
    );
    assert.deepEqual(list, JSON.parse(native), "the JS preset and the engine's give one list");
    assert.equal(list.format, 'vitrine-trace/1');
    assert.ok(
      list.entries.some((e) => e.phase === 'recompute'),
      'block re-computes',
    );
    const summary = model.traceStep({ batch: B });
    assert.match(summary, /re-computed/);
    assert.match(summary, /chain dec: 2 blocks/);
    assert.throws(() => model.traceStep({ batch: B, call: 'forward' }), /train or encode/);
    assert.throws(() => vt.takeBytes((out) => vt._c.trace(model._h, 1, 0, 0, B, 0, out)), /not -1/);
    assert.throws(() => model.traceStep({ batch: 0 }), /batch/);
    assert.equal(model.stepCount, 0, 'recording takes no step');
  } finally {
    model.dispose();
  }
  const enc = vt.createModel({ kind: 'lightly', config: { ...TRAIN_PRESETS.fmnist.encoder } });
  try {
    const list = enc.traceStep({ batch: 2, call: 'encode', json: true });
    assert.ok(
      list.entries.some((e) => e.call === 'attention_backward'),
      'encode + backward recorded',
    );
  } finally {
    enc.dispose();
  }
  // the command line: train's step (mask ratio 0.5) as the native CLI records it
  const cli = execFileSync(
    process.execPath,
    [path.join(REPO, 'web/cli.js'), 'trace', '--batch', String(B), '--threads', '1', '--json'],
    { encoding: 'utf8', env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR } },
  );
  const nat = execFileSync(NATIVE, ['trace', '--batch', String(B), '--threads', '1', '--mask-ratio', '0.5', '--json'], {
    encoding: 'utf8',
  });
  assert.deepEqual(JSON.parse(cli), JSON.parse(nat));
  // every objective the command offers records (classify's trainer options once lacked a seed)
  for (const objective of ['aim', 'classify', 'encode']) {
    const out = execFileSync(
      process.execPath,
      [path.join(REPO, 'web/cli.js'), 'trace', '--objective', objective, '--batch', '2', '--threads', '1'],
      { encoding: 'utf8', env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR } },
    );
    assert.match(out, /kernel calls, [\d.]+ GFLOP/, objective);
  }
  const doc = readFileSync(path.join(REPO, 'docs/kernels.md'), 'utf8');
  const table = doc.slice(doc.indexOf('<!-- kernels:begin -->') + 23, doc.indexOf('<!-- kernels:end -->')).trim();
  assert.equal(
    table,
    oracle(vt).contract().trim(),
    'docs/kernels.md: regenerate the table with build/vitrine trace --kernels',
  );
  // the same contract as data (vt.manifest.kernels, what the WebGPU backend replays by): row for
  // row the table's names, operands (type, access, length), ints and floats
  const rows = table.split('\n').slice(2);
  assert.deepEqual(
    Object.keys(vt.manifest.kernels),
    rows.map((r) => /^\| `(\w+)`/.exec(r)[1]),
  );
  for (const r of rows) {
    const [, name, ops, ints, floats] = /^\| `(\w+)` \| (.*?) \| (.*?) \| (.*?) \| .* \|$/.exec(r);
    const k = vt.manifest.kernels[name],
      list = (x) =>
        x
          .split(',')
          .map((t) => t.trim())
          .filter(Boolean);
    assert.equal(k.ops.map(([n, t, a, len]) => `\`${n}\` ${t} ${a} [${len}]`).join(', '), ops, name);
    assert.deepEqual(k.ints, list(ints), name);
    assert.deepEqual(k.floats, list(floats), name);
  }
});
