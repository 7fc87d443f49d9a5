/* kernels_attn.c: multi-head attention composed from the general product vt_gemm (vt_attention_*,
 * every build: native, wasm scalar, wasm SIMD128). vt_gemm reads its operands through strides,
 * so each (batch, head) is multiplied where it lies: the head's q, k, v are strided column blocks
 * of a fused qkv buffer, its output a column block of out, its gradients column blocks of dq, dk,
 * dv; no copies. The two products of the forward and the four of the backward run at the GEMM's
 * speed. Same semantics as the scalar reference vt_ref_attention_* (kernels_ref.c), tested against
 * it (tests/test_attention.c); sums are in the reference's order (vt_gemm adds in j order), the
 * dot products of the scores and of dP included. Not here: the fused one-row-at-a-time loops (that
 * is the reference).
 * Threads: the (image, head) pairs are split among the pool's threads, each with its own part of
 * the scratch; the products inside run on the thread that runs the pair. */
#include "kernels.h"
#include "../threads.h"
#include <math.h>
#include <string.h>

/* the backward takes d(prob) for a block of query rows at a time: for T <= VT_ATT_ROWS (a 224-px
 * ViT: 197) all of them, else blocks as even as multiples of 4 allow. Fewer, longer products run
 * faster (dK += dS^T Q sums over a block's rows; each product packs its operands once), at
 * [rows, T] floats of scratch per thread. */
#define VT_ATT_ROWS 256
static int att_rows(int T) {
    int nb = (T + VT_ATT_ROWS - 1) / VT_ATT_ROWS, r = (T + nb - 1) / nb;
    r = (r + 3) & ~3;
    return r < T ? r : T;
}

/* one thread's scratch: the backward's [rows, T] block of dP (the forward needs none) */
static size_t scratch_per_thread(int T) { return ((size_t)att_rows(T) * T + 3) & ~(size_t)3; }
/* every thread of the pool gets its own (threads.h): the (image, head) pairs run in parallel */
size_t vt_attention_scratch_floats(int T, int hd) {
    if (T <= 0 || hd <= 0) return 0;
    return scratch_per_thread(T) * (size_t)vt_threads_max();
}

/* The arguments of one attention call; items are (b, h) pairs, item = b*H + h. Each item writes
 * only its own head's columns of out / dq / dk / dv and its own [T,T] block of att, so items
 * run on any thread in any order with the same results. */
typedef struct {
    float *out, *att, *scratch, *dq, *dk, *dv;
    const float *q, *k, *v, *dout, *att_in;
    const uint8_t *causal_mask;
    int qk_rs, v_rs, B, T, H, hd;
    float scale;
} attn_job;

static void attn_forward_items(void *ctx, int lo, int hi, int tid) {
    const attn_job *J = ctx;
    int T = J->T, H = J->H, hd = J->hd, D = H * hd, qk_rs = J->qk_rs, v_rs = J->v_rs;
    float scale = J->scale;
    for (int item = lo; item < hi; item++) {
        int b = item / H, h = item % H;
        const uint8_t *cm = J->causal_mask ? J->causal_mask + (size_t)b * T : NULL;
        size_t off_qk = (size_t)b * T * qk_rs + (size_t)h * hd, off_v = (size_t)b * T * v_rs + (size_t)h * hd;
        const float *qh = J->q + off_qk, *kh = J->k + off_qk, *vh = J->v + off_v;
        float *P = J->att + ((size_t)b * H + h) * T * T; /* (T, T) */
        /* S = q k^T (A = q rows, B(e, j) = k[j, e]), scaled; query i sees key j when j <= i or cm[j] == 0 */
        vt_gemm(P, T, qh, qk_rs, 1, kh, 1, qk_rs, T, hd, T, 0, NULL);
        for (int i = 0; i < T; i++) {
            float *row = P + (size_t)i * T;
            for (int j = 0; j < T; j++) row[j] *= scale;
            if (cm)
                for (int j = i + 1; j < T; j++)
                    if (cm[j]) row[j] = -INFINITY;
            vt_softmax_row(row, row, T);
        }
        /* O = P V, into the head's columns of out */
        vt_gemm(J->out + (size_t)b * T * D + (size_t)h * hd, D, P, T, 1, vh, v_rs, 1, T, T, hd, 0, NULL);
    }
}

void vt_gemm_attention_forward(float *out, float *att, float *scratch, const float *q, const float *k,
                          int qk_rs, const float *v, int v_rs, const uint8_t *causal_mask, int B,
                          int T, int H, int hd, float scale) {
    if (T <= 0 || hd <= 0) return;
    attn_job J = {.out = out, .att = att, .scratch = scratch, .q = q, .k = k, .v = v,
                  .causal_mask = causal_mask, .qk_rs = qk_rs, .v_rs = v_rs, .B = B, .T = T, .H = H,
                  .hd = hd, .scale = scale};
    vt_parallel_for(B * H, 1, 4.0 * B * H * (double)T * T * hd, attn_forward_items, &J);
}

static void attn_backward_items(void *ctx, int lo, int hi, int tid) {
    const attn_job *J = ctx;
    int T = J->T, H = J->H, hd = J->hd, D = H * hd, qk_rs = J->qk_rs, v_rs = J->v_rs;
    float scale = J->scale, *dq = J->dq, *dk = J->dk, *dv = J->dv;
    int R = att_rows(T);
    float *dP = J->scratch + scratch_per_thread(T) * (size_t)tid; /* (R, T): d(prob), then d(score), for R query rows */
    for (int item = lo; item < hi; item++) {
        int b = item / H, h = item % H;
        size_t off_qk = (size_t)b * T * qk_rs + (size_t)h * hd, off_v = (size_t)b * T * v_rs + (size_t)h * hd;
        const float *P = J->att_in + ((size_t)b * H + h) * T * T; /* (T, T) */
        const float *doh = J->dout + (size_t)b * T * D + (size_t)h * hd; /* (T, hd), row stride D */
        const float *qh = J->q + off_qk, *kh = J->k + off_qk, *vh = J->v + off_v;
        /* O = P V  =>  dV += P^T dO (A(j, i) = P[i, j]; accumulated on dv's values, in i order) */
        if (dv) vt_gemm(dv + off_v, v_rs, P, 1, T, doh, D, 1, T, T, hd, 1, NULL);
        if (!dq && !dk) continue;
        for (int i0 = 0; i0 < T; i0 += R) {
            int n = T - i0 < R ? T - i0 : R;
            /* dP = dO V^T for rows i0.. (B(e, j) = v[j, e]) */
            vt_gemm(dP, T, doh + (size_t)i0 * D, D, 1, vh, 1, v_rs, n, hd, T, 0, NULL);
            /* softmax: dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij) scale; masked keys have P = 0 */
            for (int i = 0; i < n; i++) vt_softmax_backward_row(dP + (size_t)i * T, P + (size_t)(i0 + i) * T, T, scale);
            /* S = q k^T  =>  dQ[rows] += dS K, dK += dS^T Q[rows] (rows in order) */
            if (dq) vt_gemm(dq + off_qk + (size_t)i0 * qk_rs, qk_rs, dP, T, 1, kh, qk_rs, 1, n, T, hd, 1, NULL);
            if (dk) vt_gemm(dk + off_qk, qk_rs, dP, 1, T, qh + (size_t)i0 * qk_rs, qk_rs, 1, T, n, hd, 1, NULL);
        }
    }
}

void vt_gemm_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *att, const float *q, const float *k, int qk_rs,
                           const float *v, int v_rs, int B, int T, int H, int hd, float scale) {
    if (T <= 0 || hd <= 0 || (!dq && !dk && !dv)) return;
    attn_job J = {.dq = dq, .dk = dk, .dv = dv, .scratch = scratch, .dout = dout, .att_in = att,
                  .q = q, .k = k, .v = v, .qk_rs = qk_rs, .v_rs = v_rs, .B = B, .T = T, .H = H,
                  .hd = hd, .scale = scale};
    vt_parallel_for(B * H, 1, 8.0 * B * H * (double)T * T * hd, attn_backward_items, &J);
}
