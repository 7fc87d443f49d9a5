/* vit.c: the Vision Transformer encoder as timm and lightly compute it, forward and backward.
 *   patch embedding (conv as im2col + matmul) -> prefix tokens [cls, regs] -> masking with the
 *   mask token (before the positional embedding) -> + pos_embed -> gather idx_keep -> blocks ->
 *   norm -> pooling / intermediates
 * Indices follow lightly: they address the full sequence, prefix tokens included. Everything
 * the call allocates comes from the arena, in an order that vt_encoder_plan mirrors. MAE and AIM
 * (objectives.c) build on encoder_preprocess / encoder_chain / encoder_backward_pre here. */
#include "vit_internal.h"
#include "kernels/kernels.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameter table --------------------------------------------------------------------------- */

static int padd(vt_model *m, int *idx, const char *pfx, const char *name, int ndim, int64_t a,
                int64_t b, int64_t c, int64_t d, int trainable) {
    char full[VT_NAME_MAX + 32];
    snprintf(full, sizeof full, "%s%s", pfx, name);
    int64_t shape[4] = {a, b, c, d};
    *idx = m->pt.n;
    return vt_ptable_add(&m->pt, full, ndim, shape, trainable);
}

/* Adds the encoder's parameters in timm's state_dict order under `pfx` ("vit.", "backbone.vit.",
 * ...); lightly's mask token (if any) is added by the caller before, under its own name. */
int vt_encoder_build(vt_model *m, const char *pfx, int pos_trainable) {
    const vt_vit_config *c = &m->cfg.enc;
    vt_encoder *e = &m->enc;
    int D = c->embed_dim, rc = 0;
    e->cls = e->reg = e->pos = e->norm_w = e->norm_b = e->fcn_w = e->fcn_b = e->head_w = e->head_b = -1;
    e->G = c->img_size / c->patch_size;
    e->N = e->G * e->G;
    e->P = (c->class_token ? 1 : 0) + c->reg_tokens;
    e->T_full = e->N + e->P;
    e->use_fc_norm = !strcmp(c->global_pool, "avg") || !strcmp(c->global_pool, "max") ||
                     !strcmp(c->global_pool, "avgmax");
    if (c->class_token) rc |= padd(m, &e->cls, pfx, "cls_token", 3, 1, 1, D, 0, 1);
    if (c->reg_tokens) rc |= padd(m, &e->reg, pfx, "reg_token", 3, 1, c->reg_tokens, D, 0, 1);
    if (c->pos_embed)
        rc |= padd(m, &e->pos, pfx, "pos_embed", 3, 1, c->no_embed_class ? e->N : e->T_full, D, 0, pos_trainable);
    rc |= padd(m, &e->pe_w, pfx, "patch_embed.proj.weight", 4, D, c->in_chans, c->patch_size, c->patch_size, 1);
    rc |= padd(m, &e->pe_b, pfx, "patch_embed.proj.bias", 1, D, 0, 0, 0, 1);
    if (rc) return rc < 0 ? rc : VT_ERR_ARG;
    char bp[VT_NAME_MAX];
    snprintf(bp, sizeof bp, "%sblocks.", pfx);
    int F = (int)((float)D * c->mlp_ratio);
    rc = vt_chain_build(m, &e->chain, bp, c->depth, D, c->num_heads, F, 1, c->qkv_bias, 1,
                        c->qk_norm, c->init_values > 0, 1e-6f, 1);
    if (rc) return rc;
    if (!e->use_fc_norm) {
        rc |= padd(m, &e->norm_w, pfx, "norm.weight", 1, D, 0, 0, 0, 1);
        rc |= padd(m, &e->norm_b, pfx, "norm.bias", 1, D, 0, 0, 0, 1);
    } else { /* timm's fc_norm: in the state dict, never applied by lightly */
        rc |= padd(m, &e->fcn_w, pfx, "fc_norm.weight", 1, D, 0, 0, 0, 1);
        rc |= padd(m, &e->fcn_b, pfx, "fc_norm.bias", 1, D, 0, 0, 0, 1);
    }
    if (c->num_classes > 0) {
        rc |= padd(m, &e->head_w, pfx, "head.weight", 2, c->num_classes, D, 0, 0, 1);
        rc |= padd(m, &e->head_b, pfx, "head.bias", 1, c->num_classes, 0, 0, 0, 1);
    }
    return rc ? (rc < 0 ? rc : VT_ERR_ARG) : VT_OK;
}

/* ---- input checks ---------------------------------------------------------------------------------- */

static int check_index(const int64_t *idx, int B, int K, int L, const char *what, uint8_t *seen) {
    if (K <= 0) return vt_fail(VT_ERR_ARG, "%s: %d indices per row (need at least 1)", what, K);
    for (int b = 0; b < B; b++) {
        memset(seen, 0, (size_t)L);
        for (int k = 0; k < K; k++) {
            int64_t v = idx[(size_t)b * K + k];
            if (v < 0 || v >= L)
                return vt_fail(VT_ERR_ARG, "%s[%d][%d] = %lld is out of range [0, %d) (indices address "
                               "the full sequence, prefix tokens included)", what, b, k, (long long)v, L);
            if (seen[v]) return vt_fail(VT_ERR_ARG, "%s[%d] repeats index %lld", what, b, (long long)v);
            seen[v] = 1;
        }
    }
    return VT_OK;
}

int vt_check_encoder_inputs(const vt_model *m, const vt_inputs *in, int causal, int check_values) {
    const vt_encoder *e = &m->enc;
    if (!in) return vt_fail(VT_ERR_ARG, "inputs are NULL");
    if (in->batch < 1) return vt_fail(VT_ERR_ARG, "batch must be >= 1, got %d", in->batch);
    if (check_values && !in->images) return vt_fail(VT_ERR_ARG, "images are NULL");
    int L = e->T_full;
    if (in->idx_mask && in->mask && !causal)
        return vt_fail(VT_ERR_ARG, "idx_mask and mask cannot both be given (lightly raises ValueError)");
    if (causal && (in->idx_mask || in->idx_keep))
        return vt_fail(VT_ERR_ARG, "the masked-causal ViT takes no idx_mask/idx_keep (only mask and is_causal)");
    if (in->idx_mask && !e_has_mask_token(m))
        return vt_fail(VT_ERR_ARG, "idx_mask needs a mask token (config mask_token)");
    if (in->mask && !causal && !e_has_mask_token(m))
        return vt_fail(VT_ERR_ARG, "mask needs a mask token (config mask_token)");
    if (in->idx_keep && in->n_keep > L)
        return vt_fail(VT_ERR_ARG, "idx_keep has %d indices per row, the sequence has %d tokens", in->n_keep, L);
    if (in->idx_mask && in->n_mask > L)
        return vt_fail(VT_ERR_ARG, "idx_mask has %d indices per row, the sequence has %d tokens", in->n_mask, L);
    if (!check_values) {
        if (in->idx_keep && in->n_keep < 1) return vt_fail(VT_ERR_ARG, "idx_keep: %d indices per row", in->n_keep);
        if (in->idx_mask && in->n_mask < 1) return vt_fail(VT_ERR_ARG, "idx_mask: %d indices per row", in->n_mask);
        return VT_OK;
    }
    uint8_t seen[4096];
    if (L > (int)sizeof seen) return vt_fail(VT_ERR_ARG, "sequence of %d tokens exceeds 4096", L);
    if (in->idx_mask) {
        int rc = check_index(in->idx_mask, in->batch, in->n_mask, L, "idx_mask", seen);
        if (rc) return rc;
    }
    if (in->idx_keep) {
        int rc = check_index(in->idx_keep, in->batch, in->n_keep, L, "idx_keep", seen);
        if (rc) return rc;
    }
    return VT_OK;
}

/* ---- preprocessing ----------------------------------------------------------------------------------- */

/* The patch embedding is a matmul over patches; patches are gathered (im2col) and scattered back
 * (col2im) VT_PATCH_CHUNK rows at a time, so that no image-sized buffer is ever needed. */
#define VT_PATCH_CHUNK 32

/* rows [m0, m0+n) of patches[b*G*G + r*G + q][(c,i,j)] = img[b, c, r*p+i, q*p+j] (the conv
 * weight's flattening order) */
static void im2col(float *patches, const float *img, int m0, int n, int C, int S, int p, int G) {
    int Kp = C * p * p;
    for (int m = m0; m < m0 + n; m++) {
        int b = m / (G * G), r = (m % (G * G)) / G, q = m % G;
        float *dst = patches + (size_t)(m - m0) * Kp;
        for (int c = 0; c < C; c++)
            for (int i = 0; i < p; i++)
                memcpy(dst + (c * p + i) * p, img + (((size_t)b * C + c) * S + (size_t)r * p + i) * S + (size_t)q * p,
                       (size_t)p * sizeof(float));
    }
}

/* dimg += col2im(dpatches) for rows [m0, m0+n): patches do not overlap (a permutation) */
static void col2im_add(float *dimg, const float *dpatches, int m0, int n, int C, int S, int p, int G) {
    int Kp = C * p * p;
    for (int m = m0; m < m0 + n; m++) {
        int b = m / (G * G), r = (m % (G * G)) / G, q = m % G;
        const float *src = dpatches + (size_t)(m - m0) * Kp;
        for (int c = 0; c < C; c++)
            for (int i = 0; i < p; i++) {
                float *dst = dimg + (((size_t)b * C + c) * S + (size_t)r * p + i) * S + (size_t)q * p;
                for (int j = 0; j < p; j++) dst[j] += src[(c * p + i) * p + j];
            }
    }
}

static int chunk_rows(int BN) { return BN < VT_PATCH_CHUNK ? BN : VT_PATCH_CHUNK; }

/* x0 [B,T,D] (allocated by the caller) = the chain input. */
int vt_encoder_preprocess(vt_model *m, const vt_inputs *in, int causal, float *x0) {
    const vt_vit_config *c = &m->cfg.enc;
    const vt_encoder *e = &m->enc;
    vt_arena *ar = &m->arena;
    int B = in->batch, D = c->embed_dim, N = e->N, P = e->P, L = e->T_full, p = c->patch_size;
    int Kp = c->in_chans * p * p;
    size_t mark = vt_arena_mark(ar);
    int BN = B * N, CH = chunk_rows(BN);
    float *tok = vt_arena_alloc(ar, (size_t)BN * D);
    float *patches = vt_arena_alloc(ar, (size_t)CH * Kp);
    float *seq = in->idx_keep ? vt_arena_alloc(ar, (size_t)B * L * D) : x0;
    if (ar->overflow) return vt_fail(VT_ERR_STATE, "activation arena overflow in preprocessing: a planning bug");
    for (int m0 = 0; m0 < BN; m0 += CH) { /* conv as matmul: tok = patches @ W^T + b */
        int n = BN - m0 < CH ? BN - m0 : CH;
        im2col(patches, in->images, m0, n, c->in_chans, c->img_size, p, e->G);
        vt_matmul_forward(tok + (size_t)m0 * D, patches, vt_P(m, e->pe_w), vt_P(m, e->pe_b), n, Kp, D);
    }
    for (int b = 0; b < B; b++) {
        float *s = seq + (size_t)b * L * D;
        if (c->class_token) memcpy(s, vt_P(m, e->cls), (size_t)D * sizeof(float));
        if (c->reg_tokens)
            memcpy(s + (size_t)(c->class_token ? 1 : 0) * D, vt_P(m, e->reg), (size_t)c->reg_tokens * D * sizeof(float));
        memcpy(s + (size_t)P * D, tok + (size_t)b * N * D, (size_t)N * D * sizeof(float));
    }
    /* masking before the positional embedding: masked slots become the mask token. lightly
     * blends (1-m)*x + m*token, which equals this select for finite x. */
    if (!causal && (in->idx_mask || in->mask)) {
        const float *mt = vt_P(m, m_mask_token(m));
        for (int b = 0; b < B; b++) {
            if (in->idx_mask) {
                for (int k = 0; k < in->n_mask; k++)
                    memcpy(seq + ((size_t)b * L + in->idx_mask[(size_t)b * in->n_mask + k]) * D, mt, (size_t)D * sizeof(float));
            } else {
                for (int l = 0; l < L; l++)
                    if (in->mask[(size_t)b * L + l]) memcpy(seq + ((size_t)b * L + l) * D, mt, (size_t)D * sizeof(float));
            }
        }
    }
    if (e->pos >= 0) {
        const float *pos = vt_P(m, e->pos);
        int r0 = c->no_embed_class ? P : 0; /* no_embed_class: prefix tokens get no position */
        for (int b = 0; b < B; b++)
            for (int l = r0; l < L; l++) {
                float *s = seq + ((size_t)b * L + l) * D;
                const float *pr = pos + (size_t)(l - r0) * D;
                for (int d = 0; d < D; d++) s[d] += pr[d];
            }
    }
    if (in->idx_keep) /* gather after the positional embedding */
        for (int b = 0; b < B; b++)
            for (int k = 0; k < in->n_keep; k++)
                memcpy(x0 + ((size_t)b * in->n_keep + k) * D,
                       seq + ((size_t)b * L + in->idx_keep[(size_t)b * in->n_keep + k]) * D, (size_t)D * sizeof(float));
    vt_arena_reset(ar, mark);
    return VT_OK;
}

/* Backward of the preprocessing: dx0 [B,T,D] -> parameter grads and dimages. */
int vt_encoder_backward_pre(vt_model *m, const vt_inputs *in, int causal, const float *dx0,
                            float *dimages, int pg) {
    const vt_vit_config *c = &m->cfg.enc;
    const vt_encoder *e = &m->enc;
    vt_arena *ar = &m->arena;
    int B = in->batch, D = c->embed_dim, N = e->N, P = e->P, L = e->T_full, p = c->patch_size;
    int Kp = c->in_chans * p * p;
    size_t mark = vt_arena_mark(ar);
    float *dseq = (float *)dx0;
    if (in->idx_keep) { /* scatter: the gather's backward (indices are unique, checked) */
        dseq = vt_arena_zalloc(ar, (size_t)B * L * D);
        if (!dseq) return vt_fail(VT_ERR_STATE, "activation arena overflow: a planning bug");
        for (int b = 0; b < B; b++)
            for (int k = 0; k < in->n_keep; k++) {
                float *dst = dseq + ((size_t)b * L + in->idx_keep[(size_t)b * in->n_keep + k]) * D;
                const float *src = dx0 + ((size_t)b * in->n_keep + k) * D;
                for (int d = 0; d < D; d++) dst[d] += src[d];
            }
    }
    float *dpos = vt_G(m, e->pos, pg);
    if (dpos) {
        int r0 = c->no_embed_class ? P : 0;
        for (int b = 0; b < B; b++)
            for (int l = r0; l < L; l++) {
                const float *s = dseq + ((size_t)b * L + l) * D;
                float *dp = dpos + (size_t)(l - r0) * D;
                for (int d = 0; d < D; d++) dp[d] += s[d];
            }
    }
    /* masked slots: their gradient goes to the mask token, none to what they replaced. dseq may
     * be dx0 itself (no idx_keep): work on a copy of the rows instead of writing into dx0. */
    uint8_t masked_row[4096];
    if (!causal && (in->idx_mask || in->mask)) {
        float *dmt = vt_G(m, m_mask_token(m), pg);
        for (int b = 0; b < B; b++) {
            memset(masked_row, 0, (size_t)L);
            if (in->idx_mask)
                for (int k = 0; k < in->n_mask; k++) masked_row[in->idx_mask[(size_t)b * in->n_mask + k]] = 1;
            else
                for (int l = 0; l < L; l++) masked_row[l] = in->mask[(size_t)b * L + l] != 0;
            for (int l = 0; l < L; l++)
                if (masked_row[l] && dmt) {
                    const float *s = dseq + ((size_t)b * L + l) * D;
                    for (int d = 0; d < D; d++) dmt[d] += s[d];
                }
        }
    }
    #define IS_MASKED(b, l) (!causal && ((in->mask && in->mask[(size_t)(b) * L + (l)]) || \
                                         (in->idx_mask && row_has(in->idx_mask + (size_t)(b) * in->n_mask, in->n_mask, (l)))))
    float *dcls = vt_G(m, e->cls, pg), *dreg = vt_G(m, e->reg, pg);
    for (int b = 0; b < B; b++) {
        if (dcls && !IS_MASKED(b, 0))
            for (int d = 0; d < D; d++) dcls[d] += dseq[(size_t)b * L * D + d];
        if (dreg)
            for (int r = 0; r < c->reg_tokens; r++) {
                int l = (c->class_token ? 1 : 0) + r;
                if (IS_MASKED(b, l)) continue;
                for (int d = 0; d < D; d++) dreg[(size_t)r * D + d] += dseq[((size_t)b * L + l) * D + d];
            }
    }
    float *dw = vt_G(m, e->pe_w, pg), *db = vt_G(m, e->pe_b, pg);
    if (dw || db || dimages) {
        int BN = B * N, CH = chunk_rows(BN);
        float *dtok = vt_arena_alloc(ar, (size_t)BN * D);
        float *patches = vt_arena_alloc(ar, (size_t)CH * Kp);
        float *dpatches = dimages ? vt_arena_alloc(ar, (size_t)CH * Kp) : NULL;
        if (ar->overflow) return vt_fail(VT_ERR_STATE, "activation arena overflow: a planning bug");
        for (int b = 0; b < B; b++)
            for (int n = 0; n < N; n++) {
                float *dst = dtok + ((size_t)b * N + n) * D;
                if (IS_MASKED(b, P + n)) memset(dst, 0, (size_t)D * sizeof(float));
                else memcpy(dst, dseq + ((size_t)b * L + P + n) * D, (size_t)D * sizeof(float));
            }
        for (int m0 = 0; m0 < BN; m0 += CH) {
            int n = BN - m0 < CH ? BN - m0 : CH;
            if (dw) im2col(patches, in->images, m0, n, c->in_chans, c->img_size, p, e->G);
            if (dpatches) memset(dpatches, 0, (size_t)n * Kp * sizeof(float));
            vt_matmul_backward(dpatches, dw, db, dtok + (size_t)m0 * D, patches, vt_P(m, e->pe_w), n, Kp, D);
            if (dimages) col2im_add(dimages, dpatches, m0, n, c->in_chans, c->img_size, p, e->G);
        }
    }
    #undef IS_MASKED
    vt_arena_reset(ar, mark);
    return VT_OK;
}

/* Encoder blocks from x0 [B,T,D] (already preprocessed), then the final norm (Identity when the
 * config pools with fc_norm); *feat = the encoder's output. Keeps what the layout says. */
int vt_encoder_blocks(vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lay,
                      int T, float *x0, int causal, int keep_all, float **feat) {
    vt_chain_run *r = &m->enc_run;
    vt_arena *ar = &m->arena;
    int B = in->batch, D = m->enc.chain.D;
    const uint8_t *cmask = causal && in->mask && in->is_causal ? in->mask : NULL;
    int rc = vt_chain_run_start(m, r, &m->enc.chain, lay, B, T, cmask, m->enc_xs, m->enc_acts, x0,
                                need_grad, keep_all);
    if (rc) return rc;
    *feat = r->xs[r->c->depth];
    if (m->enc.norm_w >= 0) {
        m->fin_ln = vt_arena_alloc(ar, (size_t)B * T * D);
        m->fin_m = vt_arena_alloc(ar, (size_t)B * T);
        m->fin_r = vt_arena_alloc(ar, (size_t)B * T);
        if (ar->overflow) return vt_fail(VT_ERR_STATE, "activation arena overflow: a planning bug");
        vt_layernorm_forward(m->fin_ln, m->fin_m, m->fin_r, *feat, vt_P(m, m->enc.norm_w), vt_P(m, m->enc.norm_b),
                             B * T, D, 1e-6f);
        *feat = m->fin_ln;
    }
    return VT_OK;
}

int row_has(const int64_t *row, int n, int v) {
    for (int i = 0; i < n; i++)
        if (row[i] == v) return 1;
    return 0;
}

/* Floats the preprocessing needs on top of x0 (forward) and of dx0 (backward, worst case). */
void vt_encoder_plan_pre(const vt_model *m, const vt_inputs *in, uint64_t *fwd, uint64_t *bwd) {
    const vt_vit_config *c = &m->cfg.enc;
    const vt_encoder *e = &m->enc;
    uint64_t B = in->batch, D = c->embed_dim, N = e->N, L = e->T_full;
    uint64_t Kp = (uint64_t)c->in_chans * c->patch_size * c->patch_size;
    uint64_t seq = in->idx_keep ? vt_round(B * L * D) : 0, CH = (uint64_t)chunk_rows((int)(B * N));
    *fwd = vt_round(B * N * D) + vt_round(CH * Kp) + seq;
    *bwd = seq + vt_round(B * N * D) + 2 * vt_round(CH * Kp);
}
