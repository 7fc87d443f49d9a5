/* kernels_simd.c: 4 x f32 SIMD128 kernels, one per scalar reference in kernels_ref.c, same signatures and conventions (kernels.h): backward +=, NULL gradient = skip,
 * gelu_backward overwrites and may alias. Every vectorised loop has a scalar tail; nothing
 * allocates. Written only in the vector vocabulary of simd128.h, which maps it to WebAssembly
 * SIMD128 (-msimd128) or x86-64 SSE2 with the same per-lane results, so the browser and the
 * native build compute the same bits; compiles to nothing on other targets. The multiply-
 * accumulates go through MADD, which the relaxed-SIMD wasm build and the native FMA build fuse
 * (simd128.h); everything else is the same operation in every build.
 *
 * Attention has no SIMD kernel of its own: kernels_attn.c composes it from the matmuls here.
 *
 * Where the reference's summation order is kept, results are bit-identical (matmul backward incl.
 * dbias, layernorm db, AdamW; in fused builds matmul backward equals the reference's loop with
 * each `+= a*b` fused, and dbias, db, AdamW, which never MADD, stay bit-identical); dot products over contiguous memory use 4 lane-wise
 * partial sums, so they differ from the reference by reassociation only. erf/exp are our own
 * f32x4 approximations (<= 2 ulp / 1 ulp from libm, measured by the test).
 *
 * Matmul layout (Linear weight [N,K]):
 *   forward  out[M,N] = inp[M,K] w[N,K]^T   dot products over contiguous K: register tile of
 *            MR rows x NR weight rows of f32x4 accumulators, one horizontal reduction at the end.
 *   backward dinp[M,K] += dout[M,N] w[N,K] and dw[N,K] += dout^T inp[M,K]: both are
 *            "C[i,:] += sum_j A(i,j) B[j,:]" with B rows contiguous, so one broadcast kernel
 *            (splat A, multiply-add whole B vectors) serves both, A addressed with strides. */
#include "kernels_simd.h"
#if defined(VT_SIMD128_AVAILABLE) /* simd128.h: wasm SIMD128 or x86-64 SSE2 */
#include <math.h>

#define VT_INLINE static inline __attribute__((always_inline))

/* Sum of the 4 lanes: pairwise ((l0+l2)+(l1+l3)). */
VT_INLINE float hsum(f32x4 v) {
    f32x4 s = ADD(v, SWAP_HALVES(v));
    s = ADD(s, SWAP_PAIRS(s));
    return LANE0(s);
}

/* [hsum(a), hsum(b), hsum(c), hsum(d)] in 6 shuffles + 3 adds (a 4x4 transpose-and-add). */
VT_INLINE f32x4 hsum4(f32x4 a, f32x4 b, f32x4 c, f32x4 d) {
    f32x4 ab = ADD(ZIP_LO(a, b), ZIP_HI(a, b));
    f32x4 cd = ADD(ZIP_LO(c, d), ZIP_HI(c, d));
    return ADD(CAT_LO(ab, cd), CAT_HI(ab, cd));
}

/* Load the n (0..3) floats at p, zero-padded: the K tail of a dot product without reading past
 * the row (which might be the end of linear memory). */
VT_INLINE f32x4 load_partial(const float *p, int n) {
    return MAKE(n > 0 ? p[0] : 0.0f, n > 1 ? p[1] : 0.0f, n > 2 ? p[2] : 0.0f, 0.0f);
}

/* How MADD rounds here: 0 = a mul and an add (unfused build), 1 = once (fused build on a host that
 * fuses), 2 = a fused build whose host runs f32x4.relaxed_madd as mul + add (allowed by the
 * relaxed-SIMD spec: V8 on an x86 CPU without FMA3). Probe: (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24
 * with one rounding and 0 with two. The operands are read through volatile so nothing folds. */
int vt_simd_madd_fused(void) {
    static volatile float a = 1.0f + 0x1p-12f, c = -(1.0f + 0x1p-11f);
    f32x4 va = SPLAT(a);
    float r = LANE0(MADD(SPLAT(c), va, va));
#if defined(VT_SIMD128_FUSED)
    return r != 0.0f ? 1 : 2;
#else
    return r != 0.0f ? 1 : 0; /* 1 here would be a bug (caught by the tests) */
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* expf and erff, f32x4                                                                        */

/* exp(x) = 2^n exp(r), n = round(x log2 e), r = x - n ln2 with ln2 split in two (Cody-Waite) so
 * r is accurate; exp(r) on |r| <= ln2/2 by the Cephes expf polynomial (~1 ulp). 2^n is applied as
 * two factors 2^(n/2) 2^(n-n/2) so that subnormal results round once, like libm; x is clamped
 * to [-104, 89] first, beyond which the scaling itself gives 0 and +inf. -inf -> 0 (masked
 * softmax logits), NaN propagates. */
VT_INLINE f32x4 exp_f32x4(f32x4 x) {
    /* pmax/pmin (a single x86 max/min, unlike f32x4.max/min) return x itself when it is NaN */
    f32x4 xc = PMIN(PMAX(x, SPLAT(-104.0f)), SPLAT(89.0f));
    f32x4 n = NEAREST(MUL(xc, SPLAT(1.44269504088896341f)));
    f32x4 r = SUB(xc, MUL(n, SPLAT(0.693359375f)));
    r = SUB(r, MUL(n, SPLAT(-2.12194440e-4f)));
    f32x4 p = SPLAT(1.9875691500e-4f);
    p = MADD(SPLAT(1.3981999507e-3f), p, r);
    p = MADD(SPLAT(8.3334519073e-3f), p, r);
    p = MADD(SPLAT(4.1665795894e-2f), p, r);
    p = MADD(SPLAT(1.6666665459e-1f), p, r);
    p = MADD(SPLAT(5.0000001201e-1f), p, r);
    f32x4 y = ADD(ADD(MUL(p, MUL(r, r)), r), SPLAT(1.0f));
    /* n is an integer in [-151, 129]: adding 1.5*2^23 puts it, exactly, in the low mantissa
     * bits (cheaper than i32x4.trunc_sat_f32x4, which x86 has no instruction for) */
    f32x4 ni = I32_SUB(ADD(n, SPLAT(12582912.0f)), I32_SPLAT(0x4B400000));
    f32x4 n1 = I32_SHR(ni, 1), n2 = I32_SUB(ni, n1);
    f32x4 bias = I32_SPLAT(127);
    y = MUL(y, I32_SHL(I32_ADD(n1, bias), 23));
    return MUL(y, I32_SHL(I32_ADD(n2, bias), 23));
}

/* erf in two pieces, each written so that its rounding errors are small against the result:
 *   |z| <  0.875: erf(z) = z + z S(z^2), S = erf(z)/z - 1 a degree-5 polynomial (relative error
 *                 of the fit 1.2e-8); the correction z S is at most 0.1 z, so its rounding
 *                 barely reaches the result.
 *   |z| >= 0.875: erf(z) = 1 - exp(-z^2) R(z), R = erfc(z) exp(z^2) a 3/3 rational (fit 4.1e-8
 *                 on [0.85, 3.93]); erfc <= 0.22 here, so its few-ulp error shrinks by 4x or
 *                 more once subtracted from 1.
 * Both fits are relative-error minimax (Lawson iterations at 40 digits), coefficients rounded to
 * float. |z| is clamped to 4, where erfc(4) = 1.5e-8 already rounds 1 - erfc to 1.0f. Both
 * pieces are computed for all lanes and blended (no data-dependent branches); NaN propagates. */
VT_INLINE f32x4 erf_f32x4(f32x4 z) {
    const f32x4 sign = I32_SPLAT((int32_t)0x80000000);
    f32x4 az = PMIN(ABS(z), SPLAT(4.0f)); /* NaN stays NaN (see exp) */
    f32x4 u = MUL(az, az);
    /* small: az + az S(u), S(0) = 2/sqrt(pi) - 1 */
    f32x4 s = SPLAT(-0x1.3f79e4p-11f);
    s = MADD(SPLAT(0x1.48809cp-8f), s, u);
    s = MADD(SPLAT(-0x1.b6c076p-6f), s, u);
    s = MADD(SPLAT(0x1.ce1decp-4f), s, u);
    s = MADD(SPLAT(-0x1.8126fap-2f), s, u);
    s = MADD(SPLAT(0.128379167f), s, u);
    f32x4 r_small = MADD(az, az, s);
    /* big: 1 - exp(-u) P(az)/Q(az) */
    f32x4 p = SPLAT(-0x1.4b820ap-14f);
    p = MADD(SPLAT(0x1.e5264ap-3f), p, az);
    p = MADD(SPLAT(0x1.7a4058p-1f), p, az);
    p = MADD(SPLAT(0x1.0042fap+0f), p, az);
    f32x4 q = SPLAT(0x1.ab374ap-2f);
    q = MADD(SPLAT(0x1.54f790p+0f), q, az);
    q = MADD(SPLAT(0x1.dfa60ap+0f), q, az);
    q = MADD(SPLAT(1.0f), q, az);
    f32x4 erfc = MUL(exp_f32x4(NEG(u)), DIV(p, q));
    f32x4 r_big = SUB(SPLAT(1.0f), erfc);
    f32x4 r = BSEL(r_big, r_small, GE(az, SPLAT(0.875f)));
    return BOR(r, BAND(z, sign));
}

void vt_simd_erf(float *out, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) ST(out + i, erf_f32x4(LD(x + i)));
    for (; i < n; i++) out[i] = LANE0(erf_f32x4(SPLAT(x[i])));
}

void vt_simd_exp(float *out, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) ST(out + i, exp_f32x4(LD(x + i)));
    for (; i < n; i++) out[i] = LANE0(exp_f32x4(SPLAT(x[i])));
}

/* ------------------------------------------------------------------------------------------ */
/* matmul forward: out[M,N] = inp[M,K] @ w[N,K]^T + bias                                      */

/* The tile does not change any result (each output's 4 lane sums run over k in order, then one
 * hsum4), only speed. Fused builds: 3 x 3 (9 accumulators + 6 loaded vectors in x86's 16
 * registers) keeps more FMAs in flight than 4 x 2 (an FMA has ~4 cycles of latency on 2 ports);
 * measured side by side on the ViT shapes, relaxed wasm under V8. */
#if defined(VT_SIMD128_FUSED)
#define VT_MM_MR_DEFAULT 3
#define VT_MM_NR_DEFAULT 3
#else
#define VT_MM_MR_DEFAULT 4
#define VT_MM_NR_DEFAULT 2
#endif
#ifndef VT_MM_MR
#define VT_MM_MR VT_MM_MR_DEFAULT /* rows of inp per tile */
#endif
#ifndef VT_MM_NR
#define VT_MM_NR VT_MM_NR_DEFAULT /* rows of w (output columns) per tile */
#endif
/* Weight rows per block: the w block (NB x K floats) is reused by every row tile of inp, so keep
 * it within ~256 KB (L2) while inp's MR rows stay in L1. */
#define VT_MM_WBLOCK_FLOATS (64 * 1024)

/* One mr x nr tile (mr <= 4, nr <= 4, compile-time constants after inlining). acc[i][j] holds 4
 * lane-wise partial sums of inp[i,:] . w[j,:]; the K tail (K % 4) is one zero-padded step. */
VT_INLINE void matmul_forward_tile(float *out, int ldo, const float *a, const float *w,
                                   const float *bias, int K, const int mr, const int nr) {
    f32x4 acc[4][4];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) acc[i][j] = ZERO();
    int k = 0;
    for (; k + 4 <= K; k += 4) {
        f32x4 av[4], wv[4];
        for (int i = 0; i < mr; i++) av[i] = LD(a + (size_t)i * K + k);
        for (int j = 0; j < nr; j++) wv[j] = LD(w + (size_t)j * K + k);
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++) acc[i][j] = MADD(acc[i][j], av[i], wv[j]);
    }
    if (k < K) {
        f32x4 av[4], wv[4];
        for (int i = 0; i < mr; i++) av[i] = load_partial(a + (size_t)i * K + k, K - k);
        for (int j = 0; j < nr; j++) wv[j] = load_partial(w + (size_t)j * K + k, K - k);
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++) acc[i][j] = MADD(acc[i][j], av[i], wv[j]);
    }
    const f32x4 zero = ZERO();
    for (int i = 0; i < mr; i++) {
        f32x4 s = hsum4(acc[i][0], nr > 1 ? acc[i][1] : zero, nr > 2 ? acc[i][2] : zero,
                        nr > 3 ? acc[i][3] : zero);
        float *o = out + (size_t)i * ldo;
        if (nr == 4) {
            if (bias) s = ADD(s, LD(bias));
            ST(o, s);
        } else {
            float sv[4];
            ST(sv, s);
            for (int j = 0; j < nr; j++) o[j] = bias ? sv[j] + bias[j] : sv[j];
        }
    }
}

/* mr is a run-time 1..MR here; dispatch to the constant-size tile. */
VT_INLINE void matmul_forward_tile_mr(float *out, int ldo, const float *a, const float *w,
                                      const float *bias, int K, int mr, const int nr) {
    _Static_assert(VT_MM_MR >= 1 && VT_MM_MR <= 4 && VT_MM_NR >= 1 && VT_MM_NR <= 4, "tile");
    switch (mr) {
    case 1: matmul_forward_tile(out, ldo, a, w, bias, K, 1, nr); break;
    case 2: matmul_forward_tile(out, ldo, a, w, bias, K, 2 <= VT_MM_MR ? 2 : 1, nr); break;
    case 3: matmul_forward_tile(out, ldo, a, w, bias, K, 3 <= VT_MM_MR ? 3 : 1, nr); break;
    default: matmul_forward_tile(out, ldo, a, w, bias, K, VT_MM_MR, nr); break;
    }
}

void vt_simd_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                            int M, int K, int N) {
    if (M <= 0 || N <= 0) return;
    int nb = K > 0 ? VT_MM_WBLOCK_FLOATS / K : N;
    nb = nb < VT_MM_NR ? VT_MM_NR : nb - nb % VT_MM_NR;
    for (int n0 = 0; n0 < N; n0 += nb) {
        int n1 = n0 + nb < N ? n0 + nb : N;
        for (int m = 0; m < M; m += VT_MM_MR) {
            int mr = M - m < VT_MM_MR ? M - m : VT_MM_MR;
            const float *a = inp + (size_t)m * K;
            float *o = out + (size_t)m * N;
            int n = n0;
            for (; n + VT_MM_NR <= n1; n += VT_MM_NR)
                matmul_forward_tile_mr(o + n, N, a, w + (size_t)n * K, bias ? bias + n : NULL,
                                       K, mr, VT_MM_NR);
            for (; n < n1; n++) /* column tail, one weight row at a time */
                matmul_forward_tile_mr(o + n, N, a, w + (size_t)n * K, bias ? bias + n : NULL,
                                       K, mr, 1);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* matmul backward                                                                             */

#ifndef VT_BC_MR
#define VT_BC_MR 4 /* rows of C per tile */
#endif
/* Rows of B (j) per block: keeps the B block's column strip and A's block in L1/L2 across the
 * tiles (measured: 64 beats 128..512 and unblocked by 5-40% for dw on ViT-tiny shapes). */
#ifndef VT_BC_JBLOCK
#define VT_BC_JBLOCK 64
#endif

/* C[i, 0:8*?] += sum_{j<J} A(i,j) B[j, :] for i < mr over `nv` vectors (nv = 1 or 2) of
 * columns, A(i,j) = a[i*ars + j*acs]. Accumulators start from C and add the terms in j order,
 * exactly as the reference's in-place loop does, so the result is bit-identical. */
VT_INLINE void bcast_tile(float *c, int ldc, const float *a, int ars, int acs, const float *b,
                          int ldb, int J, const int mr, const int nv) {
    f32x4 acc[VT_BC_MR][2];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) acc[i][v] = LD(c + (size_t)i * ldc + 4 * v);
    for (int j = 0; j < J; j++) {
        const float *bj = b + (size_t)j * ldb;
        f32x4 bv[2];
        for (int v = 0; v < nv; v++) bv[v] = LD(bj + 4 * v);
        const float *aj = a + (size_t)j * acs;
        for (int i = 0; i < mr; i++) {
            f32x4 s = LDSPLAT(aj + (size_t)i * ars);
            for (int v = 0; v < nv; v++) acc[i][v] = MADD(acc[i][v], s, bv[v]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) ST(c + (size_t)i * ldc + 4 * v, acc[i][v]);
}

/* The scalar form of MADD: fused in the fused builds (fmaf: vfmadd231ss on x86 FMA; wasm has no
 * scalar FMA, so wasi-libc's correctly rounded fmaf), so tail columns round like vector ones. */
#if defined(VT_SIMD128_FUSED)
#define MADD1(acc, a, b) fmaf((a), (b), (acc))
#else
#define MADD1(acc, a, b) ((acc) + (a) * (b))
#endif

/* Scalar columns (the K % 4 tail) for mr rows. */
static void bcast_tail(float *c, int ldc, const float *a, int ars, int acs, const float *b,
                       int ldb, int J, int mr, int ncols) {
    for (int i = 0; i < mr; i++)
        for (int col = 0; col < ncols; col++) {
            float s = c[(size_t)i * ldc + col];
            for (int j = 0; j < J; j++)
                s = MADD1(s, a[(size_t)i * ars + (size_t)j * acs], b[(size_t)j * ldb + col]);
            c[(size_t)i * ldc + col] = s;
        }
}

VT_INLINE void bcast_tile_mr(float *c, int ldc, const float *a, int ars, int acs,
                             const float *b, int ldb, int J, int mr, const int nv) {
    _Static_assert(VT_BC_MR >= 1 && VT_BC_MR <= 6, "tile");
    switch (mr) { /* mr <= VT_BC_MR; the "? :" keep unused cases within the accumulator array */
    case 1: bcast_tile(c, ldc, a, ars, acs, b, ldb, J, 1, nv); break;
    case 2: bcast_tile(c, ldc, a, ars, acs, b, ldb, J, 2 <= VT_BC_MR ? 2 : 1, nv); break;
    case 3: bcast_tile(c, ldc, a, ars, acs, b, ldb, J, 3 <= VT_BC_MR ? 3 : 1, nv); break;
    case 4: bcast_tile(c, ldc, a, ars, acs, b, ldb, J, 4 <= VT_BC_MR ? 4 : 1, nv); break;
    case 5: bcast_tile(c, ldc, a, ars, acs, b, ldb, J, 5 <= VT_BC_MR ? 5 : 1, nv); break;
    default: bcast_tile(c, ldc, a, ars, acs, b, ldb, J, VT_BC_MR, nv); break;
    }
}

/* C[I,L] (row stride ldc) += A(I,J) @ B[J,L] (row stride ldb), A(i,j) = a[i*ars + j*acs].
 *
 * Blocked over j (VT_BC_JBLOCK rows of B) and over l (VT_BC_LBLOCK columns), and each B block is
 * copied ("packed") into a small stack buffer as 8-column strips, each strip's rows contiguous.
 * Why: at ViT-base widths B's rows are 3 or 12 KB apart, so the 64 rows of one tile's B strip all
 * fall in a handful of L1 sets (12 KB = 3 x 4 KB: all in one set) and evict each other, and an
 * unblocked j-block of B (64 x 3072 floats = 768 KB) does not stay in L2 across the row tiles:
 * B streamed from L2/L3 on every tile (backward at 41-56% of peak for fc1/fc2, against ~75% for
 * the narrow widths). Packed, a strip is 2 KB of consecutive lines and the block (16 KB) stays in
 * L1 across all the row tiles. A transposed A (dW: A(n,m) = dout[m*N + n], rows N floats apart)
 * has the same conflict problem, so each tile's A is packed too (4 x 64 floats).
 * Per element, j blocks are still visited in order and each tile adds its terms in j order, so
 * the sums are bit-identical to the reference's. */
#ifndef VT_BC_LBLOCK
#define VT_BC_LBLOCK 64 /* columns of B per packed block (a multiple of 8) */
#endif
_Static_assert(VT_BC_LBLOCK % 8 == 0, "B blocks are packed as strips of 8 columns");

static void gemm_bcast_acc(float *c, int ldc, const float *a, int ars, int acs, const float *b,
                           int ldb, int I, int J, int L) {
    _Alignas(16) float bpack[VT_BC_JBLOCK * VT_BC_LBLOCK]; /* 16 KB with the defaults */
    _Alignas(16) float apack[VT_BC_JBLOCK * VT_BC_MR];
    const int pack_a = acs != 1; /* A's j runs along a row: no conflicts, read it in place */
    for (int j0 = 0; j0 < J; j0 += VT_BC_JBLOCK) {
        int jn = J - j0 < VT_BC_JBLOCK ? J - j0 : VT_BC_JBLOCK;
        const float *aj = a + (size_t)j0 * acs, *bj = b + (size_t)j0 * ldb;
        for (int l0 = 0; l0 < L; l0 += VT_BC_LBLOCK) {
            int ln = L - l0 < VT_BC_LBLOCK ? L - l0 : VT_BC_LBLOCK;
            int ns = ln / 8; /* full 8-column strips, packed; the rest (< 8 columns) in place */
            for (int s = 0; s < ns; s++)
                for (int j = 0; j < jn; j++) {
                    const float *src = bj + (size_t)j * ldb + l0 + 8 * s;
                    float *dst = bpack + ((size_t)s * jn + j) * 8;
                    ST(dst, LD(src));
                    ST(dst + 4, LD(src + 4));
                }
            for (int i = 0; i < I; i += VT_BC_MR) {
                int mr = I - i < VT_BC_MR ? I - i : VT_BC_MR;
                float *ci = c + (size_t)i * ldc + l0;
                const float *ai = aj + (size_t)i * ars;
                int pars = ars, pacs = acs; /* A of this tile, packed or in place */
                if (pack_a && ns > 0) {
                    for (int j = 0; j < jn; j++)
                        for (int r = 0; r < mr; r++)
                            apack[j * VT_BC_MR + r] = ai[(size_t)r * ars + (size_t)j * acs];
                    ai = apack, pars = 1, pacs = VT_BC_MR;
                }
                for (int s = 0; s < ns; s++)
                    bcast_tile_mr(ci + 8 * s, ldc, ai, pars, pacs, bpack + (size_t)s * jn * 8, 8,
                                  jn, mr, 2);
                int l = 8 * ns;
                const float *bl = bj + l0;
                for (; l + 4 <= ln; l += 4)
                    bcast_tile_mr(ci + l, ldc, ai, pars, pacs, bl + l, ldb, jn, mr, 1);
                if (l < ln) bcast_tail(ci + l, ldc, ai, pars, pacs, bl + l, ldb, jn, mr, ln - l);
            }
        }
    }
}

void vt_simd_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int M, int K, int N) {
    if (M <= 0 || N <= 0) return; /* nothing to add (K = 0: the gradients are empty) */
    /* dinp[m,:] += sum_n dout[m,n] w[n,:]   (A = dout, row-major [M,N]) */
    if (dinp && K > 0) gemm_bcast_acc(dinp, K, dout, N, 1, w, K, M, N, K);
    vt_simd_matmul_backward_dw(dw, dbias, dout, inp, M, K, N, 0, N);
}

/* Rows [n0, n1) of dw and dbias (the threads' split: each element's sum over m is unchanged;
 * n0 and n1 multiples of 4 or N, so the same columns of dbias take the vector path). */
void vt_simd_matmul_backward_dw(float *dw, float *dbias, const float *dout, const float *inp,
                                int M, int K, int N, int n0, int n1) {
    if (M <= 0 || n1 <= n0) return;
    /* dw[n,:] += sum_m dout[m,n] inp[m,:]   (A = dout^T: A(n,m) = dout[m*N + n]) */
    if (dw && K > 0) gemm_bcast_acc(dw + (size_t)n0 * K, K, dout + n0, 1, N, inp, K, n1 - n0, M, K);
    if (dbias) { /* dbias[n] += sum_m dout[m,n]: column sums, 4 columns per vector, m in order */
        int n = n0;
        for (; n + 4 <= n1; n += 4) {
            f32x4 s = ZERO();
            for (int m = 0; m < M; m++) s = ADD(s, LD(dout + (size_t)m * N + n));
            ST(dbias + n, ADD(LD(dbias + n), s));
        }
        for (; n < n1; n++) {
            float s = 0.0f;
            for (int m = 0; m < M; m++) s += dout[(size_t)m * N + n];
            dbias[n] += s;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* layernorm                                                                                   */

VT_INLINE float sum_f32(const float *x, int n) {
    f32x4 s = ZERO();
    int i = 0;
    for (; i + 4 <= n; i += 4) s = ADD(s, LD(x + i));
    float t = hsum(s);
    for (; i < n; i++) t += x[i];
    return t;
}

void vt_simd_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int M, int D, float eps) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * D;
        float *y = out + (size_t)m * D; /* may alias x: every element is read before written */
        /* two passes, the second centred, as the reference (accurate for large means) */
        float mu = sum_f32(x, D) / (float)D;
        f32x4 vmu = SPLAT(mu), vs = ZERO();
        int i = 0;
        for (; i + 4 <= D; i += 4) {
            f32x4 d = SUB(LD(x + i), vmu);
            vs = MADD(vs, d, d);
        }
        float v = hsum(vs);
        for (; i < D; i++) { float d = x[i] - mu; v += d * d; }
        float rs = 1.0f / sqrtf(v / (float)D + eps);
        f32x4 vrs = SPLAT(rs);
        i = 0;
        if (w && b) {
            for (; i + 4 <= D; i += 4)
                ST(y + i, ADD(MUL(MUL(SUB(LD(x + i), vmu), vrs), LD(w + i)), LD(b + i)));
        } else if (!w && !b) {
            for (; i + 4 <= D; i += 4) ST(y + i, MUL(SUB(LD(x + i), vmu), vrs));
        }
        for (; i < D; i++) { /* tail, and the rare w-only / b-only forms, as the reference */
            float n = (x[i] - mu) * rs;
            if (w) n *= w[i];
            y[i] = b ? n + b[i] : n;
        }
        if (mean) mean[m] = mu;
        if (rstd) rstd[m] = rs;
    }
}

void vt_simd_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int M, int D) {
    if (dinp) vt_simd_layernorm_backward_dinp(dinp, dout, inp, w, mean, rstd, M, D);
    vt_simd_layernorm_backward_params(dw, db, dout, inp, mean, rstd, M, D, 0, D);
}

/* dinp rows (the threads split over m) */
void vt_simd_layernorm_backward_dinp(float *dinp, const float *dout, const float *inp,
                                     const float *w, const float *mean, const float *rstd, int M,
                                     int D) {
    const f32x4 one = SPLAT(1.0f);
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * D;
        const float *dy = dout + (size_t)m * D;
        float mu = mean[m], rs = rstd[m];
        f32x4 vmu = SPLAT(mu), vrs = SPLAT(rs);
        /* dnorm = w dy; dx = rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)) */
        f32x4 s_dn = ZERO(), s_dnn = s_dn;
        int i = 0;
        for (; i + 4 <= D; i += 4) {
            f32x4 n = MUL(SUB(LD(x + i), vmu), vrs);
            f32x4 dn = MUL(w ? LD(w + i) : one, LD(dy + i));
            s_dn = ADD(s_dn, dn);
            s_dnn = MADD(s_dnn, dn, n);
        }
        float sum_dn = hsum(s_dn), sum_dn_n = hsum(s_dnn);
        for (; i < D; i++) {
            float n = (x[i] - mu) * rs;
            float dn = w ? w[i] * dy[i] : dy[i];
            sum_dn += dn;
            sum_dn_n += dn * n;
        }
        float mean_dn = sum_dn / (float)D, mean_dn_n = sum_dn_n / (float)D;
        f32x4 vmdn = SPLAT(mean_dn), vmdnn = SPLAT(mean_dn_n);
        float *di = dinp + (size_t)m * D;
        for (i = 0; i + 4 <= D; i += 4) {
            f32x4 n = MUL(SUB(LD(x + i), vmu), vrs);
            f32x4 g = LD(dy + i);
            f32x4 dn = w ? MUL(LD(w + i), g) : g;
            ST(di + i, ADD(LD(di + i), MUL(SUB(SUB(dn, vmdn), MUL(n, vmdnn)), vrs)));
        }
        for (; i < D; i++) {
            float n = (x[i] - mu) * rs;
            float dn = w ? w[i] * dy[i] : dy[i];
            di[i] += (dn - mean_dn - n * mean_dn_n) * rs;
        }
    }
}

/* dw, db columns [d0, d1) summed over every row in m order (the threads split over columns;
 * d0, d1 multiples of 4 or D, so the same columns take the vector path as in one piece) */
void vt_simd_layernorm_backward_params(float *dw, float *db, const float *dout, const float *inp,
                                       const float *mean, const float *rstd, int M, int D, int d0,
                                       int d1) {
    if (!dw && !db) return;
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * D;
        const float *dy = dout + (size_t)m * D;
        float mu = mean[m], rs = rstd[m];
        f32x4 vmu = SPLAT(mu), vrs = SPLAT(rs);
        int i = d0;
        for (; i + 4 <= d1; i += 4) {
            f32x4 n = MUL(SUB(LD(x + i), vmu), vrs);
            f32x4 g = LD(dy + i);
            if (dw) ST(dw + i, MADD(LD(dw + i), n, g));
            if (db) ST(db + i, ADD(LD(db + i), g));
        }
        for (; i < d1; i++) {
            float n = (x[i] - mu) * rs;
            if (dw) dw[i] += n * dy[i];
            if (db) db[i] += dy[i];
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* GELU (exact erf)                                                                            */

#define VT_SQRT1_2 0.70710678118654752440f
#define VT_INV_SQRT_2PI 0.39894228040143267794f

VT_INLINE f32x4 gelu_f32x4(f32x4 x) { /* (0.5 x)(1 + erf(x / sqrt 2)), the reference's order */
    f32x4 e = erf_f32x4(MUL(x, SPLAT(VT_SQRT1_2)));
    return MUL(MUL(SPLAT(0.5f), x), ADD(SPLAT(1.0f), e));
}

/* gelu'(x) = Phi(x) + x phi(x) */
VT_INLINE f32x4 gelu_grad_f32x4(f32x4 x) {
    f32x4 cdf = MUL(SPLAT(0.5f), ADD(SPLAT(1.0f), erf_f32x4(MUL(x, SPLAT(VT_SQRT1_2)))));
    f32x4 pdf = MUL(SPLAT(VT_INV_SQRT_2PI), exp_f32x4(MUL(MUL(SPLAT(-0.5f), x), x)));
    return ADD(cdf, MUL(x, pdf));
}

void vt_simd_gelu_forward(float *out, const float *inp, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) ST(out + i, gelu_f32x4(LD(inp + i)));
    if (i < n) { /* tail through a padded vector, so every element sees the same formula */
        float t[4] = {0};
        for (size_t j = i; j < n; j++) t[j - i] = inp[j];
        ST(t, gelu_f32x4(LD(t)));
        for (size_t j = i; j < n; j++) out[j] = t[j - i];
    }
}

void vt_simd_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    /* overwrites; dinp may alias dout (each element is read before it is written) */
    size_t i = 0;
    for (; i + 4 <= n; i += 4) ST(dinp + i, MUL(LD(dout + i), gelu_grad_f32x4(LD(inp + i))));
    if (i < n) {
        float t[4] = {0};
        for (size_t j = i; j < n; j++) t[j - i] = inp[j];
        ST(t, gelu_grad_f32x4(LD(t)));
        for (size_t j = i; j < n; j++) dinp[j] = dout[j] * t[j - i];
    }
}

/* ------------------------------------------------------------------------------------------ */
/* softmax                                                                                     */

void vt_simd_softmax_row(float *y, const float *x, int n) {
    if (n <= 0) return;
    /* y may alias x (attention runs it in place) */
    f32x4 vm = SPLAT(-INFINITY);
    int i = 0;
    for (; i + 4 <= n; i += 4) vm = PMAX(vm, LD(x + i));
    vm = PMAX(vm, SWAP_HALVES(vm));
    vm = PMAX(vm, SWAP_PAIRS(vm));
    float mx = LANE0(vm);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    vm = SPLAT(mx);
    /* masked logits are -inf: exp gives exactly 0; the diagonal is never masked */
    f32x4 vs = ZERO();
    for (i = 0; i + 4 <= n; i += 4) {
        f32x4 e = exp_f32x4(SUB(LD(x + i), vm));
        ST(y + i, e);
        vs = ADD(vs, e);
    }
    float s = hsum(vs);
    for (; i < n; i++) {
        float e = LANE0(exp_f32x4(SPLAT(x[i] - mx)));
        y[i] = e;
        s += e;
    }
    float inv = 1.0f / s;
    f32x4 vinv = SPLAT(inv);
    for (i = 0; i + 4 <= n; i += 4) ST(y + i, MUL(LD(y + i), vinv));
    for (; i < n; i++) y[i] *= inv;
}

/* ------------------------------------------------------------------------------------------ */
/* AdamW                                                                                       */

int vt_simd_adamw_update(float *p, const float *g, float *m, float *v, size_t n, long t,
                         float lr, float b1, float b2, float eps, float wd) {
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    float step = lr / bc1, bc2s = sqrtf(bc2), decay = 1.0f - lr * wd;
    const f32x4 vdecay = SPLAT(decay), vb1 = SPLAT(b1), vb2 = SPLAT(b2), v1b1 = SPLAT(1.0f - b1),
                v1b2 = SPLAT(1.0f - b2), vbc2s = SPLAT(bc2s), veps = SPLAT(eps),
                vstep = SPLAT(step);
    /* the finite check: x - x is +0 for a finite x and NaN otherwise, so the sum of them all is 0
     * exactly when every new value is finite (three subtractions and adds beside the update) */
    f32x4 nf = ZERO();
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        f32x4 gi = LD(g + i);
        f32x4 pi = MUL(LD(p + i), vdecay);
        f32x4 mi = ADD(MUL(vb1, LD(m + i)), MUL(v1b1, gi));
        f32x4 vi = ADD(MUL(vb2, LD(v + i)), MUL(MUL(v1b2, gi), gi));
        f32x4 denom = ADD(DIV(SQRT(vi), vbc2s), veps);
        f32x4 pn = SUB(pi, MUL(vstep, DIV(mi, denom)));
        ST(p + i, pn);
        ST(m + i, mi);
        ST(v + i, vi);
        nf = ADD(nf, ADD(ADD(SUB(pn, pn), SUB(mi, mi)), SUB(vi, vi)));
    }
    float lanes[4];
    ST(lanes, nf);
    int bad = lanes[0] != 0.0f || lanes[1] != 0.0f || lanes[2] != 0.0f || lanes[3] != 0.0f;
    for (; i < n; i++) {
        p[i] *= decay;
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float denom = sqrtf(v[i]) / bc2s + eps;
        p[i] -= step * (m[i] / denom);
        bad |= !(isfinite(p[i]) && isfinite(m[i]) && isfinite(v[i]));
    }
    return bad;
}

#endif /* VT_SIMD128_AVAILABLE */
