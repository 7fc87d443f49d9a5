/* kernels.c: dispatch from the public kernel names to the fastest implementation this build
 * has (the SIMD128 kernels when built with VT_HAVE_SIMD_KERNELS for a target simd128.h maps:
 * wasm SIMD128 or x86-64 SSE2; the scalar references and the portable matmul forward otherwise;
 * attention is composed from the matmuls in every build), or to the reference when a test asks
 * for it. */
#include "kernels.h"
#include "kernels_simd.h" /* defines VT_SIMD128_AVAILABLE where the SIMD kernels compile */
#include "vitrine.h"      /* vt_adamw_update: AdamW's scalar reference */

static int use_ref = 0;
void vt_kernels_use_reference(int on) { use_ref = on; }

#if defined(VT_SIMD128_AVAILABLE) && defined(VT_HAVE_SIMD_KERNELS)
int vt_kernels_simd(void) { return 1; }
#define PICK(name) (use_ref ? vt_ref_##name : vt_simd_##name)
#else
int vt_kernels_simd(void) { return 0; }
#define PICK(name) vt_ref_##name
#endif

void vt_portable_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                                int M, int K, int N);
void vt_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                       int M, int K, int N) {
#if defined(VT_SIMD128_AVAILABLE) && defined(VT_HAVE_SIMD_KERNELS)
    PICK(matmul_forward)(out, inp, w, bias, M, K, N);
#else
    (use_ref ? vt_ref_matmul_forward : vt_portable_matmul_forward)(out, inp, w, bias, M, K, N);
#endif
}
void vt_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int M, int K, int N) {
    PICK(matmul_backward)(dinp, dw, dbias, dout, inp, w, M, K, N);
}
void vt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int M, int D, float eps) {
    PICK(layernorm_forward)(out, mean, rstd, inp, w, b, M, D, eps);
}
void vt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int M, int D) {
    PICK(layernorm_backward)(dinp, dw, db, dout, inp, w, mean, rstd, M, D);
}
void vt_gelu_forward(float *out, const float *inp, size_t n) { PICK(gelu_forward)(out, inp, n); }
void vt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    PICK(gelu_backward)(dinp, inp, dout, n);
}
void vt_softmax_row(float *y, const float *x, int n) { PICK(softmax_row)(y, x, n); }
void vt_adamw_step(float *p, const float *g, float *m, float *v, size_t n, long t, float lr,
                   float b1, float b2, float eps, float wd) {
#if defined(VT_SIMD128_AVAILABLE) && defined(VT_HAVE_SIMD_KERNELS)
    (use_ref ? vt_adamw_update : vt_simd_adamw_update)(p, g, m, v, n, t, lr, b1, b2, eps, wd);
#else
    vt_adamw_update(p, g, m, v, n, t, lr, b1, b2, eps, wd);
#endif
}
/* attention: composed from the matmuls above in every build (kernels_attn.c) */
void vt_attention_forward(float *out, float *att, float *scratch, const float *q, const float *k,
                          int qk_rs, const float *v, int v_rs, const uint8_t *causal_mask, int B,
                          int T, int H, int hd, float scale) {
    if (use_ref) vt_ref_attention_forward(out, att, q, k, qk_rs, v, v_rs, causal_mask, B, T, H, hd, scale);
    else vt_gemm_attention_forward(out, att, scratch, q, k, qk_rs, v, v_rs, causal_mask, B, T, H, hd, scale);
}
void vt_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *att, const float *q, const float *k, int qk_rs,
                           const float *v, int v_rs, int B, int T, int H, int hd, float scale) {
    (use_ref ? vt_ref_attention_backward : vt_gemm_attention_backward)(
        dq, dk, dv, scratch, dout, att, q, k, qk_rs, v, v_rs, B, T, H, hd, scale);
}
