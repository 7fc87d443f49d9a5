// classify_bench.mjs: training-step throughput of the classifier (timm ViT + head, cross-entropy,
// Model.trainStepLabels) beside the MAE step (Model.trainStep) on the same encoder, through the JS
// shell (Emscripten SIMD128 build) in Node, interleaved (A B A B). Reports images per second of
// wall time and of this process's CPU time: the engine is single-threaded, so on a machine shared
// with other jobs the CPU-time rate is what one idle core would give (the wall rate is what this
// run got). One JSON line per objective: medians over the repeats.
//   node bench/classify_bench.mjs [--preset fmnist] [--batch 64] [--policy block] [--repeat 10]
import { createVitrine } from '../web/vitrine.js';
import { modelSpec } from '../web/train.js';
import { classifierSpec } from '../web/classify.js';

const args = process.argv.slice(2);
const opt = (n, d) => { const i = args.indexOf(n); return i >= 0 ? args[i + 1] : d; };
const preset = opt('--preset', 'fmnist'), B = Number(opt('--batch', 64)), policy = opt('--policy', 'block');
const repeat = Number(opt('--repeat', 10));
const vt = await createVitrine({ wasm: 'simd' });
const cls = vt.createModel(classifierSpec({ preset, numClasses: 10 })), mae = vt.createModel(modelSpec('mae', { preset }));
for (const m of [cls, mae]) { m.setGradCheckpointing(policy); m.initWeights(1); m.trainerInit({ lr: 1e-4, seed: 2 }); }
const { img, chans } = cls.dims;
const x = new Float32Array(B * chans * img * img).map((_, i) => Math.sin(i * 0.37));
const y = Int32Array.from({ length: B }, (_, i) => i % 10);
const steps = { classify: () => cls.trainStepLabels(x, y), mae: () => mae.trainStep(x, B) };
const wall = { classify: [], mae: [] }, cpu = { classify: [], mae: [] };
for (let i = 0; i < repeat + 2; i++) {
  for (const k of ['classify', 'mae']) {
    const c0 = process.cpuUsage(), t0 = performance.now();
    steps[k]();
    const t = (performance.now() - t0) / 1000, c = process.cpuUsage(c0), cs = (c.user + c.system) / 1e6;
    if (i >= 2) { wall[k].push(t); cpu[k].push(cs); } // 2 warm-up steps: V8 tiers the wasm up
  }
}
const med = (a) => { const s = [...a].sort((p, q) => p - q), n = s.length; return n % 2 ? s[n >> 1] : (s[n / 2 - 1] + s[n / 2]) / 2; };
for (const k of ['classify', 'mae']) {
  console.log(JSON.stringify({ build: 'shell-simd', model: preset, objective: k, batch: B, policy, repeat,
    step_s: +med(wall[k]).toFixed(4), cpu_s: +med(cpu[k]).toFixed(4), img_per_s_wall: +(B / med(wall[k])).toFixed(1),
    img_per_s_cpu: +(B / med(cpu[k])).toFixed(1) }));
}
cls.dispose(); mae.dispose();
