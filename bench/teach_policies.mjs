// teach_policies.mjs: every checkpointing policy on the demo's default model (MAE 'fmnist', batch
// 32, mask ratio 0.75: demo/index.html and main.js), measured as the page's teaching view measures
// it (demo/teach-measure.js) but with more rounds: per policy what the encoder keeps, the
// activation arena's peak (the recorded step's highest point, which is the plan) and the whole
// step's planned bytes, the forward FLOPs re-computed in the recorded step and their share of a
// forward, the step's FLOPs against none's (the slow-down the FLOPs predict), and the step time --
// warm-up steps, then rounds timing one step of every policy in a rotated order: the median and
// middle half of the rounds, and against none the median of the rounds' ratios and of their
// differences (the time the re-computation costs). Prints the CPU and its vector ISA, then a
// markdown table (--json FILE: the numbers and every round's times there too). The table in
// docs/demo.md.
//   node bench/teach_policies.mjs [--kind mae|aim] [--model fmnist] [--batch 32] [--mask-ratio 0.75]
//                                 [--reps 21] [--warmup 2] [--wasm BUILD] [--threads N] [--json FILE]
import { createVitrine, enableNodeRelaxedSimd } from '../web/vitrine.js';
import { specFor } from '../demo/worker-data.js';
import { recordPolicies, measureTimes, median, quantile, pairedRatios } from '../web/widget/index.js';
import { order, keeps, policyName } from '../web/widget/index.js';
import { availableParallelism, loadavg } from 'node:os';
import { hostInfo } from './lib.mjs';
import { writeFileSync } from 'node:fs';

const args = process.argv.slice(2);
const opt = (n, d) => {
  const i = args.indexOf(n);
  return i >= 0 ? args[i + 1] : d;
};
const cfg = { kind: opt('--kind', 'mae'), model: opt('--model', 'fmnist') };
const batch = Number(opt('--batch', 32)),
  maskRatio = Number(opt('--mask-ratio', 0.75));
const reps = Number(opt('--reps', 21)),
  warmup = Number(opt('--warmup', 2)),
  threads = opt('--threads', null);
await enableNodeRelaxedSimd(); // the build the page runs in Chromium (relaxed SIMD validates there)
// threads: the tab's, every core, unless asked
const vt = await createVitrine({
  wasm: opt('--wasm', undefined),
  threads: threads == null ? availableParallelism() : Number(threads),
});
const spec = specFor(cfg),
  { cpu, isa } = hostInfo();

const load0 = loadavg()[0];
const { results: R, dims } = recordPolicies(vt, { spec, batch, maskRatio });
const policies = order(Object.keys(R), dims.depth);
const { ms } = await measureTimes(vt, { spec, batch, maskRatio, policies, reps, warmup });
const fwd = R.none.flops.forward;
const rows = policies.map((p) => {
  const r = R[p],
    q = pairedRatios(ms, p),
    d = ms[p].map((t, i) => t - ms.none[i]);
  return {
    policy: p,
    keeps: keeps(r),
    segments: r.chains.map((c) => c.segment),
    arenaPeak: r.peak.bytes,
    stepBytes: r.stepBytes,
    recomputeFlops: r.flops.recompute,
    recomputeShare: r.flops.recompute / fwd,
    flopsVsNone: r.total / R.none.total,
    planRecomputeFlops: r.recomputeFlops,
    ms: { median: median(ms[p]), q1: quantile(ms[p], 0.25), q3: quantile(ms[p], 0.75) },
    vsNone: { median: median(q), q1: quantile(q, 0.25), q3: quantile(q, 0.75) },
    extraMs: median(d),
    rounds: ms[p],
  };
});
const load = [load0, loadavg()[0]];
const out = {
  cpu,
  isa,
  load,
  build: vt.build,
  threads: vt.threads,
  model: { ...cfg, batch, maskRatio, depth: dims.depth },
  forwardFlops: fwd,
  reps,
  warmup,
  rows,
};
vt.close();
if (opt('--json', null)) writeFileSync(opt('--json'), `${JSON.stringify(out, null, 1)}\n`);

const MiB = (b) => `${(b / 2 ** 20).toFixed(1)} MiB`;
console.log(
  `# ${cpu} (host ${isa}); wasm ${out.build} (128-bit vectors), ${out.threads} thread${out.threads > 1 ? 's' : ''}; load average ${load[0].toFixed(1)} at the start, ${load[1].toFixed(1)} at the end`,
);
console.log(
  `# ${cfg.kind.toUpperCase()} '${cfg.model}' (depth ${dims.depth}), batch ${batch}, mask ratio ${maskRatio}: forward ${(fwd / 1e6).toFixed(1)} MFLOP; ` +
    `${warmup} warm-up step(s) per policy, then ${reps} rounds of one step of every policy, the order rotated each round\n`,
);
console.log(
  "| policy | the encoder keeps | arena peak | whole step (planned) | re-computed per step | step FLOPs vs none | step time, ms: median (middle half) | vs none: median of the rounds' ratios (middle half) | re-computation's time: median extra ms per step |",
);
console.log('|---|---|---|---|---|---|---|---|---|');
for (const w of rows) {
  console.log(
    `| ${policyName(w.policy, R[w.policy])} | ${w.keeps} | ${MiB(w.arenaPeak)} | ${MiB(w.stepBytes)} | ${(w.recomputeFlops / 1e6).toFixed(1)} MFLOP (${(100 * w.recomputeShare).toFixed(0)}% of a forward) | ${w.flopsVsNone.toFixed(2)} | ` +
      `${w.ms.median.toFixed(1)} (${w.ms.q1.toFixed(1)}–${w.ms.q3.toFixed(1)}) | ${w.policy === 'none' ? '1' : `${w.vsNone.median.toFixed(2)} (${w.vsNone.q1.toFixed(2)}–${w.vsNone.q3.toFixed(2)})`} | ` +
      `${w.policy === 'none' ? '0' : w.extraMs.toFixed(1)} |`,
  );
}
