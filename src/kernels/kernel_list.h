/* kernel_list.h: THE closed list of kernels a training step is made of -- the contract a backend
 * implements (docs/kernels.md explains each; `vitrine trace --kernels` prints this table). The
 * orchestration (vit.c, block.c, objectives.c, classify.c, optim.c, trainer.c, api.c) only
 * sequences these calls over planned buffers; exec.c turns the list into the typed entry points
 * vt_k_<name>(model, operands..., ints..., floats...) it calls, the one dispatch point that runs a
 * call or records it, the replay, and the lengths and FLOPs of each call (kernel_gen.h explains
 * the columns). Adding a kernel: an entry here, its scalar reference, its dispatch, docs/kernels.md
 * (a test checks the doc names every kernel).
 * FLOPs: multiply + add = 2; element-wise and data-movement kernels count their arithmetic. */
#ifndef VT_KERNEL_LIST_H
#define VT_KERNEL_LIST_H
#include "kernels.h"
#include "ops.h"

/* elements spanned by `rows` rows of `cols` at row stride `stride` */
static inline int64_t vt_extent(int64_t rows, int64_t cols, int64_t stride) {
    return rows > 0 ? (rows - 1) * stride + cols : 0;
}

/* elements spanned by B matrices (batch stride bs) of `rows` rows of `cols` (row stride rs) */
static inline int64_t vt_extent3(int64_t B, int64_t rows, int64_t cols, int64_t bs, int64_t rs) {
    return B > 0 && rows > 0 && cols > 0 ? (B - 1) * bs + (rows - 1) * rs + cols : 0;
}

/* the kernel list is a table, kept as laid out by hand */
// clang-format off
#define VT_KERNEL_LIST(X)                                                                           \
    /* ---- the GEMM family (kernels.h) ---- */                                                    \
    X(matmul_forward, (M, K, N), (),                                                                \
      ((out, F32, W, M * N), (inp, F32, R, M * K), (w, F32, R, N * K), (bias, F32, R, N)),          \
      2.0 * M * K * N, vt_matmul_forward(out, inp, w, bias, M, K, N),                               \
      "out[M,N] = inp[M,K] w[N,K]^T + bias[N]")                                                    \
    X(matmul_backward, (M, K, N), (),                                                               \
      ((dinp, F32, RW, M * K), (dw, F32, RW, N * K), (dbias, F32, RW, N), (dout, F32, R, M * N),    \
       (inp, F32, R, M * K), (w, F32, R, N * K)),                                                   \
      (dinp ? 2.0 * M * K * N : 0) + (dw ? 2.0 * M * K * N : 0) + (dbias ? 1.0 * M * N : 0),        \
      vt_matmul_backward(dinp, dw, dbias, dout, inp, w, M, K, N),                                   \
      "dinp += dout w; dw += dout^T inp; dbias += column sums of dout")                            \
    X(layernorm_forward, (M, D), (eps),                                                             \
      ((out, F32, W, M * D), (mean, F32, W, M), (rstd, F32, W, M), (inp, F32, R, M * D),            \
       (w, F32, R, D), (b, F32, R, D)),                                                             \
      8.0 * M * D, vt_layernorm_forward(out, mean, rstd, inp, w, b, M, D, eps),                     \
      "out = (inp - mean) * rstd * w + b per row of D (out may be inp)")                           \
    X(layernorm_backward, (M, D), (),                                                               \
      ((dinp, F32, RW, M * D), (dw, F32, RW, D), (db, F32, RW, D), (dout, F32, R, M * D),           \
       (inp, F32, R, M * D), (w, F32, R, D), (mean, F32, R, M), (rstd, F32, R, M)),                 \
      (dinp ? 12.0 * M * D : 0) + (dw ? 6.0 * M * D : db ? 6.0 * M * D : 0),                                     \
      vt_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, M, D),                          \
      "dinp += d/dinp; dw += sum dout * norm; db += sum dout")                                     \
    X(gelu_forward, (n), (), ((out, F32, W, n), (inp, F32, R, n)), 30.0 * n,                        \
      vt_gelu_forward(out, inp, n), "out = 0.5 inp (1 + erf(inp / sqrt 2))")                       \
    X(gelu_backward, (n), (), ((dinp, F32, W, n), (inp, F32, R, n), (dout, F32, R, n)), 40.0 * n,   \
      vt_gelu_backward(dinp, inp, dout, n), "dinp = dout gelu'(inp) (overwrites; may be dout)")     \
    X(quick_gelu_forward, (n), (), ((out, F32, W, n), (inp, F32, R, n)), 20.0 * n,                  \
      vt_quick_gelu_forward(out, inp, n), "out = inp sigmoid(1.702 inp) (OpenAI CLIP's QuickGELU)") \
    X(quick_gelu_backward, (n), (), ((dinp, F32, W, n), (inp, F32, R, n), (dout, F32, R, n)), 25.0 * n, \
      vt_quick_gelu_backward(dinp, inp, dout, n),                                                    \
      "dinp = dout s + ((dout inp)(1 - s)) s 1.702, s = sigmoid(1.702 inp) (overwrites; may be dout)") \
    X(gelu_tanh_forward, (n), (), ((out, F32, W, n), (inp, F32, R, n)), 30.0 * n,                   \
      vt_gelu_tanh_forward(out, inp, n), "out = 0.5 inp (1 + tanh(sqrt(2/pi) (inp + 0.044715 inp^3)))") \
    X(gelu_tanh_backward, (n), (), ((dinp, F32, W, n), (inp, F32, R, n), (dout, F32, R, n)), 40.0 * n, \
      vt_gelu_tanh_backward(dinp, inp, dout, n),                                                     \
      "dinp = dout gelu_tanh'(inp) (ATen's formula; overwrites; may be dout)")                       \
    X(rmsnorm_forward, (M, D), (eps),                                                               \
      ((out, F32, W, M * D), (rstd, F32, W, M), (inp, F32, R, M * D), (w, F32, R, D)),              \
      6.0 * M * D, vt_rmsnorm_forward(out, rstd, inp, w, M, D, eps),                                \
      "rstd = 1/sqrt(mean(inp^2) + eps); out = (inp rstd) w per row of D (out may be inp)")         \
    X(rmsnorm_backward, (M, D), (),                                                                 \
      ((dinp, F32, RW, M * D), (dw, F32, RW, D), (dout, F32, R, M * D), (inp, F32, R, M * D),       \
       (w, F32, R, D), (rstd, F32, R, M)),                                                          \
      (dinp ? 10.0 * M * D : 0) + (dw ? 2.0 * M * D : 0),                                           \
      vt_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, M, D),                                      \
      "dinp += rstd (dn - n mean(dn n)), n = inp rstd, dn = w dout; dw += sum dout n")              \
    X(attention_forward, (qk_rs, v_rs, B, T, H, hd, threads), (scale),                              \
      ((out, F32, W, B * T * H * hd), (att, F32, W, B * H * T * T),                                 \
       (scratch, F32, W, vt_attention_scratch_floats(T, hd, threads)),                              \
       (q, F32, R, vt_extent(B * T, H * hd, qk_rs)), (k, F32, R, vt_extent(B * T, H * hd, qk_rs)),  \
       (v, F32, R, vt_extent(B * T, H * hd, v_rs)), (causal_mask, U8, R, B * T)),                   \
      4.0 * B * H * T * T * hd + 5.0 * B * H * T * T,                                               \
      vt_attention_forward(out, att, scratch, q, k, qk_rs, v, v_rs, causal_mask, B, T, H, hd,       \
                           threads, scale),                                                         \
      "att = softmax(scale q k^T, prefix-causal mask); out = att v, per (image, head)")            \
    X(attention_backward, (qk_rs, v_rs, B, T, H, hd, threads), (scale),                             \
      ((dq, F32, RW, vt_extent(B * T, H * hd, qk_rs)), (dk, F32, RW, vt_extent(B * T, H * hd, qk_rs)), \
       (dv, F32, RW, vt_extent(B * T, H * hd, v_rs)),                                               \
       (scratch, F32, W, vt_attention_scratch_floats(T, hd, threads)),                              \
       (dout, F32, R, B * T * H * hd), (att, F32, R, B * H * T * T),                                \
       (q, F32, R, vt_extent(B * T, H * hd, qk_rs)), (k, F32, R, vt_extent(B * T, H * hd, qk_rs)),  \
       (v, F32, R, vt_extent(B * T, H * hd, v_rs))),                                                \
      8.0 * B * H * T * T * hd + 5.0 * B * H * T * T,                                               \
      vt_attention_backward(dq, dk, dv, scratch, dout, att, q, k, qk_rs, v, v_rs, B, T, H, hd,      \
                            threads, scale),                                                        \
      "dq, dk, dv += the attention's gradients (att saved by the forward)")                        \
    X(cross_attention_forward, (B, Tq, Tk, H, hd, q_bs, kv_rs), (scale),                             \
      ((out, F32, W, B * Tq * H * hd), (att, F32, W, B * H * Tq * Tk),                              \
       (q, F32, R, vt_extent(B, Tq * H * hd, q_bs)), (k, F32, R, vt_extent(B * Tk, H * hd, kv_rs)),  \
       (v, F32, R, vt_extent(B * Tk, H * hd, kv_rs))),                                              \
      4.0 * B * H * Tq * Tk * hd + 5.0 * B * H * Tq * Tk,                                           \
      vt_cross_attention_forward(out, att, q, k, v, B, Tq, Tk, H, hd, q_bs, kv_rs, scale),         \
      "att = softmax(scale q k^T) of Tq queries (image stride q_bs; 0: shared) over Tk keys; out = att v") \
    X(cross_attention_backward, (B, Tq, Tk, H, hd, q_bs, kv_rs), (scale),                            \
      ((dq, F32, RW, vt_extent(B, Tq * H * hd, q_bs)), (dk, F32, RW, vt_extent(B * Tk, H * hd, kv_rs)), \
       (dv, F32, RW, vt_extent(B * Tk, H * hd, kv_rs)), (dscore, F32, RW, B * H * Tq * Tk),         \
       (dout, F32, R, B * Tq * H * hd), (att, F32, R, B * H * Tq * Tk),                             \
       (q, F32, R, vt_extent(B, Tq * H * hd, q_bs)), (k, F32, R, vt_extent(B * Tk, H * hd, kv_rs)),  \
       (v, F32, R, vt_extent(B * Tk, H * hd, kv_rs))),                                              \
      8.0 * B * H * Tq * Tk * hd + 5.0 * B * H * Tq * Tk,                                           \
      vt_cross_attention_backward(dq, dk, dv, dscore, dout, att, q, k, v, B, Tq, Tk, H, hd, q_bs,  \
                                  kv_rs, scale),                                                    \
      "dq (images in order when shared), dk, dv += its gradients; dscore: scratch")                \
    /* ---- data movement and element-wise (ops.h) ---- */                                         \
    X(fill, (n), (value), ((x, F32, W, n)), 0.0, vt_fill(x, n, value), "x = value")                \
    X(copy2d, (rows, cols, dst_stride, src_stride), (),                                             \
      ((dst, F32, RW, vt_extent(rows, cols, dst_stride)), (src, F32, R, vt_extent(rows, cols, src_stride))), \
      0.0, vt_copy2d(dst, src, rows, cols, dst_stride, src_stride),                                 \
      "dst rows = src rows (strided; src_stride 0 broadcasts one row)")                            \
    X(add2d, (rows, cols, dst_stride, src_stride), (),                                              \
      ((dst, F32, RW, vt_extent(rows, cols, dst_stride)), (src, F32, R, vt_extent(rows, cols, src_stride))), \
      1.0 * rows * cols, vt_add2d(dst, src, rows, cols, dst_stride, src_stride),                    \
      "dst rows += src rows (residual adds, gradient sums)")                                       \
    X(transpose, (B, R, C, dst_bs, dst_rs, src_bs, src_rs), (),                                     \
      ((dst, F32, RW, vt_extent3(B, C, R, dst_bs, dst_rs)),                                         \
       (src, F32, R, vt_extent3(B, R, C, src_bs, src_rs))),                                         \
      0.0, vt_transpose(dst, src, B, R, C, dst_bs, dst_rs, src_bs, src_rs),                         \
      "dst[b dst_bs + c dst_rs + r] = src[b src_bs + r src_rs + c] (R x C matrices transposed)")    \
    X(add_rows, (rows, n, stride), (),                                                              \
      ((out, F32, RW, vt_extent(rows, n, stride)), (x, F32, R, vt_extent(rows, n, stride)),         \
       (y, F32, R, n)),                                                                             \
      1.0 * rows * n, vt_add_rows(out, x, y, rows, n, stride),                                      \
      "out row = x row + y (positional embedding; y absent: + 0)")                                 \
    X(sum_rows, (rows, n, stride), (), ((out, F32, RW, n), (x, F32, R, vt_extent(rows, n, stride))), \
      1.0 * rows * n, vt_sum_rows(out, x, rows, n, stride), "out += sum of the rows of x, in order") \
    X(layerscale_forward, (M, D), (),                                                               \
      ((out, F32, W, M * D), (x, F32, R, M * D), (g, F32, R, D), (y, F32, R, M * D)),               \
      2.0 * M * D, vt_layerscale_forward(out, x, g, y, M, D), "out = x + g * y (LayerScale residual)") \
    X(layerscale_backward, (M, D), (),                                                              \
      ((dbranch, F32, W, M * D), (dg, F32, RW, D), (g, F32, R, D), (dy, F32, R, M * D),             \
       (branch, F32, R, M * D)),                                                                    \
      3.0 * M * D, vt_layerscale_backward(dbranch, dg, g, dy, branch, M, D),                        \
      "dbranch = g * dy; dg += sum over rows of dy * branch")                                      \
    X(im2col, (m0, n, C, S, p, G), (),                                                              \
      ((patches, F32, W, n * C * p * p), (images, F32, R, ((m0 + n - 1) / (G * G) + 1) * C * S * S)), \
      0.0, vt_im2col(patches, images, m0, n, C, S, p, G), "patch rows m0.. of the images")         \
    X(col2im_add, (m0, n, C, S, p, G), (),                                                          \
      ((dimages, F32, RW, ((m0 + n - 1) / (G * G) + 1) * C * S * S), (dpatches, F32, R, n * C * p * p)), \
      1.0 * n * C * p * p, vt_col2im_add(dimages, dpatches, m0, n, C, S, p, G),                     \
      "dimages += the patch rows m0.. put back")                                                   \
    X(im2col_hw, (m0, n, C, H, W, p, Gh, Gw), (),                                                 \
      ((patches, F32, W, n * C * p * p), (images, F32, R, ((m0 + n - 1) / (Gh * Gw) + 1) * C * H * W)), \
      0.0, vt_im2col_hw(patches, images, m0, n, C, H, W, p, Gh, Gw),                                \
      "patch rows m0.. of H x W images on a Gh x Gw grid (0 past the image: padding)")             \
    X(col2im_add_hw, (m0, n, C, H, W, p, Gh, Gw), (),                                             \
      ((dimages, F32, RW, ((m0 + n - 1) / (Gh * Gw) + 1) * C * H * W), (dpatches, F32, R, n * C * p * p)), \
      1.0 * n * C * p * p, vt_col2im_add_hw(dimages, dpatches, m0, n, C, H, W, p, Gh, Gw),          \
      "dimages += the patch rows m0.. put back (pixels inside the image)")                         \
    X(resample_aa_forward, (outer, n_in, n_out, inner), (),                                         \
      ((out, F32, W, outer * n_out * inner), (inp, F32, R, outer * n_in * inner)),                  \
      2.0 * outer * n_out * inner * vt_resample_aa_max_taps(n_in, n_out),                           \
      vt_resample_aa_forward(out, inp, outer, n_in, n_out, inner),                                  \
      "out = the antialiased bicubic resize of inp's middle axis, n_in -> n_out (PyTorch's taps)")  \
    X(resample_aa_backward, (outer, n_in, n_out, inner), (),                                        \
      ((dinp, F32, RW, outer * n_in * inner), (dout, F32, R, outer * n_out * inner)),               \
      2.0 * outer * n_out * inner * vt_resample_aa_max_taps(n_in, n_out),                           \
      vt_resample_aa_backward(dinp, dout, outer, n_in, n_out, inner),                               \
      "dinp += each output's gradient times its taps' weights, outputs in order")                  \
    X(add_scaled, (n), (alpha), ((dst, F32, RW, n), (src, F32, R, n)), 2.0 * n,                      \
      vt_add_scaled(dst, src, n, alpha), "dst += alpha src")                                       \
    X(mask_select, (B, L, D, K), (),                                                                \
      ((seq, F32, RW, B * L * D), (mask_token, F32, R, D), (idx, I64, R, B * K), (mask, U8, R, B * L)), \
      0.0, vt_mask_select(seq, mask_token, idx, mask, B, L, D, K),                                  \
      "masked rows of seq = mask_token (rows idx[b], else rows with mask != 0)")                   \
    X(mask_token_backward, (B, L, D, K), (),                                                        \
      ((dmt, F32, RW, D), (dseq, F32, R, B * L * D), (idx, I64, R, B * K), (mask, U8, R, B * L)),   \
      1.0 * B * L * D, vt_mask_token_backward(dmt, dseq, idx, mask, B, L, D, K),                    \
      "dmt += dseq's masked rows, (b, l) ascending")                                               \
    X(prefix_tokens_backward, (B, L, D, K, cls, R), (),                                             \
      ((dcls, F32, RW, D), (dreg, F32, RW, R * D), (dseq, F32, R, B * L * D), (idx, I64, R, B * K), \
       (mask, U8, R, B * L)),                                                                       \
      1.0 * B * (cls + R) * D, vt_prefix_tokens_backward(dcls, dreg, dseq, idx, mask, B, L, D, K, cls, R), \
      "dcls, dreg += dseq's unmasked prefix rows, b ascending")                                    \
    X(patch_tokens_backward, (B, L, D, K, P), (),                                                   \
      ((dtok, F32, W, B * (L - P) * D), (dseq, F32, R, B * L * D), (idx, I64, R, B * K),            \
       (mask, U8, R, B * L)),                                                                       \
      0.0, vt_patch_tokens_backward(dtok, dseq, idx, mask, B, L, D, K, P),                          \
      "dtok = dseq's patch rows, 0 where masked")                                                  \
    X(gather_rows, (B, L, K, D), (),                                                                \
      ((out, F32, W, B * K * D), (x, F32, R, B * L * D), (idx, I64, R, B * K)),                     \
      0.0, vt_gather_rows(out, x, idx, B, L, K, D), "out[b,k] = x[b, idx[b,k]]")                   \
    X(scatter_rows, (B, L, K, D), (),                                                               \
      ((out, F32, RW, B * L * D), (x, F32, R, B * K * D), (idx, I64, R, B * K)),                    \
      0.0, vt_scatter_rows(out, x, idx, B, L, K, D), "out[b, idx[b,k]] = x[b,k]")                  \
    X(scatter_add_rows, (B, L, K, D), (),                                                           \
      ((out, F32, RW, B * L * D), (x, F32, R, B * K * D), (idx, I64, R, B * K)),                    \
      1.0 * B * K * D, vt_scatter_add_rows(out, x, idx, B, L, K, D),                                \
      "out[b, idx[b,k]] += x[b,k], k ascending")                                                   \
    X(gather_rows_except, (B, L, K, Kx, D), (),                                                     \
      ((out, F32, RW, B * K * D), (x, F32, R, B * L * D), (idx, I64, R, B * K),                     \
       (except, I64, R, B * Kx)),                                                                   \
      0.0, vt_gather_rows_except(out, x, idx, except, B, L, K, Kx, D),                              \
      "out[b,k] = x[b, idx[b,k]] unless idx[b,k] is in except[b]")                                \
    X(sum_rows_at, (B, L, K, D), (),                                                                \
      ((out, F32, RW, D), (x, F32, R, B * L * D), (idx, I64, R, B * K)),                            \
      1.0 * B * K * D, vt_sum_rows_at(out, x, idx, B, L, K, D),                                     \
      "out += x[b, idx[b,k]], (b, k) ascending")                                                   \
    X(layernorm_backward_rows, (B, L, K, D), (),                                                    \
      ((dinp, F32, RW, B * L * D), (dw, F32, RW, D), (db, F32, RW, D), (dout, F32, R, B * K * D),   \
       (inp, F32, R, B * L * D), (w, F32, R, D), (mean, F32, R, B * L), (rstd, F32, R, B * L),      \
       (idx, I64, R, B * K)),                                                                       \
      18.0 * B * K * D, vt_layernorm_backward_rows(dinp, dw, db, dout, inp, w, mean, rstd, idx, B, L, K, D), \
      "layernorm_backward of the rows idx[b], one row at a time, (b, k) ascending")                \
    X(pool_forward, (B, T, D, P, kind), (), ((y, F32, W, B * D), (x, F32, R, B * T * D)),           \
      1.0 * B * (T - P) * D, vt_pool_forward(y, x, B, T, D, P, kind),                               \
      "y = token row 0, or avg, max, (max + avg) / 2 over rows P..T-1")                            \
    X(pool_backward, (B, T, D, P, kind, assign), (),                                                \
      ((dx, F32, RW, B * T * D), (dy, F32, R, B * D), (x, F32, R, B * T * D)),                      \
      3.0 * B * (T - P) * D, vt_pool_backward(dx, dy, x, B, T, D, P, kind, assign),                 \
      "dx += (assign: =) pool_forward's gradient; ties of max share it")                           \
    /* ---- objectives (ops.h) ---- */                                                             \
    X(patch_targets, (B, K, C, S, p, G, offset, norm_pix), (),                                      \
      ((tgt, F32, W, B * K * C * p * p), (trs, F32, W, B * K), (images, F32, R, B * C * S * S),     \
       (idx, I64, R, B * K)),                                                                       \
      (norm_pix ? 5.0 : 0.0) * B * K * C * p * p,                                                   \
      vt_patch_targets(tgt, trs, images, idx, B, K, C, S, p, G, offset, norm_pix),                  \
      "tgt = patches idx[b] - offset of the images, normalised per patch when norm_pix")           \
    X(targets_backward, (B, K, C, S, p, G, offset, norm_pix), (),                                   \
      ((dimages, F32, RW, B * C * S * S), (dt, F32, W, B * K * C * p * p),                          \
       (dpred, F32, R, B * K * C * p * p), (tgt, F32, R, B * K * C * p * p), (trs, F32, R, B * K),  \
       (idx, I64, R, B * K)),                                                                       \
      (norm_pix ? 7.0 : 1.0) * B * K * C * p * p,                                                   \
      vt_targets_backward(dimages, dt, dpred, tgt, trs, idx, B, K, C, S, p, G, offset, norm_pix),   \
      "dimages += the target's gradient, -dpred (through the normalisation)")                      \
    X(mse_forward, (n), (), ((loss, F32, W, 1), (pred, F32, R, n), (tgt, F32, R, n)), 3.0 * n,      \
      vt_mse_forward(loss, pred, tgt, n), "loss = mean (pred - tgt)^2, summed in double in order") \
    X(mse_backward, (n), (),                                                                        \
      ((dpred, F32, W, n), (pred, F32, R, n), (tgt, F32, R, n), (dloss, F32, R, 1)), 2.0 * n,       \
      vt_mse_backward(dpred, pred, tgt, dloss, n), "dpred = 2 dloss / n (pred - tgt)")            \
    X(cross_entropy_forward, (B, C), (smoothing),                                                   \
      ((logp, F32, W, B * C), (loss, F32, W, 1), (logits, F32, R, B * C), (labels, I32, R, B)),     \
      5.0 * B * C, vt_cross_entropy_forward(logp, loss, logits, labels, B, C, smoothing),           \
      "logp = log_softmax(logits); loss = label-smoothed cross-entropy (double, in order)")         \
    X(cross_entropy_backward, (B, C), (smoothing),                                                  \
      ((dlogits, F32, W, B * C), (logp, F32, R, B * C), (labels, I32, R, B), (dloss, F32, R, 1)),   \
      3.0 * B * C, vt_cross_entropy_backward(dlogits, logp, labels, dloss, B, C, smoothing),        \
      "dlogits = dloss / B (softmax - smoothed one-hot)")                                          \
    /* ---- gradients and the optimizer (ops.h) ---- */                                            \
    X(grad_norm, (n), (), ((norm, F64, W, 1), (g, F32, R, n)), 2.0 * n, vt_grad_norm(norm, g, n),   \
      "norm = sqrt(sum g^2), in double, in order")                                                 \
    X(clip_grads, (n), (max_norm), ((g, F32, RW, n), (norm, F64, R, 1)), 1.0 * n,                   \
      vt_clip_grads(g, norm, n, max_norm),                                                          \
      "g *= max_norm / (norm + 1e-6) when below 1 (and norm finite)")                              \
    X(check_finite, (n), (), ((flag, F32, RW, 1), (x, F32, R, n)), 1.0 * n,                         \
      vt_check_finite(flag, x, n), "flag = 1 if flag or any x is NaN / infinite, else 0")          \
    X(adamw, (n), (b1, b2, eps, wd),                                                                \
      ((p, F32, RW, n), (m, F32, RW, n), (v, F32, RW, n), (g, F32, R, n), (lr, F32, R, 1),          \
       (step, F32, R, 1), (flag, F32, R, 1), (bad, F32, RW, 1)),                                    \
      12.0 * n, vt_adamw(p, m, v, g, lr, step, flag, bad, n, b1, b2, eps, wd),                      \
      "torch AdamW at learning rate *lr, step *step; nothing when *flag; bad = 1 when a new value is not finite") \
    /* ---- teaching (not part of a step) ---- */                                                  \
    X(unpatchify, (B, K, C, S, p, G, offset, norm_pix), (),                                         \
      ((recon, F32, RW, B * C * S * S), (masked, F32, RW, B * C * S * S),                           \
       (pred, F32, R, B * K * C * p * p), (images, F32, R, B * C * S * S), (idx, I64, R, B * K)),   \
      0.0, vt_unpatchify(recon, masked, pred, images, idx, B, K, C, S, p, G, offset, norm_pix),     \
      "predicted patches into recon (de-normalised), zeros into masked")
// clang-format on

#endif
