/* kernels_attn.c: multi-head attention composed from the general product vt_gemm (vt_attention_*,
 * every build: native, wasm scalar, wasm SIMD128). vt_gemm reads its operands through strides,
 * so each (batch, head) is multiplied where it lies: the head's q, k, v are strided column blocks
 * of a fused qkv buffer, its output a column block of out, its gradients column blocks of dq, dk,
 * dv; no copies. The two products of the forward and the four of the backward run at the GEMM's
 * speed. Same semantics as the scalar reference vt_ref_attention_* (kernels_ref.c), tested against
 * it (tests/test_attention.c); sums are in the reference's order (vt_gemm adds in j order), the
 * dot products of the scores and of dP included. Not here: the fused one-row-at-a-time loops (that
 * is the reference).
 *
 * Threads: the work items are the (image, head) pairs, split among at most `threads` of the
 * pool's threads (the count the scratch was planned for), each with its own part of the scratch.
 * When they do not divide evenly among the threads (ViT-Ti at batch 1: 3 heads, 2 threads), a
 * pair is split further: the forward by blocks of query rows (their scores, softmax and output
 * rows are independent), the backward in two parallel phases per pair (d(score) and dQ by query
 * rows into a [T,T] scratch shared by the threads, then dK and dV by key rows). Every element is
 * computed by the same operations in the same order either way, so every thread count gives the
 * same bits.
 * Also here: the dispatch of vt_attention_* (the reference when a test routes to it). */
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
/* every thread the plan counts gets its own (threads.h): the (image, head) pairs run in parallel */
size_t vt_attention_scratch_floats(int T, int hd, int threads) {
    if (T <= 0 || hd <= 0) return 0;
    return scratch_per_thread(T) * (size_t)(threads < 1 ? 1 : threads);
}
/* the threads a call runs on: the plan's count, at most the pool's */
static int threads_of(int threads) {
    int nt = vt_threads_max();
    return threads < 1 ? 1 : threads < nt ? threads : nt;
}

/* Blocks of query rows per (image, head) pair in the forward (1 = whole pairs): enough for the
 * pairs' blocks to divide evenly among nt threads. */
static int pair_split(int pairs, int T, int nt) {
    if (nt <= 1 || pairs % nt == 0) return 1;
    for (int r = 2; r <= nt && 8 * r <= T; r++)
        if (pairs * r % nt == 0) return r;
    return 1;
}
/* rows [lo, hi) of block p of n blocks of T rows (multiples of 4) */
static void rows_of(int T, int n, int p, int *lo, int *hi) {
    int units = (T + 3) / 4;
    *lo = units * p / n * 4, *hi = units * (p + 1) / n * 4;
    if (*lo > T) *lo = T;
    if (*hi > T) *hi = T;
}

/* The arguments of one attention call. Items write only their own head's columns (and rows) of
 * out / dq / dk / dv and of their [T,T] block of att, so they run on any thread in any order with
 * the same results. */
typedef struct {
    float *out, *att, *scratch, *dq, *dk, *dv;
    const float *q, *k, *v, *dout, *att_in;
    const uint8_t *causal_mask;
    int qk_rs, v_rs, B, T, H, hd, split;
    float scale;
    int b, h; /* the pair of a two-phase backward */
} attn_job;

/* forward, item = (b*H + h) * split + block: query rows of the block */
static void attn_forward_items(void *ctx, int lo, int hi, int tid) {
    const attn_job *J = ctx;
    int T = J->T, H = J->H, hd = J->hd, D = H * hd, qk_rs = J->qk_rs, v_rs = J->v_rs;
    float scale = J->scale;
    for (int item = lo; item < hi; item++) {
        int pair = item / J->split, b = pair / H, h = pair % H, r0, r1;
        rows_of(T, J->split, item % J->split, &r0, &r1);
        const uint8_t *cm = J->causal_mask ? J->causal_mask + (size_t)b * T : NULL;
        size_t off_qk = (size_t)b * T * qk_rs + (size_t)h * hd, off_v = (size_t)b * T * v_rs + (size_t)h * hd;
        const float *qh = J->q + off_qk, *kh = J->k + off_qk, *vh = J->v + off_v;
        float *P = J->att + ((size_t)b * H + h) * T * T; /* (T, T) */
        /* S = q k^T (A = q rows, B(e, j) = k[j, e]), scaled; query i sees key j when j <= i or cm[j] == 0 */
        vt_gemm(P + (size_t)r0 * T, T, qh + (size_t)r0 * qk_rs, qk_rs, 1, kh, 1, qk_rs, r1 - r0, hd, T, 0,
                NULL);
        for (int i = r0; i < r1; i++) {
            float *row = P + (size_t)i * T;
            for (int j = 0; j < T; j++) row[j] *= scale;
            if (cm)
                for (int j = i + 1; j < T; j++)
                    if (cm[j]) row[j] = -INFINITY;
            vt_softmax_row(row, row, T);
        }
        /* O = P V, into the head's columns of out */
        vt_gemm(J->out + ((size_t)b * T + r0) * D + (size_t)h * hd, D, P + (size_t)r0 * T, T, 1, vh, v_rs, 1,
                r1 - r0, T, hd, 0, NULL);
    }
}

void vt_gemm_attention_forward(float *out, float *att, float *scratch, const float *q, const float *k,
                               int qk_rs, const float *v, int v_rs, const uint8_t *causal_mask, int B, int T,
                               int H, int hd, int threads, float scale) {
    if (T <= 0 || hd <= 0) return;
    int nt = threads_of(threads);
    attn_job J = { .out = out,
                   .att = att,
                   .scratch = scratch,
                   .q = q,
                   .k = k,
                   .v = v,
                   .causal_mask = causal_mask,
                   .qk_rs = qk_rs,
                   .v_rs = v_rs,
                   .B = B,
                   .T = T,
                   .H = H,
                   .hd = hd,
                   .scale = scale,
                   .split = pair_split(B * H, T, nt) };
    vt_parallel_for_max(B * H * J.split, 1, 4.0 * B * H * (double)T * T * hd, nt, attn_forward_items, &J);
}

/* The backward of one pair's query rows [r0, r1): dS = P (dP - rowsum(P dP)) scale with
 * dP = dO V^T, into ds (row stride T), and dQ[rows] += dS K. */
static void attn_backward_rows(const attn_job *J, int b, int h, int r0, int r1, float *ds) {
    int T = J->T, H = J->H, hd = J->hd, D = H * hd, qk_rs = J->qk_rs, v_rs = J->v_rs;
    size_t off_qk = (size_t)b * T * qk_rs + (size_t)h * hd, off_v = (size_t)b * T * v_rs + (size_t)h * hd;
    const float *P = J->att_in + ((size_t)b * H + h) * T * T;
    const float *doh = J->dout + (size_t)b * T * D + (size_t)h * hd; /* (T, hd), row stride D */
    /* dP = dO V^T for the rows (B(e, j) = v[j, e]) */
    vt_gemm(ds, T, doh + (size_t)r0 * D, D, 1, J->v + off_v, 1, v_rs, r1 - r0, hd, T, 0, NULL);
    /* softmax: dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij) scale; masked keys have P = 0 */
    for (int i = r0; i < r1; i++)
        vt_softmax_backward_row(ds + (size_t)(i - r0) * T, P + (size_t)i * T, T, J->scale);
    /* S = q k^T  =>  dQ[rows] += dS K */
    if (J->dq)
        vt_gemm(J->dq + off_qk + (size_t)r0 * qk_rs, qk_rs, ds, T, 1, J->k + off_qk, qk_rs, 1, r1 - r0, T, hd,
                1, NULL);
}
/* dK[keys] += dS[rows, keys]^T Q[rows] for the query rows [r0, r1) (in order) and key rows [k0, k1) */
static void attn_backward_dk(const attn_job *J, int b, int h, const float *ds, int r0, int r1, int k0,
                             int k1) {
    int T = J->T, hd = J->hd, qk_rs = J->qk_rs;
    size_t off_qk = (size_t)b * T * qk_rs + (size_t)h * hd;
    vt_gemm(J->dk + off_qk + (size_t)k0 * qk_rs, qk_rs, ds + k0, 1, T, J->q + off_qk + (size_t)r0 * qk_rs,
            qk_rs, 1, k1 - k0, r1 - r0, hd, 1, NULL);
}
/* dV[keys] += P[:, keys]^T dO (A(j, i) = P[i, j]; accumulated on dv's values, i ascending) */
static void attn_backward_dv(const attn_job *J, int b, int h, int k0, int k1) {
    int T = J->T, H = J->H, hd = J->hd, D = H * hd, v_rs = J->v_rs;
    const float *P = J->att_in + ((size_t)b * H + h) * T * T;
    vt_gemm(J->dv + (size_t)b * T * v_rs + (size_t)h * hd + (size_t)k0 * v_rs, v_rs, P + k0, 1, T,
            J->dout + (size_t)b * T * D + (size_t)h * hd, D, 1, k1 - k0, T, hd, 1, NULL);
}

/* whole pairs, item = b*H + h, each with its thread's [R, T] block of scratch */
static void attn_backward_items(void *ctx, int lo, int hi, int tid) {
    const attn_job *J = ctx;
    int T = J->T, H = J->H, R = att_rows(T);
    float *dP = J->scratch + scratch_per_thread(T) * (size_t)tid;
    for (int item = lo; item < hi; item++) {
        int b = item / H, h = item % H;
        if (J->dv) attn_backward_dv(J, b, h, 0, T);
        if (!J->dq && !J->dk) continue;
        for (int i0 = 0; i0 < T; i0 += R) {
            int i1 = T - i0 < R ? T : i0 + R;
            attn_backward_rows(J, b, h, i0, i1, dP);
            if (J->dk) attn_backward_dk(J, b, h, dP, i0, i1, 0, T);
        }
    }
}
/* a pair split among the threads: phase 1 by query rows into the shared [T,T] dS, phase 2 by key rows */
static void attn_backward_phase1(void *ctx, int lo, int hi, int tid) {
    const attn_job *J = ctx;
    for (int p = lo; p < hi; p++) {
        int r0, r1;
        rows_of(J->T, J->split, p, &r0, &r1);
        if (r1 > r0) attn_backward_rows(J, J->b, J->h, r0, r1, J->scratch + (size_t)r0 * J->T);
    }
}
static void attn_backward_phase2(void *ctx, int lo, int hi, int tid) {
    const attn_job *J = ctx;
    for (int p = lo; p < hi; p++) {
        int k0, k1;
        rows_of(J->T, J->split, p, &k0, &k1);
        if (k1 <= k0) continue;
        if (J->dv) attn_backward_dv(J, J->b, J->h, k0, k1);
        if (J->dk) attn_backward_dk(J, J->b, J->h, J->scratch, 0, J->T, k0, k1);
    }
}

void vt_gemm_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                                const float *att, const float *q, const float *k, int qk_rs, const float *v,
                                int v_rs, int B, int T, int H, int hd, int threads, float scale) {
    if (T <= 0 || hd <= 0 || (!dq && !dk && !dv)) return;
    attn_job J = { .dq = dq,
                   .dk = dk,
                   .dv = dv,
                   .scratch = scratch,
                   .dout = dout,
                   .att_in = att,
                   .q = q,
                   .k = k,
                   .v = v,
                   .qk_rs = qk_rs,
                   .v_rs = v_rs,
                   .B = B,
                   .T = T,
                   .H = H,
                   .hd = hd,
                   .scale = scale };
    double work = 8.0 * B * H * (double)T * T * hd;
    int nt = threads_of(threads);
    /* split pairs only where whole ones leave threads idle and one [T,T] dS fits the scratch
     * (nt parts of [T,T]: the plan's `threads` >= nt of them) */
    if (pair_split(B * H, T, nt) == 1 || att_rows(T) < T) {
        vt_parallel_for_max(B * H, 1, work, nt, attn_backward_items, &J);
        return;
    }
    J.split = nt;
    for (J.b = 0; J.b < B; J.b++)
        for (J.h = 0; J.h < H; J.h++) {
            if (dq || dk) vt_parallel_for_max(nt, 1, work / (B * H) * 0.6, nt, attn_backward_phase1, &J);
            vt_parallel_for_max(nt, 1, work / (B * H) * 0.4, nt, attn_backward_phase2, &J);
        }
}

/* ---- attention of Tq queries over Tk keys (the latent attention pool): items are heads, each
 * running the images in order (so dq, shared by the images when q_bs is 0, sums them in order) ---- */
typedef struct {
    float *out, *att, *dq, *dk, *dv, *ds;
    const float *q, *k, *v, *dout, *att_in;
    int B, Tq, Tk, H, hd, q_bs, kv_rs;
    float scale;
} xattn_job;

static void xattn_forward_heads(void *ctx, int lo, int hi, int tid) {
    const xattn_job *J = ctx;
    int D = J->H * J->hd, Tq = J->Tq, Tk = J->Tk;
    for (int h = lo; h < hi; h++)
        for (int b = 0; b < J->B; b++) {
            const float *qh = J->q + (size_t)b * J->q_bs + (size_t)h * J->hd;
            const float *kh = J->k + (size_t)b * Tk * J->kv_rs + (size_t)h * J->hd;
            const float *vh = J->v + (size_t)b * Tk * J->kv_rs + (size_t)h * J->hd;
            float *P = J->att + ((size_t)b * J->H + h) * Tq * Tk;
            /* S = q k^T (B(e, j) = k[j, e]), scaled, softmax per row; O = P V */
            vt_gemm(P, Tk, qh, D, 1, kh, 1, J->kv_rs, Tq, J->hd, Tk, 0, NULL);
            for (int i = 0; i < Tq; i++) {
                float *row = P + (size_t)i * Tk;
                for (int j = 0; j < Tk; j++) row[j] *= J->scale;
                vt_softmax_row(row, row, Tk);
            }
            vt_gemm(J->out + (size_t)b * Tq * D + (size_t)h * J->hd, D, P, Tk, 1, vh, J->kv_rs, 1, Tq, Tk,
                    J->hd, 0, NULL);
        }
}

void vt_gemm_cross_attention_forward(float *out, float *att, const float *q, const float *k, const float *v,
                                     int B, int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale) {
    if (B <= 0 || Tq <= 0 || Tk <= 0 || hd <= 0) return;
    xattn_job J = { .out = out,
                    .att = att,
                    .q = q,
                    .k = k,
                    .v = v,
                    .B = B,
                    .Tq = Tq,
                    .Tk = Tk,
                    .H = H,
                    .hd = hd,
                    .q_bs = q_bs,
                    .kv_rs = kv_rs,
                    .scale = scale };
    vt_parallel_for(H, 1, 4.0 * B * H * (double)Tq * Tk * hd, xattn_forward_heads, &J);
}

static void xattn_backward_heads(void *ctx, int lo, int hi, int tid) {
    const xattn_job *J = ctx;
    int D = J->H * J->hd, Tq = J->Tq, Tk = J->Tk, hd = J->hd, rs = J->kv_rs;
    for (int h = lo; h < hi; h++)
        for (int b = 0; b < J->B; b++) {
            size_t qo = (size_t)b * J->q_bs + (size_t)h * hd, ko = (size_t)b * Tk * rs + (size_t)h * hd;
            const float *P = J->att_in + ((size_t)b * J->H + h) * Tq * Tk;
            const float *doh = J->dout + (size_t)b * Tq * D + (size_t)h * hd;
            float *ds = J->ds + ((size_t)b * J->H + h) * Tq * Tk;
            /* dV += P^T dO (A(j, i) = P[i, j]) */
            if (J->dv) vt_gemm(J->dv + ko, rs, P, 1, Tk, doh, D, 1, Tk, Tq, hd, 1, NULL);
            if (!J->dq && !J->dk) continue;
            /* dP = dO V^T; dS = P (dP - rowsum(P dP)) scale */
            vt_gemm(ds, Tk, doh, D, 1, J->v + ko, 1, rs, Tq, hd, Tk, 0, NULL);
            for (int i = 0; i < Tq; i++)
                vt_softmax_backward_row(ds + (size_t)i * Tk, P + (size_t)i * Tk, Tk, J->scale);
            /* dQ += dS K; dK += dS^T Q */
            if (J->dq) vt_gemm(J->dq + qo, D, ds, Tk, 1, J->k + ko, rs, 1, Tq, Tk, hd, 1, NULL);
            if (J->dk) vt_gemm(J->dk + ko, rs, ds, 1, Tk, J->q + qo, D, 1, Tk, Tq, hd, 1, NULL);
        }
}

void vt_gemm_cross_attention_backward(float *dq, float *dk, float *dv, float *dscore, const float *dout,
                                      const float *att, const float *q, const float *k, const float *v, int B,
                                      int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale) {
    if (B <= 0 || Tq <= 0 || Tk <= 0 || hd <= 0 || (!dq && !dk && !dv)) return;
    xattn_job J = { .dq = dq,
                    .dk = dk,
                    .dv = dv,
                    .ds = dscore,
                    .dout = dout,
                    .att_in = att,
                    .q = q,
                    .k = k,
                    .v = v,
                    .B = B,
                    .Tq = Tq,
                    .Tk = Tk,
                    .H = H,
                    .hd = hd,
                    .q_bs = q_bs,
                    .kv_rs = kv_rs,
                    .scale = scale };
    vt_parallel_for(H, 1, 8.0 * B * H * (double)Tq * Tk * hd, xattn_backward_heads, &J);
}

/* ---- dispatch: the composition above in every build, or the scalar reference (tests) ---- */
void vt_attention_forward(float *out, float *att, float *scratch, const float *q, const float *k, int qk_rs,
                          const float *v, int v_rs, const uint8_t *causal_mask, int B, int T, int H, int hd,
                          int threads, float scale) {
    if (vt_kernels_reference())
        vt_ref_attention_forward(out, att, q, k, qk_rs, v, v_rs, causal_mask, B, T, H, hd, scale);
    else
        vt_gemm_attention_forward(out, att, scratch, q, k, qk_rs, v, v_rs, causal_mask, B, T, H, hd, threads,
                                  scale);
}
void vt_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *att, const float *q, const float *k, int qk_rs, const float *v,
                           int v_rs, int B, int T, int H, int hd, int threads, float scale) {
    if (vt_kernels_reference())
        vt_ref_attention_backward(dq, dk, dv, scratch, dout, att, q, k, qk_rs, v, v_rs, B, T, H, hd, scale);
    else
        vt_gemm_attention_backward(dq, dk, dv, scratch, dout, att, q, k, qk_rs, v, v_rs, B, T, H, hd, threads,
                                   scale);
}
void vt_cross_attention_forward(float *out, float *att, const float *q, const float *k, const float *v, int B,
                                int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale) {
    if (vt_kernels_reference())
        vt_ref_cross_attention_forward(out, att, q, k, v, B, Tq, Tk, H, hd, q_bs, kv_rs, scale);
    else
        vt_gemm_cross_attention_forward(out, att, q, k, v, B, Tq, Tk, H, hd, q_bs, kv_rs, scale);
}
void vt_cross_attention_backward(float *dq, float *dk, float *dv, float *dscore, const float *dout,
                                 const float *att, const float *q, const float *k, const float *v, int B,
                                 int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale) {
    if (vt_kernels_reference())
        vt_ref_cross_attention_backward(dq, dk, dv, dscore, dout, att, q, k, v, B, Tq, Tk, H, hd, q_bs, kv_rs,
                                        scale);
    else
        vt_gemm_cross_attention_backward(dq, dk, dv, dscore, dout, att, q, k, v, B, Tq, Tk, H, hd, q_bs,
                                         kv_rs, scale);
}
