/* step_plan.c: the plan of one training step against a budget -- does vt_train_step fit, and if
 * not, which policy or batch would (vt_plan_train_step): the planner above the trainer, asking the
 * objective for the step's inputs (the sizes vt_train_step draws) and the trainer for its mask
 * ratio. */
#include "objective.h"
#include "vit_internal.h"
#include <stdio.h>
#include <string.h>

/* ---- a training step against a budget --------------------------------------------------------------- */

/* Among the named policies and the budget search at `avail` bytes: the least re-computation
 * whose plan fits (ties go to the named policy tried first). 0 when none fits. */
static int cheapest_fit(const vt_model *m, const vt_inputs *in, uint64_t avail, vt_policy *best,
                        vt_chain_layout best_lays[VT_CHAINS], double *best_flops) {
    vt_chain_layout tl[VT_CHAINS];
    vt_policy p;
    int found = 0;
    uint64_t avail_floats = avail / sizeof(float);
    for (int i = -1;; i++) { /* -1: none */
        if (i < 0)
            vt_policy_parse("none", &p);
        else if (!vt_policy_named(m, VT_FN_LOSS, in, i, &p))
            break;
        vt_layouts_for_policy(m, &p, VT_FN_LOSS, in, tl);
        if (vt_plan_floats(m, VT_FN_LOSS, in, 1, tl) > avail_floats) continue;
        double f = vt_layouts_flops(m, VT_FN_LOSS, in, tl);
        if (!found || f < *best_flops) {
            found = 1;
            *best = p;
            *best_flops = f;
            memcpy(best_lays, tl, sizeof tl);
        }
    }
    vt_layouts_clear(m, tl);
    if (vt_budget_search(m, VT_FN_LOSS, in, 1, avail_floats, tl)) {
        double f = vt_layouts_flops(m, VT_FN_LOSS, in, tl);
        if (!found || f < *best_flops) {
            char t[VT_POLICY_TEXT_MAX];
            snprintf(t, sizeof t, "budget:%llu", (unsigned long long)avail);
            vt_policy_parse(t, &p);
            found = 1;
            *best = p;
            *best_flops = f;
            memcpy(best_lays, tl, sizeof tl);
        }
    }
    return found;
}

/* whether some policy fits a step of `batch` images into avail bytes of activations */
static int batch_fits(const vt_model *m, int batch, float mask_ratio, uint64_t avail) {
    vt_inputs in;
    if (m->obj->step_inputs(m, NULL, batch, mask_ratio, &in)) return 0;
    vt_chain_layout lays[VT_CHAINS];
    char name[VT_POLICY_TEXT_MAX];
    if (vt_least_plan(m, VT_FN_LOSS, &in, 1, lays, name) <= avail / sizeof(float)) return 1;
    vt_layouts_clear(m, lays);
    return vt_budget_search(m, VT_FN_LOSS, &in, 1, avail / sizeof(float), lays);
}

vt_status vt_plan_train_step(const vt_model *m, int batch, float mask_ratio, const char *policy,
                             uint64_t budget, vt_step_plan *out) {
    if (!m || !out) return vt_fail(VT_ERR_ARG, "vt_plan_train_step: NULL argument");
    memset(out, 0, sizeof *out);
    if (!m->obj->step_inputs)
        return vt_fail(VT_ERR_ARG,
                       "training needs an MAE or AIM model, or a timm classifier (num_classes > 0)");
    if (batch < 1) return vt_fail(VT_ERR_ARG, "batch must be >= 1, got %d", batch);
    if (mask_ratio < 0) mask_ratio = vt_trainer_mask_ratio(m);
    vt_policy pol = m->policy;
    vt_status rc = policy ? vt_policy_parse(policy, &pol) : VT_OK;
    if (rc) return rc;
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.batch = batch;
    rc = m->obj->step_inputs(m, NULL, batch, mask_ratio, &in);
    if (!rc) rc = vt_check_call(m, VT_FN_LOSS, &in, 0);
    if (rc) return rc;
    out->tokens_kept = in.idx_keep ? in.n_keep : m->enc.T_full;
    out->tokens_masked = in.idx_mask ? in.n_mask : 0;

    vt_chain_layout lays[VT_CHAINS];
    out->policy_met = vt_resolve(m, &pol, VT_FN_LOSS, &in, 1, lays);
    vt_plan_bytes_of(m, 1, vt_plan_floats(m, VT_FN_LOSS, &in, 1, lays), &out->bytes);
    out->recompute_flops = vt_layouts_flops(m, VT_FN_LOSS, &in, lays);
    if (!budget) return VT_OK;

    out->fits = out->policy_met && out->bytes.total <= budget;
    uint64_t fixed = out->bytes.params + out->bytes.grads + out->bytes.optimizer;
    uint64_t least = vt_least_plan(m, VT_FN_LOSS, &in, 1, lays, out->least_policy);
    vt_plan_bytes_of(m, 1, least, &out->least_bytes);
    if (budget <= fixed) return VT_OK; /* parameters and optimizer state alone do not fit */
    uint64_t avail = budget - fixed;
    vt_policy best;
    if (cheapest_fit(m, &in, avail, &best, lays, &out->fit_recompute_flops)) {
        snprintf(out->fit_policy, sizeof out->fit_policy, "%s", best.text);
        vt_plan_bytes_of(m, 1, vt_plan_floats(m, VT_FN_LOSS, &in, 1, lays), &out->fit_bytes);
        out->max_batch = batch;
        return VT_OK;
    }
    /* the largest batch below that fits under some policy (plans grow with the batch) */
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (batch_fits(m, mid, mask_ratio, avail))
            lo = mid;
        else
            hi = mid - 1;
    }
    out->max_batch = lo;
    return VT_OK;
}
