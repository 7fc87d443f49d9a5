// classify.test.mjs: fine-tuning to labels through the CLI (`vitrine train --objective classify`)
// on an easy synthetic two-class folder (horizontal vs vertical stripes, noisy), bitwise
// resume, and `vitrine predict` (output format, bad / missing images named, not fatal).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, readFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { REPO, WASM_DIR, engine } from './util.mjs';
import { classifierSpec, predictTop } from '../../web/train/objectives/classify.js';
import { parseAugment, augmentText, augmentBatch } from '../../web/train/augment.js';
import { channelStats } from '../../web/vitrine.js';
import { withMetadata } from '../../web/formats/safetensors.js';

const require = createRequire(import.meta.url);
const CLI = path.join(REPO, 'web/cli.js');
const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const run = (args) => spawnSync(process.execPath, [CLI, ...args], { env, encoding: 'utf8' });
const TINY = JSON.stringify({
  encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 },
});

// 2 classes x 20 grey 28x28 PNGs: horizontal or vertical stripes, noise over both
function twoClassFolder() {
  const { PNG } = require('pngjs');
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-classify-'));
  let s = 12345;
  const rnd = () => (s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 4294967296;
  for (const cls of ['horizontal', 'vertical']) {
    mkdirSync(path.join(dir, 'data', cls), { recursive: true });
    for (let i = 0; i < 20; i++) {
      const png = new PNG({ width: 28, height: 28 });
      for (let y = 0; y < 28; y++)
        for (let x = 0; x < 28; x++) {
          const bright = ((cls === 'horizontal' ? y : x) >> 1) % 2 === 0; // stripes 2 pixels wide
          const v = Math.max(0, Math.min(255, Math.round((bright ? 170 : 60) + 80 * (rnd() - 0.5))));
          const o = 4 * (y * 28 + x);
          png.data[o] = png.data[o + 1] = png.data[o + 2] = v;
          png.data[o + 3] = 255;
        }
      writeFileSync(path.join(dir, 'data', cls, `${i}.png`), PNG.sync.write(png));
    }
  }
  return dir;
}
const train = (dir, out, extra = []) =>
  run([
    'train',
    '--objective',
    'classify',
    '--data',
    path.join(dir, 'data'),
    '--config',
    TINY,
    '--batch',
    '8',
    '--steps',
    '30',
    '--lr',
    '3e-3',
    '--augment',
    'flip,shift:2',
    '--out',
    path.join(dir, out),
    '--json',
    ...extra,
  ]); // resumed with its augmentation
const lastJson = (r) => JSON.parse(r.stdout.trim().split('\n').pop());

test('classify: a two-class folder is learnt (loss falls, held-out top-1 above chance, confusion matrix)', () => {
  const dir = twoClassFolder();
  const r = train(dir, 'a');
  assert.equal(r.status, 0, r.stderr);
  const j = lastJson(r);
  assert.deepEqual(j.classes, ['horizontal', 'vertical']);
  assert.equal(j.steps, 30);
  assert.equal(j.eval_images, 8); // every 5th of 40
  assert.ok(j.loss_last < 0.7 * j.loss_first, `loss ${j.loss_first} -> ${j.loss_last}`);
  assert.ok(j.top1 > 0.5, `held-out top-1 ${j.top1}`);
  assert.equal(j.confusion.length, 2);
  assert.equal(
    j.confusion.flat().reduce((a, b) => a + b, 0),
    8,
  );
  assert.equal(j.confusion[0][0] + j.confusion[1][1], Math.round(j.top1 * 8));
  assert.match(r.stdout, /top-1 [\d.]+% on 8 held-out images \(every 5th image\)/);

  // stop at 12, resume: the same weights bit for bit as the straight run
  const s = train(dir, 'b', ['--stop-at', '12']);
  assert.equal(s.status, 0, s.stderr);
  // a folder run: the folder named again (a path stored in the checkpoint is never read)
  const nod = run([
    'train',
    '--objective',
    'classify',
    '--resume',
    path.join(dir, 'b', 'classify-checkpoint.safetensors'),
    '--out',
    path.join(dir, 'b'),
  ]);
  assert.equal(nod.status, 2);
  assert.match(nod.stderr, /name it again with --data DIR/);
  const q = run([
    'train',
    '--objective',
    'classify',
    '--resume',
    path.join(dir, 'b', 'classify-checkpoint.safetensors'),
    '--data',
    path.join(dir, 'data'),
    '--out',
    path.join(dir, 'b'),
    '--json',
  ]);
  assert.equal(q.status, 0, q.stderr);
  assert.equal(lastJson(q).steps, 30);
  assert.deepEqual(
    readFileSync(path.join(dir, 'b', 'classifier.safetensors')),
    readFileSync(path.join(dir, 'a', 'classifier.safetensors')),
  );
  const bad = run([
    'train',
    '--objective',
    'classify',
    '--resume',
    path.join(dir, 'b', 'classify-checkpoint.safetensors'),
    '--steps',
    '5',
  ]);
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--resume takes --steps from the checkpoint/);

  // predict: top classes with probabilities; a bad and a missing image named, the rest predicted
  writeFileSync(path.join(dir, 'bad.png'), 'not an image');
  const img = path.join(dir, 'data', 'vertical', '3.png'),
    img2 = path.join(dir, 'data', 'horizontal', '7.png');
  const p = run([
    'predict',
    '--weights',
    path.join(dir, 'a', 'classifier.safetensors'),
    img,
    path.join(dir, 'bad.png'),
    path.join(dir, 'missing.png'),
    img2,
  ]);
  assert.equal(p.status, 1, 'a failed image makes the exit status 1');
  const lines = p.stdout.trim().split('\n');
  assert.equal(lines.length, 2, p.stdout);
  assert.match(
    lines[0],
    new RegExp(
      `^${img.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: (horizontal|vertical) \\d+\\.\\d%, (horizontal|vertical) \\d+\\.\\d%$`,
    ),
  );
  assert.match(p.stderr, /bad\.png: not a PNG or JPEG image/);
  assert.match(p.stderr, /missing\.png: No such file or directory/);
  const pj = run(['predict', '--weights', path.join(dir, 'a', 'classifier.safetensors'), '--json', '--top', '1', img]);
  assert.equal(pj.status, 0, pj.stderr);
  const res = JSON.parse(pj.stdout);
  assert.equal(res.length, 1);
  assert.equal(res[0].top.length, 1);
  assert.ok(res[0].top[0].class === 'vertical' && res[0].top[0].p > 0.5 && res[0].top[0].p <= 1);
  const nw = run(['predict', '--weights', path.join(dir, 'bad.png'), img]);
  assert.equal(nw.status, 1);
  assert.match(nw.stderr, /bad\.png/);
});

test('classify: the engine step through JS (trainStepLabels) and predictTop', async () => {
  const vt = await engine('simd');
  const m = vt.createModel(classifierSpec({ config: TINY, numClasses: 3, pool: 'avg' }));
  m.initWeights(1);
  m.trainerInit({ lr: 1e-3, labelSmoothing: 0.1, seed: 2 });
  const x = new Float32Array(4 * 28 * 28).map((_, i) => Math.sin(i));
  const loss = m.trainStepLabels(x, [0, 2, 1, 2]);
  assert.ok(Number.isFinite(loss) && loss > 0);
  assert.equal(m.stepCount, 1);
  assert.throws(() => m.trainStepLabels(x, [0, 1]), /2 labels for 4 images/);
  assert.throws(() => m.trainStepLabels(x, [0, 1, 3, 0]), /labels\[2\] = 3/);
  assert.throws(() => m.trainStep(x), /labels/);
  const plan = m.planTrainStep({ batch: 4 });
  assert.equal(plan.tokensMasked, 0);
  m.dispose();
  const t = predictTop(Float32Array.of(0, Math.log(3), 0), ['a', 'b', 'c'], 2);
  assert.deepEqual(
    t.map((e) => e.name),
    ['b', 'a'],
  );
  assert.ok(Math.abs(t[0].p - 0.6) < 1e-6 && Math.abs(t[1].p - 0.2) < 1e-6);
});

test('classify: --init with a vitrine encoder builds the classifier as that encoder (timm_kwargs), no --preset needed', async () => {
  const dir = twoClassFolder();
  const vt = await engine('simd');
  const mae = vt.createModel({
    kind: 'mae',
    config: { ...JSON.parse(TINY), decoder_dim: 16, decoder_depth: 1, decoder_heads: 2 },
  });
  mae.initWeights(5);
  const enc = path.join(dir, 'encoder.safetensors');
  writeFileSync(enc, mae.saveSafetensors({ modelPrefix: 'backbone.vit.' })); // what `vitrine train` writes
  mae.dispose();
  const r = run([
    'train',
    '--objective',
    'classify',
    '--data',
    path.join(dir, 'data'),
    '--init',
    enc,
    '--batch',
    '8',
    '--steps',
    '2',
    '--out',
    path.join(dir, 'o'),
    '--json',
  ]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /classify encoder of --init 28x28x1 dim 32 depth 2,/);
  const j = lastJson(r);
  // everything but the final norm: timm's avg pooling (the default) has fc_norm, new, instead of norm
  assert.ok(
    j.init_report.loaded === 28 && j.init_report.skipped === 2 && j.init_report.missing === 2,
    JSON.stringify(j.init_report),
  );
  assert.deepEqual(j.init_report.notes.map((n) => n.split(/[ :]/)[0]).sort(), [
    'fc_norm.bias',
    'fc_norm.weight',
    'norm.bias',
    'norm.weight',
  ]);
  const t = run([
    'train',
    '--objective',
    'classify',
    '--data',
    path.join(dir, 'data'),
    '--init',
    enc,
    '--pool',
    'token',
    '--batch',
    '8',
    '--steps',
    '1',
    '--out',
    path.join(dir, 't'),
    '--json',
    '--no-eval',
  ]);
  assert.equal(t.status, 0, t.stderr);
  assert.ok(
    lastJson(t).init_report.loaded === 30 &&
      lastJson(t).init_report.skipped === 0 &&
      lastJson(t).init_report.missing === 0,
    t.stdout,
  );
  // a preset named beside it wins: its shapes differ, so nothing loads, and the run says so
  const p = run([
    'train',
    '--objective',
    'classify',
    '--data',
    path.join(dir, 'data'),
    '--init',
    enc,
    '--preset',
    'fmnist',
    '--batch',
    '8',
    '--steps',
    '1',
    '--out',
    path.join(dir, 'p'),
    '--json',
    '--no-eval',
  ]);
  assert.equal(p.status, 1);
  assert.match(
    p.stderr,
    /nothing in the file fits the model:\npos_embed|nothing in the file fits the model:\ncls_token \[1, 1, 32\]: skipped: the model's cls_token is \[1, 1, 64\]/,
  );
  // timm_kwargs that are not JSON: a clear error before anything runs
  const bad = withMetadata(new Uint8Array(readFileSync(enc)), { timm_kwargs: '{not json' });
  writeFileSync(path.join(dir, 'bad-kwargs.safetensors'), bad);
  const b = run([
    'train',
    '--objective',
    'classify',
    '--data',
    path.join(dir, 'data'),
    '--init',
    path.join(dir, 'bad-kwargs.safetensors'),
    '--out',
    path.join(dir, 'q'),
  ]);
  assert.equal(b.status, 1);
  assert.match(b.stderr, /bad-kwargs\.safetensors: damaged encoder metadata: timm_kwargs: not JSON/);
});

test('classify: augmentation (flip, shift) is what it says, seeded per step and slot', () => {
  assert.deepEqual(parseAugment('none'), { flip: false, shift: 0, hflip: 0, rrc: null });
  assert.deepEqual(parseAugment('flip,shift:2'), { flip: true, shift: 2, hflip: 0, rrc: null });
  assert.equal(augmentText(parseAugment('shift:3,flip')), 'flip,shift:3');
  for (const badSpec of ['', 'flip,', 'shift', 'shift:-1', 'shift:100', 'rotate'])
    assert.throws(() => parseAugment(badSpec), /use none, or a comma list/);
  const S = 6,
    B = 64,
    st = channelStats(1),
    black = -st.mean[0] / st.std[0];
  const base = new Float32Array(B * S * S).map((_, i) => (i % (S * S)) + 1); // pixel value = its index + 1
  const none = augmentBatch(base.slice(), B, 1, S, parseAugment('none'), 7n, 3);
  assert.deepEqual(none, base);
  const a = augmentBatch(base.slice(), B, 1, S, parseAugment('flip,shift:2'), 7n, 3);
  assert.deepEqual(
    augmentBatch(base.slice(), B, 1, S, parseAugment('flip,shift:2'), 7n, 3),
    a,
    'same seed, step: same draws',
  );
  assert.notDeepEqual(
    augmentBatch(base.slice(), B, 1, S, parseAugment('flip,shift:2'), 7n, 4),
    a,
    'another step: other draws',
  );
  // every image is its source flipped or not and shifted by (dx, dy) in -2..2 with a black border
  const seen = new Set();
  for (let j = 0; j < B; j++) {
    const img = a.subarray(j * S * S, (j + 1) * S * S);
    let found = null;
    for (const flip of [false, true])
      for (let dx = -2; dx <= 2; dx++)
        for (let dy = -2; dy <= 2; dy++) {
          let ok = true;
          for (let y = 0; y < S && ok; y++)
            for (let x = 0; x < S && ok; x++) {
              const sy = y - dy;
              let sx = x - dx;
              if (flip) sx = S - 1 - sx;
              const want = sy >= 0 && sy < S && sx >= 0 && sx < S ? sy * S + sx + 1 : black;
              ok = img[y * S + x] === Math.fround(want);
            }
          if (ok && !found) found = `${flip} ${dx} ${dy}`;
        }
    assert.ok(found, `image ${j} is no flip / shift of its source`);
    seen.add(found);
  }
  assert.ok(seen.size > 20, `64 images drew only ${seen.size} of the 50 flip x shift combinations`);
});
