/* peak_loop.h: the multiply+add peak loop in C without intrinsics, included by kernel_bench.c
 * (native SSE2 build), by peak_fma128.c (4 lanes, -mfma) and by peak_avx2.c (8 lanes, -mavx2
 * -mfma). 12 independent chains acc = acc * m + c, each a GNU C vector of PEAK_LANES floats
 * (GCC and clang map it to what the build's flags allow: SSE on x86-64 by default, AVX with
 * -mavx2, scalar f32 on wasm without -msimd128), registers only; 12 chains hide the latency of
 * the multiply and of the add. (A plain float array is not reliable here: GCC may keep it on the
 * stack between iterations and halve the rate.) Define PEAK_FN and PEAK_LANES before including.
 * Returns the flops done (2 per lane per chain per iteration). */
typedef float PEAK_VEC __attribute__((vector_size(PEAK_LANES * 4)));

__attribute__((noinline)) double PEAK_FN(long iters, const volatile float *in, volatile float *sink) {
    PEAK_VEC m, c, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
    for (int l = 0; l < PEAK_LANES; l++) {
        m[l] = in[0], c[l] = in[1];
        a0[l] = in[3] + l, a1[l] = a0[l] + 1, a2[l] = a0[l] + 2, a3[l] = a0[l] + 3;
        a4[l] = a0[l] + 4, a5[l] = a0[l] + 5, a6[l] = a0[l] + 6, a7[l] = a0[l] + 7;
        a8[l] = a0[l] + 8, a9[l] = a0[l] + 9, a10[l] = a0[l] + 10, a11[l] = a0[l] + 11;
    }
    for (long it = 0; it < iters; it++) {
        a0 = a0 * m + c, a1 = a1 * m + c, a2 = a2 * m + c, a3 = a3 * m + c;
        a4 = a4 * m + c, a5 = a5 * m + c, a6 = a6 * m + c, a7 = a7 * m + c;
        a8 = a8 * m + c, a9 = a9 * m + c, a10 = a10 * m + c, a11 = a11 * m + c;
    }
    PEAK_VEC s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11));
    float t = 0;
    for (int l = 0; l < PEAK_LANES; l++) t += s[l];
    *sink = t;
    return (double)iters * 12 * PEAK_LANES * 2;
}
