/* objective.c: which objective runs what (objective.h). */
#include "objective.h"

const vt_objective *vt_objective_of(const vt_model_config *c) {
    switch (c->kind) {
        case VT_KIND_MAE: return &vt_objective_mae;
        case VT_KIND_AIM: return &vt_objective_aim;
        case VT_KIND_TIMM: return c->enc.num_classes > 0 ? &vt_objective_classifier : &vt_objective_encoder;
        default: return &vt_objective_encoder; /* lightly, causal: their encoder calls only */
    }
}

const vt_objective *vt_call_objective(const vt_model *m, vt_fn fn) {
    switch (fn) {
        case VT_FN_LOSS: return m->obj;
        case VT_FN_ENCODE:
        case VT_FN_FORWARD:
        case VT_FN_INTERMEDIATES:
        case VT_FN_INTERMEDIATES_NORM:
        case VT_FN_TIMM_FORWARD:
        case VT_FN_TIMM_INTERMEDIATES: return &vt_objective_encoder;
        default: return NULL;
    }
}

vt_status vt_check_call(const vt_model *m, vt_fn fn, const vt_inputs *in, int values) {
    const vt_objective *o = vt_call_objective(m, fn);
    if (!o) return vt_fail(VT_ERR_ARG, "unknown call %d", (int)fn);
    return o->check(m, fn, in, values);
}
