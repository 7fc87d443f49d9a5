/* resample.h: a ViT's weights at another size, as timm resamples them when it loads a checkpoint
 * into a model of another image or patch size (timm's checkpoint_filter_fn: interpolation
 * 'bicubic', antialias True):
 *   pos_embed    timm.layers.resample_abs_pos_embed: the patch rows as an image of embed_dim
 *                channels, F.interpolate(mode='bicubic', align_corners=False) to the new grid;
 *                the prefix rows ([CLS], registers) kept apart, unchanged
 *   patch_embed  timm.layers.resample_patch_embed (FlexiViT): w_new = w @ pinv(R), R the 2-D
 *                resize of the kernel grid, so that <resize(x), w_new> ~ <x, w>
 * The interpolation follows PyTorch's CPU kernels operation for operation in float32
 * (upsample_bicubic2d: 4x4 taps, A = -0.75, border clamped; _upsample_bicubic2d_aa: Pillow's
 * separable filter, a = -0.5, widened by the scale when shrinking, rows then columns). The
 * pseudo-inverse is computed per axis in double (R is the Kronecker product of the two 1-D
 * resizes, and pinv(A (x) B) = pinv(A) (x) pinv(B)); timm computes it in float32. */
#ifndef VT_RESAMPLE_H
#define VT_RESAMPLE_H
#include "vitrine.h"

/* antialias: 0 = F.interpolate(mode='bicubic') (what resample_abs_pos_embed(antialias=False)
 * does), 1 = antialias=True (what timm does on load). */
#define VT_RESAMPLE_ON_LOAD 1

/* A grid of `chans` values per cell, cells row-major ([old_h * old_w, chans], channels last: a
 * pos_embed's rows) -> [new_h * new_w, chans]. */
vt_status vt_resample_grid(const float *in, int old_h, int old_w, int chans, float *out, int new_h, int new_w,
                           int antialias);
/* pos_embed [prefix + old_h * old_w, dim] -> [prefix + new_h * new_w, dim]: prefix rows copied. */
vt_status vt_resample_pos_embed(const float *in, int prefix, int old_h, int old_w, int dim, float *out,
                                int new_h, int new_w, int antialias);
/* Patch-embedding kernels [n, old_h, old_w] (n = out_chans * in_chans) -> [n, new_h, new_w]. */
vt_status vt_resample_patch_embed(const float *in, int64_t n, int old_h, int old_w, float *out, int new_h,
                                  int new_w, int antialias);

#endif
