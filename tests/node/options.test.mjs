// options.test.mjs: one validator for every option of a run (web/train/options.js; issue 39, item
// 1): train(), Session.open, the CLI and a resumed checkpoint's run settings check each option
// against its one declaration. What it refuses is named -- the option as the caller gave it (the
// API's name in train()'s errors, never a CLI flag), with what it accepts -- before anything runs;
// an unknown key names the closest known one; names are own names only; what it accepts trains,
// writes a checkpoint and resumes from it. Each case below once trained (or hung, or blamed the
// wrong option) instead.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { train, createVitrine, Session, readSafetensorsMeta, readSafetensorsHeader } from '../../web/vitrine.js';
import { REPO, WASM_DIR, readSafetensors } from './util.mjs';

const TINY = {
  encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 1, num_heads: 2 },
  decoder_dim: 16,
  decoder_depth: 1,
  decoder_heads: 2,
};
const ENGINE = { wasm: 'simd', threads: 1 };
const CLI = path.join(REPO, 'web/cli.js');
const cli = (args) =>
  spawnSync(process.execPath, [CLI, ...args], {
    env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR },
    encoding: 'utf8',
    timeout: 120000,
  });

// 24 grey images of two classes (stripes one way or the other)
function stripes(n = 24) {
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
const BASE = { objective: 'mae', config: TINY, data: stripes(), steps: 2, batch: 4, ...ENGINE };
// a rejection whose message (not its name) matches re
const rejectsWith = (p, re) =>
  assert.rejects(p, (e) => {
    assert.match(e.message, re);
    return true;
  });
// a refusal: train() rejects at once, naming the option (a VitrineError, no stack, no CLI flag)
async function refused(options, re) {
  const t0 = performance.now();
  await assert.rejects(train(options).done, (e) => {
    assert.equal(e.name, 'OptionError', `${e.name}: ${e.message}`);
    assert.match(e.message, re);
    assert.doesNotMatch(e.message, /(^|\s)--[a-z]/, 'an API error names no CLI flag');
    return true;
  });
  assert.ok(performance.now() - t0 < 5000, 'refused before a worker started');
}

test("train()'s numbers: text, zero, NaN and out-of-range values are refused by name (item 1, 3, 12)", async () => {
  for (const [k, v, re] of [
    ['batch', '8', /^batch: "8" is not a whole number in 1\.\.65536$/],
    ['lr', '0.1', /^lr: "0\.1" is not a number in 0\.\.1000$/],
    ['gradAccum', '2', /^gradAccum: "2" is not a whole number in 1\.\.65536$/],
    ['gradAccum', 0, /^gradAccum: 0 is not a whole number in 1\.\.65536$/],
    ['batch', -1, /^batch: -1 is not a whole number in 1\.\.65536$/],
    ['batch', 1e9, /^batch: 1000000000 is not a whole number/],
    ['batch', NaN, /^batch: NaN is not a whole number/],
    ['batch', {}, /^batch: \{\} is not a whole number/],
    ['batch', 0, /^batch: 0 is not a whole number/],
    ['batch', 2.5, /^batch: 2\.5 is not a whole number/],
    ['steps', 1e12, /^steps: 1000000000000 is not a whole number in 1\.\.2000000000$/],
    ['seed', 1.5, /^seed: 1\.5 is not a whole number in 0\.\.2\^53-3$/],
    ['val', '0.2', /^val: "0\.2" is text; a held-out fraction is a number in \[0, 1\)/],
    ['epochs', 0, /^epochs: 0 is not a number in \(0, 1000000\]$/],
    ['epochs', -1, /^epochs: -1 is not a number in \(0/],
    ['minLr', NaN, /^minLr: NaN is not a number in 0\.\.1000$/],
    ['trainMax', -1, /^trainMax: -1 is not a whole number in 1\.\./],
    ['model', 42, /^model: 42 is not a preset or timm architecture name, or a config object$/],
  ]) {
    const o = { ...BASE, [k]: v };
    if (k === 'epochs') delete o.steps;
    await refused(o, re);
  }
});

test('stopAt: NaN or text is refused, where the run never stopped (item 2)', { timeout: 60000 }, async () => {
  await refused({ ...BASE, stopAt: NaN }, /^stopAt: NaN is not a whole number in 1\.\.2000000000$/);
  await refused({ ...BASE, stopAt: 'abc' }, /^stopAt: "abc" is not a whole number/);
});

test('unknown keys name the closest known one; own names only, never a prototype name (items 4, 13)', async () => {
  await refused({ ...BASE, lrr: 5 }, /^lrr: unknown option; did you mean lr\?$/);
  await refused({ ...BASE, onstep: () => {} }, /^onstep: unknown option; did you mean onStep\?$/);
  await refused({ ...BASE, pool: 'avg' }, /^pool: not an option of objective mae \(classify takes it\)$/);
  for (const name of ['__proto__', 'constructor', 'toString', 'hasOwnProperty'])
    await assert.rejects(train({ ...BASE, config: undefined, model: name }).done, (e) => {
      assert.match(
        e.message,
        new RegExp(`^model: "${name}" is not a train preset \\(fmnist, .*\\) nor a timm architecture`),
      );
      return true;
    });
  await refused({ ...BASE, objective: 'toString' }, /^objective: "toString" is not an objective \(mae, aim, classify/);
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-opt-'));
  try {
    const r = cli(['train', '--preset', 'toString', '--steps', '1', '--out', dir]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /^vitrine train: --preset: 'toString' is not a preset/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('what the run cannot use: duplicate class names, a mask ratio that masks nothing, a 3-value mean for a grey model (item 13)', async () => {
  await rejectsWith(
    train({ ...BASE, objective: 'classify', config: TINY.encoder, data: { ...stripes(), classes: ['a', 'a'] } }).done,
    /the class "a" is named twice/,
  );
  await rejectsWith(train({ ...BASE, maskRatio: 0 }).done, /^maskRatio: 0 masks no patch of 17 tokens$/);
  await rejectsWith(
    train({ ...BASE, mean: [0.5, 0.5, 0.5], std: [0.2, 0.2, 0.2] }).done,
    /^mean: 3 values for a model of 1 channel \(give 1\)$/,
  );
});

test("API errors in the API's words: a folder that is not there, weightsStrict, a weights URL cut short, NaN weights named (item 12)", async () => {
  await assert.rejects(train({ ...BASE, data: '/nonexistent-vitrine-dir' }).done, (e) => {
    assert.match(e.message, /^data \/nonexistent-vitrine-dir: no such file or directory$/);
    return true;
  });
  const vt = await createVitrine(ENGINE);
  let withHead, nan;
  try {
    const t = vt.createModel({ kind: 'timm', config: { ...TINY.encoder, num_classes: 3 } });
    t.initWeights(1);
    withHead = t.saveSafetensors();
    t.dispose();
    // the same weights with one NaN in blocks.0.attn.qkv.weight
    nan = new Uint8Array(withHead);
    const { length: n, header } = readSafetensorsHeader(nan);
    new DataView(nan.buffer).setFloat32(8 + n + header['blocks.0.attn.qkv.weight'].data_offsets[0] + 12, NaN, true);
  } finally {
    vt.close();
  }
  await assert.rejects(train({ ...BASE, weights: withHead, weightsStrict: true }).done, (e) => {
    assert.match(e.message, /: weightsStrict: \d+ tensor\(s\) of the file skipped/);
    assert.doesNotMatch(e.message, /--init-strict/);
    return true;
  });
  await assert.rejects(
    train({ ...BASE, weights: nan }).done,
    /blocks\.0\.attn\.qkv\.weight holds a NaN or an infinity: not weights to start from/,
  );
  // a server that promises 4096 bytes and sends 1000 (of a safetensors file whose header says 4096)
  let json = JSON.stringify({ w: { dtype: 'U8', shape: [4000], data_offsets: [0, 4000] } });
  json += ' '.repeat(4096 - 8 - 4000 - json.length);
  const head = Buffer.alloc(1000);
  head.writeBigUInt64LE(BigInt(json.length), 0);
  head.write(json, 8, 'latin1');
  const server = createServer((req, res) => {
    res.writeHead(200, { 'content-length': 4096 });
    res.write(head);
    setTimeout(() => res.destroy(), 50);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}/w.safetensors`;
  try {
    await assert.rejects(train({ ...BASE, weights: url }).done, (e) => {
      assert.match(
        e.message,
        new RegExp(`^${url.replace(/[.]/g, '\\.')}: the download broke off after 1000 of 4096 bytes`),
      );
      return true;
    });
  } finally {
    server.close();
  }
});

test("a resumed run's checkpoint is the uninterrupted run's, metadata included (item 14)", async () => {
  const straight = await train({ ...BASE, steps: 4 }).done;
  const half = await train({ ...BASE, steps: 4, stopAt: 2 }).done;
  const resumed = await train({ resume: half.checkpoint, data: BASE.data, ...ENGINE }).done;
  assert.equal(resumed.step, 4);
  const meta = (b) => {
    const m = readSafetensorsMeta(b);
    return { ...m, vitrine_run: JSON.parse(m.vitrine_run) };
  };
  assert.deepEqual(meta(resumed.checkpoint), meta(straight.checkpoint));
  const t = (b) =>
    Object.entries(readSafetensors(b).tensors).map(([n, x]) => [n, Buffer.from(x.bytes).toString('hex')]);
  assert.deepEqual(t(resumed.checkpoint), t(straight.checkpoint));
});

test('what the validator accepts is saved and resumed: a checkpoint for every accepted option set', async () => {
  const vt = await createVitrine(ENGINE);
  // each option at the edges of what it accepts (objectives: their own options too)
  const sets = [
    {},
    { batch: 1 },
    { batch: 3, gradAccum: 2 },
    { lr: 0 },
    { lr: 1000 },
    { minLr: 1e-5 },
    { warmup: 0 },
    { warmup: 2 },
    { seed: 0 },
    { seed: '9007199254740988' },
    { seed: 7n },
    { augment: 'hflip,rrc:0.3-1' },
    { augment: 'flip,shift:2' },
    { weightDecay: 0 },
    { maskRatio: 0.07 },
    { maskRatio: 0.99 },
    { policy: 'none' },
    { policy: 'every:1' },
    { epochs: 0.5, steps: undefined },
    { warmupEpochs: 0.1 },
    { mean: [0.5], std: [0.25] },
    { trainMax: 5 },
    { imgSize: 14, config: { ...TINY, encoder: { ...TINY.encoder, img_size: 28 } } },
    { objective: 'aim', config: { encoder: TINY.encoder, head_hidden_dim: 16, head_blocks: 1 } },
    { objective: 'classify', config: TINY.encoder, pool: 'token', labelSmoothing: 0 },
    { objective: 'classify', config: TINY.encoder, pool: 'avg', labelSmoothing: 0.5, val: 0.25 },
  ];
  try {
    for (const extra of sets) {
      const o = {
        ...BASE,
        ...extra,
        steps: 'steps' in extra ? extra.steps : 3,
        data: { kind: 'pixels', ...stripes() },
      };
      delete o.wasm;
      delete o.threads;
      const a = await Session.open(vt, o);
      let bytes;
      try {
        await a.stepOnce();
        bytes = a.checkpoint();
      } finally {
        a.dispose();
      }
      const b = await Session.open(vt, { resume: bytes, data: o.data });
      try {
        assert.equal(b.step, 1, Object.keys(extra).join(' '));
        await b.stepOnce();
      } finally {
        b.dispose();
      }
    }
  } finally {
    vt.close();
  }
});

// What the fuzz loop (tests/node/fuzz-train.test.mjs) found: each case once threw a TypeError,
// named no option, blamed an option the caller never gave, or trained a run that could not resume.
test('found by the fuzz loop: refusals that name the option given', async () => {
  // a config of JSON text that is not an object: the validator's (was JSON.parse's own message)
  await refused({ ...BASE, config: '{' }, /^config: "\{" is not a config object \(or its JSON text\)$/);
  await refused({ ...BASE, config: '[]' }, /^config: "\[\]" is not a config object/);
  // a signal that is not an AbortSignal: refused by name (was a TypeError thrown by train() itself)
  await refused({ ...BASE, signal: 'abort' }, /^signal: "abort" is not an AbortSignal$/);
  await refused({ ...BASE, signal: {} }, /^signal: \{\} is not an AbortSignal$/);
  // data that is a function, weights that are an object without bytes (was "data: undefined is
  // not data" and "<cwd>/[object Object]: no such file")
  await refused({ ...BASE, data: () => 1 }, /^data: a function is not data$/);
  await refused({ ...BASE, weights: { bytes: 3 } }, /^weights: \{"bytes":3\} is not weights: bytes, a Blob/);
  // the engine's refusal of what imgSize / patchSize make of an architecture names them (was "config: ...")
  const vitTiny = { ...BASE, config: undefined, model: 'vit_tiny_patch16_224' };
  await rejectsWith(
    train({ ...vitTiny, imgSize: 7 }).done,
    /^imgSize: 7: img_size 7x7 is smaller than patch_size 16 \(no patch\)$/,
  );
  await rejectsWith(
    train({ ...vitTiny, imgSize: 32, patchSize: 5 }).done,
    /^patchSize: 5 \(with imgSize 32\): lightly's MAE \/ AIM patchify square images that are a multiple of patch_size/,
  );
  // a classifier's config whose encoder is no object (trained timm's default ViT-B/16 at 224 px)
  await rejectsWith(
    train({ ...BASE, objective: 'classify', config: { encoder: 5 } }).done,
    /^config: encoder: 5 is not an object of timm kwargs$/,
  );
  // the same over a timm architecture's MAE encoder (the architecture's own encoder took its place)
  await rejectsWith(
    train({ ...BASE, config: { encoder: 5 }, model: 'vit_tiny_patch16_224', imgSize: 32 }).done,
    /^config: encoder: 5 is not an object of timm kwargs$/,
  );
  // a frozen name that is no parameter (was "no parameter named '__proto__'")
  await rejectsWith(train({ ...BASE, frozen: ['__proto__'] }).done, /^frozen: no parameter named '__proto__'/);
  // minLr above the learning rate, given or the default (was the engine's "training config: needs ...")
  await rejectsWith(
    train({ ...BASE, lr: 0.001, minLr: 0.01 }).done,
    /^minLr: 0\.01 is above the peak learning rate 0\.001 \(lr\)$/,
  );
  await rejectsWith(
    train({ ...BASE, minLr: 500 }).done,
    /^minLr: 500 is above the peak learning rate [\d.e-]+ \(the default lr at 4 images a step\)$/,
  );
  // bytes that are no checkpoint, a weights path that is not there, pixels of the wrong length: the
  // option named (was "safetensors: bad header JSON ...", "<cwd>/hasOwnProperty: no such file", "pixels: ...")
  await rejectsWith(
    train({ resume: new Uint8Array(64), data: BASE.data, ...ENGINE }).done,
    /^resume: not a checkpoint \(safetensors: /,
  );
  await rejectsWith(
    train({ ...BASE, weights: 'hasOwnProperty' }).done,
    new RegExp(`^weights ${path.resolve('hasOwnProperty').replace(/[/.]/g, '\\$&')}: no such file$`),
  );
  await rejectsWith(
    train({ ...BASE, data: { pixels: 'x', n: 1, size: 28, chans: 1 } }).done,
    /^data: pixels: 1 bytes, \[n, chans, size, size\] = \[1, 1, 28, 28\] needs 784 \(a Uint8Array\)$/,
  );
});

test('found by the fuzz loop: { bytes, name } weights train through train(); 2 input channels resume', async () => {
  const vt = await createVitrine(ENGINE);
  let bytes;
  try {
    const m = vt.createModel({ kind: 'mae', config: TINY });
    m.initWeights(3);
    bytes = m.saveSafetensors();
    m.dispose();
  } finally {
    vt.close();
  }
  // (train() made the object a path: "<cwd>/[object Object]: no such file")
  const r = await train({ ...BASE, weights: { bytes, name: 'tiny.safetensors' }, steps: 1 }).done;
  assert.equal(r.status, 'done');
  assert.equal(r.run.init, 'tiny.safetensors');
  // a timm architecture of 2 channels kept a mean of 2 values that its resume refused ("damaged
  // checkpoint metadata: vitrine_run.mean: [0.5,0.5] is not 1 or 3 finite numbers")
  const o = { ...BASE, config: undefined, model: 'vit_tiny_patch16_224', imgSize: 32, inChans: 2, batch: 2 };
  const half = await train({ ...o, stopAt: 1 }).done;
  assert.deepEqual(JSON.parse(readSafetensorsMeta(half.checkpoint).vitrine_run).mean.length, 2);
  const resumed = await train({ resume: half.checkpoint, data: BASE.data, ...ENGINE }).done;
  assert.equal(resumed.step, 2);
});
