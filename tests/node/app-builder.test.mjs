// app-builder.test.mjs: what an app builder hit, tried as a new user would (issue 34, "What an app
// builder hit"; the browser's half: tests/browser/app.test.mjs). Each case once failed:
//   1. MAE / AIM at another size on a timm architecture (imgSize, --img-size) were refused;
//   3. a saved classifier could not be reopened (run.predict died with the worker);
//   5. weights without metadata were reported as normalised with a tag they never came from;
//   6. assertParity({ backend }) meant a wasm build; createVitrine({ wasm: 'relaxed' }) on a Node
//      that had not turned relaxed SIMD on threw V8's CompileError; and train() from
//      `node --input-type=module -e` died with its worker.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { train, createVitrine } from '../../web/vitrine.js';
import { assertParity } from '../../web/testing.js';
import { REPO, WASM_DIR, FIXTURES } from './util.mjs';

const ENGINE = { wasm: 'simd', threads: 1 };
const CLI = path.join(REPO, 'web/cli.js');
const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const node = (args, opts = {}) =>
  spawnSync(process.execPath, args, { env, encoding: 'utf8', timeout: 180000, ...opts });
const TINY = { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 1, num_heads: 2 };

// two classes of 28x28 grey images: stripes one way or the other
function stripes(n = 20) {
  const px = new Uint8Array(n * 784),
    labels = [];
  for (let i = 0; i < n; i++) {
    const c = i % 2;
    labels.push(c);
    for (let y = 0; y < 28; y++)
      for (let x = 0; x < 28; x++) px[i * 784 + y * 28 + x] = (((c ? x : y) + (i >> 1)) >> 1) % 2 ? 200 : 30;
  }
  return { pixels: px, n, size: 28, chans: 1, labels, classes: ['horizontal', 'vertical'] };
}
// image i of stripes() as RGBA pixels of another size (what a page's ImageData is)
function rgba(i, w = 40, h = 36) {
  const c = i % 2,
    data = new Uint8ClampedArray(w * h * 4);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      const v = (((c ? x : y) + (i >> 1)) >> 1) % 2 ? 200 : 30,
        o = 4 * (y * w + x);
      data[o] = data[o + 1] = data[o + 2] = v;
      data[o + 3] = 255;
    }
  return { width: w, height: h, data };
}

test('1. MAE and AIM on a timm architecture at another size: train({ imgSize }) and vitrine train --img-size', async () => {
  for (const [objective, config] of [
    ['mae', { decoder_dim: 32, decoder_depth: 1, decoder_heads: 2 }],
    ['aim', { head_hidden_dim: 32, head_blocks: 1 }],
  ]) {
    let dims = null;
    const r = await train({
      objective,
      model: 'vit_tiny_patch16_224',
      config,
      imgSize: 112,
      data: stripes(4),
      steps: 1,
      batch: 2,
      ...ENGINE,
      onReady: (i) => (dims = i.dims),
    }).done;
    assert.equal(r.status, 'done', objective);
    assert.equal(dims.img, 112, objective);
  }
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-app-'));
  try {
    for (const objective of ['mae', 'aim']) {
      const r = node([
        CLI,
        'train',
        '--objective',
        objective,
        '--preset',
        'vit_tiny_patch16_224',
        '--img-size',
        '112',
        '--config',
        objective === 'mae'
          ? '{"decoder_dim": 32, "decoder_depth": 1, "decoder_heads": 2}'
          : '{"head_hidden_dim": 32, "head_blocks": 1}',
        '--steps',
        '1',
        '--batch',
        '2',
        '--no-eval',
        '--out',
        path.join(dir, objective),
        '--wasm',
        'simd',
        '--threads',
        '1',
      ]);
      assert.equal(r.status, 0, `${objective}: ${r.stderr}`);
      assert.match(r.stderr, /vit_tiny_patch16_224 112x112x3 patch 16 dim 192 depth 12/, objective);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('3. a classifier reopened: vt.loadClassifier from the finished run (after dispose), its bytes, a path, a URL; predict on pixels of any size', async () => {
  const run = train({
    objective: 'classify',
    config: TINY,
    data: stripes(),
    steps: 30,
    batch: 8,
    lr: 3e-3,
    seed: 1,
    ...ENGINE,
  });
  const result = await run.done;
  run.dispose();
  await assert.rejects(run.predict(rgba(0)), /vt\.loadClassifier\(run\)/);
  const vt = await createVitrine(ENGINE);
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-cls-'));
  const file = path.join(dir, 'classifier.safetensors');
  writeFileSync(file, result.weights);
  const server = createServer((req, res) => res.end(readFileSync(file)));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  try {
    const sources = [run, result, result.weights, file, `http://127.0.0.1:${server.address().port}/c.safetensors`];
    const answers = [];
    for (const src of sources) {
      const c = await vt.loadClassifier(src);
      assert.deepEqual(c.classes, ['horizontal', 'vertical']);
      assert.equal(c.dims.img, 28);
      const p = await c.predict([rgba(0), rgba(1, 64, 50)], { top: 2 });
      assert.equal(p.length, 2);
      assert.equal(p[0].length, 2);
      assert.ok(Math.abs(p[0][0].p + p[0][1].p - 1) < 1e-6);
      answers.push(p);
      c.dispose();
    }
    for (const a of answers.slice(1)) assert.deepEqual(a, answers[0], 'the same classifier, however it was reopened');
    await assert.rejects(
      vt.loadClassifier(readFileSync(path.join(FIXTURES, 'vit_encode.safetensors'))),
      /not a classifier/,
    );
  } finally {
    server.close();
    vt.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('5. the normalisation report says where it came from: a timm default is not a tag the weights came from', async () => {
  const vt = await createVitrine(ENGINE);
  let plain;
  try {
    const m = vt.createModel('vit_tiny_patch16_224', { numClasses: 0 });
    m.initWeights(0);
    // its weights as a bare state_dict (no pretrained_cfg in their metadata)
    const bytes = m.saveSafetensors(),
      n = Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true));
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
    delete header.__metadata__;
    let text = JSON.stringify(header);
    while ((8 + text.length) % 8) text += ' ';
    plain = new Uint8Array(8 + text.length + bytes.length - 8 - n);
    new DataView(plain.buffer).setBigUint64(0, BigInt(text.length), true);
    plain.set(new TextEncoder().encode(text), 8);
    plain.set(bytes.subarray(8 + n), 8 + text.length);
    m.dispose();
    const t = vt.createModel('vit_tiny_patch16_224', { numClasses: 0 });
    assert.equal(
      t.normalization.source,
      "timm's default for vit_tiny_patch16_224 (vit_tiny_patch16_224.augreg_in21k_ft_in1k's pretrained_cfg)",
    );
    t.dispose();
  } finally {
    vt.close();
  }
  let info = null;
  await train({
    objective: 'classify',
    model: 'vit_tiny_patch16_224',
    imgSize: 28,
    patchSize: 7,
    weights: plain,
    data: stripes(10),
    steps: 1,
    batch: 2,
    ...ENGINE,
    onReady: (i) => (info = i),
  }).done;
  assert.match(info.normalization.source, /^timm's default for vit_tiny_patch16_224 \(.*\): the weights state none$/);
});

test('6. one naming: wasm is a build, backend where steps run; a relaxed build on a Node without the flag; train() from node -e', async () => {
  const file = path.join(FIXTURES, 'vit_encode.safetensors');
  assert.equal((await assertParity(file, { wasm: 'simd', wasmDir: WASM_DIR })).pass, true);
  await assert.rejects(
    assertParity(file, { backend: 'relaxed' }),
    /backend "relaxed": where the call runs, 'wasm' or 'webgpu' \(a build is wasm: "relaxed"\)/,
  );
  // a fresh Node (20: relaxed SIMD behind a flag nobody turned on): the build it asks for, or one sentence
  const vitrine = pathToFileURL(path.join(REPO, 'web/vitrine.js')).href;
  const r = node([
    '--input-type=module',
    '-e',
    `import { createVitrine } from ${JSON.stringify(vitrine)};
     try { const vt = await createVitrine({ wasm: 'relaxed', threads: 1 }); console.log('build', vt.build); vt.close(); }
     catch (e) { console.log('said', e.constructor.name, e.message.split('\\n').length); }`,
  ]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^build relaxed$|^said VitrineError 1$/m);
  assert.doesNotMatch(r.stdout + r.stderr, /CompileError/);
  // train() from a script given to node -e: its worker no longer inherits --input-type and dies
  const t = node([
    '--input-type=module',
    '-e',
    `import { train } from ${JSON.stringify(vitrine)};
     const px = new Uint8Array(8 * 784).map((_, i) => (i * 7) % 251);
     const r = await train({ objective: 'mae', config: { encoder: ${JSON.stringify(TINY)}, decoder_dim: 16, decoder_depth: 1, decoder_heads: 2 },
       data: { pixels: px, n: 8, size: 28, chans: 1 }, steps: 1, batch: 4, wasm: 'simd', threads: 2 }).done;
     console.log(r.status, r.step);`,
  ]);
  assert.equal(t.status, 0, t.stderr);
  assert.equal(t.stdout.trim(), 'done 1');
});
