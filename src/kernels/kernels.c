/* kernels.c: dispatch from the public kernel names to the fastest implementation this build
 * has (the SIMD128 kernels when built with VT_HAVE_SIMD_KERNELS for a target simd128.h maps:
 * wasm SIMD128 or x86-64 SSE2; the scalar references and the portable matmul forward otherwise),
 * or to the reference when a test asks for it. Attention, composed from the matmuls here, has its
 * dispatch in kernels_attn.c. */
#include "kernels.h"
#include "kernels_simd.h" /* defines VT_SIMD128_AVAILABLE where the SIMD kernels compile */
#include "vitrine.h"      /* vt_adamw_update: AdamW's scalar reference */
#include "../threads.h"

static int use_ref = 0;
void vt_kernels_use_reference(int on) { use_ref = on; }
int vt_kernels_reference(void) { return use_ref; }

#if defined(VT_SIMD128_AVAILABLE) && defined(VT_HAVE_SIMD_KERNELS)
int vt_kernels_simd(void) { return 1; }
int vt_kernels_madd_fused(void) { return vt_simd_madd_fused(); }
#define PICK(name) (use_ref ? vt_ref_##name : vt_simd_##name)
#else
int vt_kernels_simd(void) { return 0; }
int vt_kernels_madd_fused(void) { return 0; }
#define PICK(name) vt_ref_##name
#endif

void vt_portable_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int M, int K,
                                int N);

#if defined(VT_SIMD128_AVAILABLE) && defined(VT_HAVE_SIMD_KERNELS)
/* ---- threads (threads.h): each split below leaves every element's arithmetic as it is in one
 * piece: the products of matmul forward / backward over rows or columns of their output (never
 * over the summed dimension), dbias and layernorm dw / db over columns, element-wise GELU over
 * elements. Split points are multiples of 4, so the same elements take the vector and the
 * scalar-tail paths. */
typedef struct {
    float *out, *dinp, *dw, *db, *mean_out, *rstd_out;
    const float *inp, *w, *bias, *dout, *mean, *rstd;
    int M, K, N;
    size_t len; /* element-wise kernels */
    float eps;
} kjob;

/* One product C (+)= A B of a matmul, split into exactly one part per thread of the pool (a part
 * packs its own operands: more parts would pack more, vt_simd_gemm_split) along the rows or the
 * columns of C; with dbias (a backward's dW product) the parts also share dbias's columns. */
typedef struct {
    float *c;
    const float *a, *b, *bias;
    int ldc, ars, acs, brs, bcs, I, J, L, accumulate, along_l, parts;
    float *db; /* dbias[N] += column sums of dout[M, N] */
    const float *dout;
    int M, N;
} gemm_job;

/* [lo, hi) of n units split into `parts`: the p-th range, times `unit`, clipped to `len` */
static void part_range(int n_units, int unit, int len, int parts, int p, int *lo, int *hi) {
    int64_t u0 = (int64_t)n_units * p / parts, u1 = (int64_t)n_units * (p + 1) / parts;
    *lo = (int)(u0 * unit < len ? u0 * unit : len);
    *hi = (int)(u1 * unit < len ? u1 * unit : len);
}
static void gemm_parts(void *ctx, int lo, int hi, int tid) {
    const gemm_job *g = ctx;
    for (int p = lo; p < hi; p++) {
        int x0, x1;
        if (g->along_l) {
            part_range((g->L + 7) / 8, 8, g->L, g->parts, p, &x0, &x1);
            if (x1 > x0)
                vt_simd_gemm(g->c + x0, g->ldc, g->a, g->ars, g->acs, g->b + (size_t)x0 * g->bcs, g->brs,
                             g->bcs, g->I, g->J, x1 - x0, g->accumulate, g->bias ? g->bias + x0 : NULL);
        } else {
            part_range((g->I + 3) / 4, 4, g->I, g->parts, p, &x0, &x1);
            if (x1 > x0)
                vt_simd_gemm(g->c + (size_t)x0 * g->ldc, g->ldc, g->a + (size_t)x0 * g->ars, g->ars, g->acs,
                             g->b, g->brs, g->bcs, x1 - x0, g->J, g->L, g->accumulate, g->bias);
        }
        if (g->db) { /* dbias columns of this part (all of them in the dW product's own split) */
            part_range((g->N + 3) / 4, 4, g->N, g->parts, p, &x0, &x1);
            vt_simd_matmul_backward_dw(NULL, g->db, g->dout, NULL, g->M, 0, g->N, x0, x1);
        }
    }
}
static void gemm_threads(gemm_job *g) {
    g->parts = vt_threads_max();
    g->along_l = vt_simd_gemm_split(g->I, g->J, g->L, g->parts);
    vt_parallel_for(g->parts, 1, 2.0 * g->I * g->J * g->L + (g->db ? (double)g->M * g->N : 0), gemm_parts, g);
}
static void ln_fwd_rows(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t o = (size_t)lo * j->K;
    vt_simd_layernorm_forward(j->out + o, j->mean_out ? j->mean_out + lo : NULL,
                              j->rstd_out ? j->rstd_out + lo : NULL, j->inp + o, j->w, j->bias, hi - lo, j->K,
                              j->eps);
}
static void ln_bwd_dinp_rows(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t o = (size_t)lo * j->K;
    vt_simd_layernorm_backward_dinp(j->dinp + o, j->dout + o, j->inp + o, j->w, j->mean + lo, j->rstd + lo,
                                    hi - lo, j->K);
}
static void ln_bwd_param_cols(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    vt_simd_layernorm_backward_params(j->dw, j->db, j->dout, j->inp, j->mean, j->rstd, j->M, j->K, lo, hi);
}
/* GELU over VT_EW_UNIT-element units (n may exceed an int) */
#define VT_EW_UNIT 1024
static void gelu_fwd_units(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t a = (size_t)lo * VT_EW_UNIT,
           b = (size_t)hi * VT_EW_UNIT < j->len ? (size_t)hi * VT_EW_UNIT : j->len;
    vt_simd_gelu_forward(j->out + a, j->inp + a, b - a);
}
static void gelu_bwd_units(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t a = (size_t)lo * VT_EW_UNIT,
           b = (size_t)hi * VT_EW_UNIT < j->len ? (size_t)hi * VT_EW_UNIT : j->len;
    vt_simd_gelu_backward(j->dinp + a, j->inp + a, j->dout + a, b - a);
}

/* quick_gelu and tanh GELU: the same units as GELU */
static void qgelu_fwd_units(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t a = (size_t)lo * VT_EW_UNIT,
           b = (size_t)hi * VT_EW_UNIT < j->len ? (size_t)hi * VT_EW_UNIT : j->len;
    vt_simd_quick_gelu_forward(j->out + a, j->inp + a, b - a);
}
static void qgelu_bwd_units(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t a = (size_t)lo * VT_EW_UNIT,
           b = (size_t)hi * VT_EW_UNIT < j->len ? (size_t)hi * VT_EW_UNIT : j->len;
    vt_simd_quick_gelu_backward(j->dinp + a, j->inp + a, j->dout + a, b - a);
}
static void tgelu_fwd_units(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t a = (size_t)lo * VT_EW_UNIT,
           b = (size_t)hi * VT_EW_UNIT < j->len ? (size_t)hi * VT_EW_UNIT : j->len;
    vt_simd_gelu_tanh_forward(j->out + a, j->inp + a, b - a);
}
static void tgelu_bwd_units(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t a = (size_t)lo * VT_EW_UNIT,
           b = (size_t)hi * VT_EW_UNIT < j->len ? (size_t)hi * VT_EW_UNIT : j->len;
    vt_simd_gelu_tanh_backward(j->dinp + a, j->inp + a, j->dout + a, b - a);
}
/* RMSNorm: rows (forward, dinp) and dw columns, as layernorm */
static void rms_fwd_rows(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t o = (size_t)lo * j->K;
    vt_simd_rmsnorm_forward(j->out + o, j->rstd_out ? j->rstd_out + lo : NULL, j->inp + o, j->w, hi - lo,
                            j->K, j->eps);
}
static void rms_bwd_dinp_rows(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t o = (size_t)lo * j->K;
    vt_simd_rmsnorm_backward_dinp(j->dinp + o, j->dout + o, j->inp + o, j->w, j->rstd + lo, hi - lo, j->K);
}
static void rms_bwd_dw_cols(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    vt_simd_rmsnorm_backward_dw(j->dw, j->dout, j->inp, j->rstd, j->M, j->K, lo, hi);
}

void vt_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int M, int K, int N) {
    if (use_ref) {
        vt_ref_matmul_forward(out, inp, w, bias, M, K, N);
        return;
    }
    if (M <= 0 || N <= 0) return;
    /* out[M,N] = inp[M,K] (w^T: B(k,n) = w[n*K + k]) + bias */
    gemm_job g = { .c = out,
                   .ldc = N,
                   .a = inp,
                   .ars = K,
                   .acs = 1,
                   .b = w,
                   .brs = 1,
                   .bcs = K,
                   .I = M,
                   .J = K,
                   .L = N,
                   .accumulate = 0,
                   .bias = bias };
    gemm_threads(&g);
}
void vt_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int M, int K, int N) {
    if (use_ref) {
        vt_ref_matmul_backward(dinp, dw, dbias, dout, inp, w, M, K, N);
        return;
    }
    if (M <= 0 || N <= 0) return;
    if (dinp && K > 0) { /* dinp[M,K] += dout[M,N] w[N,K] */
        gemm_job g = { .c = dinp,
                       .ldc = K,
                       .a = dout,
                       .ars = N,
                       .acs = 1,
                       .b = w,
                       .brs = K,
                       .bcs = 1,
                       .I = M,
                       .J = N,
                       .L = K,
                       .accumulate = 1 };
        gemm_threads(&g);
    }
    if (dw || dbias) { /* dw[N,K] += dout^T (A(n,m) = dout[m*N + n]) inp[M,K]; dbias alongside */
        gemm_job g = { .c = dw,
                       .ldc = K,
                       .a = dout,
                       .ars = 1,
                       .acs = N,
                       .b = inp,
                       .brs = K,
                       .bcs = 1,
                       .I = dw && K > 0 ? N : 0,
                       .J = M,
                       .L = K,
                       .accumulate = 1,
                       .db = dbias,
                       .dout = dout,
                       .M = M,
                       .N = N };
        gemm_threads(&g);
    }
}
void vt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int M, int D, float eps) {
    if (use_ref) {
        vt_ref_layernorm_forward(out, mean, rstd, inp, w, b, M, D, eps);
        return;
    }
    kjob j = { .out = out,
               .mean_out = mean,
               .rstd_out = rstd,
               .inp = inp,
               .w = w,
               .bias = b,
               .M = M,
               .K = D,
               .eps = eps };
    vt_parallel_for(M, 1, 8.0 * M * D, ln_fwd_rows, &j);
}
void vt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int M, int D) {
    if (use_ref) {
        vt_ref_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, M, D);
        return;
    }
    kjob j = { .dinp = dinp,
               .dw = dw,
               .db = db,
               .dout = dout,
               .inp = inp,
               .w = w,
               .mean = mean,
               .rstd = rstd,
               .M = M,
               .K = D };
    if (dinp) vt_parallel_for(M, 1, 12.0 * M * D, ln_bwd_dinp_rows, &j);
    if (dw || db) vt_parallel_for(D, 4, 6.0 * M * D, ln_bwd_param_cols, &j);
}
void vt_gelu_forward(float *out, const float *inp, size_t n) {
    if (use_ref) {
        vt_ref_gelu_forward(out, inp, n);
        return;
    }
    kjob j = { .out = out, .inp = inp, .len = n };
    vt_parallel_for((int)((n + VT_EW_UNIT - 1) / VT_EW_UNIT), 1, 30.0 * (double)n, gelu_fwd_units, &j);
}
void vt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    if (use_ref) {
        vt_ref_gelu_backward(dinp, inp, dout, n);
        return;
    }
    kjob j = { .dinp = dinp, .inp = inp, .dout = dout, .len = n };
    vt_parallel_for((int)((n + VT_EW_UNIT - 1) / VT_EW_UNIT), 1, 40.0 * (double)n, gelu_bwd_units, &j);
}
void vt_quick_gelu_forward(float *out, const float *inp, size_t n) {
    if (use_ref) {
        vt_ref_quick_gelu_forward(out, inp, n);
        return;
    }
    kjob j = { .out = out, .inp = inp, .len = n };
    vt_parallel_for((int)((n + VT_EW_UNIT - 1) / VT_EW_UNIT), 1, 20.0 * (double)n, qgelu_fwd_units, &j);
}
void vt_quick_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    if (use_ref) {
        vt_ref_quick_gelu_backward(dinp, inp, dout, n);
        return;
    }
    kjob j = { .dinp = dinp, .inp = inp, .dout = dout, .len = n };
    vt_parallel_for((int)((n + VT_EW_UNIT - 1) / VT_EW_UNIT), 1, 25.0 * (double)n, qgelu_bwd_units, &j);
}
void vt_gelu_tanh_forward(float *out, const float *inp, size_t n) {
    if (use_ref) {
        vt_ref_gelu_tanh_forward(out, inp, n);
        return;
    }
    kjob j = { .out = out, .inp = inp, .len = n };
    vt_parallel_for((int)((n + VT_EW_UNIT - 1) / VT_EW_UNIT), 1, 30.0 * (double)n, tgelu_fwd_units, &j);
}
void vt_gelu_tanh_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    if (use_ref) {
        vt_ref_gelu_tanh_backward(dinp, inp, dout, n);
        return;
    }
    kjob j = { .dinp = dinp, .inp = inp, .dout = dout, .len = n };
    vt_parallel_for((int)((n + VT_EW_UNIT - 1) / VT_EW_UNIT), 1, 40.0 * (double)n, tgelu_bwd_units, &j);
}
void vt_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int M, int D, float eps) {
    if (use_ref) {
        vt_ref_rmsnorm_forward(out, rstd, inp, w, M, D, eps);
        return;
    }
    kjob j = { .out = out, .rstd_out = rstd, .inp = inp, .w = w, .M = M, .K = D, .eps = eps };
    vt_parallel_for(M, 1, 6.0 * M * D, rms_fwd_rows, &j);
}
void vt_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int M, int D) {
    if (use_ref) {
        vt_ref_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, M, D);
        return;
    }
    kjob j = { .dinp = dinp, .dw = dw, .dout = dout, .inp = inp, .w = w, .rstd = rstd, .M = M, .K = D };
    if (dinp) vt_parallel_for(M, 1, 10.0 * M * D, rms_bwd_dinp_rows, &j);
    if (dw) vt_parallel_for(D, 4, 2.0 * M * D, rms_bwd_dw_cols, &j);
}
#else /* no SIMD kernels: the references (and the portable matmul forward), one thread */
void vt_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int M, int K, int N) {
    (use_ref ? vt_ref_matmul_forward : vt_portable_matmul_forward)(out, inp, w, bias, M, K, N);
}
void vt_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int M, int K, int N) {
    vt_ref_matmul_backward(dinp, dw, dbias, dout, inp, w, M, K, N);
}
void vt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int M, int D, float eps) {
    vt_ref_layernorm_forward(out, mean, rstd, inp, w, b, M, D, eps);
}
void vt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int M, int D) {
    vt_ref_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, M, D);
}
void vt_quick_gelu_forward(float *out, const float *inp, size_t n) { vt_ref_quick_gelu_forward(out, inp, n); }
void vt_quick_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    vt_ref_quick_gelu_backward(dinp, inp, dout, n);
}
void vt_gelu_tanh_forward(float *out, const float *inp, size_t n) { vt_ref_gelu_tanh_forward(out, inp, n); }
void vt_gelu_tanh_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    vt_ref_gelu_tanh_backward(dinp, inp, dout, n);
}
void vt_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int M, int D, float eps) {
    vt_ref_rmsnorm_forward(out, rstd, inp, w, M, D, eps);
}
void vt_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int M, int D) {
    vt_ref_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, M, D);
}
void vt_gelu_forward(float *out, const float *inp, size_t n) { vt_ref_gelu_forward(out, inp, n); }
void vt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    vt_ref_gelu_backward(dinp, inp, dout, n);
}
#endif
void vt_gemm(float *c, int ldc, const float *a, int ars, int acs, const float *b, int brs, int bcs, int I,
             int J, int L, int accumulate, const float *bias) {
    PICK(gemm)(c, ldc, a, ars, acs, b, brs, bcs, I, J, L, accumulate, bias);
}
void vt_softmax_row(float *y, const float *x, int n) { PICK(softmax_row)(y, x, n); }
void vt_softmax_backward_row(float *d, const float *p, int n, float scale) {
    PICK(softmax_backward_row)(d, p, n, scale);
}
int vt_adamw_step(float *p, const float *g, float *m, float *v, size_t n, long t, float lr, float b1,
                  float b2, float eps, float wd) {
#if defined(VT_SIMD128_AVAILABLE) && defined(VT_HAVE_SIMD_KERNELS)
    return (use_ref ? vt_adamw_update : vt_simd_adamw_update)(p, g, m, v, n, t, lr, b1, b2, eps, wd);
#else
    return vt_adamw_update(p, g, m, v, n, t, lr, b1, b2, eps, wd);
#endif
}
