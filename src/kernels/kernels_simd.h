/* kernels_simd.h: SIMD128 versions of the kernels in kernels.h (vt_simd_*), for WebAssembly
 * SIMD128 and x86-64 SSE2 alike (simd128.h maps the one source to either). Same signatures,
 * conventions and results (within the tolerances of tests/test_kernels_simd.c) as the scalar
 * references vt_ref_*. Declared only where simd128.h defines VT_SIMD128_AVAILABLE; kernels.c
 * routes to them when the build also defines VT_HAVE_SIMD_KERNELS. */
#ifndef VT_KERNELS_SIMD_H
#define VT_KERNELS_SIMD_H
#include "simd128.h"
#if defined(VT_SIMD128_AVAILABLE)
#include <stddef.h>
#include <stdint.h>

void vt_simd_gemm(float *c, int ldc, const float *a, int ars, int acs, const float *b, int brs, int bcs,
                  int I, int J, int L, int accumulate, const float *bias);
/* the threads' split of a vt_simd_gemm into `parts`: 1 = by columns of C, 0 = by rows */
int vt_simd_gemm_split(int I, int J, int L, int parts);
void vt_simd_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int M, int K,
                            int N);
void vt_simd_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                             const float *w, int M, int K, int N);
/* the pieces the threads split (kernels.c): dw/dbias rows [n0, n1) of a matmul backward; a
 * layernorm backward's dinp rows and its dw/db columns [d0, d1) */
void vt_simd_matmul_backward_dw(float *dw, float *dbias, const float *dout, const float *inp, int M, int K,
                                int N, int n0, int n1);
void vt_simd_layernorm_backward_dinp(float *dinp, const float *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int M, int D);
void vt_simd_layernorm_backward_params(float *dw, float *db, const float *dout, const float *inp,
                                       const float *mean, const float *rstd, int M, int D, int d0, int d1);
void vt_simd_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                               const float *b, int M, int D, float eps);
void vt_simd_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                const float *w, const float *mean, const float *rstd, int M, int D);
void vt_simd_gelu_forward(float *out, const float *inp, size_t n);
void vt_simd_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void vt_simd_quick_gelu_forward(float *out, const float *inp, size_t n);
void vt_simd_quick_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void vt_simd_gelu_tanh_forward(float *out, const float *inp, size_t n);
void vt_simd_gelu_tanh_backward(float *dinp, const float *inp, const float *dout, size_t n);
void vt_simd_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int M, int D,
                             float eps);
void vt_simd_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                              const float *rstd, int M, int D);
/* the pieces the threads split: dinp rows; dw columns [d0, d1) */
void vt_simd_rmsnorm_backward_dinp(float *dinp, const float *dout, const float *inp, const float *w,
                                   const float *rstd, int M, int D);
void vt_simd_rmsnorm_backward_dw(float *dw, const float *dout, const float *inp, const float *rstd, int M,
                                 int D, int d0, int d1);
void vt_simd_softmax_row(float *y, const float *x, int n);
void vt_simd_softmax_backward_row(float *d, const float *p, int n, float scale);
/* 0: MADD is a mul then an add; 1: fused (one rounding); 2: a fused build on a host whose
 * relaxed_madd does not fuse (see simd128.h) */
int vt_simd_madd_fused(void);

/* AdamW step over one flat parameter range; bit-identical to vt_adamw_update (kernels_ref.c):
 * same operation order, and f32x4 sqrt/div are correctly rounded like their scalar forms. Returns
 * 1 when a new value is not finite, as the reference does. */
int vt_simd_adamw_update(float *p, const float *g, float *m, float *v, size_t n, long t, float lr, float b1,
                         float b2, float eps, float wd);

/* The vectorised special functions behind gelu/softmax, over arrays (tests measure their ulp
 * error against libm with these; the kernels inline the f32x4 forms). */
void vt_simd_erf(float *out, const float *x, size_t n);
void vt_simd_exp(float *out, const float *x, size_t n);
void vt_simd_tanh(float *out, const float *x, size_t n); /* gelu_tanh's tanh (absolute error) */

#endif /* VT_SIMD128_AVAILABLE */
#endif
