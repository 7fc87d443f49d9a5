// fuzz-train.test.mjs: train()'s options, drawn at random (issue 39, item 5). Each case is an
// option object -- valid values and the edges of each option's range (from its declaration in
// web/train/options.js, so a new option is drawn as soon as it is declared), wrong types, values out
// of range, NaN / Infinity, numbers as text, prototype names as keys and values, unknown keys, an
// option of another objective -- and either trains one step on a tiny model and tiny data, then
// resumes its checkpoint for one step more, or is refused with a VitrineError whose one-line
// message names an option the case gave. A case with a value its declaration refuses must be
// refused. Bounded by time, not by count: VITRINE_FUZZ_SECONDS (default 50) of cases; the seed is
// printed, and VITRINE_FUZZ_SEED=S [VITRINE_FUZZ_CASE=K] replays a run (or its case K alone).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { train, VitrineError } from '../../web/vitrine.js';
import { OPTIONS, CALLBACKS, MAX_SEED } from '../../web/train/options.js';
import { objectiveNames, objectiveNamed } from '../../web/train/objectives/index.js';
import { TRAIN_PRESETS } from '../../web/train/presets.js';
import './util.mjs';

const SECONDS = Number(process.env.VITRINE_FUZZ_SECONDS || 50);
const SEED = Number(process.env.VITRINE_FUZZ_SEED || Math.floor(Math.random() * 2 ** 31));
const ONLY = process.env.VITRINE_FUZZ_CASE != null ? Number(process.env.VITRINE_FUZZ_CASE) : null;
const ENGINE = { wasm: 'simd', threads: 1 };
console.log(`fuzz-train: seed ${SEED} (VITRINE_FUZZ_SEED=${SEED} replays it), ${SECONDS} s of cases`);
const CASE_SECONDS = 90; // a case that takes longer hangs (one step of a tiny model takes well under one)

// mulberry32: a small seeded generator; each case draws from its own (seed, case) stream
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
  const r = {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: (xs) => xs[Math.floor(next() * xs.length)],
    chance: (p) => next() < p,
  };
  return r;
}
const caseSeed = (seed, k) => (Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) + Math.imul(k + 1, 0xc2b2ae35)) >>> 0;

const PROTO = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf'];
// an object with these own properties (a '__proto__' key stays an own property, as JSON.parse makes it)
const withKeys = (o, entries) => {
  for (const [k, v] of entries)
    Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
  return o;
};

// ---- tiny models and data ----------------------------------------------------------------------

const ENC = { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 1, num_heads: 2 };
const CONFIG = {
  mae: { encoder: ENC, decoder_dim: 16, decoder_depth: 1, decoder_heads: 2 },
  aim: { encoder: ENC, head_hidden_dim: 16, head_blocks: 1 },
  classify: ENC,
};
// the decoder / head alone (over a timm architecture's encoder)
const HEADS = {
  mae: { decoder_dim: 16, decoder_depth: 1, decoder_heads: 2 },
  aim: { head_hidden_dim: 16, head_blocks: 1 },
};
// n grey 28x28 images of two classes (stripes one way or the other), as { pixels } data
function stripes(n, classes) {
  const px = new Uint8Array(n * 784),
    labels = [];
  for (let i = 0; i < n; i++) {
    const c = i % 2;
    labels.push(c);
    for (let y = 0; y < 28; y++)
      for (let x = 0; x < 28; x++) px[i * 784 + y * 28 + x] = (((c ? x : y) + (i >> 1)) >> 1) % 2 ? 200 : 30;
  }
  return { pixels: px, n, size: 28, chans: 1, labels, classes };
}
// ImageData-like RGBA images by class name (names may be prototype names: own keys)
function byClass(names, per) {
  const img = (c, i) => {
    const data = new Uint8ClampedArray(28 * 28 * 4);
    for (let p = 0; p < 784; p++)
      (data.fill(((c * 7 + i * 3 + p) >> 3) % 2 ? 220 : 20, p * 4, p * 4 + 3), (data[p * 4 + 3] = 255));
    return { width: 28, height: 28, data };
  };
  return {
    byClass: withKeys(
      {},
      names.map((n, c) => [n, Array.from({ length: per }, (_, i) => img(c, i))]),
    ),
  };
}
function drawData(r) {
  const names = r.chance(0.3) ? [r.pick(PROTO), r.pick(['a', 'toString', 'valueOf'])] : ['horizontal', 'vertical'];
  if (names[0] === names[1]) names[1] = 'b';
  return r.chance(0.7) ? stripes(r.pick([8, 12, 24]), names) : byClass(names, r.pick([4, 6]));
}

// ---- values, from the declarations ----------------------------------------------------------------

// what a valid draw may not exceed (the case runs a step: keep it a tiny one)
// (patches of 1..3 px make a timm architecture's step of thousands of tokens: seconds each)
const CHEAP_MIN = { patchSize: 4 };
const CHEAP = { batch: 6, gradAccum: 3, imgSize: 56, patchSize: 14, inChans: 3, threads: 2, evalChunk: 64 };
// valid values of the text-like options the declaration cannot enumerate
const VALID_TEXT = {
  objective: () => objectiveNames(),
  model: () => [...Object.keys(TRAIN_PRESETS), 'vit_tiny_patch16_224'],
  policy: () => ['none', 'block', 'every:1', 'every:2', 'sqrt', 'selective', 'budget:100000000'],
  augment: () => ['none', 'hflip', 'hflip:0.5,rrc:0.3-1', 'flip,shift:2', 'rrc:0.5-1:0.75-1.33'],
  wasm: () => ['simd', 'scalar'],
  backend: () => ['wasm'], // webgpu / auto: another test's (tests/node/webgpu-train.test.mjs)
  seed: () => [0, 1, 123456789, MAX_SEED, '42', String(MAX_SEED), 7n],
};
// options whose valid values the test makes itself (data, weights, ...), or not at all (internal)
const MADE = new Set(['data', 'val', 'config', 'resume', 'signal', 'gpu', 'weights', 'frozen', 'spec', 'runInfo']);

/** A valid value of option `k` (decl), within CHEAP's bounds; null when the test draws none. */
function validValue(r, k, decl, objective) {
  if (decl.internal) return null;
  const t = decl.type;
  if (VALID_TEXT[k]) return r.pick(VALID_TEXT[k]());
  switch (t.kind) {
    case 'whole': {
      const lo = Math.max(t.min, CHEAP_MIN[k] ?? t.min),
        hi = Math.min(t.max, CHEAP[k] ?? t.max);
      return r.pick([lo, hi, r.int(lo, Math.min(hi, lo + 20))]);
    }
    case 'number': {
      const lo = t.above ? t.min + 1e-3 : t.min,
        hi = t.open ? t.max - 1e-3 : t.max;
      return r.pick([lo, hi, lo + (hi - lo) * r.next()]);
    }
    case 'word':
      return r.pick(t.words);
    case 'flag':
      return r.chance(0.5);
    case 'stats':
      return t.positive ? r.pick([[0.25], [1], [0.5, 0.25, 1]]) : r.pick([[0], [0.5], [-1, 0, 1]]);
    case 'val':
      return r.pick([0, 0.25, 0.5]);
    default:
      return null;
  }
}

/** A value option `k` refuses, by its declaration: [value, what it is] (or null). */
function invalidValue(r, k, decl) {
  const t = decl.type,
    wrongType = [true, {}, [], () => 1, 10n ** 30n, Symbol.iterator.description, ...PROTO];
  const pick = (xs) => r.pick(xs.filter((x) => t.check(x) != null));
  switch (t.kind) {
    case 'whole':
      return pick([
        t.min - 1,
        t.max + 1,
        t.min + 0.5,
        NaN,
        Infinity,
        -Infinity,
        String(t.min),
        `${t.max}`,
        ' 1',
        ...wrongType,
      ]);
    case 'number':
    case 'val':
      return pick([
        t.min - 1,
        (t.max ?? 1) + 1,
        t.open ? t.max : NaN,
        t.above ? t.min : -Infinity,
        NaN,
        Infinity,
        String(t.min ?? 0.5),
        '0.5',
        true,
        ...PROTO,
      ]);
    case 'seed':
      return pick([-1, 1.5, MAX_SEED + 1, 2 ** 53, '1e3', '-1', 'abc', NaN, Infinity, true, ...PROTO]);
    case 'stats':
      return pick([[], [NaN], [1, 2], [1, 2, 3, 4], ['0.5'], 0.5, '0.5', { 0: 1, length: 1 }, [0], [-1]]);
    case 'any':
      return pick([42, true, '', NaN, Symbol.iterator.description, [1], ...PROTO]);
    default:
      return pick([42, NaN, true, '', 'x'.repeat(300), '0', ...PROTO, {}, [], 'NONE', ' block']);
  }
}

/** The declarations a case of objective `obj` draws from: the common and every objective's own. */
function declarations() {
  const own = {};
  for (const n of objectiveNames())
    for (const [k, d] of Object.entries(objectiveNamed(n).options || {})) own[k] = [n, d];
  return { common: OPTIONS, own };
}

/**
 * A case: { options, bad: [keys the run must refuse] }. Draws the
 * objective, a base (model, data, steps, batch), then one to three changes.
 */
function drawCase(r) {
  const { common, own } = declarations();
  const objective = r.pick(objectiveNames());
  const obj = objectiveNamed(objective);
  const data = drawData(r);
  const o = {
    objective,
    config: CONFIG[objective] ?? ENC,
    data,
    steps: r.pick([2, 3, 50]),
    batch: r.int(1, 4),
    ...ENGINE,
  };
  if (objective === 'classify') o.val = r.pick([0, 0.25]);
  const bad = new Set(); // keys given a value the run must refuse: the case is refused, naming one
  const nChanges = r.int(1, 3);
  for (let c = 0; c < nChanges; c++) {
    const what = r.next();
    if (what < 0.08) {
      // an unknown key: a prototype name, a near miss of a known one, or a word
      const known = Object.keys(common);
      const k = r.pick([
        r.pick(PROTO),
        (() => {
          const n = r.pick(known);
          return n.slice(0, -1) || `${n}x`;
        })(),
        `${r.pick(known)}s`,
        'lrr',
        'epoch',
      ]);
      if (Object.hasOwn(common, k) || Object.hasOwn(own, k) || Object.values(CALLBACKS).includes(k)) continue;
      withKeys(o, [[k, r.pick([1, 'x', true, {}])]]);
      bad.add(k);
    } else if (what < 0.14) {
      // an option of another objective
      const theirs = Object.entries(own).filter(([k, [n]]) => n !== objective && !Object.hasOwn(obj.options || {}, k));
      if (!theirs.length) continue;
      const [k, [, d]] = r.pick(theirs);
      o[k] = validValue(r, k, d) ?? 0.5;
      bad.add(k);
    } else if (what < 0.2) {
      // prototype names as the values of the name-like options
      const k = r.pick([
        'model',
        'objective',
        'policy',
        'augment',
        'wasm',
        'backend',
        'pool',
        'config',
        'data',
        'weights',
      ]);
      if (k === 'pool' && objective !== 'classify') continue;
      o[k] = r.pick(PROTO);
      if (k === 'model') delete o.config;
      bad.add(k); // no prototype name resolves to anything
    } else if (what < 0.28) {
      // the data, the held-out data, the model as the test makes them, and wrong
      const k = r.pick(['data', 'val', 'config', 'weights', 'frozen', 'resume', 'signal', 'gpu']);
      // [value, the run must refuse it]
      const values = {
        data: [
          42,
          '',
          {},
          [],
          { pixels: 'x', n: 1, size: 28, chans: 1 },
          { byClass: {} },
          byClass(['a'], 0),
          'toString',
          () => 1,
          [1, 2],
        ].map((v) => [v, true]),
        val: [[drawData(r), false], ...[-0.5, 1, '0.2', true, {}, () => 0].map((v) => [v, true])],
        config: [
          ['{"embed_dim": 8}', false],
          ...['{', { ...ENC, embed_dim: 'x' }, { ...ENC, depth: -1 }, { encoder: 5 }, '[]'].map((v) => [v, true]),
        ],
        weights: [new Uint8Array(16), new Uint8Array(0), 42, 'no-such-weights.safetensors', { bytes: 3 }].map((v) => [
          v,
          true,
        ]),
        frozen: [
          [['cls_token'], false],
          ...[['no_such_parameter'], [42], 'cls_token', [...PROTO]].map((v) => [v, true]),
        ],
        resume: [new Uint8Array(64), new Uint8Array(0), 'ckpt', 42].map((v) => [v, true]),
        signal: [[new AbortController().signal, false], ...[{}, 'abort'].map((v) => [v, true])],
        gpu: [
          [{}, false],
          [{ powerPreference: 'low-power' }, false],
          [42, true],
        ],
      };
      const [v, refuse] = r.pick(values[k]);
      o[k] = v;
      if (k === 'resume') delete o.objective;
      if (refuse) bad.add(k);
      else bad.delete(k);
    } else {
      // a declared option: its valid values and edges (60%), or a value it refuses (40%)
      const entries = [...Object.entries(common), ...Object.entries(obj.options || {})].filter(
        ([k, d]) => !d.internal && !MADE.has(k) && k !== 'objective', // (the objective: drawn first)
      );
      const [k, d] = r.pick(entries);
      if (r.chance(0.6)) {
        const v = validValue(r, k, d, objective);
        if (v == null) continue;
        const before = o.model;
        o[k] = v;
        bad.delete(k);
        if (k === 'model') delete o.config;
        if (k === 'epochs') delete o.steps;
        if (k === 'warmupEpochs') delete o.warmup;
        if (k === 'mean' && o.std == null) o.std = [0.5];
        if (k === 'std' && o.mean == null) o.mean = [0.5];
        if (k === 'imgSize' || k === 'patchSize' || k === 'inChans')
          o.model ??= r.pick(['vit_tiny_patch16_224', 'fmnist']);
        if (o.model === 'vit_tiny_patch16_224' && before !== o.model) {
          // a timm architecture at a tiny size, under a tiny MAE decoder (lightly's 512-wide one
          // makes each checkpoint 400 MB: seconds a case) or AIM head (lightly's: out of memory, at once)
          if (objective === 'mae') o.config = HEADS.mae;
          else if (objective === 'aim' && r.chance(0.5)) o.config = HEADS.aim;
          else delete o.config;
          bad.delete('config');
          o.imgSize ??= 32;
        }
      } else {
        const v = invalidValue(r, k, d);
        if (v === undefined) continue;
        o[k] = v;
        bad.add(k);
      }
    }
  }
  // a resumed run's objective is the checkpoint's: an objective's own option is refused
  if (o.objective == null) for (const key of Object.keys(o)) if (Object.hasOwn(own, key)) bad.add(key);
  return { options: o, bad: [...bad].filter((k) => Object.hasOwn(o, k)) }; // (a later draw may drop one)
}

// ---- running a case --------------------------------------------------------------------------------

// a refusal's message: one line, the option named, nothing of the implementation
function checkMessage(e, keys, label) {
  assert.ok(e instanceof VitrineError, `${label}: not a VitrineError: ${e && e.stack}`);
  const m = e.message;
  assert.ok(typeof m === 'string' && m.length > 0, `${label}: no message`);
  assert.doesNotMatch(m, /\n/, `${label}: more than one line: ${m}`);
  assert.doesNotMatch(m, /\bundefined\b|\[object |\bat .+:\d+:\d+|TypeError|ReferenceError/, `${label}: ${m}`);
  assert.doesNotMatch(m, /(^|\s)--[a-z]/, `${label}: an API error names a CLI flag: ${m}`);
  if (keys.length && e.status !== -5 && e.status !== -2)
    assert.ok(
      keys.some((k) => m.includes(k)),
      `${label}: the message names none of the options given (${keys.join(', ')}): ${m}`,
    );
}

// one run, stopped after its first step (stopAt when the case gives none; else an abort at the first step)
async function runOnce(options, label) {
  const o = { ...options };
  if (o.stopAt == null && !o.resume) o.stopAt = 1;
  o.onStep = () => run.abort();
  const run = train(o);
  let timer;
  try {
    return await Promise.race([
      run.done,
      new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new assert.AssertionError({ message: `${label}: no end in ${CASE_SECONDS} s` })),
          CASE_SECONDS * 1000,
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
    run.dispose();
  }
}

async function runCase(k, label) {
  const r = rng(caseSeed(SEED, k));
  const { options, bad } = drawCase(r);
  const shown = `${label}: ${describe(options)}`;
  if (ONLY != null) console.log(shown);
  let result;
  try {
    result = await runOnce(options, shown);
  } catch (e) {
    if (e instanceof assert.AssertionError) throw e;
    // a value the declarations refuse is named -- or another option the case gave, refused by name
    // ("option: ..."; a valid value that another makes wrong, as minLr above lr); else any option given
    const other = Object.keys(options).some((k) => e.field === k || e.message.startsWith(`${k}:`));
    const named = bad.length && !other ? bad : Object.keys(options);
    checkMessage(e, named, shown);
    return 'refused';
  }
  assert.equal(bad.length, 0, `${shown}: trained with ${bad.join(', ')} refused`);
  assert.ok(['stopped', 'aborted', 'done'].includes(result.status), `${shown}: status ${result.status}`);
  assert.ok(result.step >= 1, `${shown}: no step taken`);
  assert.ok(result.checkpoint instanceof Uint8Array && result.checkpoint.length > 0, `${shown}: no checkpoint`);
  // its checkpoint resumes: accepted, and a step more
  const resumeWith = { resume: result.checkpoint, data: options.data, ...ENGINE };
  if (options.val != null && typeof options.val === 'object') resumeWith.val = options.val;
  // (a finished run's checkpoint resumes to its end at once: no step more)
  const finished = result.step >= result.steps;
  let again;
  try {
    again = await runOnce({ ...resumeWith, ...(finished ? {} : { stopAt: result.step + 1 }) }, `${shown} (resumed)`);
  } catch (e) {
    if (e instanceof assert.AssertionError) throw e;
    assert.fail(`${shown}: its checkpoint of step ${result.step} was refused on resume: ${e.message}`);
  }
  const want = finished ? result.step : result.step + 1;
  assert.equal(again.step, want, `${shown}: resumed at ${result.step}, ended at ${again.step}`);
  return finished ? 'trained (finished) and resumed' : 'trained and resumed';
}

const describe = (o) =>
  Object.entries(o)
    .map(([k, v]) => {
      if (k === 'data' || k === 'val')
        return v && v.pixels instanceof Uint8Array ? `${k}=pixels(${v.n})` : `${k}=${short(v)}`;
      return `${k}=${short(v)}`;
    })
    .join(' ');
function short(v) {
  if (typeof v === 'bigint') return `${v}n`;
  if (typeof v === 'function') return 'fn';
  if (ArrayBuffer.isView(v)) return `${v.constructor.name}(${v.length})`;
  if (v && v.byClass) return `byClass(${Object.keys(v.byClass).join(',')})`;
  try {
    const s = JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? `${x}n` : Number.isNaN(x) ? 'NaN' : x));
    return s === undefined ? String(v) : s.length > 80 ? `${s.slice(0, 77)}...` : s;
  } catch {
    return String(v);
  }
}

test(
  `train() fuzzed: ${SECONDS} s of drawn option objects (VITRINE_FUZZ_SEED=${SEED})`,
  { timeout: (SECONDS + 240) * 1000 },
  async (t) => {
    const t0 = performance.now();
    const tally = {},
      slowest = { ms: 0, k: -1 };
    let k = ONLY ?? 0;
    for (; ONLY != null ? k === ONLY : performance.now() - t0 < SECONDS * 1000; k++) {
      const label = `case ${k} (replay: VITRINE_FUZZ_SEED=${SEED} VITRINE_FUZZ_CASE=${k})`;
      const c0 = performance.now();
      const outcome = await runCase(k, label);
      tally[outcome] = (tally[outcome] || 0) + 1;
      const ms = performance.now() - c0;
      if (ms > slowest.ms) Object.assign(slowest, { ms, k });
    }
    t.diagnostic(
      `seed ${SEED}: ${k - (ONLY ?? 0)} cases in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${JSON.stringify(tally)}; slowest: case ${slowest.k}, ${(slowest.ms / 1000).toFixed(1)} s`,
    );
    // the draws must reach both ends: some cases train, some are refused
    if (ONLY == null)
      assert.ok(
        tally.refused > 0 && (tally['trained and resumed'] || tally['trained (finished) and resumed']),
        JSON.stringify(tally),
      );
  },
);
