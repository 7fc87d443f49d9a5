// trace.test.mjs: the step as data through the wasm builds. Every replay case of the C test
// (harness/replay.c: each objective's training step and the encoder calls with their backward,
// under every checkpointing policy) recorded, replayed over fresh buffers and compared bit for
// bit with the real step -- all of them through the default build (relaxed SIMD), through its
// scalar references, and in its threaded build at every core with splitting forced; the training
// steps under block through every other build. Also: the recorded list of the default model is the
// native engine's, byte for byte (the list is the engine's, not the build's), and docs/kernels.md
// holds the engine's kernel table.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { BUILDS, engine, NATIVE, REPO } from './util.mjs';
import { TRAIN_PRESETS } from '../../web/train.js';

// the raw exports (the JS API for traces comes with web/'s restructuring)
function raw(vt) {
  const fn = (n) => vt._low.fn(n);
  const text = (out) => {
    const [p, n] = vt.u32(out, 2);
    const s = new TextDecoder().decode(vt.u8().slice(p, p + n));
    vt.free(p);
    return s;
  };
  return {
    cases: fn('vtw_replay_case_count')(),
    run(i, policy, reference) {
      const err = vt.alloc(700);
      try {
        const rc = fn('vtw_replay_run')(i, policy, reference, err, 700);
        return { rc, message: vt.cstring(err) };
      } finally { vt.free(err); }
    },
    contract() {
      const out = vt.alloc(8);
      try { vt.check(fn('vtw_kernel_contract')(out)); return text(out); } finally { vt.free(out); }
    },
    trace(model, what, images, batch, json) {
      const out = vt.alloc(8), img = vt.copyIn(images);
      try { vt.check(fn('vtw_trace')(model._h, what, img, 0, batch, json ? 1 : 0, out)); return text(out); } finally { vt.free(out); vt.free(img); }
    },
  };
}

function replayAll(vt, { policies, references, only }) {
  const r = raw(vt);
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

test('relaxed: every replay case under every policy, this build\'s kernels and the references, bit for bit', async () => {
  const vt = await engine('relaxed');
  assert.ok(replayAll(vt, { policies: ALL_POLICIES, references: [0, 1] }) >= 180);
});

test('relaxed-mt: every case under every policy at every core, split down to the smallest shapes', async () => {
  const vt = await engine('relaxed-mt');
  vt._splitEverything(true);
  try { replayAll(vt, { policies: ALL_POLICIES, references: [0] }); } finally { vt._splitEverything(false); }
});

for (const build of BUILDS.filter((b) => b !== 'relaxed' && b !== 'relaxed-mt'))
  test(`${build}: the training steps under block replay bit for bit`, async () => {
    const vt = await engine(build);
    replayAll(vt, { policies: [1], references: [0], only: (m) => m.includes(' step') });
  });

test('the recorded list of the default model is the native engine\'s, byte for byte; the kernel table is docs/kernels.md\'s', async () => {
  const vt = await engine('relaxed');
  const r = raw(vt);
  const p = TRAIN_PRESETS['fmnist-p7-mlp2'];
  const model = vt.createModel({ kind: 'mae', config: { encoder: { ...p.encoder }, ...p.mae } });
  try {
    model.initWeights(0);
    model.setGradCheckpointing('block');
    model.trainerInit({ maskRatio: 0.75, clipNorm: 0 });
    const B = 4, images = new Float32Array(B * 28 * 28);
    const wasm = r.trace(model, -1, images, B, true);
    const native = execFileSync(NATIVE, ['trace', '--preset', 'fmnist-p7-mlp2', '--batch', String(B), '--threads', '1',
      '--grad-checkpointing', 'block', '--json'], { encoding: 'utf8' });
    assert.equal(wasm, native, 'the JS preset and the engine\'s give one list');
    const list = JSON.parse(wasm);
    assert.equal(list.format, 'vitrine-trace/1');
    assert.ok(list.entries.some((e) => e.phase === 'recompute'), 'block re-computes');
    const summary = r.trace(model, -1, images, B, false);
    assert.match(summary, /re-computed/);
    assert.match(summary, /chain dec: 2 blocks/);
    assert.throws(() => r.trace(model, 1, images, B, false), /not -1/);
    assert.equal(model.stepCount, 0, 'recording takes no step');
  } finally { model.dispose(); }
  const enc = vt.createModel({ kind: 'lightly', config: { ...TRAIN_PRESETS.fmnist.encoder } });
  try {
    const list = JSON.parse(r.trace(enc, 0, new Float32Array(2 * 28 * 28), 2, true));
    assert.ok(list.entries.some((e) => e.call === 'attention_backward'), 'encode + backward recorded');
  } finally { enc.dispose(); }
  const doc = readFileSync(path.join(REPO, 'docs/kernels.md'), 'utf8');
  const table = doc.slice(doc.indexOf('<!-- kernels:begin -->') + 23, doc.indexOf('<!-- kernels:end -->')).trim();
  assert.equal(table, r.contract().trim(), 'docs/kernels.md: regenerate the table with build/vitrine trace --kernels');
});
