/* bench_util.h: what the benchmark programs (kernel_bench.c, train_bench.c) share: a monotonic
 * clock and the thread's CPU clock, a comparison for qsort, and the name of the build they run in (wasm-relaxed, wasm-simd,
 * native-sse2, native-fma). Header-only. */
#ifndef VT_BENCH_UTIL_H
#define VT_BENCH_UTIL_H
#include <time.h>

static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * t.tv_nsec;
}
/* this thread's CPU time: time it was not running (other processes on the core) does not count */
static inline double now_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * t.tv_nsec;
}
static inline int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#if defined(BENCH_BUILD_NAME)
#define BENCH_BUILD BENCH_BUILD_NAME
#elif defined(__wasm_relaxed_simd__)
#define BENCH_BUILD "wasm-relaxed"
#elif defined(__wasm_simd128__)
#define BENCH_BUILD "wasm-simd"
#elif defined(__wasm__)
#define BENCH_BUILD "wasm-scalar"
#else
#define BENCH_BUILD "native-sse2"
#endif
#endif
