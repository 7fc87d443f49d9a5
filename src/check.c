/* check.c: the checks every objective's inputs share: a call's encoder inputs (batch, images,
 * masks, indices against the sequence, the mask token they need) and index rows. Untrusted values
 * are checked here before any plan or kernel reads them; the objectives (vit.c, objectives.c,
 * classify.c) add their own. */
#include "check.h"
#include "vit_internal.h"
#include "kernels/ops.h"
#include <string.h>

/* The geometry of a call: its image size (the config's unless the inputs give one), grid, tokens,
 * and which patch kernels and pos_embed resampling it takes (here: every check reads it). */
void vt_call_geom(const vt_model *m, const vt_inputs *in, vt_geom *g) {
    const vt_vit_config *c = &m->cfg.enc;
    int p = c->patch_size;
    g->H = in && in->height ? in->height : c->img_size;
    g->W = in && in->width ? in->width : vt_img_width(c);
    g->Gh = c->dynamic_img_pad ? (g->H + p - 1) / p : g->H / p;
    g->Gw = c->dynamic_img_pad ? (g->W + p - 1) / p : g->W / p;
    g->N = g->Gh * g->Gw;
    g->L = g->N + m->enc.P;
    /* the im2col of square images that the grid covers exactly (the kernel every backend has) */
    g->square = g->H == g->W && g->Gh == g->Gw && g->Gh * p == g->H;
    /* timm's resample_abs_pos_embed returns pos_embed as it is when the token counts agree and the
     * new grid is square; a grid of the config's size is an exact copy either way */
    int prefix_rows = c->no_embed_class ? 0 : m->enc.P;
    g->resample = c->dynamic_img_size && m->enc.pos >= 0 && !(g->Gh == m->enc.Gh && g->Gw == m->enc.Gw) &&
                  !(g->N + prefix_rows == m->enc.N + prefix_rows && g->Gh == g->Gw);
}

int vt_row_has(const int64_t *row, int n, int64_t v) {
    for (int i = 0; i < n; i++)
        if (row[i] == v) return 1;
    return 0;
}

/* Every index in [0, L); repeats refused unless allowed (idx_keep is a gather, so lightly takes a
 * repeated index: the token appears twice and its gradients add up; idx_mask is a scatter). */
vt_status vt_check_index(const int64_t *idx, int B, int K, int L, const char *what, int allow_repeat,
                         uint8_t *seen) {
    if (K <= 0) return vt_fail(VT_ERR_ARG, "%s: %d indices per row (need at least 1)", what, K);
    for (int b = 0; b < B; b++) {
        memset(seen, 0, (size_t)L);
        for (int k = 0; k < K; k++) {
            int64_t v = idx[(size_t)b * K + k];
            if (v < 0 || v >= L)
                return vt_fail(VT_ERR_ARG,
                               "%s[%d][%d] = %lld is out of range [0, %d) (indices address "
                               "the full sequence, prefix tokens included)",
                               what, b, k, (long long)v, L);
            if (seen[v] && !allow_repeat)
                return vt_fail(VT_ERR_ARG, "%s[%d] repeats index %lld", what, b, (long long)v);
            seen[v] = 1;
        }
    }
    return VT_OK;
}

/* The images' size (vt_inputs height, width): the config's, or with timm's dynamic_img_size any
 * size whose grid the pos_embed can be resampled to (timm asserts a multiple of the patch unless
 * dynamic_img_pad pads). */
vt_status vt_check_image_size(const vt_model *m, const vt_inputs *in) {
    const vt_vit_config *c = &m->cfg.enc;
    int H0 = c->img_size, W0 = vt_img_width(c), p = c->patch_size;
    int H = in->height ? in->height : H0, W = in->width ? in->width : W0;
    if (in->height < 0 || in->width < 0 || H > VT_MAX_DIM || W > VT_MAX_DIM)
        return vt_fail(VT_ERR_ARG, "images of %d x %d pixels", in->height, in->width);
    if (H == H0 && W == W0) return VT_OK;
    if (!c->dynamic_img_size)
        return vt_fail(VT_ERR_ARG,
                       "images are %dx%d, the model takes %dx%d (timm's PatchEmbed asserts the size; "
                       "dynamic_img_size takes others)",
                       H, W, H0, W0);
    if (m->cfg.kind != VT_KIND_TIMM)
        return vt_fail(VT_ERR_ARG,
                       "images of another size (%dx%d, the config's %dx%d) go through timm's "
                       "VisionTransformer only (lightly's wrappers take the config's size)",
                       H, W, H0, W0);
    if (!c->dynamic_img_pad && (H % p || W % p))
        return vt_fail(VT_ERR_ARG,
                       "images of %dx%d are not a multiple of patch_size %d (timm asserts it; "
                       "dynamic_img_pad pads them)",
                       H, W, p);
    vt_geom g;
    vt_call_geom(m, in, &g);
    if (g.Gh < 1 || g.Gw < 1 || g.L > VT_MAX_TOKENS)
        return vt_fail(VT_ERR_ARG, "images of %dx%d give a grid of %dx%d patches (1..%d tokens)", H, W, g.Gh,
                       g.Gw, VT_MAX_TOKENS);
    if (g.resample && (vt_resample_aa_max_taps(m->enc.Gh, g.Gh) > VT_RESAMPLE_MAX_TAPS ||
                       vt_resample_aa_max_taps(m->enc.Gw, g.Gw) > VT_RESAMPLE_MAX_TAPS))
        return vt_fail(VT_ERR_ARG,
                       "resampling pos_embed from %dx%d to %dx%d shrinks it more than vitrine's "
                       "resize kernels take",
                       m->enc.Gh, m->enc.Gw, g.Gh, g.Gw);
    return VT_OK;
}

/* The encoder's inputs; check_values: also the index values (a plan reads only the sizes). */
vt_status vt_check_encoder_inputs(const vt_model *m, const vt_inputs *in, int causal, int check_values) {
    const vt_encoder *e = &m->enc;
    if (!in) return vt_fail(VT_ERR_ARG, "inputs are NULL");
    if (in->batch < 1) return vt_fail(VT_ERR_ARG, "batch must be >= 1, got %d", in->batch);
    if (check_values && !in->images) return vt_fail(VT_ERR_ARG, "images are NULL");
    vt_status grc = vt_check_image_size(m, in);
    if (grc) return grc;
    vt_geom g;
    vt_call_geom(m, in, &g);
    int L = g.L;
    if (in->idx_mask && in->mask && !causal)
        return vt_fail(VT_ERR_ARG, "idx_mask and mask cannot both be given (lightly raises ValueError)");
    if (causal && (in->idx_mask || in->idx_keep))
        return vt_fail(VT_ERR_ARG,
                       "the masked-causal ViT takes no idx_mask/idx_keep (only mask and is_causal)");
    if (in->idx_mask && e->mask_token < 0)
        return vt_fail(VT_ERR_ARG, "idx_mask needs a mask token (config mask_token)");
    if (in->mask && !causal && e->mask_token < 0)
        return vt_fail(VT_ERR_ARG, "mask needs a mask token (config mask_token)");
    if (in->idx_keep && in->n_keep > VT_MAX_TOKENS) /* repeats allowed: K may exceed L */
        return vt_fail(VT_ERR_ARG, "idx_keep has %d indices per row, more than %d tokens", in->n_keep,
                       VT_MAX_TOKENS);
    if (in->idx_mask && in->n_mask > L)
        return vt_fail(VT_ERR_ARG, "idx_mask has %d indices per row, the sequence has %d tokens", in->n_mask,
                       L);
    if (!check_values) {
        if (in->idx_keep && in->n_keep < 1)
            return vt_fail(VT_ERR_ARG, "idx_keep: %d indices per row", in->n_keep);
        if (in->idx_mask && in->n_mask < 1)
            return vt_fail(VT_ERR_ARG, "idx_mask: %d indices per row", in->n_mask);
        return VT_OK;
    }
    uint8_t seen[VT_MAX_TOKENS];
    if (L > VT_MAX_TOKENS) return vt_fail(VT_ERR_ARG, "sequence of %d tokens exceeds %d", L, VT_MAX_TOKENS);
    if (in->idx_mask) {
        vt_status rc = vt_check_index(in->idx_mask, in->batch, in->n_mask, L, "idx_mask", 0, seen);
        if (rc) return rc;
    }
    if (in->idx_keep) {
        vt_status rc = vt_check_index(in->idx_keep, in->batch, in->n_keep, L, "idx_keep", 1, seen);
        if (rc) return rc;
    }
    return VT_OK;
}
