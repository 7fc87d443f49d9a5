// trainer.test.mjs: training as a library call -- train() from the package root, in a worker thread:
// its events (step, epoch, loss, lr, images/s, memory planned and measured; checkpoints; evaluation),
// abort at a step boundary leaving a checkpoint that resumes bit for bit, pause / resume, predict;
// pretrained weights from a locally served file (download progress, normalisation from their
// pretrained_cfg, else timm's for the architecture) fine-tuned at 224 px and at another size
// (pos_embed resampled); bad input named before anything runs; a CLI run at 224 px on the
// built-in Fashion-MNIST streamed instead of resized up front.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { train, readSafetensorsMeta, VitrineError } from '../../web/vitrine.js';
import { REPO, WASM_DIR, engine, readSafetensors, writeSafetensors } from './util.mjs';

const require = createRequire(import.meta.url);
const TINY = {
  encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 },
  decoder_dim: 16,
  decoder_depth: 1,
  decoder_heads: 2,
};
const ENGINE = { wasm: 'simd', threads: 1 };

// two classes of 28x28 grey images: horizontal or vertical stripes
function stripes(n = 48) {
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
const tensorsOf = (bytes) =>
  Object.entries(readSafetensors(bytes).tensors).map(([n, t]) => [n, Buffer.from(t.bytes).toString('hex')]);

test('train(): events, abort at a step boundary, the checkpoint resumes bit for bit; pause and resume', async () => {
  const opts = {
    objective: 'mae',
    config: TINY,
    data: stripes(),
    steps: 12,
    batch: 8,
    lr: 2e-3,
    seed: 3,
    augment: 'hflip,rrc:0.3-1',
    ...ENGINE,
  }; // augmented: drawn again on resume
  const events = [],
    checkpoints = [];
  let ready = null;
  const straight = await train({
    ...opts,
    checkpointEvery: 4,
    onStep: (e) => events.push(e),
    onCheckpoint: (c) => checkpoints.push(c.step),
    onReady: (i) => {
      ready = i;
    },
  }).done;
  assert.equal(straight.status, 'done');
  assert.equal(straight.step, 12);
  assert.deepEqual(
    events.map((e) => e.step),
    [...Array(12).keys()].map((i) => i + 1),
  );
  for (const e of events)
    assert.ok(
      Number.isFinite(e.loss) && e.lr > 0 && e.imagesPerSecond > 0 && e.epoch === (e.step * 8) / 48,
      JSON.stringify(e),
    );
  const m = events[0].memory;
  assert.ok(
    m &&
      m.planned.total > 0 &&
      m.measured.activations > 0 &&
      m.measured.activations <= m.planned.activations &&
      m.wasm > 0,
    JSON.stringify(m),
  );
  assert.deepEqual(checkpoints, [4, 8]);
  assert.equal(ready.images, 48);
  assert.match(ready.normalization.source, /ImageNet/);
  // aborted after step 5 (at the next boundary: whichever step was under way finishes), resumed
  const ac = new AbortController();
  const aborted = await train({
    ...opts,
    signal: ac.signal,
    onStep: (e) => {
      if (e.step === 5) ac.abort();
    },
  }).done;
  assert.equal(aborted.status, 'aborted');
  assert.ok(aborted.step >= 5 && aborted.step < 12 && aborted.checkpoint, `aborted at ${aborted.step}`);
  assert.equal(readSafetensorsMeta(aborted.checkpoint).step, String(aborted.step));
  const resumed = await train({ data: opts.data, resume: aborted.checkpoint, ...ENGINE }).done;
  assert.equal(resumed.step, 12);
  assert.equal(resumed.trained, 12 - aborted.step);
  assert.deepEqual(tensorsOf(resumed.checkpoint), tensorsOf(straight.checkpoint), 'resumed != straight');
  assert.equal(resumed.lossLast, straight.lossLast);
  // paused before the worker exists (the request waits for it): the run waits before its first
  // step; resumed and paused again at once: it waits at the next step boundary after the worker
  // read the request (where that is, the worker says: pause() resolves to it, however late the
  // events of the steps reach this thread); resumed: the same losses, the same bits
  const losses = [],
    sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const run = train({ ...opts, onStep: (e) => losses.push(e.loss) });
  try {
    // a failed assertion must not leave a paused worker holding the process
    assert.deepEqual(await run.pause(), { step: 0, received: 0 });
    assert.equal(run.status, 'paused');
    await sleep(300);
    assert.equal(losses.length, 0, 'a run paused before it started took a step');
    run.resume();
    const ack = await run.pause();
    assert.ok(ack, 'the run ended before the worker read the pause');
    assert.ok(
      ack.step >= ack.received && ack.step <= ack.received + 1 && ack.step < 12,
      `asked to pause after ${ack.received} steps, paused at ${ack.step}`,
    );
    await sleep(300);
    assert.equal(run.step, ack.step, 'a paused run took a step');
    assert.equal(losses.length, ack.step, 'a paused run took a step');
    assert.equal(run.status, 'paused');
    run.resume();
    const done = await run.done;
    assert.deepEqual(
      losses,
      events.map((e) => e.loss),
    );
    assert.deepEqual(tensorsOf(done.checkpoint), tensorsOf(straight.checkpoint));
  } finally {
    run.dispose();
  }
});

test('dispose() at any moment ends the run: before the worker exists, mid-step, mid-download, paused; a finished run keeps its status', async () => {
  const opts = { objective: 'mae', config: TINY, data: stripes(), steps: 400, batch: 8, lr: 2e-3, seed: 3, ...ENGINE };
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const disposedError = (what, re) => (e) => {
    assert.equal(e.name, 'AbortError', `${what}: ${e.stack}`);
    assert.ok(e instanceof VitrineError, what);
    assert.equal(e.kind, 'disposed', what);
    assert.equal(e.code, 'VT_ERR_STATE', what);
    assert.match(e.message, re, what);
    assert.doesNotMatch(e.message, /\n/, what);
    return true;
  };
  // right after train(): the worker never starts (no step, no set-up)
  let stepped = 0,
    ready = 0;
  const early = train({ ...opts, onStep: () => stepped++, onReady: () => ready++ });
  early.dispose();
  await assert.rejects(
    early.done,
    disposedError('right after train()', /^the run was disposed before its first step \(dispose\(\)/),
  );
  assert.equal(early.status, 'disposed');
  await sleep(1500);
  assert.equal(stepped + ready, 0, `a run disposed at once went on: ${ready} ready, ${stepped} steps`);
  await assert.rejects(early.predict(new Float32Array(784)), /the run was disposed/);
  // mid-step (from its own step event: the worker is stepping)
  stepped = 0;
  const mid = train({
    ...opts,
    onStep: (e) => {
      stepped = e.step;
      if (e.step === 2) mid.dispose();
    },
  });
  await assert.rejects(
    mid.done,
    disposedError(
      'mid-run',
      /^the run was disposed at step 2 of 400 \(dispose\(\); abort\(\) ends a run with its checkpoint\)$/,
    ),
  );
  assert.equal(mid.status, 'disposed');
  const at = stepped;
  await sleep(500);
  assert.equal(stepped, at, 'steps reported after dispose()');
  // paused
  const paused = train(opts);
  assert.deepEqual(await paused.pause(), { step: 0, received: 0 });
  paused.dispose();
  await assert.rejects(paused.done, disposedError('paused', /^the run was disposed before its first step/));
  // while its weights are read from a server that sends headers and then nothing
  let asked;
  const gotRequest = new Promise((r) => {
    asked = r;
  });
  const server = createServer((req, res) => {
    res.writeHead(200, { 'content-length': '100000' });
    res.write(Buffer.alloc(10));
    asked();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  try {
    const url = `http://127.0.0.1:${server.address().port}/w.safetensors`;
    const dl = train({ ...opts, weights: url });
    await gotRequest;
    dl.dispose();
    await assert.rejects(dl.done, disposedError('mid-download', /^the run was disposed before its first step/));
  } finally {
    server.closeAllConnections();
    server.close();
  }
  // after done: the result and the status stay (the worker's exit is no failure)
  const fin = train({ ...opts, steps: 2 });
  const r = await fin.done;
  fin.dispose();
  await sleep(500);
  assert.equal(fin.status, 'done');
  assert.equal(r.status, 'done');
  assert.equal(await fin.done, r);
  fin.dispose(); // twice: nothing
  assert.equal(fin.status, 'done');
});

test("train(): gradAccum K runs K micro-batches of batch images as one step (timm's --grad-accum-steps, each loss / K): one batch of K x batch up to fp32 summation order; minLr", async () => {
  const base = { objective: 'mae', config: TINY, data: stripes(), steps: 4, lr: 2e-3, minLr: 1e-4, seed: 5, ...ENGINE };
  const one = [],
    acc = [];
  const a = await train({ ...base, batch: 8, onStep: (e) => one.push(e) }).done;
  const b = await train({ ...base, batch: 4, gradAccum: 2, onStep: (e) => acc.push(e) }).done;
  // the same images and masks per step: the first loss differs by the mean's rounding (an ulp or two),
  // later ones also by what the regrouped gradient sums moved the parameters (through AdamW)
  assert.ok(Math.abs(acc[0].loss - one[0].loss) <= 4 * 2 ** -23 * one[0].loss, `${acc[0].loss} vs ${one[0].loss}`);
  for (let i = 0; i < 4; i++)
    assert.ok(
      Math.abs(acc[i].loss - one[i].loss) <= 1e-5 * one[i].loss,
      `step ${i + 1}: ${acc[i].loss} vs ${one[i].loss}`,
    );
  assert.deepEqual(
    acc.map((e) => [e.epoch, e.lr]),
    one.map((e) => [e.epoch, e.lr]),
  );
  assert.equal(
    Math.fround(one.at(-1).lr),
    Math.fround(Math.fround(1e-4) + Math.fround(Math.fround(2e-3) - Math.fround(1e-4)) * Math.fround(0.001)),
    'the cosine ends at minLr',
  );
  // activations planned for the micro-batch: less than for the whole batch
  assert.ok(
    acc[0].memory.planned.activations < one[0].memory.planned.activations,
    `${acc[0].memory.planned.activations} vs ${one[0].memory.planned.activations}`,
  );
  const cfg = (r) => JSON.parse(readSafetensorsMeta(r.checkpoint).train_config);
  assert.deepEqual([cfg(b).grad_accum, cfg(a).grad_accum, Math.fround(cfg(b).min_lr)], [2, 1, Math.fround(1e-4)]);
  // resumed from step 2 of the accumulated run: bit for bit
  const half = await train({ ...base, batch: 4, gradAccum: 2, stopAt: 2 }).done;
  const res = await train({ data: base.data, resume: half.checkpoint, ...ENGINE }).done;
  assert.deepEqual(tensorsOf(res.checkpoint), tensorsOf(b.checkpoint));
});

test('train(): a classifier learns two classes, evaluates the held-out fifth and predicts with probabilities', async () => {
  const evals = [];
  const run = train({
    objective: 'classify',
    model: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 },
    data: stripes(60),
    epochs: 4,
    batch: 8,
    lr: 3e-3,
    evalEvery: 10,
    onEval: (e) => evals.push(e),
    ...ENGINE,
  });
  const r = await run.done;
  assert.equal(r.steps, Math.ceil((4 * 48) / 8)); // 60 images, every 5th held out
  assert.deepEqual(
    evals.map((e) => e.step),
    [10, 20, 24],
  ); // and at the end
  assert.ok(r.eval.n === 12 && r.eval.top1 > 0.5, JSON.stringify(r.eval));
  const meta = readSafetensorsMeta(r.weights);
  assert.deepEqual(JSON.parse(meta.vitrine_classifier).classes, ['horizontal', 'vertical']);
  assert.deepEqual(JSON.parse(meta.pretrained_cfg).input_size, [1, 28, 28]);
  const img = {
    width: 56,
    height: 56,
    data: new Uint8Array(56 * 56 * 4).map((_, i) => ((((i >> 2) % 56) >> 2) % 2 ? 200 : 30)),
  }; // vertical stripes, twice the size
  const [top] = await run.predict(img, { topk: 2 });
  assert.deepEqual(top.map((t) => t.name).sort(), ['horizontal', 'vertical']);
  assert.ok(Math.abs(top[0].p + top[1].p - 1) < 1e-9 && top[0].p >= top[1].p);
  run.dispose();
});

// a server for weights: /w.safetensors, /slow.safetensors (in chunks), anything else 404
async function serve(files) {
  const server = createServer((req, res) => {
    const f = files[req.url];
    if (!f) {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('no');
      return;
    }
    res.writeHead(200, { 'content-length': f.length, 'content-type': 'application/octet-stream' });
    const step = Math.ceil(f.length / 8);
    for (let o = 0; o < f.length; o += step) res.write(f.subarray(o, o + step));
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
}

test("fine-tuning vit_tiny_patch16_224 from a 224-px timm state_dict (served locally) at 224 and at 112 px, with timm's normalisation", async () => {
  const vt = await engine('simd');
  const src = vt.createModel('vit_tiny_patch16_224', { numClasses: 1000 });
  src.initWeights(9);
  const state = writeSafetensors(readSafetensors(src.saveSafetensors()).tensors); // as timm's save_file writes it: no metadata
  const withCfg = writeSafetensors(readSafetensors(src.saveSafetensors()).tensors, {
    pretrained_cfg: JSON.stringify({ mean: [0.3, 0.3, 0.3], std: [0.2, 0.2, 0.2] }),
  });
  src.dispose();
  const srv = await serve({ '/vit_tiny.safetensors': state, '/cfg.safetensors': withCfg });
  try {
    for (const imgSize of [224, 112]) {
      const loads = [];
      let ready;
      const run = train({
        objective: 'classify',
        model: 'vit_tiny_patch16_224',
        imgSize,
        weights: `${srv.url}/vit_tiny.safetensors`,
        data: stripes(8),
        val: 0,
        steps: 1,
        batch: 2,
        ...ENGINE,
        onLoad: (p) => loads.push(p),
        onReady: (i) => {
          ready = i;
        },
      });
      const r = await run.done;
      run.dispose();
      assert.equal(r.status, 'done');
      assert.ok(
        loads.length >= 2 && loads.at(-1).loaded === state.length && loads.at(-1).total === state.length,
        JSON.stringify(loads.at(-1)),
      );
      assert.ok(loads.every((p, i) => !i || p.loaded >= loads[i - 1].loaded));
      assert.deepEqual(ready.normalization.mean, [0.5, 0.5, 0.5]);
      assert.match(
        ready.normalization.source,
        /^timm's default for vit_tiny_patch16_224 \(vit_tiny_patch16_224\.augreg_in21k_ft_in1k's pretrained_cfg\): the weights state none$/,
      );
      assert.equal(ready.dims.img, imgSize);
      const rep = ready.init;
      assert.equal(rep.resampled, imgSize === 224 ? 0 : 1, rep.notes.join('\n'));
      assert.equal(rep.skipped, 2, 'the 1000-class head'); // head.weight, head.bias
      if (imgSize === 112)
        assert.ok(
          rep.notes.some((n) => /^pos_embed \[1, 197, 192\]: resampled .*grid 14x14 -> 7x7, 1 prefix row kept/.test(n)),
          rep.notes.join('\n'),
        );
      assert.deepEqual(JSON.parse(readSafetensorsMeta(r.weights).pretrained_cfg).mean, [0.5, 0.5, 0.5]);
      assert.deepEqual(r.run.mean, [0.5, 0.5, 0.5]);
    }
    // the weights' own pretrained_cfg wins over the architecture's; --mean / --std over both
    let ready;
    let r = await train({
      objective: 'classify',
      model: 'vit_tiny_patch16_224',
      imgSize: 32,
      weights: `${srv.url}/cfg.safetensors`,
      data: stripes(8),
      val: 0,
      steps: 1,
      batch: 2,
      ...ENGINE,
      onReady: (i) => {
        ready = i;
      },
    }).done;
    assert.deepEqual(ready.normalization.mean, [0.3, 0.3, 0.3]);
    assert.match(ready.normalization.source, /weights' pretrained_cfg/);
    r = await train({
      objective: 'classify',
      model: 'vit_tiny_patch16_224',
      imgSize: 32,
      weights: `${srv.url}/cfg.safetensors`,
      data: stripes(8),
      val: 0,
      steps: 1,
      batch: 2,
      mean: [0.1],
      std: [0.9],
      ...ENGINE,
      onReady: (i) => {
        ready = i;
      },
    }).done;
    assert.deepEqual(
      [ready.normalization.mean, r.run.std],
      [
        [0.1, 0.1, 0.1],
        [0.9, 0.9, 0.9],
      ],
    );
  } finally {
    srv.close();
  }
});

test('bad input: a URL that fails, a file that is not weights, labels that do not match, one class, an image that will not decode', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-trainer-'));
  const srv = await serve({});
  const { PNG } = require('pngjs');
  const png = (v) => {
    const p = new PNG({ width: 8, height: 8 });
    p.data.fill(v);
    return PNG.sync.write(p);
  };
  try {
    const base = {
      objective: 'classify',
      model: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 1, num_heads: 2 },
      steps: 2,
      batch: 4,
      ...ENGINE,
    };
    const rejects = async (opts, re) => {
      const run = train({ ...base, ...opts });
      await assert.rejects(run.done, (e) => {
        assert.match(e.message, re);
        assert.ok(!e.result || !e.result.checkpoint, 'nothing to write');
        return true;
      });
      run.dispose();
    };
    await rejects(
      { data: stripes(8), weights: `${srv.url}/missing.safetensors` },
      new RegExp(`${srv.url}/missing\\.safetensors: HTTP 404`),
    );
    await rejects(
      { data: stripes(8), weights: 'http://127.0.0.1:1/w.safetensors' },
      /http:\/\/127\.0\.0\.1:1\/w\.safetensors: cannot fetch/,
    );
    writeFileSync(path.join(dir, 'notes.safetensors'), 'these are not weights');
    await rejects(
      { data: stripes(8), weights: path.join(dir, 'notes.safetensors') },
      /notes\.safetensors: not a safetensors file/,
    );
    await rejects(
      { data: { ...stripes(8), labels: [0, 1, 0, 1, 0, 1, 0, 5] } },
      /labels\[7\] = 5 is not a class: there are 2 \(horizontal, vertical\)/,
    );
    await rejects({ data: { ...stripes(8), labels: [0, 1] } }, /2 labels for 8 images/);
    mkdirSync(path.join(dir, 'one', 'cats'), { recursive: true });
    for (let i = 0; i < 3; i++) writeFileSync(path.join(dir, 'one', 'cats', `${i}.png`), png(40 * i));
    await rejects({ data: path.join(dir, 'one') }, /one class \(cats\); a classifier needs at least 2/);
    // a PNG whose header is fine and whose data is cut: found when its batch is made, named
    for (const c of ['a', 'b']) {
      mkdirSync(path.join(dir, 'bad', c), { recursive: true });
      for (let i = 0; i < 2; i++) writeFileSync(path.join(dir, 'bad', c, `${i}.png`), png(100 + i));
    }
    writeFileSync(path.join(dir, 'bad', 'b', '1.png'), png(9).subarray(0, 60));
    await rejects({ data: path.join(dir, 'bad'), val: 0 }, /bad\/b\/1\.png: PNG: /);
  } finally {
    srv.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('vitrine train at 224 px on the built-in Fashion-MNIST streams its batches (no 9 GB of resized images up front)', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-trainer-cli-'));
  try {
    // a small model at 224x224x3 (the data: 60000 images of 28x28 grey, resized per batch)
    const config = JSON.stringify({
      encoder: { img_size: 224, patch_size: 32, embed_dim: 64, depth: 1, num_heads: 2 },
      decoder_dim: 32,
      decoder_depth: 1,
      decoder_heads: 2,
    });
    const r = spawnSync(
      process.execPath,
      [
        path.join(REPO, 'web/cli.js'),
        'train',
        '--config',
        config,
        '--steps',
        '2',
        '-b',
        '4',
        '--no-eval',
        '--threads',
        '1',
        '--out',
        dir,
        '--json',
      ],
      { env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR }, encoding: 'utf8' },
    );
    assert.equal(r.status, 0, r.stderr);
    assert.match(
      r.stderr,
      /MAE config 224x224x3 patch 32 dim 64 depth 1, 60000 images \(fashion-mnist\), batch 4, .*normalisation ImageNet/,
    );
    const j = JSON.parse(r.stdout.trim().split('\n').pop());
    assert.equal(j.steps, 2);
    assert.deepEqual(
      JSON.parse(readSafetensorsMeta(new Uint8Array(readFileSync(j.weights))).pretrained_cfg).input_size,
      [3, 224, 224],
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the CLI speaks timm's training vocabulary: --epochs, --warmup-epochs, --min-lr, --grad-accum-steps, -b / --batch-size, --weight-decay, --knn-k / --knn-t", () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-vocab-'));
  const { PNG } = require('pngjs');
  try {
    const s = stripes(24);
    for (let i = 0; i < s.n; i++) {
      const p = new PNG({ width: 28, height: 28 });
      for (let j = 0; j < 784; j++)
        p.data.set([s.pixels[i * 784 + j], s.pixels[i * 784 + j], s.pixels[i * 784 + j], 255], 4 * j);
      mkdirSync(path.join(dir, 'photos', s.classes[s.labels[i]]), { recursive: true });
      writeFileSync(path.join(dir, 'photos', s.classes[s.labels[i]], `${i}.png`), PNG.sync.write(p));
    }
    const cli = (args) =>
      spawnSync(process.execPath, [path.join(REPO, 'web/cli.js'), 'train', ...args, '--threads', '1', '--json'], {
        env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR },
        encoding: 'utf8',
      });
    const model = JSON.stringify({ img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 1, num_heads: 2 });
    // 24 images, every 4th held out: 18 train; 2 epochs of 2 x 3 images = ceil(36 / 6) = 6 steps
    let r = cli([
      '--objective',
      'classify',
      '--config',
      model,
      '--data',
      path.join(dir, 'photos'),
      '--val-split',
      '0.25',
      '--epochs',
      '2',
      '--batch-size',
      '3',
      '--grad-accum-steps',
      '2',
      '--warmup-epochs',
      '0.5',
      '--lr',
      '1e-3',
      '--min-lr',
      '1e-4',
      '--weight-decay',
      '0.01',
      '--out',
      path.join(dir, 'c'),
    ]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(
      r.stderr,
      /18 training images .*6 held out, batch 3 x 2 accumulated, steps 6\/6, lr 0\.001 -> 0\.0001/,
    );
    let j = JSON.parse(r.stdout.trim().split('\n').pop());
    assert.equal(j.steps, 6);
    const t = JSON.parse(readSafetensorsMeta(new Uint8Array(readFileSync(j.checkpoint))).train_config);
    assert.deepEqual(
      [t.grad_accum, t.warmup_steps, t.total_steps, Math.fround(t.min_lr), Math.fround(t.weight_decay)],
      [2, 2, 6, Math.fround(1e-4), Math.fround(0.01)],
    );
    // -b and a batch that is not a multiple: the micro-batch is -b, so any -b goes
    r = cli([
      '--objective',
      'classify',
      '--config',
      model,
      '--data',
      path.join(dir, 'photos'),
      '--steps',
      '1',
      '-b',
      '5',
      '--grad-accum-steps',
      '3',
      '--no-eval',
      '--out',
      path.join(dir, 'd'),
    ]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /batch 5 x 3 accumulated/);
    // MAE with kNN k / t and its weight decay
    r = cli([
      '--config',
      JSON.stringify(TINY),
      '--steps',
      '2',
      '-b',
      '4',
      '--grad-accum-steps',
      '2',
      '--weight-decay',
      '0.02',
      '--eval-bank',
      '200',
      '--eval-queries',
      '50',
      '--knn-k',
      '3',
      '--knn-t',
      '0.5',
      '--out',
      path.join(dir, 'm'),
    ]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /batch 4 x 2, .*kNN top-1 \(cosine, k=3, votes exp\(sim\/0\.5\)/s);
    j = JSON.parse(r.stdout.trim().split('\n').pop());
    assert.ok(j.knn_trained > 0 && j.steps === 2, JSON.stringify(j));
    const tm = JSON.parse(readSafetensorsMeta(new Uint8Array(readFileSync(j.checkpoint))).train_config);
    assert.deepEqual([tm.grad_accum, Math.fround(tm.weight_decay)], [2, Math.fround(0.02)]);
    // a min-lr above the lr: the engine's message, before any step
    r = cli([
      '--objective',
      'classify',
      '--config',
      model,
      '--data',
      path.join(dir, 'photos'),
      '--steps',
      '1',
      '--lr',
      '1e-4',
      '--min-lr',
      '1e-3',
      '--out',
      path.join(dir, 'e'),
    ]);
    assert.notEqual(r.status, 0);
    // named by its flag before the engine sees it (the engine's rule: 0 <= min_lr <= lr)
    assert.match(r.stderr, /^vitrine train: --min-lr: 0\.001 is above the peak learning rate 0\.0001 \(--lr\)$/m);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
