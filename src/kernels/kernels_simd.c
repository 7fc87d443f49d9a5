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
/* GEMM: C[I,L] (+)= A(I,J) B(J,L), the engine of matmul forward and backward (and attention)  */

/* Every product of the engine is this one loop nest, BLIS-style: A and B are copied ("packed")
 * block by block into small buffers on the stack, laid out so that the register tile reads both
 * from ONE moving pointer each, at constant offsets:
 *   B panel (kc x 8):  bp[k*8 + l]   8 columns of B for each k   (2 vector loads per k)
 *   A panel (4 x kc):  ap[k*4 + i]   4 rows of A for each k      (4 splat loads per k)
 * and the tile keeps the 4 x 8 block of C in 8 f32x4 accumulators:
 *   acc[i][v] += splat(A(i,k)) * B(k, 4v..4v+3)    for k in order.
 * Why this shape, measured under V8 (relaxed build, Zen 4): a wasm load at base + i*stride needs
 * an address add per load (wasm addresses are 32-bit: V8 cannot fold the add into x86's
 * addressing mode), and that, not the FMAs, bounded the old kernels (54-81% of the peak);
 * constant offsets fold. V8 keeps the 4 splats + 2 B vectors + 8 accumulators (14 of the 15
 * xmm registers it allocates) in registers; 4 x 12, 5 x 8 or 6 x 8 tiles spill and run at half
 * speed, and so does any unrolling of the k loop (V8 hoists the loads); the plain 4 x 8 loop ran
 * at 90-92% of the relaxed-madd peak with its operands in L1.
 *
 * Order of summation: each C element starts from its value (accumulate) or from 0 (overwrite),
 * adds its J terms in j order, one MADD each, and (overwrite) the bias last: the reference's
 * loops exactly (in fused builds with each `+= a*b` fused). Blocking over j keeps that order (the
 * blocks of one element are visited in order, its partial sum kept in C between them); packing
 * and tiling change no result, so any split of I or L among threads gives the same bits.
 *
 * Blocks: J in kc <= VT_GEMM_KC steps (an A and a B panel then fit L1 together); the packed B
 * block (kc x nc, <= VT_GEMM_BBLOCK floats, in L2) is used by every row block of A, the packed A
 * block (mc x kc, <= VT_GEMM_ABLOCK floats, in L1 beside one B panel) by every B panel. A is
 * packed again for every block of B, so that block is big: 384 KB, the whole of B for ViT-Ti
 * widths at kc 192 up to N = 512, 384 columns at kc 256 (measured under cachegrind and V8, the
 * other loop order -- all of A in L2, B one panel at a time -- packs fewer floats but streams A
 * from L2 for every B panel: more instructions and 25% more L1 misses; a 192 KB block packed A
 * 16 times per k block for ViT-B's fc2 backward: bench/kernel_bench, relaxed, 3 alternating
 * process pairs, 384 / 768-wide backward rows 1-4% faster with 384 KB, the rest within 2.5%).
 * Both live on the stack (404 KB; web/runtime/pool.js gives each worker 1 MB, every build's main thread
 * has >= 1 MB). */
#define VT_GEMM_MR 4
#define VT_GEMM_NR 8
#ifndef VT_GEMM_KC
#define VT_GEMM_KC 256
#endif
#ifndef VT_GEMM_BBLOCK
#define VT_GEMM_BBLOCK (96 * 1024)
#endif
#ifndef VT_GEMM_ABLOCK
#define VT_GEMM_ABLOCK (5 * 1024)
#endif
_Static_assert(VT_GEMM_BBLOCK >= VT_GEMM_KC * VT_GEMM_NR && VT_GEMM_ABLOCK >= VT_GEMM_KC * VT_GEMM_MR,
               "blocks");

/* C tile (4 x 8 at c, row stride ldc) = (first ? 0 : C) + sum_{k<kc} A(i,k) B(k,l), then + bias
 * (8 floats, or NULL). The 8 accumulators are named variables, not an array: clang (wasm) keeps
 * either in registers, gcc (the native twins) kept an array on the stack and loaded and stored
 * it around every multiply-add (measured under cachegrind: 4.8 loads per FMA, half the speed). */
VT_INLINE void gemm_tile(float *c, int ldc, const float *ap, const float *bp, int kc, int first,
                         const float *bias) {
    float *c0 = c, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
    f32x4 a00, a01, a10, a11, a20, a21, a30, a31;
    if (first) {
        a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = ZERO();
    } else {
        a00 = LD(c0), a01 = LD(c0 + 4), a10 = LD(c1), a11 = LD(c1 + 4);
        a20 = LD(c2), a21 = LD(c2 + 4), a30 = LD(c3), a31 = LD(c3 + 4);
    }
    for (int k = 0; k < kc; k++) {
        f32x4 b0 = LD(bp), b1 = LD(bp + 4), s;
        s = LDSPLAT(ap + 0), a00 = MADD(a00, s, b0), a01 = MADD(a01, s, b1);
        s = LDSPLAT(ap + 1), a10 = MADD(a10, s, b0), a11 = MADD(a11, s, b1);
        s = LDSPLAT(ap + 2), a20 = MADD(a20, s, b0), a21 = MADD(a21, s, b1);
        s = LDSPLAT(ap + 3), a30 = MADD(a30, s, b0), a31 = MADD(a31, s, b1);
        ap += VT_GEMM_MR, bp += VT_GEMM_NR;
    }
    if (bias) {
        f32x4 b0 = LD(bias), b1 = LD(bias + 4);
        a00 = ADD(a00, b0), a01 = ADD(a01, b1), a10 = ADD(a10, b0), a11 = ADD(a11, b1);
        a20 = ADD(a20, b0), a21 = ADD(a21, b1), a30 = ADD(a30, b0), a31 = ADD(a31, b1);
    }
    ST(c0, a00), ST(c0 + 4, a01), ST(c1, a10), ST(c1 + 4, a11);
    ST(c2, a20), ST(c2 + 4, a21), ST(c3, a30), ST(c3 + 4, a31);
}

/* a tile at the edge of C (mr < 4 rows or nr < 8 columns): the same tile over a padded copy */
static void gemm_tile_edge(float *c, int ldc, int mr, int nr, const float *ap, const float *bp, int kc,
                           int first, const float *bias) {
    _Alignas(16) float t[VT_GEMM_MR * VT_GEMM_NR] = { 0 }, bt[VT_GEMM_NR] = { 0 };
    for (int i = 0; i < mr; i++)
        for (int l = 0; l < nr; l++) t[i * VT_GEMM_NR + l] = first ? 0.0f : c[(size_t)i * ldc + l];
    if (bias)
        for (int l = 0; l < nr; l++) bt[l] = bias[l];
    gemm_tile(t, VT_GEMM_NR, ap, bp, kc, first, bias ? bt : NULL);
    for (int i = 0; i < mr; i++)
        for (int l = 0; l < nr; l++) c[(size_t)i * ldc + l] = t[i * VT_GEMM_NR + l];
}

/* [r0 r1 r2 r3] rows -> columns: r_i = [x_i0 .. x_i3] becomes c_j = [x_0j .. x_3j] */
#define VT_TRANSPOSE4(r0, r1, r2, r3)                                                                        \
    do {                                                                                                     \
        f32x4 lo01_ = ZIP_LO(r0, r1), lo23_ = ZIP_LO(r2, r3);                                                \
        f32x4 hi01_ = ZIP_HI(r0, r1), hi23_ = ZIP_HI(r2, r3);                                                \
        r0 = CAT_LO(lo01_, lo23_), r1 = CAT_HI(lo01_, lo23_);                                                \
        r2 = CAT_LO(hi01_, hi23_), r3 = CAT_HI(hi01_, hi23_);                                                \
    } while (0)

/* dst[k*W + w] = X(w, k) for w < n (zero for n <= w < W), k < kc, where X(w, k) = x[w*ws + k*ks]:
 * one panel (W = 8: of B, X(w,k) = B(k,w); W = 4: of A, X = A). Two forms here: X's k contiguous
 * (ks == 1: 4 x 4 transposes) and anything else (scalar, with zero padding); blocks whose w is
 * contiguous (ws == 1) are copied by vectors a whole block at a time (pack_block_c). Kept out of
 * line: inlined into gemm's loop nest, V8's register allocator spilled the tile's accumulators. */
__attribute__((noinline)) static void pack_panel_t(float *dst, const int W, const float *x, int ws, int kc) {
    int k = 0;
    for (int w = 0; w < W; w += 4) {
        const float *s0 = x + (size_t)w * ws, *s1 = s0 + ws, *s2 = s1 + ws, *s3 = s2 + ws;
        float *d = dst + w;
        for (k = 0; k + 4 <= kc; k += 4, s0 += 4, s1 += 4, s2 += 4, s3 += 4, d += 4 * W) {
            f32x4 r0 = LD(s0), r1 = LD(s1), r2 = LD(s2), r3 = LD(s3);
            VT_TRANSPOSE4(r0, r1, r2, r3);
            ST(d, r0), ST(d + W, r1), ST(d + 2 * W, r2), ST(d + 3 * W, r3);
        }
    }
    for (; k < kc; k++)
        for (int w = 0; w < W; w++) dst[(size_t)k * W + w] = x[(size_t)w * ws + k];
}
__attribute__((noinline)) static void pack_panel_s(float *dst, const int W, const float *x, int ws, int ks,
                                                   int n, int kc) {
    for (int k = 0; k < kc; k++)
        for (int w = 0; w < W; w++)
            dst[(size_t)k * W + w] = w < n ? x[(size_t)w * ws + (size_t)k * ks] : 0.0f;
}
/* The np W-wide panels (W = 4: of A, 8: of B) of a block whose rows are contiguous (X(w,k) =
 * x[w + k*ks]: dW's dout^T and attention's P^T / dS^T as A; the weights of dinp and the
 * activations of dW as B): row k of the block (W np floats) is read once and dealt to the panels.
 * (Panel by panel read 16 or 32 bytes of every row's cache line per panel, and the block's rows
 * had left L1 before the next panel came back to them.) The full panels of such blocks go here,
 * a last partial one through pack_panel. */
__attribute__((noinline)) static void pack_block_c(float *dst, const int W, int np, const float *x, int ks,
                                                   int kc) {
    if (W == 8)
        for (int k = 0; k < kc; k++, x += ks)
            for (int p = 0; p < np; p++) {
                float *d = dst + ((size_t)p * kc + k) * 8;
                ST(d, LD(x + 8 * p)), ST(d + 4, LD(x + 8 * p + 4));
            }
    else
        for (int k = 0; k < kc; k++, x += ks)
            for (int p = 0; p < np; p++) ST(dst + ((size_t)p * kc + k) * 4, LD(x + 4 * p));
}
static void pack_panel(float *dst, const int W, const float *x, int ws, int ks, int n, int kc) {
    if (n == W && ks == 1)
        pack_panel_t(dst, W, x, ws, kc);
    else
        pack_panel_s(dst, W, x, ws, ks, n, kc);
}

/* the tiles of one packed block: C[ni, nl] (+)= apack bpack, ni x nl tiles of 4 x 8 */
__attribute__((noinline)) static void gemm_block(float *c, int ldc, const float *apack, const float *bpack,
                                                 int ni, int nl, int kc, int first, const float *bias) {
    for (int l = 0; l < nl; l += VT_GEMM_NR) {
        int nr = nl - l < VT_GEMM_NR ? nl - l : VT_GEMM_NR;
        const float *bp = bpack + (size_t)l * kc, *bb = bias ? bias + l : NULL;
        for (int i = 0; i < ni; i += VT_GEMM_MR) {
            int mr = ni - i < VT_GEMM_MR ? ni - i : VT_GEMM_MR;
            float *ct = c + (size_t)i * ldc + l;
            const float *ap = apack + (size_t)i * kc;
            if (mr == VT_GEMM_MR && nr == VT_GEMM_NR)
                gemm_tile(ct, ldc, ap, bp, kc, first, bb);
            else
                gemm_tile_edge(ct, ldc, mr, nr, ap, bp, kc, first, bb);
        }
    }
}

/* vt_gemm (kernels.h): C[I,L] = A B (+ bias), or C += A B */
void vt_simd_gemm(float *c, int ldc, const float *a, int ars, int acs, const float *b, int brs, int bcs,
                  int I, int J, int L, int accumulate, const float *bias) {
    if (I <= 0 || L <= 0) return;
    int overwrite = !accumulate;
    if (J <= 0) { /* the reference's empty sums: 0 (+ bias) */
        if (overwrite)
            for (int i = 0; i < I; i++)
                for (int l = 0; l < L; l++) c[(size_t)i * ldc + l] = bias ? 0.0f + bias[l] : 0.0f;
        return;
    }
    _Alignas(16) float bpack[VT_GEMM_BBLOCK];
    _Alignas(16) float apack[VT_GEMM_ABLOCK];
    int nkb = (J + VT_GEMM_KC - 1) / VT_GEMM_KC, kcb = (J + nkb - 1) / nkb; /* even k blocks */
    int nc = VT_GEMM_BBLOCK / kcb / VT_GEMM_NR * VT_GEMM_NR;
    int mc = VT_GEMM_ABLOCK / kcb / VT_GEMM_MR * VT_GEMM_MR;
    for (int l0 = 0; l0 < L; l0 += nc) {
        int nl = L - l0 < nc ? L - l0 : nc;
        for (int j0 = 0; j0 < J; j0 += kcb) {
            int kc = J - j0 < kcb ? J - j0 : kcb, first = overwrite && j0 == 0;
            const float *bias_k = overwrite && j0 + kc == J && bias ? bias + l0 : NULL;
            int nfull = bcs == 1 ? nl / VT_GEMM_NR * VT_GEMM_NR : 0; /* B's rows contiguous: one pass */
            if (nfull)
                pack_block_c(bpack, VT_GEMM_NR, nfull / VT_GEMM_NR, b + (size_t)j0 * brs + l0, brs, kc);
            for (int l = nfull; l < nl; l += VT_GEMM_NR) /* B(j0.., l0+l..) -> panel */
                pack_panel(bpack + (size_t)l * kc, VT_GEMM_NR, b + (size_t)j0 * brs + (size_t)(l0 + l) * bcs,
                           bcs, brs, nl - l < VT_GEMM_NR ? nl - l : VT_GEMM_NR, kc);
            for (int i0 = 0; i0 < I; i0 += mc) {
                int ni = I - i0 < mc ? I - i0 : mc;
                int afull = ars == 1 ? ni / VT_GEMM_MR * VT_GEMM_MR : 0; /* A's rows contiguous: one pass */
                if (afull)
                    pack_block_c(apack, VT_GEMM_MR, afull / VT_GEMM_MR, a + i0 + (size_t)j0 * acs, acs, kc);
                for (int i = afull; i < ni; i += VT_GEMM_MR)
                    pack_panel(apack + (size_t)i * kc, VT_GEMM_MR,
                               a + (size_t)(i0 + i) * ars + (size_t)j0 * acs, ars, acs,
                               ni - i < VT_GEMM_MR ? ni - i : VT_GEMM_MR, kc);
                gemm_block(c + (size_t)i0 * ldc + l0, ldc, apack, bpack, ni, nl, kc, first, bias_k);
            }
        }
    }
}

/* How to split C among `parts` threads (kernels.c): 1 = into ranges of columns (multiples of 8),
 * 0 = of rows (multiples of 4). Each part is a whole GEMM of its own, which packs its own
 * operands: split along L, every part packs all of A (again for each of its B blocks) and its
 * columns of B; along I, its rows of A and all of B. The estimate: the cycles of the slowest
 * part, its products (2 FMAs a cycle, 8 floats wide) plus ~0.5 cycle per float packed. */
int vt_simd_gemm_split(int I, int J, int L, int parts) {
    if (parts <= 1 || J <= 0) return 0;
    int nkb = (J + VT_GEMM_KC - 1) / VT_GEMM_KC, kcb = (J + nkb - 1) / nkb;
    double nc = VT_GEMM_BBLOCK / kcb / VT_GEMM_NR * VT_GEMM_NR;
    double ui = (I + 3) / 4, ul = (L + 7) / 8;                   /* units: tile rows, tile columns */
    double pi = ceil(ui / parts) * 4, pl = ceil(ul / parts) * 8; /* the biggest part's rows / columns */
    if (pi > I) pi = I;
    if (pl > L) pl = L;
    double by_i = pi * L * J / 16 + 0.5 * ((double)pi * J * ceil(L / nc) + (double)J * L);
    double by_l = I * pl * J / 16 + 0.5 * ((double)I * J * ceil(pl / nc) + (double)J * pl);
    return ul >= parts && by_l < by_i;
}

void vt_simd_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int M, int K,
                            int N) {
    /* out[m,n] = sum_k inp[m,k] w[n,k] (+ bias[n]): A = inp, B(k,n) = w[n*K + k] */
    vt_simd_gemm(out, N, inp, K, 1, w, 1, K, M, K, N, 0, bias);
}

void vt_simd_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                             const float *w, int M, int K, int N) {
    if (M <= 0 || N <= 0) return; /* nothing to add (K = 0: the gradients are empty) */
    /* dinp[m,:] += sum_n dout[m,n] w[n,:]   (A = dout, B = w, both row-major) */
    if (dinp && K > 0) vt_simd_gemm(dinp, K, dout, N, 1, w, K, 1, M, N, K, 1, NULL);
    vt_simd_matmul_backward_dw(dw, dbias, dout, inp, M, K, N, 0, N);
}

#define VT_COLSUM_BLOCK 1024 /* columns of dbias summed per pass (4 KB of sums on the stack) */

/* Rows [n0, n1) of dw and dbias (the threads' split: each element's sum over m is unchanged;
 * n0 and n1 multiples of 4 or N, so the same columns of dbias take the vector path). */
void vt_simd_matmul_backward_dw(float *dw, float *dbias, const float *dout, const float *inp, int M, int K,
                                int N, int n0, int n1) {
    if (M <= 0 || n1 <= n0) return;
    /* dw[n,:] += sum_m dout[m,n] inp[m,:]   (A = dout^T: A(n,m) = dout[m*N + n]; B = inp) */
    if (dw && K > 0) vt_simd_gemm(dw + (size_t)n0 * K, K, dout + n0, 1, N, inp, K, 1, n1 - n0, M, K, 1, NULL);
    if (dbias) { /* dbias[n] += sum_m dout[m,n], each column's sum from 0 in m order, then added */
        /* Row by row into a block of sums on the stack (the reference's order per column): one
         * pass over dout in memory order. Column by column (4 at a time down all M rows) read 16
         * bytes of every row's cache line per pass and missed L1 at every load once dout
         * outgrew it (cachegrind, qkv at batch 4: 4x the L1 misses; native FMA twin, fc1's
         * 788 x 768: ~135 -> ~90 us a call, ~1 % of that matmul backward). */
        _Alignas(16) float sum[VT_COLSUM_BLOCK];
        for (int c0 = n0; c0 < n1; c0 += VT_COLSUM_BLOCK) {
            int w = n1 - c0 < VT_COLSUM_BLOCK ? n1 - c0 : VT_COLSUM_BLOCK, i;
            for (i = 0; i < w; i++) sum[i] = 0.0f;
            for (int m = 0; m < M; m++) {
                const float *r = dout + (size_t)m * N + c0;
                for (i = 0; i + 4 <= w; i += 4) ST(sum + i, ADD(LD(sum + i), LD(r + i)));
                for (; i < w; i++) sum[i] += r[i];
            }
            for (i = 0; i + 4 <= w; i += 4) ST(dbias + c0 + i, ADD(LD(dbias + c0 + i), LD(sum + i)));
            for (; i < w; i++) dbias[c0 + i] += sum[i];
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

void vt_simd_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                               const float *b, int M, int D, float eps) {
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
        for (; i < D; i++) {
            float d = x[i] - mu;
            v += d * d;
        }
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

void vt_simd_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                const float *w, const float *mean, const float *rstd, int M, int D) {
    if (dinp) vt_simd_layernorm_backward_dinp(dinp, dout, inp, w, mean, rstd, M, D);
    vt_simd_layernorm_backward_params(dw, db, dout, inp, mean, rstd, M, D, 0, D);
}

/* dinp rows (the threads split over m) */
void vt_simd_layernorm_backward_dinp(float *dinp, const float *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int M, int D) {
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
                                       const float *mean, const float *rstd, int M, int D, int d0, int d1) {
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

#define VT_SQRT1_2      0.70710678118654752440f
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
        float t[4] = { 0 };
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
        float t[4] = { 0 };
        for (size_t j = i; j < n; j++) t[j - i] = inp[j];
        ST(t, gelu_grad_f32x4(LD(t)));
        for (size_t j = i; j < n; j++) dinp[j] = dout[j] * t[j - i];
    }
}

/* ------------------------------------------------------------------------------------------ */
/* quick_gelu and tanh GELU (kernels.h: PyTorch's formulas, the references' order)              */

#define VT_QUICK_GELU_K 1.702f
#define VT_GELU_TANH_B  0.797884583f
#define VT_GELU_TANH_K  0.044715f

/* sigmoid(1.702 x) = 1 / (1 + exp(-1.702 x)) */
VT_INLINE f32x4 qg_sigmoid_f32x4(f32x4 x) {
    return DIV(SPLAT(1.0f), ADD(SPLAT(1.0f), exp_f32x4(NEG(MUL(x, SPLAT(VT_QUICK_GELU_K))))));
}
VT_INLINE f32x4 quick_gelu_grad_f32x4(f32x4 x, f32x4 g) {
    f32x4 s = qg_sigmoid_f32x4(x);
    f32x4 ds = MUL(MUL(MUL(g, x), SUB(SPLAT(1.0f), s)), s);
    return ADD(MUL(g, s), MUL(ds, SPLAT(VT_QUICK_GELU_K)));
}

/* tanh(z) = sign(z) (1 - 2 / (exp(2|z|) + 1)): accurate to a few ulp of 1 (absolutely), which is
 * what GELU adds it to; exp(2|z|) overflowing to +inf gives exactly 1. NaN propagates. */
VT_INLINE f32x4 tanh_f32x4(f32x4 z) {
    const f32x4 sign = I32_SPLAT((int32_t)0x80000000);
    f32x4 e = exp_f32x4(MUL(SPLAT(2.0f), ABS(z)));
    f32x4 t = SUB(SPLAT(1.0f), DIV(SPLAT(2.0f), ADD(e, SPLAT(1.0f))));
    return BOR(t, BAND(z, sign));
}
VT_INLINE f32x4 gelu_tanh_inner_f32x4(f32x4 x, f32x4 x2) {
    return MUL(SPLAT(VT_GELU_TANH_B), ADD(x, MUL(SPLAT(VT_GELU_TANH_K), MUL(x2, x))));
}
VT_INLINE f32x4 gelu_tanh_f32x4(f32x4 x) {
    f32x4 t = tanh_f32x4(gelu_tanh_inner_f32x4(x, MUL(x, x)));
    return MUL(MUL(SPLAT(0.5f), x), ADD(SPLAT(1.0f), t));
}
VT_INLINE f32x4 gelu_tanh_grad_f32x4(f32x4 x) {
    f32x4 x2 = MUL(x, x), t = tanh_f32x4(gelu_tanh_inner_f32x4(x, x2));
    f32x4 left_d = MUL(SPLAT(0.5f), ADD(SPLAT(1.0f), t));
    f32x4 inner_d = MUL(SPLAT(VT_GELU_TANH_B), ADD(SPLAT(1.0f), MUL(SPLAT(3.0f * VT_GELU_TANH_K), x2)));
    f32x4 right_d = MUL(MUL(MUL(SPLAT(0.5f), x), SUB(SPLAT(1.0f), MUL(t, t))), inner_d);
    return ADD(left_d, right_d);
}

void vt_simd_quick_gelu_forward(float *out, const float *inp, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        f32x4 x = LD(inp + i);
        ST(out + i, MUL(x, qg_sigmoid_f32x4(x)));
    }
    if (i < n) {
        float t[4] = { 0 };
        for (size_t j = i; j < n; j++) t[j - i] = inp[j];
        f32x4 x = LD(t);
        ST(t, MUL(x, qg_sigmoid_f32x4(x)));
        for (size_t j = i; j < n; j++) out[j] = t[j - i];
    }
}
void vt_simd_quick_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t i = 0; /* dinp may alias dout: each element is read before it is written */
    for (; i + 4 <= n; i += 4) ST(dinp + i, quick_gelu_grad_f32x4(LD(inp + i), LD(dout + i)));
    if (i < n) {
        float t[4] = { 0 }, g[4] = { 0 };
        for (size_t j = i; j < n; j++) t[j - i] = inp[j], g[j - i] = dout[j];
        ST(t, quick_gelu_grad_f32x4(LD(t), LD(g)));
        for (size_t j = i; j < n; j++) dinp[j] = t[j - i];
    }
}
void vt_simd_gelu_tanh_forward(float *out, const float *inp, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) ST(out + i, gelu_tanh_f32x4(LD(inp + i)));
    if (i < n) {
        float t[4] = { 0 };
        for (size_t j = i; j < n; j++) t[j - i] = inp[j];
        ST(t, gelu_tanh_f32x4(LD(t)));
        for (size_t j = i; j < n; j++) out[j] = t[j - i];
    }
}
void vt_simd_gelu_tanh_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) ST(dinp + i, MUL(LD(dout + i), gelu_tanh_grad_f32x4(LD(inp + i))));
    if (i < n) {
        float t[4] = { 0 };
        for (size_t j = i; j < n; j++) t[j - i] = inp[j];
        ST(t, gelu_tanh_grad_f32x4(LD(t)));
        for (size_t j = i; j < n; j++) dinp[j] = dout[j] * t[j - i];
    }
}
void vt_simd_tanh(float *out, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) ST(out + i, tanh_f32x4(LD(x + i)));
    for (; i < n; i++) out[i] = LANE0(tanh_f32x4(SPLAT(x[i])));
}

/* ------------------------------------------------------------------------------------------ */
/* RMSNorm                                                                                     */

void vt_simd_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int M, int D,
                             float eps) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * D;
        float *y = out + (size_t)m * D; /* may alias x: every element is read before written */
        f32x4 vs = ZERO();
        int i = 0;
        for (; i + 4 <= D; i += 4) {
            f32x4 xv = LD(x + i);
            vs = MADD(vs, xv, xv);
        }
        float s = hsum(vs);
        for (; i < D; i++) s += x[i] * x[i];
        float rs = 1.0f / sqrtf(s / (float)D + eps);
        f32x4 vrs = SPLAT(rs);
        for (i = 0; i + 4 <= D; i += 4) {
            f32x4 n = MUL(LD(x + i), vrs);
            ST(y + i, w ? MUL(n, LD(w + i)) : n);
        }
        for (; i < D; i++) y[i] = w ? (x[i] * rs) * w[i] : x[i] * rs;
        if (rstd) rstd[m] = rs;
    }
}

/* dinp rows (the threads split over m) */
void vt_simd_rmsnorm_backward_dinp(float *dinp, const float *dout, const float *inp, const float *w,
                                   const float *rstd, int M, int D) {
    const f32x4 one = SPLAT(1.0f);
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * D, *dy = dout + (size_t)m * D;
        float rs = rstd[m];
        f32x4 vrs = SPLAT(rs), s_dnn = ZERO();
        int i = 0;
        for (; i + 4 <= D; i += 4)
            s_dnn = MADD(s_dnn, MUL(w ? LD(w + i) : one, LD(dy + i)), MUL(LD(x + i), vrs));
        float sum_dn_n = hsum(s_dnn);
        for (; i < D; i++) sum_dn_n += (w ? w[i] * dy[i] : dy[i]) * (x[i] * rs);
        float mean_dn_n = sum_dn_n / (float)D;
        f32x4 vm = SPLAT(mean_dn_n);
        float *di = dinp + (size_t)m * D;
        for (i = 0; i + 4 <= D; i += 4) {
            f32x4 n = MUL(LD(x + i), vrs), g = LD(dy + i), dn = w ? MUL(LD(w + i), g) : g;
            ST(di + i, ADD(LD(di + i), MUL(SUB(dn, MUL(n, vm)), vrs)));
        }
        for (; i < D; i++) {
            float n = x[i] * rs, dn = w ? w[i] * dy[i] : dy[i];
            di[i] += (dn - n * mean_dn_n) * rs;
        }
    }
}

/* dw columns [d0, d1) summed over every row in m order (d0, d1 multiples of 4 or D) */
void vt_simd_rmsnorm_backward_dw(float *dw, const float *dout, const float *inp, const float *rstd, int M,
                                 int D, int d0, int d1) {
    if (!dw) return;
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * D, *dy = dout + (size_t)m * D;
        float rs = rstd[m];
        f32x4 vrs = SPLAT(rs);
        int i = d0;
        for (; i + 4 <= d1; i += 4) ST(dw + i, MADD(LD(dw + i), MUL(LD(x + i), vrs), LD(dy + i)));
        for (; i < d1; i++) dw[i] += (x[i] * rs) * dy[i];
    }
}

void vt_simd_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                              const float *rstd, int M, int D) {
    if (dinp) vt_simd_rmsnorm_backward_dinp(dinp, dout, inp, w, rstd, M, D);
    vt_simd_rmsnorm_backward_dw(dw, dout, inp, rstd, M, D, 0, D);
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

/* d = p (d - p.d) scale: the dot product in 4 lane-wise partial sums (re-associated against the
 * reference's one chain), the update element-wise in the reference's order */
void vt_simd_softmax_backward_row(float *d, const float *p, int n, float scale) {
    f32x4 vs = ZERO();
    int i = 0;
    for (; i + 4 <= n; i += 4) vs = MADD(vs, LD(p + i), LD(d + i));
    float s = hsum(vs);
    for (; i < n; i++) s += p[i] * d[i];
    f32x4 vsum = SPLAT(s), vscale = SPLAT(scale);
    for (i = 0; i + 4 <= n; i += 4) ST(d + i, MUL(MUL(LD(p + i), SUB(LD(d + i), vsum)), vscale));
    for (; i < n; i++) d[i] = p[i] * (d[i] - s) * scale;
}

/* ------------------------------------------------------------------------------------------ */
/* AdamW                                                                                       */

int vt_simd_adamw_update(float *p, const float *g, float *m, float *v, size_t n, long t, float lr, float b1,
                         float b2, float eps, float wd) {
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    float step = lr / bc1, bc2s = sqrtf(bc2), decay = 1.0f - lr * wd;
    const f32x4 vdecay = SPLAT(decay), vb1 = SPLAT(b1), vb2 = SPLAT(b2), v1b1 = SPLAT(1.0f - b1),
                v1b2 = SPLAT(1.0f - b2), vbc2s = SPLAT(bc2s), veps = SPLAT(eps), vstep = SPLAT(step);
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
