/* vit_internal.h: functions shared by vit.c (encoder), objectives.c (MAE, AIM), classify.c,
 * policy.c (layouts, plans), step_plan.c, api.c and trainer.c. Not public. */
#ifndef VT_VIT_INTERNAL_H
#define VT_VIT_INTERNAL_H
#include "model.h"
#include "check.h"

/* lightly's forward_intermediates (every block's output, the whole sequence) */
static inline int vt_fn_is_inter(vt_fn fn) {
    return fn == VT_FN_INTERMEDIATES || fn == VT_FN_INTERMEDIATES_NORM;
}
/* the AIM backbone is a masked-causal ViT; an MAE/AIM model's encoder calls run its backbone */
static inline int vt_causal_kind(const vt_model *m) {
    return m->cfg.kind == VT_KIND_CAUSAL || m->cfg.kind == VT_KIND_AIM;
}

/* vit.c: the encoder */
vt_status vt_encoder_build(vt_model *m, const char *pfx, int pos_trainable);
/* the grid of a call's images (vt_inputs height / width, else the config's) */
void vt_call_geom(const vt_model *m, const vt_inputs *in, vt_geom *g);
/* x0 [B,T,D] (allocated by the caller) = the chain input; with pre_norm and need_grad, norm_pre's
 * input and statistics are kept (rows VT_ENC_PRE_IN / _STATS, allocated here) */
vt_status vt_encoder_preprocess(vt_model *m, const vt_inputs *in, int causal, int need_grad, float *x0);
/* the blocks of chain c (the encoder's, or its first blocks: vt_encoder.upto) from x0, keeping
 * the outputs of the blocks in keep, then the final norm into *feat (feat NULL: not applied) */
vt_status vt_encoder_blocks(vt_model *m, const vt_inputs *in, int need_grad, const vt_chain *c,
                            const vt_chain_layout *lay, int T, float *x0, int causal, uint64_t keep,
                            float **feat);
vt_status vt_encoder_backward(vt_model *m, const float *dfeat, vt_inject_fn inject, void *ctx, float *dimages,
                              int pg);
vt_status vt_encoder_backward_pre(vt_model *m, const vt_inputs *in, int causal, const float *dx0,
                                  float *dimages, int pg);
/* The encoder's rows of a call's step table (model.h): x0 (the caller allocates it), the
 * preprocessing, the blocks, the final norm; and vt_encoder_backward's. T: tokens after idx_keep. */
enum {
    VT_ENC_X0,
    VT_ENC_PRE_IN,
    VT_ENC_PRE_STATS,
    VT_ENC_PRE,
    VT_ENC_KEPT,
    VT_ENC_FWD,
    VT_ENC_NORM,
    VT_ENC_NORM_STATS,
    VT_ENC_FWD_ROWS
};
enum { VT_ENC_DRES, VT_ENC_BWD, VT_ENC_PRE_BWD, VT_ENC_BWD_ROWS };
void vt_encoder_steps(const vt_model *m, const vt_inputs *in, int T, int need_grad, const vt_chain *c,
                      uint64_t keep, const vt_chain_layout *lay, vt_step fwd[VT_ENC_FWD_ROWS],
                      vt_step bwd[VT_ENC_BWD_ROWS]);
/* timm forward_head (reference-models.md 1.4) on features x [B,T,D] (the encoder's output,
 * after its final norm, which is Identity when fc_norm is used):
 *   pool: 'token' x[:,0]; 'avg' / 'max' / 'avgmax' (= (max + avg) / 2) over tokens P..T-1 (0..T-1
 *         with pool_include_prefix); '' none (then every token goes through the head: rows = B*T);
 *         'map' AttentionPoolLatent over x[:, P:] (every token with pool_include_prefix): a latent
 *         query's attention, proj, + Mlp(norm(.)); 'prr' AttentionPoolPrr: self-attention with
 *         q = k = v = x over every token, then token 0 (class token) or the mean
 *   fc_norm: the norm layer after pooling when the config has it (vt_encoder.use_fc_norm)
 *   head: Linear(D, num_classes) when num_classes > 0, else Identity
 *   distilled (DeiT): head(x[:,0]) and head_dist(x[:,1]), averaged; two = distilled_training:
 *         both returned (out, out2)
 * lightly = 1: lightly's forward, which pools with attn_pool over every token and applies no
 * fc_norm or head (its 'map' / 'prr'; vit.c pools the others itself). Its arena rows (fwd: KEEP,
 * allocated by vt_head_forward in this order; bwd: one PEAK scratch of vt_head_backward). dx
 * [B,T,D] is accumulated (+=); parameter gradients too when pg. A classifier objective runs:
 * features -> vt_head_forward -> loss; d loss -> vt_head_backward -> dfeat -> vt_encoder_backward. */
enum {
    VT_HEAD_MAP_IN,
    VT_HEAD_MAP_Q,
    VT_HEAD_MAP_KV,
    VT_HEAD_MAP_ATT,
    VT_HEAD_MAP_AO,
    VT_HEAD_MAP_Y,
    VT_HEAD_MAP_YN,
    VT_HEAD_MAP_YN_STATS,
    VT_HEAD_MAP_H,
    VT_HEAD_MAP_HG,
    VT_HEAD_MAP_F,
    VT_HEAD_PRR_ATT,
    VT_HEAD_PRR_OUT,
    VT_HEAD_PRR_SCR,
    VT_HEAD_POOL,
    VT_HEAD_POOL2,
    VT_HEAD_NORM,
    VT_HEAD_NORM_STATS,
    VT_HEAD_LOGITS,
    VT_HEAD_OUT,
    VT_HEAD_FWD_ROWS
};
enum { VT_HEAD_SCRATCH, VT_HEAD_BWD_ROWS };
void vt_head_steps(const vt_model *m, int B, int T, int threads, int lightly, int two, int need_grad,
                   vt_step fwd[VT_HEAD_FWD_ROWS], vt_step bwd[VT_HEAD_BWD_ROWS]);
vt_status vt_head_forward(vt_model *m, vt_head_run *h, const float *x, int B, int T, int threads, int lightly,
                          int two);
/* dy: d out; dy2: d out2 (two outputs; NULL = zero) */
vt_status vt_head_backward(vt_model *m, const vt_head_run *h, const float *dy, const float *dy2, float *dx,
                           int pg);
/* whether lightly's forward of this config pools through the attention pool (map, prr) */
int vt_lightly_attn_pool(const vt_model *m);
/* the encoder calls (encode, forward, forward_intermediates) and their plan in floats */
vt_status vt_encoder_call_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                                  const vt_chain_layout *lay);
vt_status vt_encoder_call_backward(vt_model *m, const float *const *douts, int n_douts, float *dimages,
                                   int pg);
uint64_t vt_encoder_call_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                              const vt_chain_layout *lay);

/* the encoder's chain of a call (the encoder calls' chains; the first of the losses') */
void vt_encoder_chains(const vt_model *m, vt_fn fn, const vt_inputs *in, const vt_chain *c[VT_CHAINS],
                       int T[VT_CHAINS]);

/* policy.c: policies and the layouts they give, the plan of a call, the budget search */
vt_status vt_policy_parse(const char *text, vt_policy *p);
vt_status vt_resolve_layouts(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                             vt_chain_layout lays[VT_CHAINS]);
uint64_t vt_plan_floats(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                        const vt_chain_layout *lays);
void vt_layouts_clear(const vt_model *m, vt_chain_layout lays[VT_CHAINS]);
void vt_layouts_for_policy(const vt_model *m, const vt_policy *p, vt_fn fn, const vt_inputs *in,
                           vt_chain_layout lays[VT_CHAINS]);
double vt_layouts_flops(const vt_model *m, vt_fn fn, const vt_inputs *in, const vt_chain_layout *lays);
/* budget: the fitting layouts with the least re-computation (1), or none (0) */
int vt_budget_search(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad, uint64_t budget_floats,
                     vt_chain_layout lays[VT_CHAINS]);
/* the named policies in the order they are tried (block, selective, sqrt, every:2..); 0 past the end */
int vt_policy_named(const vt_model *m, vt_fn fn, const vt_inputs *in, int i, vt_policy *p);
/* the smallest activation plan a named policy reaches, its layouts and its name */
uint64_t vt_least_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                       vt_chain_layout lays[VT_CHAINS], char name[VT_POLICY_TEXT_MAX]);
/* layouts under policy p; budget: 0 when none fits (lays then the smallest plan's) */
int vt_resolve(const vt_model *m, const vt_policy *p, vt_fn fn, const vt_inputs *in, int need_grad,
               vt_chain_layout lays[VT_CHAINS]);
void vt_plan_bytes_of(const vt_model *m, int need_grad, uint64_t act_floats, vt_plan_bytes *out);

/* trainer.c: the mask ratio a training step draws with (the trainer's, else the default) */
float vt_trainer_mask_ratio(const vt_model *m);
#endif
