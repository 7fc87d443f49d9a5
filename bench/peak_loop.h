/* peak_loop.h: the multiply+add peak loop in portable C (no intrinsics), included by
 * kernel_bench.c (native build and wasm scalar build) and by peak_avx2.c (the same loop compiled
 * with -mavx2 -mfma). PEAK_LANES floats per chain, PEAK_CHAINS independent chains
 * acc = acc * m + c: enough chains to hide the latency of the multiply and of the add, registers
 * only. With -O3 the compiler maps a chain to one vector register (SSE: 4 lanes, AVX: 8).
 * Define PEAK_FN (function name), PEAK_LANES and PEAK_CHAINS before including. Returns the flops
 * done (2 per lane per iteration). */
#include <stddef.h>

__attribute__((noinline)) double PEAK_FN(long iters, const volatile float *in, volatile float *sink) {
    float a[PEAK_CHAINS * PEAK_LANES];
    const float m = in[0], c = in[1];
    for (int i = 0; i < PEAK_CHAINS * PEAK_LANES; i++) a[i] = in[3] + (float)i;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < PEAK_CHAINS * PEAK_LANES; i++) a[i] = a[i] * m + c;
    float s = 0;
    for (int i = 0; i < PEAK_CHAINS * PEAK_LANES; i++) s += a[i];
    *sink = s;
    return (double)iters * PEAK_CHAINS * PEAK_LANES * 2;
}
