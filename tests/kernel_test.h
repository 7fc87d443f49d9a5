/* kernel_test.h: the helpers of the kernel tests (test_kernels_simd.c, test_attention.c), which
 * build natively and as WASI commands from the kernels alone (no engine, unlike test_util.h):
 * a seeded generator, buffers with guard floats, and one result line per failed check.
 * Define KT_SEED before including to pick the test's own stream. Header-only. */
#ifndef VT_KERNEL_TEST_H
#define VT_KERNEL_TEST_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KT_SEED
#define KT_SEED 0x9E3779B97F4A7C15ull
#endif

static int n_pass, n_fail;

static uint64_t rng_state = KT_SEED;
static inline uint32_t rng_u32(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}
static inline float rng_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)(rng_u32() >> 8) * (1.0f / 16777216.0f);
}
static inline void fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(lo, hi);
}
static inline float maxabs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* allocations with guard floats on both sides, for overrun checks */
#define GUARD     8
#define GUARD_VAL 12345.678f
static inline float *galloc(size_t n) {
    float *p = malloc((n + 2 * GUARD) * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < GUARD; i++) p[i] = p[n + GUARD + i] = GUARD_VAL;
    return p + GUARD;
}
static inline int guards_ok(const float *p, size_t n) {
    for (size_t i = 0; i < GUARD; i++)
        if (p[-1 - (long)i] != GUARD_VAL || p[n + i] != GUARD_VAL) return 0;
    return 1;
}
static inline void gfree(float *p) {
    if (p) free(p - GUARD);
}
static inline float *gcopy(const float *src, size_t n) {
    float *p = galloc(n);
    memcpy(p, src, n * sizeof(float));
    return p;
}

/* one check: counted when it passes, a "FAIL what [ctx]" line when it does not */
static inline void result(int ok, const char *what, const char *ctx) {
    if (ok)
        n_pass++;
    else {
        n_fail++;
        printf("FAIL %s [%s]\n", what, ctx);
    }
}
static inline void check_guards(const char *what, const char *ctx, const float *p, size_t n) {
    if (!p) return;
    char buf[256];
    snprintf(buf, sizeof buf, "%s: wrote outside its buffer", ctx);
    result(guards_ok(p, n), what, buf);
}
/* |got - ref| <= abs_tol + rel_tol |ref| elementwise (equal values, infinities and NaN pairs
 * pass); one result for the array, naming its first offender */
static inline int check_close(const char *what, const char *ctx, const float *got, const float *ref, size_t n,
                              double abs_tol, double rel_tol) {
    for (size_t i = 0; i < n; i++) {
        if (got[i] == ref[i] || (isnan(got[i]) && isnan(ref[i]))) continue;
        double tol = abs_tol + rel_tol * fabs((double)ref[i]);
        if (!(fabs((double)got[i] - (double)ref[i]) <= tol)) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s: [%zu] got %.9g ref %.9g |d| %.3g > tol %.3g", ctx, i, got[i],
                     ref[i], fabs((double)got[i] - ref[i]), tol);
            result(0, what, buf);
            return 0;
        }
    }
    result(1, what, ctx);
    return 1;
}
static inline int same_bits(const char *what, const char *ctx, const float *s, const float *r, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&s[i], &r[i], sizeof(float)) != 0) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s: not bit-identical at [%zu]: got %.9g ref %.9g", ctx, i, s[i],
                     r[i]);
            result(0, what, buf);
            return 0;
        }
    result(1, what, ctx);
    return 1;
}
/* "N passed, M failed"; the exit status */
static inline int kt_finish(void) {
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
#endif
