/* kernels.h: the numeric kernels of vitrine, forward/backward pairs (llm.c style).
 * Conventions: outputs first, then inputs, then weights, then sizes. Row-major. A Linear weight
 * is [N,K] (PyTorch's [out,in]); y = x W^T + b. Every backward ACCUMULATES (+=) into its
 * gradient outputs; any gradient pointer may be NULL, which skips that work (frozen parameter,
 * input gradient not wanted). Kernels never allocate: scratch comes from the caller.
 * Each kernel has a scalar reference (kernels_ref.c, kept for good) and, where it pays, a SIMD128
 * version; vt_kernels_use_reference(1) routes every call to the reference (tests only). */
#ifndef VT_KERNELS_H
#define VT_KERNELS_H
#include <stddef.h>
#include <stdint.h>

/* out[M,N] = inp[M,K] @ w[N,K]^T + bias[N]   (bias may be NULL) */
void vt_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int M, int K, int N);
/* dinp[M,K] += dout[M,N] @ w[N,K];  dw[N,K] += dout^T @ inp;  dbias[N] += sum_m dout */
void vt_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int M, int K, int N);

/* The general product behind both (and attention): C[I,L] (row stride ldc) = A B (+ bias[L])
 * when accumulate = 0, C += A B when accumulate = 1 (bias then unused, NULL), with
 * A(i,j) = a[i*ars + j*acs] and B(j,l) = b[j*brs + l*bcs]: any layout (row-major, transposed,
 * the strided heads of a fused qkv buffer). Each C element adds its J products in j order after
 * its old value (or 0), then the bias: the order of the references' loops, so SIMD and scalar
 * builds differ only where a build fuses its multiply-adds. C must not overlap A or B. The SIMD
 * version packs blocks of A and B on the stack: ~404 KB (every build here gives each thread
 * >= 1 MB; a host that runs the engine on its own threads must too). */
void vt_gemm(float *c, int ldc, const float *a, int ars, int acs, const float *b, int brs, int bcs, int I,
             int J, int L, int accumulate, const float *bias);

/* Per row of D: mean, biased variance, rstd = 1/sqrt(var+eps); out = (x-mean)*rstd*w + b.
 * out may alias inp (in place).
 * w and b may each be NULL (no scale / no shift). mean/rstd [M] (may be NULL) are saved for
 * the backward. */
void vt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int M, int D, float eps);
void vt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int M, int D);

/* Exact-erf GELU: y = 0.5 x (1 + erf(x / sqrt 2)).
 * The backward is the one exception to "+=": dinp = dout * gelu'(inp), and dinp may alias dout
 * (it runs in place on a scratch buffer). */
void vt_gelu_forward(float *out, const float *inp, size_t n);
void vt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* The activations timm's ViTs use besides exact GELU (act_layer), in PyTorch's formulas (its
 * scalar CPU path, float throughout); backward as gelu's: dinp = dout * act'(inp), overwriting,
 * dinp may alias dout.
 *   quick_gelu (OpenAI CLIP):  y = x * sigmoid(1.702 x), sigmoid(t) = 1 / (1 + exp(-t))
 *     dinp = dout s + ((dout x)(1 - s)) s 1.702   (autograd's mul and sigmoid backward)
 *   gelu_tanh (nn.GELU(approximate='tanh')): y = (0.5 x)(1 + tanh(b (x + k x^3))),
 *     b = sqrt(2/pi) (0.797884583f), k = 0.044715; dinp = dout ((0.5 (1 + t)) + (0.5 x)(1 - t^2)
 *     b (1 + 3k x^2)), t = tanh(b (x + k x^3)) (ATen's GeluBackward, tanh) */
void vt_quick_gelu_forward(float *out, const float *inp, size_t n);
void vt_quick_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void vt_gelu_tanh_forward(float *out, const float *inp, size_t n);
void vt_gelu_tanh_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* RMSNorm (timm's RmsNorm / rms_norm): per row of D, rstd = 1/sqrt(mean(x^2) + eps),
 * out = (x * rstd) * w (w may be NULL); out may alias inp; rstd [M] (may be NULL) for the
 * backward: n = x rstd, dn = w dy: dinp += rstd (dn - n mean(dn n)), dw += sum over rows dy n. */
void vt_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int M, int D, float eps);
void vt_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int M, int D);

/* Attention of Tq query rows over Tk key rows, per (image, head) (timm's AttentionPoolLatent:
 * a latent query over the tokens). q(b, i, h, e) = q[b*q_bs + i*D + h*hd + e] (q_bs 0: one set of
 * queries for the whole batch); k(b, j, h, e) = k[(b*Tk + j)*kv_rs + h*hd + e], v likewise; D =
 * H*hd. att [B, H, Tq, Tk] = softmax(scale q k^T) (saved), out [B, Tq, D] = att v, heads
 * concatenated. Backward: dq (q's layout; with q_bs 0 summed over the images in order), dk, dv
 * (k's and v's) accumulate; dscore [B, H, Tq, Tk] is scratch. */
void vt_cross_attention_forward(float *out, float *att, const float *q, const float *k, const float *v, int B,
                                int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale);
void vt_cross_attention_backward(float *dq, float *dk, float *dv, float *dscore, const float *dout,
                                 const float *att, const float *q, const float *k, const float *v, int B,
                                 int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale);

/* Multi-head attention core.
 * q,k: token t, head h, element e at q[(b*T + t)*qk_rs + h*hd + e] (row stride qk_rs, e.g. 3D for
 * a fused qkv buffer); v likewise with v_rs. out [B,T,D] with D = H*hd, heads concatenated. att [B,H,T,T] saved
 * probabilities. causal_mask: NULL (full attention) or the AIM [B,T] byte mask (1 = causal part):
 * query i may see key j when j <= i or causal_mask[b*T+j] == 0 (key is in the unmasked prefix).
 * scale = hd^-0.5. scratch: vt_attention_scratch_floats(T, hd, threads) floats, one part per
 * thread: the call runs on at most `threads` threads (the count its plan was made for; the same
 * size serves the forward and the backward; its contents are not kept between calls). */
size_t vt_attention_scratch_floats(int T, int hd, int threads);
void vt_attention_forward(float *out, float *att, float *scratch, const float *q, const float *k, int qk_rs,
                          const float *v, int v_rs, const uint8_t *causal_mask, int B, int T, int H, int hd,
                          int threads, float scale);
/* dq/dk share the strides of q/k (qk_rs), dv that of v (v_rs). */
void vt_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *att, const float *q, const float *k, int qk_rs, const float *v,
                           int v_rs, int B, int T, int H, int hd, int threads, float scale);
/* The implementation behind vt_attention_* in every build (kernels_attn.c): per (batch, head),
 * QK^T, PV and the four products of the backward done by vt_gemm on the heads where they lie
 * (strided column blocks of q, k, v, out and the gradients). */
void vt_gemm_attention_forward(float *out, float *att, float *scratch, const float *q, const float *k,
                               int qk_rs, const float *v, int v_rs, const uint8_t *causal_mask, int B, int T,
                               int H, int hd, int threads, float scale);
void vt_gemm_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                                const float *att, const float *q, const float *k, int qk_rs, const float *v,
                                int v_rs, int B, int T, int H, int hd, int threads, float scale);

/* The implementation behind vt_cross_attention_* in every build: vt_gemm per (image, head), the
 * heads split among the threads (each runs the images in order). */
void vt_gemm_cross_attention_forward(float *out, float *att, const float *q, const float *k, const float *v,
                                     int B, int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale);
void vt_gemm_cross_attention_backward(float *dq, float *dk, float *dv, float *dscore, const float *dout,
                                      const float *att, const float *q, const float *k, const float *v, int B,
                                      int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale);

/* Row softmax with max subtraction, y_i = exp(x_i - m) * (1/sum). Used by attention. */
void vt_softmax_row(float *y, const float *x, int n);
/* Its backward for one row, in place, times scale: d_i = p_i (d_i - sum_j p_j d_j) * scale (d: the
 * gradient of the probabilities p in, of the logits out). Used by attention. */
void vt_softmax_backward_row(float *d, const float *p, int n, float scale);

/* One AdamW step (torch.optim.AdamW, single-tensor) over a flat range of n floats; t is the 1-based
 * step count after this update. The scalar reference is vt_adamw_update (kernels_ref.c, declared
 * in vitrine.h); the SIMD128 version gives the same bits. Returns 1 when a new p, m or v is NaN or
 * infinite (checked as the values are written), else 0. */
int vt_adamw_step(float *p, const float *g, float *m, float *v, size_t n, long t, float lr, float b1,
                  float b2, float eps, float wd);

/* Routing to the scalar reference (for tests comparing SIMD against it). */
void vt_kernels_use_reference(int on);
int vt_kernels_reference(void); /* 1 while routed to the references */
int vt_kernels_simd(void);      /* 1 if this build has SIMD kernels */
/* How the SIMD kernels' multiply-adds round: 0 = mul then add (SIMD128, SSE2, scalar builds),
 * 1 = fused (relaxed-SIMD wasm on an FMA host, native FMA build), 2 = a fused build on a host
 * that runs relaxed_madd unfused. Tests pick bitwise or tolerance checks by it. */
int vt_kernels_madd_fused(void);

/* Scalar references, always compiled. */
void vt_ref_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int M, int K,
                           int N);
void vt_ref_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, int M, int K, int N);
void vt_ref_gemm(float *c, int ldc, const float *a, int ars, int acs, const float *b, int brs, int bcs, int I,
                 int J, int L, int accumulate, const float *bias);
void vt_ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, int M, int D, float eps);
void vt_ref_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int M, int D);
void vt_ref_gelu_forward(float *out, const float *inp, size_t n);
void vt_ref_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void vt_ref_quick_gelu_forward(float *out, const float *inp, size_t n);
void vt_ref_quick_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void vt_ref_gelu_tanh_forward(float *out, const float *inp, size_t n);
void vt_ref_gelu_tanh_backward(float *dinp, const float *inp, const float *dout, size_t n);
void vt_ref_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int M, int D,
                            float eps);
void vt_ref_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                             const float *rstd, int M, int D);
void vt_ref_cross_attention_forward(float *out, float *att, const float *q, const float *k, const float *v,
                                    int B, int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale);
void vt_ref_cross_attention_backward(float *dq, float *dk, float *dv, float *dscore, const float *dout,
                                     const float *att, const float *q, const float *k, const float *v, int B,
                                     int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale);
void vt_ref_softmax_row(float *y, const float *x, int n);
void vt_ref_softmax_backward_row(float *d, const float *p, int n, float scale);
void vt_ref_attention_forward(float *out, float *att, const float *q, const float *k, int qk_rs,
                              const float *v, int v_rs, const uint8_t *causal_mask, int B, int T, int H,
                              int hd, float scale);
/* the reference backward's scratch: T floats (<= vt_attention_scratch_floats(T, hd, 1)) */
void vt_ref_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                               const float *att, const float *q, const float *k, int qk_rs, const float *v,
                               int v_rs, int B, int T, int H, int hd, float scale);
#endif
