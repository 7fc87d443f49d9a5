// kernels.js: vitrine's kernel contract (src/kernels/kernels.h) on WebGPU. Each function appends
// the dispatches of one kernel call to a Program (program.js); operands are (buffer, offset,
// length) as operand() makes them, sizes and scalars as in the C signatures. Semantics are the C
// reference's (kernels_ref.c): backward kernels ACCUMULATE (+=) into their gradients, except GELU's
// backward (dinp = ...); any gradient operand may be null (not wanted). Results are deterministic
// (fixed reduction orders, no atomics: see gemm.js, reduce.js, rows.js); they are not the CPU's bits.
import { gemm } from './gemm.js';
import { colsum } from './reduce.js';
import {
  layernormForward,
  layernormBackward,
  rmsnormForward,
  rmsnormBackward,
  attentionSoftmax,
  attentionSoftmaxBackward,
} from './rows.js';
import {
  geluForward,
  geluBackward,
  quickGeluForward,
  quickGeluBackward,
  geluTanhForward,
  geluTanhBackward,
} from './elementwise.js';
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
export function quick_gelu_forward(prog, o, { n }) {
  quickGeluForward(prog, o, n);
}
export function quick_gelu_backward(prog, o, { n }) {
  quickGeluBackward(prog, o, n);
}
export function gelu_tanh_forward(prog, o, { n }) {
  geluTanhForward(prog, o, n);
}
export function gelu_tanh_backward(prog, o, { n }) {
  geluTanhBackward(prog, o, n);
}
export function rmsnorm_forward(prog, o, { M, D }, { eps }) {
  rmsnormForward(prog, o, M, D, eps);
}
export function rmsnorm_backward(prog, o, { M, D }) {
  rmsnormBackward(prog, o, M, D);
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

/** Cross-attention (attention pooling): Tq queries per image (q_bs the image stride of q, 0: one
 * set shared by every image; rows of H*hd) over Tk keys and values (rows of stride kv_rs);
 * att [B,H,Tq,Tk] the saved probabilities; out [B,Tq,H*hd]. */
export function cross_attention_forward(prog, { out, att, q, k, v }, { B, Tq, Tk, H, hd, q_bs, kv_rs }, { scale }) {
  const D = H * hd;
  if (B === 0 || Tq === 0 || Tk === 0) return;
  // S = scale q k^T per (image, head)
  gemm(prog, {
    a: q,
    b: k,
    c: att,
    M: Tq,
    N: Tk,
    K: hd,
    lda: D,
    ldb: kv_rs,
    ldc: Tk,
    alpha: scale,
    batch: { B, H, a: [q_bs, hd], b: [Tk * kv_rs, hd], c: [H * Tq * Tk, Tq * Tk] },
  });
  attentionSoftmax(prog, { att, causal_mask: null }, B, H, Tk, Tq);
  // O = P V: B(n = e, k = j) = v[j*kv_rs + e], transposed
  gemm(prog, {
    a: att,
    b: v,
    c: out,
    M: Tq,
    N: hd,
    K: Tk,
    lda: Tk,
    ldb: kv_rs,
    ldc: D,
    bT: true,
    batch: { B, H, a: [H * Tq * Tk, Tq * Tk], b: [Tk * kv_rs, hd], c: [Tq * D, hd] },
  });
}

/** dq, dk, dv += the gradients of cross_attention_forward (each may be null); dscore [B,H,Tq,Tk]
 * the d scores (the call's own scratch). Shared queries (q_bs 0) take the images' dq in image
 * order, one accumulating product an image, as the CPU's. */
export function cross_attention_backward(
  prog,
  { dq, dk, dv, dscore, dout, att, q, k, v },
  { B, Tq, Tk, H, hd, q_bs, kv_rs },
  { scale },
) {
  const D = H * hd;
  if (B === 0 || Tq === 0 || Tk === 0 || (!dq && !dk && !dv)) return;
  const P = [H * Tq * Tk, Tq * Tk],
    Qb = [q_bs, hd],
    KV = [Tk * kv_rs, hd],
    O = [Tq * D, hd];
  const batch = (a, b, c) => ({ B, H, a, b, c });
  // O = P V  =>  dV(j, e) += sum_i P(i, j) dO(i, e)
  if (dv)
    gemm(prog, {
      a: att,
      b: dout,
      c: dv,
      M: Tk,
      N: hd,
      K: Tq,
      lda: Tk,
      ldb: D,
      ldc: kv_rs,
      aT: true,
      bT: true,
      acc: true,
      batch: batch(P, O, KV),
    });
  if (!dq && !dk) return;
  // dP = dO V^T, then dS = P (dP - rowsum(P dP)) scale, in dscore
  gemm(prog, { a: dout, b: v, c: dscore, M: Tq, N: Tk, K: hd, lda: D, ldb: kv_rs, ldc: Tk, batch: batch(O, KV, P) });
  attentionSoftmaxBackward(prog, { ds: dscore, att }, B * H * Tq, Tk, scale);
  // S = q k^T  =>  dQ(i, e) += sum_j dS(i, j) k(j, e);  dK(j, e) += sum_i dS(i, j) q(i, e)
  const dQ = (b0, nb) =>
    gemm(prog, {
      a: sub(dscore, b0 * H * Tq * Tk),
      b: sub(k, b0 * Tk * kv_rs),
      c: dq,
      M: Tq,
      N: hd,
      K: Tk,
      lda: Tk,
      ldb: kv_rs,
      ldc: D,
      bT: true,
      acc: true,
      batch: { B: nb, H, a: P, b: KV, c: Qb },
    });
  if (dq && q_bs === 0) for (let b = 0; b < B; b++) dQ(b, 1);
  else if (dq) dQ(0, B);
  if (dk)
    gemm(prog, {
      a: dscore,
      b: q,
      c: dk,
      M: Tk,
      N: hd,
      K: Tq,
      lda: Tk,
      ldb: D,
      ldc: kv_rs,
      aT: true,
      bT: true,
      acc: true,
      batch: batch(P, Qb, KV),
    });
}

// an operand's elements from `off` on
const sub = (o, off) => (o ? { ...o, off: o.off + off, len: o.len - off } : null);

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
  cross_attention_forward,
  cross_attention_backward,
  quick_gelu_forward,
  quick_gelu_backward,
  gelu_tanh_forward,
  gelu_tanh_backward,
  rmsnorm_forward,
  rmsnorm_backward,
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
