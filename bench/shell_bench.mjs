// shell_bench.mjs: forward (needGrad) + backward of the encode step through the JS shell
// (web/vitrine.js, Emscripten SIMD128 build) in Node, to set beside the same C code run as a WASI
// command (train_bench-simd.wasm): the shell's overhead (copies in and out) on a training step.
// The shell has no optimizer call, so AdamW is not in this number. One JSON line per policy.
//   node bench/shell_bench.mjs [--preset NAME] [--batch B] [--policy P]... [--repeat R]
import { createVitrine } from '../web/vitrine.js';

const args = process.argv.slice(2);
const opt = (n, d) => { const i = args.indexOf(n); return i >= 0 ? args[i + 1] : d; };
const preset = opt('--preset', 'vit_tiny_patch16_224'), B = Number(opt('--batch', 1));
const repeat = Number(opt('--repeat', 3));
const policies = args.flatMap((a, i) => (a === '--policy' ? [args[i + 1]] : []));
const vt = await createVitrine({ wasm: 'simd', threads: 1 }); // one thread: beside the WASI command (bench/threads_bench.mjs measures threads)
const model = vt.createModel({ preset, kind: 'lightly' });
if (typeof model.initWeights === 'function') model.initWeights(1);
const { img, chans, dim } = model.dims;
const images = new Float32Array(B * chans * img * img).map(() => Math.random() * 2 - 1);
const T = (img / model.dims.patch) ** 2 + model.dims.prefix;
const G = new Float32Array(B * T * dim).map(() => (Math.random() - 0.5) * 2e-3);
for (const policy of policies.length ? policies : ['none']) {
  model.setGradCheckpointing(policy);
  const times = [];
  for (let i = 0; i < repeat + 2; i++) { // 2 warm-up steps: V8 tiers the wasm up
    const t0 = performance.now();
    model.encode(images, { needGrad: true });
    model.backward({ douts: [G] });
    model.zeroGrad();
    if (i >= 2) times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  const n = times.length, ms = n % 2 ? times[n >> 1] : (times[n / 2 - 1] + times[n / 2]) / 2;
  const mem = model.memory();
  console.log(JSON.stringify({ build: 'shell-simd', model: preset, objective: 'encode', batch: B, policy, repeat,
    fwd_bwd_ms: +ms.toFixed(3), activation_bytes: mem.arena.peak }));
}
model.dispose();
