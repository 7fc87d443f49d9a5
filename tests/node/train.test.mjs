// train.test.mjs: the trainer through the wasm build (the browser's Emscripten SIMD build) and the
// main job's CLI: falling loss, bitwise resume, policy switching, bad data, kill-safe checkpoints,
// `vitrine train --json`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, readFileSync, mkdirSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { REPO, WASM_DIR, engine, readSafetensors } from './util.mjs';
import { loadFashionMNIST, loadImageFolder, parseIdx, DataError } from '../../web/train/node-data.js';
import { DataOrder } from '../../web/train/data-order.js';
import { knnAccuracy, features, READOUTS } from '../../web/train/knn.js';
import { Session } from '../../web/train/session.js';
import { makeBatch } from '../../web/formats/images.js';

const require = createRequire(import.meta.url);
const CLI = path.join(REPO, 'web/cli.js');
const TINY = {
  encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 },
  decoder_dim: 16,
  decoder_depth: 1,
  decoder_heads: 2,
};
const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const tmp = () => mkdtempSync(path.join(tmpdir(), 'vitrine-train-'));
let fm = null;
const fmnist = () => (fm = fm || loadFashionMNIST('train'));

async function tinyModel(kind = 'mae', seed = 1) {
  const vt = await engine('simd');
  const m = vt.createModel({
    kind,
    config: kind === 'mae' ? TINY : { encoder: TINY.encoder, head_hidden_dim: 16, head_blocks: 1 },
  });
  m.initWeights(seed);
  m.trainerInit({ lr: 2e-3, warmupSteps: 2, totalSteps: 40, seed: seed + 1 });
  return m;
}
const cli = (args, opts = {}) =>
  spawnSync(process.execPath, [CLI, 'train', ...args], { env, encoding: 'utf8', ...opts });

// a Session (web/train/session.js, the one training loop) on Fashion-MNIST with the tiny model
async function tinySession(kind = 'mae', { seed = 1, batch = 32, steps = 40, resume } = {}) {
  const vt = await engine('simd');
  const spec = { kind, config: kind === 'mae' ? TINY : { encoder: TINY.encoder, head_hidden_dim: 16, head_blocks: 1 } };
  return Session.open(vt, {
    objective: kind,
    spec,
    data: { kind: 'pixels', ...fmnist() },
    batch,
    steps,
    lr: 2e-3,
    warmup: 2,
    seed,
    resume,
  });
}

test('loss falls over a short MAE run and an AIM run (Fashion-MNIST)', async () => {
  for (const kind of ['mae', 'aim']) {
    const s = await tinySession(kind);
    const losses = [];
    const r = await s.loop({ emit: (name, e) => name === 'step' && losses.push(e.loss) });
    assert.equal(r.status, 'done');
    const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
    assert.ok(
      mean(losses.slice(-5)) < 0.8 * mean(losses.slice(0, 5)),
      `${kind}: ${losses.slice(0, 5)} -> ${losses.slice(-5)}`,
    );
    assert.equal(s.model.stepCount, 40);
    const v = s.model.visualize(); // after a trainStep: the step's own forward
    assert.deepEqual(v.shape, [32, 1, 28, 28]);
    assert.ok(v.recon.every(Number.isFinite) && v.masked.every(Number.isFinite));
    s.dispose();
  }
});

test('trainer API: defaults, options, lr schedule, errors', async () => {
  const m = await tinyModel();
  assert.equal(m.trainDefaults().beta2, Math.fround(0.95));
  assert.throws(() => m.trainerInit({ learningRate: 1 }), /unknown option 'learningRate'/);
  assert.throws(() => m.trainerInit({ seed: -1 }), /seed/);
  assert.ok(
    Math.abs(m.lr(2) - 2e-3) < 1e-9 && m.lr(40) < 2e-5 && m.lr(0) < m.lr(2),
    `lr(2) ${m.lr(2)}, lr(40) ${m.lr(40)}`,
  );
  assert.throws(() => m.trainStep(new Float32Array(784 * 2), 3), /batch 3 given/);
  assert.throws(() => m.visualize(), /needs a loss forward/);
  assert.throws(
    () => m.trainStep(new Float32Array(784).fill(NaN)),
    (e) => e.status === -5,
  );
  assert.equal(m.stepCount, 0, 'a non-finite step changes nothing');
  assert.throws(() => m.loadTrainState(new Uint8Array(20)), /safetensors|format|header/i);
  m.dispose();
  const vt = await engine('simd');
  const timm = vt.createModel({ kind: 'timm', config: TINY.encoder });
  assert.throws(() => timm.trainerInit({}), /MAE or AIM/);
  timm.dispose();
});

test('switching the checkpointing policy mid-run gives the same bits as never switching', async () => {
  const policies = ['block', 'selective', 'every:1', 'none', 'sqrt', 'budget:1MB'];
  const runs = [];
  for (const switching of [false, true]) {
    const s = await tinySession('mae', { seed: 5, batch: 8, steps: 12 });
    s.model.setGradCheckpointing('none');
    const losses = [];
    while (s.step < s.steps) {
      if (switching) s.model.setGradCheckpointing(policies[s.step % policies.length]);
      losses.push((await s.stepOnce()).loss);
    }
    runs.push({ losses, weights: s.model.saveSafetensors() });
    s.dispose();
  }
  assert.deepEqual(runs[1].losses, runs[0].losses);
  assert.ok(Buffer.from(runs[1].weights).equals(Buffer.from(runs[0].weights)), 'weights differ');
});

test('resume is bitwise: N steps straight == N/2, checkpoint, a new Session from it, N/2', async () => {
  const straight = await tinySession('mae', { seed: 11, batch: 8, steps: 10 });
  await straight.loop();
  const half = await tinySession('mae', { seed: 11, batch: 8, steps: 10 });
  await half.loop({ stopAt: 5 });
  const ck = half.checkpoint();
  half.dispose();
  const resumed = await tinySession('mae', { seed: 999, batch: 3, steps: 77, resume: ck }); // everything comes from the checkpoint
  assert.equal(resumed.step, 5);
  await resumed.loop();
  assert.ok(
    Buffer.from(resumed.model.saveTrainState()).equals(Buffer.from(straight.model.saveTrainState())),
    'training states differ',
  );
  straight.dispose();
  resumed.dispose();
});

test('data order: seeded, a new permutation each epoch, the same from any position', () => {
  const a = new DataOrder(10, 3),
    b = new DataOrder(10, 3),
    c = new DataOrder(10, 4);
  const e0 = Array.from(a.batch(0, 10)),
    e1 = Array.from(a.batch(1, 10));
  assert.deepEqual(
    [...e0].sort((x, y) => x - y),
    [...Array(10).keys()],
  );
  assert.notDeepEqual(e0, e1);
  assert.deepEqual(Array.from(b.batch(3, 7)), Array.from(new DataOrder(10, 3).batch(3, 7)));
  assert.notDeepEqual(Array.from(c.batch(0, 10)), e0);
});

test('kNN: lightly-style weighted votes', () => {
  const f = (rows) => ({ data: Float32Array.from(rows.flat()), dim: rows[0].length });
  const bank = f([
      [1, 0],
      [0.9, 0.1],
      [0, 1],
      [0.1, 0.9],
    ]),
    labels = Int32Array.from([0, 0, 1, 1]);
  const q = f([
    [1, 0.05],
    [0.05, 1],
  ]);
  assert.equal(knnAccuracy(bank, labels, q, Int32Array.from([0, 1]), { k: 3 }), 1);
  assert.equal(knnAccuracy(bank, labels, q, Int32Array.from([1, 1]), { k: 3 }), 0.5);
});

test("kNN readouts: [CLS] is the bits of lightly's forward, mean is the mean of encode's patch tokens", async () => {
  const ds = fmnist(),
    idx = Int32Array.from({ length: 7 }, (_, i) => i);
  const m = await tinyModel('mae');
  for (let i = 0; i < 3; i++) m.trainStep(makeBatch(ds, [i, i + 3]), 2); // not the initialisation's symmetry
  const f = features(m, ds, idx, 3); // chunks of 3: 3 + 3 + 1
  const fwd = m.forward(makeBatch(ds, idx)),
    enc = m.encode(makeBatch(ds, idx));
  const [B, T, D] = enc.shape,
    P = m.dims.prefix;
  assert.equal(P, 1);
  assert.equal(f.cls.dim, D);
  assert.ok(
    Buffer.from(f.cls.data.buffer).equals(Buffer.from(fwd.data.buffer, fwd.data.byteOffset, fwd.data.byteLength)),
    'cls != forward',
  );
  let worst = 0;
  for (let b = 0; b < B; b++)
    for (let d = 0; d < D; d++) {
      let s = 0;
      for (let t = P; t < T; t++) s += enc.data[(b * T + t) * D + d];
      worst = Math.max(worst, Math.abs(s / (T - P) - f.mean.data[b * D + d]));
    }
  assert.ok(worst < 1e-6, `mean readout off by ${worst}`);
  m.dispose();
  const a = await tinyModel('aim'); // no prefix token: no [CLS] readout
  const fa = features(a, ds, idx);
  assert.equal(fa.cls, null);
  assert.equal(fa.mean.data.length, 7 * a.dims.dim);
  a.dispose();
  assert.ok(READOUTS.includes('mean') && READOUTS.includes('cls'));
});

test('Fashion-MNIST: read and validated', () => {
  const t = loadFashionMNIST('test');
  assert.equal(t.n, 10000);
  assert.equal(t.pixels.length, 10000 * 784);
  assert.equal(t.labels[0], 9); // the first test image is an ankle boot
  const x = makeBatch(t, [0, 1]);
  assert.equal(x.length, 2 * 784);
  assert.throws(() => parseIdx(new Uint8Array([0, 0, 9, 3, 0, 0, 0, 1]), 'f.idx'), /bad IDX magic number 0x00000903/);
  assert.throws(
    () => parseIdx(new Uint8Array([0, 0, 8, 1, 0, 0, 0, 5, 1, 2]), 'f.idx', 1),
    /2 data bytes, the header \[5\] says 5/,
  );
  assert.throws(() => parseIdx(new Uint8Array([0, 0, 8, 1, 0, 0, 0, 2, 1, 2]), 'f.idx', 3), /expected 3/);
  assert.throws(
    () => loadFashionMNIST('test', '/nonexistent'),
    (e) => e instanceof DataError && /nonexistent.*no such file/.test(e.message),
  );
  assert.throws(() => loadFashionMNIST('valid'), /use 'train' or 'test'/);
});

test('image folders: bad images are named and skipped, bad paths are clear errors', () => {
  const { PNG } = require('pngjs');
  const jpeg = require('jpeg-js');
  const dir = tmp();
  mkdirSync(path.join(dir, 'cats'));
  mkdirSync(path.join(dir, 'dogs'));
  const png = new PNG({ width: 40, height: 30 });
  for (let i = 0; i < png.data.length; i++) png.data[i] = (i * 7) & 255;
  writeFileSync(path.join(dir, 'cats/a.png'), PNG.sync.write(png));
  const rgba = new Uint8Array(20 * 50 * 4).map((_, i) => (i * 13) & 255);
  writeFileSync(path.join(dir, 'dogs/b.jpg'), jpeg.encode({ width: 20, height: 50, data: rgba }, 90).data);
  writeFileSync(
    path.join(dir, 'dogs/corrupt.png'),
    Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(50, 7)]),
  );
  writeFileSync(
    path.join(dir, 'cats/truncated.jpg'),
    jpeg.encode({ width: 20, height: 50, data: rgba }, 90).data.subarray(0, 100),
  );
  writeFileSync(path.join(dir, 'cats/notes.txt'), 'not an image');
  const warnings = [];
  const ds = loadImageFolder(dir, { size: 28, chans: 1, onWarning: (w) => warnings.push(w) });
  assert.equal(ds.n, 2);
  assert.deepEqual(ds.classes, ['cats', 'dogs']);
  assert.deepEqual(Array.from(ds.labels), [0, 1]);
  assert.equal(ds.pixels.length, 2 * 28 * 28);
  assert.equal(warnings.length, 3, warnings.join('\n'));
  for (const name of ['corrupt.png', 'truncated.jpg', 'notes.txt'])
    assert.ok(
      warnings.some((w) => w.includes(name)),
      name,
    );
  assert.ok(warnings.some((w) => /notes\.txt: not a PNG or JPEG/.test(w)));
  const rgb = loadImageFolder(dir, { size: 16, chans: 3, onWarning: () => {} });
  assert.equal(rgb.pixels.length, 2 * 3 * 16 * 16);

  const bad = tmp();
  writeFileSync(path.join(bad, 'x.txt'), 'hello');
  assert.throws(
    () => loadImageFolder(bad, { size: 28, chans: 1, onWarning: () => {} }),
    /no usable PNG or JPEG image \(1 file looked at\)/,
  );
  assert.throws(
    () => loadImageFolder(path.join(bad, 'missing'), { size: 28, chans: 1 }),
    /missing: no such file or directory/,
  );
  assert.throws(() => loadImageFolder(path.join(bad, 'x.txt'), { size: 28, chans: 1 }), /not a directory/);

  // the CLI: warnings by name, trains on what is usable; a bad path is an error, exit 1
  const out = tmp();
  const r = cli([
    '--data',
    dir,
    '--config',
    JSON.stringify(TINY),
    '--steps',
    '2',
    '--batch',
    '2',
    '--out',
    out,
    '--json',
  ]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /warning: skipped dogs\/corrupt\.png/);
  assert.match(r.stderr, /warning: skipped cats\/notes\.txt: not a PNG or JPEG image/);
  const r2 = cli(['--data', path.join(bad, 'missing'), '--out', out]);
  assert.equal(r2.status, 1);
  assert.match(r2.stderr, /missing: no such file or directory/);
  const r3 = cli(['--data', bad, '--out', out]);
  assert.equal(r3.status, 1);
  assert.match(r3.stderr, /no usable PNG or JPEG image/);
  const r4 = cli(['--resume', path.join(bad, 'x.txt')]);
  assert.equal(r4.status, 1);
  assert.match(r4.stderr, /not a safetensors file/);
  assert.equal(cli(['--steps', 'many']).status, 2);
});

test('killing the process during checkpoint saves leaves a loadable checkpoint', async () => {
  const dir = tmp(),
    file = path.join(dir, 'checkpoint.safetensors');
  const child = `
    import { createVitrine } from ${JSON.stringify(path.join(REPO, 'web/vitrine.js'))};
    import { writeAtomic } from ${JSON.stringify(path.join(REPO, 'web/train/node-data.js'))};
    const vt = await createVitrine({ wasm: 'simd' });
    const m = vt.createModel({ kind: 'mae', config: { encoder: { img_size: 28, patch_size: 4, in_chans: 1, embed_dim: 64, depth: 4, num_heads: 4 }, decoder_dim: 64, decoder_depth: 2, decoder_heads: 4 } });
    m.initWeights(1);
    m.trainerInit({ seed: 2 });
    const x = new Float32Array(2 * 784).map((_, i) => Math.sin(i));
    process.stdout.write('ready\\n');
    for (;;) { m.trainStep(x, 2); writeAtomic(process.argv[2], m.saveTrainState()); }`;
  const script = path.join(dir, 'saver.mjs');
  writeFileSync(script, child);
  const vt = await engine('simd');
  for (let round = 0; round < 5; round++) {
    const p = spawn(process.execPath, [script, file], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((resolve) => p.stdout.once('data', resolve));
    for (let t = 0; t < 400 && !existsSync(file); t++) await new Promise((resolve) => setTimeout(resolve, 25));
    await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 400));
    p.kill('SIGKILL');
    await new Promise((resolve) => p.once('exit', resolve));
    assert.ok(existsSync(file), 'a checkpoint exists');
    const m = vt.createModel({
      kind: 'mae',
      config: {
        encoder: { img_size: 28, patch_size: 4, in_chans: 1, embed_dim: 64, depth: 4, num_heads: 4 },
        decoder_dim: 64,
        decoder_depth: 2,
        decoder_heads: 4,
      },
    });
    m.initWeights(1);
    m.loadTrainState(readFileSync(file)); // throws on a torn file
    assert.ok(m.stepCount >= 1);
    m.dispose();
  }
});

test('vitrine train --json: the main job on a tiny run, resumable bit for bit', () => {
  const a = tmp(),
    b = tmp();
  const common = [
    '--config',
    JSON.stringify(TINY),
    '--steps',
    '6',
    '--batch',
    '8',
    '--seed',
    '3',
    '--mask-ratio',
    '0.6',
  ];
  const r = cli([...common, '--out', a, '--eval-bank', '300', '--eval-queries', '100', '--json']);
  assert.equal(r.status, 0, r.stderr);
  const last = r.stdout.trim().split('\n').pop();
  const j = JSON.parse(last);
  for (const k of [
    'steps',
    'loss_first',
    'loss_last',
    'knn_readout',
    'knn_trained',
    'knn_initial',
    'knn_pixels',
    'seconds',
    'weights',
    'image',
    ...READOUTS.flatMap((r) => [`knn_trained_${r}`, `knn_initial_${r}`]),
  ])
    assert.ok(k in j && j[k] != null, `key ${k} in ${last}`);
  assert.equal(j.steps, 6);
  assert.equal(j.knn_readout, READOUTS[0]);
  assert.equal(j.knn_trained, j[`knn_trained_${READOUTS[0]}`]);
  assert.equal(j.knn_initial, j[`knn_initial_${READOUTS[0]}`]);
  assert.ok(j.knn_pixels > 0.5 && j.knn_trained > 0.1 && j.knn_initial > 0.1, last);
  assert.match(
    r.stdout,
    new RegExp(`features: ${j.knn_readout === 'mean' ? 'mean of patch tokens' : '\\[CLS\\]'}\\): trained `),
  );
  const enc = readSafetensors(readFileSync(j.weights));
  assert.ok('blocks.0.attn.qkv.weight' in enc.tensors && 'cls_token' in enc.tensors, 'timm keys');
  assert.deepEqual([...readFileSync(j.image).subarray(1, 4)], [0x50, 0x4e, 0x47]);

  // half, then resume under another policy: the same encoder bits
  assert.equal(cli([...common, '--out', b, '--stop-at', '3', '--grad-checkpointing', 'none']).status, 0);
  const res = cli([
    '--resume',
    path.join(b, 'checkpoint.safetensors'),
    '--out',
    b,
    '--no-eval',
    '--grad-checkpointing',
    'selective',
    '--json',
  ]);
  assert.equal(res.status, 0, res.stderr);
  assert.equal(JSON.parse(res.stdout.trim().split('\n').pop()).loss_first, j.loss_first);
  assert.ok(
    readFileSync(path.join(a, 'encoder.safetensors')).equals(readFileSync(path.join(b, 'encoder.safetensors'))),
    'encoder bits differ after resume',
  );
  const sa = readSafetensors(readFileSync(path.join(a, 'checkpoint.safetensors'))),
    sb = readSafetensors(readFileSync(path.join(b, 'checkpoint.safetensors')));
  for (const k of Object.keys(sa.tensors))
    assert.ok(Buffer.from(sa.tensors[k].bytes).equals(Buffer.from(sb.tensors[k].bytes)), k);
  assert.equal(sa.meta.rng, sb.meta.rng);
  assert.equal(
    Math.fround(JSON.parse(sb.meta.train_config).mask_ratio),
    Math.fround(0.6),
    'the mask ratio travels in the checkpoint',
  );
  assert.equal(cli(['--resume', path.join(b, 'checkpoint.safetensors'), '--batch', '4']).status, 2);
  assert.equal(cli(['--resume', path.join(b, 'checkpoint.safetensors'), '--mask-ratio', '0.5']).status, 2);
  const bad = cli(['--mask-ratio', '1', '--out', b]);
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--mask-ratio: '1' is not a decimal number in \[0, 1\)/);
  rmSync(a, { recursive: true });
  rmSync(b, { recursive: true });
});
