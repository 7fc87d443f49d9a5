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
#include "exec.h"
#include "objective.h"
#include "optim.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS_HEAD 1e-5f /* AIMPredictionHead uses torch's nn.LayerNorm default */

static int patch_dim(const vt_model *m) {
    return m->cfg.enc.patch_size * m->cfg.enc.patch_size * m->cfg.enc.in_chans;
}

/* lightly's MAE: backbone.mask_token, backbone.vit.* (sin-cos pos_embed, frozen), the decoder */
static vt_status mae_build(vt_model *m) {
    const vt_model_config *c = &m->cfg;
    int D = c->enc.embed_dim,
        L = (c->enc.img_size / c->enc.patch_size) * (c->enc.img_size / c->enc.patch_size) +
            c->enc.class_token + c->enc.reg_tokens;
    int rc = 0, O = patch_dim(m), Dd = c->decoder_dim;
    rc |= vt_param_add(m, &m->enc.mask_token, "", "backbone.mask_token", 3, 1, 1, D, 0, 1);
    if (!rc) rc = vt_encoder_build(m, "backbone.vit.", 0); /* sincos pos_embed: frozen */
    rc |= vt_param_add(m, &m->de_w, "", "decoder_embed.weight", 2, Dd, D, 0, 0, 1);
    rc |= vt_param_add(m, &m->de_b, "", "decoder_embed.bias", 1, Dd, 0, 0, 0, 1);
    rc |= vt_param_add(m, &m->d_mask_token, "", "decoder.mask_token", 3, 1, 1, Dd, 0, 1);
    rc |= vt_param_add(m, &m->d_pos, "", "decoder.pos_embed", 3, 1, L, Dd, 0, 0);
    if (rc) return rc < 0 ? rc : VT_ERR_ARG;
    /* lightly's decoder: timm Blocks with qkv_bias, exact GELU, torch LayerNorm(eps 1e-6) */
    vt_block_opts dec = { .has_attn = 1,
                          .qkv_bias = 1,
                          .proj_bias = 1,
                          .mlp_bias = 1,
                          .act = VT_ACT_GELU,
                          .norm = VT_NORM_LAYER,
                          .eps = 1e-6f };
    rc = vt_chain_build(m, &m->dec, "decoder.blocks.", c->decoder_depth, Dd, c->decoder_heads,
                        (int)vt_mlp_hidden(Dd, c->decoder_mlp_ratio), &dec, 1, 1, "dec");
    if (rc) return rc;
    rc |= vt_param_add(m, &m->dn_w, "", "decoder.norm.weight", 1, Dd, 0, 0, 0, 1);
    rc |= vt_param_add(m, &m->dn_b, "", "decoder.norm.bias", 1, Dd, 0, 0, 0, 1);
    rc |= vt_param_add(m, &m->pred_w, "", "prediction_head.weight", 2, O, Dd, 0, 0, 1);
    rc |= vt_param_add(m, &m->pred_b, "", "prediction_head.bias", 1, O, 0, 0, 0, 1);
    return rc ? (rc < 0 ? rc : VT_ERR_ARG) : VT_OK;
}

/* lightly's AIM: backbone.* (a causal timm ViT), projection_head.blocks.* */
static vt_status aim_build(vt_model *m) {
    const vt_model_config *c = &m->cfg;
    int D = c->enc.embed_dim, O = patch_dim(m), Hh = c->head_hidden_dim, nb = c->head_blocks;
    char name[VT_NAME_MAX];
    int rc = vt_encoder_build(m, "backbone.", 0);
    if (rc) return rc;
    rc |= vt_param_add(m, &m->h_in_w, "", "projection_head.blocks.0.weight", 2, Hh, D, 0, 0, 1);
    if (rc) return rc < 0 ? rc : VT_ERR_ARG;
    /* AIMPredictionHeadBlock: x + Mlp(LayerNorm(x)), bias-free, exact GELU, torch's eps 1e-5 */
    vt_block_opts hb = { .act = VT_ACT_GELU, .norm = VT_NORM_LAYER, .eps = LN_EPS_HEAD };
    rc = vt_chain_build(m, &m->head, "projection_head.blocks.", nb, Hh, 0,
                        (int)vt_mlp_hidden(Hh, c->head_mlp_ratio), &hb, 1, 1, "head");
    if (rc) return rc;
    snprintf(name, sizeof name, "projection_head.blocks.%d.weight", nb + 1);
    rc |= vt_param_add(m, &m->hn_w, "", name, 1, Hh, 0, 0, 0, 1);
    snprintf(name, sizeof name, "projection_head.blocks.%d.bias", nb + 1);
    rc |= vt_param_add(m, &m->hn_b, "", name, 1, Hh, 0, 0, 0, 1);
    snprintf(name, sizeof name, "projection_head.blocks.%d.weight", nb + 2);
    rc |= vt_param_add(m, &m->h_out_w, "", name, 2, O, Hh, 0, 0, 1);
    return rc ? (rc < 0 ? rc : VT_ERR_ARG) : VT_OK;
}

/* ---- step tables (model.h): what the loss calls allocate, in order -------------------------------- */

/* One table for both losses, MAE | AIM per row (a row the loss has not is 0): the encoder (on
 * the kept tokens | all), the head's input (decoder input | features + pos_embed), its scoped
 * embedding | the head's first Linear, the chain (decoder | head), its norm, the norm's rows at
 * idx_mask | -, prediction, target; backward: d pred, d target (-> images), d gathered rows |
 * d norm out, d chain, d embedded tokens | -, d features, then the encoder's backward. */
enum {
    LOSS_ENC = 0,
    LOSS_IN = VT_ENC_FWD_ROWS,
    LOSS_IN2,
    LOSS_KEPT,
    LOSS_FWD,
    LOSS_LN,
    LOSS_LN_STATS,
    LOSS_SEL,
    LOSS_PRED,
    LOSS_TGT,
    LOSS_TRS,
    LOSS_DPRED,
    LOSS_DT,
    LOSS_DHEAD,
    LOSS_DRES,
    LOSS_BWD,
    LOSS_DEMB,
    LOSS_DFEAT,
    LOSS_ENC_BWD,
    LOSS_ROWS = LOSS_ENC_BWD + VT_ENC_BWD_ROWS
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
    uint64_t T = mae ? (uint64_t)in->n_keep : (uint64_t)m->enc.N;                /* encoder tokens */
    uint64_t Mc = B * (mae ? (uint64_t)m->enc.T_full : (uint64_t)m->enc.N);      /* chain rows */
    uint64_t Dc = mae ? (uint64_t)c->decoder_dim : (uint64_t)c->head_hidden_dim; /* chain width */
    uint64_t Mp = B * (mae ? (uint64_t)in->n_mask : (uint64_t)m->enc.N);         /* predicted patches */
    uint64_t kept, fx, bx;
    vt_inputs e = encoder_inputs(in);
    vt_encoder_steps(m, mae ? &e : in, (int)T, need_grad, &m->enc.chain, 0, &lays[0], st + LOSS_ENC,
                     st + LOSS_ENC_BWD);
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
    vt_chain_layout lays[VT_CHAINS] = { m->last.enc_run.lay, m->cfg.kind == VT_KIND_MAE
                                                                 ? m->last.dec_run.lay
                                                                 : m->last.head_run.lay };
    loss_steps(m, &m->last.in, 1, lays, st);
}

/* The rows LN .. TRS after the chain: its norm (output, mean, rstd), the norm's rows at
 * idx_mask (MAE), prediction, target and the target's statistics (norm_pix). */
static vt_status alloc_outputs(vt_model *m, const vt_step st[LOSS_ROWS], float **ln, float **mean,
                               float **rstd) {
    vt_arena *ar = &m->arena;
    vt_loss_acts *ls = &m->last.ls;
    const char *head = m->cfg.kind == VT_KIND_MAE ? "dec" : "head";
    *ln = vt_arena_alloc(ar, st[LOSS_LN].n, "%s.norm", head);
    *mean = vt_arena_alloc(ar, st[LOSS_LN_STATS].n, "%s.norm.mean", head);
    *rstd = vt_arena_alloc(ar, st[LOSS_LN_STATS].n, "%s.norm.rstd", head);
    ls->sel = st[LOSS_SEL].n ? vt_arena_alloc(ar, st[LOSS_SEL].n, "dec.masked_rows") : NULL;
    ls->pred = vt_arena_alloc(ar, st[LOSS_PRED].n, "loss.prediction");
    ls->tgt = vt_arena_alloc(ar, st[LOSS_TGT].n, "loss.target");
    ls->trs = st[LOSS_TRS].n ? vt_arena_alloc(ar, st[LOSS_TRS].n, "loss.target.rstd") : NULL;
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
    float *x0 = vt_arena_alloc(ar, st[LOSS_ENC + VT_ENC_X0].n, "enc.in");
    if (!x0) return vt_arena_overflow(ar);
    int rc = vt_encoder_preprocess(m, &enc_in, 0, need_grad, x0);
    if (!rc) rc = vt_encoder_blocks(m, &enc_in, need_grad, &m->enc.chain, &lays[0], K, x0, 0, 0, &ls->feat);
    if (rc) return rc;
    /* decoder input: zeros, embedded tokens at idx_keep, mask token at idx_mask, + pos_embed */
    float *seq = vt_zalloc(m, st[LOSS_IN].n, "dec.in");
    size_t mark = vt_arena_mark(ar);
    float *emb = vt_arena_alloc(ar, st[LOSS_IN2].n, "dec.embed");
    if (ar->overflow) return vt_arena_overflow(ar);
    vt_k_matmul_forward(m, emb, ls->feat, vt_P(m, m->de_w), vt_P(m, m->de_b), B * K, D, Dd);
    vt_k_scatter_rows(m, seq, emb, in->idx_keep, B, L, K, Dd);
    vt_arena_reset(ar, mark);
    vt_k_mask_select(m, seq, vt_P(m, m->d_mask_token), in->idx_mask, NULL, B, L, Dd, Km);
    vt_k_add_rows(m, seq, seq, vt_P(m, m->d_pos), B, (int64_t)L * Dd, (int64_t)L * Dd);
    vt_chain_run *r = &m->last.dec_run;
    rc = vt_chain_run_start(m, r, &m->dec, &lays[1], B, L, NULL, m->last.dec_xs, m->last.dec_acts, seq,
                            need_grad, 0);
    if (rc) return rc;
    rc = alloc_outputs(m, st, &ls->dec_ln, &ls->dec_m, &ls->dec_r);
    if (rc) return rc;
    vt_k_layernorm_forward(m, ls->dec_ln, ls->dec_m, ls->dec_r, r->xs[m->dec.depth], vt_P(m, m->dn_w),
                           vt_P(m, m->dn_b), B * L, Dd, 1e-6f);
    vt_k_gather_rows(m, ls->sel, ls->dec_ln, in->idx_mask, B, L, Km, Dd);
    vt_k_matmul_forward(m, ls->pred, ls->sel, vt_P(m, m->pred_w), vt_P(m, m->pred_b), B * Km, Dd, O);
    vt_k_patch_targets(m, ls->tgt, ls->trs, in->images, in->idx_mask, B, Km, c->enc.in_chans, c->enc.img_size,
                       c->enc.patch_size, m->enc.G, m->enc.P, c->norm_pix_loss);
    vt_k_mse_forward(m, &m->sc.loss, ls->pred, ls->tgt, (int64_t)B * Km * O);
    return VT_OK;
}

/* d pred = 2 (pred - target) / n * dloss; the target's gradient (- d pred) reaches the images */
static int loss_back_targets(vt_model *m, const vt_inputs *in, const int64_t *pidx, int K, int offset,
                             float *dpred, float *dimages, const vt_step *dt_row) {
    vt_loss_acts *ls = &m->last.ls;
    vt_arena *ar = &m->arena;
    const vt_vit_config *c = &m->cfg.enc;
    int B = in->batch, O = patch_dim(m);
    vt_k_mse_backward(m, dpred, ls->pred, ls->tgt, &m->sc.dloss, (int64_t)B * K * O);
    if (!dimages) return VT_OK;
    size_t mark = vt_arena_mark(ar);
    float *dt = vt_arena_alloc(ar, dt_row->n, "loss.grad.target");
    if (!dt) return vt_arena_overflow(ar);
    int norm_pix = m->cfg.kind == VT_KIND_AIM || m->cfg.norm_pix_loss;
    vt_k_targets_backward(m, dimages, dt, dpred, ls->tgt, ls->trs, pidx, B, K, c->in_chans, c->img_size,
                          c->patch_size, m->enc.G, offset, norm_pix);
    vt_arena_reset(ar, mark);
    return VT_OK;
}

static int mae_backward(vt_model *m, float *dimages, int pg) {
    vt_loss_acts *ls = &m->last.ls;
    vt_arena *ar = &m->arena;
    const vt_inputs *in = &m->last.in;
    int B = in->batch, D = m->cfg.enc.embed_dim, K = in->n_keep, Km = in->n_mask, L = m->enc.T_full;
    int Dd = m->cfg.decoder_dim, O = patch_dim(m);
    vt_step st[LOSS_ROWS];
    last_steps(m, st);
    float *dpred = vt_arena_alloc(ar, st[LOSS_DPRED].n, "loss.grad.prediction");
    if (!dpred) return vt_arena_overflow(ar);
    int rc = loss_back_targets(m, in, in->idx_mask, Km, m->enc.P, dpred, dimages, &st[LOSS_DT]);
    if (rc) return rc;
    float *dsel = vt_zalloc(m, st[LOSS_DHEAD].n, "dec.grad.masked_rows");
    float *dres = vt_zalloc(m, st[LOSS_DRES].n, "dec.grad");
    if (ar->overflow) return vt_arena_overflow(ar);
    vt_k_matmul_backward(m, dsel, vt_G(m, m->pred_w, pg), vt_G(m, m->pred_b, pg), dpred, ls->sel,
                         vt_P(m, m->pred_w), B * Km, Dd, O);
    /* gather at idx_mask after the decoder norm: norm backward on the gathered rows only */
    const vt_chain_run *r = &m->last.dec_run;
    vt_k_layernorm_backward_rows(m, dres, vt_G(m, m->dn_w, pg), vt_G(m, m->dn_b, pg), dsel,
                                 r->xs[m->dec.depth], vt_P(m, m->dn_w), ls->dec_m, ls->dec_r, in->idx_mask, B,
                                 L, Km, Dd);
    rc = vt_chain_backward(m, &m->last.dec_run, dres, pg, NULL, NULL);
    if (rc) return rc;
    /* dres = d(decoder input): pos_embed, the decoder mask token, the embedded kept tokens */
    float *dpos = vt_G(m, m->d_pos, pg), *dmt = vt_G(m, m->d_mask_token, pg);
    if (dpos) vt_k_sum_rows(m, dpos, dres, B, (int64_t)L * Dd, (int64_t)L * Dd);
    float *demb = vt_zalloc(m, st[LOSS_DEMB].n, "dec.grad.embed");
    float *dfeat = vt_zalloc(m, st[LOSS_DFEAT].n, "enc.grad.features");
    if (ar->overflow) return vt_arena_overflow(ar);
    if (dmt) vt_k_sum_rows_at(m, dmt, dres, in->idx_mask, B, L, Km, Dd);
    /* the kept tokens' rows, except those a mask token replaced */
    vt_k_gather_rows_except(m, demb, dres, in->idx_keep, in->idx_mask, B, L, K, Km, Dd);
    vt_k_matmul_backward(m, dfeat, vt_G(m, m->de_w, pg), vt_G(m, m->de_b, pg), demb, ls->feat,
                         vt_P(m, m->de_w), B * K, D, Dd);
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
    float *x0 = vt_arena_alloc(ar, st[LOSS_ENC + VT_ENC_X0].n, "enc.in");
    if (!x0) return vt_arena_overflow(ar);
    int rc = vt_encoder_preprocess(m, in, 1, need_grad, x0);
    if (!rc) rc = vt_encoder_blocks(m, in, need_grad, &m->enc.chain, &lays[0], N, x0, 1, 0, &ls->feat);
    if (rc) return rc;
    /* vit._pos_embed(features): the same pos_embed added a second time */
    ls->f2 = vt_arena_alloc(ar, st[LOSS_IN].n, "head.features_pos");
    float *h0 = vt_arena_alloc(ar, st[LOSS_IN2].n, "head.in");
    if (ar->overflow) return vt_arena_overflow(ar);
    vt_k_add_rows(m, ls->f2, ls->feat, vt_P(m, m->enc.pos), B, (int64_t)N * D, (int64_t)N * D);
    vt_k_matmul_forward(m, h0, ls->f2, vt_P(m, m->h_in_w), NULL, B * N, D, Hh);
    vt_chain_run *r = &m->last.head_run;
    rc = vt_chain_run_start(m, r, &m->head, &lays[1], B, N, NULL, m->last.head_xs, m->last.head_acts, h0,
                            need_grad, 0);
    if (rc) return rc;
    rc = alloc_outputs(m, st, &ls->head_ln, &ls->head_m, &ls->head_r);
    if (rc) return rc;
    vt_k_layernorm_forward(m, ls->head_ln, ls->head_m, ls->head_r, r->xs[m->head.depth], vt_P(m, m->hn_w),
                           vt_P(m, m->hn_b), B * N, Hh, LN_EPS_HEAD);
    vt_k_matmul_forward(m, ls->pred, ls->head_ln, vt_P(m, m->h_out_w), NULL, B * N, Hh, O);
    vt_k_patch_targets(m, ls->tgt, ls->trs, in->images, NULL, B, N, c->enc.in_chans, c->enc.img_size,
                       c->enc.patch_size, m->enc.G, 0, 1);
    vt_k_mse_forward(m, &m->sc.loss, ls->pred, ls->tgt, (int64_t)B * N * O);
    return VT_OK;
}

static int aim_backward(vt_model *m, float *dimages, int pg) {
    vt_loss_acts *ls = &m->last.ls;
    vt_arena *ar = &m->arena;
    const vt_inputs *in = &m->last.in;
    int B = in->batch, D = m->cfg.enc.embed_dim, N = m->enc.N, Hh = m->cfg.head_hidden_dim, O = patch_dim(m);
    vt_step st[LOSS_ROWS];
    last_steps(m, st);
    float *dpred = vt_arena_alloc(ar, st[LOSS_DPRED].n, "loss.grad.prediction");
    if (!dpred) return vt_arena_overflow(ar);
    int rc = loss_back_targets(m, in, NULL, N, 0, dpred, dimages, &st[LOSS_DT]);
    if (rc) return rc;
    float *dln = vt_zalloc(m, st[LOSS_DHEAD].n, "head.grad.norm");
    float *dres = vt_zalloc(m, st[LOSS_DRES].n, "head.grad");
    if (ar->overflow) return vt_arena_overflow(ar);
    vt_k_matmul_backward(m, dln, vt_G(m, m->h_out_w, pg), NULL, dpred, ls->head_ln, vt_P(m, m->h_out_w),
                         B * N, Hh, O);
    vt_k_layernorm_backward(m, dres, vt_G(m, m->hn_w, pg), vt_G(m, m->hn_b, pg), dln,
                            m->last.head_run.xs[m->head.depth], vt_P(m, m->hn_w), ls->head_m, ls->head_r,
                            B * N, Hh);
    rc = vt_chain_backward(m, &m->last.head_run, dres, pg, NULL, NULL);
    if (rc) return rc;
    float *df2 = vt_zalloc(m, st[LOSS_DFEAT].n, "enc.grad.features");
    if (!df2) return vt_arena_overflow(ar);
    vt_k_matmul_backward(m, df2, vt_G(m, m->h_in_w, pg), NULL, dres, ls->f2, vt_P(m, m->h_in_w), B * N, D,
                         Hh);
    float *dpos = vt_G(m, m->enc.pos, pg);
    if (dpos) vt_k_sum_rows(m, dpos, df2, B, (int64_t)N * D, (int64_t)N * D);
    return vt_encoder_backward(m, df2, NULL, NULL, dimages, pg);
}

/* ---- the objectives (objective.h) ---------------------------------------------------------------- */

static vt_status mae_check(const vt_model *m, vt_fn fn, const vt_inputs *in, int values) {
    if (!in) return vt_fail(VT_ERR_ARG, "inputs are NULL");
    if (!in->idx_keep || !in->idx_mask)
        return vt_fail(VT_ERR_ARG, "the MAE loss needs idx_keep and idx_mask (random_token_mask)");
    if (in->mask) return vt_fail(VT_ERR_ARG, "the MAE loss takes no bool mask");
    /* the encoder sees idx_keep only (lightly's MAE never passes idx_mask to the encoder) */
    vt_inputs e = encoder_inputs(in);
    vt_status rc = vt_check_encoder_inputs(m, &e, 0, values);
    if (rc) return rc;
    /* the MAE scatters the encoded tokens back to idx_keep: a repeat would be a race in PyTorch's
     * scatter (which write wins is undefined), so it is refused here */
    if (in->n_keep > m->enc.T_full)
        return vt_fail(VT_ERR_ARG, "idx_keep: %d indices per row, the MAE scatters them into %d tokens",
                       in->n_keep, m->enc.T_full);
    for (int b = 0; values && b < in->batch; b++)
        for (int j = 1; j < in->n_keep; j++)
            if (vt_row_has(in->idx_keep + (size_t)b * in->n_keep, j,
                           in->idx_keep[(size_t)b * in->n_keep + j]))
                return vt_fail(VT_ERR_ARG,
                               "idx_keep[%d] repeats index %lld: the MAE scatters the encoded tokens "
                               "back to idx_keep, which needs distinct indices",
                               b, (long long)in->idx_keep[(size_t)b * in->n_keep + j]);
    if (in->n_mask < 1 || in->n_mask > m->enc.T_full)
        return vt_fail(VT_ERR_ARG, "idx_mask: %d indices per row (1..%d)", in->n_mask, m->enc.T_full);
    if (values) {
        int L = m->enc.T_full, P = m->enc.P;
        for (int b = 0; b < in->batch; b++)
            for (int j = 0; j < in->n_mask; j++) {
                int64_t v = in->idx_mask[(size_t)b * in->n_mask + j];
                if (v < P || v >= L)
                    return vt_fail(VT_ERR_ARG,
                                   "idx_mask[%d][%d] = %lld: MAE masks patches only, indices %d..%d", b, j,
                                   (long long)v, P, L - 1);
                if (vt_row_has(in->idx_mask + (size_t)b * in->n_mask, j, v))
                    return vt_fail(VT_ERR_ARG, "idx_mask[%d] repeats index %lld", b, (long long)v);
            }
    }
    return VT_OK;
}

static vt_status aim_check(const vt_model *m, vt_fn fn, const vt_inputs *in, int values) {
    if (!in) return vt_fail(VT_ERR_ARG, "inputs are NULL");
    if (in->idx_keep || in->idx_mask)
        return vt_fail(VT_ERR_ARG, "the AIM loss takes a prefix mask, not idx_keep/idx_mask");
    return vt_check_encoder_inputs(m, in, 1, values);
}

/* the encoder on the kept tokens, then the decoder / head over the whole sequence */
static void mae_chains(const vt_model *m, vt_fn fn, const vt_inputs *in, const vt_chain *c[VT_CHAINS],
                       int T[VT_CHAINS]) {
    vt_encoder_chains(m, fn, in, c, T);
    c[1] = &m->dec;
    T[1] = m->enc.T_full;
}
static void aim_chains(const vt_model *m, vt_fn fn, const vt_inputs *in, const vt_chain *c[VT_CHAINS],
                       int T[VT_CHAINS]) {
    vt_encoder_chains(m, fn, in, c, T);
    c[1] = &m->head;
    T[1] = m->enc.T_full;
}

static uint64_t loss_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                          const vt_chain_layout *lays) {
    vt_step st[LOSS_ROWS];
    loss_steps(m, in, need_grad, lays, st);
    return vt_steps_peak(st, LOSS_ROWS);
}

static vt_status loss_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                              const vt_chain_layout *lays) {
    int rc = m->cfg.kind == VT_KIND_MAE ? mae_forward(m, in, need_grad, lays)
                                        : aim_forward(m, in, need_grad, lays);
    if (rc) return rc;
    m->last.out = &m->sc.loss;
    m->last.out_ndim = 1;
    m->last.out_shape[0] = 1;
    /* a recorded step has no loss yet: its non-finite check is a kernel (vt_optimizer_apply) */
    if (!vt_exec_recording(m) && !isfinite(m->sc.loss))
        return vt_fail(VT_ERR_NUMERIC, "the loss is %s", isnan(m->sc.loss) ? "NaN" : "infinite");
    return VT_OK;
}

static vt_status loss_backward(vt_model *m, const float *const *douts, int n_douts, float *dimages, int pg) {
    if (!isfinite(m->sc.dloss)) return vt_fail(VT_ERR_NUMERIC, "d loss is not finite");
    size_t mark = vt_arena_mark(&m->arena);
    int rc = m->cfg.kind == VT_KIND_MAE ? mae_backward(m, dimages, pg) : aim_backward(m, dimages, pg);
    vt_arena_reset(&m->arena, mark);
    return rc;
}

/* lightly random_token_mask: idx_keep [B, n_keep] and idx_mask [B, L - n_keep] */
static vt_status mae_step_inputs(const vt_model *m, const vt_step_draw *draw, int batch, float mask_ratio,
                                 vt_inputs *in) {
    static const int64_t idx = 0;
    int L = m->enc.T_full, nk = 0;
    memset(in, 0, sizeof *in);
    in->batch = batch;
    if (draw) {
        vt_status rc =
            vt_random_token_mask(draw->rng, batch, L, mask_ratio, 0, draw->keep, draw->masked, &nk);
        if (rc) return rc;
        in->idx_keep = draw->keep;
        in->idx_mask = draw->masked;
    } else {
        if (!(mask_ratio >= 0 && mask_ratio < 1))
            return vt_fail(VT_ERR_ARG, "mask_ratio must be in [0, 1), got %g", mask_ratio);
        nk = vt_mask_keep_count(L, mask_ratio, 0);
        in->idx_keep = in->idx_mask = &idx;
    }
    if (nk >= L) return vt_fail(VT_ERR_ARG, "mask_ratio %g masks no patch of %d tokens", mask_ratio, L);
    in->n_keep = nk;
    in->n_mask = L - nk;
    return VT_OK;
}

/* lightly aim.py: random_prefix_mask((B, N), max_prefix_length = N - 1), causal */
static vt_status aim_step_inputs(const vt_model *m, const vt_step_draw *draw, int batch, float mask_ratio,
                                 vt_inputs *in) {
    static const uint8_t mask = 0;
    int L = m->enc.T_full;
    memset(in, 0, sizeof *in);
    in->batch = batch;
    in->mask = &mask;
    in->is_causal = 1;
    if (!draw) return VT_OK;
    in->mask = draw->prefix;
    return vt_random_prefix_mask(draw->rng, batch, L, L > 1 ? L - 1 : 1, draw->prefix);
}

const vt_objective vt_objective_mae = { "MAE",          0,         mae_build,    mae_check,
                                        mae_chains,     loss_plan, loss_forward, loss_backward,
                                        mae_step_inputs };
const vt_objective vt_objective_aim = { "AIM",          0,         aim_build,    aim_check,
                                        aim_chains,     loss_plan, loss_forward, loss_backward,
                                        aim_step_inputs };

/* ---- pictures for teaching ---------------------------------------------------------------------- */

vt_status vt_loss_visualize(const vt_model *cm, float *masked, float *recon) {
    if (!cm || !masked || !recon) return vt_fail(VT_ERR_ARG, "vt_loss_visualize: NULL argument");
    if (!cm->last.have_fwd || cm->last.fn != VT_FN_LOSS)
        return vt_fail(VT_ERR_STATE, "vt_loss_visualize needs a loss forward first");
    if (cm->obj->labels)
        return vt_fail(VT_ERR_ARG, "vt_loss_visualize: a classifier reconstructs nothing (MAE / AIM only)");
    vt_model *m = (vt_model *)cm; /* the kernels below only read the model */
    const vt_vit_config *c = &m->cfg.enc;
    const vt_inputs *in = &m->last.in;
    int B = in->batch, G = c->img_size / c->patch_size, N = G * G;
    int64_t img = (int64_t)c->in_chans * c->img_size * c->img_size;
    int mae = m->cfg.kind == VT_KIND_MAE, norm_pix = !mae || m->cfg.norm_pix_loss;
    vt_k_copy2d(m, masked, in->images, 1, B * img, 0, 0);
    vt_k_copy2d(m, recon, in->images, 1, B * img, 0, 0);
    vt_k_unpatchify(m, recon, mae ? masked : NULL, m->last.ls.pred, in->images, mae ? in->idx_mask : NULL, B,
                    mae ? in->n_mask : N, c->in_chans, c->img_size, c->patch_size, G, mae ? m->enc.P : 0,
                    norm_pix);
    return VT_OK;
}
