/* kernels_ref.c: scalar reference kernels. Plain loops, one accumulator, the obvious order.
 * Kept for good: every faster kernel is tested against these, and a build without SIMD uses
 * them. Not tuned; correctness and readability only. */
#include "kernels.h"
#include "vitrine.h" /* vt_adamw_update is public: the harness checks it alone */
#include <math.h>
#include <string.h>

void vt_ref_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int M, int K,
                           int N) {
    for (int m = 0; m < M; m++) {
        const float *a = inp + (size_t)m * K;
        for (int n = 0; n < N; n++) {
            const float *wr = w + (size_t)n * K;
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += a[k] * wr[k];
            out[(size_t)m * N + n] = bias ? acc + bias[n] : acc;
        }
    }
}

void vt_ref_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, int M, int K, int N) {
    if (dinp) { /* dinp[m,:] += sum_n dout[m,n] * w[n,:] */
        for (int m = 0; m < M; m++) {
            float *di = dinp + (size_t)m * K;
            for (int n = 0; n < N; n++) {
                float g = dout[(size_t)m * N + n];
                const float *wr = w + (size_t)n * K;
                for (int k = 0; k < K; k++) di[k] += g * wr[k];
            }
        }
    }
    if (dw) { /* dw[n,:] += sum_m dout[m,n] * inp[m,:] */
        for (int n = 0; n < N; n++) {
            float *dwr = dw + (size_t)n * K;
            for (int m = 0; m < M; m++) {
                float g = dout[(size_t)m * N + n];
                const float *a = inp + (size_t)m * K;
                for (int k = 0; k < K; k++) dwr[k] += g * a[k];
            }
        }
    }
    if (dbias) {
        for (int n = 0; n < N; n++) {
            float s = 0.0f;
            for (int m = 0; m < M; m++) s += dout[(size_t)m * N + n];
            dbias[n] += s;
        }
    }
}

void vt_ref_gemm(float *c, int ldc, const float *a, int ars, int acs, const float *b, int brs, int bcs, int I,
                 int J, int L, int accumulate, const float *bias) {
    for (int i = 0; i < I; i++) {
        float *ci = c + (size_t)i * ldc;
        if (bcs != 1) { /* B's rows strided (B = K^T of attention): one dot product per element */
            for (int l = 0; l < L; l++) {
                float acc = accumulate ? ci[l] : 0.0f;
                for (int j = 0; j < J; j++)
                    acc += a[(size_t)i * ars + (size_t)j * acs] * b[(size_t)j * brs + (size_t)l * bcs];
                ci[l] = !accumulate && bias ? acc + bias[l] : acc;
            }
            continue;
        }
        /* the same sums with B's rows contiguous: row i of C += A(i,j) B(j,:), each element in j order */
        if (!accumulate)
            for (int l = 0; l < L; l++) ci[l] = 0.0f;
        for (int j = 0; j < J; j++) {
            float x = a[(size_t)i * ars + (size_t)j * acs];
            const float *bj = b + (size_t)j * brs;
            for (int l = 0; l < L; l++) ci[l] += x * bj[l];
        }
        if (!accumulate && bias)
            for (int l = 0; l < L; l++) ci[l] += bias[l];
    }
}

void vt_ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, int M, int D, float eps) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * D;
        float *y = out + (size_t)m * D;
        /* two passes: the centred second pass keeps the variance accurate for large means */
        float s = 0.0f;
        for (int i = 0; i < D; i++) s += x[i];
        float mu = s / (float)D;
        float v = 0.0f;
        for (int i = 0; i < D; i++) {
            float d = x[i] - mu;
            v += d * d;
        }
        float rs = 1.0f / sqrtf(v / (float)D + eps);
        for (int i = 0; i < D; i++) {
            float n = (x[i] - mu) * rs;
            if (w) n *= w[i];
            y[i] = b ? n + b[i] : n;
        }
        if (mean) mean[m] = mu;
        if (rstd) rstd[m] = rs;
    }
}

void vt_ref_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int M, int D) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * D;
        const float *dy = dout + (size_t)m * D;
        float mu = mean[m], rs = rstd[m];
        /* dnorm = w * dy; dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) */
        float sum_dn = 0.0f, sum_dn_n = 0.0f;
        for (int i = 0; i < D; i++) {
            float n = (x[i] - mu) * rs;
            float dn = w ? w[i] * dy[i] : dy[i];
            sum_dn += dn;
            sum_dn_n += dn * n;
        }
        float mean_dn = sum_dn / (float)D, mean_dn_n = sum_dn_n / (float)D;
        for (int i = 0; i < D; i++) {
            float n = (x[i] - mu) * rs;
            float dn = w ? w[i] * dy[i] : dy[i];
            if (dw) dw[i] += n * dy[i];
            if (db) db[i] += dy[i];
            if (dinp) dinp[(size_t)m * D + i] += (dn - mean_dn - n * mean_dn_n) * rs;
        }
    }
}

#define VT_SQRT1_2      0.70710678118654752440f
#define VT_INV_SQRT_2PI 0.39894228040143267794f

void vt_ref_gelu_forward(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + erff(x * VT_SQRT1_2));
    }
}

void vt_ref_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cdf = 0.5f * (1.0f + erff(x * VT_SQRT1_2));
        float pdf = VT_INV_SQRT_2PI * expf(-0.5f * x * x);
        dinp[i] = dout[i] * (cdf + x * pdf);
    }
}

/* quick_gelu, as timm's quick_gelu computes it: x * torch.sigmoid(1.702 * x) (the scalar 1.702
 * taken as float by the float tensor op; sigmoid 1 / (1 + exp(-t))) */
#define VT_QUICK_GELU_K 1.702f
void vt_ref_quick_gelu_forward(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], s = 1.0f / (1.0f + expf(-(x * VT_QUICK_GELU_K)));
        out[i] = x * s;
    }
}
void vt_ref_quick_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], g = dout[i], s = 1.0f / (1.0f + expf(-(x * VT_QUICK_GELU_K)));
        /* y = x s: dx = g s + (d s) 1.702 with d s = ((g x)(1 - s)) s (sigmoid_backward) */
        dinp[i] = g * s + ((g * x) * (1.0f - s)) * s * VT_QUICK_GELU_K;
    }
}

/* tanh GELU: ATen's GeluKernel (approximate='tanh'), float: kBeta = M_SQRT2 * M_2_SQRTPI * 0.5
 * rounded to float, kKappa = 0.044715f */
#define VT_GELU_TANH_B 0.797884583f
#define VT_GELU_TANH_K 0.044715f
void vt_ref_gelu_tanh_forward(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], inner = VT_GELU_TANH_B * (x + VT_GELU_TANH_K * (x * x * x));
        out[i] = (0.5f * x) * (1.0f + tanhf(inner));
    }
}
void vt_ref_gelu_tanh_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], x2 = x * x, inner = VT_GELU_TANH_B * (x + VT_GELU_TANH_K * (x2 * x));
        float t = tanhf(inner);
        float left_d = 0.5f * (1.0f + t);
        float right_d = (0.5f * x) * (1.0f - t * t) * (VT_GELU_TANH_B * (1.0f + 3.0f * VT_GELU_TANH_K * x2));
        dinp[i] = dout[i] * (left_d + right_d);
    }
}

void vt_ref_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int M, int D,
                            float eps) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * D;
        float *y = out + (size_t)m * D;
        float s = 0.0f;
        for (int i = 0; i < D; i++) s += x[i] * x[i];
        float rs = 1.0f / sqrtf(s / (float)D + eps);
        for (int i = 0; i < D; i++) y[i] = w ? (x[i] * rs) * w[i] : x[i] * rs;
        if (rstd) rstd[m] = rs;
    }
}

void vt_ref_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                             const float *rstd, int M, int D) {
    for (int m = 0; m < M; m++) {
        const float *x = inp + (size_t)m * D, *dy = dout + (size_t)m * D;
        float rs = rstd[m], sum_dn_n = 0.0f;
        for (int i = 0; i < D; i++) sum_dn_n += (w ? w[i] * dy[i] : dy[i]) * (x[i] * rs);
        float mean_dn_n = sum_dn_n / (float)D;
        for (int i = 0; i < D; i++) {
            float n = x[i] * rs, dn = w ? w[i] * dy[i] : dy[i];
            if (dw) dw[i] += n * dy[i];
            if (dinp) dinp[(size_t)m * D + i] += (dn - n * mean_dn_n) * rs;
        }
    }
}

/* queries of image b: row i of head h */
static const float *cq(const float *q, int b, int i, int h, int hd, int H, int q_bs) {
    return q + (size_t)b * q_bs + (size_t)i * H * hd + (size_t)h * hd;
}

void vt_ref_cross_attention_forward(float *out, float *att, const float *q, const float *k, const float *v,
                                    int B, int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale) {
    int D = H * hd;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                float *row = att + (((size_t)b * H + h) * Tq + i) * Tk;
                const float *qi = cq(q, b, i, h, hd, H, q_bs);
                for (int j = 0; j < Tk; j++) {
                    const float *kj = k + ((size_t)b * Tk + j) * kv_rs + h * hd;
                    float s = 0.0f;
                    for (int e = 0; e < hd; e++) s += qi[e] * kj[e];
                    row[j] = s * scale;
                }
                vt_ref_softmax_row(row, row, Tk);
                float *o = out + ((size_t)b * Tq + i) * D + h * hd;
                for (int e = 0; e < hd; e++) o[e] = 0.0f;
                for (int j = 0; j < Tk; j++) {
                    const float *vj = v + ((size_t)b * Tk + j) * kv_rs + h * hd;
                    for (int e = 0; e < hd; e++) o[e] += row[j] * vj[e];
                }
            }
}

void vt_ref_cross_attention_backward(float *dq, float *dk, float *dv, float *dscore, const float *dout,
                                     const float *att, const float *q, const float *k, const float *v, int B,
                                     int Tq, int Tk, int H, int hd, int q_bs, int kv_rs, float scale) {
    int D = H * hd;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                size_t r = (((size_t)b * H + h) * Tq + i) * Tk;
                const float *p = att + r, *doi = dout + ((size_t)b * Tq + i) * D + h * hd;
                float *ds = dscore + r;
                /* out_i = sum_j p_j v_j: dv_j += p_j do_i, dp_j = do_i . v_j */
                for (int j = 0; j < Tk; j++) {
                    const float *vj = v + ((size_t)b * Tk + j) * kv_rs + h * hd;
                    float s = 0.0f;
                    for (int e = 0; e < hd; e++) s += doi[e] * vj[e];
                    ds[j] = s;
                    if (dv) {
                        float *dvj = dv + ((size_t)b * Tk + j) * kv_rs + h * hd;
                        for (int e = 0; e < hd; e++) dvj[e] += p[j] * doi[e];
                    }
                }
                vt_ref_softmax_backward_row(ds, p, Tk, scale);
                /* s_j = scale q . k_j: dq += ds_j k_j, dk_j += ds_j q */
                const float *qi = cq(q, b, i, h, hd, H, q_bs);
                float *dqi = dq ? dq + (size_t)b * q_bs + (size_t)i * D + (size_t)h * hd : NULL;
                for (int j = 0; j < Tk; j++) {
                    const float *kj = k + ((size_t)b * Tk + j) * kv_rs + h * hd;
                    if (dqi)
                        for (int e = 0; e < hd; e++) dqi[e] += ds[j] * kj[e];
                    if (dk) {
                        float *dkj = dk + ((size_t)b * Tk + j) * kv_rs + h * hd;
                        for (int e = 0; e < hd; e++) dkj[e] += ds[j] * qi[e];
                    }
                }
            }
}

void vt_ref_softmax_row(float *y, const float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float s = 0.0f;
    for (int i = 0; i < n; i++) {
        /* masked logits are -inf: exp gives exactly 0; the diagonal is never masked */
        float e = expf(x[i] - mx);
        y[i] = e;
        s += e;
    }
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++) y[i] *= inv;
}

void vt_ref_softmax_backward_row(float *d, const float *p, int n, float scale) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += p[i] * d[i];
    for (int i = 0; i < n; i++) d[i] = p[i] * (d[i] - s) * scale;
}

void vt_ref_attention_forward(float *out, float *att, const float *q, const float *k, int qk_rs,
                              const float *v, int v_rs, const uint8_t *causal_mask, int B, int T, int H,
                              int hd, float scale) {
    int D = H * hd;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                float *row = att + (((size_t)b * H + h) * T + i) * T;
                const float *qi = q + ((size_t)b * T + i) * qk_rs + h * hd;
                for (int j = 0; j < T; j++) {
                    if (causal_mask && j > i && causal_mask[(size_t)b * T + j]) {
                        row[j] = -INFINITY;
                        continue;
                    }
                    const float *kj = k + ((size_t)b * T + j) * qk_rs + h * hd;
                    float s = 0.0f;
                    for (int e = 0; e < hd; e++) s += qi[e] * kj[e];
                    row[j] = s * scale;
                }
                vt_ref_softmax_row(row, row, T);
                float *o = out + ((size_t)b * T + i) * D + h * hd;
                for (int e = 0; e < hd; e++) o[e] = 0.0f;
                for (int j = 0; j < T; j++) {
                    float p = row[j];
                    const float *vj = v + ((size_t)b * T + j) * v_rs + h * hd;
                    for (int e = 0; e < hd; e++) o[e] += p * vj[e];
                }
            }
}

void vt_ref_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                               const float *att, const float *q, const float *k, int qk_rs, const float *v,
                               int v_rs, int B, int T, int H, int hd, float scale) {
    int D = H * hd;
    float *dp = scratch; /* [T]: d(prob) of one query row */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const float *row = att + (((size_t)b * H + h) * T + i) * T;
                const float *doi = dout + ((size_t)b * T + i) * D + h * hd;
                const float *qi = q + ((size_t)b * T + i) * qk_rs + h * hd;
                /* out_i = sum_j p_ij v_j  =>  dv_j += p_ij do_i, dp_ij = do_i . v_j */
                float sum_pdp = 0.0f;
                for (int j = 0; j < T; j++) {
                    const float *vj = v + ((size_t)b * T + j) * v_rs + h * hd;
                    float s = 0.0f;
                    for (int e = 0; e < hd; e++) s += doi[e] * vj[e];
                    dp[j] = s;
                    sum_pdp += row[j] * s;
                    if (dv) {
                        float *dvj = dv + ((size_t)b * T + j) * v_rs + h * hd;
                        for (int e = 0; e < hd; e++) dvj[e] += row[j] * doi[e];
                    }
                }
                /* softmax: ds_ij = p_ij (dp_ij - sum_j p_ij dp_ij); s_ij = scale q_i . k_j */
                float *dqi = dq ? dq + ((size_t)b * T + i) * qk_rs + h * hd : NULL;
                for (int j = 0; j < T; j++) {
                    float ds = row[j] * (dp[j] - sum_pdp) * scale;
                    if (ds == 0.0f) continue; /* masked keys (p = 0) contribute nothing */
                    const float *kj = k + ((size_t)b * T + j) * qk_rs + h * hd;
                    if (dqi)
                        for (int e = 0; e < hd; e++) dqi[e] += ds * kj[e];
                    if (dk) {
                        float *dkj = dk + ((size_t)b * T + j) * qk_rs + h * hd;
                        for (int e = 0; e < hd; e++) dkj[e] += ds * qi[e];
                    }
                }
            }
}

/* One AdamW step on n floats; t is the 1-based step count after this update.
 *   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * Returns 1 when a new p, m or v is NaN or infinite (finite inputs can overflow: g^2, a large
 * weight decay, m / eps), else 0: the check rides along the update, it changes no bit of it. */
int vt_adamw_update(float *p, const float *g, float *m, float *v, size_t n, long t, float lr, float b1,
                    float b2, float eps, float wd) {
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    float step = lr / bc1, bc2s = sqrtf(bc2), decay = 1.0f - lr * wd;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        p[i] *= decay;
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float denom = sqrtf(v[i]) / bc2s + eps;
        p[i] -= step * (m[i] / denom);
        bad |= !(isfinite(p[i]) && isfinite(m[i]) && isfinite(v[i]));
    }
    return bad;
}
