// objectives.test.mjs: objectives are a registry (web/train/objectives/): adding one is adding a
// module. A toy objective written outside web/ (rotation-objective.mjs: RotNet's rotation
// prediction, with an option of its own) is registered and runs through train() (in its worker,
// resumed bit for bit from its checkpoint), `vitrine train` (--objective-module, its flag in --help)
// and `vitrine plan`, without a line of vitrine changed for it. And what the registry holds:
// MAE and AIM take imgSize on a timm architecture as classify does (pos_embed resampled), every
// default has one source, names are own names only.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { train, readSafetensorsMeta, createVitrine, exportTorchRun } from '../../web/vitrine.js';
import { registerObjective, objectiveNames, objectiveNamed, runDefault } from '../../web/train/objectives/index.js';
import { REPO, WASM_DIR, readSafetensors } from './util.mjs';

const MODULE = fileURLToPath(new URL('./rotation-objective.mjs', import.meta.url));
const CLI = path.join(REPO, 'web/cli.js');
const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const TINY = { encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 1, num_heads: 2 } };
const ENGINE = { wasm: 'simd', threads: 1 };
const cli = (args) => spawnSync(process.execPath, [CLI, ...args], { env, encoding: 'utf8', timeout: 120000 });

// 24 grey 28x28 images, no labels: a gradient with a bright corner (its turn is what there is to learn)
function corners(n = 24) {
  const px = new Uint8Array(n * 784);
  for (let i = 0; i < n; i++)
    for (let y = 0; y < 28; y++)
      for (let x = 0; x < 28; x++) px[i * 784 + y * 28 + x] = (x < 8 && y < 8 ? 220 : 20) + ((i * 3 + x + y) % 30);
  return { pixels: px, n, size: 28, chans: 1 };
}
const tensorsOf = (bytes) =>
  Object.entries(readSafetensors(bytes).tensors).map(([n, t]) => [n, Buffer.from(t.bytes).toString('hex')]);

test('the registry: mae, aim, classify; own names only; one source of defaults', () => {
  assert.deepEqual(objectiveNames().slice(0, 3), ['mae', 'aim', 'classify']);
  for (const name of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'MAE'])
    assert.throws(() => objectiveNamed(name), /is not an objective \(mae, aim, classify/, name);
  assert.throws(() => objectiveNamed('mea'), /did you mean mae\?/);
  assert.equal(runDefault(objectiveNamed('mae'), 'batch'), 64);
  assert.equal(runDefault(objectiveNamed('classify'), 'batch'), 128);
  assert.equal(runDefault(objectiveNamed('aim'), 'policy'), 'block'); // the common one
});

test('a toy objective from its own module: train() in a worker, resumed bit for bit from its checkpoint', async () => {
  const name = await registerObjective(MODULE);
  assert.equal(name, 'rotation');
  const opts = {
    objective: 'rotation',
    config: TINY,
    data: corners(),
    steps: 6,
    batch: 4,
    seed: 5,
    turns: 4,
    ...ENGINE,
  };
  const straight = await train(opts).done;
  assert.equal(straight.status, 'done');
  assert.equal(straight.step, 6);
  assert.ok(Number.isFinite(straight.lossFirst) && Number.isFinite(straight.lossLast));
  const meta = readSafetensorsMeta(straight.checkpoint);
  const run = JSON.parse(meta.vitrine_run);
  assert.equal(run.objective, 'rotation');
  assert.equal(run.turns, 4, 'its own option is kept in its run settings');
  assert.equal(run.spec.config.num_classes, 4, 'a head of one output per turn');
  // stopped at 3, resumed from that checkpoint alone: the bits of the straight run
  const half = await train({ ...opts, stopAt: 3 }).done;
  assert.equal(half.status, 'stopped');
  const resumed = await train({ resume: half.checkpoint, data: corners(), ...ENGINE }).done;
  assert.equal(resumed.step, 6);
  assert.deepEqual(tensorsOf(resumed.checkpoint), tensorsOf(straight.checkpoint));
  assert.equal(resumed.lossLast, straight.lossLast);
  // its module says nothing of PyTorch: a torch run of it is refused by name, in one line
  assert.throws(
    () => exportTorchRun(straight.checkpoint),
    (e) =>
      e.name === 'VitrineError' &&
      /a rotation run has no PyTorch counterpart \(mae, aim, classify have\)$/.test(e.message),
  );
});

test('the same module through vitrine train (its flag in --help) and vitrine plan', () => {
  const help = cli(['train', '--objective-module', MODULE, '--objective', 'rotation', '--help']);
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /^usage: vitrine train --objective rotation/);
  assert.match(help.stdout, /--turns N +how many quarter turns to tell apart \(default 4\)/);
  assert.match(help.stdout, /-b, --batch, --batch-size B .*\(default 8\)/);
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-objective-'));
  try {
    const args = ['--objective-module', MODULE, '--objective', 'rotation', '--config', JSON.stringify(TINY)];
    const r = cli([
      'train',
      ...args,
      '--turns',
      '2',
      '--steps',
      '3',
      '--batch',
      '4',
      '--out',
      dir,
      '--json',
      '--threads',
      '1',
      '--wasm',
      'simd',
    ]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /^vitrine train: rotation config 28x28x1 dim 32 depth 1, 60000 images \(fashion-mnist\)/m);
    const j = JSON.parse(r.stdout.trim().split('\n').pop());
    assert.equal(j.objective, 'rotation');
    assert.equal(j.steps, 3);
    const run = JSON.parse(readSafetensorsMeta(readFileSync(j.checkpoint)).vitrine_run);
    assert.equal(run.turns, 2);
    assert.ok(readFileSync(j.weights).length > 1000);
    const bad = cli(['train', ...args, '--turns', '5', '--out', dir]);
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /^vitrine train: --turns: '5' is not a whole number in 2\.\.4\n$/);
    const p = cli(['plan', ...args, '--batch', '8', '--json', '--threads', '1']);
    assert.equal(p.status, 0, p.stderr);
    const plan = JSON.parse(p.stdout);
    assert.equal(plan.objective, 'rotation');
    assert.ok(plan.total > plan.params && plan.activations > 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('MAE and AIM at another size on a timm architecture (imgSize, pos_embed resampled), in train() and the CLI', async () => {
  const vt = await createVitrine(ENGINE);
  try {
    for (const objective of ['mae', 'aim']) {
      const spec = objectiveNamed(objective).spec({ model: 'vit_tiny_patch16_224', imgSize: 112 });
      const d = vt.checkModel(spec);
      assert.equal(d.img, 112, objective);
      assert.equal(d.dim, 192, objective);
    }
    // weights of 224 px: a vitrine encoder (timm keys) of vit_tiny_patch16_224
    const t = vt.createModel('vit_tiny_patch16_224', { numClasses: 0 });
    t.initWeights(1);
    const weights = t.saveSafetensors();
    t.dispose();
    const heads = {
      mae: { decoder_dim: 32, decoder_depth: 1, decoder_heads: 2 },
      aim: { head_hidden_dim: 64, head_blocks: 1 },
    };
    for (const [objective, note] of [
      ['mae', /^backbone\.vit\.pos_embed \[1, 197, 192\]: resampled .*grid 14x14 -> 7x7/],
      ['aim', /^pos_embed \[1, 197, 192\]: skipped/], // AIM keeps lightly's sin-cos table of its own grid
    ]) {
      let info = null;
      const r = await train({
        objective,
        model: 'vit_tiny_patch16_224',
        config: heads[objective], // a small decoder / head under the architecture's encoder
        imgSize: 112,
        weights,
        data: corners(4),
        steps: 1,
        batch: 2,
        ...ENGINE,
        onReady: (i) => (info = i),
      }).done;
      assert.equal(r.status, 'done', objective);
      assert.equal(info.dims.img, 112, objective);
      assert.ok(
        info.init.notes.some((n) => note.test(n)),
        `${objective}: ${info.init.notes.join('\n')}`,
      );
      assert.equal(JSON.parse(readSafetensorsMeta(r.checkpoint).vitrine_run).imgSize, 112);
    }
  } finally {
    vt.close();
  }
  // the command line: plan and one step at 112 px
  const r = cli([
    'plan',
    '--objective',
    'mae',
    '--preset',
    'vit_tiny_patch16_224',
    '--img-size',
    '112',
    '--batch',
    '2',
    '--json',
  ]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /"preset":"vit_tiny_patch16_224"/);
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-mae112-'));
  try {
    const t = cli([
      'train',
      '--objective',
      'mae',
      '--preset',
      'vit_tiny_patch16_224',
      '--img-size',
      '112',
      '--steps',
      '1',
      '--batch',
      '2',
      '--no-eval',
      '--out',
      dir,
      '--threads',
      '1',
      '--wasm',
      'simd',
    ]);
    assert.equal(t.status, 0, t.stderr);
    assert.match(t.stderr, /MAE vit_tiny_patch16_224 112x112x3 patch 16 dim 192 depth 12/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
