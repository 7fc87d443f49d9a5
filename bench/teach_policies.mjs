// teach_policies.mjs: every checkpointing policy on the demo's default model (MAE 'fmnist', batch
// 32, mask ratio 0.75: demo/index.html and main.js), measured as the page's teaching view measures
// it (web/widget/measure.js) but with more rounds, and written with the widget's own table
// (web/widget/compare.js: tableRows, timesProse), so the page and the doc say the same things the
// same way: per policy what the encoder keeps, the activation arena's peak (the recorded step's
// highest point, which is the plan), the FLOPs re-computed and their share of a forward, the step
// time (warm-up steps, then rounds timing one step of every policy and none once more, in a
// rotated order: median and middle half; against none the median of the rounds' ratios, and
// whether this machine can tell it from none at all); then the whole step's planned bytes, the
// step's FLOPs against none's (the slow-down the FLOPs predict) and the median extra ms. A policy
// with the same kernel calls as another is not timed again. Prints the CPU, its vector ISA, the
// load, then the markdown; --doc FILE rewrites FILE's section between the markers
// `<!-- teach_policies: begin -->` and `<!-- teach_policies: end -->` (docs/demo.md's); --json FILE
// writes the numbers and every round's times.
//   node bench/teach_policies.mjs [--kind mae|aim] [--model fmnist] [--batch 32] [--mask-ratio 0.75]
//                                 [--reps 21] [--warmup 2] [--wasm BUILD] [--threads N] [--json FILE] [--doc FILE]
import { createVitrine, enableNodeRelaxedSimd } from '../web/vitrine.js';
import { specFor } from '../demo/worker-data.js';
import {
  recordPolicies,
  measureTimes,
  median,
  tableRows,
  timesProse,
  distinctPolicies,
  order,
  COLUMNS,
  fmtBytes,
  pct,
  blockSizes,
} from '../web/widget/index.js';
import { availableParallelism, loadavg } from 'node:os';
import { hostInfo } from './lib.mjs';
import { readFileSync, writeFileSync } from 'node:fs';

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
const policies = distinctPolicies(R, order(Object.keys(R), dims.depth));
const times = await measureTimes(vt, { spec, batch, maskRatio, policies, reps, warmup });
const load = [load0, loadavg()[0]];
const fwd = R.none.flops.forward;
const rows = tableRows(R, times).map((row) => {
  const r = R[row.policy],
    t = times.ms[row.policy];
  return {
    ...row,
    stepBytes: r.stepBytes,
    flopsVsNone: r.total / R.none.total,
    planRecomputeFlops: r.recomputeFlops,
    extraMs: t && row.policy !== 'none' ? median(t.map((x, i) => x - times.ms.none[i])) : null,
    rounds: t || null,
  };
});
const when = new Date().toISOString().slice(0, 16).replace('T', ' ');
const out = {
  cpu,
  isa,
  load,
  when,
  build: vt.build,
  threads: vt.threads,
  model: { ...cfg, batch, maskRatio, depth: dims.depth },
  forwardFlops: fwd,
  reps,
  warmup,
  again: times.again,
  rows,
};
vt.close();
if (opt('--json', null)) writeFileSync(opt('--json'), `${JSON.stringify(out, null, 1)}\n`);

// the markdown: the widget's columns, then the bench's own
const head = [
  ...COLUMNS,
  'whole step (planned)',
  'step FLOPs vs none',
  "re-computation's time: median extra ms per step",
];
const cell = (c) => c.replace(/\|/g, '\\|');
const table = [
  `| ${head.join(' | ')} |`,
  `|${head.map(() => '---').join('|')}|`,
  ...rows.map(
    (w) =>
      `| ${[
        ...w.cells.map(cell),
        fmtBytes(w.stepBytes),
        w.flopsVsNone.toFixed(2),
        w.extraMs == null ? (w.policy === 'none' ? '0' : '–') : w.extraMs.toFixed(1),
      ].join(' | ')} |`,
  ),
];
const busyNote =
  load[0] > 0.9 * availableParallelism() || load[1] > 0.9 * availableParallelism()
    ? ` The machine was shared (load average ${load[0].toFixed(1)} at the start, ${load[1].toFixed(1)} at the end on its ${availableParallelism()} cores): the times are rough.`
    : ` Load average ${load[0].toFixed(1)} at the start, ${load[1].toFixed(1)} at the end on ${availableParallelism()} cores.`;
const { input, internals } = blockSizes(R.block, R.none, 0);
const half = Object.keys(R).find((p) => R[p].note);
const section = [
  `Measured ${when} UTC on ${cpu} (host ${isa}; wasm ${out.build}, 128-bit vectors, ${out.threads} thread${out.threads > 1 ? 's' : ''} as in the tab), ` +
    `${cfg.kind.toUpperCase()} '${cfg.model}' (depth ${dims.depth}), batch ${batch}, mask ratio ${maskRatio}: forward ${(fwd / 1e6).toFixed(1)} MFLOP; ` +
    `${warmup} warm-up step(s) per policy, then ${reps} rounds timing one step of every policy and none once more, the order rotated each round.${busyNote} ` +
    timesProse(R, times),
  '',
  ...table,
  '',
  `What it teaches, in this model's numbers: \`block\` keeps least (${fmtBytes(R.block.peak.bytes)} of activations against ${fmtBytes(R.none.peak.bytes)}) ` +
    `for ${pct(R.block.flops.recompute, fwd)} of a forward re-computed, ${(R.block.total / R.none.total).toFixed(2)}x the step's FLOPs; ` +
    `\`sqrt\` (segments of ${R.sqrt.chains[0].segment} at depth ${dims.depth}) keeps ${R.sqrt.peak.bytes > R.block.peak.bytes ? 'more' : 'less'} than \`block\` ` +
    `(${fmtBytes(R.sqrt.peak.bytes)}) and re-computes ${pct(R.sqrt.flops.recompute, fwd)}, because a block's internals are ${(internals / input).toFixed(1)} times its input ` +
    `(the page derives it: the best segment is √(n / r) = ${Math.sqrt(dims.depth / (internals / input)).toFixed(2)} blocks long, and \`sqrt\` wins only beyond r² ≈ ${Math.round((internals / input) ** 2)} blocks); ` +
    `\`selective\` keeps the matrix products' outputs (${fmtBytes(R.selective.peak.bytes)}) for ${pct(R.selective.flops.recompute, fwd)} of a forward` +
    (half
      ? `; the budget half way between \`none\` and \`block\` (${fmtBytes(Number(half.slice(7)))}) keeps ${rows.find((w) => w.policy === half).cells[1]} (${fmtBytes(R[half].peak.bytes)}, ${pct(R[half].flops.recompute, fwd)}).`
      : '.'),
].join('\n');

console.log(section);
const doc = opt('--doc', null);
if (doc) {
  const text = readFileSync(doc, 'utf8'),
    begin = '<!-- teach_policies: begin -->',
    end = '<!-- teach_policies: end -->';
  const a = text.indexOf(begin),
    b = text.indexOf(end);
  if (a < 0 || b < a) throw new Error(`${doc}: no section between ${begin} and ${end}`);
  writeFileSync(doc, `${text.slice(0, a + begin.length)}\n${section}\n${text.slice(b)}`);
  console.log(`\n(written to ${doc})`);
}
