/* api.c: the public calls. Creates models (their objective's parameter table, objective.h);
 * vt_forward checks the inputs, resolves the layouts and sizes the arena from the plan (policy.c)
 * before anything runs, then runs the call's objective (the encoder calls: vit.c; MAE / AIM:
 * objectives.c; the classifier: classify.c); vt_backward runs its backward. */
#include "vit_internal.h"
#include "exec.h"
#include "objective.h"
#include "record.h"
#include "optim.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- create / free ------------------------------------------------------------------------------ */

vt_status vt_model_create(const vt_model_config *cfg, vt_model **out) {
    if (!cfg || !out) return vt_fail(VT_ERR_ARG, "vt_model_create: NULL argument");
    *out = NULL;
    int rc = vt_config_validate(cfg);
    if (rc) return rc;
    vt_model *m = calloc(1, sizeof *m);
    if (!m) return vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes for the model", sizeof *m);
    m->cfg = *cfg;
    /* every index of an optional parameter starts absent (-1); the objective's build adds its own */
    m->enc.mask_token = -1;
    m->de_w = m->de_b = m->d_mask_token = m->d_pos = m->dn_w = m->dn_b = m->pred_w = m->pred_b = -1;
    m->h_in_w = m->hn_w = m->hn_b = m->h_out_w = -1;
    vt_policy_parse("none", &m->policy);
    m->obj = vt_objective_of(cfg);
    rc = m->obj->build(m);
    if (!rc) rc = vt_ptable_alloc(&m->pt);
    if (rc) {
        vt_model_free(m);
        return rc;
    }
    *out = m;
    return VT_OK;
}

void vt_model_free(vt_model *m) {
    if (!m) return;
    vt_ptable_free(&m->pt);
    vt_chain_free(&m->enc.chain);
    vt_chain_free(&m->dec);
    vt_chain_free(&m->head);
    vt_arena_free(&m->arena);
    vt_optimizer_free(m);
    free(m->train.keep);
    free(m->train.masked);
    free(m->train.prefix);
    free(m);
}

const vt_model_config *vt_model_get_config(const vt_model *m) { return &m->cfg; }


void vt_free(void *p) { free(p); }

/* recording: the buffers a call's kernels may address (record.h) */
static void record_inputs(vt_model *m, const vt_inputs *in, uint64_t arena_bytes) {
    vt_recorder *r = m->arena.rec;
    const vt_vit_config *c = &m->cfg.enc;
    vt_geom g;
    vt_call_geom(m, in, &g);
    uint64_t B = (uint64_t)in->batch, L = (uint64_t)g.L;
    vt_rec_region(r, VT_REG_ARENA, m->arena.base, arena_bytes, 0);
    vt_rec_region(r, VT_REG_IMAGES, in->images, B * c->in_chans * (uint64_t)g.H * g.W * sizeof(float), 0);
    vt_rec_region(r, VT_REG_IDX_KEEP, in->idx_keep, B * (uint64_t)in->n_keep * sizeof(int64_t), 0);
    vt_rec_region(r, VT_REG_IDX_MASK, in->idx_mask, B * (uint64_t)in->n_mask * sizeof(int64_t), 0);
    vt_rec_region(r, VT_REG_MASK, in->mask, B * L, 0);
    vt_rec_region(r, VT_REG_LABELS, in->labels, B * sizeof(int32_t), 0);
    r->t->arena_planned = arena_bytes;
}

vt_status vt_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad) {
    if (!m) return vt_fail(VT_ERR_ARG, "vt_forward: model is NULL");
    m->last.have_fwd = 0;
    int rc = vt_check_call(m, fn, in, 1);
    if (rc) return rc;
    vt_chain_layout lays[VT_CHAINS];
    rc = vt_resolve_layouts(m, fn, in, need_grad, lays);
    if (rc) return rc;
    uint64_t plan = vt_plan_floats(m, fn, in, need_grad, lays);
    if (plan > (uint64_t)((SIZE_MAX - VT_ARENA_SPARE_BYTES) / sizeof(float)))
        return vt_fail(VT_ERR_NOMEM,
                       "out of memory: the activation arena needs %.3g GB, more than this "
                       "platform can address",
                       (double)plan * sizeof(float) / 1e9);
    rc = vt_arena_reserve(&m->arena, (size_t)plan);
    if (rc) return rc;
    vt_exec_mark(m, VT_PHASE_FORWARD, -1, -1);
    vt_arena_begin(&m->arena);
    if (vt_exec_recording(m)) record_inputs(m, in, (uint64_t)plan * sizeof(float));
    m->last.planned_floats = (size_t)plan;
    m->last.fn = fn;
    m->last.in = *in;
    m->last.need_grad = need_grad;
    memset(m->last.inter, 0, sizeof m->last.inter);
    m->last.fin_ln = m->last.fin_m = m->last.fin_r = NULL;
    m->last.out2 = NULL;
    m->last.n_outs = 0;
    rc = vt_call_objective(m, fn)->forward(m, fn, in, need_grad, lays);
    if (rc) return rc;
    m->last.have_fwd = 1;
    return VT_OK;
}

int vt_output_count(const vt_model *m) {
    if (!m->last.have_fwd) return 0;
    if (m->last.fn == VT_FN_TIMM_INTERMEDIATES) return m->last.n_outs;
    return vt_fn_is_inter(m->last.fn) ? 1 + m->enc.chain.depth : m->last.out2 ? 2 : 1;
}

const float *vt_output(const vt_model *m, int i, int64_t shape[4], int *ndim) {
    if (!m->last.have_fwd || i < 0 || i >= vt_output_count(m)) {
        vt_fail(VT_ERR_ARG, "no output %d (call vt_forward first)", i);
        return NULL;
    }
    if (m->last.fn == VT_FN_TIMM_INTERMEDIATES) {
        if (shape) memcpy(shape, m->last.outs_shape[i], sizeof m->last.outs_shape[i]);
        if (ndim) *ndim = m->last.outs_ndim[i];
        return m->last.outs[i];
    }
    if (i == 0) {
        if (shape) memcpy(shape, m->last.out_shape, sizeof m->last.out_shape);
        if (ndim) *ndim = m->last.out_ndim;
        return m->last.out;
    }
    if (m->last.out2) { /* head_dist's logits, shaped as out */
        if (shape) memcpy(shape, m->last.out_shape, sizeof m->last.out_shape);
        if (ndim) *ndim = m->last.out_ndim;
        return m->last.out2;
    }
    if (shape) {
        shape[0] = m->last.enc_run.B;
        shape[1] = m->last.enc_run.T;
        shape[2] = m->enc.chain.D;
        shape[3] = 0;
    }
    if (ndim) *ndim = 3;
    return m->last.inter[i - 1];
}

float vt_loss_value(const vt_model *m) { return m->sc.loss; }

vt_status vt_backward(vt_model *m, const float *const *douts, int n_douts, float *dimages, int param_grads) {
    if (!m) return vt_fail(VT_ERR_ARG, "vt_backward: model is NULL");
    if (!m->last.have_fwd || !m->last.need_grad)
        return vt_fail(VT_ERR_STATE, "vt_backward needs a vt_forward with need_grad=1 first");
    if (n_douts < 0 || n_douts > vt_output_count(m))
        return vt_fail(VT_ERR_ARG, "%d upstream gradients given, the call has %d outputs", n_douts,
                       vt_output_count(m));
    if (!douts) n_douts = 0; /* no list: every upstream gradient zero, as a NULL entry is (fuzz_api) */
    int rc;
    m->arena.tl_backward = m->arena.tl_n;
    vt_arena_event(&m->arena);
    vt_exec_mark(m, VT_PHASE_BACKWARD, -1, -1);
    if (vt_exec_recording(m)) { /* the upstream gradients, one output after the other (a loss's is
                                 * the scalars region's dloss); d images */
        const vt_vit_config *c = &m->cfg.enc;
        uint64_t voff = 0;
        for (int i = 0; i < n_douts && m->last.fn != VT_FN_LOSS; i++) {
            int64_t shape[4];
            int nd = 0;
            vt_output(m, i, shape, &nd);
            uint64_t n = 1;
            for (int d = 0; d < nd; d++) n *= (uint64_t)shape[d];
            if (douts && douts[i])
                vt_rec_region(m->arena.rec, VT_REG_DOUTS, douts[i], n * sizeof(float), voff);
            voff += n * sizeof(float);
        }
        vt_geom g;
        vt_call_geom(m, &m->last.in, &g);
        vt_rec_region(m->arena.rec, VT_REG_DIMAGES, dimages,
                      (uint64_t)m->last.in.batch * c->in_chans * (uint64_t)g.H * g.W * sizeof(float), 0);
    }
    /* a loss's upstream gradient is the scalars region's input (1 unless given) */
    if (m->last.fn == VT_FN_LOSS) m->sc.dloss = (douts && n_douts > 0 && douts[0]) ? douts[0][0] : 1.0f;
    rc = vt_call_objective(m, m->last.fn)->backward(m, douts, n_douts, dimages, param_grads);
    if (!rc && m->arena.overflow) rc = vt_arena_overflow(&m->arena);
    return rc;
}

void *vt_model_region(vt_model *m, vt_region r, uint64_t *bytes) {
    void *base = NULL;
    uint64_t n = 0;
    switch (r) {
        case VT_REG_PARAMS: base = m->pt.data, n = (uint64_t)m->pt.total * sizeof(float); break;
        case VT_REG_GRADS: base = m->pt.grad, n = (uint64_t)m->pt.gtotal * sizeof(float); break;
        case VT_REG_ADAM_M: base = m->opt.m, n = (uint64_t)m->opt.n * sizeof(float); break;
        case VT_REG_ADAM_V: base = m->opt.v, n = (uint64_t)m->opt.n * sizeof(float); break;
        case VT_REG_ARENA: base = m->arena.base, n = (uint64_t)m->arena.cap * sizeof(float); break;
        case VT_REG_SCALARS: base = &m->sc, n = sizeof m->sc; break;
        default: break;
    }
    if (bytes) *bytes = base ? n : 0;
    return base;
}

void vt_arena_get_stats(const vt_model *m, vt_arena_stats *out) {
    out->planned = m->last.planned_floats * sizeof(float);
    out->peak = m->arena.peak * sizeof(float);
    out->capacity = m->arena.cap * sizeof(float);
}

void vt_release_activations(vt_model *m) {
    vt_arena_free(&m->arena);
    m->last.have_fwd = 0;
}

int vt_activation_timeline(const vt_model *m, size_t *bytes, size_t *live, int max, int *backward_start) {
    int n = m->arena.tl_n < max ? m->arena.tl_n : max;
    for (int i = 0; i < n && bytes; i++) bytes[i] = m->arena.tl[i] * sizeof(float);
    for (int i = 0; i < n && live; i++) live[i] = m->arena.tl_live[i] * sizeof(float);
    if (backward_start) *backward_start = m->arena.tl_backward;
    return n;
}
