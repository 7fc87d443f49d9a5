// threads_bench.mjs: what the thread pool buys, measured side by side in one run, interleaved
// (A B A B ..., ratio of each pair, median of the ratios).
//  1. vitrine, the JS shell over the Emscripten SIMD128 shared-memory build: the ViT-Ti/16 and
//     ViT-S/16 encode step (forward with needGrad + backward of a fixed upstream gradient +
//     zeroGrad; the shell has no optimizer call for encode) at 1 thread and at 2.. every core.
//     The outputs of every thread count are compared bit for bit too.
//  2. PyTorch + OpenBLAS, the same step (+ AdamW) at the same thread counts (bench/torch_vit.py).
//  3. The main job, `node web/cli.js train --no-eval` (MAE on Fashion-MNIST, batch 64), images/s
//     at --threads 1 (what it ran at before the pool) and at every core.
// Prints one JSON document. Reports; never fails on a time.
//   node bench/threads_bench.mjs [--quick] [--pairs N] [--train-steps N]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createVitrine } from '../web/vitrine.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const opt = (n, d) => { const i = args.indexOf(n); return i >= 0 ? args[i + 1] : d; };
const QUICK = args.includes('--quick');
const PAIRS = Number(opt('--pairs', QUICK ? 2 : 5));
const TRAIN_STEPS = Number(opt('--train-steps', QUICK ? 10 : 100));
const PY = process.env.VITRINE_PYTHON || '/usr/bin/python3';
const CORES = os.availableParallelism();
const COUNTS = [...new Set([1, 2, CORES])].filter((n) => n <= Math.max(2, CORES));
const log = (s) => process.stderr.write(`[threads] ${s}\n`);
const median = (a) => { const s = [...a].sort((x, y) => x - y), n = s.length; return n % 2 ? s[n >> 1] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const R = { cpu: os.cpus()[0]?.model, cores: CORES, loadavg_start: os.loadavg(), counts: COUNTS, pairs: PAIRS, vitrine: [], torch: [], main_job: null };

// ---- 1. vitrine encode step
const JOBS = QUICK ? [['vit_tiny_patch16_224', 1]] : [['vit_tiny_patch16_224', 4], ['vit_small_patch16_224', 4]];
for (const [preset, B] of JOBS) {
  const eng = [];
  for (const n of COUNTS) {
    const vt = await createVitrine({ wasm: 'simd-mt', threads: n });
    const model = vt.createModel({ preset, kind: 'lightly' });
    model.initWeights(1);
    eng.push({ n, vt, model, times: [] });
  }
  const { img, chans, dim, patch, prefix } = eng[0].model.dims;
  let s = 1;
  const rnd = () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;
  const images = Float32Array.from({ length: B * chans * img * img }, rnd);
  const G = Float32Array.from({ length: B * ((img / patch) ** 2 + prefix) * dim }, () => rnd() * 1e-3);
  const step = (e) => {
    const t0 = performance.now();
    const out = e.model.encode(images, { needGrad: true });
    e.model.backward({ douts: [G] });
    const ms = performance.now() - t0;
    const g0 = e.model.params()[0].grad.slice();
    e.model.zeroGrad();
    return { ms, out: out.data, g0 };
  };
  for (const e of eng) for (let i = 0; i < 2; i++) step(e); // warm-up: V8 tiers the wasm up
  let same = true;
  for (let p = 0; p < PAIRS; p++) {
    const res = eng.map((e) => { const r = step(e); e.times.push(r.ms); return r; });
    for (const r of res.slice(1)) {
      same &&= Buffer.from(r.out.buffer).equals(Buffer.from(res[0].out.buffer)) && Buffer.from(r.g0.buffer).equals(Buffer.from(res[0].g0.buffer));
    }
  }
  for (const e of eng) {
    const ratios = e.times.map((t, i) => eng[0].times[i] / t);
    R.vitrine.push({ model: preset, batch: B, threads: e.n, ms_per_step: +median(e.times).toFixed(1),
      speedup_vs_1: +median(ratios).toFixed(3), times: e.times.map((t) => +t.toFixed(1)), same_bits_as_1_thread: same });
    log(`vitrine ${preset} b${B} ${e.n} threads: ${median(e.times).toFixed(0)} ms, x${median(ratios).toFixed(2)} vs 1 thread, same bits ${same}`);
    e.model.dispose();
    e.vt.close();
  }
}

// ---- 2. PyTorch at the same thread counts, interleaved process by process
const torchRun = (preset, B, n) => {
  const r = spawnSync(PY, [join(ROOT, 'bench/torch_vit.py'), '--preset', preset, '--batch', String(B), '--threads', String(n),
    '--repeat', '3', '--warmup', '1'], { encoding: 'utf8' });
  const line = (r.stdout || '').split('\n').find((l) => l.includes('"build": "pytorch"'));
  return line ? JSON.parse(line).ms_per_step : null;
};
if (spawnSync(PY, ['-c', 'import torch'], { encoding: 'utf8' }).status === 0) {
  for (const [preset, B] of JOBS) {
    const times = COUNTS.map(() => []);
    for (let p = 0; p < (QUICK ? 1 : 2); p++) COUNTS.forEach((n, i) => { const t = torchRun(preset, B, n); if (t) times[i].push(t); });
    COUNTS.forEach((n, i) => {
      const ratios = times[i].map((t, k) => times[0][k] / t);
      R.torch.push({ model: preset, batch: B, threads: n, ms_per_step: times[i].length ? +median(times[i]).toFixed(1) : null,
        speedup_vs_1: ratios.length ? +median(ratios).toFixed(3) : null, times: times[i] });
      log(`pytorch ${preset} b${B} ${n} threads: ${times[i].length ? median(times[i]).toFixed(0) : '-'} ms`);
    });
  }
} else log(`PyTorch: ${PY} cannot import torch; skipped`);

// ---- 3. the main job: images/s at 1 thread and every core, interleaved
{
  const out = mkdtempSync(join(tmpdir(), 'vitrine-threads-bench-'));
  const runs = { 1: [], [CORES]: [] };
  const N = [1, CORES].filter((v, i, a) => a.indexOf(v) === i);
  for (let p = 0; p < (QUICK ? 1 : 2); p++)
    for (const n of N) {
      const r = spawnSync(process.execPath, [join(ROOT, 'web/cli.js'), 'train', '--steps', String(TRAIN_STEPS), '--no-eval', '--json',
        '--threads', String(n), '--out', out], { encoding: 'utf8', cwd: ROOT });
      const line = (r.stdout || '').split('\n').filter((l) => l.startsWith('{')).pop();
      if (line) runs[n].push(JSON.parse(line).images_per_second);
      log(`main job --threads ${n}: ${line ? JSON.parse(line).images_per_second : `failed: ${(r.stderr || '').slice(-300)}`} img/s`);
    }
  rmSync(out, { recursive: true, force: true });
  const ratios = runs[CORES].map((v, i) => v / runs[1][i]);
  R.main_job = { command: `node web/cli.js train --steps ${TRAIN_STEPS} --no-eval`, images_per_s: Object.fromEntries(N.map((n) => [n, runs[n]])),
    median_images_per_s: Object.fromEntries(N.map((n) => [n, runs[n].length ? +median(runs[n]).toFixed(1) : null])),
    speedup: ratios.length ? +median(ratios).toFixed(3) : null };
}
R.loadavg_end = os.loadavg();
process.stdout.write(JSON.stringify(R) + '\n');
process.exit(0); // pool workers of closed engines are gone; nothing else keeps running
