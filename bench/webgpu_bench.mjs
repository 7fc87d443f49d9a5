// webgpu_bench.mjs: the WebGPU backend's numbers (issue 27). Reports; never fails on a time.
//  1. the adapter it runs on (SwiftShader here: a CPU rasteriser, meaningless for GPU speed) and
//     the design of every kernel (tiling, workgroup size, workgroup memory, vector width);
//  2. a roofline estimate of a training step on an integrated laptop GPU (2-4 TFLOP/s fp32,
//     50-100 GB/s) from the recorded step itself (`vitrine trace --json`): per kernel the FLOPs
//     and the bytes its operands move, the time at the design's efficiency, the total against
//     the step's FLOPs at the wasm build's measured speed.
//  3. (--step) a whole MAE training step on the GPU (the backend, web/webgpu/backend.js) against
//     the wasm step on 2 threads, interleaved (GPU, wasm, GPU, wasm ...; median of the paired
//     ratios), both from the same state and images, naming the adapter and the CPU.
//   node bench/webgpu_bench.mjs [--preset vit_tiny_patch16_224] [--objective classify] [--batch 64]
//                               [--policy none] [--trace FILE.json] [--cli build/vitrine]
//                               [--wasm-gflops G]   (the 2-thread wasm step's GFLOP/s, measured)
//   node bench/webgpu_bench.mjs --step [--step-config fmnist|small] [--step-batch 8] [--pairs 5]
import { spawnSync } from 'node:child_process';
import { readFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { requestGpu } from '../web/webgpu/device.js';
import { gemmDesign, gemmSplit } from '../web/webgpu/gemm.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const opt = (n, d) => {
  const i = args.indexOf(n);
  return i >= 0 ? args[i + 1] : d;
};
const PRESET = opt('--preset', 'vit_tiny_patch16_224'),
  OBJ = opt('--objective', 'classify');
const BATCH = Number(opt('--batch', 64)),
  POLICY = opt('--policy', 'none');
const P = (s = '') => process.stdout.write(s + '\n');

// ---- 3. a training step, GPU vs wasm on 2 threads, interleaved ------------------------------------
if (args.includes('--step')) {
  const { createVitrine } = await import('../web/vitrine.js');
  const { cpus } = await import('node:os');
  const CONFIGS = {
    fmnist: {
      encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 64, depth: 4, num_heads: 4 },
      decoder_dim: 64,
      decoder_depth: 2,
      decoder_heads: 4,
    },
    small: {
      encoder: { img_size: 16, patch_size: 4, in_chans: 1, embed_dim: 16, depth: 2, num_heads: 2 },
      decoder_dim: 16,
      decoder_depth: 1,
      decoder_heads: 2,
    },
  };
  const name = opt('--step-config', 'fmnist'),
    cfg = CONFIGS[name],
    B = Number(opt('--step-batch', 8)),
    pairs = Number(opt('--pairs', 5));
  const gv = await createVitrine({
    threads: 1,
    backend: 'webgpu',
    gpu: { swiftshader: process.env.VITRINE_WEBGPU !== 'default' },
  });
  const cv = await createVitrine({ threads: 2 });
  const mk = (vt) => {
    const m = vt.createModel({ kind: 'mae', config: cfg });
    m.initWeights(1);
    m.trainerInit({ seed: 2 });
    return m;
  };
  const g = mk(gv),
    c = mk(cv),
    S = cfg.encoder.img_size,
    img = new Float32Array(B * S * S).map((_, i) => Math.sin(i * 0.37));
  const t0 = performance.now();
  await g.trainStepAsync(img, B); // records, compiles the pipelines
  const first = performance.now() - t0;
  c.trainStep(img, B);
  const ratios = [],
    tg = [],
    tc = [];
  for (let i = 0; i < pairs; i++) {
    let t = performance.now();
    await g.trainStepAsync(img, B); // the loss read back: the step is done
    tg.push(performance.now() - t);
    t = performance.now();
    c.trainStep(img, B);
    tc.push(performance.now() - t);
    ratios.push(tg[i] / tc[i]);
  }
  const med = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
  const i = gv.backend.adapter;
  P(`## A training step: WebGPU vs wasm (2 threads), interleaved\n`);
  P(
    `MAE ${name} (${JSON.stringify(cfg.encoder)}), batch ${B}, ${g._backend.step.calls.length} kernel calls, ${g._backend.step.prog.list.length} dispatches`,
  );
  P(
    `adapter: ${i.description || i.device} (${i.vendor} ${i.architecture})${i.software ? ', software: shaders run on the CPU' : ''}; CPU: ${cpus()[0].model}, wasm ${cv.build} on ${cv.threads} threads`,
  );
  P(`first GPU step (recording + pipeline compilation): ${first.toFixed(0)} ms`);
  P(
    `GPU step median ${med(tg).toFixed(1)} ms, wasm step median ${med(tc).toFixed(1)} ms; median of ${pairs} paired ratios GPU / wasm = ${med(ratios).toFixed(2)}`,
  );
  gv.close();
  cv.close();
  process.exit(0);
}

// ---- 1. adapter and design ---------------------------------------------------------------------
let adapter = 'none';
try {
  const gpu = await requestGpu({ swiftshader: process.env.VITRINE_WEBGPU !== 'default' });
  const i = gpu.info;
  adapter =
    `${i.description || i.device} (${i.vendor} ${i.architecture})${
      i.software ? ', a software adapter: ' + 'shaders run on the CPU, its times say nothing of a GPU' : ''
    }; maxBufferSize ${gpu.limits.maxBufferSize}, ` +
    `maxStorageBufferBindingSize ${gpu.limits.maxStorageBufferBindingSize}`;
  gpu.destroy();
} catch (e) {
  adapter = `none (${e.message})`;
}
P(`# WebGPU backend: design and roofline\n\nadapter: ${adapter}\n`);

const design = [
  ['GEMM: ViT-Ti/16 linear layers at batch 64 (M = 12608 rows)', ...Object.values(pick(gemmDesign(12608, 576, 192)))],
  [
    'GEMM: its attention, 192 (image, head) batches of 197x197x64',
    ...Object.values(pick(gemmDesign(197, 197, 64, 192))),
  ],
  ['GEMM: medium products (fewer than 64 of the large tiles)', ...Object.values(pick(gemmDesign(300, 300, 64)))],
  ['GEMM: small products (a side <= 32, or < 16 medium tiles)', ...Object.values(pick(gemmDesign(17, 17, 32, 4)))],
  [
    'LayerNorm fwd, its dinp; attention softmax fwd/bwd; targets',
    '4 rows x 64 lanes',
    '256',
    '1 KiB (row-sum tree)',
    'scalar, coalesced along the row',
  ],
  [
    'column sums (dbias, LayerNorm dw/db, LayerScale dg, token grads)',
    '64 columns x 4 row lanes, chunks of 256 rows',
    '256',
    '1 KiB/term',
    'scalar, coalesced along the row',
  ],
  [
    'whole-vector sums (MSE, grad norm, non-finite flag)',
    '4096 elements a workgroup, then one workgroup',
    '256',
    '1 KiB',
    'scalar',
  ],
  [
    'element-wise (GELU, AdamW, copies, gathers, scatters, im2col)',
    '1 element an invocation',
    '256',
    '-',
    'scalar, coalesced',
  ],
];
function pick(d) {
  return {
    tile: `${d.tile} (per invocation ${d.perThread})`,
    wg: d.workgroup,
    shared: `${d.sharedBytes} B`,
    vec: d.vector,
  };
}
P('| kernel | tiling | workgroup | workgroup memory | vector width |');
P('|---|---|---|---|---|');
for (const r of design) P(`| ${r.join(' | ')} |`);
P(`\nGEMM: C = A B^T with A, B in either layout (strides are uniforms, one pipeline per tile shape);
K advances 16 at a time through workgroup memory, both tiles k-major as vec4 along m / n (padded one
vec4 a row); each k step an invocation reads TM/4 + 1 vec4 and issues TM vec4 fma into named
registers; global loads coalesced along the contiguous index; every load guarded (no size must be a
multiple of a tile). Deterministic: each C element is one invocation's sum over k in order, so the
tile shape never changes a bit; a long reduction (dW over M rows with few output tiles) is split in a
shape-only number of pieces added in order (split-K, no atomics). Attention: S = scale q k^T and
O = P V as batched GEMMs over (image, head) on the strided q/k/v rows, the softmax (max
subtraction, AIM's prefix-causal mask as 0 probabilities) a row kernel; backward: dV, dP = dO V^T
into a workspace of at most 64 MiB (chunks of images), dS = P (dP - rowsum(P dP)) scale, dQ, dK.\n`);

// ---- 2. roofline ---------------------------------------------------------------------------------
let trace;
const tracePath = opt('--trace');
if (tracePath) trace = JSON.parse(readFileSync(tracePath, 'utf8'));
else {
  const cli = opt('--cli', join(ROOT, 'build', 'vitrine'));
  if (!existsSync(cli)) {
    P(`no trace: ${cli} is missing (cmake --build build, or --trace FILE)`);
    process.exit(0);
  }
  const r = spawnSync(
    cli,
    [
      'trace',
      '--preset',
      PRESET,
      '--objective',
      OBJ,
      '--batch',
      String(BATCH),
      '--grad-checkpointing',
      POLICY,
      '--json',
    ],
    { encoding: 'utf8', maxBuffer: 1 << 30 },
  );
  if (r.status !== 0) {
    P(`vitrine trace failed: ${r.stderr}`);
    process.exit(0);
  }
  trace = JSON.parse(r.stdout);
}
const calls = trace.entries.filter((e) => e.call);
// bytes an operand moves: read once (r), written once (w), both (rw)
const opBytes = (o) => (o ? o[2] * (o[3] === 'rw' ? 2 : 1) : 0);
const byKernel = new Map();
for (const e of calls) {
  const k = byKernel.get(e.call) || { calls: 0, flops: 0, bytes: 0, gemmFlops: 0 };
  k.calls++;
  k.flops += e.flops;
  // im2col / col2im_add declare the images up to their last row; they touch one patch row each
  if (e.call === 'im2col') k.bytes += 2 * e.ops[0][2];
  else if (e.call === 'col2im_add') k.bytes += 3 * e.ops[1][2];
  else k.bytes += e.ops.reduce((s, o) => s + opBytes(o), 0);
  if (e.call === 'attention_backward') {
    // + the d-scores workspace: written, read, rewritten, read twice
    const [, , B, T, H] = e.ints;
    k.bytes += 5 * 4 * B * H * T * T;
  }
  byKernel.set(e.call, k);
}
// the design's efficiency: GEMMs of the big tile at 50% of peak (the goal), attention's batched
// small GEMMs at 30%; every other kernel memory-bound at 80% of the bandwidth; 5 us a dispatch
const EFF = { matmul_forward: 0.5, matmul_backward: 0.5, attention_forward: 0.3, attention_backward: 0.3 };
const laptops = [
  ['low', 2e12, 50e9],
  ['high', 4e12, 100e9],
];
P(`## Roofline: ${trace.what} (${PRESET}, ${OBJ})\n`);
P(
  `${calls.length} kernel calls; GPU memory ${(Object.values(trace.regions).reduce((a, b) => a + b, 0) / 2 ** 20).toFixed(0)} MiB of regions\n`,
);
P('| kernel | calls | GFLOP | GB moved | FLOP/B | ms at 2 TFLOP/s, 50 GB/s | ms at 4 TFLOP/s, 100 GB/s |');
P('|---|---|---|---|---|---|---|');
const tot = { flops: 0, bytes: 0, low: 0, high: 0 };
for (const [name, k] of [...byKernel.entries()].sort((a, b) => b[1].flops - a[1].flops)) {
  const t = laptops.map(([, peak, bw]) => Math.max(k.flops / (peak * (EFF[name] || 1)), k.bytes / (bw * 0.8)) * 1e3);
  tot.flops += k.flops;
  tot.bytes += k.bytes;
  tot.low += t[0];
  tot.high += t[1];
  P(
    `| ${name} | ${k.calls} | ${(k.flops / 1e9).toFixed(2)} | ${(k.bytes / 1e9).toFixed(3)} | ${(k.flops / Math.max(k.bytes, 1)).toFixed(1)} | ${t[0].toFixed(1)} | ${t[1].toFixed(1)} |`,
  );
}
const dispatch = calls.length * 1.5 * 5e-3; // ~1.5 dispatches a call, 5 us each
P(
  `| dispatch overhead (~${Math.round(calls.length * 1.5)} dispatches x 5 us) | | | | | ${dispatch.toFixed(1)} | ${dispatch.toFixed(1)} |`,
);
P(
  `| **step** | ${calls.length} | ${(tot.flops / 1e9).toFixed(1)} | ${(tot.bytes / 1e9).toFixed(2)} | | **${(tot.low + dispatch).toFixed(0)}** | **${(tot.high + dispatch).toFixed(0)}** |`,
);
const wasm = Number(opt('--wasm-gflops', 0));
if (wasm > 0) {
  const ms = (tot.flops / (wasm * 1e9)) * 1e3;
  P(
    `\nwasm, 2 threads, at ${wasm} GFLOP/s (--wasm-gflops, as given): ${ms.toFixed(0)} ms a step -> estimated WebGPU speed-up ` +
      `${(ms / (tot.low + dispatch)).toFixed(1)}x (low) to ${(ms / (tot.high + dispatch)).toFixed(1)}x (high); the goal is 10x`,
  );
}
