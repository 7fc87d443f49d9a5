/* kernel_bench.c: vitrine's matmul and attention kernels on the shapes of a ViT, as % of the
 * one-core multiply-add peak of the same build. One source, four builds (bench/bench.cmake):
 *   wasm relaxed SIMD and wasm SIMD128 (build/wasm/kernel_bench-{relaxed,simd}.wasm, WASI commands
 *   run by bench/wasi_run.mjs), native SSE2 (build/kernel_bench: the library's own flags, no
 *   -march) and native FMA (build/kernel_bench_fma: the relaxed build's twin, vitrine_fma).
 * A benchmark reports; it never fails on a time.
 *
 * The statistic (one for every row): each kernel call is paired with a peak call made just
 * before it, and the row gives the median over R rounds of (kernel GFLOP/s / peak GFLOP/s), with
 * the lowest and highest of those ratios, both timed by the thread's CPU clock. Both calls of a
 * pair see the same machine, so other processes distort the ratio far less than two separate
 * timings, and a call during which the OS ran something else on the core is not charged for it. Warm-up first: V8 runs a wasm
 * function in its baseline tier until it has been called a few times (toolchain.md), so every
 * kernel and the peak loop are called >= 3 times and >= 0.2 s before any timing.
 *
 * Rows, M = batch x 197 tokens (default batch 2): qkv, proj, fc1, fc2 of widths 192 / 384 / 768,
 * forward (vt_matmul_forward, 2MKN flops) and backward (vt_matmul_backward with dinp, dW and
 * dbias, 4MKN); attention (vt_attention_forward / _backward, head_dim 64, flops of its products:
 * 4 T^2 D forward, 8 T^2 D backward). Only the kernels' public names are used, so the same source
 * measures an older engine (bench/run.sh --before).
 *   kernel_bench [--widths 192,384,768] [--batch B] [--rounds R] [--quick]   (JSON to stdout)
 * Native only: kernel_bench --peak-threads N [--rounds R] instead measures how far N threads can
 * scale on this machine right now (below). */
#include "bench_util.h"
#include "kernels/kernels.h"
#include "threads.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double min_time = 0.2; /* seconds of warm-up per kernel */
typedef void (*bench_fn)(void *);

/* ---- the peak -------------------------------------------------------------------------------- */

#if defined(__wasm_simd128__)
#include "peak_wasm.h"
#else
/* C without intrinsics (GNU C vectors, peak_loop.h) built with this build's flags: SSE mul+add
 * (native SSE2), or with -mfma -ffp-contract=fast (peak_fma128.c: the native FMA build's 128-bit
 * FMA, the relaxed build's twin); and 256-bit AVX2 FMA (peak_avx2.c), what OpenBLAS can use. */
#if defined(VT_BENCH_FMA128)
double peak_fma128(long iters, const volatile float *in, volatile float *sink);
#define PEAK_NAME "native FMA3 on 4 lanes (vfmadd, 128-bit), 12 chains: the relaxed build's twin"
#else
#define PEAK_FN    peak_portable
#define PEAK_VEC   peak_vec
#define PEAK_LANES 4
#include "peak_loop.h"
#undef PEAK_FN
#undef PEAK_LANES
#define PEAK_NAME "native SSE mul+add on 4 lanes, 12 chains (vitrine's native flags)"
#endif
static volatile float peak_in4[4] = { 0.999999f, 1e-7f, 0.5f, 0.25f };
static volatile float peak_sink4;
static double peak_chains_into(long iters, volatile float *sink) {
#if defined(VT_BENCH_FMA128)
    return peak_fma128(iters, peak_in4, sink);
#else
    return peak_portable(iters, peak_in4, sink);
#endif
}
static double peak_chains(long iters) { return peak_chains_into(iters, &peak_sink4); }
#endif
#if defined(VT_BENCH_AVX2)
double peak_avx2(long iters, const volatile float *in, volatile float *sink);
#endif

static long peak_iters = 200000; /* ~2-4 ms a call */
static double peak_flops;
static void run_peak(void *p) {
    (void)p;
    peak_flops = peak_chains(peak_iters);
}
#if defined(VT_BENCH_AVX2)
static void run_avx2(void *p) {
    (void)p;
    peak_flops = peak_avx2(peak_iters, peak_in4, &peak_sink4);
}
#endif

static void warm(bench_fn f, void *arg) {
    double t0 = now_s();
    for (int i = 0; i < 3 || now_s() - t0 < min_time; i++) f(arg);
}
/* CPU seconds of one call of f (the thread's CPU time: on a shared machine, the time another
 * process held the core is not the kernel's) */
static double timed(bench_fn f, void *arg) {
    double t = now_cpu_s();
    f(arg);
    return now_cpu_s() - t;
}
static double peak_gflops_once(bench_fn f) {
    double t = timed(f, NULL);
    return peak_flops / t / 1e9;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

#if !defined(__wasm__)
#include <pthread.h>
/* --peak-threads N: the ceiling of a thread speedup on this machine at this moment. Rounds of the
 * peak loop on one thread, then on N threads at once (each its own loop, registers only: no
 * memory, no synchronisation inside), by wall time from the start to the last thread's end;
 * the ratio N-thread GFLOP/s / 1-thread GFLOP/s per round, median and range. On N idle cores it
 * is ~N; on a shared machine it says how much of N cores a compute-bound program got. */
#define PT_MAX 16
static long pt_iters = 3000000;             /* ~5 ms a loop */
static volatile float pt_sink[PT_MAX * 16]; /* one cache line per thread */
static void *pt_loop(void *p) {
    peak_chains_into(pt_iters, &pt_sink[16 * (int)(intptr_t)p]);
    return NULL;
}
static double pt_gflops(int n) {
    pthread_t th[PT_MAX];
    double t = now_s();
    for (int i = 1; i < n; i++)
        if (pthread_create(&th[i], NULL, pt_loop, (void *)(intptr_t)i)) return 0;
    pt_loop(0);
    for (int i = 1; i < n; i++) pthread_join(th[i], NULL);
    return n * (double)pt_iters * 12 * 4 * 2 / (now_s() - t) / 1e9;
}
static int peak_threads(int n, int rounds) {
    if (n < 1 || n > PT_MAX) {
        fprintf(stderr, "--peak-threads: 1..%d\n", PT_MAX);
        return 2;
    }
    double g1[256], gn[256], r[256];
    pt_gflops(1), pt_gflops(n);
    for (int i = 0; i < rounds; i++) g1[i] = pt_gflops(1), gn[i] = pt_gflops(n), r[i] = gn[i] / g1[i];
    double lo = r[0], hi = r[0];
    for (int i = 1; i < rounds; i++) lo = r[i] < lo ? r[i] : lo, hi = r[i] > hi ? r[i] : hi;
    printf("{\"build\": \"%s\", \"peak_threads\": %d, \"rounds\": %d, \"loop\": \"%s\", "
           "\"statistic\": \"per round: N threads' GFLOP/s (wall) / one thread's just before; median, min, "
           "max\", "
           "\"gflops_1\": %.3f, \"gflops_n\": %.3f, \"scaling\": %.3f, \"scaling_min\": %.3f, "
           "\"scaling_max\": %.3f}\n",
           BENCH_BUILD, n, rounds, PEAK_NAME, median(g1, rounds), median(gn, rounds), median(r, rounds), lo,
           hi);
    return 0;
}
#endif

/* ---- matmul and attention -------------------------------------------------------------------- */

typedef struct {
    int M, K, N, reps;
    float *out, *inp, *w, *bias, *dout, *dinp, *dw, *dbias;
    int B, T, H, hd; /* attention */
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
    for (int r = 0; r < a->reps; r++) vt_matmul_forward(a->out, a->inp, a->w, a->bias, a->M, a->K, a->N);
}
static void run_bwd(void *p) {
    args *a = p;
    for (int r = 0; r < a->reps; r++)
        vt_matmul_backward(a->dinp, a->dw, a->dbias, a->dout, a->inp, a->w, a->M, a->K, a->N);
}
/* The attention kernels take the plan's thread count since the step became a list of kernel calls
 * (kernel_list.h); an older engine (bench/run.sh --before) has the signatures without it. */
#if __has_include("kernels/kernel_list.h")
#define ATT_THREADS        , vt_threads_max()
#define ATT_SCRATCH(T, hd) vt_attention_scratch_floats((T), (hd), vt_threads_max())
#else
#define ATT_THREADS
#define ATT_SCRATCH(T, hd) vt_attention_scratch_floats((T), (hd))
#endif
static void run_att_fwd(void *p) {
    args *a = p;
    int D = a->H * a->hd;
    for (int r = 0; r < a->reps; r++)
        vt_attention_forward(a->out, a->att, a->scratch, a->q, a->q + D, 3 * D, a->q + 2 * D, 3 * D, NULL,
                             a->B, a->T, a->H, a->hd ATT_THREADS, 0.125f);
}
static void run_att_bwd(void *p) {
    args *a = p;
    int D = a->H * a->hd;
    for (int r = 0; r < a->reps; r++)
        vt_attention_backward(a->dq, a->dq + D, a->dq + 2 * D, a->scratch, a->dout, a->att, a->q, a->q + D,
                              3 * D, a->q + 2 * D, 3 * D, a->B, a->T, a->H, a->hd ATT_THREADS, 0.125f);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "kernel_bench: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static int rounds = 11, first_row = 1;
static double peak_seen[4096];
static int n_peak_seen;

/* One row: warm-up, then `rounds` pairs (peak call, kernel call); prints the row's JSON. A kernel
 * call shorter than ~2 ms is repeated (a->reps) so that the clock's resolution does not matter. */
static void row(const char *op, const char *dir, int D, int M, int K, int N, double flops, bench_fn f,
                args *a) {
    a->reps = 1;
    warm(f, a);
    double t1 = timed(f, a);
    a->reps = t1 < 2e-3 ? (int)(2e-3 / (t1 > 1e-6 ? t1 : 1e-6)) + 1 : 1;
    warm(run_peak, NULL);
    double ratio[256], gf[256];
    for (int r = 0; r < rounds; r++) {
        double p = peak_gflops_once(run_peak);
        double g = flops * a->reps / timed(f, a) / 1e9;
        if (n_peak_seen < 4096) peak_seen[n_peak_seen++] = p;
        ratio[r] = g / p, gf[r] = g;
    }
    double lo = ratio[0], hi = ratio[0];
    for (int r = 1; r < rounds; r++) lo = ratio[r] < lo ? ratio[r] : lo, hi = ratio[r] > hi ? ratio[r] : hi;
    printf("%s    {\"op\": \"%s\", \"dir\": \"%s\", \"width\": %d, \"M\": %d, \"K\": %d, \"N\": %d, "
           "\"gflops\": %.3f, \"pct_peak\": %.2f, \"pct_peak_min\": %.2f, \"pct_peak_max\": %.2f}",
           first_row ? "" : ",\n", op, dir, D, M, K, N, median(gf, rounds), 100 * median(ratio, rounds),
           100 * lo, 100 * hi);
    first_row = 0;
    fflush(stdout);
}

int main(int argc, char **argv) {
    int widths[8] = { 192, 384, 768 }, nw = 3, batch = 2, quick = 0, pthreads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--widths") && i + 1 < argc) {
            nw = 0;
            for (char *s = argv[++i]; *s && nw < 8; s++) {
                widths[nw++] = (int)strtol(s, &s, 10);
                if (!*s) break;
            }
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--peak-threads") && i + 1 < argc)
            pthreads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) {
        } else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (quick) min_time = 0.05, rounds = 3;
    if (rounds < 1) rounds = 1;
    if (rounds > 256) rounds = 256;
    if (batch < 1) batch = 1;
    if (pthreads) {
#if !defined(__wasm__)
        return peak_threads(pthreads, rounds);
#else
        fprintf(stderr, "--peak-threads: native builds only\n");
        return 2;
#endif
    }

    /* the peak alone first (its median and best of 15 calls), and the AVX2 loop beside (native) */
    warm(run_peak, NULL);
    double ps[15];
    for (int i = 0; i < 15; i++) ps[i] = peak_gflops_once(run_peak);
    double p_best = ps[0];
    for (int i = 1; i < 15; i++) p_best = ps[i] > p_best ? ps[i] : p_best;
    double p_med = median(ps, 15), pa = 0;
#if defined(VT_BENCH_AVX2)
    warm(run_avx2, NULL);
    for (int i = 0; i < 15; i++) {
        double g = peak_gflops_once(run_avx2);
        pa = g > pa ? g : pa;
    }
#endif
    printf("{\"build\": \"%s\", \"simd_kernels\": %d, \"madd_fused\": %d, \"rounds\": %d, "
           "\"statistic\": \"median over rounds of (kernel GFLOP/s / GFLOP/s of the peak call just before; "
           "both by the thread's CPU time), min and max\",\n"
           "  \"peak\": {\"name\": \"%s\", \"gflops_median\": %.3f, \"gflops_best\": %.3f}",
           BENCH_BUILD, vt_kernels_simd(), vt_kernels_madd_fused(), rounds, PEAK_NAME, p_med, p_best);
    if (pa > 0) printf(",\n  \"avx2_fma_gflops_best\": %.3f", pa);
    printf(",\n  \"tokens_per_image\": 197, \"batch\": %d,\n  \"rows\": [\n", batch);
    fflush(stdout);

    const int T = 197, M = batch * T;
    for (int wi = 0; wi < nw; wi++) {
        int D = widths[wi];
        struct {
            const char *op;
            int K, N;
        } sh[] = { { "qkv", D, 3 * D }, { "proj", D, D }, { "fc1", D, 4 * D }, { "fc2", 4 * D, D } };
        for (int s = 0; s < 4; s++) {
            args a = { .M = M, .K = sh[s].K, .N = sh[s].N };
            size_t MK = (size_t)a.M * a.K, NK = (size_t)a.N * a.K, MN = (size_t)a.M * a.N;
            a.out = xmalloc(MN * 4), a.inp = xmalloc(MK * 4), a.w = xmalloc(NK * 4),
            a.bias = xmalloc(a.N * 4);
            a.dout = xmalloc(MN * 4), a.dinp = xmalloc(MK * 4), a.dw = xmalloc(NK * 4),
            a.dbias = xmalloc(a.N * 4);
            fill(a.inp, MK, 1), fill(a.w, NK, 2), fill(a.bias, a.N, 3), fill(a.dout, MN, 4);
            memset(a.dinp, 0, MK * 4), memset(a.dw, 0, NK * 4), memset(a.dbias, 0, a.N * 4);
            double flop = 2.0 * a.M * a.K * a.N;
            row(sh[s].op, "fwd", D, a.M, a.K, a.N, flop, run_fwd, &a);
            row(sh[s].op, "bwd", D, a.M, a.K, a.N, 2 * flop, run_bwd, &a);
            free(a.out), free(a.inp), free(a.w), free(a.bias), free(a.dout), free(a.dinp), free(a.dw),
                free(a.dbias);
        }
        /* attention, head_dim 64, q/k/v strided in one fused qkv buffer as the engine keeps them */
        args a = { .B = batch, .T = T, .hd = 64, .H = D / 64 };
        size_t BHT2 = (size_t)a.B * a.H * T * T, BTD = (size_t)a.B * T * D;
        a.out = xmalloc(BTD * 4), a.dout = xmalloc(BTD * 4), a.att = xmalloc(BHT2 * 4);
        a.q = xmalloc(3 * BTD * 4), a.dq = xmalloc(3 * BTD * 4);
        a.scratch = xmalloc(ATT_SCRATCH(T, a.hd) * 4 + 16);
        fill(a.q, 3 * BTD, 7), fill(a.dout, BTD, 8);
        memset(a.dq, 0, 3 * BTD * 4);
        double f1 = 2.0 * a.B * a.H * (double)T * T * a.hd; /* one of QK^T or PV */
        row("attention", "fwd", D, T, a.hd, T, 2 * f1, run_att_fwd, &a);
        row("attention", "bwd", D, T, a.hd, T, 4 * f1, run_att_bwd, &a);
        free(a.out), free(a.dout), free(a.att), free(a.q), free(a.dq), free(a.scratch);
    }
    printf("\n  ],\n  \"peak_during_rows_median\": %.3f\n}\n",
           n_peak_seen ? median(peak_seen, n_peak_seen) : 0.0);
    return 0;
}
