// step_bench.mjs: training steps through the JS shell (web/vitrine.js), as an app or the tab runs
// them, with several engines in ONE process, their steps interleaved round by round (the order
// rotated each round), so that every engine's step sees the same machine. Engines differ by
// checkout (this tree or an older one: bench/run.sh --before), build (relaxed, simd, relaxed-mt,
// ...) and thread count. Prints one JSON document. A benchmark: it reports, never fails on a time.
//
// Jobs (--job):
//   vit      timm's VisionTransformer (ViT-Ti/16 = vit_tiny_patch16_224, or --preset
//            vit_small_patch16_224) with a 1000-class head, policy none: one step = forward,
//            cross-entropy, backward, AdamW (Model.trainStepLabels; lr 1.5e-4 constant, betas
//            0.9/0.95, weight decay 0.05, no clipping, no label smoothing) -- what
//            bench/torch_vit.py and bench/tfjs_vit.mjs do too. Optionally each round first times
//            the build's peak loop (--peak: build/wasm/peak-relaxed.wasm), so that the step's
//            "% of the one-core peak" is a paired ratio.
//   mainjob  the main job, `node web/cli.js train`'s step: Session.stepOnce on Fashion-MNIST
//            (web/train/session.js; TrainingRun.trainOne in trees before it; batch assembly + Model.trainStep: MAE, fmnist-p7-mlp2, batch 64, mask ratio 0.5,
//            block checkpointing, the CLI's lr and schedule). images/s = batch / step time.
//   demo     the demo's 224-px MAE on a timm preset with its decoders (--decoders tab,lightly of
//            web/train/presets.js's MAE_DECODERS): trainStep at batch 8; also each one's planned bytes.
// Engines (--engine, repeatable): ROOT:BUILD:THREADS[:LABEL]; ROOT '.' is this tree.
// --clock cpu times each step (and the peak) by the process's CPU time instead of wall time: for
// one-thread engines on a pinned core of a busy machine (bench/lib.mjs clockOf); never for threads.
// The statistic: ms = median over rounds; an engine's time against the first engine's = median of
// the per-round ratios, with their min and max. Bits: engines of one checkout and one build
// family (relaxed and relaxed-mt) must give the same losses and weights at every thread count.
//   node bench/step_bench.mjs --job vit --engine .:relaxed:1 --engine .:relaxed-mt:2 --batch 1 --rounds 9
import { existsSync, readFileSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT, clockOf, hostInfo, loadavg, loadPeak, median, paired, summary } from './lib.mjs';

const args = process.argv.slice(2);
const opt = (n, d) => {
  const i = args.indexOf(n);
  return i >= 0 ? args[i + 1] : d;
};
const all = (n) => args.flatMap((a, i) => (a === n ? [args[i + 1]] : []));
const job = opt('--job', 'vit'),
  B = Number(opt('--batch', job === 'mainjob' ? 64 : job === 'demo' ? 8 : 1));
const rounds = Number(opt('--rounds', 7)),
  warmup = Number(opt('--warmup', 3));
const preset = opt('--preset', 'vit_tiny_patch16_224'),
  peakKind = opt('--peak', null);
const decoders = opt('--decoders', 'tab,lightly').split(',');
const specs = all('--engine');
if (!specs.length) specs.push('.:relaxed:1');
const clockKind = opt('--clock', 'wall'),
  clock = clockOf(clockKind);

const PRESET_DIMS = {
  vit_tiny_patch16_224: [192, 12, 3],
  vit_small_patch16_224: [384, 12, 6],
  vit_base_patch16_224: [768, 12, 12],
};
const CLASSES = 1000;

// model FLOPs of one ViT classifier step (multiply-add = 2; matmuls and attention; bench/train_bench.c)
function vitStepFlops(D, depth, batch) {
  const T = 197,
    block = 24 * T * D * D + 4 * T * T * D,
    patch = 2 * 196 * 768 * D;
  const fwd = patch + depth * block + 2 * D * CLASSES;
  return batch * (3 * fwd - patch);
}

const root = (r) => (r === '.' ? ROOT : isAbsolute(r) ? r : resolve(r));
async function engineOf(spec) {
  const [r, build, threads, label] = spec.split(':');
  const dir = root(r);
  const mod = await import(pathToFileURL(join(dir, 'web/vitrine.js')).href);
  await mod.enableNodeRelaxedSimd?.();
  const vt = await mod.createVitrine({ wasm: build, threads: Number(threads) });
  return {
    spec,
    label: label || `${r === '.' ? 'this tree' : r} ${build} ${threads}t`,
    root: dir,
    build,
    family: build.replace(/-mt$/, ''),
    threads: vt.threads,
    vt,
    mod,
    // a module of that tree: the first of `files` (paths under web/, newest layout first) it has
    dirMod: (...files) => {
      const f = files.find((x) => existsSync(join(dir, 'web', x)));
      return f ? import(pathToFileURL(join(dir, 'web', f)).href) : {};
    },
  };
}

// deterministic inputs (a sine pattern: the step's cost does not depend on the values)
const wave = (n, s = 0.37) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * s));

async function setupVit(e) {
  const [D, depth, heads] = PRESET_DIMS[preset];
  const m = e.vt.createModel({
    kind: 'timm',
    config: { img_size: 224, patch_size: 16, in_chans: 3, embed_dim: D, depth, num_heads: heads, num_classes: CLASSES },
  });
  m.setGradCheckpointing('none');
  m.initWeights(1);
  m.trainerInit({ lr: 1.5e-4, clipNorm: 0, labelSmoothing: 0, weightDecay: 0.05, warmupSteps: 0, totalSteps: 0 });
  const x = wave(B * 3 * 224 * 224),
    y = Int32Array.from({ length: B }, (_, i) => (i * 7) % CLASSES);
  return { model: m, step: () => m.trainStepLabels(x, y), flops: vitStepFlops(D, depth, B) };
}

let fmnist = null;
async function setupMainJob(e) {
  const { Session } = await e.dirMod('train/session.js', 'train-loop.js');
  if (Session) {
    // the CLI's loop since the Trainer (web/train/session.js): a Session, its defaults are the main job
    const s = await Session.open(e.vt, { objective: 'mae', data: { kind: 'fashion-mnist' }, batch: B, steps: 5000 });
    return { model: s.model, step: async () => (await s.stepOnce()).loss };
  }
  // an older tree (bench/run.sh --before): its TrainingRun, set up as its CLI did
  const { modelSpec, TrainingRun } = await e.dirMod('train.js');
  const { loadFashionMNIST } = await e.dirMod('data.js');
  fmnist ||= loadFashionMNIST('train');
  const m = e.vt.createModel(modelSpec('mae', { preset: 'fmnist-p7-mlp2' }));
  m.setGradCheckpointing('block');
  m.initWeights(0);
  // the CLI's defaults (web/cli.js: lr 2e-3 x batch / 64, 5% of 5000 steps of warm-up, seeds 0 / 1 / 2)
  m.trainerInit({ lr: (2e-3 * B) / 64, warmupSteps: 250, totalSteps: 5000, maskRatio: 0.5, seed: 1n });
  const run = new TrainingRun({ model: m, dataset: fmnist, batch: B, steps: 5000, dataSeed: 2n });
  return { model: m, step: () => run.trainOne().loss };
}

async function setupDemo(e, decoder) {
  const { maeDecoder } = await e.dirMod('train/presets.js', 'train.js'); // the demo's decoders (MAE_DECODERS)
  const m = e.vt.createModel({ kind: 'mae', preset, config: maeDecoder(decoder) });
  m.setGradCheckpointing('none');
  m.initWeights(1);
  m.trainerInit({ lr: 1.5e-4, maskRatio: 0.75, seed: 1n });
  const x = wave(B * 3 * 224 * 224);
  const plan = m.planTrainStep({ batch: B, maskRatio: 0.75 });
  return { model: m, step: () => m.trainStep(x, B), plan };
}

const engines = [];
for (const s of specs) engines.push(await engineOf(s));
// runs: (engine, variant) pairs, all interleaved
const runs = [];
for (const e of engines) {
  if (job === 'demo') for (const d of decoders) runs.push({ e, variant: d, ...(await setupDemo(e, d)) });
  else runs.push({ e, variant: null, ...(job === 'vit' ? await setupVit(e) : await setupMainJob(e)) });
}
if (clockKind === 'cpu' && engines.some((e) => e.threads > 1))
  throw new Error('--clock cpu: one-thread engines only (CPU time is not a thread speedup)');
const peak = peakKind ? await loadPeak(join(ROOT, 'build'), peakKind, clock) : null;

const loadStart = loadavg();
for (const r of runs) {
  r.ms = [];
  r.losses = [];
  r.peak = [];
  r.cores = [];
}
// each step's time by the chosen clock, and its CPU time over its wall time (the cores the process
// had: below the thread count when other processes share the cores)
const cpuClock = clockOf('cpu'),
  wallClock = clockOf('wall');
const timeStep = async (r) => {
  const t = clock(),
    c = cpuClock(),
    w = wallClock();
  const loss = await r.step(); // the main job's step is the Session's (async: it assembles its batch)
  const ms = clock() - t,
    cores = (cpuClock() - c) / (wallClock() - w);
  return { ms, loss, cores };
};
for (let w = 0; w < warmup; w++) for (const r of runs) r.losses.push((await timeStep(r)).loss); // V8 tiers the wasm up
for (let i = 0; i < rounds; i++)
  for (let j = 0; j < runs.length; j++) {
    const r = runs[(i + j) % runs.length];
    if (peak) r.peak.push(peak.gflops());
    const { ms, loss, cores } = await timeStep(r);
    r.ms.push(ms);
    r.losses.push(loss);
    r.cores.push(cores);
  }
const loadEnd = loadavg();

// same bits: every run of a checkout and build family against the first one (losses of every
// step, and the weights after the last)
const bits = [];
for (const r of runs) {
  const ref = runs.find((q) => q.e.root === r.e.root && q.e.family === r.e.family && q.variant === r.variant);
  if (ref === r) continue;
  const w = (q) =>
    Buffer.from(
      Uint8Array.from(
        new Uint8Array(
          q.model.params()[0].data.buffer,
          q.model.params()[0].data.byteOffset,
          q.model.params()[0].data.byteLength,
        ),
      ),
    );
  const same =
    r.losses.length === ref.losses.length &&
    r.losses.every((l, k) => Object.is(l, ref.losses[k])) &&
    w(r).equals(w(ref));
  bits.push({ run: r.e.label, against: ref.e.label, variant: r.variant, same });
}

const out = {
  job,
  preset: job === 'mainjob' ? 'fmnist-p7-mlp2' : preset,
  batch: B,
  rounds,
  warmup,
  host: hostInfo(),
  loadavg_start: loadStart,
  loadavg_end: loadEnd,
  clock: clockKind,
  statistic:
    "ms: median over rounds; vs_first: median (min, max) of the per-round ratio of step times to the first run's",
  peak: peak ? { name: peak.name, ...summary(runs.flatMap((r) => r.peak)) } : null,
  same_bits: bits,
  runs: [],
};
for (const r of runs) {
  const o = {
    label: r.e.label,
    root: r.e.root,
    build: r.e.build,
    threads: r.e.threads,
    variant: r.variant,
    ms: r.ms.map((x) => +x.toFixed(2)),
    ms_median: median(r.ms),
    cores_used: summary(r.cores),
    vs_first: paired(r.ms, runs[0].ms),
    images_per_s: (B * 1e3) / median(r.ms),
  };
  if (r.flops) {
    o.step_gflop = r.flops / 1e9;
    o.gflops = r.flops / median(r.ms) / 1e6;
    if (peak) o.pct_peak = summary(r.ms.map((ms, k) => r.flops / ms / 1e6 / r.peak[k]));
  }
  if (r.plan) o.plan = r.plan;
  out.runs.push(o);
}
process.stdout.write(JSON.stringify(out) + '\n');
for (const e of engines) e.vt.close?.();
process.exit(0);
