/* test_kernels_simd.c: every vt_simd_* kernel against its scalar reference vt_ref_* over edge
 * shapes (sizes below, at and above the vector/tile widths, odd strides, NULL gradients,
 * accumulation into non-zero gradients), plus the vectorised erf/exp against libm and the AdamW
 * step against its scalar reference (vt_adamw_update, kernels_ref.c). One line per failure; ends with
 * "N passed, M failed"; exit status 1 on any failure. Built twice from this one source: natively
 * (x86-64 SSE2 through src/kernels/simd128.h; ctest kernels_simd_native: build/test_kernels_simd)
 * and as a WASI command module (ctest kernels_simd_wasm), by hand:
 *
 *   clang-14 --target=wasm32-wasi --sysroot=/usr -msimd128 -O2 -ffp-contract=off \
 *     -DVT_HAVE_SIMD_KERNELS -Isrc -Isrc/kernels src/kernels/kernels_ref.c \
 *     src/kernels/kernels_simd.c src/kernels/kernels.c src/kernels/kernels_portable.c \
 *     src/kernels/kernels_attn.c src/status.c \
 *     tests/test_kernels_simd.c -o /tmp/tks.wasm -lm
 *   node tests/run_wasi.mjs /tmp/tks.wasm
 * (GFLOP/s and the SIMD128 peak are measured by bench/kernel_bench.c, not here.)
 *
 * Tolerances (eps = FLT_EPSILON = 2^-23, u = 1e-6 ~ 8 eps):
 *   reductions of length L whose terms are bounded by S:   |simd - ref| <= u*L*S + u*|ref|
 *     (the SIMD kernels only re-associate sums: 4 lane-wise partials, then a pairwise reduce);
 *   erf, exp (direct):  within ERF_MAX_ULP / EXP_MAX_ULP ulp of libm;
 *   gelu:      |simd - ref| <= 0.5|x| * 4 eps + 4 eps |ref|: the erf error is absolute (it is
 *              added to 1), so it is scaled by 0.5|x|, not by |ref| (for x << 0 the reference's
 *              own 1 + erff(x) has lost all relative accuracy);
 *   gelu':     |simd - ref| <= |dout| (4 eps (1 + |x| phi(x)) + 4 eps |gelu'|) (same reason);
 *   softmax:   |simd - ref| <= (8 + n) eps |ref| (exp within 2 ulp, sum re-associated);
 * Kernels whose SIMD order of summation equals the reference's (matmul backward, dbias,
 * AdamW) are also expected bit-identical; that is checked where promised. Fused builds (relaxed
 * SIMD wasm: test_kernels_relaxed.wasm; native FMA: test_kernels_fma) round each MADD once:
 * matmul backward is then held to the reassociation tolerance against the reference AND bit for
 * bit against the reference's loop with fmaf (same order); dbias and AdamW never MADD and stay
 * bit-identical; MADD itself must equal fmaf lane for lane. Attention is composed
 * from the matmuls (src/kernels/kernels_attn.c) and tested by tests/test_attention.c. */
#include "kernel_test.h"
#include "kernels.h"
#include "kernels_simd.h"
#include "vitrine.h" /* vt_adamw_update */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U           1e-6
#define EPS         FLT_EPSILON
#define ERF_MAX_ULP 2
#define EXP_MAX_ULP 2

/* vt_simd_madd_fused(): 0 MADD = mul + add, 1 fused, 2 fused build on a host that does not fuse */
static int madd_mode;

/* ---------------------------------------------------------------------------- utilities */

/* a reduction of length L whose terms are bounded by S: |simd - ref| <= u*L*S + u*|ref| */
static int close_red(const char *what, const char *ctx, const float *s, const float *r, size_t n, double L,
                     double S) {
    return check_close(what, ctx, s, r, n, U * L * S, U);
}
/* The three gradients of a backward under test (dinp, dw, db), NULL where grad_mask's bit k is
 * clear: random values in ref[k] (the kernels accumulate with +=), the same in sim[k]. */
static void grads_pair(int grad_mask, const size_t n[3], float *ref[3], float *sim[3]) {
    for (int k = 0; k < 3; k++) {
        ref[k] = (grad_mask >> k) & 1 ? galloc(n[k]) : NULL;
        if (ref[k]) fill(ref[k], n[k], -1, 1);
    }
    for (int k = 0; k < 3; k++) sim[k] = ref[k] ? gcopy(ref[k], n[k]) : NULL;
}
/* distance in ulps between two floats (through the ordered integer representation) */
static double ulp_dist(float a, float b) {
    if (a == b) return 0;
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : 1e30;
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return fabs((double)ia - (double)ib);
}
/* y[i] within max_ulp of libm's ref(x[i]) for every i; the worst one goes in the line
 * (printed with VT_VERBOSE set) */
static void check_ulp(const char *what, const float *y, const float *x, int n, float (*ref)(float),
                      int max_ulp) {
    double worst = 0;
    int wi = 0;
    for (int i = 0; i < n; i++) {
        double d = ulp_dist(y[i], ref(x[i]));
        if (d > worst) worst = d, wi = i;
    }
    char ctx[200];
    snprintf(ctx, sizeof ctx, "max %.0f ulp at x=%.9g (simd %.9g libm %.9g), bound %d", worst, x[wi], y[wi],
             ref(x[wi]), max_ulp);
    result(worst <= max_ulp, what, ctx);
    if (getenv("VT_VERBOSE")) printf("%s: %s\n", what, ctx);
}

static const int SIZES[] = { 0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 33, 64, 65 };
#define NSIZES (int)(sizeof SIZES / sizeof SIZES[0])

/* ---------------------------------------------------------------------------- vocabulary */

/* The per-lane contract of src/kernels/simd128.h, checked lane by lane against its scalar
 * definition on awkward inputs (ties, signed zeros, NaN, infinities, |x| >= 2^23): the same checks
 * pass natively (SSE2, or SSE4.1's roundps) and in wasm, which is what makes the two builds'
 * results bit-identical. */
static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static void lanes(float out[4], f32x4 v) { ST(out, v); }

/* same bits in every lane; a NaN matches any NaN unless exact (the payload of a computed NaN is
 * not specified by wasm; pmin/pmax, abs, neg, bitselect are exact) */
static void check_lanes_x(const char *op, const float got[4], const float want[4], const float *in,
                          int exact) {
    for (int l = 0; l < 4; l++)
        if (bits_of(got[l]) != bits_of(want[l]) && (exact || !(isnan(got[l]) && isnan(want[l])))) {
            char buf[160];
            snprintf(buf, sizeof buf, "lane %d: input %.9g got %.9g (0x%08x) want %.9g (0x%08x)", l, in[l],
                     got[l], bits_of(got[l]), want[l], bits_of(want[l]));
            result(0, op, buf);
            return;
        }
    result(1, op, "");
}
static void check_lanes(const char *op, const float got[4], const float want[4], const float *in) {
    check_lanes_x(op, got, want, in, 0);
}

static void test_vocabulary(void) {
    const float qnan = float_of(0x7FC01234u), nnan = float_of(0xFFC00042u);
    const float vals[] = { 0.5f,       1.5f,        2.5f,       -0.5f,      -1.5f,       -2.5f,
                           0.3f,       -0.3f,       0.0f,       -0.0f,      0.49999997f, -0.49999997f,
                           4194303.5f, -4194304.5f, 8388607.0f, 8388608.0f, -8388609.0f, 1e20f,
                           -1e20f,     1.4e-45f,    -1.4e-45f,  INFINITY,   -INFINITY,   qnan,
                           nnan,       126.49999f,  -150.5f,    3.0f };
    enum { NV = sizeof vals / sizeof vals[0] };
    float in[4], got[4], want[4];
    for (int i = 0; i < NV; i++) { /* every ordered pair of vals, 4 lanes at a time */
        for (int l = 0; l < 4; l++) in[l] = vals[(i + l) % NV];
        f32x4 a = LD(in);
        for (int l = 0; l < 4; l++) want[l] = rintf(in[l]); /* default mode: ties to even */
        lanes(got, NEAREST(a)), check_lanes("NEAREST", got, want, in);
        for (int l = 0; l < 4; l++) want[l] = float_of(bits_of(in[l]) & 0x7FFFFFFFu);
        lanes(got, ABS(a)), check_lanes_x("ABS", got, want, in, 1);
        for (int l = 0; l < 4; l++) want[l] = float_of(bits_of(in[l]) ^ 0x80000000u);
        lanes(got, NEG(a)), check_lanes_x("NEG", got, want, in, 1);
        for (int j = 0; j < NV; j++) {
            float bin[4];
            for (int l = 0; l < 4; l++) bin[l] = vals[(j + 3 * l) % NV];
            f32x4 b = LD(bin);
            /* pmin/pmax return one of their inputs, bits and all (also a NaN's payload) */
            for (int l = 0; l < 4; l++) want[l] = bin[l] < in[l] ? bin[l] : in[l];
            lanes(got, PMIN(a, b)), check_lanes_x("PMIN", got, want, in, 1);
            for (int l = 0; l < 4; l++) want[l] = in[l] < bin[l] ? bin[l] : in[l];
            lanes(got, PMAX(a, b)), check_lanes_x("PMAX", got, want, in, 1);
            for (int l = 0; l < 4; l++) want[l] = float_of(in[l] >= bin[l] ? 0xFFFFFFFFu : 0u);
            lanes(got, GE(a, b)), check_lanes("GE", got, want, in);
            for (int l = 0; l < 4; l++) want[l] = in[l] >= bin[l] ? in[l] : bin[l];
            lanes(got, BSEL(a, b, GE(a, b))), check_lanes_x("BSEL", got, want, in, 1);
            for (int l = 0; l < 4; l++) want[l] = in[l] / bin[l];
            lanes(got, DIV(a, b)), check_lanes("DIV", got, want, in);
            for (int l = 0; l < 4; l++) want[l] = in[l] - in[l] * bin[l];
            lanes(got, SUB(a, MUL(a, b))), check_lanes("SUB/MUL", got, want, in);
            /* two roundings in SIMD128/SSE2, one in the fused builds (on a host that fuses) */
            for (int l = 0; l < 4; l++)
                want[l] = madd_mode == 1 ? fmaf(in[l], bin[l], in[l]) : in[l] + in[l] * bin[l];
            lanes(got, MADD(a, a, b));
            check_lanes(madd_mode == 1 ? "MADD (fused)" : "MADD (two roundings)", got, want, in);
        }
        for (int l = 0; l < 4; l++) want[l] = sqrtf(in[l]);
        lanes(got, SQRT(a)), check_lanes("SQRT", got, want, in);
    }
    /* integer lanes, rearrangements, lane 0 */
    const float x[4] = { 1.0f, 2.0f, 3.0f, 4.0f }, y[4] = { 5.0f, 6.0f, 7.0f, 8.0f };
    f32x4 a = LD(x), b = LD(y);
    const struct {
        const char *op;
        f32x4 v;
        float w[4];
    } sh[] = { { "SWAP_HALVES", SWAP_HALVES(a), { 3, 4, 1, 2 } },
               { "SWAP_PAIRS", SWAP_PAIRS(a), { 2, 1, 4, 3 } },
               { "ZIP_LO", ZIP_LO(a, b), { 1, 5, 2, 6 } },
               { "ZIP_HI", ZIP_HI(a, b), { 3, 7, 4, 8 } },
               { "CAT_LO", CAT_LO(a, b), { 1, 2, 5, 6 } },
               { "CAT_HI", CAT_HI(a, b), { 3, 4, 7, 8 } },
               { "MAKE", MAKE(1.0f, 5.0f, -0.0f, 8.0f), { 1, 5, -0.0f, 8 } },
               { "SPLAT", SPLAT(7.0f), { 7, 7, 7, 7 } },
               { "LDSPLAT", LDSPLAT(y + 2), { 7, 7, 7, 7 } },
               { "ZERO", ZERO(), { 0, 0, 0, 0 } } };
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
        lanes(got, sh[i].v), check_lanes(sh[i].op, got, sh[i].w, x);
    result(LANE0(b) == 5.0f, "LANE0", "");
    int32_t iv[4] = { -5, 7, INT32_MIN, INT32_MAX }, io[4];
    f32x4 vi;
    memcpy(&vi, iv, sizeof vi);
    memcpy(io, (f32x4[]){ I32_SHR(vi, 1) }, 16);
    result(io[0] == -3 && io[1] == 3 && io[2] == INT32_MIN / 2 && io[3] == INT32_MAX / 2, "I32_SHR",
           "arithmetic");
    memcpy(io, (f32x4[]){ I32_SHL(vi, 23) }, 16);
    result((uint32_t)io[0] == ((uint32_t)-5 << 23) && io[1] == 7 << 23 && io[2] == 0, "I32_SHL", "");
    memcpy(io, (f32x4[]){ I32_SUB(I32_ADD(vi, I32_SPLAT(1)), I32_SPLAT(3)) }, 16);
    result(io[0] == -7 && io[1] == 5 && io[2] == INT32_MAX - 1 && io[3] == INT32_MAX - 2, "I32_ADD/SUB",
           "wraps");
    memcpy(io, (f32x4[]){ BOR(BAND(vi, I32_SPLAT(0xFF)), I32_SPLAT(0x100)) }, 16);
    result(io[0] == 0x1FB && io[1] == 0x107 && io[2] == 0x100 && io[3] == 0x1FF, "BAND/BOR", "");
}

/* ---------------------------------------------------------------------------- matmul */

/* vt_ref_matmul_forward's loop with each `acc += a*w` fused: the fused builds' forward, bit for bit */
static void fused_ref_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int M,
                                     int K, int N) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(inp[(size_t)m * K + k], w[(size_t)n * K + k], acc);
            out[(size_t)m * N + n] = bias ? acc + bias[n] : acc;
        }
}

/* vt_ref_matmul_backward's dinp and dw loops with each `+= g*x` fused (fmaf: one rounding): what
 * the fused builds' matmul backward must give bit for bit on a host that fuses. */
static void fused_ref_matmul_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                      const float *w, int M, int K, int N) {
    if (dinp)
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float g = dout[(size_t)m * N + n];
                for (int k = 0; k < K; k++)
                    dinp[(size_t)m * K + k] = fmaf(g, w[(size_t)n * K + k], dinp[(size_t)m * K + k]);
            }
    if (dw)
        for (int n = 0; n < N; n++)
            for (int m = 0; m < M; m++) {
                float g = dout[(size_t)m * N + n];
                for (int k = 0; k < K; k++)
                    dw[(size_t)n * K + k] = fmaf(g, inp[(size_t)m * K + k], dw[(size_t)n * K + k]);
            }
}

static void check_matmul(int M, int K, int N, int use_bias, int grad_mask) {
    char ctx[128];
    snprintf(ctx, sizeof ctx, "M=%d K=%d N=%d bias=%d grads=%d%d%d", M, K, N, use_bias, grad_mask & 1,
             (grad_mask >> 1) & 1, (grad_mask >> 2) & 1);
    size_t nMK = (size_t)M * K, nNK = (size_t)N * K, nMN = (size_t)M * N;
    float *inp = galloc(nMK), *w = galloc(nNK), *bias = galloc(N), *dout = galloc(nMN);
    fill(inp, nMK, -1, 1);
    fill(w, nNK, -1, 1);
    fill(bias, N, -1, 1);
    fill(dout, nMN, -1, 1);
    float ma = maxabs(inp, nMK), mw = maxabs(w, nNK), md = maxabs(dout, nMN);

    /* forward */
    float *o_s = galloc(nMN), *o_r = galloc(nMN);
    fill(o_s, nMN, -9, 9); /* overwritten: junk must not leak through */
    memcpy(o_r, o_s, nMN * sizeof(float));
    vt_simd_matmul_forward(o_s, inp, w, use_bias ? bias : NULL, M, K, N);
    vt_ref_matmul_forward(o_r, inp, w, use_bias ? bias : NULL, M, K, N);
    close_red("matmul_forward", ctx, o_s, o_r, nMN, K, ma * mw);
    /* the GEMM adds in the reference's order (k ascending, the bias last): bit-identical, or
     * (fused host) equal to the reference's loop with each multiply-add fused */
    if (madd_mode == 0) same_bits("matmul_forward", ctx, o_s, o_r, nMN);
    if (madd_mode == 1) {
        fused_ref_matmul_forward(o_r, inp, w, use_bias ? bias : NULL, M, K, N);
        same_bits("matmul_forward = fused-order reference", ctx, o_s, o_r, nMN);
    }
    check_guards("matmul_forward", ctx, o_s, nMN);

    /* backward: gradients start from random values (+= semantics), NULL per grad_mask */
    float *gr[3], *gs[3];
    grads_pair(grad_mask, (size_t[3]){ nMK, nNK, (size_t)N }, gr, gs);
    float *di_r = gr[0], *dw_r = gr[1], *db_r = gr[2], *di_s = gs[0], *dw_s = gs[1], *db_s = gs[2];
    float *di_f = di_r ? gcopy(di_r, nMK) : NULL, *dw_f = dw_r ? gcopy(dw_r, nNK) : NULL;
    vt_simd_matmul_backward(di_s, dw_s, db_s, dout, inp, w, M, K, N);
    vt_ref_matmul_backward(di_r, dw_r, db_r, dout, inp, w, M, K, N);
    if (madd_mode == 0) { /* same order of summation as the reference: bit-identical */
        if (di_s) same_bits("matmul_backward dinp", ctx, di_s, di_r, nMK);
        if (dw_s) same_bits("matmul_backward dw", ctx, dw_s, dw_r, nNK);
    } else {
        /* Fused: every `+= g*x` of the reference rounds once instead of twice, so the sums differ
         * from the reference by the products' roundings (at most half an ulp of each term), well
         * inside the reassociation bound (u per term of size |dout| |w| or |dout| |inp|) ... */
        if (di_s) close_red("matmul_backward dinp (fused)", ctx, di_s, di_r, nMK, N, md * mw);
        if (dw_s) close_red("matmul_backward dw (fused)", ctx, dw_s, dw_r, nNK, M, md * ma);
        /* ... and, where the host fuses, equal bit for bit to the reference's loop with each
         * multiply-add fused (same order of summation) */
        if (madd_mode == 1) {
            fused_ref_matmul_backward(di_f, dw_f, dout, inp, w, M, K, N);
            if (di_s) same_bits("matmul_backward dinp = fused-order reference", ctx, di_s, di_f, nMK);
            if (dw_s) same_bits("matmul_backward dw = fused-order reference", ctx, dw_s, dw_f, nNK);
        }
    }
    /* column sums are plain adds in every build: bit-identical */
    if (db_s) same_bits("matmul_backward dbias", ctx, db_s, db_r, N);
    check_guards("matmul_backward dinp", ctx, di_s, nMK);
    check_guards("matmul_backward dw", ctx, dw_s, nNK);
    check_guards("matmul_backward dbias", ctx, db_s, N);
    gfree(di_f), gfree(dw_f);
    gfree(inp), gfree(w), gfree(bias), gfree(dout), gfree(o_s), gfree(o_r);
    gfree(di_r), gfree(dw_r), gfree(db_r), gfree(di_s), gfree(dw_s), gfree(db_s);
}

/* vt_simd_gemm over every operand layout (A and B row-major, transposed, strided column blocks
 * of wider buffers as attention uses them), overwrite with and without bias, and accumulate:
 * bit for bit against vt_ref_gemm (fused builds: against it with each multiply-add fused) */
static void fused_ref_gemm(float *c, int ldc, const float *a, int ars, int acs, const float *b, int brs,
                           int bcs, int I, int J, int L, int accumulate, const float *bias) {
    for (int i = 0; i < I; i++)
        for (int l = 0; l < L; l++) {
            float acc = accumulate ? c[(size_t)i * ldc + l] : 0.0f;
            for (int j = 0; j < J; j++)
                acc = fmaf(a[(size_t)i * ars + (size_t)j * acs], b[(size_t)j * brs + (size_t)l * bcs], acc);
            c[(size_t)i * ldc + l] = !accumulate && bias ? acc + bias[l] : acc;
        }
}
static void check_gemm(int I, int J, int L, int a_t, int b_t, int pad, int accumulate, int use_bias) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "I=%d J=%d L=%d A%s B%s pad=%d accumulate=%d bias=%d", I, J, L, a_t ? "^T" : "",
             b_t ? "^T" : "", pad, accumulate, use_bias);
    /* A (I x J) stored row-major or transposed, rows `pad` floats longer than needed; B alike;
     * C with row stride L + pad (the padding must stay untouched) */
    int lda = (a_t ? I : J) + pad, ldb = (b_t ? J : L) + pad, ldc = L + pad;
    size_t na = (size_t)(a_t ? J : I) * lda, nb = (size_t)(b_t ? L : J) * ldb, nc = (size_t)I * ldc;
    float *a = galloc(na), *b = galloc(nb), *bias = galloc(L), *c_s = galloc(nc), *c_r = galloc(nc);
    fill(a, na, -1, 1), fill(b, nb, -1, 1), fill(bias, L, -1, 1), fill(c_s, nc, -1, 1);
    memcpy(c_r, c_s, nc * sizeof(float));
    int ars = a_t ? 1 : lda, acs = a_t ? lda : 1, brs = b_t ? 1 : ldb, bcs = b_t ? ldb : 1;
    const float *bp = !accumulate && use_bias ? bias : NULL;
    vt_simd_gemm(c_s, ldc, a, ars, acs, b, brs, bcs, I, J, L, accumulate, bp);
    if (madd_mode == 1)
        fused_ref_gemm(c_r, ldc, a, ars, acs, b, brs, bcs, I, J, L, accumulate, bp);
    else
        vt_ref_gemm(c_r, ldc, a, ars, acs, b, brs, bcs, I, J, L, accumulate, bp);
    if (madd_mode == 2)
        close_red("gemm (fused build, unfused host)", ctx, c_s, c_r, nc, J + 1, 1);
    else
        same_bits("gemm", ctx, c_s, c_r, nc); /* the padding columns included */
    check_guards("gemm", ctx, c_s, nc);
    gfree(a), gfree(b), gfree(bias), gfree(c_s), gfree(c_r);
}

static void test_gemm(void) {
    static const int S[] = { 1, 3, 4, 5, 8, 9, 17, 64, 197, 300 };
    int n = (int)(sizeof S / sizeof S[0]), combo = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            for (int l = 0; l < n; l++, combo++) {
                if ((size_t)S[i] * S[j] * S[l] > 3000000) continue;
                check_gemm(S[i], S[j], S[l], combo & 1, (combo >> 1) & 1, combo % 3 == 0 ? 0 : 1 + combo % 7,
                           (combo >> 2) & 1, combo % 5 != 0);
            }
    /* several blocks of j (KC), of l (B blocks) and of i (A blocks) */
    check_gemm(37, 700, 300, 0, 1, 3, 0, 1);
    check_gemm(300, 520, 41, 1, 0, 0, 1, 0);
    check_gemm(3, 0, 5, 0, 0, 2, 0, 1); /* J = 0: 0 + bias */
    check_gemm(3, 0, 5, 0, 0, 2, 1, 0); /* J = 0, accumulate: unchanged */
}

static void test_matmul(void) {
    int combo = 0;
    for (int a = 0; a < NSIZES; a++)
        for (int b = 0; b < NSIZES; b++)
            for (int c = 0; c < NSIZES; c++, combo++)
                check_matmul(SIZES[a], SIZES[b], SIZES[c], combo & 1, 1 + combo % 7);
    /* every NULL pattern, including all-NULL, on a shape with every kind of tail */
    for (int mask = 0; mask < 8; mask++) check_matmul(7, 17, 9, 1, mask);
    /* model-like shapes: several K blocks, J blocks of the backward, w blocks of the forward */
    check_matmul(197, 192, 576, 1, 7);
    check_matmul(300, 768, 97, 1, 7);
    check_matmul(261, 350, 190, 0, 7);
}

/* ---------------------------------------------------------------------------- layernorm */

static void check_layernorm(int M, int D, int affine, int offset, int variant) {
    char ctx[128];
    snprintf(ctx, sizeof ctx, "M=%d D=%d affine=%d offset=%d variant=%d", M, D, affine, offset, variant);
    size_t n = (size_t)M * D;
    float *x = galloc(n), *w = galloc(D), *b = galloc(D), *dy = galloc(n);
    fill(x, n, -2, 2);
    for (size_t i = 0; i < n; i++) x[i] += (float)offset;
    fill(w, D, -1.5f, 1.5f);
    fill(b, D, -1, 1);
    fill(dy, n, -1, 1);
    const float *wp = affine ? w : NULL, *bp = affine ? b : NULL;
    float eps = 1e-6f;

    float *y_s = galloc(n), *y_r = galloc(n), *mu_s = galloc(M), *mu_r = galloc(M);
    float *rs_s = galloc(M), *rs_r = galloc(M);
    int in_place = variant == 1, no_stats = variant == 2;
    if (in_place) memcpy(y_s, x, n * sizeof(float));
    vt_simd_layernorm_forward(y_s, no_stats ? NULL : mu_s, no_stats ? NULL : rs_s, in_place ? y_s : x, wp, bp,
                              M, D, eps);
    vt_ref_layernorm_forward(y_r, mu_r, rs_r, x, wp, bp, M, D, eps);
    /* out = (x - mu) rs w + b: the errors of mu and of the variance sum (length D) enter
     * relative to the normalised value, |n| <= sqrt(D); the mean sees |x| + offset */
    float mw = affine ? maxabs(w, D) : 1.0f, mb = affine ? maxabs(b, D) : 0.0f;
    float rsmax = maxabs(rs_r, M);
    double S_out = (maxabs(x, n) * rsmax + sqrtf((float)D) + 1.0) * mw + mb;
    close_red("layernorm_forward out", ctx, y_s, y_r, n, D, S_out);
    if (!no_stats) {
        close_red("layernorm_forward mean", ctx, mu_s, mu_r, M, D, maxabs(x, n));
        close_red("layernorm_forward rstd", ctx, rs_s, rs_r, M, D, rsmax);
    }
    check_guards("layernorm_forward", ctx, y_s, n);

    /* backward, from the reference's saved statistics; gradients start random */
    int mask = variant == 0 ? 7 : variant == 1 ? 1 : variant == 2 ? 6 : 0;
    float *gr[3], *gs[3];
    grads_pair(mask, (size_t[3]){ n, (size_t)D, (size_t)D }, gr, gs);
    float *di_r = gr[0], *dw_r = gr[1], *db_r = gr[2], *di_s = gs[0], *dw_s = gs[1], *db_s = gs[2];
    vt_simd_layernorm_backward(di_s, dw_s, db_s, dy, x, wp, mu_r, rs_r, M, D);
    vt_ref_layernorm_backward(di_r, dw_r, db_r, dy, x, wp, mu_r, rs_r, M, D);
    double nmax = 0; /* largest normalised value */
    for (int m = 0; m < M; m++)
        for (int i = 0; i < D; i++) {
            double v = fabs((x[(size_t)m * D + i] - mu_r[m]) * rs_r[m]);
            nmax = v > nmax ? v : nmax;
        }
    float mdy = maxabs(dy, n);
    /* dinp = rs (dn - mean(dn) - n mean(dn n)): terms up to rs |w| |dy| (1 + n^2); the normalised
     * value itself carries the forward's error (x - mu) rs ~ u |x| rs */
    double S_di = rsmax * mw * mdy * (1 + nmax * nmax) * (1 + maxabs(x, n) * rsmax);
    if (di_s) close_red("layernorm_backward dinp", ctx, di_s, di_r, n, D, S_di);
    if (dw_s) close_red("layernorm_backward dw", ctx, dw_s, dw_r, D, M, (nmax + 1) * mdy);
    if (db_s) same_bits("layernorm_backward db", ctx, db_s, db_r, D);
    check_guards("layernorm_backward dinp", ctx, di_s, n);
    check_guards("layernorm_backward dw", ctx, dw_s, D);
    check_guards("layernorm_backward db", ctx, db_s, D);
    gfree(x), gfree(w), gfree(b), gfree(dy), gfree(y_s), gfree(y_r), gfree(mu_s), gfree(mu_r);
    gfree(rs_s), gfree(rs_r), gfree(di_r), gfree(dw_r), gfree(db_r), gfree(di_s), gfree(dw_s);
    gfree(db_s);
}

static void test_layernorm(void) {
    static const int Ds[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 191, 192, 193 };
    static const int Ms[] = { 1, 2, 3, 5 };
    int c = 0;
    for (size_t d = 0; d < sizeof Ds / sizeof Ds[0]; d++)
        for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++, c++)
            check_layernorm(Ms[m], Ds[d], c & 1, (c % 3 == 0) ? 100 : 0, c % 4);
    check_layernorm(0, 17, 1, 0, 0);
    for (int v = 0; v < 4; v++) check_layernorm(3, 197, v & 1, 0, v);
}

/* ---------------------------------------------------------------------------- erf / exp */

static void test_erf_exp(void) {
    enum { NE = 200003 };
    float *x = malloc(NE * sizeof(float)), *y = malloc(NE * sizeof(float));
    /* erf: dense on [-5, 5], then small magnitudes down to subnormals */
    for (int i = 0; i < NE; i++) x[i] = -5.0f + 10.0f * (float)i / (NE - 1);
    for (int i = 0; i < 2000; i++) x[i] = ldexpf(rng_uniform(-1, 1), -(i % 140));
    x[2000] = 0.0f, x[2001] = -0.0f, x[2002] = 3.925f, x[2003] = 40.0f, x[2004] = -1e30f;
    x[2005] = INFINITY, x[2006] = -INFINITY;
    vt_simd_erf(y, x, NE);
    check_ulp("erf vs libm erff", y, x, NE, erff, ERF_MAX_ULP);

    /* exp: the whole range including subnormal results, overflow, -inf */
    for (int i = 0; i < NE; i++) x[i] = -110.0f + 200.0f * (float)i / (NE - 1);
    for (int i = 0; i < 4000; i++) x[i] = rng_uniform(-1, 1);
    x[4000] = -INFINITY, x[4001] = INFINITY, x[4002] = 88.72283f, x[4003] = 88.7229f;
    x[4004] = -103.97f, x[4005] = -87.33f, x[4006] = 0.0f;
    vt_simd_exp(y, x, NE);
    check_ulp("exp vs libm expf", y, x, NE, expf, EXP_MAX_ULP);
    float nan_in = NAN, nan_out = 0;
    vt_simd_exp(&nan_out, &nan_in, 1);
    result(isnan(nan_out), "exp(NaN) is NaN", "");
    free(x), free(y);
}

/* ---------------------------------------------------------------------------- gelu */

static void check_gelu(size_t n, float range) {
    char ctx[96];
    snprintf(ctx, sizeof ctx, "n=%zu range=%g", n, range);
    float *x = galloc(n), *dout = galloc(n);
    fill(x, n, -range, range);
    fill(dout, n, -2, 2);
    if (n > 6) x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-30f, x[3] = -40.0f, x[4] = 40.0f, x[5] = -5.5f;
    float *y_s = galloc(n), *y_r = galloc(n);
    vt_simd_gelu_forward(y_s, x, n);
    vt_ref_gelu_forward(y_r, x, n);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        double tol = 0.5 * fabs(x[i]) * 2 * EPS + 2 * EPS * fabs(y_r[i]);
        if (!(fabs((double)y_s[i] - y_r[i]) <= tol)) {
            char buf[200];
            snprintf(buf, sizeof buf, "%s: x=%.9g simd %.9g ref %.9g", ctx, x[i], y_s[i], y_r[i]);
            result(0, "gelu_forward", buf);
            ok = 0;
        }
    }
    if (ok) result(1, "gelu_forward", ctx);
    check_guards("gelu_forward", ctx, y_s, n);

    /* backward, out of place and in place on dout (the aliasing the kernel allows) */
    float *g_s = galloc(n), *g_r = galloc(n), *g_alias = gcopy(dout, n);
    vt_simd_gelu_backward(g_s, x, dout, n);
    vt_ref_gelu_backward(g_r, x, dout, n);
    vt_simd_gelu_backward(g_alias, x, g_alias, n);
    ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        double xi = x[i], phi = 0.3989422804 * exp(-0.5 * xi * xi);
        double tol = fabs(dout[i]) * 2 * EPS * (1 + fabs(xi) * phi) + 2 * EPS * fabs(g_r[i]);
        if (!(fabs((double)g_s[i] - g_r[i]) <= tol) || g_alias[i] != g_s[i]) {
            char buf[200];
            snprintf(buf, sizeof buf, "%s: x=%.9g simd %.9g ref %.9g in-place %.9g", ctx, x[i], g_s[i],
                     g_r[i], g_alias[i]);
            result(0, "gelu_backward", buf);
            ok = 0;
        }
    }
    if (ok) result(1, "gelu_backward", ctx);
    check_guards("gelu_backward", ctx, g_s, n);
    gfree(x), gfree(dout), gfree(y_s), gfree(y_r), gfree(g_s), gfree(g_r), gfree(g_alias);
}

static void test_gelu(void) {
    for (size_t n = 0; n <= 17; n++) check_gelu(n, 4);
    check_gelu(31, 8), check_gelu(33, 8), check_gelu(64, 8), check_gelu(65, 8);
    check_gelu(100003, 10);
}

/* ------------------------------------------------------------- quick_gelu, gelu_tanh, tanh */

/* tanh (gelu_tanh's): the error is absolute (it is added to 1), within TANH_ABS of libm */
#define TANH_ABS (4 * EPS)
static void test_tanh(void) {
    enum { NT = 100003 };
    float *x = malloc(NT * sizeof(float)), *y = malloc(NT * sizeof(float));
    for (int i = 0; i < NT; i++) x[i] = -12.0f + 24.0f * (float)i / (NT - 1);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-30f, x[3] = 100.0f, x[4] = -100.0f, x[5] = INFINITY,
    x[6] = -INFINITY;
    vt_simd_tanh(y, x, NT);
    int ok = 1;
    for (int i = 0; i < NT && ok; i++)
        if (!(fabsf(y[i] - tanhf(x[i])) <= TANH_ABS)) {
            char buf[160];
            snprintf(buf, sizeof buf, "x=%.9g simd %.9g libm %.9g", x[i], y[i], tanhf(x[i]));
            result(0, "tanh vs libm (absolute)", buf);
            ok = 0;
        }
    if (ok) result(1, "tanh vs libm (absolute)", "");
    float nan_in = NAN, nan_out = 0;
    vt_simd_tanh(&nan_out, &nan_in, 1);
    result(isnan(nan_out), "tanh(NaN) is NaN", "");
    free(x), free(y);
}

/* forward and backward of an activation against its reference: the forward within
 * 0.5|x| abs_f + 4 eps |ref| (abs_f: the special function's absolute error, added to 1 as GELU's
 * erf is), the backward within |dout| (abs_b + 4 eps |ref'|); the backward in place too */
static void check_activation(const char *name, void (*simd_f)(float *, const float *, size_t),
                             void (*ref_f)(float *, const float *, size_t),
                             void (*simd_b)(float *, const float *, const float *, size_t),
                             void (*ref_b)(float *, const float *, const float *, size_t), size_t n,
                             float range, double abs_f, double abs_b) {
    char ctx[96], what[64];
    snprintf(ctx, sizeof ctx, "n=%zu range=%g", n, range);
    float *x = galloc(n), *dout = galloc(n);
    fill(x, n, -range, range);
    fill(dout, n, -2, 2);
    if (n > 6) x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-30f, x[3] = -40.0f, x[4] = 40.0f, x[5] = -5.5f;
    float *y_s = galloc(n), *y_r = galloc(n);
    simd_f(y_s, x, n);
    ref_f(y_r, x, n);
    int ok = 1;
    snprintf(what, sizeof what, "%s_forward", name);
    for (size_t i = 0; i < n && ok; i++) {
        double tol = 0.5 * fabs(x[i]) * abs_f + 4 * EPS * fabs(y_r[i]);
        if (!(fabs((double)y_s[i] - y_r[i]) <= tol)) {
            char buf[200];
            snprintf(buf, sizeof buf, "%s: x=%.9g simd %.9g ref %.9g", ctx, x[i], y_s[i], y_r[i]);
            result(0, what, buf);
            ok = 0;
        }
    }
    if (ok) result(1, what, ctx);
    check_guards(what, ctx, y_s, n);
    float *g_s = galloc(n), *g_r = galloc(n), *g_alias = gcopy(dout, n);
    simd_b(g_s, x, dout, n);
    ref_b(g_r, x, dout, n);
    simd_b(g_alias, x, g_alias, n);
    ok = 1;
    snprintf(what, sizeof what, "%s_backward", name);
    for (size_t i = 0; i < n && ok; i++) {
        double tol =
            fabs(dout[i]) * (abs_b * (1 + fabs(x[i])) + 4 * EPS * fabs(g_r[i] / (dout[i] ? dout[i] : 1)));
        if (!(fabs((double)g_s[i] - g_r[i]) <= tol + 1e-30) || g_alias[i] != g_s[i]) {
            char buf[200];
            snprintf(buf, sizeof buf, "%s: x=%.9g simd %.9g ref %.9g in-place %.9g", ctx, x[i], g_s[i],
                     g_r[i], g_alias[i]);
            result(0, what, buf);
            ok = 0;
        }
    }
    if (ok) result(1, what, ctx);
    check_guards(what, ctx, g_s, n);
    gfree(x), gfree(dout), gfree(y_s), gfree(y_r), gfree(g_s), gfree(g_r), gfree(g_alias);
}

static void test_activations(void) {
    static const size_t ns[] = { 0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 33, 64, 65, 100003 };
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        float range = ns[i] > 64 ? 10 : 6;
        /* quick_gelu: exp within EXP_MAX_ULP, then a division: relative errors of a few eps */
        check_activation("quick_gelu", vt_simd_quick_gelu_forward, vt_ref_quick_gelu_forward,
                         vt_simd_quick_gelu_backward, vt_ref_quick_gelu_backward, ns[i], range, 4 * EPS,
                         8 * EPS);
        check_activation("gelu_tanh", vt_simd_gelu_tanh_forward, vt_ref_gelu_tanh_forward,
                         vt_simd_gelu_tanh_backward, vt_ref_gelu_tanh_backward, ns[i], range, 2 * TANH_ABS,
                         4 * TANH_ABS);
    }
}

/* ---------------------------------------------------------------------------- rmsnorm */

static void check_rmsnorm(int M, int D, int affine, int in_place) {
    char ctx[128];
    snprintf(ctx, sizeof ctx, "M=%d D=%d affine=%d in_place=%d", M, D, affine, in_place);
    size_t n = (size_t)M * D;
    float *x = galloc(n), *w = galloc(D), *dy = galloc(n);
    fill(x, n, -2, 2);
    fill(w, D, -1.5f, 1.5f);
    fill(dy, n, -1, 1);
    const float *wp = affine ? w : NULL;
    float *y_s = galloc(n), *y_r = galloc(n), *rs_s = galloc(M), *rs_r = galloc(M);
    if (in_place) memcpy(y_s, x, n * sizeof(float));
    vt_simd_rmsnorm_forward(y_s, rs_s, in_place ? y_s : x, wp, M, D, 1e-5f);
    vt_ref_rmsnorm_forward(y_r, rs_r, x, wp, M, D, 1e-5f);
    float mw = affine ? maxabs(w, D) : 1.0f, rsmax = maxabs(rs_r, M);
    close_red("rmsnorm_forward out", ctx, y_s, y_r, n, D, (maxabs(x, n) * rsmax + 1.0) * mw);
    close_red("rmsnorm_forward rstd", ctx, rs_s, rs_r, M, D, rsmax);
    check_guards("rmsnorm_forward", ctx, y_s, n);
    float *gr[3], *gs[3];
    grads_pair(3, (size_t[3]){ n, (size_t)D, 0 }, gr, gs);
    vt_simd_rmsnorm_backward(gs[0], affine ? gs[1] : NULL, dy, x, wp, rs_r, M, D);
    vt_ref_rmsnorm_backward(gr[0], affine ? gr[1] : NULL, dy, x, wp, rs_r, M, D);
    double nmax = maxabs(x, n) * rsmax;
    float mdy = maxabs(dy, n);
    close_red("rmsnorm_backward dinp", ctx, gs[0], gr[0], n, D,
              rsmax * mw * mdy * (1 + nmax * nmax) * (1 + nmax));
    if (affine) close_red("rmsnorm_backward dw", ctx, gs[1], gr[1], D, M, (nmax + 1) * mdy);
    check_guards("rmsnorm_backward dinp", ctx, gs[0], n);
    gfree(x), gfree(w), gfree(dy), gfree(y_s), gfree(y_r), gfree(rs_s), gfree(rs_r);
    for (int i = 0; i < 3; i++) gfree(gr[i]), gfree(gs[i]);
}

static void test_rmsnorm(void) {
    static const int Ds[] = { 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 192, 193 };
    int c = 0;
    for (size_t d = 0; d < sizeof Ds / sizeof Ds[0]; d++)
        for (int m = 1; m <= 3; m += 2, c++) check_rmsnorm(m, Ds[d], c & 1, c % 3 == 0);
    check_rmsnorm(0, 17, 1, 0);
}

/* ---------------------------------------------------------------------------- softmax */

static void check_softmax(int n, int with_masked, int in_place) {
    char ctx[96];
    snprintf(ctx, sizeof ctx, "n=%d masked=%d in_place=%d", n, with_masked, in_place);
    float *x = galloc(n), *y_s = galloc(n), *y_r = galloc(n);
    fill(x, n, -8, 8);
    if (with_masked)
        for (int i = 1; i < n; i += 3) x[i] = -INFINITY;
    if (in_place) memcpy(y_s, x, n * sizeof(float));
    vt_simd_softmax_row(y_s, in_place ? y_s : x, n);
    vt_ref_softmax_row(y_r, x, n);
    check_close("softmax_row", ctx, y_s, y_r, n, 0, (8 + n) * EPS);
    if (with_masked) {
        int ok = 1;
        for (int i = 0; i < n; i++) ok &= !isinf(x[i]) || y_s[i] == 0.0f;
        result(ok, "softmax_row: masked entries exactly 0", ctx);
    }
    check_guards("softmax_row", ctx, y_s, n);
    gfree(x), gfree(y_s), gfree(y_r);
}

/* d = p (d - p.d) scale: the dot product re-associated (4 lanes), so each output is off by
 * p_i scale times the sum's error (u n max|p d|), plus its own rounding */
static void check_softmax_backward(int n, int with_masked) {
    char ctx[96];
    snprintf(ctx, sizeof ctx, "n=%d masked=%d", n, with_masked);
    float *x = galloc(n), *p = galloc(n), *d_s = galloc(n), *d_r = galloc(n);
    fill(x, n, -8, 8);
    if (with_masked)
        for (int i = 1; i < n; i += 3) x[i] = -INFINITY;
    vt_ref_softmax_row(p, x, n);
    fill(d_s, n, -1, 1);
    memcpy(d_r, d_s, n * sizeof(float));
    float scale = 0.125f, md = maxabs(d_s, n);
    vt_simd_softmax_backward_row(d_s, p, n, scale);
    vt_ref_softmax_backward_row(d_r, p, n, scale);
    int ok = 1;
    for (int i = 0; i < n && ok; i++)
        ok = fabsf(d_s[i] - d_r[i]) <= p[i] * scale * U * n * md * 2 + U * fabsf(d_r[i]) &&
             (p[i] != 0.0f || d_s[i] == 0.0f);
    result(ok, "softmax_backward_row (masked entries exactly 0)", ctx);
    check_guards("softmax_backward_row", ctx, d_s, n);
    gfree(x), gfree(p), gfree(d_s), gfree(d_r);
}

static void test_softmax(void) {
    static const int ns[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 197 };
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        for (int v = 0; v < 4; v++) check_softmax(ns[i], v & 1, v >> 1);
        for (int v = 0; v < 2; v++) check_softmax_backward(ns[i], v);
    }
}

/* attention: no SIMD kernel of its own (kernels_attn.c composes it from vt_gemm and the softmax
 * rows above); tests/test_attention.c checks it against the reference, built for WASI SIMD128 as
 * well. */

/* ---------------------------------------------------------------------------- adamw */

static void test_adamw(void) {
    static const size_t ns[] = { 0, 1, 3, 4, 5, 7, 8, 17, 1001 };
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (long t = 1; t <= 12; t += 5) {
            size_t n = ns[a];
            char ctx[64];
            snprintf(ctx, sizeof ctx, "n=%zu t=%ld", n, t);
            float *p = galloc(n), *g = galloc(n), *m = galloc(n), *v = galloc(n);
            fill(p, n, -1, 1), fill(g, n, -1, 1), fill(m, n, -0.1f, 0.1f), fill(v, n, 0, 0.01f);
            float *p2 = gcopy(p, n), *m2 = gcopy(m, n), *v2 = gcopy(v, n);
            float wd = (t % 2) ? 0.05f : 0.0f;
            for (int step = 0; step < 3;
                 step++) { /* finite data: the fused check says so, and changes no bit */
                int bs = vt_simd_adamw_update(p, g, m, v, n, t + step, 1e-3f, 0.9f, 0.999f, 1e-8f, wd);
                int br = vt_adamw_update(p2, g, m2, v2, n, t + step, 1e-3f, 0.9f, 0.999f, 1e-8f, wd);
                char why[160];
                snprintf(why, sizeof why, "%s: a finite update flagged (simd %d, reference %d)", ctx, bs, br);
                result(!bs && !br, "adamw_update finite check", why);
            }
            same_bits("adamw_update p", ctx, p, p2, n);
            same_bits("adamw_update m", ctx, m, m2, n);
            same_bits("adamw_update v", ctx, v, v2, n);
            check_guards("adamw_update", ctx, p, n);
            gfree(p), gfree(g), gfree(m), gfree(v), gfree(p2), gfree(m2), gfree(v2);
        }
}

/* The finite check fused into the update: an element whose new value overflows -- g^2 past float's
 * range (v), m / eps (p), a huge weight decay (p), or a NaN / infinity coming in -- is flagged by
 * the SIMD kernel as by the reference, wherever it sits (a vector body, the scalar tail), and every
 * other element keeps the reference's bits. */
static void test_adamw_nonfinite(void) {
    static const size_t ns[] = { 1, 4, 5, 8, 11 };
    struct {
        const char *what;
        float g, m, v, p, wd;
    } cases[] = { { "g^2 overflows v", 3e30f, 0, 0, 0.5f, 0 },
                  { "m / eps overflows p", 1e-30f, 3e38f, 0, 0.5f, 0 },
                  { "weight decay overflows p", 0.1f, 0, 0.01f, 3e38f, 1e6f },
                  { "a NaN gradient", NAN, 0, 0.01f, 0.5f, 0 },
                  { "an infinite v", 0.1f, 0, INFINITY, 0.5f, 0 } };
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (size_t at = 0; at < ns[a]; at += (ns[a] > 4 ? 3 : 1)) {
                size_t n = ns[a];
                char ctx[96];
                snprintf(ctx, sizeof ctx, "%s, n=%zu at %zu", cases[c].what, n, at);
                float *p = galloc(n), *g = galloc(n), *m = galloc(n), *v = galloc(n);
                fill(p, n, -1, 1), fill(g, n, -1, 1), fill(m, n, -0.1f, 0.1f), fill(v, n, 0, 0.01f);
                g[at] = cases[c].g, m[at] = cases[c].m, v[at] = cases[c].v, p[at] = cases[c].p;
                float *p2 = gcopy(p, n), *m2 = gcopy(m, n), *v2 = gcopy(v, n);
                float lr = cases[c].wd > 0 ? 1.0f : 1e-3f, wd = cases[c].wd > 0 ? cases[c].wd : 0.05f;
                int bs = vt_simd_adamw_update(p, g, m, v, n, 1, lr, 0.9f, 0.999f, 1e-8f, wd);
                int br = vt_adamw_update(p2, g, m2, v2, n, 1, lr, 0.9f, 0.999f, 1e-8f, wd);
                char why[160];
                snprintf(why, sizeof why, "%s: flags simd %d, reference %d (want 1, 1)", ctx, bs, br);
                result(bs == 1 && br == 1, "adamw_update finite check", why);
                int same = 1;
                for (size_t i = 0; i < n; i++) { /* (a NaN's payload may differ between the two) */
                    float x[3] = { p[i], m[i], v[i] }, y[3] = { p2[i], m2[i], v2[i] };
                    for (int k = 0; k < 3; k++)
                        same &= isnan(x[k]) ? isnan(y[k]) : memcmp(&x[k], &y[k], 4) == 0;
                }
                snprintf(why, sizeof why, "%s: the SIMD values differ from the reference's", ctx);
                result(same, "adamw_update finite check", why);
                gfree(p), gfree(g), gfree(m), gfree(v), gfree(p2), gfree(m2), gfree(v2);
            }
}

/* ---------------------------------------------------------------------------- dispatch */

static void test_dispatch(void) {
    /* kernels.c must route to the SIMD kernels in this build, and to the reference on request */
    result(vt_kernels_simd() == 1, "dispatch", "vt_kernels_simd() == 1");
    float x[5] = { 0.3f, -1.7f, 2.2f, 0.0f, 4.0f }, y1[5], y2[5], y3[5];
    vt_gelu_forward(y1, x, 5);
    vt_simd_gelu_forward(y2, x, 5);
    vt_kernels_use_reference(1);
    vt_gelu_forward(y3, x, 5);
    vt_kernels_use_reference(0);
    float r[5];
    vt_ref_gelu_forward(r, x, 5);
    result(!memcmp(y1, y2, sizeof y1) && !memcmp(y3, r, sizeof r), "dispatch",
           "public names reach vt_simd_* / vt_ref_*");
}

int main(void) {
#if defined(VT_TEST_EXPECT_FUSED) && defined(__x86_64__)
    if (!__builtin_cpu_supports("fma")) { /* the FMA kernels would fault: skip (ctest: 77) */
        puts("skipped: this CPU has no FMA3");
        return 77;
    }
#endif
    madd_mode = vt_simd_madd_fused();
    printf("MADD: %s\n", madd_mode == 0   ? "mul then add (two roundings)"
                         : madd_mode == 1 ? "fused (one rounding)"
                                          : "fused build, but this host's relaxed_madd does not fuse");
#if defined(VT_TEST_EXPECT_FUSED) /* the native FMA build: _mm_fmadd_ps always fuses */
    result(madd_mode == 1, "MADD fused", "native FMA build");
#endif
    test_dispatch();
    test_vocabulary();
    test_erf_exp();
    test_matmul();
    test_gemm();
    test_layernorm();
    test_gelu();
    test_tanh();
    test_activations();
    test_rmsnorm();
    test_softmax();
    test_adamw();
    test_adamw_nonfinite();
    return kt_finish();
}
