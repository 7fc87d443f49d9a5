/* vit.c: the Vision Transformer encoder as timm and lightly compute it, forward and backward.
 *   patch embedding (conv as im2col + matmul) -> prefix tokens [cls, regs] -> masking with the
 *   mask token (before the positional embedding) -> + pos_embed -> gather idx_keep -> blocks ->
 *   norm -> pooling / intermediates
 * Indices follow lightly: they address the full sequence, prefix tokens included. Everything
 * the call allocates comes from the arena, in an order that vt_encoder_call_plan mirrors. MAE
 * and AIM (objectives.c) build on vt_encoder_preprocess / vt_encoder_blocks /
 * vt_encoder_backward here. */
#include "vit_internal.h"
#include "exec.h"
#include "objective.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int has_pool(const vt_model *m) { return m->cfg.enc.global_pool != VT_POOL_NONE; }
static int has_norm(const vt_model *m) { return m->enc.norm_w >= 0; }
static int norm_kind(const vt_model *m) {
    return m->cfg.enc.norm_layer == VT_NORM_RMS ? VT_NORM_RMS : VT_NORM_LAYER;
}
static float norm_eps(const vt_model *m) { return (float)m->cfg.enc.norm_eps; }

/* ---- parameter table --------------------------------------------------------------------------- */

/* a norm layer's parameters: weight, and bias unless RmsNorm */
static int add_norm(vt_model *m, int kind, int *w, int *b, const char *pfx, const char *name, int64_t n) {
    char k[VT_NAME_MAX];
    snprintf(k, sizeof k, "%s.weight", name);
    int rc = vt_param_add(m, w, pfx, k, 1, n, 0, 0, 0, 1);
    if (kind == VT_NORM_LAYER) {
        snprintf(k, sizeof k, "%s.bias", name);
        rc |= vt_param_add(m, b, pfx, k, 1, n, 0, 0, 0, 1);
    }
    return rc;
}

/* Adds the encoder's parameters in timm's state_dict order under `pfx` ("vit.", "backbone.vit.",
 * ...): its own (cls_token, reg_token, pos_embed, DeiT's dist_token), then its modules in the
 * order they are made (patch_embed, norm_pre, blocks, norm, attn_pool, fc_norm, head, head_dist);
 * lightly's mask token (if any) is added by the caller before, under its own name. */
vt_status vt_encoder_build(vt_model *m, const char *pfx, int pos_trainable) {
    const vt_vit_config *c = &m->cfg.enc;
    vt_encoder *e = &m->enc;
    int D = c->embed_dim, rc = 0, nk = norm_kind(m);
    e->cls = e->reg = e->dist = e->pos = e->norm_w = e->norm_b = e->fcn_w = e->fcn_b = e->head_w = e->head_b =
        -1;
    e->en_w = e->en_b = e->pn_w = e->pn_b = e->hdist_w = e->hdist_b = e->pe_b = -1;
    memset(&e->ap, 0xff, sizeof e->ap);
    e->ap.F = 0;
    e->Gh = c->img_size / c->patch_size;
    e->Gw = vt_img_width(c) / c->patch_size;
    e->G = e->Gh;
    e->N = e->Gh * e->Gw;
    e->P = (c->class_token ? 1 : 0) + c->reg_tokens + (c->distilled ? 1 : 0);
    e->T_full = e->N + e->P;
    vt_pool gp = c->global_pool;
    int fc = c->fc_norm < 0 ? gp == VT_POOL_AVG || gp == VT_POOL_MAX || gp == VT_POOL_AVGMAX : c->fc_norm;
    e->use_fc_norm = c->final_norm && fc;
    if (c->class_token) rc |= vt_param_add(m, &e->cls, pfx, "cls_token", 3, 1, 1, D, 0, 1);
    if (c->reg_tokens) rc |= vt_param_add(m, &e->reg, pfx, "reg_token", 3, 1, c->reg_tokens, D, 0, 1);
    if (c->pos_embed)
        rc |= vt_param_add(m, &e->pos, pfx, "pos_embed", 3, 1, c->no_embed_class ? e->N : e->T_full, D, 0,
                           pos_trainable);
    if (c->distilled) rc |= vt_param_add(m, &e->dist, pfx, "dist_token", 3, 1, 1, D, 0, 1);
    rc |= vt_param_add(m, &e->pe_w, pfx, "patch_embed.proj.weight", 4, D, c->in_chans, c->patch_size,
                       c->patch_size, 1);
    if (!c->pre_norm) rc |= vt_param_add(m, &e->pe_b, pfx, "patch_embed.proj.bias", 1, D, 0, 0, 0, 1);
    if (c->embed_norm_layer)
        rc |= add_norm(m, c->embed_norm_layer, &e->en_w, &e->en_b, pfx, "patch_embed.norm", D);
    if (c->pre_norm) rc |= add_norm(m, nk, &e->pn_w, &e->pn_b, pfx, "norm_pre", D);
    if (rc) return rc < 0 ? rc : VT_ERR_ARG;
    char bp[VT_NAME_MAX];
    snprintf(bp, sizeof bp, "%sblocks.", pfx);
    int F = (int)vt_mlp_hidden(D, c->mlp_ratio); /* >= 1: validated */
    vt_block_opts o = { .has_attn = 1,
                        .qkv_bias = c->qkv_bias,
                        .proj_bias = c->proj_bias,
                        .mlp_bias = c->proj_bias,
                        .qk_norm = c->qk_norm,
                        .layerscale = c->init_values > 0,
                        .attn_norm = c->scale_attn_norm,
                        .mlp_norm = c->scale_mlp_norm,
                        .act = c->act_layer,
                        .norm = nk,
                        .eps = norm_eps(m) };
    rc = vt_chain_build(m, &e->chain, bp, c->depth, D, c->num_heads, F, &o, 1, 0, "enc");
    if (rc) return rc;
    for (int k = 0; k < c->depth && k < VT_MAX_DEPTH; k++) {
        e->upto[k] = e->chain;
        e->upto[k].depth = k + 1;
    }
    if (c->final_norm && !fc) rc |= add_norm(m, nk, &e->norm_w, &e->norm_b, pfx, "norm", D);
    if (gp == VT_POOL_MAP) { /* AttentionPoolLatent(D, num_heads, mlp_ratio, norm_layer, act_layer) */
        vt_attn_pool *ap = &e->ap;
        ap->F = F;
        rc |= vt_param_add(m, &ap->latent, pfx, "attn_pool.latent", 3, 1, 1, D, 0, 1);
        rc |= vt_param_add(m, &ap->qw, pfx, "attn_pool.q.weight", 2, D, D, 0, 0, 1);
        rc |= vt_param_add(m, &ap->qb, pfx, "attn_pool.q.bias", 1, D, 0, 0, 0, 1);
        rc |= vt_param_add(m, &ap->kvw, pfx, "attn_pool.kv.weight", 2, 2 * D, D, 0, 0, 1);
        rc |= vt_param_add(m, &ap->kvb, pfx, "attn_pool.kv.bias", 1, 2 * D, 0, 0, 0, 1);
        rc |= vt_param_add(m, &ap->pw, pfx, "attn_pool.proj.weight", 2, D, D, 0, 0, 1);
        rc |= vt_param_add(m, &ap->pb, pfx, "attn_pool.proj.bias", 1, D, 0, 0, 0, 1);
        rc |= add_norm(m, nk, &ap->nw, &ap->nb, pfx, "attn_pool.norm", D);
        rc |= vt_param_add(m, &ap->f1w, pfx, "attn_pool.mlp.fc1.weight", 2, F, D, 0, 0, 1);
        rc |= vt_param_add(m, &ap->f1b, pfx, "attn_pool.mlp.fc1.bias", 1, F, 0, 0, 0, 1);
        rc |= vt_param_add(m, &ap->f2w, pfx, "attn_pool.mlp.fc2.weight", 2, D, F, 0, 0, 1);
        rc |= vt_param_add(m, &ap->f2b, pfx, "attn_pool.mlp.fc2.bias", 1, D, 0, 0, 0, 1);
    }
    /* timm's fc_norm: in the state dict, never applied by lightly */
    if (e->use_fc_norm) rc |= add_norm(m, nk, &e->fcn_w, &e->fcn_b, pfx, "fc_norm", D);
    if (c->num_classes > 0) {
        rc |= vt_param_add(m, &e->head_w, pfx, "head.weight", 2, c->num_classes, D, 0, 0, 1);
        rc |= vt_param_add(m, &e->head_b, pfx, "head.bias", 1, c->num_classes, 0, 0, 0, 1);
        if (c->distilled) {
            rc |= vt_param_add(m, &e->hdist_w, pfx, "head_dist.weight", 2, c->num_classes, D, 0, 0, 1);
            rc |= vt_param_add(m, &e->hdist_b, pfx, "head_dist.bias", 1, c->num_classes, 0, 0, 0, 1);
        }
    }
    return rc ? (rc < 0 ? rc : VT_ERR_ARG) : VT_OK;
}

/* ---- preprocessing ----------------------------------------------------------------------------------- */

/* The patch embedding is a matmul over patches; patches are gathered (im2col) and scattered back
 * (col2im) VT_PATCH_CHUNK rows at a time, so that no image-sized buffer is ever needed -- unless
 * the model records for a device that parallelises inside one call (vt_model_set_whole_rows):
 * then all B*N rows in one call, and an image-sized buffer of patches. */
#define VT_PATCH_CHUNK 32

static int chunk_rows(const vt_model *m, int BN) {
    return m->whole_rows || BN < VT_PATCH_CHUNK ? BN : VT_PATCH_CHUNK;
}

/* patch rows m0 .. m0+n of the call's images, in the kernel their geometry needs */
static void im2col_call(vt_model *m, float *patches, const float *images, int m0, int n, const vt_geom *g) {
    const vt_vit_config *c = &m->cfg.enc;
    if (g->square)
        vt_k_im2col(m, patches, images, m0, n, c->in_chans, g->H, c->patch_size, g->Gh);
    else
        vt_k_im2col_hw(m, patches, images, m0, n, c->in_chans, g->H, g->W, c->patch_size, g->Gh, g->Gw);
}
static void col2im_call(vt_model *m, float *dimages, const float *dpatches, int m0, int n, const vt_geom *g) {
    const vt_vit_config *c = &m->cfg.enc;
    if (g->square)
        vt_k_col2im_add(m, dimages, dpatches, m0, n, c->in_chans, g->H, c->patch_size, g->Gh);
    else
        vt_k_col2im_add_hw(m, dimages, dpatches, m0, n, c->in_chans, g->H, g->W, c->patch_size, g->Gh, g->Gw);
}

/* tok [B*N, D] = the patch embedding (conv as matmul, chunked), before its norm */
static void patch_tokens(vt_model *m, const vt_inputs *in, const vt_geom *g, float *tok, float *patches) {
    const vt_vit_config *c = &m->cfg.enc;
    int D = c->embed_dim, Kp = c->in_chans * c->patch_size * c->patch_size, BN = in->batch * g->N;
    int CH = chunk_rows(m, BN);
    for (int m0 = 0; m0 < BN; m0 += CH) { /* tok = patches @ W^T + b */
        int n = BN - m0 < CH ? BN - m0 : CH;
        im2col_call(m, patches, in->images, m0, n, g);
        vt_k_matmul_forward(m, tok + (size_t)m0 * D, patches, vt_P(m, m->enc.pe_w), vt_P(m, m->enc.pe_b), n,
                            Kp, D);
    }
}

/* Floats of the pos_embed resampled to the call's grid: [prefix rows + Gh*Gw, D], and the width
 * pass's [Gh0, Gw, D] between the two passes (0 when a pass is not needed). */
static uint64_t pos_rs_floats(const vt_model *m, const vt_geom *g, uint64_t *tmp) {
    const vt_encoder *e = &m->enc;
    uint64_t D = m->cfg.enc.embed_dim, pre = m->cfg.enc.no_embed_class ? 0 : (uint64_t)e->P;
    *tmp = g->resample && e->Gw != g->Gw && e->Gh != g->Gh ? vt_round((uint64_t)e->Gh * g->Gw * D) : 0;
    return g->resample ? vt_round((pre + (uint64_t)g->N) * D) : 0;
}

/* pos_embed at the call's grid, into out (pos_rs_floats): its prefix rows copied, the grid resized
 * along the width (the last axis, first: PyTorch's order), then the height; an axis that keeps its
 * size is not resampled */
static void pos_resample(vt_model *m, const vt_geom *g, float *out, float *tmp) {
    const vt_encoder *e = &m->enc;
    int D = m->cfg.enc.embed_dim, pre = m->cfg.enc.no_embed_class ? 0 : e->P;
    const float *pos = vt_P(m, e->pos);
    if (pre) vt_k_copy2d(m, out, pos, 1, (int64_t)pre * D, 0, 0);
    const float *src = pos + (size_t)pre * D;
    float *grid = out + (size_t)pre * D;
    if (e->Gw != g->Gw) {
        float *dst = e->Gh == g->Gh ? grid : tmp;
        vt_k_resample_aa_forward(m, dst, src, e->Gh, e->Gw, g->Gw, D);
        src = dst;
    }
    if (e->Gh != g->Gh) vt_k_resample_aa_forward(m, grid, src, 1, e->Gh, g->Gh, (int64_t)g->Gw * D);
}
/* its backward: d out [prefix + N, D] -> dpos (+=) */
static void pos_resample_backward(vt_model *m, const vt_geom *g, float *dpos, const float *dout, float *tmp) {
    const vt_encoder *e = &m->enc;
    int D = m->cfg.enc.embed_dim, pre = m->cfg.enc.no_embed_class ? 0 : e->P;
    if (pre) vt_k_add2d(m, dpos, dout, 1, (int64_t)pre * D, 0, 0);
    const float *dgrid = dout + (size_t)pre * D;
    float *dp = dpos + (size_t)pre * D;
    if (e->Gh != g->Gh) {
        float *dst = e->Gw == g->Gw ? dp : tmp; /* tmp zeroed by the caller */
        vt_k_resample_aa_backward(m, dst, dgrid, 1, e->Gh, g->Gh, (int64_t)g->Gw * D);
        dgrid = dst;
    }
    if (e->Gw != g->Gw) vt_k_resample_aa_backward(m, dp, dgrid, e->Gh, e->Gw, g->Gw, D);
}

vt_status vt_encoder_preprocess(vt_model *m, const vt_inputs *in, int causal, int need_grad, float *x0) {
    const vt_vit_config *c = &m->cfg.enc;
    const vt_encoder *e = &m->enc;
    vt_arena *ar = &m->arena;
    vt_geom g;
    vt_call_geom(m, in, &g);
    int B = in->batch, D = c->embed_dim, N = g.N, P = e->P, L = g.L;
    int Kp = c->in_chans * c->patch_size * c->patch_size;
    int T = in->idx_keep ? in->n_keep : L;
    /* the sequence ends in `target`: norm_pre's input (kept for the backward), or x0 */
    float *target = x0;
    m->last.pre_in = m->last.pre_m = m->last.pre_r = NULL;
    if (c->pre_norm && need_grad) {
        m->last.pre_in = target = vt_arena_alloc(ar, (size_t)B * T * D, "enc.norm_pre.in");
        m->last.pre_m = vt_arena_alloc(ar, (size_t)B * T, "enc.norm_pre.mean");
        m->last.pre_r = vt_arena_alloc(ar, (size_t)B * T, "enc.norm_pre.rstd");
    }
    size_t mark = vt_arena_mark(ar);
    int BN = B * N, CH = chunk_rows(m, BN);
    uint64_t tmp_n, rs_n = pos_rs_floats(m, &g, &tmp_n);
    float *tok = vt_arena_alloc(ar, (size_t)BN * D, "enc.pre.tokens");
    float *patches = vt_arena_alloc(ar, (size_t)CH * Kp, "enc.pre.patches");
    float *seq = in->idx_keep ? vt_arena_alloc(ar, (size_t)B * L * D, "enc.pre.sequence") : target;
    float *pos_rs = rs_n ? vt_arena_alloc(ar, rs_n, "enc.pre.pos_embed") : NULL;
    float *pos_tmp = tmp_n ? vt_arena_alloc(ar, tmp_n, "enc.pre.pos_embed.width") : NULL;
    if (ar->overflow) return vt_arena_overflow(ar);
    patch_tokens(m, in, &g, tok, patches);
    if (e->en_w >= 0) /* patch_embed.norm, in place */
        vt_norm_forward(m, c->embed_norm_layer, tok, NULL, NULL, tok, vt_P(m, e->en_w), vt_P(m, e->en_b), BN,
                        D, (float)c->embed_norm_eps);
    /* [cls, regs | dist, patch tokens] per image */
    if (c->class_token) vt_k_copy2d(m, seq, vt_P(m, e->cls), B, D, (int64_t)L * D, 0);
    if (c->distilled) vt_k_copy2d(m, seq + D, vt_P(m, e->dist), B, D, (int64_t)L * D, 0);
    if (c->reg_tokens)
        vt_k_copy2d(m, seq + (size_t)(c->class_token ? 1 : 0) * D, vt_P(m, e->reg), B,
                    (int64_t)c->reg_tokens * D, (int64_t)L * D, 0);
    vt_k_copy2d(m, seq + (size_t)P * D, tok, B, (int64_t)N * D, (int64_t)L * D, (int64_t)N * D);
    /* masking before the positional embedding: masked slots become the mask token. lightly
     * blends (1-m)*x + m*token, which equals this select for finite x. */
    if (!causal && (in->idx_mask || in->mask))
        vt_k_mask_select(m, seq, vt_P(m, m->enc.mask_token), in->idx_mask, in->idx_mask ? NULL : in->mask, B,
                         L, D, in->n_mask);
    if (e->pos >= 0) { /* no_embed_class: prefix tokens get no position */
        int r0 = c->no_embed_class ? P : 0;
        const float *pos = vt_P(m, e->pos);
        if (pos_rs) {
            pos_resample(m, &g, pos_rs, pos_tmp);
            pos = pos_rs;
        }
        vt_k_add_rows(m, seq + (size_t)r0 * D, seq + (size_t)r0 * D, pos, B, (int64_t)(L - r0) * D,
                      (int64_t)L * D);
    }
    if (in->idx_keep) /* gather after the positional embedding */
        vt_k_gather_rows(m, target, seq, in->idx_keep, B, L, in->n_keep, D);
    if (c->pre_norm) /* norm_pre (CLIP): x0 = norm(sequence); without a backward, in place */
        vt_norm_forward(m, norm_kind(m), x0, m->last.pre_m, m->last.pre_r, target, vt_P(m, e->pn_w),
                        vt_P(m, e->pn_b), (int64_t)B * T, D, norm_eps(m));
    vt_arena_reset(ar, mark);
    return VT_OK;
}

/* Backward of the preprocessing: dx0 [B,T,D] -> parameter grads and dimages. */
vt_status vt_encoder_backward_pre(vt_model *m, const vt_inputs *in, int causal, const float *dx0,
                                  float *dimages, int pg) {
    const vt_vit_config *c = &m->cfg.enc;
    const vt_encoder *e = &m->enc;
    vt_arena *ar = &m->arena;
    vt_geom g;
    vt_call_geom(m, in, &g);
    int B = in->batch, D = c->embed_dim, N = g.N, P = e->P, L = g.L;
    int Kp = c->in_chans * c->patch_size * c->patch_size;
    int T = in->idx_keep ? in->n_keep : L;
    size_t mark = vt_arena_mark(ar);
    const float *dtarget = dx0;
    if (c->pre_norm) { /* x0 = norm_pre(target) */
        float *d = vt_zalloc(m, (size_t)B * T * D, "enc.pre_grad.norm_pre");
        if (!d) return vt_arena_overflow(ar);
        vt_norm_backward(m, norm_kind(m), d, vt_G(m, e->pn_w, pg), vt_G(m, e->pn_b, pg), dx0, m->last.pre_in,
                         vt_P(m, e->pn_w), m->last.pre_m, m->last.pre_r, (int64_t)B * T, D);
        dtarget = d;
    }
    float *dseq = (float *)dtarget;
    if (in->idx_keep) { /* scatter-add: the gather's backward (a repeated index adds up) */
        dseq = vt_zalloc(m, (size_t)B * L * D, "enc.pre_grad.sequence");
        if (!dseq) return vt_arena_overflow(ar);
        vt_k_scatter_add_rows(m, dseq, dtarget, in->idx_keep, B, L, in->n_keep, D);
    }
    float *dpos = vt_G(m, e->pos, pg);
    if (dpos) {
        int r0 = c->no_embed_class ? P : 0;
        uint64_t tmp_n, rs_n = pos_rs_floats(m, &g, &tmp_n);
        if (rs_n) { /* through the resampling: the grid's gradient, then back to pos_embed's grid */
            float *drs = vt_zalloc(m, rs_n, "enc.pre_grad.pos_embed");
            float *dtmp = tmp_n ? vt_zalloc(m, tmp_n, "enc.pre_grad.pos_embed.width") : NULL;
            if (ar->overflow) return vt_arena_overflow(ar);
            vt_k_sum_rows(m, drs, dseq + (size_t)r0 * D, B, (int64_t)(L - r0) * D, (int64_t)L * D);
            pos_resample_backward(m, &g, dpos, drs, dtmp);
        } else {
            vt_k_sum_rows(m, dpos, dseq + (size_t)r0 * D, B, (int64_t)(L - r0) * D, (int64_t)L * D);
        }
    }
    /* masked slots: their gradient goes to the mask token, none to what they replaced (class /
     * register tokens, the patch embedding). dseq may be dx0 itself (no idx_keep): only read. */
    int masking = !causal && (in->idx_mask || in->mask);
    const int64_t *midx = masking ? in->idx_mask : NULL;
    const uint8_t *mmask = masking && !in->idx_mask ? in->mask : NULL;
    float *dmt = masking ? vt_G(m, e->mask_token, pg) : NULL;
    float *dcls = vt_G(m, e->cls, pg), *dreg = vt_G(m, e->reg, pg), *ddist = vt_G(m, e->dist, pg);
    float *dw = vt_G(m, e->pe_w, pg), *db = vt_G(m, e->pe_b, pg);
    float *dnw = vt_G(m, e->en_w, pg), *dnb = vt_G(m, e->en_b, pg);
    int BN = B * N, CH = chunk_rows(m, BN);
    if (dmt) vt_k_mask_token_backward(m, dmt, dseq, midx, mmask, B, L, D, in->n_mask);
    if (dcls || dreg)
        vt_k_prefix_tokens_backward(m, dcls, dreg, dseq, midx, mmask, B, L, D, in->n_mask,
                                    c->class_token ? 1 : 0, c->reg_tokens);
    if (ddist) /* DeiT's dist_token is row 1: the prefix kernel's one register row after the class token */
        vt_k_prefix_tokens_backward(m, NULL, ddist, dseq, NULL, NULL, B, L, D, 0, 1, 1);
    if (dw || db || dimages || dnw || dnb) {
        float *dtok = vt_arena_alloc(ar, (size_t)BN * D, "enc.pre_grad.tokens");
        float *patches = vt_arena_alloc(ar, (size_t)CH * Kp, "enc.pre_grad.patches");
        float *dpatches = dimages ? vt_arena_alloc(ar, (size_t)CH * Kp, "enc.pre_grad.dpatches") : NULL;
        if (ar->overflow) return vt_arena_overflow(ar);
        vt_k_patch_tokens_backward(m, dtok, dseq, midx, mmask, B, L, D, in->n_mask, P);
        if (e->en_w >= 0) { /* patch_embed.norm: its input and statistics re-computed (same kernels) */
            float *tok = vt_arena_alloc(ar, (size_t)BN * D, "enc.pre_grad.tokens_in");
            float *nrm = vt_arena_alloc(ar, (size_t)BN * D, "enc.pre_grad.tokens_norm");
            float *st_m = vt_arena_alloc(ar, (size_t)BN, "enc.pre_grad.tokens_norm.mean");
            float *st_r = vt_arena_alloc(ar, (size_t)BN, "enc.pre_grad.tokens_norm.rstd");
            float *dpre = vt_zalloc(m, (size_t)BN * D, "enc.pre_grad.tokens_pre");
            if (ar->overflow) return vt_arena_overflow(ar);
            patch_tokens(m, in, &g, tok, patches);
            vt_norm_forward(m, c->embed_norm_layer, nrm, st_m, st_r, tok, vt_P(m, e->en_w), vt_P(m, e->en_b),
                            BN, D, (float)c->embed_norm_eps);
            vt_norm_backward(m, c->embed_norm_layer, dpre, dnw, dnb, dtok, tok, vt_P(m, e->en_w), st_m, st_r,
                             BN, D);
            dtok = dpre;
        }
        for (int m0 = 0; m0 < BN && (dw || db || dpatches); m0 += CH) {
            int n = BN - m0 < CH ? BN - m0 : CH;
            if (dw) im2col_call(m, patches, in->images, m0, n, &g);
            if (dpatches) vt_k_fill(m, dpatches, (int64_t)n * Kp, 0.0f);
            vt_k_matmul_backward(m, dpatches, dw, db, dtok + (size_t)m0 * D, patches, vt_P(m, e->pe_w), n, Kp,
                                 D);
            if (dimages) col2im_call(m, dimages, dpatches, m0, n, &g);
        }
    }
    vt_arena_reset(ar, mark);
    return VT_OK;
}

/* Encoder blocks from x0 [B,T,D] (already preprocessed), then the final norm (Identity when the
 * config pools with fc_norm or has final_norm off); *feat = the encoder's output. Keeps what the
 * layout says. */
vt_status vt_encoder_blocks(vt_model *m, const vt_inputs *in, int need_grad, const vt_chain *c,
                            const vt_chain_layout *lay, int T, float *x0, int causal, uint64_t keep,
                            float **feat) {
    vt_chain_run *r = &m->last.enc_run;
    vt_arena *ar = &m->arena;
    int B = in->batch, D = m->enc.chain.D;
    const uint8_t *cmask = causal && in->mask && in->is_causal ? in->mask : NULL;
    int rc =
        vt_chain_run_start(m, r, c, lay, B, T, cmask, m->last.enc_xs, m->last.enc_acts, x0, need_grad, keep);
    if (rc || !feat) return rc;
    *feat = r->xs[r->c->depth];
    if (m->enc.norm_w >= 0) {
        m->last.fin_ln = vt_arena_alloc(ar, (size_t)B * T * D, "enc.norm");
        m->last.fin_m = vt_arena_alloc(ar, (size_t)B * T, "enc.norm.mean");
        m->last.fin_r = vt_arena_alloc(ar, (size_t)B * T, "enc.norm.rstd");
        if (ar->overflow) return vt_arena_overflow(ar);
        vt_norm_forward(m, norm_kind(m), m->last.fin_ln, m->last.fin_m, m->last.fin_r, *feat,
                        vt_P(m, m->enc.norm_w), vt_P(m, m->enc.norm_b), (int64_t)B * T, D, norm_eps(m));
        *feat = m->last.fin_ln;
    }
    return VT_OK;
}

/* Floats the preprocessing needs on top of x0 (forward) and of dx0 (backward, worst case). */
static void plan_pre(const vt_model *m, const vt_inputs *in, uint64_t *fwd, uint64_t *bwd) {
    const vt_vit_config *c = &m->cfg.enc;
    vt_geom g;
    vt_call_geom(m, in, &g);
    uint64_t B = in->batch, D = c->embed_dim, N = g.N, L = g.L, BN = B * N;
    uint64_t T = in->idx_keep ? (uint64_t)in->n_keep : L;
    uint64_t Kp = (uint64_t)c->in_chans * c->patch_size * c->patch_size;
    uint64_t seq = in->idx_keep ? vt_round(B * L * D) : 0, CH = (uint64_t)chunk_rows(m, (int)BN);
    uint64_t tmp, rs = pos_rs_floats(m, &g, &tmp);
    *fwd = vt_round(BN * D) + vt_round(CH * Kp) + seq + rs + tmp;
    uint64_t embed_norm = m->enc.en_w >= 0 ? 3 * vt_round(BN * D) + 2 * vt_round(BN) : 0;
    *bwd = (c->pre_norm ? vt_round(B * T * D) : 0) + seq + (m->enc.pos >= 0 ? rs + tmp : 0) +
           vt_round(BN * D) + 2 * vt_round(CH * Kp) + embed_norm;
}

/* ---- the encoder calls: encode, forward (pooled), forward_intermediates ---------------------------- */


/* lightly's forward: y [B,D] = x[:, P:].mean(dim=1) for "avg", x[:, 0] otherwise (token, and
 * lightly's max / avgmax, which pool the class token too) */
static int lightly_pool(const vt_model *m) {
    return m->cfg.enc.global_pool == VT_POOL_AVG ? VT_POOLK_AVG : VT_POOLK_TOKEN;
}

/* ---- timm forward_head: pool -> fc_norm -> head ---------------------------------------------------- */

/* the pooling kernels' kinds (ops.h) of timm's global_pool (none has no kernel) */
static int pool_kernel(vt_pool pk) {
    return pk == VT_POOL_AVG      ? VT_POOLK_AVG
           : pk == VT_POOL_MAX    ? VT_POOLK_MAX
           : pk == VT_POOL_AVGMAX ? VT_POOLK_AVGMAX
                                  : VT_POOLK_TOKEN;
}

int vt_lightly_attn_pool(const vt_model *m) {
    return m->cfg.enc.global_pool == VT_POOL_MAP || m->cfg.enc.global_pool == VT_POOL_PRR;
}

/* What a head of this config is, for a call (the one description its plan and its code read). */
typedef struct {
    vt_pool pk;
    int map, prr, distilled, fcn, two;
    int rows, Tk, P_pool, copy_in; /* map: the tokens it attends over (Tk, from P_pool), copied from x */
    uint64_t B, T, D, C, H, hd, F;
} head_shape;

static void head_shape_of(const vt_model *m, int B, int T, int lightly, int two, head_shape *hs) {
    const vt_vit_config *c = &m->cfg.enc;
    const vt_encoder *e = &m->enc;
    memset(hs, 0, sizeof *hs);
    hs->pk = c->global_pool;
    hs->map = hs->pk == VT_POOL_MAP;
    hs->prr = hs->pk == VT_POOL_PRR;
    hs->distilled = c->distilled && !lightly;
    hs->fcn = e->use_fc_norm && !lightly;
    hs->two = hs->distilled && two;
    hs->B = B, hs->T = T, hs->D = e->chain.D, hs->H = e->chain.H, hs->hd = e->chain.hd, hs->F = e->ap.F;
    hs->C = lightly || c->num_classes <= 0 ? 0 : (uint64_t)c->num_classes;
    hs->rows = hs->pk == VT_POOL_NONE ? B * T : B;
    /* timm strips the prefix tokens before attn_pool unless pool_include_prefix; lightly's forward
     * never does; 'prr' takes every token (timm sets pool_include_prefix) */
    hs->P_pool = lightly || c->pool_include_prefix ? 0 : e->P;
    hs->Tk = T - (hs->map ? hs->P_pool : 0);
    hs->copy_in = hs->map && hs->P_pool > 0;
}

/* the backward scratch, in parts side by side (each rounded as the arena rounds) */
enum {
    HB_DHEAD,
    HB_DFCN,
    HB_DLC,
    HB_DLD,
    HB_DX1,
    HB_DY,
    HB_DH,
    HB_DYN,
    HB_DAO,
    HB_DQ,
    HB_DKV,
    HB_DS,
    HB_DXIN,
    HB_DPOUT,
    HB_DQKV,
    HB_PARTS
};
static uint64_t head_bwd_parts(const head_shape *hs, uint64_t part[HB_PARTS]) {
    uint64_t rows = (uint64_t)hs->rows, D = hs->D, B = hs->B, Tk = hs->Tk, T = hs->T;
    memset(part, 0, sizeof(uint64_t) * HB_PARTS);
    part[HB_DHEAD] = hs->C && !hs->distilled ? rows * D : 0;
    part[HB_DFCN] = hs->fcn ? rows * D : 0;
    if (hs->distilled) { /* d x[:,0] (HB_DHEAD's place is taken by the distilled parts), d x[:,1] */
        part[HB_DHEAD] = hs->C ? B * D : 0;
        part[HB_DX1] = hs->C ? B * D : 0;
        part[HB_DLC] = part[HB_DLD] = hs->C && !hs->two ? B * hs->C : (hs->two ? 0 : B * D);
    }
    if (hs->map) {
        part[HB_DY] = B * D;
        part[HB_DH] = B * hs->F;
        part[HB_DYN] = B * D;
        part[HB_DAO] = B * D;
        part[HB_DQ] = D;
        part[HB_DKV] = B * Tk * 2 * D;
        part[HB_DS] = B * hs->H * Tk;
        part[HB_DXIN] = hs->copy_in ? B * Tk * D : 0;
    }
    if (hs->prr) {
        part[HB_DPOUT] = B * T * D;
        part[HB_DQKV] = 3 * B * T * D;
    }
    uint64_t n = 0;
    for (int i = 0; i < HB_PARTS; i++) n += vt_round(part[i]);
    return n;
}

void vt_head_steps(const vt_model *m, int B, int T, int threads, int lightly, int two, int need_grad,
                   vt_step fwd[VT_HEAD_FWD_ROWS], vt_step bwd[VT_HEAD_BWD_ROWS]) {
    head_shape hs;
    head_shape_of(m, B, T, lightly, two, &hs);
    uint64_t rows = (uint64_t)hs.rows, D = hs.D, C = hs.C, Bu = hs.B, Tk = hs.Tk;
    for (int i = 0; i < VT_HEAD_FWD_ROWS; i++) fwd[i] = vt_keep(0);
    if (hs.map) {
        fwd[VT_HEAD_MAP_IN] = vt_keep(hs.copy_in ? Bu * Tk * D : 0);
        fwd[VT_HEAD_MAP_Q] = vt_keep(D);
        fwd[VT_HEAD_MAP_KV] = vt_keep(Bu * Tk * 2 * D);
        fwd[VT_HEAD_MAP_ATT] = vt_keep(Bu * hs.H * Tk);
        fwd[VT_HEAD_MAP_AO] = vt_keep(Bu * D);
        fwd[VT_HEAD_MAP_Y] = vt_keep(Bu * D);
        fwd[VT_HEAD_MAP_YN] = vt_keep(Bu * D);
        fwd[VT_HEAD_MAP_YN_STATS] = vt_keep(Bu);
        fwd[VT_HEAD_MAP_YN_STATS].count = 2;
        fwd[VT_HEAD_MAP_H] = vt_keep(Bu * hs.F);
        fwd[VT_HEAD_MAP_HG] = vt_keep(Bu * hs.F);
        fwd[VT_HEAD_MAP_F] = vt_keep(Bu * D);
    }
    if (hs.prr) {
        fwd[VT_HEAD_PRR_ATT] = vt_keep(Bu * hs.H * (uint64_t)T * T);
        fwd[VT_HEAD_PRR_OUT] = vt_keep(Bu * (uint64_t)T * D);
        fwd[VT_HEAD_PRR_SCR] = vt_keep(vt_attention_scratch_floats(T, (int)hs.hd, threads));
    }
    fwd[VT_HEAD_POOL] = vt_keep(hs.pk == VT_POOL_NONE ? 0 : rows * D);
    fwd[VT_HEAD_POOL2] = vt_keep(hs.distilled ? Bu * D : 0);
    fwd[VT_HEAD_NORM] = vt_keep(hs.fcn ? rows * D : 0);
    fwd[VT_HEAD_NORM_STATS] = vt_keep(hs.fcn ? rows : 0);
    fwd[VT_HEAD_NORM_STATS].count = 2;
    if (hs.distilled) {
        fwd[VT_HEAD_LOGITS] = vt_keep(C ? Bu * C : 0);
        fwd[VT_HEAD_LOGITS].count = 2;
        fwd[VT_HEAD_OUT] = vt_keep(hs.two ? 0 : Bu * (C ? C : D));
    } else {
        fwd[VT_HEAD_OUT] = vt_keep(C ? rows * C : 0);
    }
    uint64_t part[HB_PARTS];
    bwd[VT_HEAD_SCRATCH] = vt_peak(need_grad ? head_bwd_parts(&hs, part) : 0);
}

/* AttentionPoolLatent forward: y2 [B,D] = y + mlp(norm(y)), y = proj(attention(latent q, kv(x))) */
static void map_forward(vt_model *m, vt_head_run *h, const head_shape *hs) {
    const vt_attn_pool *ap = &m->enc.ap;
    int B = h->B, D = h->D, Tk = hs->Tk, H = (int)hs->H, hd = (int)hs->hd, F = (int)hs->F;
    const float *xin = h->x;
    if (hs->copy_in) { /* x[:, P:] */
        vt_k_copy2d(m, h->xin, h->x + (size_t)hs->P_pool * D, B, (int64_t)Tk * D, (int64_t)Tk * D,
                    (int64_t)h->T * D);
        xin = h->xin;
    }
    vt_k_matmul_forward(m, h->q, vt_P(m, ap->latent), vt_P(m, ap->qw), vt_P(m, ap->qb), 1, D, D);
    vt_k_matmul_forward(m, h->kv, xin, vt_P(m, ap->kvw), vt_P(m, ap->kvb), B * Tk, D, 2 * D);
    vt_k_cross_attention_forward(m, h->ao, h->att, h->q, h->kv, h->kv + D, B, 1, Tk, H, hd, 0, 2 * D,
                                 1.0f / sqrtf((float)hd));
    vt_k_matmul_forward(m, h->y, h->ao, vt_P(m, ap->pw), vt_P(m, ap->pb), B, D, D);
    vt_norm_forward(m, norm_kind(m), h->yn, h->ynm, h->ynr, h->y, vt_P(m, ap->nw), vt_P(m, ap->nb), B, D,
                    norm_eps(m));
    vt_k_matmul_forward(m, h->h, h->yn, vt_P(m, ap->f1w), vt_P(m, ap->f1b), B, D, F);
    if (m->cfg.enc.act_layer == VT_ACT_QUICK_GELU)
        vt_k_quick_gelu_forward(m, h->hg, h->h, (int64_t)B * F);
    else if (m->cfg.enc.act_layer == VT_ACT_GELU_TANH)
        vt_k_gelu_tanh_forward(m, h->hg, h->h, (int64_t)B * F);
    else
        vt_k_gelu_forward(m, h->hg, h->h, (int64_t)B * F);
    vt_k_matmul_forward(m, h->f, h->hg, vt_P(m, ap->f2w), vt_P(m, ap->f2b), B, F, D);
    /* x + mlp(norm(x)): the residual sum into the pool's output (latent_len 1: pool 'token' is it) */
    vt_k_copy2d(m, h->pooled, h->y, 1, (int64_t)B * D, 0, 0);
    vt_k_add2d(m, h->pooled, h->f, 1, (int64_t)B * D, 0, 0);
}

vt_status vt_head_forward(vt_model *m, vt_head_run *h, const float *x, int B, int T, int threads, int lightly,
                          int two) {
    const vt_encoder *e = &m->enc;
    vt_arena *ar = &m->arena;
    vt_step st[VT_HEAD_FWD_ROWS], bst[VT_HEAD_BWD_ROWS];
    head_shape hs;
    head_shape_of(m, B, T, lightly, two, &hs);
    vt_head_steps(m, B, T, threads, lightly, two, 0, st, bst);
    vt_pool pk = hs.pk;
    int D = (int)hs.D, P = e->P, C = (int)hs.C;
    memset(h, 0, sizeof *h);
    h->B = B;
    h->T = T;
    h->D = D;
    h->C = C;
    h->threads = threads;
    h->lightly = lightly;
    h->two = hs.two;
    h->x = x;
    h->rows = hs.rows;
    h->Tk = hs.Tk;
    int Pp = lightly ? P : m->cfg.enc.pool_include_prefix ? 0 : P; /* global pools' prefix */
    if ((pk == VT_POOL_AVG || pk == VT_POOL_MAX || pk == VT_POOL_AVGMAX) && T <= Pp)
        return vt_fail(VT_ERR_ARG, "%s pooling needs at least one token after the %d prefix tokens",
                       vt_pool_name(pk), Pp);
    if (hs.map && hs.Tk < 1)
        return vt_fail(VT_ERR_ARG, "map pooling needs at least one token after the %d prefix tokens",
                       hs.P_pool);
#define A(row, what) (st[row].n ? vt_arena_alloc(ar, st[row].n, what) : NULL)
    if (hs.map) {
        h->xin = A(VT_HEAD_MAP_IN, "head.attn_pool.in");
        h->q = A(VT_HEAD_MAP_Q, "head.attn_pool.q");
        h->kv = A(VT_HEAD_MAP_KV, "head.attn_pool.kv");
        h->att = A(VT_HEAD_MAP_ATT, "head.attn_pool.att");
        h->ao = A(VT_HEAD_MAP_AO, "head.attn_pool.attn_out");
        h->y = A(VT_HEAD_MAP_Y, "head.attn_pool.proj_out");
        h->yn = A(VT_HEAD_MAP_YN, "head.attn_pool.norm");
        h->ynm = A(VT_HEAD_MAP_YN_STATS, "head.attn_pool.norm.mean");
        h->ynr = A(VT_HEAD_MAP_YN_STATS, "head.attn_pool.norm.rstd");
        h->h = A(VT_HEAD_MAP_H, "head.attn_pool.fc1_out");
        h->hg = A(VT_HEAD_MAP_HG, "head.attn_pool.act_out");
        h->f = A(VT_HEAD_MAP_F, "head.attn_pool.fc2_out");
    }
    if (hs.prr) {
        h->patt = A(VT_HEAD_PRR_ATT, "head.prr.att");
        h->pout = A(VT_HEAD_PRR_OUT, "head.prr.out");
        h->pscr = A(VT_HEAD_PRR_SCR, "head.prr.attn_scratch");
    }
    h->pooled = pk == VT_POOL_NONE ? (float *)x : A(VT_HEAD_POOL, "head.pooled");
    h->px1 = A(VT_HEAD_POOL2, "head.pooled_dist");
    if (hs.fcn) {
        h->normed = A(VT_HEAD_NORM, "head.fc_norm");
        h->mean = A(VT_HEAD_NORM_STATS, "head.fc_norm.mean");
        h->rstd = A(VT_HEAD_NORM_STATS, "head.fc_norm.rstd");
    }
    if (hs.distilled && C) {
        h->lc = A(VT_HEAD_LOGITS, "head.logits");
        h->ld = A(VT_HEAD_LOGITS, "head.logits_dist");
    }
    float *logits = A(VT_HEAD_OUT, "head.out");
#undef A
    if (ar->overflow) return vt_arena_overflow(ar);
    /* pool */
    if (hs.map)
        map_forward(m, h, &hs);
    else if (hs.prr) { /* parameter-free self-attention: q = k = v = x, heads as split from D */
        int hd = (int)hs.hd, H = (int)hs.H;
        vt_k_attention_forward(m, h->pout, h->patt, h->pscr, x, x, x, NULL, D, D, B, T, H, hd, threads,
                               1.0f / sqrtf((float)hd));
        vt_k_pool_forward(m, h->pooled, h->pout, B, T, D, 0,
                          m->cfg.enc.class_token ? VT_POOLK_TOKEN : VT_POOLK_AVG);
    } else if (hs.distilled) { /* x[:,0], x[:,1] */
        vt_k_copy2d(m, h->pooled, x, B, D, D, (int64_t)T * D);
        vt_k_copy2d(m, h->px1, x + D, B, D, D, (int64_t)T * D);
    } else if (pk != VT_POOL_NONE)
        vt_k_pool_forward(m, h->pooled, x, B, T, D, Pp, pool_kernel(pk));
    const float *hin = h->pooled;
    if (hs.fcn) {
        vt_norm_forward(m, norm_kind(m), h->normed, h->mean, h->rstd, h->pooled, vt_P(m, e->fcn_w),
                        vt_P(m, e->fcn_b), h->rows, D, norm_eps(m));
        hin = h->normed;
    }
    if (hs.distilled) { /* head(x[:,0]), head_dist(x[:,1]); averaged unless distilled_training */
        const float *lc = h->pooled, *ld = h->px1;
        if (C) {
            vt_k_matmul_forward(m, h->lc, h->pooled, vt_P(m, e->head_w), vt_P(m, e->head_b), B, D, C);
            vt_k_matmul_forward(m, h->ld, h->px1, vt_P(m, e->hdist_w), vt_P(m, e->hdist_b), B, D, C);
            lc = h->lc, ld = h->ld;
        }
        if (hs.two) {
            h->out = (float *)lc;
            h->out2 = (float *)ld;
        } else { /* (x + x_dist) / 2: the halves (exact) added to zero: the same bits */
            int64_t n = (int64_t)B * (C ? C : D);
            vt_k_fill(m, logits, n, 0.0f);
            vt_k_add_scaled(m, logits, lc, n, 0.5f);
            vt_k_add_scaled(m, logits, ld, n, 0.5f);
            h->out = logits;
        }
        return VT_OK;
    }
    if (C) vt_k_matmul_forward(m, logits, hin, vt_P(m, e->head_w), vt_P(m, e->head_b), h->rows, D, C);
    h->out = C ? logits : (float *)hin;
    return VT_OK;
}

static void act_backward_of(vt_model *m, float *dinp, const float *inp, const float *dout, int64_t n) {
    if (m->cfg.enc.act_layer == VT_ACT_QUICK_GELU)
        vt_k_quick_gelu_backward(m, dinp, inp, dout, n);
    else if (m->cfg.enc.act_layer == VT_ACT_GELU_TANH)
        vt_k_gelu_tanh_backward(m, dinp, inp, dout, n);
    else
        vt_k_gelu_backward(m, dinp, inp, dout, n);
}

/* AttentionPoolLatent backward: d y2 [B,D] -> parameter grads, dx (+=) */
static void map_backward(vt_model *m, const vt_head_run *h, const head_shape *hs, const float *dy2, float *dx,
                         float *const *part, int pg) {
    const vt_attn_pool *ap = &m->enc.ap;
    int B = h->B, D = h->D, Tk = hs->Tk, H = (int)hs->H, hd = (int)hs->hd, F = (int)hs->F;
    float *dy = part[HB_DY], *dh = part[HB_DH], *dyn = part[HB_DYN], *dao = part[HB_DAO], *dq = part[HB_DQ];
    float *dkv = part[HB_DKV], *ds = part[HB_DS], *dxin = hs->copy_in ? part[HB_DXIN] : dx;
    /* y2 = y + fc2(act(fc1(norm(y)))) */
    vt_k_copy2d(m, dy, dy2, 1, (int64_t)B * D, 0, 0);
    vt_k_fill(m, dh, (int64_t)B * F, 0.0f);
    vt_k_matmul_backward(m, dh, vt_G(m, ap->f2w, pg), vt_G(m, ap->f2b, pg), dy2, h->hg, vt_P(m, ap->f2w), B,
                         F, D);
    act_backward_of(m, dh, h->h, dh, (int64_t)B * F);
    vt_k_fill(m, dyn, (int64_t)B * D, 0.0f);
    vt_k_matmul_backward(m, dyn, vt_G(m, ap->f1w, pg), vt_G(m, ap->f1b, pg), dh, h->yn, vt_P(m, ap->f1w), B,
                         D, F);
    vt_norm_backward(m, norm_kind(m), dy, vt_G(m, ap->nw, pg), vt_G(m, ap->nb, pg), dyn, h->y,
                     vt_P(m, ap->nw), h->ynm, h->ynr, B, D);
    /* y = proj(ao) */
    vt_k_fill(m, dao, (int64_t)B * D, 0.0f);
    vt_k_matmul_backward(m, dao, vt_G(m, ap->pw, pg), vt_G(m, ap->pb, pg), dy, h->ao, vt_P(m, ap->pw), B, D,
                         D);
    /* ao = attention(q, k, v): q shared by the images */
    vt_k_fill(m, dq, D, 0.0f);
    vt_k_fill(m, dkv, (int64_t)B * Tk * 2 * D, 0.0f);
    vt_k_cross_attention_backward(m, dq, dkv, dkv + D, ds, dao, h->att, h->q, h->kv, h->kv + D, B, 1, Tk, H,
                                  hd, 0, 2 * D, 1.0f / sqrtf((float)hd));
    /* kv = xin @ kv^T + b; q = latent @ q^T + b (its input gradient is the latent's) */
    if (hs->copy_in) vt_k_fill(m, dxin, (int64_t)B * Tk * D, 0.0f);
    vt_k_matmul_backward(m, dxin, vt_G(m, ap->kvw, pg), vt_G(m, ap->kvb, pg), dkv,
                         hs->copy_in ? h->xin : h->x, vt_P(m, ap->kvw), B * Tk, D, 2 * D);
    vt_k_matmul_backward(m, vt_G(m, ap->latent, pg), vt_G(m, ap->qw, pg), vt_G(m, ap->qb, pg), dq,
                         vt_P(m, ap->latent), vt_P(m, ap->qw), 1, D, D);
    if (hs->copy_in)
        vt_k_add2d(m, dx + (size_t)hs->P_pool * D, dxin, B, (int64_t)Tk * D, (int64_t)h->T * D,
                   (int64_t)Tk * D);
}

vt_status vt_head_backward(vt_model *m, const vt_head_run *h, const float *dy, const float *dy2, float *dx,
                           int pg) {
    const vt_encoder *e = &m->enc;
    vt_arena *ar = &m->arena;
    head_shape hs;
    head_shape_of(m, h->B, h->T, h->lightly, h->two, &hs);
    vt_pool pk = hs.pk;
    int B = h->B, T = h->T, D = h->D, P = e->P, C = h->C;
    size_t mark = vt_arena_mark(ar);
    uint64_t psz[HB_PARTS], total = head_bwd_parts(&hs, psz);
    float *scratch = total ? vt_zalloc(m, total, "head.grad") : NULL, *part[HB_PARTS];
    if (ar->overflow) return vt_arena_overflow(ar);
    uint64_t off = 0;
    for (int i = 0; i < HB_PARTS; i++) {
        part[i] = psz[i] ? scratch + off : NULL;
        off += vt_round(psz[i]);
    }
    if (hs.distilled) { /* out = (head(x0) + head_dist(x1)) / 2, or both */
        float *dx0 = part[HB_DHEAD], *dx1 = part[HB_DX1];
        const float *dlc = dy, *dld = hs.two ? dy2 : dy;
        if (!hs.two) {
            int64_t n = (int64_t)B * (C ? C : D);
            if (dy) vt_k_add_scaled(m, part[HB_DLC], dy, n, 0.5f);
            if (dy) vt_k_add_scaled(m, part[HB_DLD], dy, n, 0.5f);
            dlc = part[HB_DLC];
            dld = part[HB_DLD];
        }
        if (C) {
            if (dlc)
                vt_k_matmul_backward(m, dx0, vt_G(m, e->head_w, pg), vt_G(m, e->head_b, pg), dlc, h->pooled,
                                     vt_P(m, e->head_w), B, D, C);
            if (dld)
                vt_k_matmul_backward(m, dx1, vt_G(m, e->hdist_w, pg), vt_G(m, e->hdist_b, pg), dld, h->px1,
                                     vt_P(m, e->hdist_w), B, D, C);
        } else {
            dx0 = (float *)dlc, dx1 = (float *)dld;
        }
        if (dx0) vt_k_add2d(m, dx, dx0, B, D, (int64_t)T * D, D);
        if (dx1) vt_k_add2d(m, dx + D, dx1, B, D, (int64_t)T * D, D);
        vt_arena_reset(ar, mark);
        return VT_OK;
    }
    const float *hin = hs.fcn ? h->normed : h->pooled;
    const float *dh = dy; /* d(head input) [rows, D] */
    if (C) {
        vt_k_matmul_backward(m, part[HB_DHEAD], vt_G(m, e->head_w, pg), vt_G(m, e->head_b, pg), dy, hin,
                             vt_P(m, e->head_w), h->rows, D, C);
        dh = part[HB_DHEAD];
    }
    const float *dp = dh; /* d(pool output) [rows, D] */
    if (hs.fcn) {
        vt_norm_backward(m, norm_kind(m), part[HB_DFCN], vt_G(m, e->fcn_w, pg), vt_G(m, e->fcn_b, pg), dh,
                         h->pooled, vt_P(m, e->fcn_w), h->mean, h->rstd, h->rows, D);
        dp = part[HB_DFCN];
    }
    if (hs.map)
        map_backward(m, h, &hs, dp, dx, part, pg);
    else if (hs.prr) {
        int hd = (int)hs.hd, H = (int)hs.H;
        float *dpo = part[HB_DPOUT], *dq = part[HB_DQKV], *dk = dq + (size_t)B * T * D,
              *dv = dk + (size_t)B * T * D;
        vt_k_pool_backward(m, dpo, dp, h->pout, B, T, D, 0,
                           m->cfg.enc.class_token ? VT_POOLK_TOKEN : VT_POOLK_AVG, 0);
        vt_k_attention_backward(m, dq, dk, dv, h->pscr, dpo, h->patt, h->x, h->x, h->x, D, D, B, T, H, hd,
                                h->threads, 1.0f / sqrtf((float)hd));
        vt_k_add2d(m, dx, dq, 1, (int64_t)B * T * D, 0, 0);
        vt_k_add2d(m, dx, dk, 1, (int64_t)B * T * D, 0, 0);
        vt_k_add2d(m, dx, dv, 1, (int64_t)B * T * D, 0, 0);
    } else if (pk == VT_POOL_NONE)
        vt_k_add2d(m, dx, dp, 1, (int64_t)B * T * D, 0, 0);
    else
        vt_k_pool_backward(m, dx, dp, h->x, B, T, D, h->lightly || !m->cfg.enc.pool_include_prefix ? P : 0,
                           pool_kernel(pk), 0);
    vt_arena_reset(ar, mark);
    return VT_OK;
}

/* The encoder call's step table: the encoder's rows, then pooling or the normed intermediates
 * (lightly's), or timm's intermediates (their norm statistics, spatial and prefix tokens, the
 * normed sequence a copy is taken from); the backward: d pooled features, then the encoder's
 * backward rows. */
enum {
    CALL_ENC = 0,
    CALL_POOL = VT_ENC_FWD_ROWS,
    CALL_HEAD,
    CALL_INTER = CALL_HEAD + VT_HEAD_FWD_ROWS,
    CALL_INTER_STATS,
    CALL_TI_STATS,
    CALL_TI_SPATIAL,
    CALL_TI_PREFIX,
    CALL_TI_NORMED,
    CALL_DFIN,
    CALL_HEAD_BWD,
    CALL_ENC_BWD = CALL_HEAD_BWD + VT_HEAD_BWD_ROWS,
    CALL_ROWS = CALL_ENC_BWD + VT_ENC_BWD_ROWS
};

/* the tokens a call's encoder runs on */
static int call_tokens(const vt_model *m, const vt_inputs *in) {
    vt_geom g;
    vt_call_geom(m, in, &g);
    return in->idx_keep ? in->n_keep : g.L;
}

/* lightly's forward pools through attn_pool ('map', 'prr'): the head's code, lightly = 1 */
static int forward_head_kind(const vt_model *m, vt_fn fn) {
    return fn == VT_FN_TIMM_FORWARD ? 1 : fn == VT_FN_FORWARD && vt_lightly_attn_pool(m) ? 2 : 0;
}

/* ---- timm's forward_intermediates ------------------------------------------------------------------ */

vt_status vt_take_indices(int depth, const int *indices, int n, int last_n, uint64_t *take) {
    if (!take) return vt_fail(VT_ERR_ARG, "vt_take_indices: take is NULL");
    *take = 0;
    if (depth < 1 || depth > VT_MAX_DEPTH)
        return vt_fail(VT_ERR_ARG, "indices: a model of %d blocks (1 to %d)", depth, VT_MAX_DEPTH);
    if (last_n) { /* timm: an int n takes the last n */
        if (last_n < 1 || last_n > depth)
            return vt_fail(VT_ERR_ARG, "indices: last-n (%d) is out of range (1 to %d)", last_n, depth);
        for (int i = depth - last_n; i < depth; i++) *take |= (uint64_t)1 << i;
        return VT_OK;
    }
    if (n < 0 || !indices) { /* None: every block */
        if (n > 0) return vt_fail(VT_ERR_ARG, "indices: %d indices given as NULL", n);
        for (int i = 0; i < depth; i++) *take |= (uint64_t)1 << i;
        return n < 0 ? VT_OK : vt_fail(VT_ERR_ARG, "indices: an empty list (timm takes at least one)");
    }
    if (n == 0) return vt_fail(VT_ERR_ARG, "indices: an empty list (timm takes at least one)");
    for (int k = 0; k < n; k++) {
        int idx = indices[k] < 0 ? depth + indices[k] : indices[k];
        if (idx < 0 || idx >= depth)
            return vt_fail(VT_ERR_ARG, "indices: feature index %d is out of range (0 to %d)", idx, depth - 1);
        *take |= (uint64_t)1 << idx;
    }
    return VT_OK;
}

/* What a call of timm's forward_intermediates returns (the one description its plan, forward,
 * backward and outputs read). */
typedef struct {
    uint64_t take; /* blocks taken (never 0) */
    int n, last;   /* how many, the last one */
    int norm;      /* the final norm applied to each (and the model has one) */
    int copy;      /* the spatial tokens are a copy (NCHW, or prefix tokens to split off) */
    int prefix;    /* prefix tokens returned (return_prefix_tokens and P > 0) */
    int o_spatial; /* output index of the first spatial tensor (0 with intermediates_only) */
    int o_prefix;  /* of the first prefix tensor */
    int n_outs;
    int B, T, N, P, D, Gh, Gw;
} ti_shape;

static void ti_shape_of(const vt_model *m, const vt_inputs *in, ti_shape *t) {
    const vt_inter_opts *o = &in->inter;
    int depth = m->enc.chain.depth;
    vt_geom g;
    vt_call_geom(m, in, &g);
    memset(t, 0, sizeof *t);
    t->take = o->take ? o->take : (depth >= 64 ? VT_KEEP_ALL : (((uint64_t)1 << depth) - 1));
    for (int i = 0; i < depth; i++)
        if (t->take >> i & 1) t->n++, t->last = i;
    t->B = in->batch, t->T = g.L, t->N = g.N, t->P = m->enc.P, t->D = m->enc.chain.D, t->Gh = g.Gh,
    t->Gw = g.Gw;
    t->norm = o->norm && has_norm(m);
    t->copy = o->nchw || t->P > 0;
    t->prefix = o->return_prefix_tokens && t->P > 0;
    t->o_spatial = o->intermediates_only ? 0 : 1;
    t->o_prefix = t->o_spatial + t->n;
    t->n_outs = t->o_prefix + (t->prefix ? t->n : 0);
}

/* the chain a call runs: the encoder's, or with timm's stop_early its blocks up to the last taken */
static const vt_chain *call_chain(const vt_model *m, vt_fn fn, const vt_inputs *in) {
    if (fn != VT_FN_TIMM_INTERMEDIATES || !in->inter.stop_early) return &m->enc.chain;
    ti_shape t;
    ti_shape_of(m, in, &t);
    return &m->enc.upto[t.last];
}

/* the block outputs the chain keeps for the call's outputs */
static uint64_t call_keep(const vt_model *m, vt_fn fn, const vt_inputs *in) {
    if (vt_fn_is_inter(fn)) return VT_KEEP_ALL;
    if (fn != VT_FN_TIMM_INTERMEDIATES) return 0;
    ti_shape t;
    ti_shape_of(m, in, &t);
    return t.take;
}

/* floats of the scratch the backward of one timm intermediate needs (on top of the chain's) */
static uint64_t ti_bwd_scratch(const ti_shape *t, int nchw) {
    uint64_t B = t->B, D = t->D;
    return t->norm ? vt_round(B * t->T * D) : nchw ? vt_round(B * t->N * D) : 0;
}

static void call_steps(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                       const vt_chain_layout *lay, vt_step st[CALL_ROWS]) {
    uint64_t B = in->batch, D = m->enc.chain.D, T = (uint64_t)call_tokens(m, in);
    int head = forward_head_kind(m, fn), ti = fn == VT_FN_TIMM_INTERMEDIATES;
    int pool = fn == VT_FN_FORWARD && has_pool(m) && !head,
        inter_norm = fn == VT_FN_INTERMEDIATES_NORM && has_norm(m);
    vt_encoder_steps(m, in, (int)T, need_grad, call_chain(m, fn, in), call_keep(m, fn, in), lay,
                     st + CALL_ENC, st + CALL_ENC_BWD);
    st[CALL_POOL] = vt_keep(pool ? B * D : 0);
    vt_head_steps(m, (int)B, (int)T, lay->threads, head == 2, in->distilled_training, need_grad,
                  st + CALL_HEAD, st + CALL_HEAD_BWD);
    for (int i = 0; i < VT_HEAD_FWD_ROWS; i++) st[CALL_HEAD + i].n *= (uint64_t)(head != 0);
    for (int i = 0; i < VT_HEAD_BWD_ROWS; i++) st[CALL_HEAD_BWD + i].n *= (uint64_t)(head != 0);
    st[CALL_INTER] = vt_keep(B * T * D);
    st[CALL_INTER].count = inter_norm ? (uint64_t)m->enc.chain.depth : 0;
    st[CALL_INTER_STATS] = vt_keep(B * T);
    st[CALL_INTER_STATS].count = 2 * st[CALL_INTER].count;
    ti_shape t;
    if (ti) ti_shape_of(m, in, &t);
    uint64_t n_ti = ti ? (uint64_t)t.n : 0, N = ti ? (uint64_t)t.N : 0, P = ti ? (uint64_t)t.P : 0;
    st[CALL_TI_STATS] = vt_keep(B * T);
    st[CALL_TI_STATS].count = ti && t.norm ? 2 * n_ti : 0;
    st[CALL_TI_SPATIAL] = vt_keep(B * N * D); /* a copy, or the normed sequence itself (P = 0, NLC) */
    st[CALL_TI_SPATIAL].count = ti && (t.copy || t.norm) ? n_ti : 0;
    st[CALL_TI_PREFIX] = vt_keep(B * P * D);
    st[CALL_TI_PREFIX].count = ti && t.prefix ? n_ti : 0;
    st[CALL_TI_NORMED] = vt_peak(ti && t.norm && t.copy ? B * T * D : 0);
    if (ti && in->inter.intermediates_only) /* timm applies no final norm then */
        for (int r = VT_ENC_NORM; r <= VT_ENC_NORM_STATS; r++) st[CALL_ENC + r].n = 0;
    if (ti && need_grad) st[CALL_ENC_BWD + VT_ENC_BWD].n += ti_bwd_scratch(&t, in->inter.nchw);
    st[CALL_DFIN] = vt_keep(need_grad && (pool || head) ? B * T * D : 0);
}

uint64_t vt_encoder_call_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                              const vt_chain_layout *lay) {
    vt_step st[CALL_ROWS];
    call_steps(m, fn, in, need_grad, lay, st);
    return vt_steps_peak(st, CALL_ROWS);
}

/* timm's forward_intermediates after the blocks: per block taken, its output (normed), its
 * spatial tokens (split from the prefix, NCHW) and its prefix tokens, as the outputs */
static vt_status ti_outputs(vt_model *m, const vt_inputs *in, const vt_step *st, float *out) {
    vt_arena *ar = &m->arena;
    const vt_chain_run *r = &m->last.enc_run;
    ti_shape t;
    ti_shape_of(m, in, &t);
    int B = t.B, T = t.T, N = t.N, P = t.P, D = t.D, nchw = in->inter.nchw;
    vt_call_state *ls = &m->last;
    ls->n_outs = t.n_outs;
    ls->n_taken = t.n;
    if (!in->inter.intermediates_only) {
        ls->outs[0] = out;
        ls->outs_ndim[0] = 3;
        ls->outs_shape[0][0] = B, ls->outs_shape[0][1] = T, ls->outs_shape[0][2] = D,
        ls->outs_shape[0][3] = 0;
    }
    /* the kept outputs first, in the table's order; then the normed sequence's scratch on top */
    float *sp[VT_MAX_DEPTH] = { 0 }, *pf[VT_MAX_DEPTH] = { 0 };
    for (int i = 0, k = 0; i <= t.last; i++) {
        if (!(t.take >> i & 1)) continue;
        ls->ti_block[k] = i;
        if (t.norm) {
            ls->inter_m[k] = vt_arena_alloc(ar, st[CALL_TI_STATS].n, "enc.intermediates.%d.mean", i);
            ls->inter_r[k] = vt_arena_alloc(ar, st[CALL_TI_STATS].n, "enc.intermediates.%d.rstd", i);
        }
        k++;
    }
    for (int k = 0; k < t.n && (t.copy || t.norm); k++)
        sp[k] = vt_arena_alloc(ar, st[CALL_TI_SPATIAL].n, "enc.intermediates.%d", ls->ti_block[k]);
    for (int k = 0; k < t.n && t.prefix; k++)
        pf[k] = vt_arena_alloc(ar, st[CALL_TI_PREFIX].n, "enc.intermediates.%d.prefix", ls->ti_block[k]);
    size_t mark = vt_arena_mark(ar);
    float *normed =
        st[CALL_TI_NORMED].n ? vt_arena_alloc(ar, st[CALL_TI_NORMED].n, "enc.intermediates.normed") : NULL;
    if (ar->overflow) return vt_arena_overflow(ar);
    for (int k = 0; k < t.n; k++) {
        int i = ls->ti_block[k];
        const float *x = r->xs[i + 1]; /* [B, T, D] */
        if (t.norm) {
            float *y = t.copy ? normed : sp[k];
            vt_norm_forward(m, norm_kind(m), y, ls->inter_m[k], ls->inter_r[k], x, vt_P(m, m->enc.norm_w),
                            vt_P(m, m->enc.norm_b), (int64_t)B * T, D, norm_eps(m));
            x = y;
        }
        /* y[:, P:] as [B, N, D], or transposed per image to [B, D, N] (= [B, D, Gh, Gw]) */
        if (nchw)
            vt_k_transpose(m, sp[k], x + (size_t)P * D, B, N, D, (int64_t)D * N, N, (int64_t)T * D, D);
        else if (P > 0)
            vt_k_copy2d(m, sp[k], x + (size_t)P * D, B, (int64_t)N * D, (int64_t)N * D, (int64_t)T * D);
        else
            sp[k] = (float *)x; /* the whole sequence: the block's output, or its norm */
        if (t.prefix) vt_k_copy2d(m, pf[k], x, B, (int64_t)P * D, (int64_t)P * D, (int64_t)T * D);
        int o = t.o_spatial + k;
        ls->outs[o] = sp[k];
        ls->outs_ndim[o] = nchw ? 4 : 3;
        int64_t *sh = ls->outs_shape[o];
        if (nchw)
            sh[0] = B, sh[1] = D, sh[2] = t.Gh, sh[3] = t.Gw;
        else
            sh[0] = B, sh[1] = N, sh[2] = D, sh[3] = 0;
        if (t.prefix) {
            o = t.o_prefix + k;
            ls->outs[o] = pf[k];
            ls->outs_ndim[o] = 3;
            ls->outs_shape[o][0] = B, ls->outs_shape[o][1] = P, ls->outs_shape[o][2] = D,
            ls->outs_shape[o][3] = 0;
        }
    }
    vt_arena_reset(ar, mark);
    return VT_OK;
}

vt_status vt_encoder_call_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                                  const vt_chain_layout *lay) {
    const vt_chain *c = &m->enc.chain;
    vt_arena *ar = &m->arena;
    int B = in->batch, D = c->D, T = call_tokens(m, in);
    int causal = vt_causal_kind(m), head = forward_head_kind(m, fn), ti = fn == VT_FN_TIMM_INTERMEDIATES;
    vt_step st[CALL_ROWS];
    call_steps(m, fn, in, need_grad, lay, st);
    float *x0 = vt_arena_alloc(ar, st[CALL_ENC + VT_ENC_X0].n, "enc.in");
    if (!x0) return vt_arena_overflow(ar);
    int rc = vt_encoder_preprocess(m, in, causal, need_grad, x0);
    if (rc) return rc;
    m->last.out = NULL;
    rc = vt_encoder_blocks(m, in, need_grad, call_chain(m, fn, in), lay, T, x0, causal, call_keep(m, fn, in),
                           ti && in->inter.intermediates_only ? NULL : &m->last.out);
    if (rc) return rc;
    if (ti) return ti_outputs(m, in, st, m->last.out);
    const vt_chain_run *r = &m->last.enc_run;
    m->last.out_ndim = 3;
    m->last.out_shape[0] = B;
    m->last.out_shape[1] = T;
    m->last.out_shape[2] = D;
    if (fn == VT_FN_FORWARD && has_pool(m) && !head) {
        float *pooled = vt_arena_alloc(ar, st[CALL_POOL].n, "enc.pooled");
        if (!pooled) return vt_arena_overflow(ar);
        vt_k_pool_forward(m, pooled, m->last.out, B, T, D, m->enc.P, lightly_pool(m));
        m->last.out = pooled;
        m->last.out_ndim = 2;
        m->last.out_shape[1] = D;
    }
    if (head) {
        vt_head_run *h = &m->last.head;
        rc = vt_head_forward(m, h, m->last.out, B, T, lay->threads, head == 2, in->distilled_training);
        if (rc) return rc;
        m->last.out = h->out;
        m->last.out2 = h->out2;
        int width = h->C ? h->C : D;
        m->last.out_ndim = m->cfg.enc.global_pool == VT_POOL_NONE ? 3 : 2;
        m->last.out_shape[m->last.out_ndim - 1] = width;
    }
    if (vt_fn_is_inter(fn))
        for (int i = 0; i < c->depth; i++) {
            m->last.inter[i] = r->xs[i + 1];
            if (fn == VT_FN_INTERMEDIATES_NORM && has_norm(m)) {
                m->last.inter[i] = vt_arena_alloc(ar, st[CALL_INTER].n, "enc.intermediates.%d", i);
                m->last.inter_m[i] =
                    vt_arena_alloc(ar, st[CALL_INTER_STATS].n, "enc.intermediates.%d.mean", i);
                m->last.inter_r[i] =
                    vt_arena_alloc(ar, st[CALL_INTER_STATS].n, "enc.intermediates.%d.rstd", i);
                if (ar->overflow) return vt_arena_overflow(ar);
                vt_norm_forward(m, norm_kind(m), m->last.inter[i], m->last.inter_m[i], m->last.inter_r[i],
                                r->xs[i + 1], vt_P(m, m->enc.norm_w), vt_P(m, m->enc.norm_b), (int64_t)B * T,
                                D, norm_eps(m));
            }
        }
    return VT_OK;
}

/* d features (the encoder's output, after its final norm; NULL = zero) -> encoder parameters and
 * images. inject (may be NULL) adds the gradients of intermediates during the chain backward. */
vt_status vt_encoder_backward(vt_model *m, const float *dfeat, vt_inject_fn inject, void *ctx, float *dimages,
                              int pg) {
    vt_chain_run *r = &m->last.enc_run;
    size_t M = (size_t)r->B * r->T;
    int D = r->c->D;
    float *dres = vt_zalloc(m, M * D, "enc.grad");
    if (!dres) return vt_arena_overflow(&m->arena);
    if (dfeat) {
        if (has_norm(m))
            vt_norm_backward(m, norm_kind(m), dres, vt_G(m, m->enc.norm_w, pg), vt_G(m, m->enc.norm_b, pg),
                             dfeat, r->xs[r->c->depth], vt_P(m, m->enc.norm_w), m->last.fin_m, m->last.fin_r,
                             M, D);
        else
            vt_k_add2d(m, dres, dfeat, 1, (int64_t)(M * D), 0, 0);
    }
    vt_status rc = vt_chain_backward(m, r, dres, pg, inject, ctx);
    if (!rc) rc = vt_encoder_backward_pre(m, &m->last.in, vt_causal_kind(m), dres, dimages, pg);
    return rc;
}

typedef struct {
    const float *const *douts;
    int n_douts, pg;
} inject_ctx;

/* forward_intermediates: the gradient of intermediate i joins the chain's after block i */
static void inject_intermediates(vt_model *m, void *vctx, int i, float *dres) {
    inject_ctx *ctx = vctx;
    if (1 + i >= ctx->n_douts || !ctx->douts[1 + i]) return;
    const float *dI = ctx->douts[1 + i];
    const vt_chain_run *r = &m->last.enc_run;
    int M = r->B * r->T, D = r->c->D;
    if (m->last.fn == VT_FN_INTERMEDIATES_NORM && has_norm(m))
        vt_norm_backward(m, norm_kind(m), dres, vt_G(m, m->enc.norm_w, ctx->pg),
                         vt_G(m, m->enc.norm_b, ctx->pg), dI, r->xs[i + 1], vt_P(m, m->enc.norm_w),
                         m->last.inter_m[i], m->last.inter_r[i], M, D);
    else
        vt_k_add2d(m, dres, dI, 1, (int64_t)M * D, 0, 0);
}

/* timm's forward_intermediates: the gradients of block i's spatial and prefix tokens join the
 * chain's after block i -- put back in the sequence's layout (transposed from NCHW), then through
 * the norm when it was applied */
static void inject_timm_intermediates(vt_model *m, void *vctx, int i, float *dres) {
    inject_ctx *ctx = vctx;
    const vt_inputs *in = &m->last.in;
    ti_shape t;
    ti_shape_of(m, in, &t);
    if (!(t.take >> i & 1)) return;
    int k = 0;
    while (m->last.ti_block[k] != i) k++;
    int os = t.o_spatial + k, op = t.o_prefix + k;
    const float *dsp = os < ctx->n_douts ? ctx->douts[os] : NULL;
    const float *dpf = t.prefix && op < ctx->n_douts ? ctx->douts[op] : NULL;
    if (!dsp && !dpf) return;
    int64_t B = t.B, T = t.T, N = t.N, P = t.P, D = t.D;
    int nchw = in->inter.nchw;
    vt_arena *ar = &m->arena;
    size_t mark = vt_arena_mark(ar);
    float *scr = NULL;
    uint64_t n_scr = ti_bwd_scratch(&t, nchw);
    if (n_scr && !(scr = vt_arena_alloc(ar, (size_t)n_scr, "enc.grad.intermediates.%d", i))) return;
    if (t.norm) { /* d(normed sequence) [B, T, D], then the norm's backward into dres */
        vt_k_fill(m, scr, B * T * D, 0.0f);
        if (dsp && nchw)
            vt_k_transpose(m, scr + P * D, dsp, B, D, N, T * D, D, D * N, N);
        else if (dsp)
            vt_k_copy2d(m, scr + P * D, dsp, B, N * D, T * D, N * D);
        if (dpf) vt_k_copy2d(m, scr, dpf, B, P * D, T * D, P * D);
        vt_norm_backward(m, norm_kind(m), dres, vt_G(m, m->enc.norm_w, ctx->pg),
                         vt_G(m, m->enc.norm_b, ctx->pg), scr, m->last.enc_run.xs[i + 1],
                         vt_P(m, m->enc.norm_w), m->last.inter_m[k], m->last.inter_r[k], B * T, D);
    } else {
        if (dsp && nchw) { /* [B, D, N] -> [B, N, D] */
            vt_k_transpose(m, scr, dsp, B, D, N, N * D, D, D * N, N);
            dsp = scr;
        }
        if (dsp) vt_k_add2d(m, dres + P * D, dsp, B, N * D, T * D, N * D);
        if (dpf) vt_k_add2d(m, dres, dpf, B, P * D, T * D, P * D);
    }
    vt_arena_reset(ar, mark);
}

vt_status vt_encoder_call_backward(vt_model *m, const float *const *douts, int n_douts, float *dimages,
                                   int pg) {
    const vt_chain_run *r = &m->last.enc_run;
    vt_arena *ar = &m->arena;
    int B = r->B, T = r->T, D = r->c->D;
    vt_step st[CALL_ROWS];
    call_steps(m, m->last.fn, &m->last.in, 1, &r->lay, st);
    size_t mark = vt_arena_mark(ar);
    const float *dout = n_douts > 0 ? douts[0] : NULL, *dout2 = n_douts > 1 ? douts[1] : NULL;
    int head = forward_head_kind(m, m->last.fn), ti = m->last.fn == VT_FN_TIMM_INTERMEDIATES;
    if (ti) dout = m->last.in.inter.intermediates_only ? NULL : dout, dout2 = NULL;
    if (m->last.fn == VT_FN_FORWARD && has_pool(m) && !head) {
        float *dfin = vt_zalloc(m, st[CALL_DFIN].n, "enc.grad.pooled");
        if (!dfin) return vt_arena_overflow(ar);
        if (dout)
            vt_k_pool_backward(m, dfin, dout, m->last.fin_ln ? m->last.fin_ln : r->xs[r->c->depth], B, T, D,
                               m->enc.P, lightly_pool(m),
                               1); /* (x: what was pooled; unread by token / avg) */
        dout = dout ? dfin : NULL;
    }
    if (head) {
        float *dfin = vt_zalloc(m, st[CALL_DFIN].n, "enc.grad.head");
        if (!dfin) return vt_arena_overflow(ar);
        if (dout || dout2) {
            vt_status rc = vt_head_backward(m, &m->last.head, dout, dout2, dfin, pg);
            if (rc) return rc;
        }
        dout = dout || dout2 ? dfin : NULL;
    }
    inject_ctx ctx = { douts, n_douts, pg };
    vt_inject_fn inject = ti                           ? inject_timm_intermediates
                          : vt_fn_is_inter(m->last.fn) ? inject_intermediates
                                                       : NULL;
    vt_status rc = vt_encoder_backward(m, dout, inject, &ctx, dimages, pg);
    if (!rc && ar->overflow) rc = vt_arena_overflow(ar);
    vt_arena_reset(ar, mark);
    return rc;
}

void vt_encoder_steps(const vt_model *m, const vt_inputs *in, int T, int need_grad, const vt_chain *c,
                      uint64_t keep, const vt_chain_layout *lay, vt_step fwd[VT_ENC_FWD_ROWS],
                      vt_step bwd[VT_ENC_BWD_ROWS]) {
    uint64_t B = in->batch, D = m->enc.chain.D, M = B * (uint64_t)T, pre_f, pre_b, kept, fx, bx;
    plan_pre(m, in, &pre_f, &pre_b);
    vt_chain_plan(c, lay, (int)B, T, need_grad, keep, &kept, &fx, &bx);
    int pre = m->cfg.enc.pre_norm && need_grad;
    fwd[VT_ENC_X0] = vt_keep(M * D);
    fwd[VT_ENC_PRE_IN] = vt_keep(pre ? M * D : 0);
    fwd[VT_ENC_PRE_STATS] = vt_keep(pre ? M : 0);
    fwd[VT_ENC_PRE_STATS].count = 2;
    fwd[VT_ENC_PRE] = vt_peak(pre_f);
    fwd[VT_ENC_KEPT] = vt_keep(kept);
    fwd[VT_ENC_FWD] = vt_peak(fx);
    fwd[VT_ENC_NORM] = vt_keep(has_norm(m) ? M * D : 0);
    fwd[VT_ENC_NORM_STATS] = vt_keep(has_norm(m) ? M : 0);
    fwd[VT_ENC_NORM_STATS].count = 2;
    bwd[VT_ENC_DRES] = vt_keep(need_grad ? M * D : 0);
    bwd[VT_ENC_BWD] = vt_peak(need_grad ? bx : 0);
    bwd[VT_ENC_PRE_BWD] = vt_peak(need_grad ? pre_b : 0);
}

/* ---- the encoder calls as an objective (objective.h): every model has them ---------------------- */

/* timm / causal: timm's keys, a learned pos_embed; lightly: its mask token, then vit.<timm keys>
 * with the sin-cos pos_embed frozen (lightly's default pos_embed_initialization) */
static vt_status enc_build(vt_model *m) {
    if (m->cfg.kind != VT_KIND_LIGHTLY) return vt_encoder_build(m, "", 1);
    vt_status rc = VT_OK;
    if (m->cfg.enc.mask_token)
        rc = vt_param_add(m, &m->enc.mask_token, "", "mask_token", 3, 1, 1, m->cfg.enc.embed_dim, 0, 1);
    return rc ? rc : vt_encoder_build(m, "vit.", 0);
}

static vt_status enc_check(const vt_model *m, vt_fn fn, const vt_inputs *in, int values) {
    if (fn == VT_FN_LOSS) /* a model whose objective is its encoder calls has no loss */
        return vt_fail(VT_ERR_ARG, "loss needs an MAE or AIM model, or a timm classifier (num_classes > 0)");
    vt_status rc = vt_check_encoder_inputs(m, in, vt_causal_kind(m), values);
    if (rc) return rc;
    if (fn == VT_FN_TIMM_FORWARD && (in->idx_mask || in->idx_keep || (in->mask && !vt_causal_kind(m))))
        return vt_fail(VT_ERR_ARG, "timm's forward takes no idx_mask / idx_keep / token mask (lightly's "
                                   "encode / forward do)");
    if (fn == VT_FN_TIMM_INTERMEDIATES) {
        int depth = m->enc.chain.depth;
        if (in->idx_mask || in->idx_keep || in->mask)
            return vt_fail(VT_ERR_ARG, "timm's forward_intermediates takes no idx_mask / idx_keep / mask "
                                       "(lightly's forward_intermediates does)");
        int top = 63;
        while (top >= 0 && !(in->inter.take >> top & 1)) top--;
        if (top >= depth)
            return vt_fail(VT_ERR_ARG,
                           "forward_intermediates: block %d taken, the model has %d blocks (0 to %d)", top,
                           depth, depth - 1);
    }
    vt_pool gp = m->cfg.enc.global_pool;
    int T = call_tokens(m, in), P = m->enc.P, Pp = m->cfg.enc.pool_include_prefix ? 0 : P;
    int global = gp == VT_POOL_AVG || gp == VT_POOL_MAX || gp == VT_POOL_AVGMAX;
    if (fn == VT_FN_TIMM_FORWARD && ((global && T <= Pp) || (gp == VT_POOL_MAP && T <= Pp)))
        return vt_fail(VT_ERR_ARG, "%s pooling needs at least one token after the %d prefix tokens",
                       vt_pool_name(gp), Pp);
    if (fn == VT_FN_FORWARD && gp == VT_POOL_AVG && T <= P)
        return vt_fail(VT_ERR_ARG, "avg pooling needs at least one token after the %d prefix tokens", P);
    if (in->distilled_training && !(fn == VT_FN_TIMM_FORWARD && m->cfg.enc.distilled))
        return vt_fail(VT_ERR_ARG,
                       "distilled_training is timm's forward of a distilled model (DeiT's two heads)");
    return VT_OK;
}

void vt_encoder_chains(const vt_model *m, vt_fn fn, const vt_inputs *in, const vt_chain *c[VT_CHAINS],
                       int T[VT_CHAINS]) {
    c[0] = call_chain(m, fn, in);
    T[0] = call_tokens(m, in);
}

static uint64_t enc_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                         const vt_chain_layout *lays) {
    return vt_encoder_call_plan(m, fn, in, need_grad, &lays[0]);
}

static vt_status enc_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                             const vt_chain_layout *lays) {
    return vt_encoder_call_forward(m, fn, in, need_grad, &lays[0]);
}

const vt_objective vt_objective_encoder = {
    "encoder calls",          0,   enc_build, enc_check, vt_encoder_chains, enc_plan, enc_forward,
    vt_encoder_call_backward, NULL
};
