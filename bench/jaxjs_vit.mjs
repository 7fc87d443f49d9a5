// jaxjs_vit.mjs: the jax-js side of bench/run.mjs -- the ViT classifier training step of
// bench/step_bench.mjs (--job vit), bench/torch_vit.py and bench/tfjs_vit.mjs in jax-js (npm
// @jax-js/jax) on its Wasm backend, in Node, one thread (jax-js starts worker threads only where a
// global Worker exists; Node has none), with relaxed SIMD (its fused multiply-add) on. The step:
// bench/peers/jaxjs_step.mjs (one jit(valueAndGrad) program with AdamW inside, tokens padded to 200).
//
// Checked first: the same weights and inputs as bench/tfjs_vit.mjs (bench/peers/vit.mjs) go through
// bench/torch_vit.py --check (PyTorch, float64 and float32), and the first two steps here -- the
// very jitted step that is then timed -- must agree under the parity rule: both losses, and every
// gradient tensor of step 1. A step that does not agree is not timed: the JSON says why (`error`,
// `check`), the exit code is 1.
// --clock cpu times each step by the process's CPU time (bench/lib.mjs clockOf), not wall time.
//   node bench/jaxjs_vit.mjs [--preset NAME] [--batch B] [--steps R] [--warmup W] [--clock wall|cpu]
//                            [--attention sdpa|matmul] [--depth N] [--no-check] [--unmasked-pad]
// --depth N: N blocks at the preset's widths (a quick check); --unmasked-pad: a wrong step (the pad
// keys left in attention) that the check must refuse. Node 20 needs --harmony-iterator-helpers and
// --experimental-wasm-relaxed-simd: this script restarts itself with them when they are missing.
// Prints one JSON object.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ROOT, JAXJS_NODE_FLAGS, clockOf } from './lib.mjs';

if (!JAXJS_NODE_FLAGS.every((f) => process.execArgv.includes(f))) {
  const r = spawnSync(
    process.execPath,
    [...JAXJS_NODE_FLAGS, fileURLToPath(import.meta.url), ...process.argv.slice(2)],
    {
      stdio: 'inherit',
    },
  );
  process.exit(r.status ?? 1);
}

const { PRESETS, makeWeights, makeInputs, compareWithTorch } = await import('./peers/vit.mjs');
const { torchReference } = await import('./peers/torch_check.mjs');
const { jaxjsStep } = await import('./peers/jaxjs_step.mjs');
const jax = await import('@jax-js/jax');

const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
};
const preset = opt('--preset', 'vit_tiny_patch16_224');
const B = Number(opt('--batch', 1)),
  steps = Number(opt('--steps', 3)),
  warmup = Number(opt('--warmup', 2));
const attention = opt('--attention', 'sdpa');
const clockKind = opt('--clock', 'wall');
const result = {
  build: 'jaxjs-wasm',
  jaxjs: JSON.parse(readFileSync(join(ROOT, 'node_modules/@jax-js/jax/package.json'), 'utf8')).version,
  attention,
  model: preset,
  objective: 'classify',
  batch: B,
  threads: 1,
  clock: clockKind,
};
let exitCode = 0;
try {
  if (!PRESETS[preset]) throw new Error(`--preset: one of ${Object.keys(PRESETS).join(', ')}`);
  const clock = clockOf(clockKind);
  const [D, DEPTH] = PRESETS[preset];
  const depth = Number(opt('--depth', DEPTH));
  result.depth = depth;
  for (const [name, n] of [
    ['--depth', depth],
    ['--batch', B],
    ['--steps', steps],
  ])
    if (!(Number.isInteger(n) && n >= 1)) throw new Error(`${name}: a whole number >= 1`);
  await jax.init('wasm');
  jax.defaultDevice('wasm');
  const weights = makeWeights(D, depth),
    inputs = makeInputs(B);
  const s = jaxjsStep(jax, { preset, depth, attention, weights, inputs, maskPad: !args.includes('--unmasked-pad') });
  result.tokens_padded = s.tokens;
  const run = () => s.step().item(); // item() runs the whole jitted step

  // the check: the first two steps of this very program against PyTorch's
  if (!args.includes('--no-check')) {
    const losses = [run()];
    const grads = await s.grads();
    losses.push(run());
    const dir = mkdtempSync(join(tmpdir(), 'vitrine-jaxjs-'));
    try {
      const ref = torchReference({ dir, preset, depth, weights, inputs, python: process.env.VITRINE_PYTHON });
      const c = compareWithTorch({ losses, grads }, ref);
      result.check = { ...c, grads: undefined, torch: ref.torch };
      if (!c.ok) throw new Error(`not timed: ${c.why}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const times = [];
  for (let i = 0; i < warmup + steps; i++) {
    const t0 = clock();
    run();
    if (i >= warmup) times.push(clock() - t0);
  }
  const sorted = [...times].sort((a, b) => a - b),
    n = sorted.length;
  Object.assign(result, {
    ms: times.map((x) => +x.toFixed(2)),
    ms_per_step: +(n % 2 ? sorted[n >> 1] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2).toFixed(3),
  });
} catch (e) {
  result.error = String((e && e.message) || e);
  exitCode = 1;
}
console.log(JSON.stringify(result));
process.exit(exitCode);
