/* kernels_attn.c: multi-head attention composed from the matmul kernels (vt_attention_*, every
 * build: native, wasm scalar, wasm SIMD128). Per (batch, head) the head's q, k, v (strided rows
 * of a fused qkv buffer) are gathered into contiguous [T, hd] buffers, so that the two products
 * of the forward and the four of the backward are plain vt_matmul_forward / vt_matmul_backward
 * calls and run at the matmul kernels' speed; results are scattered back with the caller's
 * strides. Same semantics as the scalar reference vt_ref_attention_* (kernels_ref.c), tested
 * against it (tests/test_attention.c); sums are associated as the matmul kernels associate them.
 * Not here: the fused one-row-at-a-time loops (that is the reference).
 * Threads: the (image, head) pairs are split among at most `threads` of the pool's threads (the
 * count the scratch was planned for), each with its own part of the scratch; the matmuls inside
 * run on the thread that runs the pair.
 * Also here: the dispatch of vt_attention_* (the reference when a test routes to it). */
#include "kernels.h"
#include "../threads.h"
#include <math.h>
#include <string.h>

/* sub-buffers of the scratch start on 16-byte boundaries (relative to scratch) */
static size_t r4(size_t n) { return (n + 3) & ~(size_t)3; }

/* the backward takes d(prob) VT_ATT_ROWS query rows at a time: no [T,T] scratch besides att */
#define VT_ATT_ROWS 16
static int att_rows(int T) { return T < VT_ATT_ROWS ? T : VT_ATT_ROWS; }

/* one thread's scratch: the backward's [rows, T] block of dP + 6 [T,hd]; the forward uses 4 */
static size_t scratch_per_thread(int T, int hd) {
    size_t Thd = r4((size_t)T * hd);
    return r4((size_t)att_rows(T) * T) + 6 * Thd;
}
/* every thread the plan counts gets its own (threads.h): the (image, head) pairs run in parallel */
size_t vt_attention_scratch_floats(int T, int hd, int threads) {
    if (T <= 0 || hd <= 0) return 0;
    return scratch_per_thread(T, hd) * (size_t)(threads < 1 ? 1 : threads);
}

/* dst[T, hd] (contiguous) = the hd floats at src + t*rs, t < T */
static void gather(float *dst, const float *src, int rs, int T, int hd) {
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * hd, src + (size_t)t * rs, (size_t)hd * sizeof(float));
}
/* the hd floats at dst + t*rs = src[t, :] */
static void scatter(float *dst, int rs, const float *src, int T, int hd) {
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * rs, src + (size_t)t * hd, (size_t)hd * sizeof(float));
}
/* dst[hd, T] = (the hd floats at src + t*rs)^T */
static void gather_t(float *dst, const float *src, int rs, int T, int hd) {
    for (int t = 0; t < T; t++) {
        const float *s = src + (size_t)t * rs;
        for (int e = 0; e < hd; e++) dst[(size_t)e * T + t] = s[e];
    }
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
static int max_threads(int threads) { return threads < 1 ? 1 : threads; }

static void attn_forward_items(void *ctx, int lo, int hi, int tid) {
    const attn_job *J = ctx;
    int T = J->T, H = J->H, hd = J->hd, D = H * hd, qk_rs = J->qk_rs, v_rs = J->v_rs;
    float scale = J->scale;
    size_t Thd = r4((size_t)T * hd);
    float *qh = J->scratch + scratch_per_thread(T, hd) * (size_t)tid;
    float *kh = qh + Thd, *vt = kh + Thd, *oh = vt + Thd; /* [T,hd] [T,hd] [hd,T] [T,hd] */
    for (int item = lo; item < hi; item++) {
        int b = item / H, h = item % H;
        const uint8_t *cm = J->causal_mask ? J->causal_mask + (size_t)b * T : NULL;
        size_t off_qk = (size_t)b * T * qk_rs + (size_t)h * hd, off_v = (size_t)b * T * v_rs + (size_t)h * hd;
        float *P = J->att + ((size_t)b * H + h) * T * T; /* (T, T) */
        gather(qh, J->q + off_qk, qk_rs, T, hd);
        gather(kh, J->k + off_qk, qk_rs, T, hd);
        gather_t(vt, J->v + off_v, v_rs, T, hd);
        /* S = q k^T, scaled; query i sees key j when j <= i or cm[j] == 0 */
        vt_matmul_forward(P, qh, kh, NULL, T, hd, T);
        for (int i = 0; i < T; i++) {
            float *row = P + (size_t)i * T;
            for (int j = 0; j < T; j++) row[j] *= scale;
            if (cm)
                for (int j = i + 1; j < T; j++)
                    if (cm[j]) row[j] = -INFINITY;
            vt_softmax_row(row, row, T);
        }
        /* O = P V  (w = V^T [hd, T]) */
        vt_matmul_forward(oh, P, vt, NULL, T, T, hd);
        scatter(J->out + (size_t)b * T * D + (size_t)h * hd, D, oh, T, hd);
    }
}

void vt_gemm_attention_forward(float *out, float *att, float *scratch, const float *q, const float *k,
                          int qk_rs, const float *v, int v_rs, const uint8_t *causal_mask, int B,
                          int T, int H, int hd, int threads, float scale) {
    if (T <= 0 || hd <= 0) return;
    attn_job J = {.out = out, .att = att, .scratch = scratch, .q = q, .k = k, .v = v,
                  .causal_mask = causal_mask, .qk_rs = qk_rs, .v_rs = v_rs, .B = B, .T = T, .H = H,
                  .hd = hd, .scale = scale};
    vt_parallel_for_max(B * H, 1, 4.0 * B * H * (double)T * T * hd, max_threads(threads), attn_forward_items, &J);
}

static void attn_backward_items(void *ctx, int lo, int hi, int tid) {
    const attn_job *J = ctx;
    int T = J->T, H = J->H, hd = J->hd, D = H * hd, qk_rs = J->qk_rs, v_rs = J->v_rs;
    float scale = J->scale, *dq = J->dq, *dk = J->dk, *dv = J->dv;
    size_t Thd = r4((size_t)T * hd);
    int R = att_rows(T);
    float *dP = J->scratch + scratch_per_thread(T, hd) * (size_t)tid; /* (R, T): d(prob), then d(score), for R query rows */
    float *doh = dP + r4((size_t)R * T), *vh = doh + Thd, *qh = vh + Thd, *kh = qh + Thd;
    float *dqh = kh + Thd, *dkh = dqh + Thd;
    for (int item = lo; item < hi; item++) {
        int b = item / H, h = item % H;
        size_t off_qk = (size_t)b * T * qk_rs + (size_t)h * hd, off_v = (size_t)b * T * v_rs + (size_t)h * hd;
        const float *P = J->att_in + ((size_t)b * H + h) * T * T; /* (T, T) */
        gather(doh, J->dout + (size_t)b * T * D + (size_t)h * hd, D, T, hd);
        if (dv) { /* O = P V  =>  dV += P^T dO (accumulated on dv's values, in i order; qh is free) */
            float *dvh = qh;
            gather(dvh, dv + off_v, v_rs, T, hd);
            vt_matmul_backward(NULL, dvh, NULL, P, doh, NULL, T, hd, T);
            scatter(dv + off_v, v_rs, dvh, T, hd);
        }
        if (!dq && !dk) continue;
        gather(vh, J->v + off_v, v_rs, T, hd);
        gather(qh, J->q + off_qk, qk_rs, T, hd);
        gather(kh, J->k + off_qk, qk_rs, T, hd);
        if (dq) gather(dqh, dq + off_qk, qk_rs, T, hd);
        if (dk) gather(dkh, dk + off_qk, qk_rs, T, hd);
        for (int i0 = 0; i0 < T; i0 += R) {
            int n = T - i0 < R ? T - i0 : R;
            /* dP = dO V^T for rows i0.. */
            vt_matmul_forward(dP, doh + (size_t)i0 * hd, vh, NULL, n, hd, T);
            /* softmax: dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij) scale; masked keys have P = 0 */
            for (int i = 0; i < n; i++) {
                const float *p = P + (size_t)(i0 + i) * T;
                float *ds = dP + (size_t)i * T;
                float sum_pdp = 0.0f;
                for (int j = 0; j < T; j++) sum_pdp += p[j] * ds[j];
                for (int j = 0; j < T; j++) ds[j] = p[j] * (ds[j] - sum_pdp) * scale;
            }
            /* S = q k^T  =>  dQ[rows] += dS K, dK += dS^T Q[rows] (rows in order) */
            vt_matmul_backward(dq ? dqh + (size_t)i0 * hd : NULL, dk ? dkh : NULL, NULL, dP,
                               qh + (size_t)i0 * hd, kh, n, hd, T);
        }
        if (dq) scatter(dq + off_qk, qk_rs, dqh, T, hd);
        if (dk) scatter(dk + off_qk, qk_rs, dkh, T, hd);
    }
}

void vt_gemm_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *att, const float *q, const float *k, int qk_rs,
                           const float *v, int v_rs, int B, int T, int H, int hd, int threads,
                           float scale) {
    if (T <= 0 || hd <= 0 || (!dq && !dk && !dv)) return;
    attn_job J = {.dq = dq, .dk = dk, .dv = dv, .scratch = scratch, .dout = dout, .att_in = att,
                  .q = q, .k = k, .v = v, .qk_rs = qk_rs, .v_rs = v_rs, .B = B, .T = T, .H = H,
                  .hd = hd, .scale = scale};
    vt_parallel_for_max(B * H, 1, 8.0 * B * H * (double)T * T * hd, max_threads(threads), attn_backward_items, &J);
}

/* ---- dispatch: the composition above in every build, or the scalar reference (tests) ---- */
void vt_attention_forward(float *out, float *att, float *scratch, const float *q, const float *k,
                          int qk_rs, const float *v, int v_rs, const uint8_t *causal_mask, int B,
                          int T, int H, int hd, int threads, float scale) {
    if (vt_kernels_reference()) vt_ref_attention_forward(out, att, q, k, qk_rs, v, v_rs, causal_mask, B, T, H, hd, scale);
    else vt_gemm_attention_forward(out, att, scratch, q, k, qk_rs, v, v_rs, causal_mask, B, T, H, hd, threads, scale);
}
void vt_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *att, const float *q, const float *k, int qk_rs,
                           const float *v, int v_rs, int B, int T, int H, int hd, int threads,
                           float scale) {
    if (vt_kernels_reference())
        vt_ref_attention_backward(dq, dk, dv, scratch, dout, att, q, k, qk_rs, v, v_rs, B, T, H, hd, scale);
    else
        vt_gemm_attention_backward(dq, dk, dv, scratch, dout, att, q, k, qk_rs, v, v_rs, B, T, H, hd, threads, scale);
}
