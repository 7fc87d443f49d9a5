/* simd128.h: the one header that maps vitrine's 4 x f32 vector vocabulary to an ISA (ggml's
 * "small macro vocabulary mapped per ISA in one header"). kernels_simd.c is written only in these
 * names; this header is the only place that names an ISA's intrinsics.
 *
 *   WebAssembly SIMD128 (__wasm_simd128__)  <wasm_simd128.h>; + relaxed SIMD (-mrelaxed-simd)
 *   x86-64 SSE2 (__SSE2__)                 <emmintrin.h>; SSE4.1's roundps when __SSE4_1__;
 *                                          FMA3 (-mfma: the native FMA build) for MADD
 *   anything else (e.g. aarch64)           nothing: VT_SIMD128_AVAILABLE stays undefined and
 *                                          kernels.c / optim.c use the scalar references.
 *
 * Every operation has the SAME per-lane result on every ISA, bit for bit, so a native build
 * reproduces the browser's numbers (checked by `vitrine parity --dump` on both):
 *   ADD SUB MUL DIV SQRT   IEEE-754 binary32, round to nearest even, subnormals kept (SSE's
 *                          default MXCSR: no FTZ/DAZ)
 *   MADD(acc,a,b)          acc + a*b. Two families of builds (VT_SIMD128_FUSED says which):
 *                            unfused (SIMD128, SSE2): a mul then an add, two roundings;
 *                            fused (wasm relaxed SIMD: f32x4.relaxed_madd; x86 FMA3:
 *                            _mm_fmadd_ps): one rounding. relaxed_madd may be either, per the
 *                            wasm spec; V8 fuses it where the CPU has FMA (every x86-64 since
 *                            2013-15, every arm64), so the relaxed build there gives the native
 *                            FMA build's bits. Only MADD ever fuses (-ffp-contract=off): a build
 *                            differs from its unfused twin exactly where a kernel calls MADD.
 *   PMIN(a,b) PMAX(a,b)    wasm's pseudo-min/max: PMIN = b < a ? b : a, PMAX = a < b ? b : a;
 *                          a NaN in `a` (or an unordered pair) gives `a` back. SSE's minps(x,y)
 *                          is x < y ? x : y, so PMIN(a,b) = minps(b,a), PMAX(a,b) = maxps(b,a)
 *   NEAREST                round to the nearest integer, ties to even, -0.3 -> -0.0, values
 *                          already integral (|x| >= 2^23), infinities and NaN returned as they are
 *   ABS NEG                clear / flip the sign bit (also of NaN)
 *   GE                     all-ones lane mask where a >= b (false for NaN)
 *   BSEL(a,b,m)            bitwise (a & m) | (b & ~m)
 *   I32_*                  the lanes' bits as int32: wrap-around add/sub, shifts by constants
 *                          (I32_SHR arithmetic)
 * Lane rearrangements are named, not indexed (each ISA has its own immediate encoding):
 *   SWAP_HALVES(v) = [v2 v3 v0 v1]     SWAP_PAIRS(v) = [v1 v0 v3 v2]
 *   ZIP_LO(a,b) = [a0 b0 a1 b1]        ZIP_HI(a,b)   = [a2 b2 a3 b3]
 *   CAT_LO(a,b) = [a0 a1 b0 b1]        CAT_HI(a,b)   = [a2 a3 b2 b3]
 *   LANE0(v) = v0 as a float;          MAKE(x0,x1,x2,x3) = [x0 x1 x2 x3]
 * Horizontal reductions are composed from these in kernels_simd.c, so their association order is
 * the same on every ISA too. Loads and stores are unaligned. */
#ifndef VT_SIMD128_H
#define VT_SIMD128_H

#if defined(__wasm_simd128__)
/* ------------------------------------------------------------------------ WebAssembly SIMD128 */
#include <wasm_simd128.h>
#define VT_SIMD128_AVAILABLE 1
#define VT_SIMD128_ISA       "wasm-simd128"

typedef v128_t f32x4;
#define LD(p)                wasm_v128_load(p)
#define ST(p, v)             wasm_v128_store((p), (v))
#define SPLAT(x)             wasm_f32x4_splat(x)
#define LDSPLAT(p)           wasm_v128_load32_splat(p)
#define ZERO()               wasm_f32x4_const_splat(0.0f)
#define MAKE(x0, x1, x2, x3) wasm_f32x4_make((x0), (x1), (x2), (x3))
#define LANE0(v)             wasm_f32x4_extract_lane((v), 0)
#define ADD                  wasm_f32x4_add
#define SUB                  wasm_f32x4_sub
#define MUL                  wasm_f32x4_mul
#define DIV                  wasm_f32x4_div
#define SQRT                 wasm_f32x4_sqrt
#define PMIN                 wasm_f32x4_pmin
#define PMAX                 wasm_f32x4_pmax
#define NEAREST              wasm_f32x4_nearest
#define ABS                  wasm_f32x4_abs
#define NEG                  wasm_f32x4_neg
#define GE                   wasm_f32x4_ge
#define BAND                 wasm_v128_and
#define BOR                  wasm_v128_or
#define BSEL(a, b, m)        wasm_v128_bitselect((a), (b), (m))
#define I32_SPLAT(x)         wasm_i32x4_splat(x)
#define I32_ADD              wasm_i32x4_add
#define I32_SUB              wasm_i32x4_sub
#define I32_SHL(v, n)        wasm_i32x4_shl((v), (n))
#define I32_SHR(v, n)        wasm_i32x4_shr((v), (n))
#define SWAP_HALVES(v)       wasm_i32x4_shuffle((v), (v), 2, 3, 0, 1)
#define SWAP_PAIRS(v)        wasm_i32x4_shuffle((v), (v), 1, 0, 3, 2)
#define ZIP_LO(a, b)         wasm_i32x4_shuffle((a), (b), 0, 4, 1, 5)
#define ZIP_HI(a, b)         wasm_i32x4_shuffle((a), (b), 2, 6, 3, 7)
#define CAT_LO(a, b)         wasm_i32x4_shuffle((a), (b), 0, 1, 4, 5)
#define CAT_HI(a, b)         wasm_i32x4_shuffle((a), (b), 2, 3, 6, 7)

#elif defined(__SSE2__)
/* ------------------------------------------------------------------------ x86-64 SSE2 */
#include <emmintrin.h>
#if defined(__SSE4_1__)
#include <smmintrin.h>
#define VT_SIMD128_ISA "sse4.1"
#else
#define VT_SIMD128_ISA "sse2"
#endif
#define VT_SIMD128_AVAILABLE 1

typedef __m128 f32x4; /* integer ops reinterpret the same bits (casts are free) */
#define VT_I(v)              _mm_castps_si128(v)
#define VT_F(v)              _mm_castsi128_ps(v)
#define LD(p)                _mm_loadu_ps(p)
#define ST(p, v)             _mm_storeu_ps((p), (v))
#define SPLAT(x)             _mm_set1_ps(x)
#define LDSPLAT(p)           _mm_load1_ps(p)
#define ZERO()               _mm_setzero_ps()
#define MAKE(x0, x1, x2, x3) _mm_setr_ps((x0), (x1), (x2), (x3))
#define LANE0(v)             _mm_cvtss_f32(v)
#define ADD                  _mm_add_ps
#define SUB                  _mm_sub_ps
#define MUL                  _mm_mul_ps
#define DIV                  _mm_div_ps
#define SQRT                 _mm_sqrt_ps
#define PMIN(a, b)           _mm_min_ps((b), (a)) /* b < a ? b : a */
#define PMAX(a, b)           _mm_max_ps((b), (a)) /* b > a ? b : a, i.e. a < b ? b : a */
#define GE                   _mm_cmpge_ps
#define BAND                 _mm_and_ps
#define BOR                  _mm_or_ps
#define BSEL(a, b, m)        vt_sse_bsel((a), (b), (m))
#define ABS(v)               _mm_and_ps((v), VT_F(_mm_set1_epi32(0x7FFFFFFF)))
#define NEG(v)               _mm_xor_ps((v), VT_F(_mm_set1_epi32((int)0x80000000u)))
#define I32_SPLAT(x)         VT_F(_mm_set1_epi32(x))
#define I32_ADD(a, b)        VT_F(_mm_add_epi32(VT_I(a), VT_I(b)))
#define I32_SUB(a, b)        VT_F(_mm_sub_epi32(VT_I(a), VT_I(b)))
#define I32_SHL(v, n)        VT_F(_mm_slli_epi32(VT_I(v), (n)))
#define I32_SHR(v, n)        VT_F(_mm_srai_epi32(VT_I(v), (n)))
#define SWAP_HALVES(v)       _mm_shuffle_ps((v), (v), _MM_SHUFFLE(1, 0, 3, 2))
#define SWAP_PAIRS(v)        _mm_shuffle_ps((v), (v), _MM_SHUFFLE(2, 3, 0, 1))
#define ZIP_LO(a, b)         _mm_unpacklo_ps((a), (b))
#define ZIP_HI(a, b)         _mm_unpackhi_ps((a), (b))
#define CAT_LO(a, b)         _mm_movelh_ps((a), (b))
#define CAT_HI(a, b)         _mm_movehl_ps((b), (a)) /* movehl(x,y) = [y2 y3 x2 x3] */
#define NEAREST              vt_sse_nearest

static inline __attribute__((always_inline)) f32x4 vt_sse_bsel(f32x4 a, f32x4 b, f32x4 m) {
    return _mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b));
}
/* wasm's f32x4.nearest: ties to even, sign of zero kept, NaN/inf/|x| >= 2^23 unchanged */
static inline __attribute__((always_inline)) f32x4 vt_sse_nearest(f32x4 x) {
#if defined(__SSE4_1__)
    return _mm_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
    /* For |x| < 2^23, (|x| + 2^23) - 2^23 rounds |x| to an integer (nearest, ties to even: the
     * default MXCSR mode) exactly; the sign bit of x is put back (so -0.3 -> -0.0, -2.5 -> -2).
     * Other lanes (larger, infinite, NaN: the compare is false) are already their own result. */
    const f32x4 sign = VT_F(_mm_set1_epi32((int)0x80000000u)), two23 = _mm_set1_ps(8388608.0f);
    f32x4 ax = _mm_andnot_ps(sign, x);
    f32x4 r = _mm_sub_ps(_mm_add_ps(ax, two23), two23);
    r = _mm_or_ps(r, _mm_and_ps(x, sign));
    return vt_sse_bsel(r, x, _mm_cmplt_ps(ax, two23));
#endif
}
#endif /* ISA */

#if defined(VT_SIMD128_AVAILABLE)
#if defined(__wasm_relaxed_simd__)
/* acc + a*b, fused where the engine's CPU has FMA (see above) */
#define MADD(acc, a, b)  wasm_f32x4_relaxed_madd((a), (b), (acc))
#define VT_SIMD128_FUSED 1
#undef VT_SIMD128_ISA
#define VT_SIMD128_ISA "wasm-relaxed-simd"
#elif defined(__SSE2__) && defined(__FMA__)
#include <immintrin.h>
/* acc + a*b with one rounding (vfmadd231ps), the bits of relaxed_madd on an FMA host */
#define MADD(acc, a, b)  _mm_fmadd_ps((a), (b), (acc))
#define VT_SIMD128_FUSED 1
#undef VT_SIMD128_ISA
#define VT_SIMD128_ISA "fma3"
#else
/* acc + a*b as two roundings */
#define MADD(acc, a, b) ADD((acc), MUL((a), (b)))
#endif
#endif

#endif /* VT_SIMD128_H */
