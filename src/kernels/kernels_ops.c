/* kernels_ops.c: dispatch of the kernels in ops.h -- the scalar reference when a test routes to it
 * (vt_kernels_use_reference), else the same code split over the pool's threads where the work is
 * large enough (threads.h). Every split below leaves each element's arithmetic, and the order of
 * every sum, as in one piece: element-wise kernels split over elements or rows, scatters and
 * per-image kernels over images, column sums (positional-embedding and LayerScale gradients, the
 * mask token's) over columns. The reductions whose bits depend on one order (the losses, the
 * gradient norm) stay on one thread. Element-wise loops are vectorised by the compiler (-O3,
 * SIMD128 / SSE2): the references are written so that it can (no multiply-add is ever fused:
 * -ffp-contract=off), which gives the reference's bits in every build. */
#include "ops.h"
#include "kernels.h" /* vt_kernels_reference, vt_layernorm_backward, vt_adamw_step */
#include "../threads.h"
#include "../vitrine.h" /* VT_MAX_TOKENS */
#include <math.h>
#include <string.h>

#define REF (vt_kernels_reference())

/* A split job: the kernel's arguments and the range function for one chunk. */
typedef struct {
    float *o0, *o1;            /* outputs */
    const float *i0, *i1, *i2; /* inputs */
    const int64_t *x0, *x1;    /* index rows */
    const uint8_t *u0;         /* a token mask */
    int64_t n[10];             /* the integer arguments */
    float f[4];
} job;

/* Element-wise work in units of VT_OPS_UNIT elements (n may exceed an int) */
#define VT_OPS_UNIT 4096
static int units(int64_t n) { return (int)((n + VT_OPS_UNIT - 1) / VT_OPS_UNIT); }
static int64_t lo_of(int u) { return (int64_t)u * VT_OPS_UNIT; }
static int64_t hi_of(int u, int64_t n) { return (int64_t)u * VT_OPS_UNIT < n ? (int64_t)u * VT_OPS_UNIT : n; }

/* ---- fill, copy, add ---- */

static void fill_units(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t a = lo_of(lo), b = hi_of(hi, j->n[0]);
    if (j->f[0] == 0.0f && !signbit(j->f[0]))
        memset(j->o0 + a, 0, (size_t)(b - a) * sizeof(float));
    else
        vt_ref_fill(j->o0 + a, b - a, j->f[0]);
}
void vt_fill(float *x, int64_t n, float value) {
    if (REF) {
        vt_ref_fill(x, n, value);
        return;
    }
    job j = { .o0 = x, .n = { n }, .f = { value } };
    vt_parallel_for(units(n), 1, 1.0 * (double)n, fill_units, &j);
}

/* 2-D kernels split over rows; one row (contiguous) over units of its columns */
static void copy_rows(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t rows = j->n[0], cols = j->n[1], ds = j->n[2], ss = j->n[3];
    if (rows == 1) { /* units of one long row */
        int64_t a = lo_of(lo), b = hi_of(hi, cols);
        memcpy(j->o0 + a, j->i0 + a, (size_t)(b - a) * sizeof(float));
        return;
    }
    for (int64_t r = lo; r < hi; r++) memcpy(j->o0 + r * ds, j->i0 + r * ss, (size_t)cols * sizeof(float));
}
static void add_rows2d(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t rows = j->n[0], cols = j->n[1], ds = j->n[2], ss = j->n[3];
    if (rows == 1) {
        int64_t a = lo_of(lo), b = hi_of(hi, cols);
        vt_ref_add2d(j->o0 + a, j->i0 + a, 1, b - a, 0, 0);
        return;
    }
    vt_ref_add2d(j->o0 + lo * ds, j->i0 + lo * ss, hi - lo, cols, ds, ss);
}
static void split2d(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ds, int64_t ss,
                    vt_par_fn fn) {
    if (rows <= 0 || cols <= 0) return;
    job j = { .o0 = dst, .i0 = src, .n = { rows, cols, ds, ss } };
    vt_parallel_for(rows == 1 ? units(cols) : (int)rows, 1, (double)rows * cols, fn, &j);
}
void vt_copy2d(float *dst, const float *src, int64_t rows, int64_t cols, int64_t dst_stride,
               int64_t src_stride) {
    if (REF)
        vt_ref_copy2d(dst, src, rows, cols, dst_stride, src_stride);
    else
        split2d(dst, src, rows, cols, dst_stride, src_stride, copy_rows);
}
void vt_add2d(float *dst, const float *src, int64_t rows, int64_t cols, int64_t dst_stride,
              int64_t src_stride) {
    if (REF)
        vt_ref_add2d(dst, src, rows, cols, dst_stride, src_stride);
    else
        split2d(dst, src, rows, cols, dst_stride, src_stride, add_rows2d);
}

/* transpose: split over the matrices' columns of the destination (rows of R floats written in
 * tiles of 32 x 32 so that both sides stay in cache); a copy, any split gives the same bits */
#define VT_TRANSPOSE_TILE 32
static void transpose_units(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t R = j->n[1], C = j->n[2], dbs = j->n[3], drs = j->n[4], sbs = j->n[5], srs = j->n[6];
    int64_t tiles_c = (C + VT_TRANSPOSE_TILE - 1) / VT_TRANSPOSE_TILE;
    for (int u = lo; u < hi; u++) { /* unit = (b, tile of columns) */
        int64_t b = u / tiles_c, c0 = (u % tiles_c) * VT_TRANSPOSE_TILE;
        int64_t c1 = c0 + VT_TRANSPOSE_TILE < C ? c0 + VT_TRANSPOSE_TILE : C;
        for (int64_t r0 = 0; r0 < R; r0 += VT_TRANSPOSE_TILE) {
            int64_t r1 = r0 + VT_TRANSPOSE_TILE < R ? r0 + VT_TRANSPOSE_TILE : R;
            for (int64_t cc = c0; cc < c1; cc++)
                for (int64_t r = r0; r < r1; r++)
                    j->o0[b * dbs + cc * drs + r] = j->i0[b * sbs + r * srs + cc];
        }
    }
}
void vt_transpose(float *dst, const float *src, int64_t B, int64_t R, int64_t C, int64_t dst_bs,
                  int64_t dst_rs, int64_t src_bs, int64_t src_rs) {
    if (REF || B <= 0 || R <= 0 || C <= 0) {
        vt_ref_transpose(dst, src, B, R, C, dst_bs, dst_rs, src_bs, src_rs);
        return;
    }
    int64_t tiles = B * ((C + VT_TRANSPOSE_TILE - 1) / VT_TRANSPOSE_TILE);
    job j = { .o0 = dst, .i0 = src, .n = { B, R, C, dst_bs, dst_rs, src_bs, src_rs } };
    if (tiles > INT32_MAX) { /* beyond what the pool counts: one piece */
        vt_ref_transpose(dst, src, B, R, C, dst_bs, dst_rs, src_bs, src_rs);
        return;
    }
    vt_parallel_for((int)tiles, 1, (double)B * R * C, transpose_units, &j);
}

static void add_rows_rows(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t s = j->n[2];
    vt_ref_add_rows(j->o0 + lo * s, j->i0 + lo * s, j->i1, hi - lo, j->n[1], s);
}
void vt_add_rows(float *out, const float *x, const float *y, int64_t rows, int64_t n, int64_t stride) {
    if (REF) {
        vt_ref_add_rows(out, x, y, rows, n, stride);
        return;
    }
    job j = { .o0 = out, .i0 = x, .i1 = y, .n = { rows, n, stride } };
    vt_parallel_for((int)rows, 1, (double)rows * n, add_rows_rows, &j);
}

/* column sums: columns [lo, hi) in units, every row in order */
static void sum_rows_cols(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t a = lo_of(lo), b = hi_of(hi, j->n[1]);
    vt_ref_sum_rows(j->o0 + a, j->i0 + a, j->n[0], b - a, j->n[2]);
}
void vt_sum_rows(float *out, const float *x, int64_t rows, int64_t n, int64_t stride) {
    if (REF) {
        vt_ref_sum_rows(out, x, rows, n, stride);
        return;
    }
    job j = { .o0 = out, .i0 = x, .n = { rows, n, stride } };
    vt_parallel_for(units(n), 1, (double)rows * n, sum_rows_cols, &j);
}

static void ls_fwd_rows(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t D = j->n[1];
    vt_ref_layerscale_forward(j->o0 + lo * D, j->i0 + lo * D, j->i1, j->i2 + lo * D, hi - lo, D);
}
void vt_layerscale_forward(float *out, const float *x, const float *g, const float *y, int64_t M, int64_t D) {
    if (REF) {
        vt_ref_layerscale_forward(out, x, g, y, M, D);
        return;
    }
    job j = { .o0 = out, .i0 = x, .i1 = g, .i2 = y, .n = { M, D } };
    vt_parallel_for((int)M, 1, 2.0 * M * D, ls_fwd_rows, &j);
}
/* d branch row by row; dg column by column (its sum over rows stays in row order) */
static void ls_bwd_cols(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t M = j->n[0], D = j->n[1];
    for (int64_t r = 0; r < M; r++)
        for (int64_t d = lo; d < hi; d++) {
            j->o0[r * D + d] = j->i0[d] * j->i1[r * D + d];
            if (j->o1) j->o1[d] += j->i1[r * D + d] * j->i2[r * D + d];
        }
}
void vt_layerscale_backward(float *dbranch, float *dg, const float *g, const float *dy, const float *branch,
                            int64_t M, int64_t D) {
    if (REF) {
        vt_ref_layerscale_backward(dbranch, dg, g, dy, branch, M, D);
        return;
    }
    job j = { .o0 = dbranch, .o1 = dg, .i0 = g, .i1 = dy, .i2 = branch, .n = { M, D } };
    vt_parallel_for((int)D, 4, 3.0 * M * D, ls_bwd_cols, &j);
}

/* ---- patch embedding: patch rows ---- */

static void im2col_rows(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t Kp = j->n[2] * j->n[4] * j->n[4];
    vt_ref_im2col(j->o0 + (int64_t)lo * Kp, j->i0, j->n[0] + lo, hi - lo, j->n[2], j->n[3], j->n[4], j->n[5]);
}
void vt_im2col(float *patches, const float *images, int64_t m0, int64_t n, int64_t C, int64_t S, int64_t p,
               int64_t G) {
    if (REF) {
        vt_ref_im2col(patches, images, m0, n, C, S, p, G);
        return;
    }
    job j = { .o0 = patches, .i0 = images, .n = { m0, n, C, S, p, G } };
    vt_parallel_for((int)n, 1, (double)n * C * p * p, im2col_rows, &j);
}
static void col2im_rows(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t Kp = j->n[2] * j->n[4] * j->n[4];
    vt_ref_col2im_add(j->o0, j->i0 + (int64_t)lo * Kp, j->n[0] + lo, hi - lo, j->n[2], j->n[3], j->n[4],
                      j->n[5]);
}
void vt_col2im_add(float *dimages, const float *dpatches, int64_t m0, int64_t n, int64_t C, int64_t S,
                   int64_t p, int64_t G) {
    if (REF) {
        vt_ref_col2im_add(dimages, dpatches, m0, n, C, S, p, G);
        return;
    }
    job j = { .o0 = dimages, .i0 = dpatches, .n = { m0, n, C, S, p, G } };
    vt_parallel_for((int)n, 1, (double)n * C * p * p, col2im_rows, &j);
}

static void im2col_hw_rows(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t Kp = j->n[2] * j->n[5] * j->n[5];
    vt_ref_im2col_hw(j->o0 + (int64_t)lo * Kp, j->i0, j->n[0] + lo, hi - lo, j->n[2], j->n[3], j->n[4],
                     j->n[5], j->n[6], j->n[7]);
}
void vt_im2col_hw(float *patches, const float *images, int64_t m0, int64_t n, int64_t C, int64_t H, int64_t W,
                  int64_t p, int64_t Gh, int64_t Gw) {
    if (REF) {
        vt_ref_im2col_hw(patches, images, m0, n, C, H, W, p, Gh, Gw);
        return;
    }
    job j = { .o0 = patches, .i0 = images, .n = { m0, n, C, H, W, p, Gh, Gw } };
    vt_parallel_for((int)n, 1, (double)n * C * p * p, im2col_hw_rows, &j);
}
static void col2im_hw_rows(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t Kp = j->n[2] * j->n[5] * j->n[5];
    vt_ref_col2im_add_hw(j->o0, j->i0 + (int64_t)lo * Kp, j->n[0] + lo, hi - lo, j->n[2], j->n[3], j->n[4],
                         j->n[5], j->n[6], j->n[7]);
}
void vt_col2im_add_hw(float *dimages, const float *dpatches, int64_t m0, int64_t n, int64_t C, int64_t H,
                      int64_t W, int64_t p, int64_t Gh, int64_t Gw) {
    if (REF) {
        vt_ref_col2im_add_hw(dimages, dpatches, m0, n, C, H, W, p, Gh, Gw);
        return;
    }
    job j = { .o0 = dimages, .i0 = dpatches, .n = { m0, n, C, H, W, p, Gh, Gw } };
    vt_parallel_for((int)n, 1, (double)n * C * p * p, col2im_hw_rows, &j);
}

/* ---- the antialiased resize: split over the columns (inner), each element's taps in order ---- */

static void resample_fwd_cols(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t outer = j->n[0], n_in = j->n[1], n_out = j->n[2], inner = j->n[3];
    int64_t c0 = lo_of(lo), c1 = hi_of(hi, inner);
    float w[VT_RESAMPLE_MAX_TAPS];
    for (int64_t y = 0; y < n_out; y++) {
        int64_t x0, nt = vt_resample_aa_taps(n_in, n_out, y, &x0, w, VT_RESAMPLE_MAX_TAPS);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t cc = c0; cc < c1; cc++) {
                float acc = 0.0f;
                for (int64_t t = 0; t < nt; t++) {
                    float v = j->i0[(o * n_in + x0 + t) * inner + cc] * w[t];
                    acc = t ? acc + v : v;
                }
                j->o0[(o * n_out + y) * inner + cc] = acc;
            }
    }
}
void vt_resample_aa_forward(float *out, const float *inp, int64_t outer, int64_t n_in, int64_t n_out,
                            int64_t inner) {
    if (REF) {
        vt_ref_resample_aa_forward(out, inp, outer, n_in, n_out, inner);
        return;
    }
    job j = { .o0 = out, .i0 = inp, .n = { outer, n_in, n_out, inner } };
    vt_parallel_for(units(inner), 1, 8.0 * outer * n_out * inner, resample_fwd_cols, &j);
}
static void resample_bwd_cols(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t outer = j->n[0], n_in = j->n[1], n_out = j->n[2], inner = j->n[3];
    int64_t c0 = lo_of(lo), c1 = hi_of(hi, inner);
    float w[VT_RESAMPLE_MAX_TAPS];
    for (int64_t y = 0; y < n_out; y++) {
        int64_t x0, nt = vt_resample_aa_taps(n_in, n_out, y, &x0, w, VT_RESAMPLE_MAX_TAPS);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t t = 0; t < nt; t++)
                for (int64_t cc = c0; cc < c1; cc++)
                    j->o0[(o * n_in + x0 + t) * inner + cc] += w[t] * j->i0[(o * n_out + y) * inner + cc];
    }
}
void vt_resample_aa_backward(float *dinp, const float *dout, int64_t outer, int64_t n_in, int64_t n_out,
                             int64_t inner) {
    if (REF) {
        vt_ref_resample_aa_backward(dinp, dout, outer, n_in, n_out, inner);
        return;
    }
    job j = { .o0 = dinp, .i0 = dout, .n = { outer, n_in, n_out, inner } };
    vt_parallel_for(units(inner), 1, 8.0 * outer * n_out * inner, resample_bwd_cols, &j);
}

static void add_scaled_units(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t a = lo_of(lo), b = hi_of(hi, j->n[0]);
    vt_ref_add_scaled(j->o0 + a, j->i0 + a, b - a, j->f[0]);
}
void vt_add_scaled(float *dst, const float *src, int64_t n, float alpha) {
    if (REF) {
        vt_ref_add_scaled(dst, src, n, alpha);
        return;
    }
    job j = { .o0 = dst, .i0 = src, .n = { n }, .f = { alpha } };
    vt_parallel_for(units(n), 1, 2.0 * (double)n, add_scaled_units, &j);
}

/* ---- masking: images, or the columns of a per-token sum ---- */

static void mask_select_images(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t L = j->n[1], D = j->n[2], K = j->n[3];
    vt_ref_mask_select(j->o0 + lo * L * D, j->i0, j->x0 ? j->x0 + lo * K : NULL,
                       j->u0 ? j->u0 + lo * L : NULL, hi - lo, L, D, K);
}
void vt_mask_select(float *seq, const float *mask_token, const int64_t *idx, const uint8_t *mask, int64_t B,
                    int64_t L, int64_t D, int64_t K) {
    if (REF) {
        vt_ref_mask_select(seq, mask_token, idx, mask, B, L, D, K);
        return;
    }
    job j = { .o0 = seq, .i0 = mask_token, .x0 = idx, .u0 = mask, .n = { B, L, D, K } };
    vt_parallel_for((int)B, 1, (double)B * L * D / 4, mask_select_images, &j);
}
/* the sums over (b, l) of one column range each: the columns' own order is kept */
static void mask_token_cols(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t B = j->n[0], L = j->n[1], D = j->n[2], K = j->n[3];
    uint8_t masked[VT_MAX_TOKENS];
    for (int64_t b = 0; b < B; b++) {
        memset(masked, 0, (size_t)L);
        if (j->x0)
            for (int64_t k = 0; k < K; k++) masked[j->x0[b * K + k]] = 1;
        else if (j->u0)
            for (int64_t l = 0; l < L; l++) masked[l] = j->u0[b * L + l] != 0;
        for (int64_t l = 0; l < L; l++)
            if (masked[l])
                for (int64_t d = lo; d < hi; d++) j->o0[d] += j->i0[(b * L + l) * D + d];
    }
}
void vt_mask_token_backward(float *dmt, const float *dseq, const int64_t *idx, const uint8_t *mask, int64_t B,
                            int64_t L, int64_t D, int64_t K) {
    if (REF) {
        vt_ref_mask_token_backward(dmt, dseq, idx, mask, B, L, D, K);
        return;
    }
    job j = { .o0 = dmt, .i0 = dseq, .x0 = idx, .u0 = mask, .n = { B, L, D, K } };
    vt_parallel_for((int)D, 4, (double)B * L * D, mask_token_cols, &j);
}
void vt_prefix_tokens_backward(float *dcls, float *dreg, const float *dseq, const int64_t *idx,
                               const uint8_t *mask, int64_t B, int64_t L, int64_t D, int64_t K, int64_t cls,
                               int64_t R) {
    vt_ref_prefix_tokens_backward(dcls, dreg, dseq, idx, mask, B, L, D, K, cls,
                                  R); /* (1 + R) x B rows: small */
}
static void patch_tokens_images(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t L = j->n[1], D = j->n[2], K = j->n[3], P = j->n[4];
    vt_ref_patch_tokens_backward(j->o0 + lo * (L - P) * D, j->i0 + lo * L * D, j->x0 ? j->x0 + lo * K : NULL,
                                 j->u0 ? j->u0 + lo * L : NULL, hi - lo, L, D, K, P);
}
void vt_patch_tokens_backward(float *dtok, const float *dseq, const int64_t *idx, const uint8_t *mask,
                              int64_t B, int64_t L, int64_t D, int64_t K, int64_t P) {
    if (REF) {
        vt_ref_patch_tokens_backward(dtok, dseq, idx, mask, B, L, D, K, P);
        return;
    }
    job j = { .o0 = dtok, .i0 = dseq, .x0 = idx, .u0 = mask, .n = { B, L, D, K, P } };
    vt_parallel_for((int)B, 1, (double)B * L * D / 4, patch_tokens_images, &j);
}

/* ---- rows by index: images ---- */

#define ROWS_BY_IMAGE(name, out_rows, x_rows)                                                                \
    static void name##_images(void *c, int lo, int hi, int tid) {                                            \
        const job *j = c;                                                                                    \
        int64_t L = j->n[1], K = j->n[2], D = j->n[3];                                                       \
        vt_ref_##name(j->o0 + lo * (out_rows)*D, j->i0 + lo * (x_rows)*D, j->x0 + lo * K, hi - lo, L, K, D); \
    }                                                                                                        \
    void vt_##name(float *out, const float *x, const int64_t *idx, int64_t B, int64_t L, int64_t K,          \
                   int64_t D) {                                                                              \
        if (REF) {                                                                                           \
            vt_ref_##name(out, x, idx, B, L, K, D);                                                          \
            return;                                                                                          \
        }                                                                                                    \
        job j = { .o0 = out, .i0 = x, .x0 = idx, .n = { B, L, K, D } };                                      \
        vt_parallel_for((int)B, 1, (double)B *K *D / 4, name##_images, &j);                                  \
    }
ROWS_BY_IMAGE(gather_rows, K, L)
ROWS_BY_IMAGE(scatter_rows, L, K)
ROWS_BY_IMAGE(scatter_add_rows, L, K)
#undef ROWS_BY_IMAGE

static void gather_except_images(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t L = j->n[1], K = j->n[2], Kx = j->n[3], D = j->n[4];
    vt_ref_gather_rows_except(j->o0 + lo * K * D, j->i0 + lo * L * D, j->x0 + lo * K, j->x1 + lo * Kx,
                              hi - lo, L, K, Kx, D);
}
void vt_gather_rows_except(float *out, const float *x, const int64_t *idx, const int64_t *except, int64_t B,
                           int64_t L, int64_t K, int64_t Kx, int64_t D) {
    if (REF) {
        vt_ref_gather_rows_except(out, x, idx, except, B, L, K, Kx, D);
        return;
    }
    job j = { .o0 = out, .i0 = x, .x0 = idx, .x1 = except, .n = { B, L, K, Kx, D } };
    vt_parallel_for((int)B, 1, (double)B * K * (D / 4 + Kx), gather_except_images, &j);
}
static void sum_at_cols(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t B = j->n[0], L = j->n[1], K = j->n[2], D = j->n[3];
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t d = lo; d < hi; d++) j->o0[d] += j->i0[(b * L + j->x0[b * K + k]) * D + d];
}
void vt_sum_rows_at(float *out, const float *x, const int64_t *idx, int64_t B, int64_t L, int64_t K,
                    int64_t D) {
    if (REF) {
        vt_ref_sum_rows_at(out, x, idx, B, L, K, D);
        return;
    }
    job j = { .o0 = out, .i0 = x, .x0 = idx, .n = { B, L, K, D } };
    vt_parallel_for((int)D, 4, (double)B * K * D, sum_at_cols, &j);
}

/* row by row through the layernorm backward's own dispatch (SIMD, threads): the bits of the
 * one-row calls the MAE loss made before it had this kernel */
void vt_layernorm_backward_rows(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                const float *w, const float *mean, const float *rstd, const int64_t *idx,
                                int64_t B, int64_t L, int64_t K, int64_t D) {
    vt_layernorm_backward_rows_by(vt_layernorm_backward, dinp, dw, db, dout, inp, w, mean, rstd, idx, B, L, K,
                                  D);
}

/* ---- pooling: images ---- */

static void pool_fwd_images(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t T = j->n[1], D = j->n[2];
    vt_ref_pool_forward(j->o0 + lo * D, j->i0 + lo * T * D, hi - lo, T, D, j->n[3], j->n[4]);
}
void vt_pool_forward(float *y, const float *x, int64_t B, int64_t T, int64_t D, int64_t P, int64_t kind) {
    if (REF) {
        vt_ref_pool_forward(y, x, B, T, D, P, kind);
        return;
    }
    job j = { .o0 = y, .i0 = x, .n = { B, T, D, P, kind } };
    vt_parallel_for((int)B, 1, (double)B * T * D, pool_fwd_images, &j);
}
static void pool_bwd_images(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t T = j->n[1], D = j->n[2];
    vt_ref_pool_backward(j->o0 + lo * T * D, j->i0 + lo * D, j->i1 + lo * T * D, hi - lo, T, D, j->n[3],
                         j->n[4], j->n[5]);
}
void vt_pool_backward(float *dx, const float *dy, const float *x, int64_t B, int64_t T, int64_t D, int64_t P,
                      int64_t kind, int64_t assign) {
    if (REF) {
        vt_ref_pool_backward(dx, dy, x, B, T, D, P, kind, assign);
        return;
    }
    job j = { .o0 = dx, .i0 = dy, .i1 = x, .n = { B, T, D, P, kind, assign } };
    vt_parallel_for((int)B, 1, 3.0 * B * T * D, pool_bwd_images, &j);
}

/* ---- targets: images (each image's patches are its own pixels) ---- */

static void targets_images(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t K = j->n[1], C = j->n[2], S = j->n[3], p = j->n[4], O = C * p * p;
    vt_ref_patch_targets(j->o0 + lo * K * O, j->o1 ? j->o1 + lo * K : NULL, j->i0 + lo * C * S * S,
                         j->x0 ? j->x0 + lo * K : NULL, hi - lo, K, C, S, p, j->n[5], j->n[6], j->n[7]);
}
void vt_patch_targets(float *tgt, float *trs, const float *images, const int64_t *idx, int64_t B, int64_t K,
                      int64_t C, int64_t S, int64_t p, int64_t G, int64_t offset, int64_t norm_pix) {
    if (REF) {
        vt_ref_patch_targets(tgt, trs, images, idx, B, K, C, S, p, G, offset, norm_pix);
        return;
    }
    job j = { .o0 = tgt, .o1 = trs, .i0 = images, .x0 = idx, .n = { B, K, C, S, p, G, offset, norm_pix } };
    vt_parallel_for((int)B, 1, 8.0 * B * K * C * p * p, targets_images, &j);
}
static void targets_bwd_images(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t K = j->n[1], C = j->n[2], S = j->n[3], p = j->n[4], O = C * p * p;
    vt_ref_targets_backward(j->o0 + lo * C * S * S, j->o1 + lo * K * O, j->i0 + lo * K * O,
                            j->i1 + lo * K * O, j->i2 ? j->i2 + lo * K : NULL, j->x0 ? j->x0 + lo * K : NULL,
                            hi - lo, K, C, S, p, j->n[5], j->n[6], j->n[7]);
}
void vt_targets_backward(float *dimages, float *dt, const float *dpred, const float *tgt, const float *trs,
                         const int64_t *idx, int64_t B, int64_t K, int64_t C, int64_t S, int64_t p, int64_t G,
                         int64_t offset, int64_t norm_pix) {
    if (REF) {
        vt_ref_targets_backward(dimages, dt, dpred, tgt, trs, idx, B, K, C, S, p, G, offset, norm_pix);
        return;
    }
    job j = { .o0 = dimages,
              .o1 = dt,
              .i0 = dpred,
              .i1 = tgt,
              .i2 = trs,
              .x0 = idx,
              .n = { B, K, C, S, p, G, offset, norm_pix } };
    vt_parallel_for((int)B, 1, 8.0 * B * K * C * p * p, targets_bwd_images, &j);
}

/* ---- losses, norm: one order, one thread ---- */

void vt_mse_forward(float *loss, const float *pred, const float *tgt, int64_t n) {
    vt_ref_mse_forward(loss, pred, tgt, n);
}
static void mse_bwd_units(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t a = lo_of(lo), b = hi_of(hi, j->n[0]);
    float g = j->f[0];
    for (int64_t i = a; i < b; i++) j->o0[i] = g * (j->i0[i] - j->i1[i]);
}
void vt_mse_backward(float *dpred, const float *pred, const float *tgt, const float *dloss, int64_t n) {
    if (REF) {
        vt_ref_mse_backward(dpred, pred, tgt, dloss, n);
        return;
    }
    job j = { .o0 = dpred, .i0 = pred, .i1 = tgt, .n = { n }, .f = { 2.0f * *dloss / (float)n } };
    vt_parallel_for(units(n), 1, 2.0 * (double)n, mse_bwd_units, &j);
}
void vt_cross_entropy_forward(float *logp, float *loss, const float *logits, const int32_t *labels, int64_t B,
                              int64_t C, float smoothing) {
    vt_ref_cross_entropy_forward(logp, loss, logits, labels, B, C, smoothing);
}
void vt_cross_entropy_backward(float *dlogits, const float *logp, const int32_t *labels, const float *dloss,
                               int64_t B, int64_t C, float smoothing) {
    vt_ref_cross_entropy_backward(dlogits, logp, labels, dloss, B, C, smoothing);
}
void vt_grad_norm(double *norm, const float *g, int64_t n) { vt_ref_grad_norm(norm, g, n); }
static void clip_units(void *c, int lo, int hi, int tid) {
    const job *j = c;
    int64_t a = lo_of(lo), b = hi_of(hi, j->n[0]);
    float coef = j->f[0];
    for (int64_t i = a; i < b; i++) j->o0[i] *= coef;
}
void vt_clip_grads(float *g, const double *norm, int64_t n, float max_norm) {
    if (REF || !isfinite(*norm)) {
        vt_ref_clip_grads(g, norm, n, max_norm);
        return;
    }
    float coef = (float)(max_norm / (*norm + 1e-6));
    if (!(coef < 1.0f)) return;
    job j = { .o0 = g, .n = { n }, .f = { coef } };
    vt_parallel_for(units(n), 1, (double)n, clip_units, &j);
}
/* 1 when x[0..n) has a NaN or an infinity: the exponent bits all set. Integer tests OR-ed over a
 * unit, which the compiler vectorises (the reference's per-element early exit is a scalar loop,
 * and this runs over every gradient each step); the answer is the reference's boolean. */
static int any_nonfinite(const float *x, int64_t n) {
    for (int64_t a = 0; a < n; a += VT_OPS_UNIT) {
        int64_t b = n - a < VT_OPS_UNIT ? n : a + VT_OPS_UNIT;
        uint32_t bad = 0;
        for (int64_t i = a; i < b; i++) {
            uint32_t u;
            memcpy(&u, x + i, sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (bad) return 1;
    }
    return 0;
}
/* any non-finite element: each thread its own flag (a boolean: the split changes no bit) */
static void finite_units(void *c, int lo, int hi, int tid) {
    job *j = c;
    int64_t a = lo_of(lo), b = hi_of(hi, j->n[0]);
    if (any_nonfinite(j->i0 + a, b - a)) j->f[1] = 1.0f; /* any thread may set it; none clears it */
}
void vt_check_finite(float *flag, const float *x, int64_t n) {
    if (REF || *flag != 0.0f) {
        vt_ref_check_finite(flag, x, n);
        return;
    }
    job j = { .i0 = x, .n = { n }, .f = { 0.0f, 0.0f } };
    vt_parallel_for(units(n), 1, (double)n, finite_units, &j);
    *flag = j.f[1];
}

/* AdamW: element-wise, so units of elements on any thread give the same bits; each unit's finite
 * check may set the flag (a boolean: any thread may set it, none clears it) */
typedef struct {
    float *p, *m, *v;
    const float *g;
    int64_t n;
    long t;
    float lr, b1, b2, eps, wd;
    float bad;
} adamw_job;
static void adamw_units(void *c, int lo, int hi, int tid) {
    adamw_job *j = c;
    int64_t a = lo_of(lo), b = hi_of(hi, j->n);
    if (vt_adamw_step(j->p + a, j->g + a, j->m + a, j->v + a, (size_t)(b - a), j->t, j->lr, j->b1, j->b2,
                      j->eps, j->wd))
        j->bad = 1.0f;
}
void vt_adamw(float *p, float *m, float *v, const float *g, const float *lr, const float *step,
              const float *flag, float *bad, int64_t n, float b1, float b2, float eps, float wd) {
    if (REF) {
        vt_ref_adamw(p, m, v, g, lr, step, flag, bad, n, b1, b2, eps, wd);
        return;
    }
    if (*flag != 0.0f) return;
    adamw_job j = { p, m, v, g, n, (long)*step, *lr, b1, b2, eps, wd, 0.0f };
    vt_parallel_for(units(n), 1, 20.0 * (double)n, adamw_units, &j);
    if (j.bad != 0.0f) *bad = 1.0f;
}
void vt_unpatchify(float *recon, float *masked, const float *pred, const float *images, const int64_t *idx,
                   int64_t B, int64_t K, int64_t C, int64_t S, int64_t p, int64_t G, int64_t offset,
                   int64_t norm_pix) {
    vt_ref_unpatchify(recon, masked, pred, images, idx, B, K, C, S, p, G, offset, norm_pix);
}
