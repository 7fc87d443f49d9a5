#!/usr/bin/env node
// cli.js: the Node command line over the wasm build, with the contract of the native
// tools/cli.c (same lines, the same JSON from the parity harness, same exit status):
//   vitrine parity FILE... [--grad-checkpointing POLICY] [--dump DIR] [--json] [--wasm BUILD] [--threads N]
//   vitrine plan --preset NAME --batch B [--tokens-kept K] [--grad-checkpointing POLICY] [--json] [--wasm BUILD] [--threads N]
//   vitrine train [options]   (the main job: MAE / AIM on Fashion-MNIST or a folder; see TRAIN_HELP)
// BUILD: relaxed | simd | scalar | wasi | wasi-simd | wasi-scalar (default: the best this host runs:
// relaxed SIMD, which Node 20 gets from the V8 flag set below, else SIMD128, else scalar).
// --threads N: kernel threads (default every core; the same bits at any count).
// Exit status: 0 all passed, 1 a check failed or a file could not be run, 2 usage error or (parity)
// a file that could not be read. parity --tap / --junit FILE / --tolerance: web/parity-report.js.
import { mkdirSync, readdirSync, unlinkSync, statSync, rmdirSync, existsSync } from 'node:fs';
import path, { basename } from 'node:path';
import { Worker } from 'node:worker_threads';
import { createRequire } from 'node:module';
import { createVitrine, readSafetensorsMeta, enableNodeRelaxedSimd } from './vitrine.js';
import { loadFashionMNIST, loadImageFolder, adapt, writeAtomic, readRegularFile, makeDirs, resumedData, DataError, DEFAULT_MAX_PIXELS } from './data.js';
import { cmdTrainClassify, cmdPredict, PREDICT_USAGE } from './classify-cli.js';
import { checkTolerance, applyTolerance, passRule, textLine, tapReport, junitReport, unreadable } from './parity-report.js';
import { TRAIN_PRESETS, modelSpec, encoderPrefix, TrainingRun, withMetadata, knnReadouts, READOUTS,
  showMasks, visualizeGrid, makeBatch } from './train.js';

const USAGE_PARITY = 'usage: vitrine parity FILE... [--grad-checkpointing POLICY] [--dump DIR] [--json | --tap] [--junit FILE] [--tolerance T] [--wasm relaxed|simd|scalar|wasi] [--threads N]';
const USAGE_PLAN = 'vitrine plan --preset NAME --batch B [--tokens-kept K] [--grad-checkpointing POLICY] [--json] [--wasm relaxed|simd|scalar|wasi] [--threads N]';

// strerror() wording for the usual reasons a file cannot be opened.
const STRERROR = { ENOENT: 'No such file or directory', EACCES: 'Permission denied', EISDIR: 'Is a directory',
  ENOTDIR: 'Not a directory', ENOSPC: 'No space left on device', EFBIG: 'File too large', EDQUOT: 'Disk quota exceeded',
  EROFS: 'Read-only file system', EEXIST: 'File exists' };
const why = (e) => (e instanceof DataError ? e.message : STRERROR[e.code] || e.message);
// Input files are read only when regular (a FIFO or /dev/zero would hang a plain read), and only up
// to what their format allows.
const MAX_INPUT_BYTES = 1 << 30;
const readInput = (file) => readRegularFile(file, MAX_INPUT_BYTES);

export { makeDirs }; // mkdir -p, checked (web/data.js)
const removeEmptyDirs = (made) => { for (const d of [...made].reverse()) try { rmdirSync(d); } catch { return; } };

// Strict numbers for options: decimal only ('' is not 0, '0x10' is not 16, '1e9' is not a count).
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
function wholeNumber(flag, v, min, max) {
  if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) throw new Error(`${flag}: '${v}' is not a whole number in ${min}..${max}`);
  return Number(v);
}

// node:wasi prints an ExperimentalWarning on first use; drop only that one.
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) => {
  const type = typeof rest[0] === 'string' ? rest[0] : rest[0] && rest[0].type;
  if (type === 'ExperimentalWarning' && String(warning).includes('WASI')) return;
  return emitWarning.call(process, warning, ...rest);
};
// Node 20's V8 has relaxed SIMD behind --experimental-wasm-relaxed-simd: set it before anything
// compiles wasm, so that the default (and --wasm relaxed) can use f32x4.relaxed_madd.
await enableNodeRelaxedSimd();
// threads: a string from --threads (undefined = every core); createVitrine runs at most 64
const MAX_THREADS = 64;
async function loadEngine(wasm, threads) {
  return createVitrine({ wasm, threads: threads == null ? undefined : wholeNumber('--threads', String(threads), 1, MAX_THREADS) });
}

async function cmdParity(args) {
  let policy = null, dump = null, json = false, tap = false, junit = null, tolerance, wasm, threads;
  const files = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--grad-checkpointing' && i + 1 < args.length) policy = args[++i];
    else if (a === '--dump' && i + 1 < args.length) dump = args[++i];
    else if (a === '--wasm' && i + 1 < args.length) wasm = args[++i];
    else if (a === '--threads' && i + 1 < args.length) threads = args[++i];
    else if (a === '--junit') { // a report file, never the next option taken for one
      if (i + 1 >= args.length || args[i + 1].startsWith('--')) { process.stderr.write('vitrine parity: --junit needs a file name\n'); return 2; }
      junit = args[++i];
    }
    else if (a === '--tolerance' && i + 1 < args.length) tolerance = args[++i];
    else if (a === '--json') json = true;
    else if (a === '--tap') tap = true;
    else if (a.startsWith('--')) { process.stderr.write(`vitrine parity: unknown option ${a}\n`); return 2; }
    else files.push(a);
  }
  if (!files.length) { process.stderr.write(USAGE_PARITY + '\n'); return 2; }
  if (json && tap) { process.stderr.write('vitrine parity: --json and --tap are two forms of stdout: choose one\n'); return 2; }
  let tol;
  try { tol = checkTolerance(tolerance); } catch (e) { process.stderr.write(`vitrine parity: --${e.message}\n`); return 2; }
  let vt;
  try { vt = await loadEngine(wasm, threads); } catch (e) { process.stderr.write(`vitrine parity: ${e.message}\n`); return 2; }
  if (dump) try { makeDirs(dump); } catch (e) { process.stderr.write(`vitrine parity: --dump ${e.message}\n`); return 2; }
  let failed = 0, unread = 0;
  const items = [];
  if (json) process.stdout.write('[');
  else if (!tap) process.stdout.write(passRule(tol) + '\n');
  files.forEach((file, i) => {
    let bytes = null, readError = null;
    try { bytes = readInput(file); } catch (e) { readError = `cannot open ${file}: ${why(e)}`; }
    const t0 = performance.now();
    let r = vt.parity(bytes, { policy, dump: !!dump, file, readError });
    if (tolerance != null) r = applyTolerance(r, tol);
    items.push({ file, result: r, seconds: (performance.now() - t0) / 1000 });
    if (!r.pass) failed++;
    if (unreadable(r)) unread++;
    if (dump && r.dump) { // pass or fail: what was computed
      try { writeAtomic(path.join(dump, basename(file)), r.dump); } catch (e) { process.stderr.write(`vitrine parity: cannot write ${path.join(dump, basename(file))}: ${why(e)}\n`); failed++; }
    }
    if (json) { // the harness's JSON; with --tolerance, its pass under the tighter rule and the tolerance
      const text = tolerance == null ? r.json : r.json.replace(/"pass": (true|false)/, `"pass": ${r.pass}, "tolerance": ${tol}`);
      process.stdout.write(`${i ? ',' : ''}\n ${text}`);
    } else if (!tap) process.stdout.write(textLine(file, r) + '\n');
  });
  if (json) process.stdout.write('\n]\n');
  else if (tap) process.stdout.write(tapReport(items, tol));
  else process.stdout.write(`${files.length - failed} passed, ${failed} failed\n`);
  if (junit) {
    try {
      makeDirs(path.dirname(path.resolve(junit)));
      writeAtomic(junit, new TextEncoder().encode(junitReport(items, { tolerance: tol, policy, build: vt.build })));
    } catch (e) {
      process.stderr.write(`vitrine parity: cannot write --junit ${junit}: ${why(e)}\n`);
      return 2;
    }
  }
  return unread ? 2 : failed ? 1 : 0;
}

async function cmdPlan(args) {
  let preset = 'vit_tiny_patch16_224', policy = 'none', batch = 1, kept = 0, json = false, wasm;
  let threads;
  const int = (flag, s, min) => { try { return wholeNumber(flag, s, min, 2147483647); } catch (e) { bad = e.message; return 0; } };
  let bad = null;
  for (let i = 0; i < args.length && !bad; i++) {
    const a = args[i], more = i + 1 < args.length;
    if (a === '--preset' && more) preset = args[++i];
    else if (a === '--batch' && more) batch = int(a, args[++i], 1);
    else if (a === '--tokens-kept' && more) kept = int(a, args[++i], 0);
    else if (a === '--grad-checkpointing' && more) policy = args[++i];
    else if (a === '--wasm' && more) wasm = args[++i];
    else if (a === '--threads' && more) threads = args[++i];
    else if (a === '--json') json = true;
    else { process.stderr.write(`vitrine plan: unknown option ${a}\n`); return 2; }
  }
  if (bad) { process.stderr.write(`vitrine plan: ${bad}\n`); return 2; }
  let vt;
  // the per-thread scratch (attention) is part of the plan: plan for the threads the engine runs
  try { vt = await loadEngine(wasm, threads); } catch (e) { process.stderr.write(`vitrine plan: ${e.message}\n`); return 2; }
  const nt = vt.threads;
  let p, model;
  try {
    model = vt.createModel({ preset, kind: 'lightly' });
    model.setGradCheckpointing(policy);
    p = model.plan('encode', { batch, tokensKept: kept > 0 ? kept : 0, needGrad: true });
  } catch (e) {
    process.stderr.write(`vitrine plan: ${e.message}\n`);
    return 1;
  } finally { if (model) model.dispose(); }
  if (json) {
    process.stdout.write(`{"preset": "${preset}", "batch": ${batch}, "tokens_kept": ${kept}, "policy": "${policy}", "threads": ${nt}, "params": ${p.params}, ` +
      `"grads": ${p.grads}, "optimizer": ${p.optimizer}, "activations": ${p.activations}, "total": ${p.total}}\n`);
  } else {
    const f = (n) => String(n).padStart(12);
    process.stdout.write(`${preset} batch ${batch}${kept ? ' (tokens kept)' : ''}, grad checkpointing ${policy}, ${nt} thread${nt === 1 ? '' : 's'}\n` +
      `  params      ${f(p.params)} bytes\n  grads       ${f(p.grads)} bytes\n  optimizer   ${f(p.optimizer)} bytes\n` +
      `  activations ${f(p.activations)} bytes\n  total       ${f(p.total)} bytes (${(p.total / 1048576).toFixed(1)} MiB)\n`);
  }
  return 0;
}

// ---- train ------------------------------------------------------------------------------------

const TRAIN_DEFAULTS = { objective: 'mae', preset: 'fmnist-p7-mlp2', batch: 64, steps: 5000, policy: 'block', out: 'out',
  seed: 0, maskRatio: 0.5, saveEvery: 200, evalBank: 10000, evalQueries: 2000, k: 20, t: 0.1, show: 8 };
// peak learning rate: lightly's MAE 1.5e-4 * batch / 256 and AIM 1e-3 * batch / 4096 are for
// hundreds of epochs; a short run needs more (measured on Fashion-MNIST, see README)
const defaultLr = (objective, batch) => (objective === 'mae' ? 2e-3 : 1e-3) * batch / 64;

const TRAIN_HELP = `usage: vitrine train [options]
  Trains an MAE (or AIM) ViT through the WebAssembly engine, then reports kNN top-1 accuracy of
  its encoder (and of the untrained encoder and raw pixels), saves weights, checkpoint and a
  picture of reconstructions.
  --objective mae|aim          self-supervised objective (default mae)
  --preset NAME                ${Object.keys(TRAIN_PRESETS).join(', ')} (default ${TRAIN_DEFAULTS.preset}) or a timm preset (vit_tiny_patch16_224, ...)
  --config JSON|FILE           model config instead of a preset: {"encoder": {timm kwargs}, "decoder_dim": ...}
  --data DIR                   a folder of PNG / JPEG images (sub-folders = classes) instead of Fashion-MNIST
                               (with --resume: the folder, named again; nothing is read from a path in the checkpoint)
  --max-image-mp N             refuse images over N megapixels, from their header, before decoding (default ${DEFAULT_MAX_PIXELS / 1e6})
  --batch B                    images per step (default ${TRAIN_DEFAULTS.batch})
  --steps N                    training steps, the length of the cosine schedule (default ${TRAIN_DEFAULTS.steps})
  --lr LR                      peak learning rate (default mae 2e-3, aim 1e-3, times batch / 64)
  --warmup N                   warm-up steps (default 5% of --steps)
  --mask-ratio R               MAE: the share of patches masked, 0 <= R < 1 (default ${TRAIN_DEFAULTS.maskRatio})
  --grad-checkpointing POLICY  none | block | every:K | sqrt | selective | budget:BYTES (default block)
  --seed S                     initialisation S, masks S+1, data order S+2 (default 0)
  --out DIR                    where encoder.safetensors, checkpoint.safetensors, reconstructions.png go (default out)
  --save-every N               write the checkpoint every N steps (default ${TRAIN_DEFAULTS.saveEvery}; and at the end)
  --stop-at STEP               stop after STEP steps (checkpoint written, no evaluation): resume later
  --resume FILE                continue a checkpoint bit for bit (model, schedule, batch, data, seed come from it)
  --init FILE                  start from the weights in FILE: a timm VisionTransformer state_dict (head or not),
                               lightly (vit. / backbone.vit. keys) or vitrine (encoder, model, checkpoint) safetensors;
                               the layout is recognised; what cannot be used is named and skipped
  --init-strict                with --init: any skipped tensor is an error
  --eval-bank N, --eval-queries N   kNN bank (train images) and queries (test images), default 10000 / 2000
  --no-eval                    skip the kNN evaluation
  --json                       end the output with one JSON line
  --wasm BUILD                 relaxed | simd | scalar | wasi | wasi-simd | wasi-scalar (default: relaxed
                               where it validates, else simd; a resumed run keeps its checkpoint's build)
  --threads N                  kernel threads (default every core; the same bits at any count)`;

const STATE_FILE = 'checkpoint.safetensors', WEIGHTS_FILE = 'encoder.safetensors', IMAGE_FILE = 'reconstructions.png';

// temporary files left by killed runs (their process is gone)
function removeStaleTemps(dir) {
  let names = [];
  try { names = readdirSync(dir); } catch { return; }
  for (const n of names) {
    const m = /^\..*\.tmp-(\d+)$/.exec(n);
    if (!m || Number(m[1]) === process.pid) continue;
    let alive = true;
    try { process.kill(Number(m[1]), 0); } catch (e) { alive = e.code === 'EPERM'; }
    if (!alive) try { unlinkSync(path.join(dir, n)); } catch { /* gone */ }
  }
}

function encodePng({ width, height, data }) {
  const { PNG } = createRequire(import.meta.url)('pngjs');
  const png = new PNG({ width, height });
  png.data.set(data);
  return PNG.sync.write(png);
}

const fmtTime = (s) => `${Math.floor(s / 60)}:${String(Math.floor(s % 60)).padStart(2, '0')}`;
const mib = (b) => (b / 1048576).toFixed(1);

class Progress {
  constructor(total, stream = process.stderr) {
    this.total = total; this.stream = stream; this.tty = !!stream.isTTY; this.last = 0; this.lastLine = -1;
  }
  update(step, text, force = false) {
    const now = performance.now();
    if (this.tty) {
      if (!force && now - this.last < 100) return;
      this.last = now;
      const cols = this.stream.columns || 100, w = 20, f = Math.round((w * step) / this.total);
      const line = `${String(step).padStart(String(this.total).length)}/${this.total} [${'='.repeat(f)}${f < w ? '>' : ''}${' '.repeat(Math.max(0, w - f - 1))}] ${text}`;
      this.stream.write('\r' + line.slice(0, cols - 1).padEnd(cols - 1));
    } else { // a log: about ten lines per run
      const every = Math.max(1, Math.round(this.total / 10));
      if (force || step % every === 0) { if (step !== this.lastLine) this.stream.write(`step ${step}/${this.total} ${text}\n`); this.lastLine = step; }
    }
  }
  done() { if (this.tty) this.stream.write('\n'); }
}

function parseTrainArgs(args) {
  const o = { given: new Set() };
  const need = (i, a) => { if (i + 1 >= args.length) throw new Error(`${a} needs a value`); return args[i + 1]; };
  // whole numbers: decimal digits within what the engine counts (wasm's 32-bit int / long)
  const MAXI = { batch: 65536, steps: 2000000000, warmup: 2000000000, saveEvery: 2000000000, stopAt: 2000000000,
    evalBank: 10000000, evalQueries: 10000000, threads: MAX_THREADS };
  const MINI = { batch: 1, steps: 1, saveEvery: 1, evalBank: 1, evalQueries: 1, threads: 1 };
  const num = (a, k, v) => {
    if (k === 'maskRatio') { // its range is checked below
      if (!DECIMAL.test(v)) throw new Error(`${a}: '${v}' is not a decimal number`);
      return Number(v);
    }
    if (k !== 'lr' && k !== 'maxImageMp') return wholeNumber(a, v, MINI[k] ?? 0, MAXI[k]);
    const x = Number(v);
    if (!DECIMAL.test(v) || !(x >= 0 && x <= 1000)) throw new Error(`${a}: '${v}' is not a decimal number in 0..1000`);
    if (k === 'maxImageMp' && x === 0) throw new Error(`${a}: '${v}' megapixels admits no image`);
    return x;
  };
  const flags = { '--objective': 'objective', '--preset': 'preset', '--config': 'config', '--data': 'data',
    '--batch': 'batch', '--steps': 'steps', '--lr': 'lr', '--warmup': 'warmup', '--mask-ratio': 'maskRatio', '--grad-checkpointing': 'policy',
    '--seed': 'seed', '--out': 'out', '--save-every': 'saveEvery', '--stop-at': 'stopAt', '--resume': 'resume',
    '--eval-bank': 'evalBank', '--eval-queries': 'evalQueries', '--wasm': 'wasm', '--max-image-mp': 'maxImageMp', '--init': 'init',
    '--threads': 'threads' };
  const nums = new Set(['batch', 'steps', 'warmup', 'saveEvery', 'stopAt', 'evalBank', 'evalQueries', 'lr', 'maxImageMp', 'maskRatio', 'threads']);
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--json') o.json = true;
    else if (a === '--no-eval') o.noEval = true;
    else if (a === '--init-strict') o.initStrict = true;
    else if (a === '--help' || a === '-h') o.help = true;
    else if (flags[a]) {
      const k = flags[a], v = need(i, a); i++;
      o[k] = nums.has(k) ? num(a, k, v) : v;
      o.given.add(k);
    } else throw new Error(`unknown option ${a}`);
  }
  if (o.seed != null) wholeNumber('--seed', o.seed, 0, 2 ** 53 - 3); // seed + 2 stays exact in JSON
  if (o.objective != null && !['mae', 'aim'].includes(o.objective)) throw new Error(`--objective: '${o.objective}' (use mae or aim)`);
  if (o.out === '') throw new Error('--out: an empty folder name');
  if (o.maskRatio != null && !(o.maskRatio >= 0 && o.maskRatio < 1)) throw new Error(`--mask-ratio: ${o.maskRatio} is not in [0, 1)`);
  return o;
}

function loadData(dataDir, dims, warn, maxPixels) {
  if (!dataDir) {
    const train = adapt(loadFashionMNIST('train'), dims.img, dims.chans);
    const test = adapt(loadFashionMNIST('test'), dims.img, dims.chans);
    return { train, test, source: 'fashion-mnist' };
  }
  const ds = loadImageFolder(dataDir, { size: dims.img, chans: dims.chans, onWarning: warn, maxPixels });
  return { train: ds, test: null, source: path.resolve(dataDir) };
}

// kNN bank / queries: Fashion-MNIST: the first N train images / first M test images; a labelled
// folder: every 5th image is a query, the others the bank (then both capped).
function evalSets(data, nBank, nQuery) {
  const sub = (ds, idx) => ({ n: idx.length, chans: ds.chans, size: ds.size, labels: Int32Array.from(idx, (i) => ds.labels[i]),
    pixels: makeBatchBytes(ds, idx), classes: ds.classes });
  const range = (n) => Array.from({ length: n }, (_, i) => i);
  if (data.test) return { bank: sub(data.train, range(Math.min(nBank, data.train.n))), query: sub(data.test, range(Math.min(nQuery, data.test.n))) };
  if (!data.train.labels || data.train.n < 5) return null;
  const all = range(data.train.n);
  return { bank: sub(data.train, all.filter((i) => i % 5 !== 4).slice(0, nBank)), query: sub(data.train, all.filter((i) => i % 5 === 4).slice(0, nQuery)) };
}
function makeBatchBytes(ds, idx) {
  const per = ds.chans * ds.size * ds.size, out = new Uint8Array(idx.length * per);
  idx.forEach((i, j) => out.set(ds.pixels.subarray(i * per, (i + 1) * per), j * per));
  return out;
}

// ---- train, step by step: settings, model, data, side evaluation, the loop, what it leaves ------

// A failure of `vitrine train`: the message goes to stderr, `status` is the exit status.
class TrainFailure extends Error {
  constructor(message, status = 1) { super(message); this.status = status; }
}

// The run's settings: from the options, or from the checkpoint being resumed (then its bytes too).
function trainSettings(o) {
  if (o.resume) {
    if (o.init) throw new TrainFailure('--init starts a new run; --resume continues one (its weights come from the checkpoint)', 2);
    const fixed = ['objective', 'preset', 'config', 'batch', 'steps', 'lr', 'warmup', 'maskRatio', 'seed'].filter((k) => o.given.has(k));
    if (fixed.length) throw new TrainFailure(`--resume takes ${fixed.map((k) => '--' + k).join(', ')} from the checkpoint; leave ${fixed.length > 1 ? 'them' : 'it'} out`, 2);
    let resumeBytes, meta;
    try { resumeBytes = new Uint8Array(readInput(o.resume)); } catch (e) { throw new TrainFailure(`cannot read ${o.resume}: ${why(e)}`); }
    try { meta = readSafetensorsMeta(resumeBytes); } catch (e) { throw new TrainFailure(`${o.resume}: not a safetensors file (${e.message})`); }
    if (meta.format !== 'vitrine-train/1' || !meta.vitrine_run) throw new TrainFailure(`${o.resume}: not a checkpoint of vitrine train`);
    const run = checkedRun(o.resume, meta);
    try { run.data = resumedData(o.resume, run.data, o.data); } catch (e) { throw new TrainFailure(e.message, 2); }
    run.policy = o.policy || meta.grad_checkpointing || TRAIN_DEFAULTS.policy;
    return { run, resumeBytes };
  }
  const objective = o.objective || TRAIN_DEFAULTS.objective, batch = o.batch ?? TRAIN_DEFAULTS.batch, steps = o.steps ?? TRAIN_DEFAULTS.steps;
  let config = null;
  if (o.config != null) {
    try { config = JSON.parse(o.config.trim().startsWith('{') ? o.config : readRegularFile(o.config, 1 << 20).toString('utf8')); } catch (e) {
      throw new TrainFailure(`--config: ${e.code || e instanceof DataError ? `cannot read ${o.config}: ${why(e)}` : `not JSON (${e.message})`}`, 2);
    }
  }
  const run = {
    objective, preset: config ? null : (o.preset || TRAIN_DEFAULTS.preset), batch, steps,
    lr: o.lr ?? defaultLr(objective, batch), warmup: o.warmup ?? Math.round(steps * 0.05), maskRatio: o.maskRatio ?? TRAIN_DEFAULTS.maskRatio,
    seed: o.seed || String(TRAIN_DEFAULTS.seed), data: o.data ? path.resolve(o.data) : 'fashion-mnist',
    spec: modelSpec(objective, { preset: o.preset || TRAIN_DEFAULTS.preset, config }),
    policy: o.policy || TRAIN_DEFAULTS.policy,
    init: o.init ? path.resolve(o.init) : null,
  };
  if (o.initStrict && !o.init) throw new TrainFailure('--init-strict needs --init FILE', 2);
  return { run, resumeBytes: null };
}

// The run settings a checkpoint records (its metadata vitrine_run, kind, model_config), each checked:
// a damaged or crafted checkpoint is one clear message, never a stack trace or a strange run.
function checkedRun(file, meta) {
  const bad = (what) => new TrainFailure(`${file}: damaged checkpoint metadata (${what})`);
  let run, config;
  try { run = JSON.parse(meta.vitrine_run); } catch (e) { throw bad(`vitrine_run is not JSON: ${e.message}`); }
  try { config = JSON.parse(meta.model_config); } catch (e) { throw bad(`model_config is not JSON: ${e.message}`); }
  const isInt = (v, min, max) => Number.isInteger(v) && v >= min && v <= max;
  if (!run || typeof run !== 'object' || Array.isArray(run)) throw bad('vitrine_run is not an object');
  if (!['mae', 'aim'].includes(run.objective) || meta.kind !== run.objective) throw bad(`objective ${JSON.stringify(run.objective)}, kind ${JSON.stringify(meta.kind)}`);
  for (const [k, min, max] of [['batch', 1, 65536], ['steps', 1, 2000000000], ['warmup', 0, 2000000000]])
    if (!isInt(run[k], min, max)) throw bad(`${k} ${JSON.stringify(run[k])}`);
  if (!(typeof run.lr === 'number' && run.lr >= 0 && run.lr <= 1000)) throw bad(`lr ${JSON.stringify(run.lr)}`);
  if (typeof run.seed !== 'string' || !/^\d{1,16}$/.test(run.seed) || Number(run.seed) > 2 ** 53 - 3) throw bad(`seed ${JSON.stringify(run.seed)}`);
  if (typeof run.data !== 'string' || !run.data) throw bad(`data ${JSON.stringify(run.data)}`);
  if (run.dataN != null && !isInt(run.dataN, 1, 2 ** 31)) throw bad(`dataN ${JSON.stringify(run.dataN)}`);
  if (run.preset != null && typeof run.preset !== 'string') throw bad(`preset ${JSON.stringify(run.preset)}`);
  if (run.lossFirst != null && typeof run.lossFirst !== 'number') throw bad(`lossFirst ${JSON.stringify(run.lossFirst)}`);
  if (!config || typeof config !== 'object') throw bad('model_config is not an object');
  run.spec = { kind: meta.kind, config };
  return run;
}

const POS_EMBED_SAYS = {
  none: 'pos_embed: not loaded',
  sincos_frozen: "pos_embed: lightly's sin-cos table, frozen (as lightly's MAE / AIM keep it)",
  trainable: 'pos_embed: loaded, trainable',
  learned_now_trainable: "pos_embed: a learned one (not the sin-cos table): trainable (lightly's objective would freeze a sin-cos table)",
};

// --init FILE: the weights it holds, over the seeded initialisation (before the trainer is set up)
function initFromFile(model, file, strict, say) {
  let bytes;
  try { bytes = new Uint8Array(readInput(file)); } catch (e) { throw new TrainFailure(`--init: cannot read ${file}: ${why(e)}`); }
  let r;
  try { r = model.initFrom(bytes, { strict }); } catch (e) { throw new TrainFailure(`--init ${file}: ${e.message}`); }
  say(`vitrine train: --init ${file}: ${r.source}: ${r.loaded} tensors loaded (trainable unless noted), ${r.skipped} skipped, ` +
    `${r.missing} encoder parameters not in the file (kept as initialised)`);
  for (const n of r.notes) say(`  ${n}`);
  say(`  ${POS_EMBED_SAYS[r.posEmbed] || r.posEmbed}`);
  return bytes;
}

// The engine and the model: initialised (seed) or started from --init's weights, trainer ready
// (masks: seed + 1), the checkpoint loaded over both when resuming.
async function openModel(o, run, resumeBytes, seed, say = () => {}, warn = () => {}) {
  let vt, model, initBytes = null;
  // a resumed run continues bit for bit only in the build that trained it (fused and unfused
  // multiply-adds round differently): keep the checkpoint's build unless told otherwise
  if (run.wasm && o.wasm && o.wasm !== run.wasm) warn(`the run was trained with the ${run.wasm} build; continuing with ${o.wasm} changes the bits`);
  try { vt = await loadEngine(o.wasm || run.wasm, o.threads); } catch (e) { throw new TrainFailure(e.message, 2); }
  if (!run.wasm) run.wasm = vt.build;
  try {
    model = vt.createModel(run.spec);
    model.setGradCheckpointing(run.policy);
    model.initWeights(seed);
    if (run.init && !resumeBytes) initBytes = initFromFile(model, run.init, !!o.initStrict, say);
    model.trainerInit({ lr: run.lr, warmupSteps: run.warmup, totalSteps: run.steps, maskRatio: run.maskRatio ?? 0.75, seed: seed + 1n });
    if (resumeBytes) model.loadTrainState(resumeBytes);
  } catch (e) {
    if (e instanceof TrainFailure) throw e;
    throw new TrainFailure(`${resumeBytes ? o.resume + ': ' : ''}${e.message}`);
  }
  return { vt, model, initBytes };
}

// The images at the model's size; a resumed run must find as many as it trained on.
function trainData(o, run, model, warn) {
  let data;
  try { data = loadData(run.data === 'fashion-mnist' ? null : run.data, model.dims, warn, (o.maxImageMp ?? DEFAULT_MAX_PIXELS / 1e6) * 1e6); } catch (e) { throw new TrainFailure(e.message); }
  if (run.dataN != null && run.dataN !== data.train.n)
    throw new TrainFailure(`${o.resume}: the run trained on ${run.dataN} images of ${run.data}, it now holds ${data.train.n}: the data order would differ`);
  run.dataN = data.train.n;
  return data;
}

// The kNN bank and queries, and a worker that evaluates the untrained encoder and raw pixels on
// them on the other core while this one trains. null when the data have no classes.
function startSideEvaluation(o, vt, run, data, seed, warn, initBytes = null) {
  const sets = evalSets(data, o.evalBank ?? TRAIN_DEFAULTS.evalBank, o.evalQueries ?? TRAIN_DEFAULTS.evalQueries);
  if (!sets) { warn(`${run.data}: no classes (sub-folders) or fewer than 5 images, so no kNN evaluation`); return null; }
  const knnOpts = { k: TRAIN_DEFAULTS.k, t: TRAIN_DEFAULTS.t, classes: Math.max(sets.bank.classes ? sets.bank.classes.length : 0, 1 + Math.max(...sets.bank.labels)) };
  const spec = run.spec.config ? { kind: run.spec.kind, config: run.spec.config } : run.spec;
  const worker = new Worker(new URL('./eval-worker.js', import.meta.url), {
    workerData: { wasm: vt.build, spec, initSeed: seed, initBytes, bank: sets.bank, query: sets.query, ...knnOpts },
  });
  const initial = new Promise((resolve) => {
    worker.once('message', (m) => { resolve(m); worker.terminate(); });
    worker.once('error', (e) => resolve({ error: e.message }));
  });
  return { sets, knnOpts, worker, initial };
}

// Training steps up to stopAt, with a progress line, the checkpoint written every saveEvery steps;
// Ctrl-C / SIGTERM stop it after the step under way. Returns how far it got and why it stopped.
async function trainLoop({ vt, model, run, data, seed, stopAt, saveEvery, save, statePath, say, warn }) {
  const tr = new TrainingRun({ model, dataset: data.train, batch: run.batch, steps: run.steps, dataSeed: seed + 2n });
  let interrupted = null;
  const onSig = (sig) => { interrupted = sig; };
  process.on('SIGINT', onSig);
  process.on('SIGTERM', onSig);
  const startStep = tr.step;
  say(`vitrine train: ${run.spec.kind.toUpperCase()} ${run.preset || 'config'} ${model.dims.img}x${model.dims.img}x${model.dims.chans} patch ${model.dims.patch} dim ${model.dims.dim} depth ${model.dims.depth}, ` +
    `${data.train.n} images (${run.data}), batch ${run.batch}, steps ${startStep ? startStep + '..' : ''}${stopAt}/${run.steps}, lr ${run.lr}${run.spec.kind === 'mae' && run.maskRatio != null ? `, mask ratio ${run.maskRatio}` : ''}, grad checkpointing ${model.gradCheckpointing}, wasm ${vt.build}, ${vt.threads} thread${vt.threads === 1 ? '' : 's'}${vt.threadsNote ? ` (${vt.threadsNote})` : ''}`);
  const bar = new Progress(run.steps);
  let error = null, rate = 0, mem = '', lastLoss = run.lossFirst;
  const tTrain = performance.now();
  while (tr.step < stopAt && !interrupted) {
    let r;
    try { r = tr.trainOne(); } catch (e) { error = e; break; }
    if (run.lossFirst == null) run.lossFirst = r.loss;
    lastLoss = r.loss;
    rate = rate ? 0.9 * rate + 0.1 * (run.batch / r.seconds) : run.batch / r.seconds;
    if (r.step % 20 === 1 || !mem) {
      const m = model.memory();
      const planned = m.planned ? m.planned.total : 0;
      mem = `mem ${mib(planned)} MiB planned (act ${mib(m.used.activations)}), wasm ${mib(m.linear)} MiB`;
    }
    const eta = (stopAt - r.step) * run.batch / rate;
    bar.update(r.step, `loss ${r.loss.toFixed(4)} | ${rate.toFixed(0)} img/s | ${mem} | epoch ${tr.epoch.toFixed(2)} | eta ${fmtTime(eta)}`, r.step === stopAt);
    if (r.step % saveEvery === 0 && r.step < stopAt) {
      try { save(r.step); } catch (e) { warn(e.message); }
    }
    if (r.step % 10 === 0) await new Promise(setImmediate); // let signals in
  }
  bar.done();
  process.off('SIGINT', onSig);
  process.off('SIGTERM', onSig);
  return { tr, startStep, error, interrupted, lastLoss, trainSeconds: (performance.now() - tTrain) / 1000 };
}

// The kNN top-1 accuracy of the trained encoder (here) beside the untrained one and raw pixels
// (from the side evaluation).
async function knnResults(model, side, say, warn) {
  const { sets, knnOpts } = side;
  const te = performance.now();
  const knn = { trained: null, initial: null, pixels: null };
  knn.trained = knnReadouts(model, sets.bank, sets.query, knnOpts); // { mean, cls }
  const s = await side.initial;
  if (s.error) warn(`evaluation of the initial encoder failed: ${s.error}`);
  else { knn.initial = s.initial; knn.pixels = s.pixels; }
  say(`vitrine train: kNN evaluation ${((performance.now() - te) / 1000).toFixed(1)} s`);
  return knn;
}

// What the run leaves besides its checkpoint: the encoder's weights (timm keys) and a picture of
// reconstructions of the first images.
// A write that fails stops the run (TrainFailure); reconstructions that cannot be computed (the
// parameters of a run stopped by a NaN) are only warned about.
function writeResults(model, run, data, paths, out, warn) {
  out.write(paths.weights, model.saveSafetensors({ modelPrefix: encoderPrefix(run.spec.kind) }));
  const showDs = data.test || data.train, nShow = Math.min(TRAIN_DEFAULTS.show, showDs.n);
  const showImgs = makeBatch(showDs, Int32Array.from({ length: nShow }, (_, i) => i));
  let png;
  try {
    model.loss(showImgs, showMasks(model, nShow, run.maskRatio ?? 0.75));
    png = encodePng(visualizeGrid(model, showImgs, model.visualize()));
  } catch (e) { warn(`no reconstructions: ${e.message}`); return; }
  out.write(paths.image, png);
}

// The report on stdout (and, with --json, one JSON line after it).
function report(o, { vt, run, model, side, knn, paths, finished, step, lastLoss, seconds, trained, trainSeconds }) {
  const pct = (v) => (v == null ? 'n/a' : (100 * v).toFixed(2) + '%');
  // the headline readout: the first of READOUTS this model has (the others beside it)
  const readout = knn.trained ? READOUTS.find((r) => knn.trained[r] != null) : null;
  const pick = (x, r) => (x && x[r] != null ? x[r] : null);
  const NAMES = { mean: 'mean of patch tokens', cls: '[CLS]' };
  const others = (x) => READOUTS.filter((r) => r !== readout && pick(knn.trained, r) != null).map((r) => ` (${NAMES[r]} ${pct(pick(x, r))})`).join('');
  process.stdout.write(
    `${finished ? 'trained' : 'stopped at'} step ${step}/${run.steps} (${run.spec.kind.toUpperCase()}, ${run.preset || 'config'}, batch ${run.batch}, grad checkpointing ${model.gradCheckpointing}) in ${seconds.toFixed(1)} s\n` +
    `loss ${run.lossFirst != null ? run.lossFirst.toFixed(4) : 'n/a'} (first step) -> ${lastLoss != null ? lastLoss.toFixed(4) : 'n/a'} (last)\n` +
    (side && readout ? `kNN top-1 (cosine, k=${side.knnOpts.k}, votes exp(sim/${side.knnOpts.t}); bank ${side.sets.bank.n}, queries ${side.sets.query.n}; features: ${NAMES[readout]}): ` +
      `trained ${pct(pick(knn.trained, readout))}${others(knn.trained)}, initial ${pct(pick(knn.initial, readout))}${others(knn.initial)}, raw pixels ${pct(knn.pixels)}\n` : '') +
    `encoder weights (timm keys)  ${paths.weights}\ntraining checkpoint          ${paths.state}\nreconstructions              ${paths.image}\n`);
  if (o.json) {
    const perReadout = {};
    for (const r of READOUTS) { perReadout[`knn_trained_${r}`] = pick(knn.trained, r); perReadout[`knn_initial_${r}`] = pick(knn.initial, r); }
    process.stdout.write(JSON.stringify({ steps: step, loss_first: run.lossFirst ?? null, loss_last: lastLoss ?? null,
      knn_readout: readout, knn_trained: pick(knn.trained, readout), knn_initial: pick(knn.initial, readout), knn_pixels: knn.pixels,
      ...perReadout, seconds: Number(seconds.toFixed(3)),
      threads: vt.threads, train_seconds: Number(trainSeconds.toFixed(3)),
      images_per_second: Number((trained * run.batch / trainSeconds).toFixed(2)),
      weights: paths.weights, image: paths.image, checkpoint: paths.state }) + '\n');
  }
}

async function cmdTrain(args) {
  let o;
  try { o = parseTrainArgs(args); } catch (e) { process.stderr.write(`vitrine train: ${e.message} (vitrine train --help lists the options)\n`); return 2; }
  if (o.help) { process.stdout.write(TRAIN_HELP + '\n'); return 0; }
  try {
    return await train(o);
  } catch (e) { // one line, never a stack trace (VITRINE_DEBUG=1 shows it)
    if (process.env.VITRINE_DEBUG && !(e instanceof TrainFailure)) process.stderr.write(`${e.stack}\n`);
    process.stderr.write(`vitrine train: ${e.message}\n`);
    return e instanceof TrainFailure ? e.status : 1;
  }
}

// What a run writes, and only once it has something: the output folder is made at the first write
// (and removed again if the run ends having written nothing into it); the checkpoint is written
// atomically, and only after this run has taken a step (a resume that fails never rewrites it).
class Outputs {
  constructor(outDir, paths) { this.outDir = outDir; this.paths = paths; this.made = null; this.savedStep = null; this.wrote = []; }
  write(file, bytes) {
    if (!this.cleaned) { removeStaleTemps(this.outDir); this.cleaned = true; }
    try { writeAtomic(file, bytes); } catch (e) { throw new TrainFailure(`cannot write ${file}: ${why(e)}`); }
    if (!this.wrote.includes(file)) this.wrote.push(file);
  }
  // the truth about the checkpoint file after a failed write
  stateNote() {
    if (this.savedStep != null) return `the checkpoint of step ${this.savedStep} is kept`;
    return existsSync(this.paths.state) ? `${this.paths.state} is unchanged` : 'no checkpoint has been written';
  }
  cleanUp() { if (this.made && !this.wrote.length) removeEmptyDirs(this.made); }
}

async function train(o) {
  const say = (s) => process.stderr.write(s + '\n');
  const warn = (s) => process.stderr.write(`vitrine train: warning: ${s}\n`);
  const t0 = performance.now();
  const { run, resumeBytes } = trainSettings(o);
  const seed = BigInt(run.seed);
  const outDir = o.out || TRAIN_DEFAULTS.out;
  const paths = { state: path.join(outDir, STATE_FILE), weights: path.join(outDir, WEIGHTS_FILE), image: path.join(outDir, IMAGE_FILE) };
  // --out: made now (a file, /proc/x, a read-only place are refused before training), removed
  // again at the end if the run wrote nothing into it
  const out = new Outputs(outDir, paths);
  try { out.made = makeDirs(outDir); } catch (e) { throw new TrainFailure(`--out ${e.message}`, 2); }
  try {
    return await trainIn(o, { run, resumeBytes, seed, paths, out, t0, say, warn });
  } finally { out.cleanUp(); }
}

async function trainIn(o, { run, resumeBytes, seed, paths, out, t0, say, warn }) {
  const statePath = paths.state;
  const { vt, model, initBytes } = await openModel(o, run, resumeBytes, seed, say, warn);
  const data = trainData(o, run, model, warn);
  const per = model.dims.chans * model.dims.img * model.dims.img;
  if (run.batch * per * 4 > 2 ** 31) throw new TrainFailure(`--batch ${run.batch}: one batch of ${model.dims.img}x${model.dims.img}x${model.dims.chans} images is ${(run.batch * per * 4 / 2 ** 30).toFixed(1)} GiB, more than wasm memory holds`);
  const stopAt = Math.min(run.steps, o.stopAt ?? run.steps);
  const side = !o.noEval && stopAt >= run.steps ? startSideEvaluation(o, vt, run, data, seed, warn, initBytes) : null;
  try {
    const save = (step) => {
      try {
        out.write(statePath, withMetadata(model.saveTrainState(), { vitrine_run: JSON.stringify({ ...run, spec: undefined }) }));
      } catch (e) { throw new TrainFailure(`${e.message}; ${out.stateNote()}`); }
      out.savedStep = step;
    };
    const { tr, startStep, error, interrupted, lastLoss, trainSeconds } = await trainLoop({ vt, model, run, data, seed, stopAt,
      saveEvery: o.saveEvery ?? TRAIN_DEFAULTS.saveEvery, save, statePath, say, warn });
    const stepped = tr.step > startStep;
    if (!stepped) { // nothing of this run to keep: write nothing (a resumed checkpoint stays as it was)
      if (error) throw new TrainFailure(`${error.message}\nnothing was written${resumeBytes ? ` (${o.resume} is unchanged)` : ''}`);
      if (interrupted) { say(`vitrine train: interrupted before the first step; nothing was written`); return interrupted === 'SIGINT' ? 130 : 143; }
    }
    if (stepped && out.savedStep !== tr.step) save(tr.step);
    if (error) say(`vitrine train: ${error.message}\nthe last good state (step ${tr.step}) is in ${statePath}`);
    else if (interrupted) say(`vitrine train: interrupted at step ${tr.step}; continue with --resume ${statePath}`);
    say(`vitrine train: ${tr.step - startStep} steps in ${trainSeconds.toFixed(1)} s (${((tr.step - startStep) * run.batch / trainSeconds).toFixed(0)} img/s)`);

    const finished = tr.step >= run.steps;
    try { writeResults(model, run, data, paths, out, warn); } catch (e) {
      throw new TrainFailure(`${e.message} (the checkpoint of step ${out.savedStep} in ${statePath} is complete)`);
    }
    if (error) say(`vitrine train: wrote what it could from step ${tr.step}: ${out.wrote.join(', ')}`);
    const knn = side && !interrupted && !error ? await knnResults(model, side, say, warn) : { trained: null, initial: null, pixels: null };
    report(o, { vt, run, model, side, knn, paths, finished, step: tr.step, lastLoss, seconds: (performance.now() - t0) / 1000,
      trained: tr.step - startStep, trainSeconds });
    model.dispose();
    return error ? 1 : interrupted === 'SIGINT' ? 130 : interrupted ? 143 : 0;
  } finally { if (side) side.worker.terminate(); }
}

async function main(argv) {
  const classify = argv[0] === 'train' && argv.some((a, i) => a === 'classify' && argv[i - 1] === '--objective');
  const cmd = { parity: cmdParity, plan: cmdPlan, train: classify ? cmdTrainClassify : cmdTrain, predict: cmdPredict }[argv[0]];
  if (cmd) {
    try { return await cmd(argv.slice(1)); } catch (e) { // one line, never a stack trace
      if (process.env.VITRINE_DEBUG) process.stderr.write(`${e.stack}\n`);
      process.stderr.write(`vitrine ${argv[0]}: ${e.message}\n`);
      return 1;
    }
  }
  process.stderr.write(`${USAGE_PARITY}\n       ${USAGE_PLAN}\n       vitrine train [--objective mae|aim] [--preset NAME | --config JSON] [--data DIR] [--batch B] [--steps N] [--lr LR] [--grad-checkpointing POLICY] [--out DIR] [--resume FILE] [--seed S] [--json] [--wasm BUILD] [--threads N] (--help)\n       vitrine train --objective classify [options] (--help)\n       ${PREDICT_USAGE.replace('usage: ', '')}\n`);
  return 2;
}

process.exitCode = await main(process.argv.slice(2));
