// classify_bench.mjs: training-step throughput of the two default jobs through the JS shell in Node:
// the classifier (timm ViT + head, cross-entropy, Model.trainStepLabels; `train --objective
// classify`: batch 128, avg pooling) and the MAE step (Model.trainStep; `vitrine train`: batch 64,
// mask ratio 0.5 as the main job trains),
// each under two checkpointing policies (default none vs block), interleaved step by step
// (classify/none, classify/block, mae/none, mae/block, repeated), so that the paired ratios share
// the machine's state; with several presets (--presets a,b) every preset's steps are interleaved
// too. Prints the CPU and vector ISA, then one JSON line per (preset, objective, policy): median
// step time, images/s of wall time, and medians of the paired ratios to the first policy and to
// the first preset.
//   node bench/classify_bench.mjs [--presets fmnist-p7-mlp2,fmnist-p7] [--batch 128] [--mae-batch 64]
//                                 [--policies none,block] [--repeat 20] [--wasm BUILD] [--threads N]
import os from 'node:os';
import { createVitrine, enableNodeRelaxedSimd } from '../web/vitrine.js';
import { modelSpec } from '../web/train/presets.js';
import { classifierSpec } from '../web/train/objectives/classify.js';
import { hostInfo } from './lib.mjs';

const args = process.argv.slice(2);
const opt = (n, d) => {
  const i = args.indexOf(n);
  return i >= 0 ? args[i + 1] : d;
};
const presets = opt('--presets', 'fmnist-p7-mlp2,fmnist-p7').split(','),
  B = Number(opt('--batch', 128)),
  BM = Number(opt('--mae-batch', 64));
const policies = opt('--policies', 'none,block').split(','),
  repeat = Number(opt('--repeat', 20));
const threads = opt('--threads', null);
await enableNodeRelaxedSimd(); // as the CLI: the default build is the one the jobs run
const vt = await createVitrine({
  wasm: opt('--wasm', undefined),
  threads: threads == null ? undefined : Number(threads),
});
const { cpu, isa } = hostInfo();
console.log(
  `# ${cpu} (host ${isa}); wasm ${vt.build} (128-bit vectors), ${vt.threads} thread(s); load average ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);

const models = {};
for (const pr of presets)
  for (const p of policies) {
    const c = vt.createModel(classifierSpec({ preset: pr, numClasses: 10, pool: 'avg' })),
      m = vt.createModel(modelSpec('mae', { preset: pr }));
    for (const x of [c, m]) {
      x.setGradCheckpointing(p);
      x.initWeights(1);
    }
    c.trainerInit({ lr: 1e-4, seed: 2 });
    m.trainerInit({ lr: 1e-4, seed: 2, maskRatio: 0.5 });
    models[`${pr}/${p}`] = { classify: c, mae: m };
  }
const { img, chans } = models[`${presets[0]}/${policies[0]}`].classify.dims;
const xs = {
  classify: new Float32Array(B * chans * img * img).map((_, i) => Math.sin(i * 0.37)),
  mae: new Float32Array(BM * chans * img * img).map((_, i) => Math.sin(i * 0.37)),
};
const y = Int32Array.from({ length: B }, (_, i) => i % 10);
const step = { classify: (m) => m.trainStepLabels(xs.classify, y), mae: (m) => m.trainStep(xs.mae, BM) };
const times = {};
for (let i = 0; i < repeat + 2; i++) {
  for (const k of ['classify', 'mae'])
    for (const pr of presets)
      for (const p of policies) {
        const t0 = performance.now();
        step[k](models[`${pr}/${p}`][k]);
        const t = (performance.now() - t0) / 1000;
        if (i >= 2) (times[`${pr}/${k}/${p}`] ||= []).push(t); // 2 warm-up steps: V8 tiers the wasm up
      }
}
const med = (a) => {
  const s = [...a].sort((p, q) => p - q),
    n = s.length;
  return n % 2 ? s[n >> 1] : (s[n / 2 - 1] + s[n / 2]) / 2;
};
const ratio = (a, b) => +med(a.map((v, i) => v / b[i])).toFixed(3);
for (const pr of presets)
  for (const k of ['classify', 'mae'])
    for (const p of policies) {
      const t = times[`${pr}/${k}/${p}`];
      console.log(
        JSON.stringify({
          build: vt.build,
          threads: vt.threads,
          preset: pr,
          objective: k,
          batch: k === 'mae' ? BM : B,
          mask_ratio: k === 'mae' ? 0.5 : null,
          policy: p,
          repeat,
          loadavg_end: os.loadavg()[0],
          step_s: +med(t).toFixed(4),
          img_per_s: +((k === 'mae' ? BM : B) / med(t)).toFixed(1),
          [`time_ratio_to_${policies[0]}`]: ratio(t, times[`${pr}/${k}/${policies[0]}`]),
          [`time_ratio_to_${presets[0]}`]: ratio(t, times[`${presets[0]}/${k}/${p}`]),
        }),
      );
    }
for (const m of Object.values(models)) {
  m.classify.dispose();
  m.mae.dispose();
}
