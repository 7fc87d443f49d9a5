/* test_attention.c: the attention behind the public names vt_attention_forward / _backward (composed
 * from the matmul kernels, src/kernels/kernels_attn.c) against the scalar reference
 * vt_ref_attention_*, over edge shapes: T 1..9, 33, 65, 197; head_dim below, at and above the
 * vector widths; odd row strides (q/k in one fused-style buffer, v apart); no mask, the AIM prefix
 * mask, random masks; every NULL-gradient pattern; gradients accumulated into random values;
 * guard floats around every output and the scratch. One source, built natively (ctest
 * "attention": portable matmul forward + reference backward) and for WASI with SIMD128 (ctest
 * "attention_wasm_simd": the SIMD matmuls). One line per failure, then "N passed, M failed";
 * exit status 1 on any failure. No dependency besides the kernels.
 *
 * Tolerances (eps = FLT_EPSILON, u = 1e-6 ~ 8 eps); the kernels only re-associate sums:
 *   scores: ds = u hd max|q| max|k| scale bounds the error of one score (length-hd dot product);
 *   att:    |a - ref| <= ref (2 ds + (8 + T) eps)   (softmax of scores off by ds; masked entries
 *           must be exactly 0 in both);
 *   out:    |o - ref| <= max|v| (2 ds + (8 + 2T) eps) + u|ref|   (a T-term sum of p v);
 *   dv:     bit-identical: dV += P^T dO adds the terms in the reference's order (i ascending)
 *           onto dv's values, in every matmul backward of this project; in the fused builds
 *           (vt_kernels_madd_fused(): relaxed SIMD, native FMA) each term rounds once instead of
 *           twice: |dv - ref| <= u (T + 1) max|dO| (+ u);
 *   dq, dk: dp = dO.v has error e <= u hd |dO| |v|; ds_ij = p (dp - sum p dp) scale is off by
 *           <= 2 e p scale; dq_i = sum_j ds_ij k_j then by <= |k| 2 e scale + the rounding of a
 *           T-term sum of terms <= 2 |dO| |v| scale |k|, i.e. u T that (the sum itself is added
 *           in the reference's order, j ascending; dk alike with |q|). */
#define KT_SEED 0x243F6A8885A308D3ull
#include "kernel_test.h"
#include "kernels/kernels.h"
#include "threads.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U   1e-6
#define EPS FLT_EPSILON

/* mask_kind 0: none, 1: AIM prefix (first T/3 keys visible to all), 2: random bytes.
 * grad_mask bits: 1 dq, 2 dk, 4 dv (0 = all NULL). */
static void check_attention(int B, int T, int H, int hd, int qk_pad, int v_pad, int mask_kind,
                            int grad_mask) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "B=%d T=%d H=%d hd=%d qk_rs=2D+%d v_rs=D+%d mask=%d grads=%d%d%d", B, T, H, hd,
             qk_pad, v_pad, mask_kind, grad_mask & 1, (grad_mask >> 1) & 1, (grad_mask >> 2) & 1);
    int D = H * hd, qk_rs = 2 * D + qk_pad, v_rs = D + v_pad;
    size_t nqk = (size_t)B * T * qk_rs, nv = (size_t)B * T * v_rs, nout = (size_t)B * T * D;
    size_t natt = (size_t)B * H * T * T, nscr = vt_attention_scratch_floats(T, hd, vt_threads_max());
    /* q and k live in one buffer (fused-qkv style): k starts D floats after q */
    float *qk = galloc(nqk), *v = galloc(nv), *dout = galloc(nout);
    fill(qk, nqk, -1, 1);
    fill(v, nv, -1, 1);
    fill(dout, nout, -1, 1);
    const float *q = qk, *k = qk + D;
    uint8_t *cm = NULL;
    if (mask_kind) {
        cm = malloc((size_t)B * T + 1);
        for (int i = 0; i < B * T; i++) cm[i] = mask_kind == 1 ? (i % T) >= T / 3 : (uint8_t)(rng_u32() & 1);
    }
    float scale = 1.0f / sqrtf((float)hd);
    float *o_s = galloc(nout), *o_r = galloc(nout), *a_s = galloc(natt), *a_r = galloc(natt);
    float *scr = galloc(nscr);
    fill(o_s, nout, -9, 9); /* overwritten: junk must not leak through */
    fill(a_s, natt, -9, 9);
    fill(scr, nscr, -9, 9);
    vt_attention_forward(o_s, a_s, scr, q, k, qk_rs, v, v_rs, cm, B, T, H, hd, vt_threads_max(), scale);
    vt_ref_attention_forward(o_r, a_r, q, k, qk_rs, v, v_rs, cm, B, T, H, hd, scale);
    float mq = maxabs(qk, nqk), mv = maxabs(v, nv), mdo = maxabs(dout, nout);
    double ds = U * hd * mq * mq * scale;
    int ok = 1;
    for (size_t i = 0; i < natt && ok; i++) {
        double tol = a_r[i] * (2 * ds + (8 + T) * EPS) + 1e-30;
        if (!(fabs((double)a_s[i] - a_r[i]) <= tol) || ((a_r[i] == 0.0f) != (a_s[i] == 0.0f))) {
            char buf[240];
            snprintf(buf, sizeof buf, "%s: att[%zu] got %.9g ref %.9g", ctx, i, a_s[i], a_r[i]);
            result(0, "attention_forward att", buf);
            ok = 0;
        }
    }
    if (ok) result(1, "attention_forward att", ctx);
    check_close("attention_forward out", ctx, o_s, o_r, nout, mv * (2 * ds + (8 + 2 * T) * EPS), U);
    check_guards("attention_forward out", ctx, o_s, nout);
    check_guards("attention_forward att", ctx, a_s, natt);
    check_guards("attention_forward scratch", ctx, scr, nscr);

    /* backward from the reference's probabilities; dq/dk share one buffer like q/k. Gradients
     * start random (+=); the floats between heads and rows (stride padding) must stay as they
     * were, which the comparison of the whole buffers checks. */
    float *dqk_r = (grad_mask & 3) ? galloc(nqk) : NULL, *dv_r = (grad_mask & 4) ? galloc(nv) : NULL;
    if (dqk_r) fill(dqk_r, nqk, -1, 1);
    if (dv_r) fill(dv_r, nv, -1, 1);
    float *dqk_s = dqk_r ? gcopy(dqk_r, nqk) : NULL, *dv_s = dv_r ? gcopy(dv_r, nv) : NULL;
    float *scr_r = galloc((size_t)T);
    float *dq_s = (grad_mask & 1) ? dqk_s : NULL, *dk_s = (grad_mask & 2) ? dqk_s + D : NULL;
    float *dq_r = (grad_mask & 1) ? dqk_r : NULL, *dk_r = (grad_mask & 2) ? dqk_r + D : NULL;
    fill(scr, nscr, -9, 9);
    vt_attention_backward(dq_s, dk_s, dv_s, scr, dout, a_r, q, k, qk_rs, v, v_rs, B, T, H, hd,
                          vt_threads_max(), scale);
    vt_ref_attention_backward(dq_r, dk_r, dv_r, scr_r, dout, a_r, q, k, qk_rs, v, v_rs, B, T, H, hd, scale);
    double e = U * hd * mdo * mv, term = 2 * mdo * mv * scale * mq;
    if (dqk_s)
        check_close("attention_backward dq/dk", ctx, dqk_s, dqk_r, nqk, 2 * e * scale * mq + U * T * term, 0);
    if (dv_s && vt_kernels_madd_fused() == 0) same_bits("attention_backward dv", ctx, dv_s, dv_r, nv);
    /* fused builds: each p*dO term rounds once, not twice: a T-term sum of terms <= |dO| */
    else if (dv_s)
        check_close("attention_backward dv (fused)", ctx, dv_s, dv_r, nv, U * (T + 1) * mdo + U, 0);
    check_guards("attention_backward dq/dk", ctx, dqk_s, nqk);
    check_guards("attention_backward dv", ctx, dv_s, nv);
    check_guards("attention_backward scratch", ctx, scr, nscr);
    gfree(qk), gfree(v), gfree(dout), gfree(o_s), gfree(o_r), gfree(a_s), gfree(a_r), gfree(scr);
    gfree(dqk_r), gfree(dv_r), gfree(dqk_s), gfree(dv_s), gfree(scr_r);
    free(cm);
}

/* The same call through the reference route (vt_kernels_use_reference) must be the reference. */
static void check_dispatch(void) {
    int B = 2, T = 5, H = 2, hd = 3, D = H * hd;
    size_t n = (size_t)B * T * 3 * D, nout = (size_t)B * T * D, natt = (size_t)B * H * T * T;
    float *qkv = galloc(n), *o1 = galloc(nout), *o2 = galloc(nout), *a1 = galloc(natt), *a2 = galloc(natt);
    float *scr = galloc(vt_attention_scratch_floats(T, hd, vt_threads_max()));
    fill(qkv, n, -1, 1);
    vt_kernels_use_reference(1);
    vt_attention_forward(o1, a1, scr, qkv, qkv + D, 3 * D, qkv + 2 * D, 3 * D, NULL, B, T, H, hd,
                         vt_threads_max(), 0.5f);
    vt_kernels_use_reference(0);
    vt_ref_attention_forward(o2, a2, qkv, qkv + D, 3 * D, qkv + 2 * D, 3 * D, NULL, B, T, H, hd, 0.5f);
    result(!memcmp(o1, o2, nout * 4) && !memcmp(a1, a2, natt * 4), "dispatch",
           "vt_kernels_use_reference(1) routes vt_attention_forward to vt_ref_attention_forward");
    result(vt_attention_scratch_floats(T, hd, vt_threads_max()) >= (size_t)T, "scratch size",
           "holds the reference backward's T floats");
    gfree(qkv), gfree(o1), gfree(o2), gfree(a1), gfree(a2), gfree(scr);
}

int main(void) {
#if defined(VT_TEST_EXPECT_FUSED) && defined(__x86_64__) /* linked to the native FMA kernels */
    if (!__builtin_cpu_supports("fma")) {
        puts("skipped: this CPU has no FMA3");
        return 77;
    }
    result(vt_kernels_madd_fused() == 1, "MADD fused", "native FMA build");
#endif
    check_dispatch();
    static const int hds[] = { 1, 3, 4, 5, 8, 16, 17, 33, 64 };
    int c = 0;
    for (int T = 1; T <= 9; T++)
        for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
            for (int mask = 0; mask < 3; mask++, c++)
                check_attention(1 + (c % 2), T, 1 + (c % 3), hds[h], (c % 5) * 3 + (c & 1), (c % 4) * 5 + 1,
                                mask, 1 + c % 7);
    static const int bigT[] = { 33, 65 };
    for (int t = 0; t < 2; t++)
        for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++, c++)
            check_attention(1 + (c % 2), bigT[t], 1 + (c % 3), hds[h], (c % 5) * 3 + (c & 1), (c % 4) * 5 + 1,
                            c % 3, 1 + c % 7);
    for (int gm = 0; gm < 8; gm++) check_attention(2, 7, 3, 17, 5, 3, 1, gm); /* every NULL pattern */
    check_attention(2, 33, 3, 64, 0, 0, 1, 7); /* model-like: hd 64, fused qkv stride */
    check_attention(1, 65, 2, 64, 7, 9, 2, 7);
    check_attention(1, 197, 3, 64, 0, 0, 0, 7); /* ViT-tiny's 197 tokens */
    check_attention(1, 50, 2, 64, 0, 0, 1, 7);  /* MAE's 50 visible tokens, AIM prefix mask */
    return kt_finish();
}
