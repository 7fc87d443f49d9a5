// options.js: every option of a training run, declared once -- its API name, its CLI flag, its
// type and range, whole number or not, its default, which objectives take it, what its help says --
// and the one validator that train(), Session.open, the CLI, the demo's form and a resumed
// checkpoint's run settings are all checked with. An objective adds its own options
// (web/train/objectives/); the common ones are here. A message names the option as the caller
// gave it: the API's name in train()'s errors, the CLI's flag in the command line's (never the
// other's), with the range it accepts.
//
// Lookups are own-property only: no option, objective, preset or class name ever resolves to a
// property of Object.prototype ('__proto__', 'constructor', 'toString').
import { VitrineError } from '../errors.js';
import { parseAugment } from './augment.js';

/** Steps and warm-up: the engine's VT_MAX_STEPS. */
export const MAX_STEPS = 2000000000;
/** Images: a count an Int32Array index holds. */
export const MAX_IMAGES = 2 ** 31 - 1;
/** Channels of a model (timm's in_chans): the engine's bound. */
export const MAX_CHANS = 65536;
/** A seed survives JSON and seed + 3 (initialisation S, masks S+1, data order S+2, augmentation S+3). */
export const MAX_SEED = 2 ** 53 - 3;

export const own = (obj, key) => obj != null && typeof key === 'string' && Object.hasOwn(obj, key);
/** obj[key] when obj has it as its own property, else undefined (never Object.prototype's). */
export const ownValue = (obj, key) => (own(obj, key) ? obj[key] : undefined);

/** An option given wrong: `option` is its name as the caller gave it (API name or --flag). */
export class OptionError extends VitrineError {
  constructor(option, message) {
    super(`${option}: ${message}`, -1);
    this.name = 'OptionError';
    this.field = option;
  }
}

// a value as a message shows it: JSON (a string quoted), at most 60 characters
export function show(v) {
  let s;
  if (v === undefined) return 'missing';
  if (typeof v === 'number') s = String(v);
  else if (typeof v === 'bigint') s = `${v}n`;
  else if (typeof v === 'function') s = 'a function';
  else if (v instanceof Uint8Array || ArrayBuffer.isView(v)) s = `a ${v.constructor.name} of ${v.length}`;
  else
    try {
      s = JSON.stringify(v) ?? String(v);
    } catch {
      s = Object.prototype.toString.call(v);
    }
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

// ---- the kinds of value: each check(v) returns null (good) or what is wrong -----------------

const range = (min, max, open) => (open ? `[${min}, ${max})` : `${min}..${max}`);
/** A whole number in min..max. */
export const whole = (min, max) => ({
  kind: 'whole',
  min,
  max,
  check: (v) =>
    typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max
      ? null
      : `${show(v)} is not a whole number in ${min}..${max}`,
});
/** A finite number in min..max ([min, max) when open). */
export const number = (min, max, { open = false, above = false } = {}) => ({
  kind: 'number',
  min,
  max,
  open,
  above,
  check: (v) =>
    typeof v === 'number' && Number.isFinite(v) && (above ? v > min : v >= min) && (open ? v < max : v <= max)
      ? null
      : `${show(v)} is not a number in ${above ? `(${min}, ${max}${open ? ')' : ']'}` : range(min, max, open)}`,
});
/** One of the words listed. */
export const word = (...words) => ({
  kind: 'word',
  words,
  check: (v) =>
    typeof v === 'string' && words.includes(v) ? null : `${show(v)} is not one of ${words.map(show).join(', ')}`,
});
/** Text of 1..max characters (matching re when given). */
export const text = ({ max = 4096, re = null, what = null } = {}) => ({
  kind: 'text',
  check: (v) =>
    typeof v === 'string' && v.length > 0 && v.length <= max && (!re || re.test(v))
      ? null
      : `${show(v)} is not ${what || `text of 1..${max} characters`}`,
});
/** true or false. */
export const flag = () => ({
  kind: 'flag',
  check: (v) => (typeof v === 'boolean' ? null : `${show(v)} is not true or false`),
});
/** A seed: a whole number in 0..2^53-3 (a number, a bigint or its decimal digits), kept as its text. */
export const seed = () => ({
  kind: 'seed',
  min: 0,
  max: MAX_SEED,
  check: (v) => {
    const t = typeof v === 'string' ? v : typeof v === 'bigint' || Number.isInteger(v) ? String(v) : null;
    return t != null && /^\d{1,16}$/.test(t) && Number(t) <= MAX_SEED
      ? null
      : `${show(v)} is not a whole number in 0..2^53-3`;
  },
});
/** A seed as a checkpoint keeps it: its decimal digits. */
const storedSeed = (v) =>
  typeof v !== 'string' || !/^\d{1,16}$/.test(v)
    ? `${show(v)} is not a whole number in decimal digits below 2^53 - 2`
    : Number(v) > MAX_SEED
      ? `${show(v)} is more than 2^53 - 3`
      : null;
/** Augmentation as text (web/train/augment.js parseAugment's words). */
export const augmentation = () => ({
  kind: 'augment',
  check: (v) => {
    if (typeof v !== 'string' || v.length > 256) return `${show(v)} is not text of 1..256 characters`;
    try {
      parseAugment(v);
      return null;
    } catch {
      return `${show(v)} is not none, or a comma list of hflip[:P], rrc[:A-B[:C-D]], flip, shift:N`;
    }
  },
});
/** Per-channel statistics: one value for every channel, or one per channel (1 or 3 for grey or
 * colour; a model of other in_chans takes as many: the run checks the count against its model) --
 * finite numbers (positive ones: std). */
export const stats = ({ positive = false } = {}) => ({
  kind: 'stats',
  positive,
  check: (v) =>
    Array.isArray(v) &&
    v.length >= 1 &&
    v.length <= MAX_CHANS &&
    v.every((x) => typeof x === 'number' && Number.isFinite(x) && (!positive || x > 0))
      ? null
      : `${show(v)} is not 1 or 3 (one per channel) ${positive ? 'positive' : 'finite'} numbers`,
});
/** Anything the option's own reader checks further (data, weights: web/train/trainer.js, session.js);
 * test: what it must be at least. */
export const any = (what, test = () => true) => ({
  kind: 'any',
  what,
  check: (v) => (test(v) ? null : `${show(v)} is not ${what}`),
});
const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && !ArrayBuffer.isView(v);
const isBytes = (v) =>
  v instanceof ArrayBuffer || ArrayBuffer.isView(v) || (typeof Blob !== 'undefined' && v instanceof Blob);
const isText = (v) => typeof v === 'string' && v.length > 0;
// JSON text of an object (what a config given as text must be: the model's readers parse it)
const isJsonObject = (v) => {
  if (!isText(v)) return false;
  try {
    return isPlainObject(JSON.parse(v));
  } catch {
    return false;
  }
};

// ---- the declarations -------------------------------------------------------------------------

/**
 * @typedef {object} OptionDecl
 * @property {string} [flag]       the CLI flag (without --); absent: API only
 * @property {string} [short]      the one-letter CLI form
 * @property {string} [alias]      another name of the CLI flag
 * @property {string} [value]      the value's placeholder in the CLI help (N, FILE, ...)
 * @property {{kind: string, check: (v: any) => string | null}} type   what it accepts (above)
 * @property {any} [default]       the default (an objective's `defaults` override it for that objective)
 * @property {string} help         one line (or more, '\n') for the CLI help and docs/api.md
 * @property {boolean} [run]       kept in the run's settings (a checkpoint's metadata), under its name
 * @property {boolean} [internal]  passed between vitrine's own modules (the CLI to the Trainer), not documented
 */

/** The options every objective takes (an objective's own are in its module). */
export const OPTIONS = {
  objective: { flag: 'objective', value: 'NAME', type: text({ max: 64 }), default: 'mae', help: 'what to train' },
  model: {
    flag: 'preset',
    alias: 'model',
    value: 'NAME',
    type: any('a preset or timm architecture name, or a config object', (v) => isText(v) || isPlainObject(v)),
    default: 'fmnist-p7-mlp2',
    help: "a train preset (fmnist, fmnist-p7, fmnist-p7-mlp2, fmnist-base) or a timm architecture\n(vit_tiny_patch16_224, ...: timm's create_model)",
  },
  config: {
    flag: 'config',
    value: 'JSON|FILE',
    type: any('a config object (or its JSON text)', (v) => isPlainObject(v) || isJsonObject(v)),
    help: 'the model as the engine reads it instead of a preset: timm kwargs, or\n{"encoder": {timm kwargs}, "decoder_dim": ...}',
  },
  imgSize: {
    flag: 'img-size',
    value: 'N',
    type: whole(1, 65536),
    run: true,
    help: "a timm architecture at N px (timm's --img-size): weights of another size are resampled",
  },
  patchSize: { type: whole(1, 65536), help: "a timm architecture's patch size (timm's create_model patch_size)" },
  inChans: { type: whole(1, MAX_CHANS), help: "a timm architecture's input channels (timm's create_model in_chans)" },
  weights: {
    flag: 'init',
    value: 'FILE|URL',
    type: any(
      'weights: bytes, a Blob / File, { bytes, name }, a URL or a file path',
      (v) =>
        isBytes(v) ||
        isText(v) ||
        v instanceof URL ||
        (isPlainObject(v) && isBytes(v.bytes) && (v.name == null || isText(v.name))),
    ),
    help: 'start from weights: timm (head or not), lightly or vitrine safetensors, a file or an\nhttp(s) URL; the layout is recognised, what cannot be used is named and skipped; a\npos_embed / patch_embed of another size is resampled as timm does',
  },
  weightsStrict: { flag: 'init-strict', type: flag(), help: 'with --init: any skipped tensor is an error' },
  data: {
    flag: 'data',
    value: 'DIR',
    type: any('data', (v) => (typeof v === 'string' && v !== '') || (v !== null && typeof v === 'object')),
    help: 'a folder of PNG / JPEG images (sub-folders = classes) instead of Fashion-MNIST\n(with --resume: the folder, named again; no path is read from the checkpoint)',
  },
  val: {
    type: {
      kind: 'val',
      check: (v) =>
        typeof v === 'number'
          ? number(0, 1, { open: true }).check(v)
          : typeof v === 'string' && /^\s*[-+.\d][\d.eE+-]*\s*$/.test(v)
            ? `${show(v)} is text; a held-out fraction is a number in [0, 1), held-out data a folder, Files or URLs`
            : v === '' || (typeof v !== 'string' && typeof v !== 'object')
              ? `${show(v)} is not a fraction in [0, 1) nor held-out data`
              : null,
    },
    stored: (v) => number(0, 1, { open: true }).check(v), // a run keeps the fraction
    run: true,
    help: 'held-out data, or the fraction of data held out',
  },
  trainMax: {
    flag: 'train-max',
    value: 'N',
    type: whole(1, MAX_IMAGES),
    run: true,
    help: 'use only the first N training images',
  },
  valMax: { flag: 'eval-max', value: 'N', type: whole(1, MAX_IMAGES), help: 'use only the first N held-out images' },
  steps: {
    flag: 'steps',
    value: 'N',
    type: whole(1, MAX_STEPS),
    run: 'always',
    help: 'training steps, the length of the cosine schedule',
  },
  epochs: {
    flag: 'epochs',
    value: 'E',
    type: number(0, 1e6, { above: true }),
    run: true,
    help: "train for E epochs instead of --steps (timm's --epochs): steps = E x images /\n(batch x grad-accum-steps), rounded up",
  },
  batch: {
    flag: 'batch',
    short: 'b',
    alias: 'batch-size',
    value: 'B',
    type: whole(1, 65536),
    run: 'always',
    help: 'images per step (with --grad-accum-steps K: per micro-batch)',
  },
  gradAccum: {
    flag: 'grad-accum-steps',
    value: 'K',
    type: whole(1, 65536),
    default: 1,
    run: true,
    help: "one optimizer step from the gradients of K batches of --batch images, each\nloss scaled by 1/K (timm's --grad-accum-steps): a step of K x B images",
  },
  lr: { flag: 'lr', value: 'LR', type: number(0, 1000), run: 'always', help: 'peak learning rate' },
  minLr: {
    flag: 'min-lr',
    value: 'LR',
    type: number(0, 1000),
    default: 0,
    run: true,
    help: "the cosine schedule's floor (timm's --min-lr)",
  },
  warmup: {
    flag: 'warmup',
    value: 'N',
    type: whole(0, MAX_STEPS),
    run: 'always',
    help: 'warm-up steps (default 5% of --steps)',
  },
  warmupEpochs: {
    flag: 'warmup-epochs',
    value: 'E',
    type: number(0, 1e6),
    help: "the warm-up in epochs instead of --warmup steps (timm's --warmup-epochs)",
  },
  weightDecay: {
    flag: 'weight-decay',
    value: 'W',
    type: number(0, 1000),
    run: true,
    help: 'AdamW weight decay, not on norms, biases, tokens, pos_embed (default 0.05)',
  },
  policy: {
    flag: 'grad-checkpointing',
    value: 'POLICY',
    type: text({ max: 64, what: 'a checkpointing policy (none, block, every:K, sqrt, budget:BYTES, selective)' }),
    default: 'block',
    run: true,
    help: 'checkpointing policy (see below)',
  },
  seed: {
    flag: 'seed',
    value: 'S',
    type: seed(),
    stored: storedSeed,
    default: '0',
    run: 'always',
    help: 'initialisation S, masks S+1, data order S+2, augmentation S+3',
  },
  augment: {
    flag: 'augment',
    value: 'SPEC',
    type: augmentation(),
    default: 'none',
    run: true,
    help: "none, or a comma list: hflip[:P] (timm's --hflip), rrc[:A-B[:C-D]]\n(RandomResizedCrop, timm's --scale / --ratio), flip, shift:N (translation by up to N pixels)",
  },
  mean: {
    flag: 'mean',
    value: 'M[,M,M]',
    type: stats(),
    run: true,
    help: "normalise with this mean (default: the --init weights' pretrained_cfg, else timm's for\na timm architecture, else ImageNet's)",
  },
  std: {
    flag: 'std',
    value: 'S[,S,S]',
    type: stats({ positive: true }),
    run: true,
    help: 'and this std (with --mean)',
  },
  resume: {
    flag: 'resume',
    value: 'FILE|DIR',
    type: any('a checkpoint: bytes or a Blob / File', isBytes),
    help: 'continue a checkpoint bit for bit (model, schedule, batch, data, seed come from it),\nor a run PyTorch trained (a folder of python/vitrine_continue.py: docs/scale-out.md)',
  },
  stopAt: {
    flag: 'stop-at',
    value: 'STEP',
    type: whole(1, MAX_STEPS),
    help: 'stop after STEP steps (checkpoint written, no evaluation): resume later',
  },
  checkpointEvery: {
    flag: 'save-every',
    value: 'N',
    type: whole(1, MAX_STEPS),
    help: 'write the checkpoint every N steps (and at the end)',
  },
  evalEvery: { type: whole(1, MAX_STEPS), help: 'evaluate every N steps (a classifier)' },
  evalChunk: { type: whole(1, 65536), default: 250, help: 'images per evaluation forward' },
  noEval: { flag: 'no-eval', type: flag(), help: 'skip the evaluation at the end' },
  wasm: {
    flag: 'wasm',
    value: 'BUILD',
    type: text({ max: 64, re: /^[a-z0-9-]+$/, what: 'a wasm build name' }),
    run: true,
    help: 'the wasm build (default: the fastest this host runs)',
  },
  threads: {
    flag: 'threads',
    value: 'N',
    type: whole(1, 64),
    help: 'kernel threads (default every core; the same bits at any count)',
  },
  backend: {
    flag: 'backend',
    value: 'wasm|webgpu|auto',
    type: word('wasm', 'webgpu', 'auto'),
    help: "where training steps run (default wasm). webgpu: the engine's recorded step replayed on a\nWebGPU adapter (Node: the npm package webgpu; VITRINE_WEBGPU=swiftshader uses Chromium's\nSwiftShader, no GPU needed); auto: WebGPU on a hardware adapter, else wasm",
  },
  gpu: { type: any('an object of adapter options', isPlainObject), help: "createVitrine's gpu options" },
  cacheBytes: { type: whole(0, Number.MAX_SAFE_INTEGER), help: 'bytes of resized images kept' },
  maxPixels: {
    type: number(0, 1e12, { above: true }),
    help: 'refuse images over this many pixels, from their header',
  },
  urlStallSeconds: {
    type: number(0, 86400, { above: true }),
    help: 'seconds without a byte before a URL (weights, an image) is given up (default 30)',
  },
  urlTimeoutSeconds: {
    type: number(0, 604800, { above: true }),
    help: 'seconds a URL may take in all (default 1800 for weights, 120 for an image)',
  },
  frozen: {
    type: any('a list of parameter names', (v) => Array.isArray(v) && v.every((n) => typeof n === 'string')),
    help: 'parameters not trained',
  },
  signal: {
    type: any(
      'an AbortSignal',
      (v) => typeof v === 'object' && typeof v.aborted === 'boolean' && typeof v.addEventListener === 'function',
    ),
    help: 'aborts the run',
  },
  // between vitrine's own modules: the CLI's and the demo's extras for the run
  runInfo: { type: any('an object of fields', isPlainObject), internal: true, help: 'fields kept in the run settings' },
  resumeName: { type: text(), internal: true, help: 'the checkpoint, as messages name it' },
  weightsName: { type: text(), internal: true, help: 'the weights, as messages name them' },
  spec: { type: any('a model spec', isPlainObject), internal: true, help: 'the model, as createModel takes it' },
  cliFlags: { type: flag(), internal: true, help: "messages name the command line's flags (the CLI's run)" },
  objectiveModules: {
    type: any('a list of module URLs', (v) => Array.isArray(v) && v.every(isText)),
    internal: true,
    help: 'objective modules a worker registers',
  },
};

/** The callbacks train() takes (functions, kept in the calling thread). */
export const CALLBACKS = {
  step: 'onStep',
  eval: 'onEval',
  checkpoint: 'onCheckpoint',
  load: 'onLoad',
  log: 'onLog',
  ready: 'onReady',
  engine: 'onEngine',
};

// ---- names ---------------------------------------------------------------------------------------

/** Levenshtein distance (small strings). */
function distance(a, b) {
  const d = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = d[0];
    d[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const t = d[j];
      d[j] = Math.min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = t;
    }
  }
  return d[b.length];
}
/** The name of `names` closest to `name` (case-insensitive edit distance; null when none is close). */
export function closest(name, names) {
  const n = String(name).toLowerCase();
  let best = null,
    bestD = Infinity;
  for (const c of names) {
    const d = distance(n, c.toLowerCase());
    if (d < bestD) {
      best = c;
      bestD = d;
    }
  }
  return best != null && bestD <= Math.max(2, Math.floor(n.length / 3)) ? best : null;
}

// ---- the validator ------------------------------------------------------------------------------

/**
 * A run's options (train(), Session.open, the demo's form) checked against their declarations: an
 * unknown key is an error naming the closest known one; an option of another objective says whose
 * it is; a value of the wrong type or out of its range names the option and what it accepts.
 * null / undefined mean "not given". obj: the run's objective (its own options), or null (a resumed
 * run: the checkpoint says). others: every registered objective, to name whose an option is.
 * Returns the options.
 */
export function checkOptions(o, obj, others = []) {
  if (!isPlainObject(o)) throw new OptionError('options', `${show(o)} is not an object of options`);
  const decls = { ...OPTIONS, ...(obj ? obj.options : {}) },
    callbacks = Object.values(CALLBACKS);
  for (const k of Object.keys(o)) {
    if (own(decls, k) || callbacks.includes(k)) continue;
    const whose = others.filter((x) => x !== obj && own(x.options, k)).map((x) => x.name);
    if (whose.length)
      throw new OptionError(
        k,
        `not an option of objective ${obj ? obj.name : '(none given)'} (${whose.join(', ')} takes it)`,
      );
    const near = closest(
      k,
      [...Object.keys(decls), ...callbacks].filter((n) => !decls[n]?.internal),
    );
    throw new OptionError(k, `unknown option${near ? `; did you mean ${near}?` : ''}`);
  }
  for (const [k, v] of Object.entries(o)) {
    if (v == null) continue;
    if (callbacks.includes(k)) {
      if (typeof v !== 'function') throw new OptionError(k, `${show(v)} is not a function`);
      continue;
    }
    const why = decls[k].type.check(v);
    if (why) throw new OptionError(k, why);
  }
  if ((o.mean == null) !== (o.std == null))
    throw new OptionError(o.mean == null ? 'std' : 'mean', 'give mean and std together');
  if (o.steps != null && o.epochs != null) throw new OptionError('epochs', 'give steps or epochs, not both');
  if (o.warmup != null && o.warmupEpochs != null)
    throw new OptionError('warmupEpochs', 'give warmup or warmupEpochs, not both');
  return o;
}

/** Option `name` as a message names it: its API name, or (cli) its command-line flag. */
export function nameOf(name, cli = false) {
  if (!cli) return name;
  if (name === 'val') return '--val-dir';
  return own(OPTIONS, name) && OPTIONS[name].flag ? `--${OPTIONS[name].flag}` : name;
}
