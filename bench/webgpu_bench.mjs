// webgpu_bench.mjs: the WebGPU backend measured on whatever adapter is present (issue 35). Reports;
// never fails on a time. On a software adapter (SwiftShader: shaders run on the CPU) it is a
// correctness smoke test and says that its times mean nothing for a GPU.
//  1. the adapter, its limits, its measured fp32 multiply-add peak and copy bandwidth
//     (--peak-tflops T: the spec sheet's fp32 peak, used for % of peak instead)
//  2. every distinct GEMM of the ViT-Ti/S/B /16 classify training step at --batch (matmul forward,
//     its backward's dinp and dW products): time, GFLOP/s, % of peak, for the Kernels' GEMM family
//     and (--families) both; each checked against sampled float64 dot products, the two families
//     bit for bit
//  3. attention forward / backward and LayerNorm forward / backward at the step's shapes
//  4. (--step) the whole step on the GPU against the wasm step on 2 threads, interleaved (A B A B),
//     median of the paired ratios
//  5. the roofline estimate of the step per kernel for a laptop integrated GPU (2-4 TFLOP/s fp32,
//     50-100 GB/s), beside the times measured here
//   node bench/webgpu_bench.mjs [--models ti,s,b] [--batch 64] [--reps 10] [--families]
//                               [--peak-tflops T] [--step] [--step-preset NAME] [--step-batch B]
//                               [--pairs 5] [--no-kernels]
// VITRINE_WEBGPU=default asks Dawn for its default adapter (Node); otherwise SwiftShader.
import { cpus, loadavg } from 'node:os';
import { createVitrine, enableNodeRelaxedSimd } from '../web/vitrine.js';
import { requestGpu, adapterName } from '../web/webgpu/device.js';
import { BufferPool } from '../web/webgpu/buffers.js';
import { Kernels, KERNELS, operand } from '../web/webgpu/kernels.js';
import { gemmDesign } from '../web/webgpu/gemm.js';

const args = process.argv.slice(2);
const opt = (n, d) => {
  const i = args.indexOf(n);
  return i >= 0 ? args[i + 1] : d;
};
const flag = (n) => args.includes(n);
// a laptop integrated GPU, low and high: fp32 FLOP/s, bytes/s
const LAPTOPS = [
  [2e12, 50e9],
  [4e12, 100e9],
];
const P = (s = '') => process.stdout.write(s + '\n');
const med = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const fmt = (x, d = 1) => (x == null || !Number.isFinite(x) ? '-' : x.toFixed(d));

await enableNodeRelaxedSimd(); // the wasm side in its fastest build (relaxed SIMD: a V8 flag in Node 20)
const gpu = await requestGpu({ swiftshader: process.env.VITRINE_WEBGPU !== 'default' });
const software = gpu.info.software;
const MODELS = {
  ti: 'vit_tiny_patch16_224',
  s: 'vit_small_patch16_224',
  b: 'vit_base_patch16_224',
};
const models = opt('--models', software ? 'ti' : 'ti,s,b').split(',');
const BATCH = Number(opt('--batch', software ? 1 : 64)),
  REPS = Number(opt('--reps', software ? 1 : 10));
const families = flag('--families') ? ['tiled', 'reg'] : [null];

// ---- 1. the adapter ---------------------------------------------------------------------------------
P(`# WebGPU backend: kernels, step and roofline\n`);
P(`adapter: ${adapterName(gpu.info)}; CPU: ${cpus()[0].model}, load ${loadavg()[0].toFixed(1)}`);
P(
  `limits: maxBufferSize ${gpu.limits.maxBufferSize}, maxStorageBufferBindingSize ${gpu.limits.maxStorageBufferBindingSize}, ` +
    `workgroup memory ${gpu.limits.maxComputeWorkgroupStorageSize} B, ${gpu.limits.maxComputeInvocationsPerWorkgroup} invocations`,
);
if (software)
  P(
    `\n**A software adapter: shaders run on the CPU. Every time below measures a CPU rasteriser, not a GPU: ` +
      `this run is a correctness smoke test of the kernels at these shapes, its speeds mean nothing.**`,
  );

const kernelsOf = new Map();
const kernels = (family) => {
  const k = family || 'auto';
  if (!kernelsOf.has(k)) kernelsOf.set(k, new Kernels(gpu, { gemm: k }));
  return kernelsOf.get(k);
};
const pool = new BufferPool(gpu);
const done = () => gpu.device.queue.onSubmittedWorkDone();

// one program of `reps` dispatch lists, timed after a warm-up run: ms per list
async function timeProgram(build, reps) {
  const prog = build(reps);
  await prog.build();
  prog.run();
  await done();
  const t = performance.now();
  prog.run();
  await done();
  gpu.check();
  const ms = (performance.now() - t) / reps;
  prog.destroy();
  return ms;
}

// measured peaks: independent multiply-add chains (8 vec4 an invocation), and a buffer copy
async function peaks() {
  const n = software ? 1 << 16 : 1 << 22,
    iters = software ? 64 : 256,
    buf = await pool.storage(n * 4, 'peak');
  const fma = `@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = g.y * nwg.x * 256u + g.x;
  let s = vec4<f32>(f32(i & 7u) * 1e-3);
${Array.from({ length: 8 }, (_, j) => `  var a${j} = s + vec4<f32>(${j}.0);`).join('\n')}
  let m = vec4<f32>(0.999);
  for (var k = 0u; k < u.iters; k++) {
${Array.from({ length: 8 }, (_, j) => `    a${j} = fma(a${j}, m, s);`).join('\n')}
  }
  st_o(i, ${Array.from({ length: 8 }, (_, j) => `a${j}.x + a${j}.w`).join(' + ')});
}`;
  const grid = [Math.min(n / 256, 32768), Math.ceil(n / 256 / 32768), 1];
  const ms = await timeProgram((reps) => {
    const p = kernels().program('peak fma');
    for (let r = 0; r < reps; r++) p.dispatch('peak_fma', { o: operand(buf, 0, n) }, fma, { iters }, {}, grid);
    return p;
  }, 3);
  const flops = n * iters * 8 * 4 * 2;
  const half = n / 2;
  const copy = `@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = g.y * nwg.x * 256u + g.x;
  if (i < u.n) { st_d(i, ld_s(i)); }
}`;
  const cgrid = [Math.min(half / 256, 32768), Math.ceil(half / 256 / 32768), 1];
  const cms = await timeProgram((reps) => {
    const p = kernels().program('peak copy');
    for (let r = 0; r < reps; r++)
      p.dispatch('peak_copy', { s: operand(buf, 0, half), d: operand(buf, half, half) }, copy, { n: half }, {}, cgrid);
    return p;
  }, 3);
  pool.release(buf);
  return { gflops: flops / ms / 1e6, gbs: (2 * half * 4) / cms / 1e6 };
}
const peak = await peaks();
const givenPeak = Number(opt('--peak-tflops', 0)) * 1e3;
const PEAK = givenPeak || peak.gflops;
P(
  `measured: fp32 multiply-add ${fmt(peak.gflops, 0)} GFLOP/s, copy ${fmt(peak.gbs, 1)} GB/s` +
    (givenPeak ? `; % of peak below: of ${givenPeak} GFLOP/s (--peak-tflops)` : '; % of peak below: of the measured'),
);

// ---- the step's calls -------------------------------------------------------------------------------
const vt = await createVitrine({ threads: 1 });
const contract = vt.manifest.kernels;
// the operand names of a kernel, in the contract's order (its entries are [name, type, access, length])
const opNames = (call) => contract[call].ops.map(([n]) => n);
// the recorded classify step of `preset` at `batch` as the GPU records it (whole rows); when the wasm
// recorder cannot hold the arena, batch 1 with the rows / images scaled (the calls are the same)
function stepCalls(preset, batch) {
  const m = vt.createModel({ kind: 'timm', preset, config: { num_classes: 1000 } });
  try {
    m.trainerInit({});
    const rec = (b) => m.recordStep({ batch: b, labels: new Array(b).fill(0) });
    try {
      return { trace: rec(batch), scaled: 1 };
    } catch {
      return { trace: rec(1), scaled: batch };
    }
  } finally {
    m.dispose();
  }
}
// a call's integer arguments at `scale` x the recorded batch
function scaleInts(call, ints, s) {
  const I = { ...ints };
  if (s === 1) return I;
  if (call.startsWith('matmul') || call.startsWith('layernorm')) I.M *= s;
  if (call.startsWith('attention')) I.B *= s;
  return I;
}
const named = (call, e, scale) => {
  const sig = contract[call],
    ints = Object.fromEntries(sig.ints.map((n, i) => [n, e.ints[i]])),
    floats = Object.fromEntries(sig.floats.map((n, i) => [n, e.floats[i]]));
  return { ints: scaleInts(call, ints, scale), floats, present: sig.ops.map((_, i) => !!e.ops[i]) };
};
// each operand's elements for these ints (the contract's lengths, the kernels' layouts)
function operandLengths(call, I) {
  const { M, K, N, D, B, T, H, hd, qk_rs, v_rs } = I;
  const ext = (rows, cols, rs) => (rows - 1) * rs + cols;
  switch (call) {
    case 'matmul_forward':
      return { out: M * N, inp: M * K, w: N * K, bias: N };
    case 'matmul_backward':
      return { dinp: M * K, dw: N * K, dbias: N, dout: M * N, inp: M * K, w: N * K };
    case 'layernorm_forward':
      return { out: M * D, mean: M, rstd: M, inp: M * D, w: D, b: D };
    case 'layernorm_backward':
      return { dinp: M * D, dw: D, db: D, dout: M * D, inp: M * D, w: D, mean: M, rstd: M };
    case 'attention_forward':
      return {
        out: B * T * H * hd,
        att: B * H * T * T,
        scratch: 1,
        q: ext(B * T, H * hd, qk_rs),
        k: ext(B * T, H * hd, qk_rs),
        v: ext(B * T, H * hd, v_rs),
        causal_mask: B * T,
      };
    case 'attention_backward':
      return {
        dq: ext(B * T, H * hd, qk_rs),
        dk: ext(B * T, H * hd, qk_rs),
        dv: ext(B * T, H * hd, v_rs),
        scratch: 1,
        dout: B * T * H * hd,
        att: B * H * T * T,
        q: ext(B * T, H * hd, qk_rs),
        k: ext(B * T, H * hd, qk_rs),
        v: ext(B * T, H * hd, v_rs),
      };
  }
  throw new Error(call);
}
const rand = (n, seed) => {
  let x = seed * 2654435761 || 1;
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    a[i] = ((x >>> 0) / 4294967296) * 2 - 1;
  }
  return a;
};

// one call on buffers of its own (random inputs, zero outputs): { ms, out: { name: Float32Array } }
async function runCall(call, I, floats, present, { family = null, reps = REPS, read = [] } = {}) {
  const lens = operandLengths(call, I),
    names = opNames(call),
    bufs = {},
    data = {};
  for (const [i, n] of names.entries()) {
    if (!present[i] || n === 'scratch' || n === 'causal_mask') continue;
    bufs[n] = await pool.storage(lens[n] * 4, n);
    data[n] =
      /^(out|dinp|dw|dbias|db|dq|dk|dv|mean|rstd)$/.test(n) && call !== 'layernorm_backward'
        ? new Float32Array(lens[n])
        : rand(lens[n], i + 1);
    if (call === 'layernorm_backward' && n === 'rstd') data[n] = data[n].map((v) => 1 + Math.abs(v));
    pool.upload(bufs[n], 0, data[n]);
  }
  const ops = Object.fromEntries(names.map((n) => [n, bufs[n] ? operand(bufs[n], 0, lens[n]) : null]));
  const ms = await timeProgram((r) => {
    const p = kernels(family).program(call);
    for (let i = 0; i < r; i++) KERNELS[call](p, ops, I, floats);
    return p;
  }, reps);
  const out = {};
  if (read.length) {
    // one more run from the initial data: what the call computes once
    for (const n of read) pool.upload(bufs[n], 0, data[n]);
    const p = kernels(family).program(call);
    KERNELS[call](p, ops, I, floats);
    await p.build();
    p.run();
    for (const n of read) out[n] = new Float32Array(await pool.read(bufs[n]));
    p.destroy();
  }
  for (const b of Object.values(bufs)) pool.release(b);
  return { ms, out, data };
}

// sampled float64 check of a GEMM: C(m, n) = sum_k A(m, k) B(n, k) (+ bias); err as the parity rule
function gemmCheck(kind, I, data, out) {
  const { M, K, N } = I,
    S = 48;
  let e = 0,
    mx = 0;
  for (let s = 0; s < S; s++) {
    let got,
      want = 0;
    if (kind === 'forward') {
      const m = (s * 7919) % M,
        n = (s * 104729) % N;
      for (let k = 0; k < K; k++) want += data.inp[m * K + k] * data.w[n * K + k];
      if (data.bias) want += data.bias[n];
      got = out.out[m * N + n];
    } else if (kind === 'dinp') {
      const m = (s * 7919) % M,
        k = (s * 104729) % K;
      for (let n = 0; n < N; n++) want += data.dout[m * N + n] * data.w[n * K + k];
      got = out.dinp[m * K + k];
    } else {
      const n = (s * 7919) % N,
        k = (s * 104729) % K;
      for (let m = 0; m < M; m++) want += data.dout[m * N + n] * data.inp[m * K + k];
      got = out.dw[n * K + k];
    }
    e = Math.max(e, Math.abs(got - want));
    mx = Math.max(mx, Math.abs(want));
  }
  return e / mx;
}
const sameBits = (a, b) => a.length === b.length && Buffer.compare(Buffer.from(a.buffer), Buffer.from(b.buffer)) === 0;

const stepsOf = Object.fromEntries(models.map((k) => [k, stepCalls(MODELS[k], BATCH)]));
if (!flag('--no-kernels')) {
  // ---- 2. GEMMs ----------------------------------------------------------------------------------------
  P(`\n## GEMMs of the classify training step, batch ${BATCH} (${REPS} runs each, one submission)\n`);
  P(
    'A GEMM C[M,N] = A[M,K] B[N,K]^T: matmul forward (+ bias), its backward as dinp (C = dout w) and dW ' +
      '(C += dout^T inp, both transposed). err: sampled float64 dot products (the parity measure); ' +
      'families: the tiled and register GEMMs give the same bits.\n',
  );
  const famCols = families[0]
    ? families.map((f) => `${f} ms | ${f} GFLOP/s | ${f} % peak`).join(' | ')
    : 'ms | GFLOP/s | % of peak';
  P(
    'tile: what a GPU runs (the tiled family by shape; split-K pieces); roofline: the ideal time on a laptop iGPU, ' +
      'max(FLOPs / peak, bytes / bandwidth) at 2 TFLOP/s and 50 GB/s, and at 4 TFLOP/s and 100 GB/s.\n',
  );
  P(`| model | product | M | N | K | calls | tile | ${famCols} | err | families | roofline ms |`);
  P(`|---|---|---|---|---|---|---|${families.map(() => '---|---|---|').join('')}---|---|---|`);
  const other = [];
  for (const key of models) {
    const preset = MODELS[key];
    const { trace, scaled } = stepsOf[key];
    if (scaled > 1)
      P(
        `| ${preset} | (recorded at batch 1, rows x ${scaled}: the wasm recorder cannot hold batch ${BATCH}'s arena) |`,
      );
    const seen = new Map();
    for (const e of trace.entries) {
      if (!e.call || !/^(matmul|attention|layernorm)_/.test(e.call)) continue;
      const k = JSON.stringify([e.call, e.ints, e.ops.map((o) => !!o)]);
      seen.set(k, { e, n: (seen.get(k)?.n || 0) + 1 });
    }
    for (const { e, n } of seen.values()) {
      const { ints, floats, present } = named(e.call, e, scaled);
      if (!e.call.startsWith('matmul')) {
        other.push({ key, call: e.call, ints, floats, present, n });
        continue;
      }
      const { M, K, N } = ints;
      const products =
        e.call === 'matmul_forward'
          ? [['forward', present, ['out'], [M, N, K]]]
          : [
              ['dinp', present.map((p, i) => p && i !== 1 && i !== 2), ['dinp'], [M, K, N]],
              ['dW', present.map((p, i) => p && i !== 0 && i !== 2), ['dw'], [N, K, M]],
            ].filter(([, pr]) => pr[pr[0] ? 0 : 1]);
      for (const [kind, pr, read, [gm, gn, gk]] of products) {
        const cols = [],
          outs = [];
        let err = null;
        for (const f of families) {
          const r = await runCall(e.call, ints, floats, pr, { family: f, read });
          const gf = (2 * gm * gn * gk) / r.ms / 1e6;
          cols.push(fmt(r.ms, 3), fmt(gf, 1), fmt((100 * gf) / PEAK, 1));
          outs.push(r.out[read[0]]);
          err ??= gemmCheck(kind === 'dW' ? 'dw' : kind, ints, r.data, r.out);
        }
        const fam = families.length > 1 ? (sameBits(outs[0], outs[1]) ? 'same bits' : '**DIFFER**') : '';
        const d = gemmDesign(gm, gn, gk, 1);
        const bytes = 4 * (gm * gk + gn * gk + gm * gn * (kind === 'forward' ? 1 : 2)),
          roof = LAPTOPS.map(([pk, bw]) => fmt(Math.max((2 * gm * gn * gk) / pk, bytes / bw) * 1e3, 3)).join(' / ');
        P(
          `| ${preset.replace('_patch16_224', '/16')} | ${e.call === 'matmul_forward' ? 'forward' : kind} | ${gm} | ${gn} | ${gk} | ${n} | ${d.tile}${d.splitK > 1 ? ` split-K ${d.splitK}` : ''} | ${cols.join(' | ')} | ${err.toExponential(1)}${err > 1e-4 ? ' **over 1e-4**' : ''} | ${fam} | ${roof} |`,
        );
      }
    }
  }

  // ---- 3. attention and LayerNorm ------------------------------------------------------------------
  P(`\n## Attention and LayerNorm at the step's shapes, batch ${BATCH}\n`);
  P(
    "Attention by the contract's FLOPs (4 B H T^2 hd + 5 B H T^2 forward, 8 B H T^2 hd + 5 B H T^2 backward); " +
      'LayerNorm by the bytes its operands move (GB/s; forward reads x and writes y, backward reads x, dy and writes dx).\n',
  );
  P('| model | kernel | shape | calls | ms | GFLOP/s | GB/s | finite |');
  P('|---|---|---|---|---|---|---|---|');
  for (const { key, call, ints, floats, present, n } of other) {
    const read =
      call === 'attention_forward'
        ? ['out']
        : call === 'attention_backward'
          ? ['dq']
          : call === 'layernorm_forward'
            ? ['out']
            : ['dinp'];
    const r = await runCall(call, ints, floats, present, {
      read: read.filter((x) => present[opNames(call).indexOf(x)]),
    });
    const { B, T, H, hd, M, D } = ints;
    const flops =
      call === 'attention_forward'
        ? 4 * B * H * T * T * hd + 5 * B * H * T * T
        : call === 'attention_backward'
          ? 8 * B * H * T * T * hd + 5 * B * H * T * T
          : 0;
    const bytes = call === 'layernorm_forward' ? 8 * M * D : call === 'layernorm_backward' ? 12 * M * D : 0;
    const o = Object.values(r.out)[0];
    const finite = o ? o.every(Number.isFinite) : true;
    P(
      `| ${MODELS[key].replace('_patch16_224', '/16')} | ${call} | ${call.startsWith('attention') ? `B ${B} T ${T} H ${H} hd ${hd}` : `M ${M} D ${D}`} | ${n} | ${fmt(r.ms, 3)} | ${flops ? fmt(flops / r.ms / 1e6, 1) : '-'} | ${bytes ? fmt(bytes / r.ms / 1e6, 1) : '-'} | ${finite ? 'yes' : '**no**'} |`,
    );
  }
}

// ---- 4. the whole step, GPU vs wasm on 2 threads, interleaved ----------------------------------------
if (flag('--step')) {
  const preset = opt('--step-preset', 'vit_tiny_patch16_224'),
    B = Number(opt('--step-batch', software ? 1 : 32)),
    pairs = Number(opt('--pairs', software ? 3 : 7));
  const gv = await createVitrine({
    threads: 1,
    backend: 'webgpu',
    gpu: { swiftshader: process.env.VITRINE_WEBGPU !== 'default' },
  });
  const cv = await createVitrine({ threads: 2 });
  const mk = (v) => {
    const m = v.createModel({ kind: 'timm', preset, config: { num_classes: 1000 } });
    m.initWeights(1);
    m.trainerInit({ seed: 2 });
    return m;
  };
  const g = mk(gv),
    c = mk(cv),
    img = new Float32Array(B * 3 * 224 * 224).map((_, i) => Math.sin(i * 0.37)),
    labels = Array.from({ length: B }, (_, i) => i % 1000);
  let t = performance.now();
  await g.trainStepLabelsAsync(img, labels); // records, compiles the pipelines
  const first = performance.now() - t;
  c.trainStepLabels(img, labels);
  const tg = [],
    tc = [],
    ratios = [];
  for (let i = 0; i < pairs; i++) {
    t = performance.now();
    await g.trainStepLabelsAsync(img, labels); // the loss read back: the step is done
    tg.push(performance.now() - t);
    t = performance.now();
    c.trainStepLabels(img, labels);
    tc.push(performance.now() - t);
    ratios.push(tg[i] / tc[i]);
  }
  P(`\n## The ${preset} classify step: WebGPU vs wasm on 2 threads, interleaved (GPU, wasm, GPU, wasm, ...)\n`);
  P(
    `batch ${B}, ${g._backend.step.calls.length} kernel calls, ${g._backend.step.prog.list.length} dispatches, ` +
      `${g._backend.step.prog.pipelineCount} pipelines; wasm ${cv.build} on ${cv.threads} threads; load ${loadavg()[0].toFixed(1)}`,
  );
  P(`first GPU step (recording, pipeline compilation): ${fmt(first, 0)} ms`);
  P(
    `GPU step median ${fmt(med(tg), 1)} ms, wasm step median ${fmt(med(tc), 1)} ms; median of ${pairs} paired ratios ` +
      `GPU / wasm = ${fmt(med(ratios), 2)} [${fmt(Math.min(...ratios), 2)}-${fmt(Math.max(...ratios), 2)}]` +
      (software ? ' (a software adapter: meaningless for a GPU)' : ''),
  );
  g.dispose();
  c.dispose();
  gv.close();
  cv.close();
}

// ---- 5. roofline ------------------------------------------------------------------------------------
// per kernel of the step: FLOPs (the trace's) and the bytes its operands move (read once, written
// once; the attention backward's d-scores round trip added), the time at the design's efficiency
// on a laptop iGPU: GEMMs 50% of the fp32 peak, attention (batched small GEMMs + softmax) 30%,
// memory-bound kernels 80% of the bandwidth; 5 us a dispatch
const EFF = { matmul_forward: 0.5, matmul_backward: 0.5, attention_forward: 0.3, attention_backward: 0.3 };
const roofGemms = [];
for (const key of models) {
  const { trace, scaled } = stepsOf[key];
  const byKernel = new Map();
  // a trace recorded at batch 1 for `scaled` images: what is in the activations or the inputs
  // grows with the batch, what is in the parameters, gradients and optimizer state does not
  const PER_MODEL = new Set(['params', 'grads', 'adam_m', 'adam_v', 'scalars']);
  const grows = (o) => o && !PER_MODEL.has(o[0]);
  const opBytes = (o) => (o ? o[2] * (o[3] === 'rw' ? 2 : 1) * (grows(o) ? scaled : 1) : 0);
  for (const e of trace.entries) {
    if (!e.call) continue;
    const k = byKernel.get(e.call) || { calls: 0, flops: 0, bytes: 0 };
    k.calls++;
    k.flops += e.flops * (e.ops.some(grows) ? scaled : 1);
    // im2col / col2im_add declare the images up to their last row; they touch one patch row each
    if (e.call === 'im2col') k.bytes += 2 * e.ops[0][2] * scaled;
    else if (e.call === 'col2im_add') k.bytes += 3 * e.ops[1][2] * scaled;
    else k.bytes += e.ops.reduce((s, o) => s + opBytes(o), 0);
    if (e.call === 'attention_backward') {
      // + the d-scores workspace: written, read, rewritten, read twice
      const [, , Bq, T, H] = e.ints;
      k.bytes += 5 * 4 * Bq * scaled * H * T * T;
    }
    byKernel.set(e.call, k);
  }
  P(`\n## Roofline: ${MODELS[key]} classify step, batch ${BATCH}, on a laptop iGPU\n`);
  P(
    "ideal: max(FLOPs / peak, bytes / bandwidth); expected: at the design's efficiency (GEMMs 50% of the peak, " +
      'attention 30%, the rest 80% of the bandwidth); ms at 2 TFLOP/s, 50 GB/s / at 4 TFLOP/s, 100 GB/s.\n',
  );
  P('| kernel | calls | GFLOP | GB moved | FLOP/B | bound | ideal ms | expected ms |');
  P('|---|---|---|---|---|---|---|---|');
  const tot = { flops: 0, bytes: 0, ideal: [0, 0], t: [0, 0] };
  for (const [name, k] of [...byKernel.entries()].sort((a, b) => b[1].flops - a[1].flops)) {
    const ideal = LAPTOPS.map(([pk, bw]) => Math.max(k.flops / pk, k.bytes / bw) * 1e3);
    const t = LAPTOPS.map(([pk, bw]) => Math.max(k.flops / (pk * (EFF[name] || 1)), k.bytes / (bw * 0.8)) * 1e3);
    const bound = k.flops / LAPTOPS[0][0] > k.bytes / LAPTOPS[0][1] ? 'compute' : 'memory';
    tot.flops += k.flops;
    tot.bytes += k.bytes;
    t.forEach((x, i) => (tot.t[i] += x));
    ideal.forEach((x, i) => (tot.ideal[i] += x));
    P(
      `| ${name} | ${k.calls} | ${fmt(k.flops / 1e9, 2)} | ${fmt(k.bytes / 1e9, 3)} | ${fmt(k.flops / Math.max(k.bytes, 1), 1)} | ${bound} | ${fmt(ideal[0], 2)} / ${fmt(ideal[1], 2)} | ${fmt(t[0], 2)} / ${fmt(t[1], 2)} |`,
    );
  }
  const calls = trace.entries.filter((e) => e.call).length,
    disp = calls * 1.5 * 5e-3;
  roofGemms.push({ key, trace, scaled });
  P(`| dispatch overhead (~${Math.round(calls * 1.5)} x 5 us) | | | | | | | ${fmt(disp, 1)} / ${fmt(disp, 1)} |`);
  P(
    `| **step** | ${calls} | ${fmt(tot.flops / 1e9, 1)} | ${fmt(tot.bytes / 1e9, 2)} | | | **${fmt(tot.ideal[0], 0)} / ${fmt(tot.ideal[1], 0)}** | **${fmt(tot.t[0] + disp, 0)} / ${fmt(tot.t[1] + disp, 0)}** |`,
  );
}
// every GEMM of the step with its tile and its ideal time: what section 2 measures on a GPU
P(`\n## Roofline of each GEMM of the step, batch ${BATCH} (ideal ms at 2 TFLOP/s, 50 GB/s / at 4 TFLOP/s, 100 GB/s)\n`);
P('| model | product | M | N | K | calls | tile (workgroup, per invocation) | FLOP/B | ideal ms |');
P('|---|---|---|---|---|---|---|---|---|');
for (const { key, trace, scaled } of roofGemms) {
  const seen = new Map();
  for (const e of trace.entries) {
    if (e.call !== 'matmul_forward' && e.call !== 'matmul_backward') continue;
    const { ints, present } = named(e.call, e, scaled),
      { M, K, N } = ints;
    const list =
      e.call === 'matmul_forward'
        ? [['forward', M, N, K, 1]]
        : [...(present[0] ? [['dinp', M, K, N, 2]] : []), ...(present[1] ? [['dW', N, K, M, 2]] : [])];
    for (const [kind, gm, gn, gk, io] of list) {
      const k = JSON.stringify([kind, gm, gn, gk]);
      seen.set(k, { kind, gm, gn, gk, io, n: (seen.get(k)?.n || 0) + 1 });
    }
  }
  for (const { kind, gm, gn, gk, io, n } of seen.values()) {
    const d = gemmDesign(gm, gn, gk, 1),
      fl = 2 * gm * gn * gk,
      by = 4 * (gm * gk + gn * gk + io * gm * gn);
    P(
      `| ${MODELS[key].replace('_patch16_224', '/16')} | ${kind} | ${gm} | ${gn} | ${gk} | ${n} | ${d.tile}${d.splitK > 1 ? ` split-K ${d.splitK}` : ''} (${d.workgroup}, ${d.perThread}) | ${fmt(fl / by, 0)} | ${LAPTOPS.map(([pk, bw]) => fmt(Math.max(fl / pk, by / bw) * 1e3, 3)).join(' / ')} |`,
    );
  }
}
pool.destroy();
gpu.destroy();
vt.close();
