/* vit_internal.h: functions shared by vit.c (encoder), objectives.c (MAE, AIM), plan.c (checks,
 * layouts, plans), api.c and trainer.c. Not public. */
#ifndef VT_VIT_INTERNAL_H
#define VT_VIT_INTERNAL_H
#include "model.h"

static inline int vt_fn_is_inter(vt_fn fn) {
    return fn == VT_FN_INTERMEDIATES || fn == VT_FN_INTERMEDIATES_NORM;
}
/* the AIM backbone is a masked-causal ViT; an MAE/AIM model's encoder calls run its backbone */
static inline int vt_causal_kind(const vt_model *m) {
    return m->cfg.kind == VT_KIND_CAUSAL || m->cfg.kind == VT_KIND_AIM;
}
int vt_row_has(const int64_t *row, int n, int64_t v);

/* vit.c: the encoder */
vt_status vt_encoder_build(vt_model *m, const char *pfx, int pos_trainable);
vt_status vt_encoder_preprocess(vt_model *m, const vt_inputs *in, int causal, float *x0);
vt_status vt_encoder_blocks(vt_model *m, const vt_inputs *in, int need_grad,
                            const vt_chain_layout *lay, int T, float *x0, int causal, int keep_all,
                            float **feat);
vt_status vt_encoder_backward(vt_model *m, const float *dfeat, vt_inject_fn inject, void *ctx,
                              float *dimages, int pg);
vt_status vt_encoder_backward_pre(vt_model *m, const vt_inputs *in, int causal, const float *dx0,
                                  float *dimages, int pg);
/* The encoder's rows of a call's step table (model.h): x0 (the caller allocates it), the
 * preprocessing, the blocks, the final norm; and vt_encoder_backward's. T: tokens after idx_keep. */
enum { VT_ENC_X0, VT_ENC_PRE, VT_ENC_KEPT, VT_ENC_FWD, VT_ENC_NORM, VT_ENC_NORM_STATS, VT_ENC_FWD_ROWS };
enum { VT_ENC_DRES, VT_ENC_BWD, VT_ENC_PRE_BWD, VT_ENC_BWD_ROWS };
void vt_encoder_steps(const vt_model *m, const vt_inputs *in, int T, int need_grad, int keep_all,
                      const vt_chain_layout *lay, vt_step fwd[VT_ENC_FWD_ROWS],
                      vt_step bwd[VT_ENC_BWD_ROWS]);
/* timm forward_head (reference-models.md 1.4) on features x [B,T,D] (the encoder's output,
 * after its final norm, which is Identity when fc_norm is used):
 *   pool: 'token' x[:,0]; 'avg' / 'max' / 'avgmax' (= (max + avg) / 2) over tokens P..T-1;
 *         '' none (then every token goes through the head: rows = B*T)
 *   fc_norm: LayerNorm (eps 1e-6) for avg / max / avgmax (timm's fc_norm=None), else Identity
 *   head: Linear(D, num_classes) when num_classes > 0, else Identity
 * Its arena rows (fwd: KEEP, allocated by vt_head_forward in this order; bwd: one PEAK scratch of
 * vt_head_backward). dx [B,T,D] is accumulated (+=); parameter gradients too when pg. A classifier
 * objective runs: features -> vt_head_forward -> loss; d loss -> vt_head_backward -> dfeat ->
 * vt_encoder_backward. */
enum { VT_HEAD_POOL, VT_HEAD_NORM, VT_HEAD_NORM_STATS, VT_HEAD_OUT, VT_HEAD_FWD_ROWS };
enum { VT_HEAD_SCRATCH, VT_HEAD_BWD_ROWS };
void vt_head_steps(const vt_model *m, int B, int T, int need_grad, vt_step fwd[VT_HEAD_FWD_ROWS],
                   vt_step bwd[VT_HEAD_BWD_ROWS]);
vt_status vt_head_forward(vt_model *m, vt_head_run *h, const float *x, int B, int T);
vt_status vt_head_backward(vt_model *m, const vt_head_run *h, const float *dy, float *dx, int pg);
/* the encoder calls (encode, forward, forward_intermediates) and their plan in floats */
vt_status vt_encoder_call_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                                  const vt_chain_layout *lay);
vt_status vt_encoder_call_backward(vt_model *m, const float *const *douts, int n_douts,
                                   float *dimages, int pg);
uint64_t vt_encoder_call_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                              const vt_chain_layout *lay);

/* plan.c: policies, checks and plans of a call */
vt_status vt_policy_parse(const char *text, vt_policy *p);
vt_status vt_check_call(const vt_model *m, vt_fn fn, const vt_inputs *in, int check_values);
vt_status vt_resolve_layouts(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                             vt_chain_layout lays[VT_CHAINS]);
uint64_t vt_plan_floats(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                        const vt_chain_layout *lays);

/* objectives.c: MAE / AIM */
vt_status vt_objectives_build(vt_model *m);
vt_status vt_loss_forward(vt_model *m, const vt_inputs *in, int need_grad, vt_chain_layout *lays);
vt_status vt_loss_backward(vt_model *m, float *dimages, int pg); /* d loss: m->sc.dloss */
uint64_t vt_loss_plan(const vt_model *m, const vt_inputs *in, int need_grad,
                      const vt_chain_layout *lays);

/* classify.c: the classifier loss (timm VisionTransformer with num_classes, cross-entropy with
 * label smoothing) on the encoder and forward_head of vit.c */
int vt_is_classifier(const vt_model *m);
vt_status vt_classify_check(const vt_model *m, const vt_inputs *in, int values);
vt_status vt_classify_forward(vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lays);
vt_status vt_classify_backward(vt_model *m, float *dimages, int pg);
uint64_t vt_classify_plan(const vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lays);

/* trainer.c: the mask ratio a training step draws with (the trainer's, else the default) */
float vt_trainer_mask_ratio(const vt_model *m);
#endif
