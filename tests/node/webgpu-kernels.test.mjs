// The WGSL kernels (web/webgpu/) on the SwiftShader adapter against float64 references, on edge
// shapes (sizes 1 and 3, sizes that are not multiples of a tile, zero), within the parity rule
// (max|ours - expect| / max|expect| <= 1e-4; the measured figures are printed), and bit for bit
// from one run to the next. Needs an adapter: fails, saying what is missing, when there is none.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  testGpu,
  Harness,
  rand,
  rel,
  sameBits,
  erf64,
  gelu64,
  geluGrad64,
  matmulRef,
  matmulBackwardRef,
  layernormRef,
  layernormBackwardRef,
  attentionRef,
  contractOf,
  gpuAndWasm,
} from './webgpu-util.mjs';
import { createVitrine } from '../../web/vitrine.js';
import { WASM_DIR } from './util.mjs';
import {
  matmul_forward,
  matmul_backward,
  layernorm_forward,
  layernorm_backward,
  gelu_forward,
  gelu_backward,
  attention_forward,
  attention_backward,
  KERNELS,
} from '../../web/webgpu/kernels.js';
import { ERF_WGSL } from '../../web/webgpu/elementwise.js';
import { gemm, gemmSplit } from '../../web/webgpu/gemm.js';
import { GpuError } from '../../web/webgpu/device.js';
import { execFileSync } from 'node:child_process';

const TOL = 1e-4; // parity-format.md
let gpu, H, HF, vt, contract;
// the two GEMM families (gemm.js: workgroup-memory tiles for GPUs, register tiles for software
// adapters): every GEMM test runs on both, and both give the same bits
const FAMILIES = ['tiled', 'reg'];
const worst = {}; // kernel -> largest error measured (printed at the end)
const worstWasm = {}; // the same against the wasm build
function check(name, got, want, tol = TOL, into = worst) {
  const e = rel(got, want);
  into[name] = Math.max(into[name] || 0, e);
  assert.ok(e <= tol, `${name}: error ${e.toExponential(2)} > ${tol}`);
}

before(async () => {
  gpu = await testGpu();
  HF = Object.fromEntries(FAMILIES.map((f) => [f, new Harness(gpu, { gemm: f })]));
  H = HF.reg;
  vt = await createVitrine({ wasm: 'simd', threads: 1, wasmDir: WASM_DIR });
  contract = contractOf(vt);
});
after(() => {
  console.log(
    '# WebGPU kernels on',
    gpu?.info.description,
    '- max error vs float64:',
    Object.entries(worst)
      .map(([k, v]) => `${k} ${v.toExponential(1)}`)
      .join(', '),
    '- vs the wasm build:',
    Object.entries(worstWasm)
      .map(([k, v]) => `${k} ${v.toExponential(1)}`)
      .join(', '),
  );
  gpu?.destroy();
  vt?.close();
});

for (const family of FAMILIES)
  test(`${family} GEMMs: matmul forward: tile edges, bias or none, both binding layouts`, async () => {
    const H = HF[family];
    // (M, K, N): ones, threes, not multiples of 64x64x16 tiles, zero rows
    for (const [M, K, N, shared] of [
      [1, 1, 1, true],
      [3, 3, 3, false],
      [37, 29, 70, true],
      [65, 17, 3, true],
      [0, 5, 4, true],
    ]) {
      for (const bias of [true, false]) {
        const x = rand(M * K, 1),
          w = rand(N * K, 2),
          b = rand(N, 3),
          out = rand(M * N, 4);
        const r = await H.run(
          { x, w, b, out },
          (p, o) =>
            matmul_forward(p, { out: o('out'), inp: o('x'), w: o('w'), bias: bias ? o('b') : null }, { M, K, N }),
          { shared },
        );
        check('matmul_forward', r.out, matmulRef(x, w, bias ? b : null, M, K, N));
        assert.ok(sameBits(r.x, x) && sameBits(r.w, w) && sameBits(r.b, b), 'inputs untouched');
      }
    }
    // every tile shape (chosen by the problem's shape: 32x32, 64x64, 128x64 with 8x4 a invocation)
    // gives the same bits
    const [M, K, N] = [200, 37, 70],
      x = rand(M * K, 5),
      w = rand(N * K, 6),
      b = rand(N, 7);
    const arrays = {
      x,
      w,
      b,
      o32: new Float32Array(M * N),
      o64: new Float32Array(M * N),
      o128: new Float32Array(M * N),
      oreg: new Float32Array(M * N),
    };
    const r = await H.run(arrays, (p, o) => {
      for (const tile of [32, 64, 128, 'reg'])
        gemm(p, { a: o('x'), b: o('w'), c: o(`o${tile}`), bias: o('b'), M, N, K, lda: K, ldb: K, ldc: N, tile });
    });
    check('matmul_forward', r.o128, matmulRef(x, w, b, M, K, N));
    assert.ok(
      sameBits(r.o64, r.o128) && sameBits(r.o32, r.o128) && sameBits(r.oreg, r.o128),
      'tile shapes agree bit for bit',
    );
  });

for (const family of FAMILIES)
  test(`${family} GEMMs: matmul backward: accumulates into dinp, dw, dbias; each optional; split-K partials`, async () => {
    const H = HF[family];
    assert.ok(gemmSplit(30, 20, 1500, 1).S > 1, 'the dw of M = 1500 rows takes the split-K path');
    for (const [M, K, N] of [
      [1, 1, 1],
      [3, 5, 7],
      [67, 33, 65],
      [1500, 20, 30],
      [0, 3, 3],
    ]) {
      const dout = rand(M * N, 5),
        x = rand(M * K, 6),
        w = rand(N * K, 7);
      const ref = matmulBackwardRef(dout, x, w, M, K, N);
      const di0 = rand(M * K, 8, 0.5),
        dw0 = rand(N * K, 9, 0.5),
        db0 = rand(N, 10, 0.5);
      const r = await H.run({ dout, x, w, di: di0, dw: dw0, db: db0 }, (p, o) =>
        matmul_backward(
          p,
          { dinp: o('di'), dw: o('dw'), dbias: o('db'), dout: o('dout'), inp: o('x'), w: o('w') },
          { M, K, N },
        ),
      );
      const plus = (a, b) => a.map((v, i) => v + b[i]);
      check('matmul_backward', r.di, plus(Float64Array.from(di0), ref.dinp));
      check('matmul_backward', r.dw, plus(Float64Array.from(dw0), ref.dw));
      check('matmul_backward', r.db, plus(Float64Array.from(db0), ref.db));
      // from zero: the gradients alone (the precision measure); null operands: untouched
      const z = await H.run(
        { dout, x, w, di: new Float32Array(M * K), dw: new Float32Array(N * K), db: dw0.slice(0, N) },
        (p, o) =>
          matmul_backward(
            p,
            { dinp: o('di'), dw: o('dw'), dbias: null, dout: o('dout'), inp: o('x'), w: o('w') },
            { M, K, N },
          ),
      );
      check('matmul_backward', z.di, ref.dinp);
      check('matmul_backward', z.dw, ref.dw);
      assert.ok(sameBits(z.db, dw0.slice(0, N)), 'a null dbias is not written');
    }
  });

// issue 35: the MLP's second product of one ViT-S/16 image (K = 4 x 384 = 1536 over 197 rows, few
// output tiles) takes split-K and has a bias: it was refused ('split-K without bias / alpha only')
for (const family of FAMILIES)
  test(`${family} GEMMs: split-K with a bias, alpha, accumulation and a strided C: the epilogue of a whole-k tile, the same bits every run`, async () => {
    const H = HF[family];
    const [M, K, N] = [197, 1536, 384];
    assert.ok(gemmSplit(M, N, K, 1).S > 1, 'ViT-S/16 fc2 at batch 1 splits k');
    const x = rand(M * K, 21),
      w = rand(N * K, 22),
      b = rand(N, 23);
    const fwd = () =>
      H.run({ x, w, b, out: new Float32Array(M * N) }, (p, o) =>
        matmul_forward(p, { out: o('out'), inp: o('x'), w: o('w'), bias: o('b') }, { M, K, N }),
      );
    const r1 = await fwd(),
      r2 = await fwd();
    check('matmul_forward', r1.out, matmulRef(x, w, b, M, K, N));
    assert.ok(sameBits(r1.out, r2.out), 'split-K gives the same bits on every run');
    // alpha, bias and += into every other column of a C twice as wide (ldc = 2N): the columns between
    // are untouched; the split and the whole-k tile agree within the rule (other grouping of the sum)
    const alpha = 0.125,
      c0 = rand(M * 2 * N, 24, 0.5);
    const r = await H.run({ x, w, b, c: c0 }, (p, o) =>
      gemm(p, { a: o('x'), b: o('w'), c: o('c'), bias: o('b'), M, N, K, lda: K, ldb: K, ldc: 2 * N, alpha, acc: true }),
    );
    const ref = matmulRef(x, w, b, M, K, N),
      want = Float64Array.from(c0);
    for (let m = 0; m < M; m++)
      for (let n = 0; n < N; n++) want[m * 2 * N + n] += alpha * (ref[m * N + n] - b[n]) + b[n];
    check('matmul_forward', r.c, want);
    for (let m = 0; m < M; m++)
      assert.ok(
        sameBits(r.c.subarray(m * 2 * N + N, (m + 1) * 2 * N), c0.subarray(m * 2 * N + N, (m + 1) * 2 * N)),
        `row ${m}: a column past N written`,
      );
  });

// the matrix (webgpu-matrix.test.mjs) runs the register family on SwiftShader; a GPU runs the tiled
// one: at the products of a real-width step (ViT-S/16, one image) they agree bit for bit
test('both GEMM families give the same bits at the shapes of a ViT-S/16 step', async () => {
  const T = 197,
    D = 384,
    Hh = 6,
    hd = 64;
  const x = rand(T * 4 * D, 31),
    w = rand(4 * D * D, 32),
    b = rand(4 * D, 33),
    qkv = rand(T * 3 * D, 34);
  const calls = (p, o) => {
    // qkv, fc2 (split-K + bias), fc1's dW (both transposed, +=), fc2's dinp (split-K, +=)
    gemm(p, {
      a: o('x'),
      b: o('w'),
      c: o('qkvOut'),
      bias: o('b'),
      M: T,
      N: 3 * D,
      K: D,
      lda: 4 * D,
      ldb: D,
      ldc: 3 * D,
    });
    gemm(p, { a: o('x'), b: o('w'), c: o('fc2'), bias: o('b'), M: T, N: D, K: 4 * D, lda: 4 * D, ldb: 4 * D, ldc: D });
    gemm(p, {
      a: o('x'),
      b: o('x'),
      c: o('dw'),
      M: 4 * D,
      N: D,
      K: T,
      lda: 4 * D,
      ldb: 4 * D,
      ldc: D,
      aT: true,
      bT: true,
      acc: true,
    });
    gemm(p, {
      a: o('x'),
      b: o('w'),
      c: o('dinp'),
      M: T,
      N: D,
      K: 4 * D,
      lda: 4 * D,
      ldb: D,
      ldc: D,
      bT: true,
      acc: true,
    });
    // the attention's scores: 6 heads of q k^T * scale over the fused qkv rows
    const k = { ...o('qkv'), off: o('qkv').off + D, len: o('qkv').len - D };
    gemm(p, {
      a: o('qkv'),
      b: k,
      c: o('att'),
      M: T,
      N: T,
      K: hd,
      lda: 3 * D,
      ldb: 3 * D,
      ldc: T,
      alpha: 0.125,
      batch: { B: 1, H: Hh, a: [0, hd], b: [0, hd], c: [0, T * T] },
    });
  };
  const arrays = () => ({
    x,
    w,
    b,
    qkv,
    qkvOut: new Float32Array(T * 3 * D),
    fc2: new Float32Array(T * D),
    dw: rand(4 * D * D, 35, 0.1),
    dinp: rand(T * D, 36, 0.1),
    att: new Float32Array(Hh * T * T),
  });
  const [tiled, reg] = [await HF.tiled.run(arrays(), calls), await HF.reg.run(arrays(), calls)];
  for (const k of ['qkvOut', 'fc2', 'dw', 'dinp', 'att']) assert.ok(sameBits(tiled[k], reg[k]), `${k}: tiled != reg`);
  check('matmul_forward', reg.fc2, matmulRef(x.subarray(0, T * 4 * D), w, b.subarray(0, D), T, 4 * D, D));
});

test('layernorm forward and backward: D of 1, 3, 64, 67, 200; no affine; in place; optional grads', async () => {
  for (const [M, D] of [
    [1, 1],
    [5, 3],
    [9, 64],
    [300, 67],
    [2, 200],
    [0, 4],
  ]) {
    const x = rand(M * D, 11, 2).map((v) => v + 3),
      w = rand(D, 12),
      b = rand(D, 13);
    const ref = layernormRef(x, w, b, M, D, 1e-6);
    const r = await H.run(
      { x, w, b, out: new Float32Array(M * D), mean: new Float32Array(M), rstd: new Float32Array(M) },
      (p, o) =>
        layernorm_forward(
          p,
          { out: o('out'), mean: o('mean'), rstd: o('rstd'), inp: o('x'), w: o('w'), b: o('b') },
          { M, D },
          { eps: 1e-6 },
        ),
    );
    check('layernorm_forward', r.out, ref.out);
    check('layernorm_forward', r.mean, ref.mean);
    check('layernorm_forward', r.rstd, ref.rstd);
    // in place, no weight and no bias, no saved statistics
    const ip = await H.run({ x }, (p, o) =>
      layernorm_forward(
        p,
        { out: o('x'), mean: null, rstd: null, inp: o('x'), w: null, b: null },
        { M, D },
        { eps: 1e-5 },
      ),
    );
    check('layernorm_forward', ip.x, layernormRef(x, null, null, M, D, 1e-5).out);
    // backward from the saved statistics, accumulating
    const dy = rand(M * D, 14),
      g = layernormBackwardRef(dy, x, w, M, D, 1e-6);
    const d0 = rand(M * D, 15, 0.1);
    const rb = await H.run(
      { dy, x, w, mean: r.mean, rstd: r.rstd, di: d0, dw: new Float32Array(D), db: new Float32Array(D) },
      (p, o) =>
        layernorm_backward(
          p,
          {
            dinp: o('di'),
            dw: o('dw'),
            db: o('db'),
            dout: o('dy'),
            inp: o('x'),
            w: o('w'),
            mean: o('mean'),
            rstd: o('rstd'),
          },
          { M, D },
        ),
    );
    check(
      'layernorm_backward',
      rb.di,
      Float64Array.from(d0).map((v, i) => v + g.dinp[i]),
    );
    check('layernorm_backward', rb.dw, g.dw);
    check('layernorm_backward', rb.db, g.db);
    const only = await H.run({ dy, x, mean: r.mean, rstd: r.rstd, db: new Float32Array(D) }, (p, o) =>
      layernorm_backward(
        p,
        { dinp: null, dw: null, db: o('db'), dout: o('dy'), inp: o('x'), w: null, mean: o('mean'), rstd: o('rstd') },
        { M, D },
      ),
    );
    check('layernorm_backward', only.db, g.db);
  }
});

test('erf: max error against float64 on [-6, 6]', async () => {
  const n = 120001,
    x = Float32Array.from({ length: n }, (_, i) => -6 + (12 * i) / (n - 1));
  const r = await H.run({ x, y: new Float32Array(n) }, (p, o) =>
    p.dispatch(
      'erf_probe',
      { x: o('x'), y: o('y') },
      `${ERF_WGSL}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < u.n) { st_y(g.x, erf(ld_x(g.x))); } }`,
      { n },
      {},
      [Math.ceil(n / 256), 1, 1],
    ),
  );
  let abs = 0,
    ulps = 0;
  for (let i = 0; i < n; i++) {
    const want = erf64(x[i]),
      d = Math.abs(r.y[i] - want);
    const a = Math.fround(Math.abs(want)) || 1e-38;
    const ulp = Math.fround(a * (1 + 2 ** -23)) - a || 2 ** -149;
    abs = Math.max(abs, d);
    ulps = Math.max(ulps, d / ulp);
  }
  console.log(`# erf on ${gpu.info.description}: max |error| ${abs.toExponential(2)}, ${ulps.toFixed(2)} ulp`);
  assert.ok(abs < 5e-7, `erf error ${abs}`);
});

test('GELU forward and backward (exact erf), in place backward', async () => {
  for (const n of [1, 3, 1000, 4099]) {
    const x = rand(n, 16, 6),
      dy = rand(n, 17);
    const r = await H.run({ x, y: new Float32Array(n), dy, dx: new Float32Array(n) }, (p, o) => {
      gelu_forward(p, { out: o('y'), inp: o('x') }, { n });
      gelu_backward(p, { dinp: o('dx'), inp: o('x'), dout: o('dy') }, { n });
    });
    check('gelu_forward', r.y, Float64Array.from(x, gelu64));
    check(
      'gelu_backward',
      r.dx,
      Float64Array.from(x, (v, i) => dy[i] * geluGrad64(v)),
    );
    const ip = await H.run({ x, dy }, (p, o) => gelu_backward(p, { dinp: o('dy'), inp: o('x'), dout: o('dy') }, { n }));
    assert.ok(sameBits(ip.dy, r.dx), 'in place = out of place');
  }
});

const attnCases = [
  // B, T, H, hd, fused qkv (qk_rs = 3D), causal mask
  [1, 1, 1, 1, true, false],
  [2, 3, 1, 4, true, true],
  [1, 17, 3, 8, true, true],
  [2, 70, 2, 16, false, false],
  [1, 65, 1, 3, false, true],
];
for (const family of FAMILIES)
  test(`${family} GEMMs: attention forward and backward: fused qkv and separate q/k, AIM prefix-causal mask`, async () => {
    const H = HF[family];
    for (const [B, T, Hh, hd, fused, causal] of attnCases) {
      const D = Hh * hd,
        qk_rs = fused ? 3 * D : D,
        v_rs = fused ? 3 * D : D;
      const a = { qk_rs, v_rs, B, T, H: Hh, hd, scale: 1 / Math.sqrt(hd) },
        f = { scale: a.scale };
      let mask = null;
      if (causal) {
        // per image: a random prefix length, the rest causal
        mask = new Uint8Array(B * T);
        for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) mask[b * T + t] = t >= (b * 7 + 1) % (T + 1) ? 1 : 0;
      }
      const arrays = {};
      let ref;
      if (fused) {
        arrays.qkv = rand(B * T * 3 * D, 20, 1.5);
        const q = arrays.qkv,
          k = arrays.qkv.subarray(D),
          v = arrays.qkv.subarray(2 * D);
        const full = (x) => {
          const f = new Float32Array(B * T * 3 * D);
          f.set(x, 0);
          return f;
        };
        // the reference reads q/k/v at their offsets of the one buffer
        ref = attentionRef({ q, k: full(k), v: full(v), dout: rand(B * T * D, 21), mask }, a);
        arrays.dqkv = new Float32Array(B * T * 3 * D);
      } else {
        arrays.q = rand(B * T * D, 22, 1.5);
        arrays.k = rand(B * T * D, 23, 1.5);
        arrays.v = rand(B * T * D, 24);
        ref = attentionRef({ q: arrays.q, k: arrays.k, v: arrays.v, dout: rand(B * T * D, 21), mask }, a);
        arrays.dq = new Float32Array(B * T * D);
        arrays.dk = new Float32Array(B * T * D);
        arrays.dv = new Float32Array(B * T * D);
      }
      arrays.dout = rand(B * T * D, 21);
      arrays.out = new Float32Array(B * T * D);
      arrays.att = new Float32Array(B * Hh * T * T);
      if (mask) arrays.mask = mask;
      const r = await H.run(arrays, (p, o) => {
        const sub = (x, off) => ({ ...x, off: x.off + off, len: x.len - off });
        const q = fused ? o('qkv') : o('q'),
          k = fused ? sub(o('qkv'), D) : o('k'),
          v = fused ? sub(o('qkv'), 2 * D) : o('v');
        attention_forward(p, { out: o('out'), att: o('att'), q, k, v, causal_mask: mask ? o('mask') : null }, a, f);
        const dq = fused ? o('dqkv') : o('dq'),
          dk = fused ? sub(o('dqkv'), D) : o('dk'),
          dv = fused ? sub(o('dqkv'), 2 * D) : o('dv');
        attention_backward(p, { dq, dk, dv, dout: o('dout'), att: o('att'), q, k, v }, a, f);
      });
      check('attention_forward', r.out, ref.out);
      check('attention_forward', r.att, ref.att);
      if (fused) {
        const want = new Float64Array(B * T * 3 * D);
        for (let t = 0; t < B * T; t++)
          for (let d = 0; d < D; d++) {
            want[t * 3 * D + d] = ref.dq[t * 3 * D + d];
            want[t * 3 * D + D + d] = ref.dk[t * 3 * D + d];
            want[t * 3 * D + 2 * D + d] = ref.dv[t * 3 * D + d];
          }
        check('attention_backward', r.dqkv, want);
      } else {
        check('attention_backward', r.dq, ref.dq);
        check('attention_backward', r.dk, ref.dk);
        check('attention_backward', r.dv, ref.dv);
      }
      if (mask)
        // hidden keys get probability exactly 0
        for (let b = 0; b < B; b++)
          for (let h = 0; h < Hh; h++)
            for (let i = 0; i < T; i++)
              for (let j = i + 1; j < T; j++)
                if (mask[b * T + j]) assert.equal(r.att[((b * Hh + h) * T + i) * T + j], 0);
    }
  });

for (const family of FAMILIES)
  test(`${family} GEMMs: determinism: every kernel, run twice on fresh buffers, gives the same bits`, async () => {
    const H = HF[family];
    const M = 150,
      K = 40,
      N = 48,
      B = 2,
      T = 33,
      Hh = 2,
      hd = 24,
      D = Hh * hd;
    const arrays = () => ({
      x: rand(M * K, 40),
      w: rand(N * K, 41),
      b: rand(N, 42),
      y: new Float32Array(M * N),
      dy: rand(M * N, 43),
      dx: new Float32Array(M * K),
      dw: new Float32Array(N * K),
      db: new Float32Array(N),
      mean: new Float32Array(M),
      rstd: new Float32Array(M),
      ln: new Float32Array(M * K),
      lw: rand(K, 44),
      dlw: new Float32Array(K),
      qkv: rand(B * T * 3 * D, 45),
      att: new Float32Array(B * Hh * T * T),
      ao: new Float32Array(B * T * D),
      dao: rand(B * T * D, 46),
      dqkv: new Float32Array(B * T * 3 * D),
      m: new Float32Array(N * K),
      v: new Float32Array(N * K),
      lr: Float32Array.of(1e-3),
      step: Float32Array.of(1),
      flag: new Float32Array(1),
    });
    const calls = (p, o) => {
      const sub = (x, off) => ({ ...x, off: x.off + off, len: x.len - off });
      layernorm_forward(
        p,
        { out: o('ln'), mean: o('mean'), rstd: o('rstd'), inp: o('x'), w: o('lw'), b: null },
        { M, D: K },
        { eps: 1e-6 },
      );
      matmul_forward(p, { out: o('y'), inp: o('ln'), w: o('w'), bias: o('b') }, { M, K, N });
      gelu_forward(p, { out: o('y'), inp: o('y') }, { n: M * N });
      gelu_backward(p, { dinp: o('dy'), inp: o('y'), dout: o('dy') }, { n: M * N });
      matmul_backward(
        p,
        { dinp: o('dx'), dw: o('dw'), dbias: o('db'), dout: o('dy'), inp: o('ln'), w: o('w') },
        { M, K, N },
      );
      layernorm_backward(
        p,
        {
          dinp: o('dx'),
          dw: o('dlw'),
          db: null,
          dout: o('dx'),
          inp: o('x'),
          w: o('lw'),
          mean: o('mean'),
          rstd: o('rstd'),
        },
        { M, D: K },
      );
      const at = { qk_rs: 3 * D, v_rs: 3 * D, B, T, H: Hh, hd },
        sc = { scale: 0.2 };
      const q = o('qkv'),
        k = sub(o('qkv'), D),
        v = sub(o('qkv'), 2 * D);
      attention_forward(p, { out: o('ao'), att: o('att'), q, k, v, causal_mask: null }, at, sc);
      attention_backward(
        p,
        { dq: o('dqkv'), dk: sub(o('dqkv'), D), dv: sub(o('dqkv'), 2 * D), dout: o('dao'), att: o('att'), q, k, v },
        at,
        sc,
      );
      KERNELS.adamw(
        p,
        { p: o('w'), g: o('dw'), m: o('m'), v: o('v'), lr: o('lr'), step: o('step'), flag: o('flag') },
        { n: N * K },
        { b1: 0.9, b2: 0.999, eps: 1e-8, wd: 0.05 },
      );
    };
    const r1 = await H.run(arrays(), calls),
      r2 = await H.run(arrays(), calls);
    for (const k of Object.keys(arrays())) assert.ok(sameBits(r1[k], r2[k]), `${k}: the same bits`);
    // a program replayed: run 3 times = the calls three times in a row, bit for bit
    const r3 = await H.run(arrays(), calls, { times: 3 });
    const r4 = await H.run(arrays(), (p, o) => {
      calls(p, o);
      calls(p, o);
      calls(p, o);
    });
    for (const k of Object.keys(arrays())) assert.ok(sameBits(r3[k], r4[k]), `${k}: replay = repeated calls`);
  });

test('faults: a shader that does not compile, an operand beyond its buffer, a lost device', async () => {
  await assert.rejects(
    H.run({ x: rand(4, 1) }, (p, o) =>
      p.dispatch(
        'broken',
        { x: o('x') },
        '@compute @workgroup_size(1) fn main() { let a: f32 = undefined_thing; }',
        {},
        {},
        [1, 1, 1],
      ),
    ),
    (e) => e instanceof GpuError && e.kind === 'compile' && /broken/.test(e.message),
  );
  await assert.rejects(
    H.run({ x: rand(4, 1) }, (p, o) =>
      KERNELS.fill(p, { x: { ...o('x'), len: 1 << 20 } }, { n: 1 << 20 }, { value: 0 }),
    ),
    (e) => e instanceof GpuError && e.kind === 'limit',
  );
  await assert.rejects(
    H.pool.storage(gpu.limits.maxBufferSize + 1, 'too big'),
    (e) => e instanceof GpuError && e.kind === 'limit' && /maxBufferSize/.test(e.message),
  );
  // a device of its own, lost: every later use says so
  const g2 = await testGpu(),
    h2 = new Harness(g2);
  g2.device.destroy();
  await new Promise((r) => setTimeout(r, 10));
  await assert.rejects(
    h2.run({ x: rand(4, 1) }, (p, o) => KERNELS.fill(p, { x: o('x') }, { n: 4 }, { value: 0 })),
    (e) => e instanceof GpuError && e.kind === 'lost',
  );
});

test('no adapter: requestGpu says why (GpuError "unavailable")', () => {
  // a child process whose Vulkan loader finds no driver
  const out = execFileSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `
    const { requestGpu } = await import(${JSON.stringify(new URL('../../web/webgpu/device.js', import.meta.url).href)});
    try { await requestGpu({ swiftshader: false }); console.log('adapter'); } catch (e) { console.log(e.kind + ': ' + e.message); }`,
    ],
    {
      env: { ...process.env, VK_ICD_FILENAMES: '/nonexistent.json', VITRINE_WEBGPU: '' },
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    },
  );
  assert.match(out, /^unavailable: no WebGPU adapter .*VITRINE_WEBGPU=swiftshader/m);
});

// ---- the kernels of timm's ViT options, against the wasm build's (the CPU's kernels) ----------------

// kernel `name` on the GPU (both runs the same bits, inputs untouched) and on wasm: every output
// within the parity rule of wasm's, the worst recorded under the kernel's name
async function vsWasm(name, arrays, bind, ints, floats, outputs) {
  const { gpu: g, wasm: w } = await gpuAndWasm(H, vt, contract, name, arrays, bind, ints, floats, outputs);
  for (const k of outputs) check(name, g[k], w[k], TOL, worstWasm);
  return g;
}
// activations' inputs: a normal range, and one of extremes (saturation, +-0, tiny, huge)
const EXTREMES = Float32Array.from([0, -0, 1e-30, -1e-30, 1e-8, -3, 3, 9, -9, 20, -20, 60, -60, 100, -100, 1e4, -1e4]);
const SIZES = [1, 3, 257, 1000]; // below 4, around a 256-invocation workgroup

for (const act of ['quick_gelu', 'gelu_tanh'])
  test(`${act} forward and backward against wasm: n 0, 1, 3, 257, 1000, extremes, in place`, async () => {
    for (const x of [...SIZES.map((n) => rand(n, n, 6)), EXTREMES]) {
      const n = x.length,
        dout = rand(n, 7 + n, 2);
      await vsWasm(`${act}_forward`, { x, out: rand(n, 3) }, { out: 'out', inp: 'x' }, { n }, {}, ['out']);
      await vsWasm(
        `${act}_backward`,
        { x, dout, dinp: rand(n, 5) },
        { dinp: 'dinp', inp: 'x', dout: 'dout' },
        { n },
        {},
        ['dinp'],
      );
      // in place: out = inp, dinp = dout (the engine's MLP does both)
      await vsWasm(`${act}_forward`, { x: x.slice() }, { out: 'x', inp: 'x' }, { n }, {}, ['x']);
      await vsWasm(`${act}_backward`, { x, dout: dout.slice() }, { dinp: 'dout', inp: 'x', dout: 'dout' }, { n }, {}, [
        'dout',
      ]);
    }
    // n 0: nothing written
    await vsWasm(`${act}_forward`, { x: rand(4, 1), out: rand(4, 2) }, { out: 'out', inp: 'x' }, { n: 0 }, {}, []);
  });

test('rmsnorm forward and backward against wasm: D of 1, 3, 64, 67, 200, M not a multiple of 4, optional w / rstd / grads, in place', async () => {
  for (const [M, D] of [
    [1, 1],
    [3, 3],
    [5, 64],
    [7, 67],
    [2, 200],
    [0, 5],
  ]) {
    const rows = Math.max(M, 1),
      x = rand(rows * D, M + D, 3),
      w = rand(D, 2),
      dout = rand(rows * D, 4),
      rstd = Float32Array.from(rand(rows, 5), (v) => 0.5 + Math.abs(v));
    for (const [withW, eps] of [
      [true, 1e-6],
      [false, 1e-5],
    ]) {
      const fw = { out: 'out', rstd: 'rstd', inp: 'x', w: withW ? 'w' : null };
      await vsWasm('rmsnorm_forward', { x, w, out: rand(rows * D, 6), rstd: rand(rows, 7) }, fw, { M, D }, { eps }, [
        'out',
        'rstd',
      ]);
      await vsWasm(
        'rmsnorm_forward',
        { x: x.slice(), w, r: rand(rows, 7) },
        { ...fw, out: 'x', rstd: null },
        { M, D },
        { eps },
        ['x'],
      );
      const arrays = { x, w, dout, rstd, dinp: rand(rows * D, 8, 0.5), dw: rand(D, 9, 0.5) };
      const bw = { dinp: 'dinp', dw: 'dw', dout: 'dout', inp: 'x', w: withW ? 'w' : null, rstd: 'rstd' };
      await vsWasm('rmsnorm_backward', arrays, bw, { M, D }, {}, ['dinp', 'dw']);
      await vsWasm('rmsnorm_backward', arrays, { ...bw, dw: null }, { M, D }, {}, ['dinp']);
      await vsWasm('rmsnorm_backward', arrays, { ...bw, dinp: null }, { M, D }, {}, ['dw']);
    }
  }
});

// probabilities: rows of Tk that sum to 1
const probs = (rows, Tk, seed) => {
  const p = Float32Array.from(rand(rows * Tk, seed), (v) => Math.exp(2 * v));
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let j = 0; j < Tk; j++) s += p[r * Tk + j];
    for (let j = 0; j < Tk; j++) p[r * Tk + j] /= s;
  }
  return p;
};
const extent = (rows, cols, stride) => (rows > 0 ? (rows - 1) * stride + cols : cols);

test('cross-attention forward and backward against wasm: one key, shared and per-image queries, strided rows, SigLIP-B/16 pooling, zero images', async () => {
  // [B, Tq, Tk, H, hd, q_bs, kv_rs]
  for (const [B, Tq, Tk, Hh, hd, q_bs, kv_rs] of [
    [1, 1, 1, 1, 1, 0, 1],
    [2, 1, 3, 2, 2, 0, 8], // a shared latent (map pooling) over a fused kv (kv_rs = 2D)
    [3, 2, 70, 3, 5, 2 * 15 + 3, 31], // per-image queries, strides past the rows
    [2, 1, 197, 12, 64, 0, 1536], // SigLIP-B/16's attention pool at 224 px, two images
    [0, 1, 3, 1, 2, 0, 4],
  ]) {
    const D = Hh * hd,
      Bq = Math.max(B, 1),
      scale = 1 / Math.sqrt(hd);
    const nq = extent(Bq, Tq * D, q_bs),
      nkv = extent(Bq * Tk, D, kv_rs),
      natt = Bq * Hh * Tq * Tk;
    const q = rand(nq, 1),
      k = rand(nkv, 2),
      v = rand(nkv, 3),
      dout = rand(Bq * Tq * D, 4);
    const ints = { B, Tq, Tk, H: Hh, hd, q_bs, kv_rs };
    const f = await vsWasm(
      'cross_attention_forward',
      { q, k, v, out: rand(Bq * Tq * D, 5), att: rand(natt, 6) },
      { out: 'out', att: 'att', q: 'q', k: 'k', v: 'v' },
      ints,
      { scale },
      B ? ['out', 'att'] : [],
    );
    if (B)
      assert.ok(
        f.att.every((p) => p >= 0 && p <= 1),
        'probabilities',
      );
    const arrays = {
      q,
      k,
      v,
      dout,
      att: probs(Bq * Hh * Tq, Tk, 7),
      dq: rand(nq, 8, 0.5),
      dk: rand(nkv, 9, 0.5),
      dv: rand(nkv, 10, 0.5),
      ds: rand(natt, 11),
    };
    const bind = { dq: 'dq', dk: 'dk', dv: 'dv', dscore: 'ds', dout: 'dout', att: 'att', q: 'q', k: 'k', v: 'v' };
    const outs = B ? ['dq', 'dk', 'dv', 'ds'] : [];
    await vsWasm('cross_attention_backward', arrays, bind, ints, { scale }, outs);
    await vsWasm(
      'cross_attention_backward',
      arrays,
      { ...bind, dq: null },
      ints,
      { scale },
      B ? ['dk', 'dv', 'ds'] : [],
    );
    await vsWasm(
      'cross_attention_backward',
      arrays,
      { ...bind, dk: null, dv: null },
      ints,
      { scale },
      B ? ['dq', 'ds'] : [],
    );
    await vsWasm('cross_attention_backward', arrays, { ...bind, dq: null, dk: null }, ints, { scale }, B ? ['dv'] : []);
  }
});

// every kernel of the engine's list has its WGSL twin under the table's name, taking the table's
// operand names (a step holding one without is refused on WebGPU: webgpu-train.test.mjs)
test('every kernel of the contract has a WebGPU implementation', () => {
  const missing = Object.keys(contract).filter((k) => typeof KERNELS[k] !== 'function');
  assert.deepEqual(missing, [], `no WGSL twin: ${missing.join(', ')}`);
  assert.ok(Object.keys(contract).length >= 50, Object.keys(contract).join(' '));
});
