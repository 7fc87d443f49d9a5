// kernels.js: vitrine's kernel contract (src/kernels/kernels.h) on WebGPU. Each function appends
// the dispatches of one kernel call to a Program (program.js); operands are (buffer, offset,
// length) as operand() makes them, sizes and scalars as in the C signatures. Semantics are the C
// reference's (kernels_ref.c): backward kernels ACCUMULATE (+=) into their gradients, except GELU's
// backward (dinp = ...); any gradient operand may be null (not wanted). Results are deterministic
// (fixed reduction orders, no atomics: see gemm.js, reduce.js, rows.js); they are not the CPU's bits.
import { gemm } from './gemm.js';
import { colsum } from './reduce.js';
import { layernormForward, layernormBackward, attentionSoftmax, attentionSoftmaxBackward } from './rows.js';
import { geluForward, geluBackward } from './elementwise.js';
import * as ops from './ops.js';
import { PipelineCache, Program } from './program.js';

export { operand, absent, Program, WORKSPACE } from './program.js';

/** out[M,N] = inp[M,K] @ w[N,K]^T + bias[N] (bias may be null) */
export function matmul_forward(prog, { out, inp, w, bias }, { M, K, N }) {
  gemm(prog, { a: inp, b: w, c: out, bias, M, N, K, lda: K, ldb: K, ldc: N });
}

/** dinp[M,K] += dout[M,N] @ w[N,K]; dw[N,K] += dout^T @ inp; dbias[N] += sum_m dout (each may be null) */
export function matmul_backward(prog, { dinp, dw, dbias, dout, inp, w }, { M, K, N }) {
  if (M === 0 || N === 0) return;
  if (dinp && K > 0)
    // C(m, k) = sum_n dout(m, n) w(n, k): B(n'=k, k'=n) = w[n*K + k], transposed
    gemm(prog, { a: dout, b: w, c: dinp, M, N: K, K: N, lda: N, ldb: K, ldc: K, bT: true, acc: true });
  if (dw && K > 0)
    // C(n, k) = sum_m dout(m, n) inp(m, k): both operands transposed
    gemm(prog, { a: dout, b: inp, c: dw, M: N, N: K, K: M, lda: N, ldb: K, ldc: K, aT: true, bT: true, acc: true });
  if (dbias) colsum(prog, 'dbias', [{ out: dbias, expr: 'ld_dout(m * u.N + n)' }], { dout }, {}, M, N, true);
}

export function layernorm_forward(prog, o, { M, D }, { eps }) {
  layernormForward(prog, o, M, D, eps);
}
export function layernorm_backward(prog, o, { M, D }) {
  layernormBackward(prog, o, M, D);
}
export function gelu_forward(prog, o, { n }) {
  geluForward(prog, o, n);
}
export function gelu_backward(prog, o, { n }) {
  geluBackward(prog, o, n);
}

/** attention: q,k rows of stride qk_rs, v of v_rs (token t, head h, element e at
 * (b*T + t)*rs + h*hd + e); out [B,T,H*hd]; att [B,H,T,T] the saved probabilities;
 * causal_mask: null or AIM's [B,T] bytes. The CPU's scratch operand and thread count are not used
 * (the workspace serves). */
export function attention_forward(prog, { out, att, q, k, v, causal_mask }, { qk_rs, v_rs, B, T, H, hd }, { scale }) {
  const D = H * hd;
  // S = scale q k^T per (image, head): batch offsets (b, h) of q/k: b*T*qk_rs + h*hd
  gemm(prog, {
    a: q,
    b: k,
    c: att,
    M: T,
    N: T,
    K: hd,
    lda: qk_rs,
    ldb: qk_rs,
    ldc: T,
    alpha: scale,
    batch: { B, H, a: [T * qk_rs, hd], b: [T * qk_rs, hd], c: [H * T * T, T * T] },
  });
  attentionSoftmax(prog, { att, causal_mask }, B, H, T);
  // O = P V: B(n = e, k = j) = v[j*v_rs + e], transposed
  gemm(prog, {
    a: att,
    b: v,
    c: out,
    M: T,
    N: hd,
    K: T,
    lda: T,
    ldb: v_rs,
    ldc: D,
    bT: true,
    batch: { B, H, a: [H * T * T, T * T], b: [T * v_rs, hd], c: [T * D, hd] },
  });
}

// images per chunk of the attention backward: its d-scores scratch [chunk, H, T, T] stays under
// ATT_SCRATCH_FLOATS (64 MiB) unless one image needs more
const ATT_SCRATCH_FLOATS = 16 << 20;
export const attentionChunk = (B, H, T) => Math.max(1, Math.min(B, Math.floor(ATT_SCRATCH_FLOATS / (H * T * T))));

/** dq/dk (stride qk_rs), dv (stride v_rs) += the gradients of attentionForward (each may be null).
 * d scores are materialised per chunk of images in the program's workspace. */
export function attention_backward(prog, { dq, dk, dv, dout, att, q, k, v }, { qk_rs, v_rs, B, T, H, hd }, { scale }) {
  const D = H * hd;
  if (B === 0 || T === 0 || (!dq && !dk && !dv)) return;
  const cb = attentionChunk(B, H, T);
  for (let b0 = 0; b0 < B; b0 += cb) {
    const nb = Math.min(cb, B - b0);
    const sub = (o, off) => (o ? { ...o, off: o.off + off, len: o.len - off } : null);
    const qb = sub(q, b0 * T * qk_rs),
      kb = sub(k, b0 * T * qk_rs),
      vb = sub(v, b0 * T * v_rs);
    const dqb = sub(dq, b0 * T * qk_rs),
      dkb = sub(dk, b0 * T * qk_rs),
      dvb = sub(dv, b0 * T * v_rs);
    const dob = sub(dout, b0 * T * D),
      pb = sub(att, b0 * H * T * T);
    const batch = (x, y, z) => ({ B: nb, H, a: x, b: y, c: z });
    const Pb = [H * T * T, T * T],
      Qb = [T * qk_rs, hd],
      Vb = [T * v_rs, hd],
      Ob = [T * D, hd];
    // O = P V  =>  dV(j, e) += sum_i P(i, j) dO(i, e)
    if (dvb)
      gemm(prog, {
        a: pb,
        b: dob,
        c: dvb,
        M: T,
        N: hd,
        K: T,
        lda: T,
        ldb: D,
        ldc: v_rs,
        aT: true,
        bT: true,
        acc: true,
        batch: batch(Pb, Ob, Vb),
      });
    if (!dqb && !dkb) continue;
    // dP = dO V^T, then dS = P (dP - rowsum(P dP)) scale, in the workspace
    const ds = prog.scratch(nb * H * T * T),
      ws = Math.ceil((nb * H * T * T) / 64) * 64;
    gemm(prog, { a: dob, b: vb, c: ds, M: T, N: T, K: hd, lda: D, ldb: v_rs, ldc: T, batch: batch(Ob, Vb, Pb) });
    attentionSoftmaxBackward(prog, { ds, att: pb }, nb * H * T, T, scale);
    // S = q k^T  =>  dQ(i, e) += sum_j dS(i, j) k(j, e);  dK(j, e) += sum_i dS(i, j) q(i, e)
    if (dqb)
      gemm(prog, {
        a: ds,
        b: kb,
        c: dqb,
        M: T,
        N: hd,
        K: T,
        lda: T,
        ldb: qk_rs,
        ldc: qk_rs,
        bT: true,
        acc: true,
        batch: batch(Pb, Qb, Qb),
        ws,
      });
    if (dkb)
      gemm(prog, {
        a: ds,
        b: qb,
        c: dkb,
        M: T,
        N: hd,
        K: T,
        lda: T,
        ldb: qk_rs,
        ldc: qk_rs,
        aT: true,
        bT: true,
        acc: true,
        batch: batch(Pb, Qb, Qb),
        ws,
      });
  }
}

/** Every kernel of the contract (issue 20's kernel_list.h) by name: (prog, ops, ints, floats). */
export const KERNELS = {
  matmul_forward,
  matmul_backward,
  layernorm_forward,
  layernorm_backward,
  gelu_forward,
  gelu_backward,
  attention_forward,
  attention_backward,
  ...ops,
};

/** The kernel library of one device: its pipeline cache and its GEMM family; programs are made
 * from it. gemm: 'tiled' (workgroup-memory tiles, for GPUs), 'reg' (register tiles straight from
 * memory, for software adapters) or 'auto' (by the adapter); the two give the same bits (gemm.js). */
export class Kernels {
  constructor(gpu, { gemm = 'auto' } = {}) {
    if (!['auto', 'tiled', 'reg'].includes(gemm)) throw new Error(`Kernels: gemm '${gemm}' (auto, tiled, reg)`);
    this.gpu = gpu;
    this.pipelines = new PipelineCache(gpu);
    this.gemm = gemm === 'auto' ? (gpu.info?.software ? 'reg' : 'tiled') : gemm;
  }
  program(label) {
    return new Program(this, label);
  }
}

/** The one kernel library of a device (its pipeline cache shared by every user). */
export const kernelsOf = (gpu) => gpu.kernels || (gpu.kernels = new Kernels(gpu));
