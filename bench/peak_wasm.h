/* peak_wasm.h: the one-core multiply-add peak of a wasm SIMD build, the yardstick every "% of
 * peak" in bench/ divides by. 12 independent f32x4 chains acc = acc * m + c in registers (enough
 * chains to hide the latency of an FMA on 2 ports); in the relaxed build each step is one
 * f32x4.relaxed_madd (an FMA on an FMA host), in the SIMD128 build a mul and an add. Included by
 * kernel_bench.c and peak_module.c (the same loop, exported to JavaScript, timed beside the
 * training steps of step_bench.mjs). Returns the flops done (8 per chain and step). */
#include <wasm_simd128.h>
#if defined(__wasm_relaxed_simd__)
#define PEAK_MADD(acc, a, b) wasm_f32x4_relaxed_madd((a), (b), (acc))
#define PEAK_NAME            "wasm relaxed SIMD f32x4.relaxed_madd, 12 independent chains"
#else
#define PEAK_MADD(acc, a, b) wasm_f32x4_add((acc), wasm_f32x4_mul((a), (b)))
#define PEAK_NAME            "wasm SIMD128 f32x4 mul+add, 12 independent chains"
#endif
#define PEAK_CHAINS 12
static volatile float peak_in[2] = { 0.999999f, 1e-7f };
static volatile float peak_sink;
__attribute__((noinline)) static double peak_chains(long iters) {
    v128_t m = wasm_f32x4_splat(peak_in[0]), c = wasm_f32x4_splat(peak_in[1]);
    v128_t a[PEAK_CHAINS];
    for (int i = 0; i < PEAK_CHAINS; i++) a[i] = wasm_f32x4_splat(0.25f + (float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) a[i] = PEAK_MADD(c, a[i], m);
    v128_t s = a[0];
    for (int i = 1; i < PEAK_CHAINS; i++) s = wasm_f32x4_add(s, a[i]);
    peak_sink = wasm_f32x4_extract_lane(s, 0);
    return (double)iters * PEAK_CHAINS * 8;
}
