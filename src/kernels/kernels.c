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

void vt_portable_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                                int M, int K, int N);

#if defined(VT_SIMD128_AVAILABLE) && defined(VT_HAVE_SIMD_KERNELS)
/* ---- threads (threads.h): each split below leaves every element's arithmetic as it is in one
 * piece: matmul forward and the dinp products over rows, dW / dbias over the rows of dW (never
 * over the summed m), layernorm dw / db over columns, element-wise GELU over elements. Split
 * points are multiples of 4, so the same elements take the vector and the scalar-tail paths. */
typedef struct {
    float *out, *dinp, *dw, *db, *mean_out, *rstd_out;
    const float *inp, *w, *bias, *dout, *mean, *rstd;
    int M, K, N;
    size_t len; /* element-wise kernels */
    float eps;
} kjob;

static void mm_fwd_rows(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    vt_simd_matmul_forward(j->out + (size_t)lo * j->N, j->inp + (size_t)lo * j->K, j->w, j->bias,
                           hi - lo, j->K, j->N);
}
static void mm_bwd_dinp_rows(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    vt_simd_matmul_backward(j->dinp + (size_t)lo * j->K, NULL, NULL, j->dout + (size_t)lo * j->N,
                            NULL, j->w, hi - lo, j->K, j->N);
}
static void mm_bwd_dw_rows(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    vt_simd_matmul_backward_dw(j->dw, j->db, j->dout, j->inp, j->M, j->K, j->N, lo, hi);
}
static void ln_fwd_rows(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t o = (size_t)lo * j->K;
    vt_simd_layernorm_forward(j->out + o, j->mean_out ? j->mean_out + lo : NULL,
                              j->rstd_out ? j->rstd_out + lo : NULL, j->inp + o, j->w, j->bias,
                              hi - lo, j->K, j->eps);
}
static void ln_bwd_dinp_rows(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t o = (size_t)lo * j->K;
    vt_simd_layernorm_backward_dinp(j->dinp + o, j->dout + o, j->inp + o, j->w, j->mean + lo,
                                    j->rstd + lo, hi - lo, j->K);
}
static void ln_bwd_param_cols(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    vt_simd_layernorm_backward_params(j->dw, j->db, j->dout, j->inp, j->mean, j->rstd, j->M, j->K,
                                      lo, hi);
}
/* GELU over VT_EW_UNIT-element units (n may exceed an int) */
#define VT_EW_UNIT 1024
static void gelu_fwd_units(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t a = (size_t)lo * VT_EW_UNIT, b = (size_t)hi * VT_EW_UNIT < j->len ? (size_t)hi * VT_EW_UNIT : j->len;
    vt_simd_gelu_forward(j->out + a, j->inp + a, b - a);
}
static void gelu_bwd_units(void *c, int lo, int hi, int tid) {
    const kjob *j = c;
    size_t a = (size_t)lo * VT_EW_UNIT, b = (size_t)hi * VT_EW_UNIT < j->len ? (size_t)hi * VT_EW_UNIT : j->len;
    vt_simd_gelu_backward(j->dinp + a, j->inp + a, j->dout + a, b - a);
}

void vt_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                       int M, int K, int N) {
    if (use_ref) { vt_ref_matmul_forward(out, inp, w, bias, M, K, N); return; }
    kjob j = {.out = out, .inp = inp, .w = w, .bias = bias, .M = M, .K = K, .N = N};
    vt_parallel_for(M, 4, 2.0 * M * K * N, mm_fwd_rows, &j);
}
void vt_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int M, int K, int N) {
    if (use_ref) { vt_ref_matmul_backward(dinp, dw, dbias, dout, inp, w, M, K, N); return; }
    if (M <= 0 || N <= 0) return;
    kjob j = {.dinp = dinp, .dw = dw, .db = dbias, .dout = dout, .inp = inp, .w = w, .M = M, .K = K, .N = N};
    if (dinp && K > 0) vt_parallel_for(M, 4, 2.0 * M * K * N, mm_bwd_dinp_rows, &j);
    if (dw || dbias) vt_parallel_for(N, 4, (dw ? 2.0 * K : 1.0) * M * N, mm_bwd_dw_rows, &j);
}
void vt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int M, int D, float eps) {
    if (use_ref) { vt_ref_layernorm_forward(out, mean, rstd, inp, w, b, M, D, eps); return; }
    kjob j = {.out = out, .mean_out = mean, .rstd_out = rstd, .inp = inp, .w = w, .bias = b, .M = M, .K = D, .eps = eps};
    vt_parallel_for(M, 1, 8.0 * M * D, ln_fwd_rows, &j);
}
void vt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int M, int D) {
    if (use_ref) { vt_ref_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, M, D); return; }
    kjob j = {.dinp = dinp, .dw = dw, .db = db, .dout = dout, .inp = inp, .w = w, .mean = mean, .rstd = rstd, .M = M, .K = D};
    if (dinp) vt_parallel_for(M, 1, 12.0 * M * D, ln_bwd_dinp_rows, &j);
    if (dw || db) vt_parallel_for(D, 4, 6.0 * M * D, ln_bwd_param_cols, &j);
}
void vt_gelu_forward(float *out, const float *inp, size_t n) {
    if (use_ref) { vt_ref_gelu_forward(out, inp, n); return; }
    kjob j = {.out = out, .inp = inp, .len = n};
    vt_parallel_for((int)((n + VT_EW_UNIT - 1) / VT_EW_UNIT), 1, 30.0 * (double)n, gelu_fwd_units, &j);
}
void vt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    if (use_ref) { vt_ref_gelu_backward(dinp, inp, dout, n); return; }
    kjob j = {.dinp = dinp, .inp = inp, .dout = dout, .len = n};
    vt_parallel_for((int)((n + VT_EW_UNIT - 1) / VT_EW_UNIT), 1, 40.0 * (double)n, gelu_bwd_units, &j);
}
#else /* no SIMD kernels: the references (and the portable matmul forward), one thread */
void vt_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                       int M, int K, int N) {
    (use_ref ? vt_ref_matmul_forward : vt_portable_matmul_forward)(out, inp, w, bias, M, K, N);
}
void vt_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int M, int K, int N) {
    vt_ref_matmul_backward(dinp, dw, dbias, dout, inp, w, M, K, N);
}
void vt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int M, int D, float eps) {
    vt_ref_layernorm_forward(out, mean, rstd, inp, w, b, M, D, eps);
}
void vt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int M, int D) {
    vt_ref_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, M, D);
}
void vt_gelu_forward(float *out, const float *inp, size_t n) { vt_ref_gelu_forward(out, inp, n); }
void vt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    vt_ref_gelu_backward(dinp, inp, dout, n);
}
#endif
void vt_softmax_row(float *y, const float *x, int n) { PICK(softmax_row)(y, x, n); }
int vt_adamw_step(float *p, const float *g, float *m, float *v, size_t n, long t, float lr,
                  float b1, float b2, float eps, float wd) {
#if defined(VT_SIMD128_AVAILABLE) && defined(VT_HAVE_SIMD_KERNELS)
    return (use_ref ? vt_adamw_update : vt_simd_adamw_update)(p, g, m, v, n, t, lr, b1, b2, eps, wd);
#else
    return vt_adamw_update(p, g, m, v, n, t, lr, b1, b2, eps, wd);
#endif
}
