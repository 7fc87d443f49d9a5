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

/* ---- parameter table --------------------------------------------------------------------------- */

/* Adds the encoder's parameters in timm's state_dict order under `pfx` ("vit.", "backbone.vit.",
 * ...); lightly's mask token (if any) is added by the caller before, under its own name. */
vt_status vt_encoder_build(vt_model *m, const char *pfx, int pos_trainable) {
    const vt_vit_config *c = &m->cfg.enc;
    vt_encoder *e = &m->enc;
    int D = c->embed_dim, rc = 0;
    e->cls = e->reg = e->pos = e->norm_w = e->norm_b = e->fcn_w = e->fcn_b = e->head_w = e->head_b = -1;
    e->G = c->img_size / c->patch_size;
    e->N = e->G * e->G;
    e->P = (c->class_token ? 1 : 0) + c->reg_tokens;
    e->T_full = e->N + e->P;
    e->use_fc_norm =
        c->global_pool == VT_POOL_AVG || c->global_pool == VT_POOL_MAX || c->global_pool == VT_POOL_AVGMAX;
    if (c->class_token) rc |= vt_param_add(m, &e->cls, pfx, "cls_token", 3, 1, 1, D, 0, 1);
    if (c->reg_tokens) rc |= vt_param_add(m, &e->reg, pfx, "reg_token", 3, 1, c->reg_tokens, D, 0, 1);
    if (c->pos_embed)
        rc |= vt_param_add(m, &e->pos, pfx, "pos_embed", 3, 1, c->no_embed_class ? e->N : e->T_full, D, 0,
                           pos_trainable);
    rc |= vt_param_add(m, &e->pe_w, pfx, "patch_embed.proj.weight", 4, D, c->in_chans, c->patch_size,
                       c->patch_size, 1);
    rc |= vt_param_add(m, &e->pe_b, pfx, "patch_embed.proj.bias", 1, D, 0, 0, 0, 1);
    if (rc) return rc < 0 ? rc : VT_ERR_ARG;
    char bp[VT_NAME_MAX];
    snprintf(bp, sizeof bp, "%sblocks.", pfx);
    int F = (int)vt_mlp_hidden(D, c->mlp_ratio); /* >= 1: validated */
    rc = vt_chain_build(m, &e->chain, bp, c->depth, D, c->num_heads, F, 1, c->qkv_bias, 1, c->qk_norm,
                        c->init_values > 0, 1e-6f, 1, 0, "enc");
    if (rc) return rc;
    if (!e->use_fc_norm) {
        rc |= vt_param_add(m, &e->norm_w, pfx, "norm.weight", 1, D, 0, 0, 0, 1);
        rc |= vt_param_add(m, &e->norm_b, pfx, "norm.bias", 1, D, 0, 0, 0, 1);
    } else { /* timm's fc_norm: in the state dict, never applied by lightly */
        rc |= vt_param_add(m, &e->fcn_w, pfx, "fc_norm.weight", 1, D, 0, 0, 0, 1);
        rc |= vt_param_add(m, &e->fcn_b, pfx, "fc_norm.bias", 1, D, 0, 0, 0, 1);
    }
    if (c->num_classes > 0) {
        rc |= vt_param_add(m, &e->head_w, pfx, "head.weight", 2, c->num_classes, D, 0, 0, 1);
        rc |= vt_param_add(m, &e->head_b, pfx, "head.bias", 1, c->num_classes, 0, 0, 0, 1);
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

/* x0 [B,T,D] (allocated by the caller) = the chain input. */
vt_status vt_encoder_preprocess(vt_model *m, const vt_inputs *in, int causal, float *x0) {
    const vt_vit_config *c = &m->cfg.enc;
    const vt_encoder *e = &m->enc;
    vt_arena *ar = &m->arena;
    int B = in->batch, D = c->embed_dim, N = e->N, P = e->P, L = e->T_full, p = c->patch_size;
    int Kp = c->in_chans * p * p;
    size_t mark = vt_arena_mark(ar);
    int BN = B * N, CH = chunk_rows(m, BN);
    float *tok = vt_arena_alloc(ar, (size_t)BN * D, "enc.pre.tokens");
    float *patches = vt_arena_alloc(ar, (size_t)CH * Kp, "enc.pre.patches");
    float *seq = in->idx_keep ? vt_arena_alloc(ar, (size_t)B * L * D, "enc.pre.sequence") : x0;
    if (ar->overflow) return vt_arena_overflow(ar);
    for (int m0 = 0; m0 < BN; m0 += CH) { /* conv as matmul: tok = patches @ W^T + b */
        int n = BN - m0 < CH ? BN - m0 : CH;
        vt_k_im2col(m, patches, in->images, m0, n, c->in_chans, c->img_size, p, e->G);
        vt_k_matmul_forward(m, tok + (size_t)m0 * D, patches, vt_P(m, e->pe_w), vt_P(m, e->pe_b), n, Kp, D);
    }
    /* [cls, regs, patch tokens] per image */
    if (c->class_token) vt_k_copy2d(m, seq, vt_P(m, e->cls), B, D, (int64_t)L * D, 0);
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
        vt_k_add_rows(m, seq + (size_t)r0 * D, seq + (size_t)r0 * D, vt_P(m, e->pos), B,
                      (int64_t)(L - r0) * D, (int64_t)L * D);
    }
    if (in->idx_keep) /* gather after the positional embedding */
        vt_k_gather_rows(m, x0, seq, in->idx_keep, B, L, in->n_keep, D);
    vt_arena_reset(ar, mark);
    return VT_OK;
}

/* Backward of the preprocessing: dx0 [B,T,D] -> parameter grads and dimages. */
vt_status vt_encoder_backward_pre(vt_model *m, const vt_inputs *in, int causal, const float *dx0,
                                  float *dimages, int pg) {
    const vt_vit_config *c = &m->cfg.enc;
    const vt_encoder *e = &m->enc;
    vt_arena *ar = &m->arena;
    int B = in->batch, D = c->embed_dim, N = e->N, P = e->P, L = e->T_full, p = c->patch_size;
    int Kp = c->in_chans * p * p;
    size_t mark = vt_arena_mark(ar);
    float *dseq = (float *)dx0;
    if (in->idx_keep) { /* scatter-add: the gather's backward (a repeated index adds up) */
        dseq = vt_zalloc(m, (size_t)B * L * D, "enc.pre_grad.sequence");
        if (!dseq) return vt_arena_overflow(ar);
        vt_k_scatter_add_rows(m, dseq, dx0, in->idx_keep, B, L, in->n_keep, D);
    }
    float *dpos = vt_G(m, e->pos, pg);
    if (dpos) {
        int r0 = c->no_embed_class ? P : 0;
        vt_k_sum_rows(m, dpos, dseq + (size_t)r0 * D, B, (int64_t)(L - r0) * D, (int64_t)L * D);
    }
    /* masked slots: their gradient goes to the mask token, none to what they replaced (class /
     * register tokens, the patch embedding). dseq may be dx0 itself (no idx_keep): only read. */
    int masking = !causal && (in->idx_mask || in->mask);
    const int64_t *midx = masking ? in->idx_mask : NULL;
    const uint8_t *mmask = masking && !in->idx_mask ? in->mask : NULL;
    float *dmt = masking ? vt_G(m, e->mask_token, pg) : NULL;
    float *dcls = vt_G(m, e->cls, pg), *dreg = vt_G(m, e->reg, pg);
    float *dw = vt_G(m, e->pe_w, pg), *db = vt_G(m, e->pe_b, pg);
    int BN = B * N, CH = chunk_rows(m, BN);
    if (dmt) vt_k_mask_token_backward(m, dmt, dseq, midx, mmask, B, L, D, in->n_mask);
    if (dcls || dreg)
        vt_k_prefix_tokens_backward(m, dcls, dreg, dseq, midx, mmask, B, L, D, in->n_mask,
                                    c->class_token ? 1 : 0, c->reg_tokens);
    if (dw || db || dimages) {
        float *dtok = vt_arena_alloc(ar, (size_t)BN * D, "enc.pre_grad.tokens");
        float *patches = vt_arena_alloc(ar, (size_t)CH * Kp, "enc.pre_grad.patches");
        float *dpatches = dimages ? vt_arena_alloc(ar, (size_t)CH * Kp, "enc.pre_grad.dpatches") : NULL;
        if (ar->overflow) return vt_arena_overflow(ar);
        vt_k_patch_tokens_backward(m, dtok, dseq, midx, mmask, B, L, D, in->n_mask, P);
        for (int m0 = 0; m0 < BN; m0 += CH) {
            int n = BN - m0 < CH ? BN - m0 : CH;
            if (dw) vt_k_im2col(m, patches, in->images, m0, n, c->in_chans, c->img_size, p, e->G);
            if (dpatches) vt_k_fill(m, dpatches, (int64_t)n * Kp, 0.0f);
            vt_k_matmul_backward(m, dpatches, dw, db, dtok + (size_t)m0 * D, patches, vt_P(m, e->pe_w), n, Kp,
                                 D);
            if (dimages) vt_k_col2im_add(m, dimages, dpatches, m0, n, c->in_chans, c->img_size, p, e->G);
        }
    }
    vt_arena_reset(ar, mark);
    return VT_OK;
}

/* Encoder blocks from x0 [B,T,D] (already preprocessed), then the final norm (Identity when the
 * config pools with fc_norm); *feat = the encoder's output. Keeps what the layout says. */
vt_status vt_encoder_blocks(vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lay,
                            int T, float *x0, int causal, int keep_all, float **feat) {
    vt_chain_run *r = &m->last.enc_run;
    vt_arena *ar = &m->arena;
    int B = in->batch, D = m->enc.chain.D;
    const uint8_t *cmask = causal && in->mask && in->is_causal ? in->mask : NULL;
    int rc = vt_chain_run_start(m, r, &m->enc.chain, lay, B, T, cmask, m->last.enc_xs, m->last.enc_acts, x0,
                                need_grad, keep_all);
    if (rc) return rc;
    *feat = r->xs[r->c->depth];
    if (m->enc.norm_w >= 0) {
        m->last.fin_ln = vt_arena_alloc(ar, (size_t)B * T * D, "enc.norm");
        m->last.fin_m = vt_arena_alloc(ar, (size_t)B * T, "enc.norm.mean");
        m->last.fin_r = vt_arena_alloc(ar, (size_t)B * T, "enc.norm.rstd");
        if (ar->overflow) return vt_arena_overflow(ar);
        vt_k_layernorm_forward(m, m->last.fin_ln, m->last.fin_m, m->last.fin_r, *feat, vt_P(m, m->enc.norm_w),
                               vt_P(m, m->enc.norm_b), B * T, D, 1e-6f);
        *feat = m->last.fin_ln;
    }
    return VT_OK;
}

/* Floats the preprocessing needs on top of x0 (forward) and of dx0 (backward, worst case). */
static void plan_pre(const vt_model *m, const vt_inputs *in, uint64_t *fwd, uint64_t *bwd) {
    const vt_vit_config *c = &m->cfg.enc;
    const vt_encoder *e = &m->enc;
    uint64_t B = in->batch, D = c->embed_dim, N = e->N, L = e->T_full;
    uint64_t Kp = (uint64_t)c->in_chans * c->patch_size * c->patch_size;
    uint64_t seq = in->idx_keep ? vt_round(B * L * D) : 0, CH = (uint64_t)chunk_rows(m, (int)(B * N));
    *fwd = vt_round(B * N * D) + vt_round(CH * Kp) + seq;
    *bwd = seq + vt_round(B * N * D) + 2 * vt_round(CH * Kp);
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

void vt_head_steps(const vt_model *m, int B, int T, int need_grad, vt_step fwd[VT_HEAD_FWD_ROWS],
                   vt_step bwd[VT_HEAD_BWD_ROWS]) {
    vt_pool pk = m->cfg.enc.global_pool;
    uint64_t D = m->enc.chain.D, C = m->cfg.enc.num_classes > 0 ? (uint64_t)m->cfg.enc.num_classes : 0;
    uint64_t rows = pk == VT_POOL_NONE ? (uint64_t)B * T : (uint64_t)B;
    int fcn = m->enc.use_fc_norm;
    fwd[VT_HEAD_POOL] = vt_keep(pk == VT_POOL_NONE ? 0 : rows * D);
    fwd[VT_HEAD_NORM] = vt_keep(fcn ? rows * D : 0);
    fwd[VT_HEAD_NORM_STATS] = vt_keep(fcn ? rows : 0);
    fwd[VT_HEAD_NORM_STATS].count = 2;
    fwd[VT_HEAD_OUT] = vt_keep(C ? rows * C : 0);
    /* d(head input) and d(fc_norm input), side by side in one scratch */
    bwd[VT_HEAD_SCRATCH] = vt_peak(need_grad ? ((C ? 1u : 0u) + (fcn ? 1u : 0u)) * rows * D : 0);
}

vt_status vt_head_forward(vt_model *m, vt_head_run *h, const float *x, int B, int T) {
    const vt_encoder *e = &m->enc;
    vt_arena *ar = &m->arena;
    vt_step st[VT_HEAD_FWD_ROWS], bst[VT_HEAD_BWD_ROWS];
    vt_head_steps(m, B, T, 0, st, bst);
    vt_pool pk = m->cfg.enc.global_pool;
    int D = e->chain.D, P = e->P, C = m->cfg.enc.num_classes > 0 ? m->cfg.enc.num_classes : 0;
    memset(h, 0, sizeof *h);
    h->B = B;
    h->T = T;
    h->D = D;
    h->C = C;
    h->x = x;
    h->rows = pk == VT_POOL_NONE ? B * T : B;
    if (pk != VT_POOL_NONE && pk != VT_POOL_TOKEN && T <= P)
        return vt_fail(VT_ERR_ARG, "%s pooling needs at least one token after the %d prefix tokens",
                       vt_pool_name(m->cfg.enc.global_pool), P);
    h->pooled = pk == VT_POOL_NONE ? (float *)x : vt_arena_alloc(ar, st[VT_HEAD_POOL].n, "head.pooled");
    if (e->use_fc_norm) {
        h->normed = vt_arena_alloc(ar, st[VT_HEAD_NORM].n, "head.fc_norm");
        h->mean = vt_arena_alloc(ar, st[VT_HEAD_NORM_STATS].n, "head.fc_norm.mean");
        h->rstd = vt_arena_alloc(ar, st[VT_HEAD_NORM_STATS].n, "head.fc_norm.rstd");
    }
    float *logits = C ? vt_arena_alloc(ar, st[VT_HEAD_OUT].n, "head.out") : NULL;
    if (ar->overflow) return vt_arena_overflow(ar);
    if (pk != VT_POOL_NONE) vt_k_pool_forward(m, h->pooled, x, B, T, D, P, pool_kernel(pk));
    const float *hin = h->pooled;
    if (e->use_fc_norm) {
        vt_k_layernorm_forward(m, h->normed, h->mean, h->rstd, h->pooled, vt_P(m, e->fcn_w),
                               vt_P(m, e->fcn_b), h->rows, D, 1e-6f);
        hin = h->normed;
    }
    if (C) vt_k_matmul_forward(m, logits, hin, vt_P(m, e->head_w), vt_P(m, e->head_b), h->rows, D, C);
    h->out = C ? logits : (float *)hin;
    return VT_OK;
}

vt_status vt_head_backward(vt_model *m, const vt_head_run *h, const float *dy, float *dx, int pg) {
    const vt_encoder *e = &m->enc;
    vt_arena *ar = &m->arena;
    vt_step st[VT_HEAD_FWD_ROWS], bst[VT_HEAD_BWD_ROWS];
    vt_head_steps(m, h->B, h->T, 1, st, bst);
    vt_pool pk = m->cfg.enc.global_pool;
    int B = h->B, T = h->T, D = h->D, P = e->P, C = h->C;
    size_t mark = vt_arena_mark(ar), RD = (size_t)h->rows * D;
    float *scratch = bst[VT_HEAD_SCRATCH].n ? vt_zalloc(m, bst[VT_HEAD_SCRATCH].n, "head.grad") : NULL;
    if (ar->overflow) return vt_arena_overflow(ar);
    const float *hin = e->use_fc_norm ? h->normed : h->pooled;
    const float *dh = dy; /* d(head input) [rows, D] */
    if (C) {
        vt_k_matmul_backward(m, scratch, vt_G(m, e->head_w, pg), vt_G(m, e->head_b, pg), dy, hin,
                             vt_P(m, e->head_w), h->rows, D, C);
        dh = scratch;
    }
    const float *dp = dh; /* d(pool output) [rows, D] */
    if (e->use_fc_norm) {
        float *dpool = scratch + (C ? RD : 0);
        vt_k_layernorm_backward(m, dpool, vt_G(m, e->fcn_w, pg), vt_G(m, e->fcn_b, pg), dh, h->pooled,
                                vt_P(m, e->fcn_w), h->mean, h->rstd, h->rows, D);
        dp = dpool;
    }
    if (pk == VT_POOL_NONE)
        vt_k_add2d(m, dx, dp, 1, (int64_t)B * T * D, 0, 0);
    else
        vt_k_pool_backward(m, dx, dp, h->x, B, T, D, P, pool_kernel(pk), 0);
    vt_arena_reset(ar, mark);
    return VT_OK;
}

/* The encoder call's step table: the encoder's rows, then pooling or the normed intermediates;
 * the backward: d pooled features, then the encoder's backward rows. */
enum {
    CALL_ENC = 0,
    CALL_POOL = VT_ENC_FWD_ROWS,
    CALL_HEAD,
    CALL_INTER = CALL_HEAD + VT_HEAD_FWD_ROWS,
    CALL_INTER_STATS,
    CALL_DFIN,
    CALL_HEAD_BWD,
    CALL_ENC_BWD = CALL_HEAD_BWD + VT_HEAD_BWD_ROWS,
    CALL_ROWS = CALL_ENC_BWD + VT_ENC_BWD_ROWS
};

static void call_steps(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                       const vt_chain_layout *lay, vt_step st[CALL_ROWS]) {
    uint64_t B = in->batch, D = m->enc.chain.D,
             T = in->idx_keep ? (uint64_t)in->n_keep : (uint64_t)m->enc.T_full;
    int pool = fn == VT_FN_FORWARD && has_pool(m), inter_norm = fn == VT_FN_INTERMEDIATES_NORM && has_norm(m);
    int timm = fn == VT_FN_TIMM_FORWARD;
    vt_encoder_steps(m, in, (int)T, need_grad, vt_fn_is_inter(fn), lay, st + CALL_ENC, st + CALL_ENC_BWD);
    st[CALL_POOL] = vt_keep(pool ? B * D : 0);
    vt_head_steps(m, (int)B, (int)T, need_grad, st + CALL_HEAD, st + CALL_HEAD_BWD);
    for (int i = 0; i < VT_HEAD_FWD_ROWS; i++) st[CALL_HEAD + i].n *= (uint64_t)timm;
    for (int i = 0; i < VT_HEAD_BWD_ROWS; i++) st[CALL_HEAD_BWD + i].n *= (uint64_t)timm;
    st[CALL_INTER] = vt_keep(B * T * D);
    st[CALL_INTER].count = inter_norm ? (uint64_t)m->enc.chain.depth : 0;
    st[CALL_INTER_STATS] = vt_keep(B * T);
    st[CALL_INTER_STATS].count = 2 * st[CALL_INTER].count;
    st[CALL_DFIN] = vt_keep(need_grad && (pool || timm) ? B * T * D : 0);
}

uint64_t vt_encoder_call_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                              const vt_chain_layout *lay) {
    vt_step st[CALL_ROWS];
    call_steps(m, fn, in, need_grad, lay, st);
    return vt_steps_peak(st, CALL_ROWS);
}

vt_status vt_encoder_call_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                                  const vt_chain_layout *lay) {
    const vt_chain *c = &m->enc.chain;
    vt_arena *ar = &m->arena;
    int B = in->batch, D = c->D, T = in->idx_keep ? in->n_keep : m->enc.T_full;
    int causal = vt_causal_kind(m);
    vt_step st[CALL_ROWS];
    call_steps(m, fn, in, need_grad, lay, st);
    float *x0 = vt_arena_alloc(ar, st[CALL_ENC + VT_ENC_X0].n, "enc.in");
    if (!x0) return vt_arena_overflow(ar);
    int rc = vt_encoder_preprocess(m, in, causal, x0);
    if (rc) return rc;
    rc = vt_encoder_blocks(m, in, need_grad, lay, T, x0, causal, vt_fn_is_inter(fn), &m->last.out);
    if (rc) return rc;
    const vt_chain_run *r = &m->last.enc_run;
    m->last.out_ndim = 3;
    m->last.out_shape[0] = B;
    m->last.out_shape[1] = T;
    m->last.out_shape[2] = D;
    if (fn == VT_FN_FORWARD && has_pool(m)) {
        float *pooled = vt_arena_alloc(ar, st[CALL_POOL].n, "enc.pooled");
        if (!pooled) return vt_arena_overflow(ar);
        vt_k_pool_forward(m, pooled, m->last.out, B, T, D, m->enc.P, lightly_pool(m));
        m->last.out = pooled;
        m->last.out_ndim = 2;
        m->last.out_shape[1] = D;
    }
    if (fn == VT_FN_TIMM_FORWARD) {
        vt_head_run *h = &m->last.head;
        rc = vt_head_forward(m, h, m->last.out, B, T);
        if (rc) return rc;
        m->last.out = h->out;
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
                vt_k_layernorm_forward(m, m->last.inter[i], m->last.inter_m[i], m->last.inter_r[i],
                                       r->xs[i + 1], vt_P(m, m->enc.norm_w), vt_P(m, m->enc.norm_b), B * T, D,
                                       1e-6f);
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
            vt_k_layernorm_backward(m, dres, vt_G(m, m->enc.norm_w, pg), vt_G(m, m->enc.norm_b, pg), dfeat,
                                    r->xs[r->c->depth], vt_P(m, m->enc.norm_w), m->last.fin_m, m->last.fin_r,
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
        vt_k_layernorm_backward(m, dres, vt_G(m, m->enc.norm_w, ctx->pg), vt_G(m, m->enc.norm_b, ctx->pg), dI,
                                r->xs[i + 1], vt_P(m, m->enc.norm_w), m->last.inter_m[i], m->last.inter_r[i],
                                M, D);
    else
        vt_k_add2d(m, dres, dI, 1, (int64_t)M * D, 0, 0);
}

vt_status vt_encoder_call_backward(vt_model *m, const float *const *douts, int n_douts, float *dimages,
                                   int pg) {
    const vt_chain_run *r = &m->last.enc_run;
    vt_arena *ar = &m->arena;
    int B = r->B, T = r->T, D = r->c->D;
    vt_step st[CALL_ROWS];
    call_steps(m, m->last.fn, &m->last.in, 1, &r->lay, st);
    size_t mark = vt_arena_mark(ar);
    const float *dout = n_douts > 0 ? douts[0] : NULL;
    if (m->last.fn == VT_FN_FORWARD && has_pool(m)) {
        float *dfin = vt_zalloc(m, st[CALL_DFIN].n, "enc.grad.pooled");
        if (!dfin) return vt_arena_overflow(ar);
        if (dout)
            vt_k_pool_backward(m, dfin, dout, m->last.fin_ln ? m->last.fin_ln : r->xs[r->c->depth], B, T, D,
                               m->enc.P, lightly_pool(m),
                               1); /* (x: what was pooled; unread by token / avg) */
        dout = dout ? dfin : NULL;
    }
    if (m->last.fn == VT_FN_TIMM_FORWARD) {
        float *dfin = vt_zalloc(m, st[CALL_DFIN].n, "enc.grad.head");
        if (!dfin) return vt_arena_overflow(ar);
        if (dout) {
            vt_status rc = vt_head_backward(m, &m->last.head, dout, dfin, pg);
            if (rc) return rc;
        }
        dout = dout ? dfin : NULL;
    }
    inject_ctx ctx = { douts, n_douts, pg };
    vt_status rc = vt_encoder_backward(m, dout, vt_fn_is_inter(m->last.fn) ? inject_intermediates : NULL,
                                       &ctx, dimages, pg);
    vt_arena_reset(ar, mark);
    return rc;
}

void vt_encoder_steps(const vt_model *m, const vt_inputs *in, int T, int need_grad, int keep_all,
                      const vt_chain_layout *lay, vt_step fwd[VT_ENC_FWD_ROWS],
                      vt_step bwd[VT_ENC_BWD_ROWS]) {
    uint64_t B = in->batch, D = m->enc.chain.D, M = B * (uint64_t)T, pre_f, pre_b, kept, fx, bx;
    plan_pre(m, in, &pre_f, &pre_b);
    vt_chain_plan(&m->enc.chain, lay, (int)B, T, need_grad, keep_all, &kept, &fx, &bx);
    fwd[VT_ENC_X0] = vt_keep(M * D);
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
    vt_pool gp = m->cfg.enc.global_pool;
    if (fn == VT_FN_TIMM_FORWARD && gp != VT_POOL_TOKEN && gp != VT_POOL_NONE && m->enc.T_full <= m->enc.P)
        return vt_fail(VT_ERR_ARG, "%s pooling needs at least one token after the %d prefix tokens",
                       vt_pool_name(gp), m->enc.P);
    if (fn == VT_FN_FORWARD && gp == VT_POOL_AVG && (in->idx_keep ? in->n_keep : m->enc.T_full) <= m->enc.P)
        return vt_fail(VT_ERR_ARG, "avg pooling needs at least one token after the %d prefix tokens",
                       m->enc.P);
    return VT_OK;
}

void vt_encoder_chains(const vt_model *m, vt_fn fn, const vt_inputs *in, const vt_chain *c[VT_CHAINS],
                       int T[VT_CHAINS]) {
    c[0] = &m->enc.chain;
    T[0] = in->idx_keep ? in->n_keep : m->enc.T_full;
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
