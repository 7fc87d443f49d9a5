/* kernel_bench.c: the multiply+add peak one core reaches, and vitrine's matmul / attention
 * kernels on the shapes of a ViT, as GFLOP/s and % of that peak. One source, three builds:
 *   native (build/kernel_bench, the library's own flags: -O3, no -march, so SSE2 on x86-64),
 *   wasm SIMD128 and wasm scalar (build/wasm/kernel_bench-{simd,scalar}.wasm, WASI commands run
 *   by bench/wasi_run.mjs; built by bench/bench.cmake).
 * The native peak also reports the same portable loop compiled with -mavx2 -mfma (peak_avx2.c),
 * labelled as NOT what vitrine's native build uses.
 * A benchmark reports; it never fails on a time. Timings: warm-up calls (V8 tiers wasm code up
 * only on a later call) until >= 2 calls and >= 0.25 s, then the median of >= 3 timed calls.
 *   kernel_bench [--widths 192,384,768] [--batch B] [--quick] [--json]     (JSON to stdout) */
#include "bench_util.h"
#include "kernels/kernels.h"
#include "threads.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static double min_time = 0.25; /* seconds of warm-up, and of timed calls beyond the first 3 */
typedef void (*bench_fn)(void *);
static double last_best; /* the fastest call of the last time_median() */
static double time_median(bench_fn f, void *arg) {
    double t0 = now_s();
    for (int i = 0; i < 2 || now_s() - t0 < min_time; i++) f(arg);
    double t[32];
    int n = 0;
    t0 = now_s();
    while (n < 3 || (n < 32 && now_s() - t0 < min_time)) {
        double s = now_s();
        f(arg);
        t[n++] = now_s() - s;
    }
    qsort(t, (size_t)n, sizeof(double), cmp_d);
    last_best = t[0];
    return t[n / 2];
}

/* ---- the peak ------------------------------------------------------------------------------- */

static volatile float peak_in[4] = {0.999999f, 1e-7f, 0.5f, 0.25f};
static volatile float peak_sink;

#define PEAK_CHAINS 12
#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
/* SIMD128: 12 independent f32x4 chains acc = acc * m + c (registers only), and an L1-streaming
 * variant (8 chains acc += b * c with b loaded, the inner loop of a GEMM without the GEMM). The
 * relaxed build does each multiply-add as one f32x4.relaxed_madd (an FMA where the CPU has one),
 * which is the peak its kernels are measured against. */
#if defined(__wasm_relaxed_simd__)
#define PK_MADD(acc, a, b) wasm_f32x4_relaxed_madd((a), (b), (acc))
#else
#define PK_MADD(acc, a, b) wasm_f32x4_add((acc), wasm_f32x4_mul((a), (b)))
#endif
__attribute__((noinline)) static double peak_chains(long iters) {
    v128_t m = wasm_f32x4_splat(peak_in[0]), c = wasm_f32x4_splat(peak_in[1]);
    v128_t a[PEAK_CHAINS];
    for (int i = 0; i < PEAK_CHAINS; i++) a[i] = wasm_f32x4_splat(peak_in[3] + (float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) a[i] = PK_MADD(c, a[i], m);
    v128_t s = a[0];
    for (int i = 1; i < PEAK_CHAINS; i++) s = wasm_f32x4_add(s, a[i]);
    peak_sink = wasm_f32x4_extract_lane(s, 0);
    return (double)iters * PEAK_CHAINS * 8;
}
static float peak_buf[1024];
__attribute__((noinline)) static double peak_stream(long reps) {
    v128_t c0 = wasm_f32x4_splat(peak_in[1]), c1 = wasm_f32x4_splat(peak_in[2]);
    v128_t a[8];
    for (int i = 0; i < 8; i++) a[i] = wasm_f32x4_splat(peak_in[3] + (float)i);
    for (long r = 0; r < reps; r++)
        for (const float *p = peak_buf; p < peak_buf + 1024; p += 16) {
            v128_t b0 = wasm_v128_load(p), b1 = wasm_v128_load(p + 4);
            v128_t b2 = wasm_v128_load(p + 8), b3 = wasm_v128_load(p + 12);
            a[0] = PK_MADD(a[0], b0, c0);
            a[1] = PK_MADD(a[1], b0, c1);
            a[2] = PK_MADD(a[2], b1, c0);
            a[3] = PK_MADD(a[3], b1, c1);
            a[4] = PK_MADD(a[4], b2, c0);
            a[5] = PK_MADD(a[5], b2, c1);
            a[6] = PK_MADD(a[6], b3, c0);
            a[7] = PK_MADD(a[7], b3, c1);
        }
    v128_t s = a[0];
    for (int i = 1; i < 8; i++) s = wasm_f32x4_add(s, a[i]);
    peak_sink = wasm_f32x4_extract_lane(s, 0);
    return (double)reps * 64 * 8 * 8;
}
#if defined(__wasm_relaxed_simd__)
#define PEAK_NAME "wasm relaxed SIMD f32x4.relaxed_madd, 12 independent chains"
#else
#define PEAK_NAME "wasm SIMD128 f32x4 mul+add, 12 independent chains"
#endif
#else
/* C without intrinsics (GNU C vectors, peak_loop.h): the compiler uses what the build's flags
 * allow (native x86-64 default: SSE, 4 lanes; wasm without -msimd128: scalar f32). */
#define PEAK_FN peak_portable
#define PEAK_VEC peak_vec
#if defined(__wasm__)
#define PEAK_LANES 1 /* 12 scalar chains: 48 would not fit the registers V8 has */
#else
#define PEAK_LANES 4
#endif
#include "peak_loop.h"
#undef PEAK_FN
#undef PEAK_LANES
static double peak_chains(long iters) { return peak_portable(iters, peak_in, &peak_sink); }
#if defined(__wasm__)
#define PEAK_NAME "wasm scalar f32 mul+add, 12 chains (C, no -msimd128)"
#else
#define PEAK_NAME "native C mul+add, 12 chains x 4 lanes (vitrine's native flags: -O3, SSE)"
#endif
#endif
#if defined(VT_BENCH_AVX2)
double peak_avx2(long iters, const volatile float *in, volatile float *sink);
#endif

static long peak_iters;
static double peak_flops;
static void run_chains(void *p) { peak_flops = peak_chains(peak_iters); }
#if defined(__wasm_simd128__)
static void run_stream(void *p) { peak_flops = peak_stream(peak_iters); }
#endif
#if defined(VT_BENCH_AVX2)
static void run_avx2(void *p) { peak_flops = peak_avx2(peak_iters, peak_in, &peak_sink); }
#endif
/* The peak is the best of >= 5 timed calls (after warm-up), not the median: other processes
 * only ever slow a call down. */
static double gflops_of(bench_fn f, long iters) {
    peak_iters = iters;
    double t0 = now_s(), best = 1e30;
    for (int i = 0; i < 2 || now_s() - t0 < min_time; i++) f(NULL);
    for (int i = 0; i < 5; i++) {
        double s = now_s();
        f(NULL);
        s = now_s() - s;
        best = s < best ? s : best;
    }
    return peak_flops / best / 1e9;
}

/* the build's peak once more (register chains, and the L1-streaming loop where there is one) */
static double measure_peak(void) {
    double p = gflops_of(run_chains, 4000000);
#if defined(__wasm_simd128__)
    double q = gflops_of(run_stream, 40000);
    if (q > p) p = q;
#endif
    return p;
}

/* ---- matmul and attention -------------------------------------------------------------------- */

typedef struct {
    int M, K, N;
    float *out, *inp, *w, *bias, *dout, *dinp, *dw, *dbias;
    /* attention */
    int B, T, H, hd;
    float *q, *att, *scratch, *dq;
} args;

static void fill(float *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
}
static void run_fwd(void *p) {
    args *a = p;
    vt_matmul_forward(a->out, a->inp, a->w, a->bias, a->M, a->K, a->N);
}
static void run_bwd(void *p) {
    args *a = p;
    vt_matmul_backward(a->dinp, a->dw, a->dbias, a->dout, a->inp, a->w, a->M, a->K, a->N);
}
/* QK^T and PV of every head, as plain matmuls (q rows [T,hd] . k rows [T,hd]; P [T,T] . V^T
 * stored as [hd,T]). */
static void run_qk(void *p) {
    args *a = p;
    for (int h = 0; h < a->B * a->H; h++)
        vt_matmul_forward(a->out + (size_t)h * a->T * a->T, a->inp + (size_t)h * a->T * a->hd,
                          a->w + (size_t)h * a->T * a->hd, NULL, a->T, a->hd, a->T);
}
static void run_pv(void *p) {
    args *a = p;
    for (int h = 0; h < a->B * a->H; h++)
        vt_matmul_forward(a->dout + (size_t)h * a->T * a->hd, a->out + (size_t)h * a->T * a->T,
                          a->w + (size_t)h * a->T * a->hd, NULL, a->T, a->T, a->hd);
}
static void run_att_fwd(void *p) {
    args *a = p;
    int D = a->H * a->hd;
    vt_attention_forward(a->out, a->att, a->scratch, a->q, a->q + D, 3 * D, a->q + 2 * D, 3 * D, NULL, a->B,
                         a->T, a->H, a->hd, vt_threads_max(), 0.125f);
}
static void run_att_bwd(void *p) {
    args *a = p;
    int D = a->H * a->hd;
    vt_attention_backward(a->dq, a->dq + D, a->dq + 2 * D, a->scratch, a->dout, a->att, a->q,
                          a->q + D, 3 * D, a->q + 2 * D, 3 * D, a->B, a->T, a->H, a->hd, vt_threads_max(), 0.125f);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) { fprintf(stderr, "kernel_bench: out of memory (%zu bytes)\n", n); exit(1); }
    return p;
}

static int first_row = 1;
/* Each row also gives the fastest call (best_gflops) and re-measures the peak afterwards: on a shared
 * machine other processes only ever slow a call down, so "best GEMM / best peak seen over the whole
 * run" (peak_max_gflops at the end) is the % of peak that interference distorts least. */
static double peak_max;
static double measure_peak(void);
static void row(const char *op, int D, int M, int K, int N, double flop_f, double tf, double tfb,
                double flop_b, double tb, double tbb, double peak) {
    printf("%s    {\"op\": \"%s\", \"width\": %d, \"M\": %d, \"K\": %d, \"N\": %d, "
           "\"fwd_gflops\": %.3f, \"fwd_pct_peak\": %.2f, \"fwd_ms\": %.4f",
           first_row ? "" : ",\n", op, D, M, K, N, flop_f / tf / 1e9, 100 * flop_f / tf / 1e9 / peak,
           tf * 1e3);
    if (tb > 0)
        printf(", \"bwd_gflops\": %.3f, \"bwd_pct_peak\": %.2f, \"bwd_ms\": %.4f", flop_b / tb / 1e9,
               100 * flop_b / tb / 1e9 / peak, tb * 1e3);
    printf(", \"fwd_best_gflops\": %.3f", flop_f / tfb / 1e9);
    if (tb > 0) printf(", \"bwd_best_gflops\": %.3f", flop_b / tbb / 1e9);
    double p = measure_peak();
    if (p > peak_max) peak_max = p;
    printf("}");
    first_row = 0;
    fflush(stdout);
}

int main(int argc, char **argv) {
    int widths[8] = {192, 384, 768}, nw = 3, batch = 4, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--widths") && i + 1 < argc) {
            nw = 0;
            for (char *s = argv[++i]; *s && nw < 8; s++) {
                widths[nw++] = (int)strtol(s, &s, 10);
                if (!*s) break;
            }
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--json")) {}
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (quick) min_time = 0.08;

    /* the peak */
    double pc = gflops_of(run_chains, 4000000), ps = 0, pa = 0;
    peak_max = pc;
#if defined(__wasm_simd128__)
    for (int i = 0; i < 1024; i++) peak_buf[i] = (float)(i % 7) * 0.1f;
    ps = gflops_of(run_stream, 40000);
#endif
#if defined(VT_BENCH_AVX2)
    pa = gflops_of(run_avx2, 4000000);
#endif
    double peak = pc > ps ? pc : ps;
    if (peak > peak_max) peak_max = peak;
    const char *build = BENCH_BUILD;
    printf("{\"build\": \"%s\", \"simd_kernels\": %d, \"peak\": {\"name\": \"%s\", \"gflops\": %.3f, "
           "\"chains_gflops\": %.3f", build, vt_kernels_simd(), PEAK_NAME, peak, pc);
    if (ps > 0) printf(", \"stream_gflops\": %.3f", ps);
    if (pa > 0) printf(", \"avx2_fma_gflops\": %.3f, \"avx2_fma_name\": \"the same portable loop built with -mavx2 -mfma (8 lanes, FMA): NOT vitrine's native build\"", pa);
    printf("},\n  \"tokens_per_image\": 197, \"batch\": %d,\n  \"rows\": [\n", batch);
    fflush(stdout);

    /* GEMM on the ViT shapes: M = batch * 197 tokens */
    const int T = 197, M = batch * T;
    for (int wi = 0; wi < nw; wi++) {
        int D = widths[wi];
        struct { const char *op; int K, N; } sh[] = {{"qkv", D, 3 * D}, {"proj", D, D}, {"fc1", D, 4 * D}, {"fc2", 4 * D, D}};
        for (int s = 0; s < 4; s++) {
            args a = {.M = M, .K = sh[s].K, .N = sh[s].N};
            size_t MK = (size_t)a.M * a.K, NK = (size_t)a.N * a.K, MN = (size_t)a.M * a.N;
            a.out = xmalloc(MN * 4), a.inp = xmalloc(MK * 4), a.w = xmalloc(NK * 4), a.bias = xmalloc(a.N * 4);
            a.dout = xmalloc(MN * 4), a.dinp = xmalloc(MK * 4), a.dw = xmalloc(NK * 4), a.dbias = xmalloc(a.N * 4);
            fill(a.inp, MK, 1), fill(a.w, NK, 2), fill(a.bias, a.N, 3), fill(a.dout, MN, 4);
            memset(a.dinp, 0, MK * 4), memset(a.dw, 0, NK * 4), memset(a.dbias, 0, a.N * 4);
            double flop = 2.0 * a.M * a.K * a.N;
            double tf = time_median(run_fwd, &a), tfb = last_best;
            double tb = time_median(run_bwd, &a), tbb = last_best;
            row(sh[s].op, D, a.M, a.K, a.N, flop, tf, tfb, 2 * flop, tb, tbb, peak);
            free(a.out), free(a.inp), free(a.w), free(a.bias), free(a.dout), free(a.dinp), free(a.dw), free(a.dbias);
        }
        /* attention, head_dim 64 (all three widths): QK^T and PV of every head as matmuls, and the
         * engine's attention kernel (QK^T, softmax, PV) forward and backward */
        args a = {.B = batch, .T = T, .hd = 64, .H = D / 64};
        size_t BHT2 = (size_t)a.B * a.H * T * T, BTD = (size_t)a.B * T * D;
        a.out = xmalloc(BHT2 * 4), a.inp = xmalloc(BTD * 4), a.w = xmalloc(BTD * 4), a.dout = xmalloc(BTD * 4);
        a.att = xmalloc(BHT2 * 4), a.q = xmalloc(3 * BTD * 4), a.dq = xmalloc(3 * BTD * 4), a.scratch = xmalloc(vt_attention_scratch_floats(T, a.hd, vt_threads_max()) * 4);
        fill(a.inp, BTD, 5), fill(a.w, BTD, 6), fill(a.q, 3 * BTD, 7), fill(a.dout, BTD, 8);
        fill(a.out, BHT2, 9);
        double f1 = 2.0 * a.B * a.H * T * T * a.hd; /* one of QK^T or PV */
        double tqk = time_median(run_qk, &a);
        row("attn QK^T (per head)", D, T, a.hd, T, f1, tqk, last_best, 0, 0, 0, peak);
        double tpv = time_median(run_pv, &a);
        row("attn PV (per head)", D, T, T, a.hd, f1, tpv, last_best, 0, 0, 0, peak);
        memset(a.dq, 0, 3 * BTD * 4);
        double taf = time_median(run_att_fwd, &a), tafb = last_best;
        double tab = time_median(run_att_bwd, &a), tabb = last_best;
        row("attention kernel", D, T, a.hd, T, 2 * f1, taf, tafb, 4 * f1, tab, tabb, peak);
        free(a.out), free(a.inp), free(a.w), free(a.dout), free(a.att), free(a.q), free(a.dq), free(a.scratch);
    }
    printf("\n  ],\n  \"peak_max_gflops\": %.3f\n}\n", peak_max);
    return 0;
}
