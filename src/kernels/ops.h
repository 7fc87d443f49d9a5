/* ops.h: the kernels of a step besides the GEMM family of kernels.h -- the data movement and the
 * small reductions the orchestration used to loop over itself: fills and copies, residual and
 * LayerScale adds, patch embedding's im2col, token assembly and masking, row gathers and
 * scatters, pooling, MAE / AIM targets and losses, cross-entropy, gradient norm, clipping, the
 * non-finite check and AdamW. Each has a scalar reference vt_ref_<name> (kernels_ops_ref.c, the
 * semantics, kept for good) and a dispatch vt_<name> (kernels_ops.c: threads and SIMD where they
 * pay, the same bits as the reference). kernel_list.h lists them with the GEMM family: the closed
 * list of kernels a backend implements (docs/kernels.md).
 *
 * Conventions (kernels.h): outputs first, then inputs, then sizes; row-major; an accumulating
 * output is +=; an optional operand may be NULL. Sizes are int64_t (the record keeps them so).
 * Indices (idx_keep, idx_mask) are int64 rows of K per image, addressing the image's L rows; a
 * token `mask` is bytes [B, L] (nonzero = masked). Nothing allocates. */
#ifndef VT_OPS_H
#define VT_OPS_H
#include <stddef.h>
#include <stdint.h>

/* pooling kinds of pool_forward / pool_backward (timm's global_pool; '' has no kernel) */
enum { VT_POOLK_TOKEN = 0, VT_POOLK_AVG, VT_POOLK_MAX, VT_POOLK_AVGMAX };

#define VT_OPS_DECL(name, ...)                                                                               \
    void vt_##name(__VA_ARGS__);                                                                             \
    void vt_ref_##name(__VA_ARGS__);

/* x[0:n] = value */
VT_OPS_DECL(fill, float *x, int64_t n, float value)
/* dst[r*dst_stride + c] = src[r*src_stride + c], r < rows, c < cols (src_stride 0: one row for all;
 * dst and src do not overlap) */
VT_OPS_DECL(copy2d, float *dst, const float *src, int64_t rows, int64_t cols, int64_t dst_stride,
            int64_t src_stride)
/* dst[r*dst_stride + c] += src[r*src_stride + c] (residual adds, gradient sums) */
VT_OPS_DECL(add2d, float *dst, const float *src, int64_t rows, int64_t cols, int64_t dst_stride,
            int64_t src_stride)
/* A batch of R x C matrices transposed: dst[b*dst_bs + c*dst_rs + r] = src[b*src_bs + r*src_rs + c]
 * for b < B, r < R, c < C (timm's NCHW intermediates: [B, N, D] tokens -> [B, D, N], and back for
 * their gradient; dst and src do not overlap) */
VT_OPS_DECL(transpose, float *dst, const float *src, int64_t B, int64_t R, int64_t C, int64_t dst_bs,
            int64_t dst_rs, int64_t src_bs, int64_t src_rs)
/* out[r, e] = x[r, e] + y[e] for rows of n at row stride `stride` (positional embedding;
 * out may be x; y NULL adds +0.0f) */
VT_OPS_DECL(add_rows, float *out, const float *x, const float *y, int64_t rows, int64_t n, int64_t stride)
/* out[e] += sum over r, in order, of x[r*stride + e] (the gradient of add_rows' y) */
VT_OPS_DECL(sum_rows, float *out, const float *x, int64_t rows, int64_t n, int64_t stride)
/* LayerScale residual: out[m, d] = x[m, d] + g[d] * y[m, d] */
VT_OPS_DECL(layerscale_forward, float *out, const float *x, const float *g, const float *y, int64_t M,
            int64_t D)
/* its backward: dy_branch = g * dy; dg[d] += sum over m, in order, of dy[m, d] * branch[m, d] */
VT_OPS_DECL(layerscale_backward, float *dbranch, float *dg, const float *g, const float *dy,
            const float *branch, int64_t M, int64_t D)

/* Patch embedding as a matmul: patches[m - m0][(c, i, j)] = images[b, c, r*p + i, q*p + j] for
 * patch rows m in [m0, m0 + n) (m = b*G*G + r*G + q; images [*, C, S, S], S = G*p) */
VT_OPS_DECL(im2col, float *patches, const float *images, int64_t m0, int64_t n, int64_t C, int64_t S,
            int64_t p, int64_t G)
/* dimages += col2im(dpatches) for the same rows (patches do not overlap) */
VT_OPS_DECL(col2im_add, float *dimages, const float *dpatches, int64_t m0, int64_t n, int64_t C, int64_t S,
            int64_t p, int64_t G)

/* The same for any image and grid (timm's PatchEmbed: a non-square image, a grid floored when the
 * image is not a multiple of the patch, or padded with zeros up to one (dynamic_img_pad)):
 * patches[m - m0][(c, i, j)] = images[b, c, r*p + i, q*p + j], 0 outside the H x W image, for
 * m = b*Gh*Gw + r*Gw + q (images [*, C, H, W]); col2im_add_hw adds back the pixels inside */
VT_OPS_DECL(im2col_hw, float *patches, const float *images, int64_t m0, int64_t n, int64_t C, int64_t H,
            int64_t W, int64_t p, int64_t Gh, int64_t Gw)
VT_OPS_DECL(col2im_add_hw, float *dimages, const float *dpatches, int64_t m0, int64_t n, int64_t C, int64_t H,
            int64_t W, int64_t p, int64_t Gh, int64_t Gw)

/* One separable pass of PyTorch's antialiased bicubic resize (F.interpolate(mode='bicubic',
 * antialias=True, align_corners=False): Pillow's filter, a = -0.5, widened by the scale when
 * shrinking, weights normalised to sum 1, vt_resample_aa_taps) along the middle axis of
 * inp [outer, n_in, inner] -> out [outer, n_out, inner]: out[o, y, c] = sum_t w_t(y) inp[o, x_t(y), c],
 * the taps in order (timm's resample_abs_pos_embed of a pos_embed, dynamic_img_size). Its backward
 * adds each output's gradient back to its taps: dinp[o, x_t(y), c] += w_t(y) dout[o, y, c], y then
 * t ascending. */
VT_OPS_DECL(resample_aa_forward, float *out, const float *inp, int64_t outer, int64_t n_in, int64_t n_out,
            int64_t inner)
VT_OPS_DECL(resample_aa_backward, float *dinp, const float *dout, int64_t outer, int64_t n_in, int64_t n_out,
            int64_t inner)
/* The taps of output y of that resize of n_in samples to n_out: sources x0 .. x0 + count - 1 with
 * weights w[0 .. count - 1] (w holds max; count is returned, at most vt_resample_aa_max_taps).
 * The kernels take resizes of at most VT_RESAMPLE_MAX_TAPS taps (the engine checks it). */
#define VT_RESAMPLE_MAX_TAPS 1024
int64_t vt_resample_aa_max_taps(int64_t n_in, int64_t n_out);
int64_t vt_resample_aa_taps(int64_t n_in, int64_t n_out, int64_t y, int64_t *x0, float *w, int64_t max);

/* dst[i] += alpha * src[i] (DeiT's (head + head_dist) / 2: halves added to a zeroed output) */
VT_OPS_DECL(add_scaled, float *dst, const float *src, int64_t n, float alpha)

/* Masking with a mask token: the masked rows of seq [B, L, D] become mask_token [D]. Masked: the
 * K rows idx[b, :] when idx is given, else the rows l with mask[b, l] != 0. */
VT_OPS_DECL(mask_select, float *seq, const float *mask_token, const int64_t *idx, const uint8_t *mask,
            int64_t B, int64_t L, int64_t D, int64_t K)
/* dmt[d] += dseq[b, l, d] over the masked rows, b then l ascending */
VT_OPS_DECL(mask_token_backward, float *dmt, const float *dseq, const int64_t *idx, const uint8_t *mask,
            int64_t B, int64_t L, int64_t D, int64_t K)
/* the prefix tokens' gradients, masked rows excluded: dcls[d] += dseq[b, 0, d] (cls 1), dreg[r, d]
 * += dseq[b, cls + r, d], b ascending; either output may be NULL */
VT_OPS_DECL(prefix_tokens_backward, float *dcls, float *dreg, const float *dseq, const int64_t *idx,
            const uint8_t *mask, int64_t B, int64_t L, int64_t D, int64_t K, int64_t cls, int64_t R)
/* the patch tokens' gradient: dtok[b, n] = masked(b, P + n) ? 0 : dseq[b, P + n], n < L - P */
VT_OPS_DECL(patch_tokens_backward, float *dtok, const float *dseq, const int64_t *idx, const uint8_t *mask,
            int64_t B, int64_t L, int64_t D, int64_t K, int64_t P)

/* Rows by index: out[b, k] = x[b, idx[b, k]] (x [B, L, D], out [B, K, D]) */
VT_OPS_DECL(gather_rows, float *out, const float *x, const int64_t *idx, int64_t B, int64_t L, int64_t K,
            int64_t D)
/* out[b, idx[b, k]] = x[b, k] (distinct indices; other rows kept) */
VT_OPS_DECL(scatter_rows, float *out, const float *x, const int64_t *idx, int64_t B, int64_t L, int64_t K,
            int64_t D)
/* out[b, idx[b, k]] += x[b, k], k ascending (a repeated index adds up): gather_rows' backward */
VT_OPS_DECL(scatter_add_rows, float *out, const float *x, const int64_t *idx, int64_t B, int64_t L, int64_t K,
            int64_t D)
/* out[b, k] = x[b, idx[b, k]] unless idx[b, k] is one of except[b, 0:Kx] (then the row is kept) */
VT_OPS_DECL(gather_rows_except, float *out, const float *x, const int64_t *idx, const int64_t *except,
            int64_t B, int64_t L, int64_t K, int64_t Kx, int64_t D)
/* out[d] += x[b, idx[b, k], d] over b, then k ascending */
VT_OPS_DECL(sum_rows_at, float *out, const float *x, const int64_t *idx, int64_t B, int64_t L, int64_t K,
            int64_t D)
/* layernorm_backward of the rows idx[b, :] of inp [B, L, D] (dout [B, K, D] holds their upstream
 * gradients, in that order; the row statistics are mean, rstd [B, L]): row by row, (b, k) order */
VT_OPS_DECL(layernorm_backward_rows, float *dinp, float *dw, float *db, const float *dout, const float *inp,
            const float *w, const float *mean, const float *rstd, const int64_t *idx, int64_t B, int64_t L,
            int64_t K, int64_t D)

typedef void (*vt_layernorm_backward_fn)(float *, float *, float *, const float *, const float *,
                                         const float *, const float *, const float *, int, int);
void vt_layernorm_backward_rows_by(vt_layernorm_backward_fn ln, float *dinp, float *dw, float *db,
                                   const float *dout, const float *inp, const float *w, const float *mean,
                                   const float *rstd, const int64_t *idx, int64_t B, int64_t L, int64_t K,
                                   int64_t D);

/* timm's pooling over x [B, T, D] to y [B, D]: token x[:, 0]; avg / max / avgmax (= (max + avg) / 2)
 * over the tokens P..T-1 (kinds VT_POOLK_*) */
VT_OPS_DECL(pool_forward, float *y, const float *x, int64_t B, int64_t T, int64_t D, int64_t P, int64_t kind)
/* its backward into dx [B, T, D]: += (assign 0), or = on the pooled rows (assign 1, dx zero elsewhere:
 * lightly's forward); max's gradient is shared evenly by the tied maxima (PyTorch's amax) */
VT_OPS_DECL(pool_backward, float *dx, const float *dy, const float *x, int64_t B, int64_t T, int64_t D,
            int64_t P, int64_t kind, int64_t assign)

/* Targets of the MAE / AIM losses: tgt[b, j] = patchify(images)[b, n] (lightly's order: pixel
 * (py, px), channel fastest), n = idx[b, j] - offset (idx NULL: n = j), per-patch normalised when
 * norm_pix (trs[b, j] = 1/std, unbiased variance + 1e-6, statistics in double) */
VT_OPS_DECL(patch_targets, float *tgt, float *trs, const float *images, const int64_t *idx, int64_t B,
            int64_t K, int64_t C, int64_t S, int64_t p, int64_t G, int64_t offset, int64_t norm_pix)
/* The target's gradient into the images: dt = -dpred (through the normalisation when norm_pix),
 * added to the patch's pixels of dimages; dt [B, K, C*p*p] is scratch */
VT_OPS_DECL(targets_backward, float *dimages, float *dt, const float *dpred, const float *tgt,
            const float *trs, const int64_t *idx, int64_t B, int64_t K, int64_t C, int64_t S, int64_t p,
            int64_t G, int64_t offset, int64_t norm_pix)
/* *loss = mean((pred - tgt)^2) (sum in double, in order) */
VT_OPS_DECL(mse_forward, float *loss, const float *pred, const float *tgt, int64_t n)
/* dpred = (2 * dloss / n) * (pred - tgt) */
VT_OPS_DECL(mse_backward, float *dpred, const float *pred, const float *tgt, const float *dloss, int64_t n)
/* Cross-entropy with label smoothing s (timm's LabelSmoothingCrossEntropy; log-softmax in double):
 * logp = log_softmax(logits), *loss = mean_b [(1-s) * -logp[b, y_b] + s * mean_c(-logp[b, c])] */
VT_OPS_DECL(cross_entropy_forward, float *logp, float *loss, const float *logits, const int32_t *labels,
            int64_t B, int64_t C, float smoothing)
/* dlogits = dloss / B * (exp(logp) - (1-s) [c == y_b] - s / C) */
VT_OPS_DECL(cross_entropy_backward, float *dlogits, const float *logp, const int32_t *labels,
            const float *dloss, int64_t B, int64_t C, float smoothing)

/* *norm = sqrt(sum g^2), the sum in double, in order (torch's clip_grad_norm_) */
VT_OPS_DECL(grad_norm, double *norm, const float *g, int64_t n)
/* g *= (float)(max_norm / (norm + 1e-6)) when that is below 1 and the norm is finite */
VT_OPS_DECL(clip_grads, float *g, const double *norm, int64_t n, float max_norm)
/* *flag = 1 when *flag != 0 or any x[0:n] is NaN or infinite, else 0 */
VT_OPS_DECL(check_finite, float *flag, const float *x, int64_t n)
/* AdamW on p, m, v [n] with gradient g (vt_adamw_update), unless *flag != 0; the learning rate and
 * the 1-based step count come from *lr and *step (inputs of a recorded step: they vary by step).
 * *bad = 1 when a new p, m or v is NaN or infinite (the finite check fused into the update; never
 * cleared here) */
VT_OPS_DECL(adamw, float *p, float *m, float *v, const float *g, const float *lr, const float *step,
            const float *flag, float *bad, int64_t n, float b1, float b2, float eps, float wd)

/* For teaching (vt_loss_visualize; not part of a step): the predicted patches written into recon
 * [B, C, S, S] (de-normalised with the original patch's statistics when norm_pix); masked (may be
 * NULL) gets zeros there */
VT_OPS_DECL(unpatchify, float *recon, float *masked, const float *pred, const float *images,
            const int64_t *idx, int64_t B, int64_t K, int64_t C, int64_t S, int64_t p, int64_t G,
            int64_t offset, int64_t norm_pix)

#undef VT_OPS_DECL
#endif
