// shell.test.mjs: the class API of web/vitrine.js over the default build: a whole call against a
// fixture, images in, errors, memory accounting, views across memory growth, weights round trip,
// the CLI's contract.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { VitrineError, createVitrine, simdSupported } from '../../web/vitrine.js';
import { REPO, FIXTURES, NATIVE, WASM_DIR, engine, fixture, readSafetensors, f32, relErr } from './util.mjs';

const BUILD = simdSupported() ? 'simd' : 'scalar';

// The lightly encoder of vit_encode.safetensors with its weights, all trainable as in the dump.
async function fixtureModel(name = 'vit_encode.safetensors', build = BUILD) {
  const vt = await engine(build);
  const bytes = fixture(name);
  const st = readSafetensors(bytes);
  const model = vt.createModel({ kind: 'lightly', config: st.meta.config });
  model.loadSafetensors(bytes, { filePrefix: 'param/' });
  model.setRequiresGrad('', true);
  return { vt, model, st, images: f32(st.tensors['input/images']) };
}

const throwsEngine = (fn, re, status) =>
  assert.throws(fn, (e) => {
    assert.ok(e instanceof VitrineError && e instanceof Error, `not a VitrineError: ${e}`);
    assert.match(e.message, re);
    if (status !== undefined) assert.equal(e.status, status);
    return true;
  });

test('encode + backward through the class API match the PyTorch dump', async () => {
  const { model, st, images } = await fixtureModel();
  const out = model.encode(images, { needGrad: true });
  assert.deepEqual(out.shape, st.tensors['expect/out'].shape);
  assert.ok(relErr(out.data, f32(st.tensors['expect/out'])) < 1e-4);
  model.zeroGrad();
  const { dimages } = model.backward({ douts: [f32(st.tensors['input/dout/out'])], inputGrad: true });
  assert.ok(relErr(dimages, f32(st.tensors['expect/grad/input/images'])) < 1e-4);
  let checked = 0;
  for (const p of model.params()) {
    const want = st.tensors[`expect/grad/${p.name}`];
    if (!want) continue;
    assert.ok(relErr(p.grad, f32(want)) < 1e-4, p.name);
    checked++;
  }
  assert.ok(checked > 10);
  model.dispose();
});

test('ImageData-like input is normalised with ImageNet mean/std into NCHW', async () => {
  const { model } = await fixtureModel();
  const S = model.dims.img,
    px = S * S;
  const data = new Uint8ClampedArray(4 * px).map((_, i) => (i * 37) % 256);
  const mean = [0.485, 0.456, 0.406],
    std = [0.229, 0.224, 0.225];
  const nchw = new Float32Array(3 * px);
  for (let i = 0; i < px; i++)
    for (let c = 0; c < 3; c++) nchw[c * px + i] = (data[4 * i + c] / 255 - mean[c]) / std[c];
  const a = model.forward({ width: S, height: S, data });
  const b = model.forward(nchw);
  assert.deepEqual(a.shape, [1, model.dims.dim]);
  assert.deepEqual(Array.from(a.data), Array.from(b.data));
  model.dispose();
});

test('forwardIntermediates, loss and plan', async () => {
  const { model, images } = await fixtureModel();
  const r = model.forwardIntermediates(images, { norm: true });
  assert.equal(r.intermediates.length, model.dims.depth);
  const p = model.plan('encode', { batch: 2 });
  assert.ok(p.activations > 0 && p.total === p.params + p.grads + p.optimizer + p.activations);
  model.dispose();
  const vt = await engine(BUILD);
  const bytes = fixture('aim_loss.safetensors');
  const st = readSafetensors(bytes);
  const aim = vt.createModel({ kind: 'aim', config: st.meta.config });
  aim.loadSafetensors(bytes, { filePrefix: 'param/' });
  const loss = aim.loss(f32(st.tensors['input/images']), { mask: st.tensors['input/mask'].bytes });
  assert.ok(Math.abs(loss - f32(st.tensors['expect/loss'])[0]) <= 1e-4 * Math.abs(loss));
  aim.dispose();
});

test("createModel with a preset and a config: the preset's encoder under another MAE decoder (web/train/presets.js MAE_DECODERS)", async () => {
  const { MAE_DECODERS, maeDecoder } = await import('../../web/train/presets.js');
  // an engine of its own: these models grow its memory, which the memory-growth test below needs to see grow
  const vt = await createVitrine({ wasm: BUILD, wasmDir: WASM_DIR, threads: 1 });
  const shapes = (m, pred) =>
    m
      .params()
      .filter((p) => pred(p.name))
      .map((p) => `${p.name} ${p.shape.join('x')}`);
  const isDec = (n) => !n.startsWith('backbone.'); // lightly's MAE: backbone.* (the encoder), the decoder and its head
  const byPreset = vt.createModel({ kind: 'mae', preset: 'vit_tiny_patch16_224' }); // the engine's default: lightly's
  const tab = vt.createModel({ kind: 'mae', preset: 'vit_tiny_patch16_224', config: maeDecoder('tab') });
  const lightly = vt.createModel({ kind: 'mae', preset: 'vit_tiny_patch16_224', config: maeDecoder('lightly') });
  assert.deepEqual(
    shapes(tab, (n) => !isDec(n)),
    shapes(byPreset, (n) => !isDec(n)),
  ); // the same encoder
  assert.deepEqual(
    shapes(lightly, () => true),
    shapes(byPreset, () => true),
  ); // lightly's = the default
  assert.ok(shapes(tab, isDec).includes(`decoder_embed.weight ${MAE_DECODERS.tab.decoder_dim}x192`));
  throwsEngine(() => vt.createModel({ kind: 'mae', preset: 'vit_nope', config: {} }), /unknown preset 'vit_nope'/);
  // config.encoder's timm kwargs over the preset's encoder (timm's create_model(name, img_size=112))
  const at112 = vt.createModel({ kind: 'mae', preset: 'vit_tiny_patch16_224', config: { encoder: { img_size: 112 } } });
  assert.equal(at112.dims.img, 112);
  assert.equal(at112.dims.dim, 192);
  throwsEngine(
    () => vt.createModel({ kind: 'mae', preset: 'vit_tiny_patch16_224', config: { encoder: [1] } }),
    /config\.encoder must be an object of timm kwargs/,
  );
  for (const m of [byPreset, tab, lightly, at112]) m.dispose();
  vt.close();
});

test('bad inputs throw Errors carrying the engine message and status', async () => {
  const vt = await engine(BUILD);
  const { model, images } = await fixtureModel();
  throwsEngine(() => model.setGradCheckpointing('sometimes'), /sometimes/, -1);
  throwsEngine(() => vt.createModel({ preset: 'vit_huge_patch99' }), /unknown preset 'vit_huge_patch99'/, -1);
  throwsEngine(() => vt.createModel({ kind: 'timm', config: { embed_dim: 64, num_heads: 5 } }), /not divisible/, -1);
  throwsEngine(() => model.encode(new Float32Array(images.length - 1)), /length \d+ is not a positive multiple/);
  throwsEngine(
    () =>
      model.encode(images, {
        idxKeep: [
          [0, 1, 999],
          [0, 2, 3],
        ],
      }),
    /999/,
    -1,
  );
  throwsEngine(
    () =>
      model.encode(images, {
        idxMask: [
          [1, 2, 2],
          [1, 2, 3],
        ],
      }),
    /repeats/,
    -1,
  ); // idx_mask is a scatter
  assert.deepEqual(
    model
      .encode(images, {
        idxKeep: [
          [0, 1, 1],
          [0, 2, 3],
        ],
      })
      .shape.slice(0, 2),
    [2, 3],
  ); // idx_keep a gather
  const corrupt = new Uint8Array(fixture('vit_encode.safetensors').subarray(0, 200));
  throwsEngine(() => model.loadSafetensors(corrupt), /./, -3);
  throwsEngine(() => model.loadSafetensors(new Uint8Array([1, 2, 3])), /./, -3);
  throwsEngine(() => model.backward({ douts: [] }), /forward/);
  const r = vt.parity(corrupt);
  assert.equal(r.pass, false);
  assert.ok(r.error && r.status < 0);
  model.dispose();
  throwsEngine(() => model.params(), /disposed/);
});

// forward + backward over policies, with and without idx_keep; calls check(policy, keep, memory()).
async function memoryCases(check) {
  const { model, images } = await fixtureModel();
  for (const policy of ['none', 'block', 'every:2', 'sqrt', 'selective']) {
    for (const keep of [
      null,
      [
        [0, 1, 2, 3, 5],
        [0, 4, 6, 8, 9],
      ],
    ]) {
      model.setGradCheckpointing(policy);
      const out = model.encode(images, { needGrad: true, idxKeep: keep || undefined });
      // the plan is for a full backward: parameter and image gradients
      model.backward({ douts: [new Float32Array(out.data.length).fill(1)], inputGrad: true });
      check(`${policy}${keep ? ' idx_keep' : ''}`, model.memory());
    }
  }
  model.dispose();
}

test('memory(): planned and used bytes by kind after forward + backward', async () => {
  await memoryCases((what, m) => {
    assert.ok(m.linear >= 16 << 20);
    assert.equal(m.used.params, m.planned.params, what);
    assert.equal(m.used.grads, m.planned.grads, what);
    assert.equal(m.arena.planned, m.planned.activations, what);
    assert.ok(m.used.activations > 0 && m.used.activations <= m.planned.activations, what);
    assert.ok(m.arena.capacity >= m.arena.planned, what);
  });
});

// measured == planned, exactly, for a backward that asks for parameter and image gradients (a
// backward without image gradients skips the patch gradients and uses less than the plan).
test('memory(): used activations == planned exactly', async () => {
  const off = [];
  await memoryCases((what, m) => {
    if (m.used.activations !== m.planned.activations)
      off.push(`${what}: planned ${m.planned.activations} used ${m.used.activations}`);
  });
  assert.deepEqual(off, []);
});

// in a plain build (its memory's buffer is replaced: old views detach) and a shared-memory one
for (const build of simdSupported() ? ['simd', 'simd-mt'] : ['scalar'])
  test(`views are rebuilt after memory growth; old results stay readable (${build})`, async () => {
    const { vt, model, images } = await fixtureModel(undefined, build);
    assert.equal(vt.threaded, build.endsWith('-mt'));
    const out = model.encode(images);
    const param0 = model.params()[1].data.slice();
    const staleView = model.params()[1].data;
    const before = vt.memory().linear;
    const big = vt.createModel({ preset: 'vit_small_patch16_224' }); // ~88 MB of parameters
    assert.ok(vt.memory().linear > before + (64 << 20), 'memory grew');
    // a view kept across growth follows it (web/vitrine.js liveView): rebuilt when growth detaches a plain
    // memory; a shared memory (threads) never detaches, and the old view keeps seeing the same bytes
    assert.deepEqual(
      Array.from(staleView),
      Array.from(param0),
      `a view kept across growth follows it (threaded: ${vt.threaded})`,
    );
    assert.deepEqual(Array.from(model.output(0).data), Array.from(out.data));
    assert.deepEqual(Array.from(model.params()[1].data), Array.from(param0));
    const again = model.encode(images);
    assert.deepEqual(Array.from(again.data), Array.from(out.data));
    big.dispose();
    model.dispose();
  });

test('safetensors save / load round trip', async () => {
  const { vt, model } = await fixtureModel();
  const saved = model.saveSafetensors({ filePrefix: 'w/' });
  const st = readSafetensors(saved);
  assert.ok(Object.keys(st.tensors).every((k) => k.startsWith('w/')));
  const st2 = readSafetensors(fixture('vit_encode.safetensors'));
  const copy = vt.createModel({ kind: 'lightly', config: st2.meta.config });
  copy.loadSafetensors(saved, { filePrefix: 'w/' });
  const a = model.params(),
    b = copy.params();
  a.forEach((p, i) => assert.deepEqual(Array.from(b[i].data), Array.from(p.data), p.name));
  copy.dispose();
  model.dispose();
});

test('CLI: the native contract (lines, exit status)', () => {
  const cli = path.join(REPO, 'web/cli.js');
  const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
  const run = (...args) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', env });
  const files = ['vit_encode.safetensors', 'sincos_pos_embed.safetensors'].map((f) => path.join(FIXTURES, f));
  const ok = run('parity', ...files, '--grad-checkpointing', 'block');
  assert.equal(ok.status, 0, ok.stderr);
  assert.match(ok.stdout, /^PASS .*vit_encode\.safetensors  worst \S+ err \d\.\d{3}e[-+]\d\d torch32_err /m);
  assert.match(ok.stdout, /2 passed, 0 failed\n$/);
  assert.match(
    ok.stdout,
    /^pass rule: every expect\/ tensor has err = max\|ours - expect\| \/ max\|expect\| <= 1\.000e-04\n/,
  );
  const bad = run('parity', files[0], path.join(FIXTURES, 'missing.safetensors'));
  assert.equal(bad.status, 2); // a file that cannot be read, as a usage error
  assert.match(bad.stdout, /FAIL .*missing\.safetensors: cannot open .*No such file or directory/);
  assert.match(bad.stdout, /1 passed, 1 failed\n$/);
  assert.equal(run('parity').status, 2);
  assert.equal(run('parity', '--frobnicate', files[0]).status, 2);
  assert.equal(run('nonsense').status, 2);
  // the native plan plans an encode pass; the Node plan does too with --objective encode (its default: train's step)
  const plan = run(
    'plan',
    '--objective',
    'encode',
    '--preset',
    'vit_tiny_patch16_224',
    '--batch',
    '4',
    '--grad-checkpointing',
    'block',
    '--json',
  );
  assert.equal(plan.status, 0, plan.stderr);
  const p = JSON.parse(plan.stdout);
  assert.equal(p.total, p.params + p.grads + p.optimizer + p.activations);
  if (existsSync(NATIVE)) {
    const nat = spawnSync(
      NATIVE,
      ['plan', '--preset', 'vit_tiny_patch16_224', '--batch', '4', '--grad-checkpointing', 'block', '--json'],
      { encoding: 'utf8' },
    );
    assert.equal(plan.stdout, nat.stdout);
  }
  // a preset or policy the engine refuses: a usage error naming the flag, in both CLIs
  for (const [flag, v] of [
    ['--preset', 'nope'],
    ['--grad-checkpointing', 'every:0'],
  ]) {
    const r = run('plan', flag, v);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, new RegExp(`^vitrine plan: ${flag}: `));
    if (existsSync(NATIVE)) {
      const n = spawnSync(NATIVE, ['plan', flag, v], { encoding: 'utf8' });
      assert.equal(n.status, 2, n.stderr);
      assert.match(n.stderr, new RegExp(`^vitrine plan: ${flag}: `));
    }
  }
});
