/* classify.c: fine-tuning to labels -- timm's VisionTransformer with num_classes (a VT_KIND_TIMM
 * model whose config has num_classes > 0) trained with cross-entropy:
 *   forward_features(images) -> forward_head (pool -> fc_norm -> head, vit.c) = logits [B,C]
 *   loss = mean_b [ (1-s) * -logp[b, y_b] + s * mean_c(-logp[b, c]) ]
 * which is timm's LabelSmoothingCrossEntropy (s = smoothing; s = 0 is F.cross_entropy).
 *   d logits[b,c] = dloss / B * (p[b,c] - (1-s) [c == y_b] - s / C)
 * DeiT's distilled model trains both heads, as DeiT trains it (timm's set_distilled_training: both
 * logits) with its DistillationLoss of 'hard' distillation, the labels standing in for the
 * teacher's decisions (no teacher here): loss = 0.5 * LabelSmoothingCE(head(x[:,0]), y) +
 * 0.5 * CE(head_dist(x[:,1]), y) (alpha 0.5; DeiT's distillation term has no smoothing). Its
 * prediction is the eval forward, the two heads averaged.
 * The arena rows of the call are a step table like the encoder call's (vit.c call_steps): the
 * encoder's rows, the head's, the log-probabilities; backward: d logits, d features, the head's
 * backward scratch, the encoder's backward rows. */
#include "vit_internal.h"
#include "exec.h"
#include "objective.h"
#include <string.h>

enum {
    CLS_ENC = 0,
    CLS_HEAD = VT_ENC_FWD_ROWS,
    CLS_LOGP = CLS_HEAD + VT_HEAD_FWD_ROWS,
    CLS_LOSSES,
    CLS_DLOGITS,
    CLS_DHALF,
    CLS_DFEAT,
    CLS_HEAD_BWD,
    CLS_ENC_BWD = CLS_HEAD_BWD + VT_HEAD_BWD_ROWS,
    CLS_ROWS = CLS_ENC_BWD + VT_ENC_BWD_ROWS
};

static void cls_steps(const vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lay,
                      vt_step st[CLS_ROWS]) {
    vt_geom geo;
    vt_call_geom(m, in, &geo);
    uint64_t B = in->batch, D = m->enc.chain.D, T = (uint64_t)geo.L, C = m->cfg.enc.num_classes,
             g = need_grad ? 1 : 0;
    int two = m->cfg.enc.distilled; /* DeiT: both heads (head, head_dist) */
    vt_encoder_steps(m, in, (int)T, need_grad, &m->enc.chain, 0, lay, st + CLS_ENC, st + CLS_ENC_BWD);
    vt_head_steps(m, (int)B, (int)T, lay->threads, 0, two, need_grad, st + CLS_HEAD, st + CLS_HEAD_BWD);
    st[CLS_LOGP] = vt_keep(B * C);
    st[CLS_LOGP].count = two ? 2 : 1;
    st[CLS_LOSSES] = vt_keep(two ? 1 : 0); /* the two cross-entropies */
    st[CLS_LOSSES].count = 2;
    st[CLS_DLOGITS] = vt_keep(g * B * C);
    st[CLS_DLOGITS].count = two ? 2 : 1;
    st[CLS_DHALF] = vt_keep(g * two); /* dloss / 2 */
    st[CLS_DFEAT] = vt_keep(g * B * T * D);
}

static uint64_t cls_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                         const vt_chain_layout *lays) {
    vt_step st[CLS_ROWS];
    cls_steps(m, in, need_grad, &lays[0], st);
    return vt_steps_peak(st, CLS_ROWS);
}

static vt_status cls_check(const vt_model *m, vt_fn fn, const vt_inputs *in, int values) {
    vt_status rc = vt_check_encoder_inputs(m, in, 0, values);
    if (rc) return rc;
    if (m->cfg.enc.global_pool == VT_POOL_NONE)
        return vt_fail(
            VT_ERR_ARG,
            "the classifier loss needs a pooled head (global_pool token / avg / max / avgmax, not '')");
    if (in->idx_mask || in->idx_keep || in->mask)
        return vt_fail(VT_ERR_ARG, "the classifier loss runs timm's forward: no idx_mask / idx_keep / mask");
    if (in->distilled_training)
        return vt_fail(VT_ERR_ARG,
                       "distilled_training is timm's forward of a distilled model; its classifier "
                       "loss trains both heads by itself");
    if (!(in->label_smoothing >= 0.0f && in->label_smoothing < 1.0f))
        return vt_fail(VT_ERR_ARG, "label_smoothing must be in [0, 1), got %g", in->label_smoothing);
    if (!values) return VT_OK;
    if (!in->labels) return vt_fail(VT_ERR_ARG, "the classifier loss needs labels");
    for (int b = 0; b < in->batch; b++)
        if (in->labels[b] < 0 || in->labels[b] >= m->cfg.enc.num_classes)
            return vt_fail(VT_ERR_ARG, "labels[%d] = %d is not a class of 0..%d", b, (int)in->labels[b],
                           m->cfg.enc.num_classes - 1);
    return VT_OK;
}

static vt_status cls_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                             const vt_chain_layout *lays) {
    vt_arena *ar = &m->arena;
    vt_geom geo;
    vt_call_geom(m, in, &geo);
    int B = in->batch, T = geo.L, C = m->cfg.enc.num_classes;
    vt_step st[CLS_ROWS];
    cls_steps(m, in, need_grad, &lays[0], st);
    float *x0 = vt_arena_alloc(ar, st[CLS_ENC + VT_ENC_X0].n, "enc.in"), *feat;
    if (!x0) return vt_arena_overflow(ar);
    vt_status rc = vt_encoder_preprocess(m, in, 0, need_grad, x0);
    if (!rc) rc = vt_encoder_blocks(m, in, need_grad, &m->enc.chain, &lays[0], T, x0, 0, 0, &feat);
    int two = m->cfg.enc.distilled;
    if (!rc) rc = vt_head_forward(m, &m->last.head, feat, B, T, lays[0].threads, 0, two);
    if (rc) return rc;
    const float *logits = m->last.head.out; /* [B, C]; DeiT: head's, then head_dist's (out2) */
    float *logp = vt_arena_alloc(ar, st[CLS_LOGP].n, "loss.log_probabilities");
    float *logp2 = two ? vt_arena_alloc(ar, st[CLS_LOGP].n, "loss.log_probabilities_dist") : NULL;
    float *ce = two ? vt_arena_alloc(ar, st[CLS_LOSSES].n, "loss.head") : NULL;
    float *ce2 = two ? vt_arena_alloc(ar, st[CLS_LOSSES].n, "loss.head_dist") : NULL;
    if (ar->overflow) return vt_arena_overflow(ar);
    m->last.cls_logp = logp;
    m->last.cls_logp2 = logp2;
    if (two) { /* DeiT: (1 - alpha) * base + alpha * distillation, alpha 0.5: halves, exact */
        vt_k_cross_entropy_forward(m, logp, ce, logits, in->labels, B, C, in->label_smoothing);
        vt_k_cross_entropy_forward(m, logp2, ce2, m->last.head.out2, in->labels, B, C, 0.0f);
        vt_k_fill(m, &m->sc.loss, 1, 0.0f);
        vt_k_add_scaled(m, &m->sc.loss, ce, 1, 0.5f);
        vt_k_add_scaled(m, &m->sc.loss, ce2, 1, 0.5f);
        m->last.out2 = m->last.head.out2;
    } else
        vt_k_cross_entropy_forward(m, logp, &m->sc.loss, logits, in->labels, B, C, in->label_smoothing);
    m->last.out = (float *)logits;
    m->last.out_ndim = 2;
    m->last.out_shape[0] = B;
    m->last.out_shape[1] = C;
    return VT_OK;
}

static vt_status cls_backward(vt_model *m, const float *const *douts, int n_douts, float *dimages, int pg) {
    vt_arena *ar = &m->arena;
    const vt_inputs *in = &m->last.in;
    const vt_chain_run *r = &m->last.enc_run;
    int B = in->batch, C = m->cfg.enc.num_classes;
    vt_step st[CLS_ROWS];
    cls_steps(m, in, 1, &r->lay, st);
    size_t mark = vt_arena_mark(ar);
    int two = m->cfg.enc.distilled;
    float *dlogits = vt_arena_alloc(ar, st[CLS_DLOGITS].n, "loss.grad.logits");
    float *dlogits2 = two ? vt_arena_alloc(ar, st[CLS_DLOGITS].n, "loss.grad.logits_dist") : NULL;
    float *dhalf = two ? vt_arena_alloc(ar, st[CLS_DHALF].n, "loss.grad.half") : NULL;
    float *dfeat = vt_zalloc(m, st[CLS_DFEAT].n, "enc.grad.features");
    if (ar->overflow) return vt_arena_overflow(ar);
    if (two) { /* each cross-entropy's upstream gradient is dloss / 2 */
        vt_k_fill(m, dhalf, 1, 0.0f);
        vt_k_add_scaled(m, dhalf, &m->sc.dloss, 1, 0.5f);
        vt_k_cross_entropy_backward(m, dlogits, m->last.cls_logp, in->labels, dhalf, B, C,
                                    in->label_smoothing);
        vt_k_cross_entropy_backward(m, dlogits2, m->last.cls_logp2, in->labels, dhalf, B, C, 0.0f);
    } else
        vt_k_cross_entropy_backward(m, dlogits, m->last.cls_logp, in->labels, &m->sc.dloss, B, C,
                                    in->label_smoothing);
    vt_status rc = vt_head_backward(m, &m->last.head, dlogits, dlogits2, dfeat, pg);
    if (!rc) rc = vt_encoder_backward(m, dfeat, NULL, NULL, dimages, pg);
    vt_arena_reset(ar, mark);
    return rc;
}

/* the labels of a training step come from the caller (vt_train_step_labels): a plan only needs
 * to know they are given */
static vt_status cls_step_inputs(const vt_model *m, const vt_step_draw *draw, int batch, float mask_ratio,
                                 vt_inputs *in) {
    static const int32_t label = 0;
    memset(in, 0, sizeof *in);
    in->batch = batch;
    in->labels = &label;
    return VT_OK;
}

static vt_status cls_build(vt_model *m) { return vt_encoder_build(m, "", 1); }

const vt_objective vt_objective_classifier = { "classifier",      1,        cls_build,   cls_check,
                                               vt_encoder_chains, cls_plan, cls_forward, cls_backward,
                                               cls_step_inputs };
