// fuzz_metadata.mjs [--runs N | --seconds S] [--seed K] [--coverage]: a structure-aware fuzz loop
// over the metadata validators (web/formats/metadata.js: checkpoints of MAE / AIM and classifier runs,
// classifier files, encoder files) and the engine's check of the model spec they accept
// (Vitrine.checkModel). Seeds: the metadata vitrine writes; mutations: a value anywhere in the JSON
// replaced (numbers at and past every bound, wrong types, long and control-character strings), a
// key dropped or repeated, the text cut short. Every input must be refused with a MetadataError
// naming its field (never a position) -- the engine's own refusal a VitrineError -- or accepted
// with every property the command line relies on (ranges, types, counts that agree). --coverage
// prints the share of web/formats/metadata.js's code the run executed (V8 block coverage). Exit 1 with the
// failing input in build/fuzz-metadata-crash.json.
import { writeFileSync, mkdirSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const args = process.argv.slice(2);
const opt = (k, d) => {
  const i = args.indexOf(k);
  return i >= 0 ? Number(args[i + 1]) : d;
};
const runs = opt('--runs', Infinity),
  seconds = opt('--seconds', runs === Infinity ? 60 : Infinity);
let session = null;
if (args.includes('--coverage')) {
  // before the module under test is loaded
  session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: true });
}
const { checkClassifier, checkEncoder, MetadataError } = await import('../../web/formats/metadata.js');
const { checkCheckpoint } = await import('../../web/train/checkpoint.js');
const { createVitrine, VitrineError } = await import('../../web/vitrine.js');
const { predictTop } = await import('../../web/train/objectives/classify.js');
const { parseAugment } = await import('../../web/train/augment.js'); // (web/train/objectives/classify.js's before the Trainer)
const vt = await createVitrine({
  wasm: 'simd',
  threads: 1,
  wasmDir: process.env.VITRINE_WASM_DIR || path.join(ROOT, 'build/wasm'),
});

let seed = opt('--seed', 12345);
const rand = () => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return seed / 2 ** 32;
};
const ri = (n) => Math.floor(rand() * n);
const pick = (a) => a[ri(a.length)];

// ---- seeds: what vitrine writes ----
const ENC = { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 };
const RUN = {
  batch: 64,
  steps: 5000,
  lr: 0.002,
  warmup: 250,
  seed: '0',
  data: 'fashion-mnist',
  policy: 'block',
  init: null,
  wasm: 'relaxed',
  lossFirst: 1.25,
  preset: 'fmnist-p7-mlp2',
};
const SPEC = { kind: 'timm', config: { ...ENC, num_classes: 3, global_pool: 'avg' } };
const SEEDS = [
  {
    kind: 'checkpoint',
    key: 'vitrine_run',
    meta: {
      format: 'vitrine-train/1',
      kind: 'mae',
      step: '200',
      grad_checkpointing: 'block',
      model_config: JSON.stringify({
        encoder: ENC,
        decoder_dim: 64,
        decoder_depth: 2,
        decoder_heads: 4,
        norm_pix_loss: true,
      }),
      train_config: '{}',
      rng: '0'.repeat(32),
      vitrine_run: JSON.stringify({ ...RUN, objective: 'mae', maskRatio: 0.5, dataN: 60000 }),
    },
  },
  {
    kind: 'checkpoint',
    key: 'vitrine_run',
    meta: {
      format: 'vitrine-train/1',
      kind: 'aim',
      step: '0',
      model_config: JSON.stringify({
        encoder: { ...ENC, class_token: false, global_pool: 'avg' },
        head_hidden_dim: 16,
        head_blocks: 1,
      }),
      vitrine_run: JSON.stringify({ ...RUN, objective: 'aim', maskRatio: null, dataN: null }),
    },
  },
  {
    kind: 'checkpoint',
    key: 'vitrine_classify',
    meta: {
      format: 'vitrine-train/1',
      kind: 'timm',
      step: '12',
      grad_checkpointing: 'selective',
      model_config: '{}',
      vitrine_classify: JSON.stringify({
        ...RUN,
        pool: 'avg',
        weightDecay: 0.05,
        labelSmoothing: 0.1,
        augment: 'flip,shift:2',
        config: null,
        trainMax: null,
        trainN: 48,
        spec: SPEC,
      }),
    },
  },
  {
    kind: 'classifier',
    meta: {
      format: 'pt',
      vitrine_classifier: JSON.stringify({
        format: 'vitrine-classifier/1',
        classes: ['cat', 'dog', 'bird'],
        spec: SPEC,
        img: 28,
        chans: 1,
      }),
    },
  },
  {
    kind: 'encoder',
    meta: {
      format: 'pt',
      timm_kwargs: JSON.stringify({
        ...ENC,
        mlp_ratio: 2,
        qkv_bias: true,
        class_token: true,
        global_pool: 'token',
        num_classes: 0,
      }),
    },
  },
];
const JSON_KEYS = ['vitrine_run', 'vitrine_classify', 'vitrine_classifier', 'timm_kwargs', 'model_config'];

// ---- mutations ----
const VALUES = [
  0,
  -1,
  1,
  2,
  3,
  0.5,
  0.999999,
  1.5,
  -0,
  1e9,
  1e308,
  -1e308,
  2 ** 31,
  2 ** 31 - 1,
  2 ** 53,
  2 ** 53 - 3,
  65536,
  65537,
  1000,
  1000.001,
  2000000000,
  2000000001,
  4096,
  10000000,
  1e-320,
  'x',
  '',
  '-1',
  '1e3',
  '0',
  '01',
  '9007199254740989',
  '9007199254740991',
  'none',
  'flip',
  'shift:2',
  'flip,shift:99',
  'shift:100',
  'flip;x',
  'mae',
  'aim',
  'timm',
  'token',
  'avg',
  'max',
  'fashion-mnist',
  'block',
  'every:0',
  '\u0000',
  'a\u0007b',
  'a'.repeat(300),
  'a'.repeat(5000),
  null,
  true,
  false,
  [],
  {},
  [1, 2],
  ['a', 'b'],
  ['a', 'a'],
  [{}],
  { kind: 'timm' },
  { config: null },
];
const clone = (v) => JSON.parse(JSON.stringify(v));
// every (container, key) in a JSON value
function slots(v, out = []) {
  if (v && typeof v === 'object')
    for (const k of Object.keys(v)) {
      out.push([v, k]);
      slots(v[k], out);
    }
  return out;
}
function mutateValue(v) {
  const s = slots(v);
  if (!s.length) return pick(VALUES);
  for (let n = 1 + ri(3); n > 0; n--) {
    const [o, k] = pick(s),
      op = ri(10);
    if (op < 6) o[k] = clone(pick(VALUES));
    else if (op === 6 && !Array.isArray(o)) delete o[k];
    else if (op === 7 && typeof o[k] === 'number')
      o[k] = pick([o[k] + 1, o[k] - 1, o[k] * 2, -o[k], o[k] + 0.5, String(o[k])]);
    else if (op === 8 && Array.isArray(o)) o.push(clone(pick(VALUES)));
    else o[k] = pick([typeof o[k] === 'string' ? Number(o[k]) : String(o[k]), [o[k]], { v: o[k] }]);
  }
  return v;
}
function mutateText(t) {
  const op = ri(4);
  if (op === 0) return t.slice(0, ri(t.length + 1)); // cut short
  if (op === 1) {
    const m = /"([^"]+)":\s*("[^"]*"|[^,}\]]+)/.exec(t.slice(ri(t.length))); // a key repeated
    return m ? t.replace('{', `{${m[0]}, `) : t;
  }
  if (op === 2) {
    const i = ri(t.length);
    return t.slice(0, i) + pick(['"', ',', '}', ']', '\\', 'NaN', ' ']) + t.slice(i);
  }
  return t;
}
function mutate(seedEntry) {
  const meta = { ...seedEntry.meta };
  const keys = Object.keys(meta),
    k = pick([...keys.filter((x) => JSON_KEYS.includes(x)), ...keys]);
  if (JSON_KEYS.includes(k) && ri(5)) {
    let t = JSON.stringify(mutateValue(JSON.parse(meta[k])));
    if (ri(4) === 0) t = mutateText(t);
    meta[k] = t;
  } else if (ri(2)) meta[k] = pick(VALUES);
  else delete meta[k];
  return { ...seedEntry, meta };
}

// ---- what the command line relies on, once a file is accepted ----
const isInt = (v, lo, hi) => Number.isInteger(v) && v >= lo && v <= hi;
function checkAccepted(e, r) {
  const want = (cond, what) => {
    if (!cond) throw new Error(`accepted, but ${what}`);
  };
  let spec;
  if (e.kind === 'checkpoint') {
    const run = r.run;
    want(
      isInt(run.batch, 1, 65536) && isInt(run.steps, 1, 2e9) && isInt(run.warmup, 0, 2e9),
      'batch / steps / warmup out of range',
    );
    want(typeof run.lr === 'number' && run.lr >= 0 && run.lr <= 1000, `lr ${run.lr}`);
    want(BigInt(run.seed) + 3n < 2n ** 53n, `seed ${run.seed}`);
    want(typeof run.data === 'string' && run.data.length > 0, 'data');
    want(isInt(r.step, 0, run.steps), `step ${r.step} of ${run.steps}`);
    want(r.policy === null || typeof r.policy === 'string', 'policy');
    if (e.key === 'vitrine_run')
      want(run.maskRatio == null || (run.maskRatio >= 0 && run.maskRatio < 1), `maskRatio ${run.maskRatio}`);
    else {
      parseAugment(run.augment ?? 'none');
      want(isInt(r.spec.config.num_classes, 2, 1e5) && r.spec.config.global_pool === run.pool, 'num_classes / pool');
    }
    JSON.stringify(run); // written back by the next save
    spec = r.spec;
  } else if (e.kind === 'classifier') {
    want(
      r.classes.every((c) => typeof c === 'string' && c.length > 0) && new Set(r.classes).size === r.classes.length,
      'class names',
    );
    want(r.spec.config.num_classes === r.classes.length, 'classes and num_classes disagree');
    for (const t of predictTop(new Float32Array(r.classes.length), r.classes, 3))
      want(r.classes.includes(t.name), `predicted ${t.name}`);
    spec = r.spec;
  } else if (r) {
    want(
      Object.values(r).every(
        (v) =>
          v === null ||
          ['number', 'string', 'boolean'].includes(typeof v) ||
          (Array.isArray(v) && v.length === 2 && v.every((x) => typeof x === 'number')),
      ),
      'a timm kwarg of another type',
    );
    const { num_classes, global_pool, ...encoder } = r;
    spec = { kind: 'timm', config: { ...encoder, num_classes: 2, global_pool: 'avg' } };
  }
  if (!spec) return;
  try {
    // the engine's check of what was accepted: dims, or its own refusal
    const d = vt.checkModel(spec);
    want(d.img > 0 && d.chans > 0 && d.img <= 1e6, `dims ${JSON.stringify(d)}`);
  } catch (err) {
    if (!(err instanceof VitrineError)) throw err;
  }
}
const validate = (e) =>
  e.kind === 'checkpoint'
    ? checkCheckpoint(e.meta, e.key)
    : e.kind === 'classifier'
      ? checkClassifier(e.meta)
      : checkEncoder(e.meta);

const fail = (input, why) => {
  mkdirSync(path.join(ROOT, 'build'), { recursive: true });
  const f = path.join(ROOT, 'build', 'fuzz-metadata-crash.json');
  writeFileSync(f, JSON.stringify(input, null, 1));
  console.error(`fuzz_metadata: ${why} (input: ${f})`);
  process.exit(1);
};
const t0 = Date.now(),
  fields = new Set();
let n = 0,
  accepted = 0,
  refused = 0;
while (n < runs && (Date.now() - t0) / 1000 < seconds) {
  const base = pick(SEEDS),
    input = ri(20) === 0 ? base : mutate(base);
  n++;
  let r;
  try {
    r = validate(input);
  } catch (err) {
    if (!(err instanceof MetadataError)) fail(input, `threw ${err && err.stack}`);
    if (!err.message.startsWith(`${err.field}: `) || /position \d|at byte/.test(err.message))
      fail(input, `message ${JSON.stringify(err.message)}`);
    fields.add(err.field.replace(/\[\d+\]/g, '[]'));
    refused++;
    continue;
  }
  try {
    checkAccepted(input, r);
  } catch (err) {
    fail(input, err.stack);
  }
  accepted++;
}
let cov = '';
if (session) {
  const { result } = await session.post('Profiler.takePreciseCoverage');
  // the validators' two files: the kinds of file, and a checkpoint's run settings
  for (const file of ['web/formats/metadata.js', 'web/train/checkpoint.js']) {
    const f = result.find((s) => s.url.endsWith('/' + file));
    // the bytes of its functions (the module's top level left out) in a block that ran: ranges
    // nested in a function's range override it (V8's block coverage)
    const size = Math.max(...f.functions.flatMap((fn) => fn.ranges.map((rg) => rg.endOffset)));
    const state = new Int8Array(size).fill(-1); // -1 outside any function, 0 not run, 1 run
    const ranges = f.functions
      .filter((fn) => fn.ranges[0].startOffset > 0)
      .flatMap((fn) => fn.ranges)
      .sort((a, b) => b.endOffset - b.startOffset - (a.endOffset - a.startOffset));
    for (const rg of ranges) state.fill(rg.count > 0 ? 1 : 0, rg.startOffset, rg.endOffset);
    const inFns = state.filter((v) => v >= 0).length,
      run = state.filter((v) => v === 1).length;
    cov += `, ${file} ${((100 * run) / inFns).toFixed(1)}%`;
  }
  cov += " of its functions' code run";
}
console.log(
  `fuzz_metadata: ${n} runs in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${accepted} accepted, ${refused} refused naming ${fields.size} fields${cov}, 0 failures`,
);
vt.close();
