/* objective.h: the one interface of what a model computes -- a self-supervised or supervised
 * objective (MAE, AIM: objectives.c; the classifier: classify.c), or the encoder calls every model
 * has (encode, forward, forward_intermediates, timm's forward: vit.c). The public calls (api.c),
 * the planner (policy.c, step_plan.c) and the trainer go through it; a new objective is a new
 * table, not a new branch in each of them. */
#ifndef VT_OBJECTIVE_H
#define VT_OBJECTIVE_H
#include "model.h"

/* Where a training step draws its masks (the trainer's buffers, [batch x sequence] each). */
typedef struct {
    vt_rng *rng;
    int64_t *keep, *masked;
    uint8_t *prefix;
} vt_step_draw;

struct vt_objective {
    const char *name;
    int labels; /* its training step takes labels (vt_train_step_labels), not masks */
    /* the model's parameters, in the PyTorch state_dict's order (vt_model_create) */
    vt_status (*build)(vt_model *m);
    /* the call's inputs; values: the index / label values too (a plan checks only the sizes) */
    vt_status (*check)(const vt_model *m, vt_fn fn, const vt_inputs *in, int values);
    /* the chains of blocks the call runs (NULL: none) and their tokens */
    void (*chains)(const vt_model *m, vt_fn fn, const vt_inputs *in, const vt_chain *c[VT_CHAINS],
                   int T[VT_CHAINS]);
    /* floats of the activation arena the call takes under these layouts (its step table's peak) */
    uint64_t (*plan)(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                     const vt_chain_layout *lays);
    vt_status (*forward)(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                         const vt_chain_layout *lays);
    /* the backward of the last forward; a loss reads d loss from m->sc.dloss */
    vt_status (*backward)(vt_model *m, const float *const *douts, int n_douts, float *dimages, int pg);
    /* a training step's inputs besides images and labels: drawn into `draw` (its generator
     * advances), or only their sizes when draw is NULL (pointers then stand for "given") */
    vt_status (*step_inputs)(const vt_model *m, const vt_step_draw *draw, int batch, float mask_ratio,
                             vt_inputs *in);
};

extern const vt_objective vt_objective_encoder, vt_objective_mae, vt_objective_aim, vt_objective_classifier;
/* A model's own objective (its parameters and its VT_FN_LOSS): by kind, and num_classes for timm. */
const vt_objective *vt_objective_of(const vt_model_config *c);
/* The objective that runs call fn of m (NULL for an unknown call). */
const vt_objective *vt_call_objective(const vt_model *m, vt_fn fn);
/* A call's inputs checked by its objective. */
vt_status vt_check_call(const vt_model *m, vt_fn fn, const vt_inputs *in, int values);
#endif
