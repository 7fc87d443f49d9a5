/* vit_internal.h: functions shared by vit.c (encoder), objectives.c (MAE, AIM), checkpoint.c
 * and api.c. Not public. */
#ifndef VT_VIT_INTERNAL_H
#define VT_VIT_INTERNAL_H
#include "model.h"

static inline int m_mask_token(const vt_model *m) { return m->enc.mask_token; }
static inline int e_has_mask_token(const vt_model *m) { return m->enc.mask_token >= 0; }

int vt_encoder_build(vt_model *m, const char *pfx, int pos_trainable);
int vt_check_encoder_inputs(const vt_model *m, const vt_inputs *in, int causal, int check_values);
int vt_encoder_preprocess(vt_model *m, const vt_inputs *in, int causal, float *x0);
int vt_encoder_blocks(vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lay,
                      int T, float *x0, int causal, int keep_all, float **feat);
int vt_encoder_backward_pre(vt_model *m, const vt_inputs *in, int causal, const float *dx0,
                            float *dimages, int pg);
void vt_encoder_plan_pre(const vt_model *m, const vt_inputs *in, uint64_t *fwd, uint64_t *bwd);
int row_has(const int64_t *row, int n, int v);

/* checkpoint.c */
int vt_policy_parse(const char *text, vt_policy *p);
void vt_layout_every(const vt_chain *c, int K, vt_chain_layout *l);
void vt_layout_mix(const vt_chain *c, int n_ckpt, int n_sel, vt_chain_layout *l);
void vt_layout_for_policy(const vt_policy *p, const vt_chain *c, int force_all_inputs,
                          vt_chain_layout *l);
double vt_block_flops(const vt_chain *c, int B, int T, int selective_only);

/* objectives.c: MAE / AIM */
int vt_objectives_build(vt_model *m);
int vt_loss_forward(vt_model *m, const vt_inputs *in, int need_grad, vt_chain_layout *lays);
int vt_loss_backward(vt_model *m, float dloss, float *dimages, int pg);
int vt_loss_plan(const vt_model *m, const vt_inputs *in, int need_grad, const vt_chain_layout *lays,
                 uint64_t *floats);
int vt_loss_check_inputs(const vt_model *m, const vt_inputs *in, int check_values);
/* token counts of the chains for a call: encoder, decoder/head (0 = absent) */
void vt_chain_tokens(const vt_model *m, vt_fn fn, const vt_inputs *in, int T[3]);
#endif
