/* objectives.c: the self-supervised objectives lightly trains ViTs with, forward and backward.
 *  MAE (lightly examples/pytorch/mae.py with MaskedVisionTransformerDecoderTIMM):
 *    encode(images, idx_keep) -> decoder_embed -> scatter into zeros at idx_keep -> decoder
 *    (own mask token at idx_mask, frozen sin-cos pos_embed, blocks, norm) -> gather idx_mask ->
 *    prediction_head; target = patchify(images)[idx_mask - P] (per-patch normalised when
 *    norm_pix_loss); loss = mean squared error.
 *  AIM (lightly examples/pytorch/aim.py):
 *    forward_features(images, mask, is_causal) + pos_embed again -> AIMPredictionHead (bias-free
 *    Linear, residual MLP blocks with LayerNorm eps 1e-5, LayerNorm, bias-free Linear);
 *    target = per-patch normalised patchify(images); loss = MSE over every patch.
 * The target depends on the images, so d images includes the path through the target.
 * What each call allocates, and in which order, is its step table (loss_steps): the code
 * allocates its rows and vt_loss_plan is the table's peak. */
#include "vit_internal.h"
#include "kernels/kernels.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS_HEAD 1e-5f /* AIMPredictionHead uses torch's nn.LayerNorm default */
#define NORM_PIX_EPS 1e-6f

static int patch_dim(const vt_model *m) {
    return m->cfg.enc.patch_size * m->cfg.enc.patch_size * m->cfg.enc.in_chans;
}

vt_status vt_objectives_build(vt_model *m) {
    const vt_model_config *c = &m->cfg;
    int D = c->enc.embed_dim, L = (c->enc.img_size / c->enc.patch_size) * (c->enc.img_size / c->enc.patch_size) +
                                   c->enc.class_token + c->enc.reg_tokens;
    int rc = 0, O = patch_dim(m);
    m->de_w = m->de_b = m->d_mask_token = m->d_pos = m->dn_w = m->dn_b = m->pred_w = m->pred_b = -1;
    m->h_in_w = m->hn_w = m->hn_b = m->h_out_w = -1;
    if (c->kind == VT_KIND_MAE) {
        int Dd = c->decoder_dim;
        rc |= vt_param_add(m, &m->enc.mask_token, "", "backbone.mask_token", 3, 1, 1, D, 0, 1);
        if (!rc) rc = vt_encoder_build(m, "backbone.vit.", 0); /* sincos pos_embed: frozen */
        rc |= vt_param_add(m, &m->de_w, "", "decoder_embed.weight", 2, Dd, D, 0, 0, 1);
        rc |= vt_param_add(m, &m->de_b, "", "decoder_embed.bias", 1, Dd, 0, 0, 0, 1);
        rc |= vt_param_add(m, &m->d_mask_token, "", "decoder.mask_token", 3, 1, 1, Dd, 0, 1);
        rc |= vt_param_add(m, &m->d_pos, "", "decoder.pos_embed", 3, 1, L, Dd, 0, 0);
        if (rc) return rc < 0 ? rc : VT_ERR_ARG;
        rc = vt_chain_build(m, &m->dec, "decoder.blocks.", c->decoder_depth, Dd, c->decoder_heads,
                            (int)vt_mlp_hidden(Dd, c->decoder_mlp_ratio), 1, 1, 1, 0, 0, 1e-6f, 1);
        if (rc) return rc;
        rc |= vt_param_add(m, &m->dn_w, "", "decoder.norm.weight", 1, Dd, 0, 0, 0, 1);
        rc |= vt_param_add(m, &m->dn_b, "", "decoder.norm.bias", 1, Dd, 0, 0, 0, 1);
        rc |= vt_param_add(m, &m->pred_w, "", "prediction_head.weight", 2, O, Dd, 0, 0, 1);
        rc |= vt_param_add(m, &m->pred_b, "", "prediction_head.bias", 1, O, 0, 0, 0, 1);
    } else {
        int Hh = c->head_hidden_dim, nb = c->head_blocks;
        char name[VT_NAME_MAX];
        rc = vt_encoder_build(m, "backbone.", 0);
        if (rc) return rc;
        rc |= vt_param_add(m, &m->h_in_w, "", "projection_head.blocks.0.weight", 2, Hh, D, 0, 0, 1);
        if (rc) return rc < 0 ? rc : VT_ERR_ARG;
        rc = vt_chain_build(m, &m->head, "projection_head.blocks.", nb, Hh, 0,
                            (int)vt_mlp_hidden(Hh, c->head_mlp_ratio), 0, 0, 0, 0, 0, LN_EPS_HEAD, 1);
        if (rc) return rc;
        snprintf(name, sizeof name, "projection_head.blocks.%d.weight", nb + 1);
        rc |= vt_param_add(m, &m->hn_w, "", name, 1, Hh, 0, 0, 0, 1);
        snprintf(name, sizeof name, "projection_head.blocks.%d.bias", nb + 1);
        rc |= vt_param_add(m, &m->hn_b, "", name, 1, Hh, 0, 0, 0, 1);
        snprintf(name, sizeof name, "projection_head.blocks.%d.weight", nb + 2);
        rc |= vt_param_add(m, &m->h_out_w, "", name, 2, O, Hh, 0, 0, 1);
    }
    return rc ? (rc < 0 ? rc : VT_ERR_ARG) : VT_OK;
}

/* ---- patches and targets ----------------------------------------------------------------------- */

/* lightly patchify: patch n (row-major), element (py, px, c) with the channel fastest. */
static void patch_get(float *dst, const float *img, int C, int S, int p, int G, int n) {
    int r = n / G, q = n % G;
    for (int py = 0; py < p; py++)
        for (int px = 0; px < p; px++)
            for (int c = 0; c < C; c++)
                dst[(py * p + px) * C + c] = img[((size_t)c * S + (size_t)r * p + py) * S + (size_t)q * p + px];
}
static void patch_add(float *img, const float *src, int C, int S, int p, int G, int n) {
    int r = n / G, q = n % G;
    for (int py = 0; py < p; py++)
        for (int px = 0; px < p; px++)
            for (int c = 0; c < C; c++)
                img[((size_t)c * S + (size_t)r * p + py) * S + (size_t)q * p + px] += src[(py * p + px) * C + c];
}

static void patch_set(float *img, const float *src, int C, int S, int p, int G, int n) {
    int r = n / G, q = n % G;
    for (int py = 0; py < p; py++)
        for (int px = 0; px < p; px++)
            for (int c = 0; c < C; c++)
                img[((size_t)c * S + (size_t)r * p + py) * S + (size_t)q * p + px] = src[(py * p + px) * C + c];
}

/* normalize_mean_var: y = (x - mean) / sqrt(var_unbiased + eps); keeps 1/s for the backward */
static void norm_pix_forward(float *x, float *rs, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    float mu = (float)(s / n);
    double v = 0;
    for (int i = 0; i < n; i++) v += (double)(x[i] - mu) * (x[i] - mu);
    float r = 1.0f / sqrtf((float)(v / (n > 1 ? n - 1 : 1)) + NORM_PIX_EPS);
    for (int i = 0; i < n; i++) x[i] = (x[i] - mu) * r;
    *rs = r;
}
/* dx = r * (dy - mean(dy) - y * sum(dy*y) / (n-1)), in place over dy */
static void norm_pix_backward(float *dy, const float *y, float r, int n) {
    double sd = 0, sdy = 0;
    for (int i = 0; i < n; i++) { sd += dy[i]; sdy += (double)dy[i] * y[i]; }
    float md = (float)(sd / n), c = (float)(sdy / (n > 1 ? n - 1 : 1));
    for (int i = 0; i < n; i++) dy[i] = r * (dy[i] - md - y[i] * c);
}

/* targets for rows (b, patch index pidx[b*K+j]) */
static void make_targets(vt_model *m, const vt_inputs *in, const int64_t *pidx, int K, int offset,
                         int norm_pix, float *tgt, float *trs) {
    const vt_vit_config *c = &m->cfg.enc;
    int O = patch_dim(m), G = c->img_size / c->patch_size;
    size_t img = (size_t)c->in_chans * c->img_size * c->img_size;
    for (int b = 0; b < in->batch; b++)
        for (int j = 0; j < K; j++) {
            int n = pidx ? (int)pidx[(size_t)b * K + j] - offset : j;
            float *t = tgt + ((size_t)b * K + j) * O;
            patch_get(t, in->images + b * img, c->in_chans, c->img_size, c->patch_size, G, n);
            if (norm_pix) norm_pix_forward(t, &trs[(size_t)b * K + j], O);
        }
}

/* mean squared error and its gradient scale */
static float mse(const float *p, const float *t, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) { double d = (double)p[i] - t[i]; s += d * d; }
    return (float)(s / (double)n);
}

/* ---- step tables (model.h): what the loss calls allocate, in order -------------------------------- */

/* One table for both losses, MAE | AIM per row (a row the loss has not is 0): the encoder (on
 * the kept tokens | all), the head's input (decoder input | features + pos_embed), its scoped
 * embedding | the head's first Linear, the chain (decoder | head), its norm, the norm's rows at
 * idx_mask | -, prediction, target; backward: d pred, d target (-> images), d gathered rows |
 * d norm out, d chain, d embedded tokens | -, d features, then the encoder's backward. */
enum {
    LOSS_ENC = 0, LOSS_IN = VT_ENC_FWD_ROWS, LOSS_IN2, LOSS_KEPT, LOSS_FWD, LOSS_LN, LOSS_LN_STATS,
    LOSS_SEL, LOSS_PRED, LOSS_TGT, LOSS_TRS,
    LOSS_DPRED, LOSS_DT, LOSS_DHEAD, LOSS_DRES, LOSS_BWD, LOSS_DEMB, LOSS_DFEAT,
    LOSS_ENC_BWD, LOSS_ROWS = LOSS_ENC_BWD + VT_ENC_BWD_ROWS
};

/* The encoder sees idx_keep only (lightly's MAE never passes idx_mask to the encoder). */
static vt_inputs encoder_inputs(const vt_inputs *in) {
    vt_inputs e = *in;
    e.idx_mask = NULL;
    e.n_mask = 0;
    return e;
}

/* The table of the model's loss call; lays: the encoder's and the decoder's / head's. The
 * backward rows count d images through the target (DT). */
static void loss_steps(const vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lays,
                       vt_step st[LOSS_ROWS]) {
    const vt_model_config *c = &m->cfg;
    int mae = c->kind == VT_KIND_MAE;
    uint64_t B = in->batch, D = c->enc.embed_dim, O = patch_dim(m), g = need_grad ? 1 : 0;
    uint64_t T = mae ? (uint64_t)in->n_keep : (uint64_t)m->enc.N;        /* encoder tokens */
    uint64_t Mc = B * (mae ? (uint64_t)m->enc.T_full : (uint64_t)m->enc.N); /* chain rows */
    uint64_t Dc = mae ? (uint64_t)c->decoder_dim : (uint64_t)c->head_hidden_dim; /* chain width */
    uint64_t Mp = B * (mae ? (uint64_t)in->n_mask : (uint64_t)m->enc.N);  /* predicted patches */
    uint64_t kept, fx, bx;
    vt_inputs e = encoder_inputs(in);
    vt_encoder_steps(m, mae ? &e : in, (int)T, need_grad, 0, &lays[0], st + LOSS_ENC, st + LOSS_ENC_BWD);
    vt_chain_plan(mae ? &m->dec : &m->head, &lays[1], (int)B, (int)(Mc / B), need_grad, 0, &kept, &fx, &bx);
    st[LOSS_IN] = vt_keep(mae ? Mc * Dc : B * T * D);
    st[LOSS_IN2] = mae ? vt_peak(B * T * Dc) : vt_keep(Mc * Dc);
    st[LOSS_KEPT] = vt_keep(kept);
    st[LOSS_FWD] = vt_peak(fx);
    st[LOSS_LN] = vt_keep(Mc * Dc);
    st[LOSS_LN_STATS] = vt_keep(Mc);
    st[LOSS_LN_STATS].count = 2;
    st[LOSS_SEL] = vt_keep(mae ? Mp * Dc : 0);
    st[LOSS_PRED] = vt_keep(Mp * O);
    st[LOSS_TGT] = vt_keep(Mp * O);
    st[LOSS_TRS] = vt_keep(!mae || c->norm_pix_loss ? Mp : 0);
    st[LOSS_DPRED] = vt_keep(g * Mp * O);
    st[LOSS_DT] = vt_peak(g * Mp * O);
    st[LOSS_DHEAD] = vt_keep(g * (mae ? Mp : Mc) * Dc);
    st[LOSS_DRES] = vt_keep(g * Mc * Dc);
    st[LOSS_BWD] = vt_peak(g * bx);
    st[LOSS_DEMB] = vt_keep(mae ? g * B * T * Dc : 0);
    st[LOSS_DFEAT] = vt_keep(g * B * T * D);
}

/* the table of the last loss forward, for its backward */
static void last_steps(const vt_model *m, vt_step *st) {
    vt_chain_layout lays[VT_CHAINS] = {m->last.enc_run.lay, m->cfg.kind == VT_KIND_MAE ? m->last.dec_run.lay : m->last.head_run.lay};
    loss_steps(m, &m->last.in, 1, lays, st);
}

uint64_t vt_loss_plan(const vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lays) {
    vt_step st[LOSS_ROWS];
    loss_steps(m, in, need_grad, lays, st);
    return vt_steps_peak(st, LOSS_ROWS);
}


/* The rows LN .. TRS after the chain: its norm (output, mean, rstd), the norm's rows at
 * idx_mask (MAE), prediction, target and the target's statistics (norm_pix). */
static vt_status alloc_outputs(vt_model *m, const vt_step st[LOSS_ROWS], float **ln, float **mean,
                               float **rstd) {
    vt_arena *ar = &m->arena;
    vt_loss_acts *ls = &m->last.ls;
    *ln = vt_arena_alloc(ar, st[LOSS_LN].n);
    *mean = vt_arena_alloc(ar, st[LOSS_LN_STATS].n);
    *rstd = vt_arena_alloc(ar, st[LOSS_LN_STATS].n);
    ls->sel = st[LOSS_SEL].n ? vt_arena_alloc(ar, st[LOSS_SEL].n) : NULL;
    ls->pred = vt_arena_alloc(ar, st[LOSS_PRED].n);
    ls->tgt = vt_arena_alloc(ar, st[LOSS_TGT].n);
    ls->trs = st[LOSS_TRS].n ? vt_arena_alloc(ar, st[LOSS_TRS].n) : NULL;
    return ar->overflow ? vt_arena_overflow(ar) : VT_OK;
}

/* ---- MAE ---------------------------------------------------------------------------------------------- */

static int mae_forward(vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lays) {
    vt_loss_acts *ls = &m->last.ls;
    vt_arena *ar = &m->arena;
    const vt_model_config *c = &m->cfg;
    int B = in->batch, D = c->enc.embed_dim, K = in->n_keep, Km = in->n_mask, L = m->enc.T_full;
    int Dd = c->decoder_dim, O = patch_dim(m);
    vt_inputs enc_in = encoder_inputs(in);
    vt_step st[LOSS_ROWS];
    loss_steps(m, in, need_grad, lays, st);
    float *x0 = vt_arena_alloc(ar, st[LOSS_ENC + VT_ENC_X0].n);
    if (!x0) return vt_arena_overflow(ar);
    int rc = vt_encoder_preprocess(m, &enc_in, 0, x0);
    if (!rc) rc = vt_encoder_blocks(m, &enc_in, need_grad, &lays[0], K, x0, 0, 0, &ls->feat);
    if (rc) return rc;
    /* decoder input: zeros, embedded tokens at idx_keep, mask token at idx_mask, + pos_embed */
    float *seq = vt_arena_zalloc(ar, st[LOSS_IN].n);
    size_t mark = vt_arena_mark(ar);
    float *emb = vt_arena_alloc(ar, st[LOSS_IN2].n);
    if (ar->overflow) return vt_arena_overflow(ar);
    vt_matmul_forward(emb, ls->feat, vt_P(m, m->de_w), vt_P(m, m->de_b), B * K, D, Dd);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++)
            memcpy(seq + ((size_t)b * L + in->idx_keep[(size_t)b * K + k]) * Dd, emb + ((size_t)b * K + k) * Dd, (size_t)Dd * sizeof(float));
    vt_arena_reset(ar, mark);
    const float *mt = vt_P(m, m->d_mask_token), *pos = vt_P(m, m->d_pos);
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < Km; j++)
            memcpy(seq + ((size_t)b * L + in->idx_mask[(size_t)b * Km + j]) * Dd, mt, (size_t)Dd * sizeof(float));
        for (int l = 0; l < L; l++)
            for (int d = 0; d < Dd; d++) seq[((size_t)b * L + l) * Dd + d] += pos[(size_t)l * Dd + d];
    }
    vt_chain_run *r = &m->last.dec_run;
    rc = vt_chain_run_start(m, r, &m->dec, &lays[1], B, L, NULL, m->last.dec_xs, m->last.dec_acts, seq, need_grad, 0);
    if (rc) return rc;
    rc = alloc_outputs(m, st, &ls->dec_ln, &ls->dec_m, &ls->dec_r);
    if (rc) return rc;
    vt_layernorm_forward(ls->dec_ln, ls->dec_m, ls->dec_r, r->xs[m->dec.depth], vt_P(m, m->dn_w), vt_P(m, m->dn_b), B * L, Dd, 1e-6f);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Km; j++)
            memcpy(ls->sel + ((size_t)b * Km + j) * Dd, ls->dec_ln + ((size_t)b * L + in->idx_mask[(size_t)b * Km + j]) * Dd, (size_t)Dd * sizeof(float));
    vt_matmul_forward(ls->pred, ls->sel, vt_P(m, m->pred_w), vt_P(m, m->pred_b), B * Km, Dd, O);
    make_targets(m, in, in->idx_mask, Km, m->enc.P, c->norm_pix_loss, ls->tgt, ls->trs);
    m->last.loss = mse(ls->pred, ls->tgt, (size_t)B * Km * O);
    return VT_OK;
}

/* d pred = 2 (pred - target) / n * dloss; the target's gradient (- d pred) reaches the images */
static int loss_back_targets(vt_model *m, const vt_inputs *in, const int64_t *pidx, int K, int offset,
                             float dloss, float *dpred, float *dimages, const vt_step *dt_row) {
    vt_loss_acts *ls = &m->last.ls;
    vt_arena *ar = &m->arena;
    const vt_vit_config *c = &m->cfg.enc;
    int B = in->batch, O = patch_dim(m), G = c->img_size / c->patch_size;
    size_t n = (size_t)B * K * O;
    float g = 2.0f * dloss / (float)n;
    for (size_t i = 0; i < n; i++) dpred[i] = g * (ls->pred[i] - ls->tgt[i]);
    if (!dimages) return VT_OK;
    size_t mark = vt_arena_mark(ar);
    float *dt = vt_arena_alloc(ar, dt_row->n);
    if (!dt) return vt_arena_overflow(ar);
    size_t img = (size_t)c->in_chans * c->img_size * c->img_size;
    int norm_pix = m->cfg.kind == VT_KIND_AIM || m->cfg.norm_pix_loss;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < K; j++) {
            size_t row = (size_t)b * K + j;
            for (int e = 0; e < O; e++) dt[row * O + e] = -dpred[row * O + e];
            if (norm_pix) norm_pix_backward(dt + row * O, ls->tgt + row * O, ls->trs[row], O);
            int pn = pidx ? (int)pidx[row] - offset : j;
            patch_add(dimages + b * img, dt + row * O, c->in_chans, c->img_size, c->patch_size, G, pn);
        }
    vt_arena_reset(ar, mark);
    return VT_OK;
}

static int mae_backward(vt_model *m, float dloss, float *dimages, int pg) {
    vt_loss_acts *ls = &m->last.ls;
    vt_arena *ar = &m->arena;
    const vt_inputs *in = &m->last.in;
    int B = in->batch, D = m->cfg.enc.embed_dim, K = in->n_keep, Km = in->n_mask, L = m->enc.T_full;
    int Dd = m->cfg.decoder_dim, O = patch_dim(m);
    vt_step st[LOSS_ROWS];
    last_steps(m, st);
    float *dpred = vt_arena_alloc(ar, st[LOSS_DPRED].n);
    if (!dpred) return vt_arena_overflow(ar);
    int rc = loss_back_targets(m, in, in->idx_mask, Km, m->enc.P, dloss, dpred, dimages, &st[LOSS_DT]);
    if (rc) return rc;
    float *dsel = vt_arena_zalloc(ar, st[LOSS_DHEAD].n);
    float *dres = vt_arena_zalloc(ar, st[LOSS_DRES].n);
    if (ar->overflow) return vt_arena_overflow(ar);
    vt_matmul_backward(dsel, vt_G(m, m->pred_w, pg), vt_G(m, m->pred_b, pg), dpred, ls->sel, vt_P(m, m->pred_w), B * Km, Dd, O);
    /* gather at idx_mask after the decoder norm: norm backward on the gathered rows only */
    const vt_chain_run *r = &m->last.dec_run;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Km; j++) {
            size_t row = (size_t)b * L + in->idx_mask[(size_t)b * Km + j];
            vt_layernorm_backward(dres + row * Dd, vt_G(m, m->dn_w, pg), vt_G(m, m->dn_b, pg),
                                  dsel + ((size_t)b * Km + j) * Dd, r->xs[m->dec.depth] + row * Dd,
                                  vt_P(m, m->dn_w), ls->dec_m + row, ls->dec_r + row, 1, Dd);
        }
    rc = vt_chain_backward(m, &m->last.dec_run, dres, pg, NULL, NULL);
    if (rc) return rc;
    /* dres = d(decoder input): pos_embed, the decoder mask token, the embedded kept tokens */
    float *dpos = vt_G(m, m->d_pos, pg), *dmt = vt_G(m, m->d_mask_token, pg);
    if (dpos)
        for (int b = 0; b < B; b++)
            for (size_t e = 0; e < (size_t)L * Dd; e++) dpos[e] += dres[(size_t)b * L * Dd + e];
    float *demb = vt_arena_zalloc(ar, st[LOSS_DEMB].n);
    float *dfeat = vt_arena_zalloc(ar, st[LOSS_DFEAT].n);
    if (ar->overflow) return vt_arena_overflow(ar);
    for (int b = 0; b < B; b++) {
        const int64_t *mrow = in->idx_mask + (size_t)b * Km;
        for (int j = 0; j < Km && dmt; j++)
            for (int d = 0; d < Dd; d++) dmt[d] += dres[((size_t)b * L + mrow[j]) * Dd + d];
        for (int k = 0; k < K; k++) {
            int64_t l = in->idx_keep[(size_t)b * K + k];
            if (vt_row_has(mrow, Km, l)) continue; /* replaced by the mask token */
            memcpy(demb + ((size_t)b * K + k) * Dd, dres + ((size_t)b * L + l) * Dd, (size_t)Dd * sizeof(float));
        }
    }
    vt_matmul_backward(dfeat, vt_G(m, m->de_w, pg), vt_G(m, m->de_b, pg), demb, ls->feat, vt_P(m, m->de_w), B * K, D, Dd);
    return vt_encoder_backward(m, dfeat, NULL, NULL, dimages, pg);
}

/* ---- AIM ------------------------------------------------------------------------------------------------ */

static int aim_forward(vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lays) {
    vt_loss_acts *ls = &m->last.ls;
    vt_arena *ar = &m->arena;
    const vt_model_config *c = &m->cfg;
    int B = in->batch, D = c->enc.embed_dim, N = m->enc.N, Hh = c->head_hidden_dim, O = patch_dim(m);
    vt_step st[LOSS_ROWS];
    loss_steps(m, in, need_grad, lays, st);
    float *x0 = vt_arena_alloc(ar, st[LOSS_ENC + VT_ENC_X0].n);
    if (!x0) return vt_arena_overflow(ar);
    int rc = vt_encoder_preprocess(m, in, 1, x0);
    if (!rc) rc = vt_encoder_blocks(m, in, need_grad, &lays[0], N, x0, 1, 0, &ls->feat);
    if (rc) return rc;
    /* vit._pos_embed(features): the same pos_embed added a second time */
    ls->f2 = vt_arena_alloc(ar, st[LOSS_IN].n);
    float *h0 = vt_arena_alloc(ar, st[LOSS_IN2].n);
    if (ar->overflow) return vt_arena_overflow(ar);
    const float *pos = vt_P(m, m->enc.pos);
    for (int b = 0; b < B; b++)
        for (size_t e = 0; e < (size_t)N * D; e++)
            ls->f2[(size_t)b * N * D + e] = ls->feat[(size_t)b * N * D + e] + (pos ? pos[e] : 0.0f);
    vt_matmul_forward(h0, ls->f2, vt_P(m, m->h_in_w), NULL, B * N, D, Hh);
    vt_chain_run *r = &m->last.head_run;
    rc = vt_chain_run_start(m, r, &m->head, &lays[1], B, N, NULL, m->last.head_xs, m->last.head_acts, h0, need_grad, 0);
    if (rc) return rc;
    rc = alloc_outputs(m, st, &ls->head_ln, &ls->head_m, &ls->head_r);
    if (rc) return rc;
    vt_layernorm_forward(ls->head_ln, ls->head_m, ls->head_r, r->xs[m->head.depth], vt_P(m, m->hn_w), vt_P(m, m->hn_b), B * N, Hh, LN_EPS_HEAD);
    vt_matmul_forward(ls->pred, ls->head_ln, vt_P(m, m->h_out_w), NULL, B * N, Hh, O);
    make_targets(m, in, NULL, N, 0, 1, ls->tgt, ls->trs);
    m->last.loss = mse(ls->pred, ls->tgt, (size_t)B * N * O);
    return VT_OK;
}

static int aim_backward(vt_model *m, float dloss, float *dimages, int pg) {
    vt_loss_acts *ls = &m->last.ls;
    vt_arena *ar = &m->arena;
    const vt_inputs *in = &m->last.in;
    int B = in->batch, D = m->cfg.enc.embed_dim, N = m->enc.N, Hh = m->cfg.head_hidden_dim, O = patch_dim(m);
    vt_step st[LOSS_ROWS];
    last_steps(m, st);
    float *dpred = vt_arena_alloc(ar, st[LOSS_DPRED].n);
    if (!dpred) return vt_arena_overflow(ar);
    int rc = loss_back_targets(m, in, NULL, N, 0, dloss, dpred, dimages, &st[LOSS_DT]);
    if (rc) return rc;
    float *dln = vt_arena_zalloc(ar, st[LOSS_DHEAD].n);
    float *dres = vt_arena_zalloc(ar, st[LOSS_DRES].n);
    if (ar->overflow) return vt_arena_overflow(ar);
    vt_matmul_backward(dln, vt_G(m, m->h_out_w, pg), NULL, dpred, ls->head_ln, vt_P(m, m->h_out_w), B * N, Hh, O);
    vt_layernorm_backward(dres, vt_G(m, m->hn_w, pg), vt_G(m, m->hn_b, pg), dln, m->last.head_run.xs[m->head.depth],
                          vt_P(m, m->hn_w), ls->head_m, ls->head_r, B * N, Hh);
    rc = vt_chain_backward(m, &m->last.head_run, dres, pg, NULL, NULL);
    if (rc) return rc;
    float *df2 = vt_arena_zalloc(ar, st[LOSS_DFEAT].n);
    if (!df2) return vt_arena_overflow(ar);
    vt_matmul_backward(df2, vt_G(m, m->h_in_w, pg), NULL, dres, ls->f2, vt_P(m, m->h_in_w), B * N, D, Hh);
    float *dpos = vt_G(m, m->enc.pos, pg);
    if (dpos)
        for (int b = 0; b < B; b++)
            for (size_t e = 0; e < (size_t)N * D; e++) dpos[e] += df2[(size_t)b * N * D + e];
    return vt_encoder_backward(m, df2, NULL, NULL, dimages, pg);
}

/* ---- dispatch and plan ---------------------------------------------------------------------------------- */

vt_status vt_loss_forward(vt_model *m, const vt_inputs *in, int need_grad, vt_chain_layout *lays) {
    int rc = m->cfg.kind == VT_KIND_MAE ? mae_forward(m, in, need_grad, lays) : aim_forward(m, in, need_grad, lays);
    if (rc) return rc;
    m->last.out = &m->last.loss;
    m->last.out_ndim = 1;
    m->last.out_shape[0] = 1;
    if (!isfinite(m->last.loss)) return vt_fail(VT_ERR_NUMERIC, "the loss is %s", isnan(m->last.loss) ? "NaN" : "infinite");
    return VT_OK;
}

vt_status vt_loss_backward(vt_model *m, float dloss, float *dimages, int pg) {
    if (!isfinite(dloss)) return vt_fail(VT_ERR_NUMERIC, "d loss is not finite");
    size_t mark = vt_arena_mark(&m->arena);
    int rc = m->cfg.kind == VT_KIND_MAE ? mae_backward(m, dloss, dimages, pg) : aim_backward(m, dloss, dimages, pg);
    vt_arena_reset(&m->arena, mark);
    return rc;
}

/* ---- pictures for teaching ---------------------------------------------------------------------- */

vt_status vt_loss_visualize(const vt_model *m, float *masked, float *recon) {
    if (!m || !masked || !recon) return vt_fail(VT_ERR_ARG, "vt_loss_visualize: NULL argument");
    if (!m->last.have_fwd || m->last.fn != VT_FN_LOSS) return vt_fail(VT_ERR_STATE, "vt_loss_visualize needs a loss forward first");
    if (vt_is_classifier(m)) return vt_fail(VT_ERR_ARG, "vt_loss_visualize: a classifier reconstructs nothing (MAE / AIM only)");
    const vt_vit_config *c = &m->cfg.enc;
    const vt_inputs *in = &m->last.in;
    int B = in->batch, O = patch_dim(m), G = c->img_size / c->patch_size, N = G * G;
    size_t img = (size_t)c->in_chans * c->img_size * c->img_size;
    memcpy(masked, in->images, (size_t)B * img * sizeof(float));
    memcpy(recon, in->images, (size_t)B * img * sizeof(float));
    int mae = m->cfg.kind == VT_KIND_MAE, norm_pix = !mae || m->cfg.norm_pix_loss;
    int K = mae ? in->n_mask : N;
    float *patch = malloc((size_t)O * 2 * sizeof(float));
    if (!patch) return vt_fail(VT_ERR_NOMEM, "out of memory");
    float *orig = patch + O;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < K; j++) {
            int n = mae ? (int)in->idx_mask[(size_t)b * K + j] - m->enc.P : j;
            const float *pred = m->last.ls.pred + ((size_t)b * K + j) * O;
            memcpy(patch, pred, (size_t)O * sizeof(float));
            if (norm_pix) { /* invert normalize_mean_var with the original patch's statistics */
                patch_get(orig, in->images + b * img, c->in_chans, c->img_size, c->patch_size, G, n);
                double s = 0, v = 0;
                for (int e = 0; e < O; e++) s += orig[e];
                float mu = (float)(s / O);
                for (int e = 0; e < O; e++) v += (double)(orig[e] - mu) * (orig[e] - mu);
                float sd = sqrtf((float)(v / (O > 1 ? O - 1 : 1)) + NORM_PIX_EPS);
                for (int e = 0; e < O; e++) patch[e] = patch[e] * sd + mu;
            }
            patch_set(recon + b * img, patch, c->in_chans, c->img_size, c->patch_size, G, n);
            if (mae) {
                memset(orig, 0, (size_t)O * sizeof(float));
                patch_set(masked + b * img, orig, c->in_chans, c->img_size, c->patch_size, G, n);
            }
        }
    free(patch);
    return VT_OK;
}
