// metadata.test.mjs: issue 22 -- metadata is untrusted input in every kind of file (web/formats/metadata.js:
// one validator per kind, run before anything is allocated or decoded from it; errors name the
// field, never a byte offset). The validators themselves, then through the command line: predict
// and a crafted classifier (item 5), classify and an absurd model (item 1), resumed checkpoints whose
// run settings or stored spec are wrong, a run already complete, --stop-at, --require-crc (items 6,
// 7). Each CLI case: one line, the right exit status, nothing written.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, readFileSync, mkdirSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { REPO, WASM_DIR } from './util.mjs';
import { parseJson, checkClassifier, checkEncoder, MetadataError } from '../../web/formats/metadata.js';
import { checkCheckpoint } from '../../web/train/checkpoint.js';
import { readSafetensorsMeta, withMetadata } from '../../web/formats/safetensors.js';

const require = createRequire(import.meta.url);
const CLI = path.join(REPO, 'web/cli.js');
const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const cli = (args) => spawnSync(process.execPath, [CLI, ...args], { env, encoding: 'utf8', timeout: 120000 });
const ENC = { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 1, num_heads: 2 };
const noStack = (r) =>
  assert.doesNotMatch(
    r.stderr + r.stdout,
    /\n\s+at .*:\d+:\d+|TypeError|Cannot read properties/,
    'a stack trace or a JS TypeError',
  );
// one line on stderr matching re (besides progress lines), exit status `status`
function oneLine(r, re, status) {
  noStack(r);
  assert.equal(r.status, status, r.stderr);
  const lines = r.stderr
    .trim()
    .split('\n')
    .filter((l) => !/^step \d|^vitrine train: (MAE|AIM|classify) /.test(l));
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0], re);
}
const refused =
  (field, re = /./) =>
  (e) =>
    e instanceof MetadataError && e.field === field && re.test(e.message) && !/position \d/.test(e.message);

test('parseJson: a repeated key is refused by its path; syntax errors name the field, not a position', () => {
  assert.deepEqual(parseJson('{"a": {"b": [1, {"c": 2}]}, "d": "x,\\"y"}', 'f'), {
    a: { b: [1, { c: 2 }] },
    d: 'x,"y',
  });
  assert.throws(() => parseJson('{"a": 1, "a": 2}', 'cfg'), refused('cfg.a', /appears twice/));
  assert.throws(
    () => parseJson('{"e": {"img_size": 28, "x": "\\"img_size\\"", "img_size": 32}}', 'cfg'),
    refused('cfg.e.img_size'),
  );
  assert.throws(() => parseJson('[{"k": 1}, {"k": 1, "k": 2}]', 'l'), refused('l[1].k'));
  assert.deepEqual(parseJson('{"a": {"k": 1}, "b": {"k": 2}}', 'f'), { a: { k: 1 }, b: { k: 2 } }); // the same key in two objects
  for (const bad of ['{"a": ', '{"a": }', 'xyz', '{"a": 1} x', ''])
    assert.throws(() => parseJson(bad, 'vitrine_run'), refused('vitrine_run', /^vitrine_run: not JSON \(/));
  assert.throws(() => parseJson(5, 'model_config'), refused('model_config', /is not JSON text/));
});

// a checkpoint's metadata as `vitrine train` writes it
const RUN = {
  objective: 'mae',
  preset: null,
  batch: 4,
  steps: 10,
  lr: 0.002,
  warmup: 1,
  maskRatio: 0.5,
  seed: '0',
  data: 'fashion-mnist',
  policy: 'block',
  init: null,
  wasm: 'simd',
  dataN: 60000,
  lossFirst: 1.5,
};
const META = {
  format: 'vitrine-train/1',
  kind: 'mae',
  step: '3',
  grad_checkpointing: 'block',
  vitrine_run: JSON.stringify(RUN),
  model_config: JSON.stringify({ encoder: ENC, decoder_dim: 16 }),
  train_config: '{}',
  rng: '0'.repeat(32),
};
const withRun = (over, meta = {}) => ({ ...META, vitrine_run: JSON.stringify({ ...RUN, ...over }), ...meta });

test('checkCheckpoint: every run setting range- and type-checked by name', () => {
  const c = checkCheckpoint(META, 'vitrine_run');
  assert.equal(c.step, 3);
  assert.deepEqual(c.spec, { kind: 'mae', config: { encoder: ENC, decoder_dim: 16 } });
  const cases = [
    [{ batch: 1e9 }, 'vitrine_run.batch', /1000000000 is not a whole number in 1\.\.65536/],
    [{ batch: 2.5 }, 'vitrine_run.batch'],
    [{ steps: 0 }, 'vitrine_run.steps'],
    [{ lr: 'x' }, 'vitrine_run.lr', /"x" is not a number in 0\.\.1000/],
    [{ lr: -1 }, 'vitrine_run.lr'],
    [{ maskRatio: 1 }, 'vitrine_run.maskRatio', /1 is not a number in \[0, 1\)/],
    [{ maskRatio: -0.1 }, 'vitrine_run.maskRatio'],
    [{ seed: '-1' }, 'vitrine_run.seed'],
    [{ seed: 5 }, 'vitrine_run.seed'],
    [{ seed: '9007199254740991' }, 'vitrine_run.seed', /more than 2\^53 - 3/],
    [{ data: '' }, 'vitrine_run.data'],
    [{ data: ['x'] }, 'vitrine_run.data'],
    [{ objective: 'classify' }, 'vitrine_run.objective'],
    [{ dataN: 0 }, 'vitrine_run.dataN'],
    [{ lossFirst: 'NaN' }, 'vitrine_run.lossFirst'],
    [{ wasm: '../../x' }, 'vitrine_run.wasm'],
    [{ preset: {} }, 'vitrine_run.preset'],
    [{ warmup: -1 }, 'vitrine_run.warmup'],
  ];
  for (const [over, field, re] of cases)
    assert.throws(() => checkCheckpoint(withRun(over), 'vitrine_run'), refused(field, re), JSON.stringify(over));
  assert.throws(
    () => checkCheckpoint(withRun({}, { step: '11' }), 'vitrine_run'),
    refused('step', /past the run's last step/),
  );
  assert.throws(() => checkCheckpoint(withRun({}, { step: '-1' }), 'vitrine_run'), refused('__metadata__.step'));
  assert.throws(() => checkCheckpoint(withRun({}, { kind: 'aim' }), 'vitrine_run'), refused('kind'));
  assert.throws(() => checkCheckpoint(withRun({}, { model_config: 'null' }), 'vitrine_run'), refused('model_config'));
  assert.throws(
    () => checkCheckpoint(withRun({}, { model_config: '{"encoder": {"img_size": [28]}}' }), 'vitrine_run'),
    refused('model_config.encoder.img_size'),
  );
  assert.throws(
    () => checkCheckpoint(withRun({}, { model_config: '{"encoder": {}, "encoder": {}}' }), 'vitrine_run'),
    refused('model_config.encoder', /twice/),
  );
  assert.throws(
    () => checkCheckpoint(withRun({}, { vitrine_run: '{"batch": 4, "batch": 4}' }), 'vitrine_run'),
    refused('vitrine_run.batch', /twice/),
  );
  assert.throws(
    () => checkCheckpoint(withRun({}, { grad_checkpointing: 5 }), 'vitrine_run'),
    refused('__metadata__.grad_checkpointing'),
  );
  // a classifier run: its stored spec is the model
  const spec = { kind: 'timm', config: { ...ENC, num_classes: 2, global_pool: 'avg' } };
  const CRUN = {
    ...RUN,
    objective: undefined,
    maskRatio: undefined,
    pool: 'avg',
    weightDecay: 0.05,
    labelSmoothing: 0.1,
    augment: 'flip,shift:2',
    spec,
  };
  const cmeta = (over) => ({
    ...META,
    kind: 'timm',
    vitrine_run: undefined,
    vitrine_classify: JSON.stringify({ ...CRUN, ...over }),
  });
  assert.deepEqual(checkCheckpoint(cmeta({}), 'vitrine_classify').spec, spec);
  for (const [over, field] of [
    [{ spec: null }, 'vitrine_classify.spec'],
    [{ spec: { kind: 'timm', config: null } }, 'vitrine_classify.spec.config'],
    [{ spec: { kind: 'mae', config: {} } }, 'vitrine_classify.spec.kind'],
    [{ spec: { ...spec, config: { ...spec.config, num_classes: 1 } } }, 'vitrine_classify.spec.config.num_classes'],
    [
      { spec: { ...spec, config: { ...spec.config, global_pool: 'token' } } },
      'vitrine_classify.spec.config.global_pool',
    ],
    [{ labelSmoothing: 1 }, 'vitrine_classify.labelSmoothing'],
    [{ augment: 'flip;rm' }, 'vitrine_classify.augment'],
    [{ pool: 'max' }, 'vitrine_classify.pool'],
    [{ trainN: 0 }, 'vitrine_classify.trainN'],
    [{ weightDecay: 1e9 }, 'vitrine_classify.weightDecay'],
  ])
    assert.throws(() => checkCheckpoint(cmeta(over), 'vitrine_classify'), refused(field), JSON.stringify(over));
});

const CLS = {
  format: 'vitrine-classifier/1',
  classes: ['a', 'b'],
  spec: { kind: 'timm', config: { ...ENC, num_classes: 2, global_pool: 'avg' } },
  img: 28,
  chans: 1,
};
const classifierMeta = (over) => ({ vitrine_classifier: JSON.stringify({ ...CLS, ...over }) });

test('checkClassifier and checkEncoder: class names, spec, sizes; timm_kwargs', () => {
  assert.deepEqual(checkClassifier(classifierMeta({})).classes, ['a', 'b']);
  const cases = [
    [{ classes: [] }, 'vitrine_classifier.classes'],
    [{ classes: 5 }, 'vitrine_classifier.classes'],
    [{ classes: 'ab' }, 'vitrine_classifier.classes'],
    [{ classes: null }, 'vitrine_classifier.classes'],
    [{ classes: [{}, {}] }, 'vitrine_classifier.classes[0]'],
    [{ classes: ['a', 'a'] }, 'vitrine_classifier.classes[1]'],
    [{ classes: ['a', ''] }, 'vitrine_classifier.classes[1]'],
    [{ classes: ['a', 'b\u0007'] }, 'vitrine_classifier.classes[1]'],
    [{ classes: ['a', 'b', 'c'] }, 'vitrine_classifier.spec.config.num_classes'],
    [{ spec: null }, 'vitrine_classifier.spec'],
    [{ spec: { kind: 'timm', config: null } }, 'vitrine_classifier.spec.config'],
    [{ img: 1e9 }, 'vitrine_classifier.img'],
    [{ chans: '1' }, 'vitrine_classifier.chans'],
    [{ format: 'vitrine-classifier/2' }, 'vitrine_classifier.format'],
  ];
  for (const [over, field] of cases)
    assert.throws(() => checkClassifier(classifierMeta(over)), refused(field), JSON.stringify(over));
  assert.throws(() => checkClassifier({}), refused('vitrine_classifier', /missing/));
  assert.deepEqual(checkEncoder({ timm_kwargs: JSON.stringify(ENC) }), ENC);
  assert.equal(checkEncoder({ format: 'pt' }), null);
  assert.throws(() => checkEncoder({ timm_kwargs: '[1]' }), refused('timm_kwargs'));
  assert.throws(() => checkEncoder({ timm_kwargs: '{"img_size": {"a": 1}}' }), refused('timm_kwargs.img_size'));
  // timm's (H, W) of a non-square encoder, as the engine writes it
  assert.deepEqual(checkEncoder({ timm_kwargs: '{"img_size": [224, 160], "norm_eps": 1e-5}' }), {
    img_size: [224, 160],
    norm_eps: 1e-5,
  });
  assert.throws(() => checkEncoder({ timm_kwargs: '{"img_size": [1, 2, 3]}' }), refused('timm_kwargs.img_size'));
  assert.throws(() => checkEncoder({ timm_kwargs: '{"depth": 1, "depth": 2}' }), refused('timm_kwargs.depth', /twice/));
});

// a two-class folder of 28x28 grey PNGs (6 each), and one 50x40 image
function folder() {
  const { PNG } = require('pngjs');
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-meta-'));
  for (const c of ['a', 'b']) {
    mkdirSync(path.join(dir, 'imgs', c), { recursive: true });
    for (let i = 0; i < 6; i++) {
      const p = new PNG({ width: 28, height: 28 });
      for (let k = 0; k < p.data.length; k++)
        p.data[k] = k % 4 === 3 ? 255 : c === 'a' ? 30 * i : 250 - 30 * i + (k % 7);
      writeFileSync(path.join(dir, 'imgs', c, `${i}.png`), PNG.sync.write(p));
    }
  }
  const big = new PNG({ width: 50, height: 40 });
  big.data.fill(200);
  writeFileSync(path.join(dir, 'big.png'), PNG.sync.write(big));
  return dir;
}
const classify = (dir, args) =>
  cli([
    'train',
    '--objective',
    'classify',
    '--data',
    path.join(dir, 'imgs'),
    '--config',
    JSON.stringify(ENC),
    '--batch',
    '4',
    '--no-eval',
    ...args,
  ]);

test('predict: a crafted classifier file is refused by field (item 5); an image of any size goes through the pixel pipeline', () => {
  const dir = folder(),
    out = path.join(dir, 'cls');
  let r = classify(dir, ['--steps', '3', '--out', out]);
  assert.equal(r.status, 0, r.stderr);
  const file = path.join(out, 'classifier.safetensors'),
    bytes = new Uint8Array(readFileSync(file));
  const meta = JSON.parse(readSafetensorsMeta(bytes).vitrine_classifier);
  r = cli(['predict', '--weights', file, path.join(dir, 'imgs/a/0.png'), path.join(dir, 'big.png'), '--json']);
  assert.equal(r.status, 0, r.stderr);
  const got = JSON.parse(r.stdout);
  assert.equal(got.length, 2);
  for (const g of got) assert.deepEqual(g.top.map((t) => t.class).sort(), ['a', 'b']);
  const crafted = [
    [
      { ...meta, spec: { ...meta.spec, config: { ...meta.spec.config, in_chans: 3 } } },
      /vitrine_classifier\.chans: 1 is not the channels of its model \(3\)/,
    ],
    [{ ...meta, chans: 3 }, /vitrine_classifier\.chans: 3 is not the channels of its model \(1\)/],
    [{ ...meta, img: 1e9 }, /vitrine_classifier\.img: 1000000000 is not a whole number/],
    [{ ...meta, img: 56 }, /vitrine_classifier\.img: 56 is not the image size of its model \(28\)/],
    [{ ...meta, classes: [] }, /vitrine_classifier\.classes: \[\] is not a list of 2\.\./],
    [{ ...meta, classes: 5 }, /vitrine_classifier\.classes: 5 is not a list/],
    [{ ...meta, classes: 'ab' }, /vitrine_classifier\.classes: "ab" is not a list/],
    [{ ...meta, classes: ['a'] }, /vitrine_classifier\.classes/],
    [{ ...meta, classes: [{}, {}] }, /vitrine_classifier\.classes\[0\]: \{\} is not a class name/],
    [{ ...meta, classes: null }, /vitrine_classifier\.classes: null/],
    [{ ...meta, spec: null }, /vitrine_classifier\.spec: null is not an object/],
    [
      { ...meta, spec: { ...meta.spec, config: { ...meta.spec.config, img_size: 10000000, patch_size: 10000 } } },
      /vitrine_classifier\.spec: config: img_size must be an integer in 0\.\.1000000/,
    ],
  ];
  for (const [m, re] of crafted) {
    writeFileSync(
      path.join(dir, 'crafted.safetensors'),
      withMetadata(bytes, { vitrine_classifier: JSON.stringify(m) }),
    );
    r = cli(['predict', '--weights', path.join(dir, 'crafted.safetensors'), path.join(dir, 'imgs/a/0.png')]);
    oneLine(r, new RegExp(`^vitrine predict: .*crafted\\.safetensors: damaged classifier metadata: ${re.source}`), 1);
    assert.equal(r.stdout, '');
  }
  rmSync(dir, { recursive: true, force: true });
});

test('classify: an absurd model is refused by the engine before any image is read (item 1); a resumed one by its stored spec', () => {
  const dir = folder(),
    out = path.join(dir, 'out');
  const absurd = JSON.stringify({
    img_size: 10000000,
    patch_size: 10000,
    in_chans: 1,
    embed_dim: 64,
    depth: 2,
    num_heads: 4,
  });
  let r = cli(['train', '--objective', 'classify', '--config', absurd, '--data', path.join(dir, 'imgs'), '--out', out]);
  oneLine(r, /^vitrine train: --config: img_size must be an integer in 0\.\.1000000$/, 2);
  assert.doesNotMatch(r.stderr, /skipped|cannot decode/);
  // valid, but its images would not fit in memory: refused before decoding. (The Trainer reads a
  // data set batch by batch, through a bounded cache, never whole at the model's size: what must
  // fit is one batch of it.)
  r = cli([
    'train',
    '--objective',
    'classify',
    '--config',
    JSON.stringify({ ...ENC, img_size: 4032, patch_size: 64, in_chans: 3 }),
    '--batch',
    '64',
    '--out',
    out,
  ]);
  oneLine(
    r,
    /^vitrine train: --batch 64: one batch of 4032x4032x3 images is 11\.6 GiB, more than wasm memory holds$/,
    1,
  );
  assert.ok(!existsSync(out));
  // a checkpoint whose stored spec says the same, or holds null
  r = classify(dir, ['--steps', '4', '--stop-at', '2', '--out', out]);
  assert.equal(r.status, 0, r.stderr);
  const ck = path.join(out, 'classify-checkpoint.safetensors'),
    ckBytes = new Uint8Array(readFileSync(ck));
  const run = JSON.parse(readSafetensorsMeta(ckBytes).vitrine_classify);
  const crafted = [
    [
      { ...run, spec: { ...run.spec, config: { ...run.spec.config, img_size: 10000000, patch_size: 10000 } } },
      /vitrine_classify\.spec: config: img_size must be an integer/,
    ],
    [{ ...run, spec: { kind: 'timm', config: null } }, /vitrine_classify\.spec\.config: null is not an object/],
    [
      { ...run, spec: { ...run.spec, config: { ...run.spec.config, num_classes: 3 } } },
      /the run trained on 3 classes, .* has 2/,
    ],
  ];
  for (const [m, re] of crafted) {
    const f = path.join(dir, 'crafted.safetensors');
    writeFileSync(f, withMetadata(ckBytes, { vitrine_classify: JSON.stringify(m) }));
    r = cli([
      'train',
      '--objective',
      'classify',
      '--resume',
      f,
      '--data',
      path.join(dir, 'imgs'),
      '--out',
      path.join(dir, 'o2'),
    ]);
    oneLine(r, re, 1);
    assert.doesNotMatch(r.stderr, /skipped|cannot decode/);
    assert.ok(!existsSync(path.join(dir, 'o2')));
  }
  // --stop-at not past the checkpoint's step; a complete run; --require-crc
  r = cli([
    'train',
    '--objective',
    'classify',
    '--resume',
    ck,
    '--data',
    path.join(dir, 'imgs'),
    '--stop-at',
    '2',
    '--out',
    out,
  ]);
  oneLine(r, /^vitrine train: --stop-at 2: the run is at step 2 already$/, 2);
  r = cli(['train', '--objective', 'classify', '--resume', ck, '--data', path.join(dir, 'imgs'), '--out', out]);
  assert.equal(r.status, 0, r.stderr);
  const before = readFileSync(ck);
  r = cli(['train', '--objective', 'classify', '--resume', ck, '--data', path.join(dir, 'imgs'), '--out', out]);
  oneLine(r, /: the run is complete \(step 4 of 4\): nothing to resume, nothing was written$/, 1);
  assert.ok(readFileSync(ck).equals(before));
  // without its CRC-32s (a checkpoint written before they existed): loads, unless --require-crc
  const noCrc = path.join(dir, 'nocrc.safetensors');
  writeFileSync(noCrc, withMetadata(ckBytes, { crc32: undefined }));
  assert.equal(readSafetensorsMeta(new Uint8Array(readFileSync(noCrc))).crc32, undefined);
  r = cli([
    'train',
    '--objective',
    'classify',
    '--resume',
    noCrc,
    '--require-crc',
    '--data',
    path.join(dir, 'imgs'),
    '--out',
    path.join(dir, 'o3'),
  ]);
  oneLine(r, /nocrc\.safetensors: no CRC-32 of its tensors in the metadata \(--require-crc\)$/, 1);
  assert.ok(!existsSync(path.join(dir, 'o3')));
  r = cli([
    'train',
    '--objective',
    'classify',
    '--resume',
    noCrc,
    '--data',
    path.join(dir, 'imgs'),
    '--out',
    path.join(dir, 'o3'),
  ]);
  assert.equal(r.status, 0, r.stderr);
  oneLine(cli(['train', '--require-crc', '--out', path.join(dir, 'o4')]), /--require-crc is for --resume FILE/, 2);
  rmSync(dir, { recursive: true, force: true });
});

test('the metadata fuzz loop: 20000 mutated files of every kind, each refused by field or accepted whole (tests/fuzz/fuzz_metadata.mjs)', () => {
  const r = spawnSync(process.execPath, [path.join(REPO, 'tests/fuzz/fuzz_metadata.mjs'), '--runs', '20000'], {
    env,
    encoding: 'utf8',
    timeout: 300000,
  });
  assert.equal(r.status, 0, r.stderr);
  const m = /fuzz_metadata: 20000 runs in .*: (\d+) accepted, (\d+) refused naming (\d+) fields, 0 failures/.exec(
    r.stdout,
  );
  assert.ok(m, r.stdout);
  assert.ok(Number(m[1]) > 500 && Number(m[2]) > 5000 && Number(m[3]) > 40, r.stdout); // both ways, many fields
});
