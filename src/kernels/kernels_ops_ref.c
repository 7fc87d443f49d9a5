/* kernels_ops_ref.c: scalar references of the kernels in ops.h. Plain loops in the order that
 * defines each kernel's bits (the order sums are taken in is part of the contract, see
 * docs/kernels.md). Kept for good: every faster version is tested against these. */
#include "ops.h"
#include "kernels.h"    /* vt_ref_layernorm_backward */
#include "../vitrine.h" /* VT_MAX_TOKENS, vt_adamw_update */
#include <math.h>
#include <string.h>

#define NORM_PIX_EPS 1e-6f

void vt_ref_fill(float *x, int64_t n, float value) {
    for (int64_t i = 0; i < n; i++) x[i] = value;
}

void vt_ref_copy2d(float *dst, const float *src, int64_t rows, int64_t cols, int64_t dst_stride,
                   int64_t src_stride) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[r * dst_stride + c] = src[r * src_stride + c];
}

void vt_ref_add2d(float *dst, const float *src, int64_t rows, int64_t cols, int64_t dst_stride,
                  int64_t src_stride) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[r * dst_stride + c] += src[r * src_stride + c];
}

void vt_ref_transpose(float *dst, const float *src, int64_t B, int64_t R, int64_t C, int64_t dst_bs,
                      int64_t dst_rs, int64_t src_bs, int64_t src_rs) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                dst[b * dst_bs + c * dst_rs + r] = src[b * src_bs + r * src_rs + c];
}

void vt_ref_add_rows(float *out, const float *x, const float *y, int64_t rows, int64_t n, int64_t stride) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = 0; e < n; e++) out[r * stride + e] = x[r * stride + e] + (y ? y[e] : 0.0f);
}

void vt_ref_sum_rows(float *out, const float *x, int64_t rows, int64_t n, int64_t stride) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = 0; e < n; e++) out[e] += x[r * stride + e];
}

void vt_ref_layerscale_forward(float *out, const float *x, const float *g, const float *y, int64_t M,
                               int64_t D) {
    for (int64_t r = 0; r < M; r++)
        for (int64_t d = 0; d < D; d++) out[r * D + d] = x[r * D + d] + g[d] * y[r * D + d];
}

void vt_ref_layerscale_backward(float *dbranch, float *dg, const float *g, const float *dy,
                                const float *branch, int64_t M, int64_t D) {
    for (int64_t r = 0; r < M; r++)
        for (int64_t d = 0; d < D; d++) {
            dbranch[r * D + d] = g[d] * dy[r * D + d];
            if (dg) dg[d] += dy[r * D + d] * branch[r * D + d];
        }
}

/* ---- patch embedding ---- */

void vt_ref_im2col(float *patches, const float *images, int64_t m0, int64_t n, int64_t C, int64_t S,
                   int64_t p, int64_t G) {
    int64_t Kp = C * p * p;
    for (int64_t m = m0; m < m0 + n; m++) {
        int64_t b = m / (G * G), r = (m % (G * G)) / G, q = m % G;
        float *dst = patches + (m - m0) * Kp;
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < p; i++)
                memcpy(dst + (c * p + i) * p, images + ((b * C + c) * S + r * p + i) * S + q * p,
                       (size_t)p * sizeof(float));
    }
}

void vt_ref_col2im_add(float *dimages, const float *dpatches, int64_t m0, int64_t n, int64_t C, int64_t S,
                       int64_t p, int64_t G) {
    int64_t Kp = C * p * p;
    for (int64_t m = m0; m < m0 + n; m++) {
        int64_t b = m / (G * G), r = (m % (G * G)) / G, q = m % G;
        const float *src = dpatches + (m - m0) * Kp;
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < p; i++) {
                float *dst = dimages + ((b * C + c) * S + r * p + i) * S + q * p;
                for (int64_t j = 0; j < p; j++) dst[j] += src[(c * p + i) * p + j];
            }
    }
}

/* ---- patch embedding of any image and grid ---- */

void vt_ref_im2col_hw(float *patches, const float *images, int64_t m0, int64_t n, int64_t C, int64_t H,
                      int64_t W, int64_t p, int64_t Gh, int64_t Gw) {
    int64_t Kp = C * p * p;
    for (int64_t m = m0; m < m0 + n; m++) {
        int64_t b = m / (Gh * Gw), r = (m % (Gh * Gw)) / Gw, q = m % Gw;
        float *dst = patches + (m - m0) * Kp;
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < p; i++)
                for (int64_t j = 0; j < p; j++) {
                    int64_t y = r * p + i, x = q * p + j;
                    dst[(c * p + i) * p + j] = y < H && x < W ? images[((b * C + c) * H + y) * W + x] : 0.0f;
                }
    }
}

void vt_ref_col2im_add_hw(float *dimages, const float *dpatches, int64_t m0, int64_t n, int64_t C, int64_t H,
                          int64_t W, int64_t p, int64_t Gh, int64_t Gw) {
    int64_t Kp = C * p * p;
    for (int64_t m = m0; m < m0 + n; m++) {
        int64_t b = m / (Gh * Gw), r = (m % (Gh * Gw)) / Gw, q = m % Gw;
        const float *src = dpatches + (m - m0) * Kp;
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < p; i++)
                for (int64_t j = 0; j < p; j++) {
                    int64_t y = r * p + i, x = q * p + j;
                    if (y < H && x < W) dimages[((b * C + c) * H + y) * W + x] += src[(c * p + i) * p + j];
                }
    }
}

/* ---- the antialiased bicubic resize of PyTorch (_upsample_bicubic2d_aa), one axis ---- */

/* Pillow's bicubic, a = -0.5 (PyTorch's aa_filter; in double, as its literals are) */
static float aa_cubic(float xf) {
    double x = fabs((double)xf), a = -0.5;
    if (x < 1.0) return (float)(((a + 2.0) * x - (a + 3.0)) * x * x + 1);
    if (x < 2.0) return (float)((((x - 5) * x + 8) * x - 4) * a);
    return 0.0f;
}
static void aa_axis(int64_t n_in, int64_t n_out, float *scale, float *support, float *invscale) {
    *scale = (float)n_in / (float)n_out;
    *support = *scale >= 1.0f ? (float)(4 * 0.5 * (double)*scale) : 2.0f;
    *invscale = *scale >= 1.0f ? (float)(1.0 / (double)*scale) : 1.0f;
}
int64_t vt_resample_aa_max_taps(int64_t n_in, int64_t n_out) {
    float scale, support, invscale;
    aa_axis(n_in, n_out, &scale, &support, &invscale);
    return (int64_t)ceilf(support) * 2 + 1;
}
/* PyTorch's _compute_indices_weights_aa: float, with its double literals; weights normalised */
int64_t vt_resample_aa_taps(int64_t n_in, int64_t n_out, int64_t y, int64_t *x0, float *w, int64_t max) {
    float scale, support, invscale;
    aa_axis(n_in, n_out, &scale, &support, &invscale);
    float center = (float)((double)scale * ((double)y + 0.5));
    long long lo = (long long)((double)(center - support) + 0.5),
              hi = (long long)((double)(center + support) + 0.5);
    int64_t xmin = lo < 0 ? 0 : lo, xsize = (hi < n_in ? hi : n_in) - xmin;
    if (xsize < 0) xsize = 0;
    if (xsize > max) xsize = max;
    float total = 0.0f;
    for (int64_t j = 0; j < xsize; j++) {
        w[j] = aa_cubic((float)(((double)((float)(j + xmin) - center) + 0.5) * (double)invscale));
        total += w[j];
    }
    for (int64_t j = 0; j < xsize; j++)
        if (total != 0.0f) w[j] /= total;
    *x0 = xmin;
    return xsize;
}

void vt_ref_resample_aa_forward(float *out, const float *inp, int64_t outer, int64_t n_in, int64_t n_out,
                                int64_t inner) {
    float w[VT_RESAMPLE_MAX_TAPS];
    for (int64_t y = 0; y < n_out; y++) {
        int64_t x0, nt = vt_resample_aa_taps(n_in, n_out, y, &x0, w, VT_RESAMPLE_MAX_TAPS);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t c = 0; c < inner; c++) {
                float acc = 0.0f;
                for (int64_t t = 0; t < nt; t++) {
                    float v = inp[(o * n_in + x0 + t) * inner + c] * w[t];
                    acc = t ? acc + v : v;
                }
                out[(o * n_out + y) * inner + c] = acc;
            }
    }
}

void vt_ref_resample_aa_backward(float *dinp, const float *dout, int64_t outer, int64_t n_in, int64_t n_out,
                                 int64_t inner) {
    float w[VT_RESAMPLE_MAX_TAPS];
    for (int64_t y = 0; y < n_out; y++) {
        int64_t x0, nt = vt_resample_aa_taps(n_in, n_out, y, &x0, w, VT_RESAMPLE_MAX_TAPS);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t t = 0; t < nt; t++)
                for (int64_t c = 0; c < inner; c++)
                    dinp[(o * n_in + x0 + t) * inner + c] += w[t] * dout[(o * n_out + y) * inner + c];
    }
}

void vt_ref_add_scaled(float *dst, const float *src, int64_t n, float alpha) {
    for (int64_t i = 0; i < n; i++) dst[i] += alpha * src[i];
}

/* ---- masking ---- */

/* masked[l] of image b: its idx row (K indices) when given, else its mask row */
static void masked_row(uint8_t *masked, const int64_t *idx, const uint8_t *mask, int64_t b, int64_t L,
                       int64_t K) {
    memset(masked, 0, (size_t)L);
    if (idx)
        for (int64_t k = 0; k < K; k++) masked[idx[b * K + k]] = 1;
    else if (mask)
        for (int64_t l = 0; l < L; l++) masked[l] = mask[b * L + l] != 0;
}

void vt_ref_mask_select(float *seq, const float *mask_token, const int64_t *idx, const uint8_t *mask,
                        int64_t B, int64_t L, int64_t D, int64_t K) {
    for (int64_t b = 0; b < B; b++) {
        if (idx) {
            for (int64_t k = 0; k < K; k++)
                memcpy(seq + (b * L + idx[b * K + k]) * D, mask_token, (size_t)D * sizeof(float));
        } else if (mask) {
            for (int64_t l = 0; l < L; l++)
                if (mask[b * L + l]) memcpy(seq + (b * L + l) * D, mask_token, (size_t)D * sizeof(float));
        }
    }
}

void vt_ref_mask_token_backward(float *dmt, const float *dseq, const int64_t *idx, const uint8_t *mask,
                                int64_t B, int64_t L, int64_t D, int64_t K) {
    uint8_t masked[VT_MAX_TOKENS];
    for (int64_t b = 0; b < B; b++) {
        masked_row(masked, idx, mask, b, L, K);
        for (int64_t l = 0; l < L; l++)
            if (masked[l])
                for (int64_t d = 0; d < D; d++) dmt[d] += dseq[(b * L + l) * D + d];
    }
}

void vt_ref_prefix_tokens_backward(float *dcls, float *dreg, const float *dseq, const int64_t *idx,
                                   const uint8_t *mask, int64_t B, int64_t L, int64_t D, int64_t K,
                                   int64_t cls, int64_t R) {
    uint8_t masked[VT_MAX_TOKENS];
    for (int64_t b = 0; b < B; b++) {
        masked_row(masked, idx, mask, b, L, K);
        const float *sb = dseq + b * L * D;
        if (dcls && cls && !masked[0])
            for (int64_t d = 0; d < D; d++) dcls[d] += sb[d];
        if (dreg)
            for (int64_t r = 0; r < R; r++) {
                int64_t l = cls + r;
                if (!masked[l])
                    for (int64_t d = 0; d < D; d++) dreg[r * D + d] += sb[l * D + d];
            }
    }
}

void vt_ref_patch_tokens_backward(float *dtok, const float *dseq, const int64_t *idx, const uint8_t *mask,
                                  int64_t B, int64_t L, int64_t D, int64_t K, int64_t P) {
    uint8_t masked[VT_MAX_TOKENS];
    int64_t N = L - P;
    for (int64_t b = 0; b < B; b++) {
        masked_row(masked, idx, mask, b, L, K);
        for (int64_t n = 0; n < N; n++) {
            float *dst = dtok + (b * N + n) * D;
            if (masked[P + n])
                memset(dst, 0, (size_t)D * sizeof(float));
            else
                memcpy(dst, dseq + (b * L + P + n) * D, (size_t)D * sizeof(float));
        }
    }
}

/* ---- rows by index ---- */

void vt_ref_gather_rows(float *out, const float *x, const int64_t *idx, int64_t B, int64_t L, int64_t K,
                        int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++)
            memcpy(out + (b * K + k) * D, x + (b * L + idx[b * K + k]) * D, (size_t)D * sizeof(float));
}

void vt_ref_scatter_rows(float *out, const float *x, const int64_t *idx, int64_t B, int64_t L, int64_t K,
                         int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++)
            memcpy(out + (b * L + idx[b * K + k]) * D, x + (b * K + k) * D, (size_t)D * sizeof(float));
}

void vt_ref_scatter_add_rows(float *out, const float *x, const int64_t *idx, int64_t B, int64_t L, int64_t K,
                             int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++) {
            float *dst = out + (b * L + idx[b * K + k]) * D;
            const float *src = x + (b * K + k) * D;
            for (int64_t d = 0; d < D; d++) dst[d] += src[d];
        }
}

static int row_has(const int64_t *row, int64_t n, int64_t v) {
    for (int64_t i = 0; i < n; i++)
        if (row[i] == v) return 1;
    return 0;
}

void vt_ref_gather_rows_except(float *out, const float *x, const int64_t *idx, const int64_t *except,
                               int64_t B, int64_t L, int64_t K, int64_t Kx, int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++) {
            int64_t l = idx[b * K + k];
            if (row_has(except + b * Kx, Kx, l)) continue;
            memcpy(out + (b * K + k) * D, x + (b * L + l) * D, (size_t)D * sizeof(float));
        }
}

void vt_ref_sum_rows_at(float *out, const float *x, const int64_t *idx, int64_t B, int64_t L, int64_t K,
                        int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t d = 0; d < D; d++) out[d] += x[(b * L + idx[b * K + k]) * D + d];
}

/* row by row through a layernorm backward: the reference here, the dispatch (SIMD, threads) in
 * vt_layernorm_backward_rows -- the per-row arithmetic of a one-row call either way */
void vt_layernorm_backward_rows_by(vt_layernorm_backward_fn ln, float *dinp, float *dw, float *db,
                                   const float *dout, const float *inp, const float *w, const float *mean,
                                   const float *rstd, const int64_t *idx, int64_t B, int64_t L, int64_t K,
                                   int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++) {
            int64_t row = b * L + idx[b * K + k];
            ln(dinp + row * D, dw, db, dout + (b * K + k) * D, inp + row * D, w, mean + row, rstd + row, 1,
               (int)D);
        }
}
void vt_ref_layernorm_backward_rows(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                    const float *w, const float *mean, const float *rstd, const int64_t *idx,
                                    int64_t B, int64_t L, int64_t K, int64_t D) {
    vt_layernorm_backward_rows_by(vt_ref_layernorm_backward, dinp, dw, db, dout, inp, w, mean, rstd, idx, B,
                                  L, K, D);
}

/* ---- pooling ---- */

void vt_ref_pool_forward(float *y, const float *x, int64_t B, int64_t T, int64_t D, int64_t P, int64_t kind) {
    for (int64_t b = 0; b < B; b++) {
        const float *xb = x + b * T * D;
        float *yb = y + b * D;
        if (kind == VT_POOLK_TOKEN) {
            memcpy(yb, xb, (size_t)D * sizeof(float));
            continue;
        }
        for (int64_t d = 0; d < D; d++) {
            float s = 0.0f, mx = xb[P * D + d];
            for (int64_t t = P; t < T; t++) {
                float v = xb[t * D + d];
                s += v;
                if (v > mx || v != v) mx = v; /* amax propagates NaN */
            }
            float avg = s / (float)(T - P);
            yb[d] = kind == VT_POOLK_AVG ? avg : kind == VT_POOLK_MAX ? mx : 0.5f * (mx + avg);
        }
    }
}

void vt_ref_pool_backward(float *dx, const float *dy, const float *x, int64_t B, int64_t T, int64_t D,
                          int64_t P, int64_t kind, int64_t assign) {
    for (int64_t b = 0; b < B; b++) {
        const float *xb = x + b * T * D, *g = dy + b * D;
        float *dxb = dx + b * T * D;
        if (kind == VT_POOLK_TOKEN) {
            for (int64_t d = 0; d < D; d++) dxb[d] = assign ? g[d] : dxb[d] + g[d];
            continue;
        }
        float n = (float)(T - P);
        if (assign) { /* lightly's forward: only its avg assigns */
            for (int64_t t = P; t < T; t++)
                for (int64_t d = 0; d < D; d++) dxb[t * D + d] = g[d] / n;
            continue;
        }
        for (int64_t d = 0; d < D; d++) {
            float ga = kind == VT_POOLK_AVG ? g[d] / n : kind == VT_POOLK_AVGMAX ? 0.5f * g[d] / n : 0.0f;
            float mx = -INFINITY;
            int ties = 0;
            if (kind != VT_POOLK_AVG) { /* amax's gradient is shared evenly by the maxima (as PyTorch's) */
                for (int64_t t = P; t < T; t++) mx = fmaxf(mx, xb[t * D + d]);
                for (int64_t t = P; t < T; t++) ties += xb[t * D + d] == mx;
            }
            float gm = ties ? (kind == VT_POOLK_AVGMAX ? 0.5f * g[d] : g[d]) / (float)ties : 0.0f;
            for (int64_t t = P; t < T; t++) dxb[t * D + d] += ga + (ties && xb[t * D + d] == mx ? gm : 0.0f);
        }
    }
}

/* ---- targets and losses ---- */

/* lightly patchify: patch n (row-major), element (py, px, c) with the channel fastest */
static inline int64_t pix(int64_t C, int64_t S, int64_t p, int64_t G, int64_t n, int64_t e) {
    int64_t r = n / G, q = n % G, c = e % C, px = (e / C) % p, py = e / C / p;
    return (c * S + r * p + py) * S + q * p + px;
}

/* normalize_mean_var: y = (x - mean) / sqrt(var_unbiased + eps); 1/s kept for the backward */
static void norm_pix_forward(float *x, float *rs, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    float mu = (float)(s / n);
    double v = 0;
    for (int64_t i = 0; i < n; i++) v += (double)(x[i] - mu) * (x[i] - mu);
    float r = 1.0f / sqrtf((float)(v / (n > 1 ? n - 1 : 1)) + NORM_PIX_EPS);
    for (int64_t i = 0; i < n; i++) x[i] = (x[i] - mu) * r;
    *rs = r;
}
/* dx = r * (dy - mean(dy) - y * sum(dy*y) / (n-1)), in place over dy */
static void norm_pix_backward(float *dy, const float *y, float r, int64_t n) {
    double sd = 0, sdy = 0;
    for (int64_t i = 0; i < n; i++) {
        sd += dy[i];
        sdy += (double)dy[i] * y[i];
    }
    float md = (float)(sd / n), c = (float)(sdy / (n > 1 ? n - 1 : 1));
    for (int64_t i = 0; i < n; i++) dy[i] = r * (dy[i] - md - y[i] * c);
}

void vt_ref_patch_targets(float *tgt, float *trs, const float *images, const int64_t *idx, int64_t B,
                          int64_t K, int64_t C, int64_t S, int64_t p, int64_t G, int64_t offset,
                          int64_t norm_pix) {
    int64_t O = C * p * p, img = C * S * S;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < K; j++) {
            int64_t n = idx ? idx[b * K + j] - offset : j;
            float *t = tgt + (b * K + j) * O;
            for (int64_t e = 0; e < O; e++) t[e] = images[b * img + pix(C, S, p, G, n, e)];
            if (norm_pix) norm_pix_forward(t, &trs[b * K + j], O);
        }
}

void vt_ref_targets_backward(float *dimages, float *dt, const float *dpred, const float *tgt,
                             const float *trs, const int64_t *idx, int64_t B, int64_t K, int64_t C, int64_t S,
                             int64_t p, int64_t G, int64_t offset, int64_t norm_pix) {
    int64_t O = C * p * p, img = C * S * S;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < K; j++) {
            int64_t row = b * K + j;
            float *d = dt + row * O;
            for (int64_t e = 0; e < O; e++) d[e] = -dpred[row * O + e];
            if (norm_pix) norm_pix_backward(d, tgt + row * O, trs[row], O);
            int64_t n = idx ? idx[row] - offset : j;
            for (int64_t e = 0; e < O; e++) dimages[b * img + pix(C, S, p, G, n, e)] += d[e];
        }
}

void vt_ref_mse_forward(float *loss, const float *pred, const float *tgt, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)pred[i] - tgt[i];
        s += d * d;
    }
    *loss = (float)(s / (double)n);
}

void vt_ref_mse_backward(float *dpred, const float *pred, const float *tgt, const float *dloss, int64_t n) {
    float g = 2.0f * *dloss / (float)n;
    for (int64_t i = 0; i < n; i++) dpred[i] = g * (pred[i] - tgt[i]);
}

void vt_ref_cross_entropy_forward(float *logp, float *loss, const float *logits, const int32_t *labels,
                                  int64_t B, int64_t C, float smoothing) {
    float s = smoothing;
    double total = 0;
    for (int64_t b = 0; b < B; b++) { /* log-softmax in double: exp of (x - max) cannot overflow */
        const float *z = logits + b * C;
        float *lp = logp + b * C;
        double mx = z[0], se = 0, sum_lp = 0;
        for (int64_t c = 1; c < C; c++) mx = z[c] > mx ? z[c] : mx;
        for (int64_t c = 0; c < C; c++) se += exp((double)z[c] - mx);
        double lse = mx + log(se);
        for (int64_t c = 0; c < C; c++) {
            lp[c] = (float)((double)z[c] - lse);
            sum_lp += (double)z[c] - lse;
        }
        total += (1.0 - s) * -((double)z[labels[b]] - lse) + s * -(sum_lp / (int)C);
    }
    *loss = (float)(total / (int)B);
}

void vt_ref_cross_entropy_backward(float *dlogits, const float *logp, const int32_t *labels,
                                   const float *dloss, int64_t B, int64_t C, float smoothing) {
    float s = smoothing, scale = *dloss / (float)B, off = s / (float)C;
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            int64_t i = b * C + c;
            float target = (c == labels[b] ? 1.0f - s : 0.0f) + off;
            dlogits[i] = scale * (expf(logp[i]) - target);
        }
}

/* ---- gradients and the optimizer ---- */

void vt_ref_grad_norm(double *norm, const float *g, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    *norm = sqrt(s);
}

void vt_ref_clip_grads(float *g, const double *norm, int64_t n, float max_norm) {
    if (!isfinite(*norm)) return; /* refused by the step: nothing is scaled */
    float coef = (float)(max_norm / (*norm + 1e-6));
    if (coef < 1.0f)
        for (int64_t i = 0; i < n; i++) g[i] *= coef;
}

void vt_ref_check_finite(float *flag, const float *x, int64_t n) {
    int bad = *flag != 0.0f;
    for (int64_t i = 0; i < n && !bad; i++) bad = !isfinite(x[i]);
    *flag = bad ? 1.0f : 0.0f;
}

void vt_ref_adamw(float *p, float *m, float *v, const float *g, const float *lr, const float *step,
                  const float *flag, float *bad, int64_t n, float b1, float b2, float eps, float wd) {
    if (*flag != 0.0f) return;
    /* *step = (float)t exactly as the update uses it: (float)(long)*step == *step */
    if (vt_adamw_update(p, g, m, v, (size_t)n, (long)*step, *lr, b1, b2, eps, wd)) *bad = 1.0f;
}

/* ---- teaching ---- */

void vt_ref_unpatchify(float *recon, float *masked, const float *pred, const float *images,
                       const int64_t *idx, int64_t B, int64_t K, int64_t C, int64_t S, int64_t p, int64_t G,
                       int64_t offset, int64_t norm_pix) {
    int64_t O = C * p * p, img = C * S * S;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < K; j++) {
            int64_t n = idx ? idx[b * K + j] - offset : j;
            const float *pr = pred + (b * K + j) * O, *ib = images + b * img;
            float mu = 0.0f, sd = 1.0f;
            if (norm_pix) { /* invert normalize_mean_var with the original patch's statistics */
                double s = 0, v = 0;
                for (int64_t e = 0; e < O; e++) s += ib[pix(C, S, p, G, n, e)];
                mu = (float)(s / O);
                for (int64_t e = 0; e < O; e++) {
                    float o = ib[pix(C, S, p, G, n, e)];
                    v += (double)(o - mu) * (o - mu);
                }
                sd = sqrtf((float)(v / (O > 1 ? O - 1 : 1)) + NORM_PIX_EPS);
            }
            for (int64_t e = 0; e < O; e++) {
                int64_t at = b * img + pix(C, S, p, G, n, e);
                recon[at] = norm_pix ? pr[e] * sd + mu : pr[e];
                if (masked) masked[at] = 0.0f;
            }
        }
}
