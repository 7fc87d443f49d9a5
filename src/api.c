/* api.c: the public calls. Creates models (parameter table per kind), runs forward and backward
 * of the encoder calls (encode, forward, forward_intermediates; losses are in objectives.c),
 * resolves the checkpointing policy into per-block layouts (budget search included), plans the
 * activation memory and sizes the arena from the plan before anything runs. */
#include "vit_internal.h"
#include "kernels/kernels.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- create / free ------------------------------------------------------------------------------ */

int vt_model_create(const vt_model_config *cfg, vt_model **out) {
    if (!cfg || !out) return vt_fail(VT_ERR_ARG, "vt_model_create: NULL argument");
    *out = NULL;
    int rc = vt_config_validate(cfg);
    if (rc) return rc;
    vt_model *m = calloc(1, sizeof *m);
    if (!m) return vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes for the model", sizeof *m);
    m->cfg = *cfg;
    m->enc.mask_token = -1;
    vt_policy_parse("none", &m->policy);
    int64_t shp[3] = {1, 1, cfg->enc.embed_dim};
    switch (cfg->kind) {
    case VT_KIND_TIMM: rc = vt_encoder_build(m, "", 1); break;
    case VT_KIND_CAUSAL: rc = vt_encoder_build(m, "", 1); break;
    case VT_KIND_LIGHTLY:
        if (cfg->enc.mask_token) {
            m->enc.mask_token = m->pt.n;
            rc = vt_ptable_add(&m->pt, "mask_token", 3, shp, 1);
        }
        /* lightly's default pos_embed_initialization 'sincos' freezes pos_embed */
        if (!rc) rc = vt_encoder_build(m, "vit.", 0);
        break;
    case VT_KIND_MAE:
    case VT_KIND_AIM: rc = vt_objectives_build(m); break;
    default: rc = vt_fail(VT_ERR_ARG, "unknown model kind %d", (int)cfg->kind);
    }
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
    free(m->keep_buf);
    free(m->maskidx_buf);
    free(m->prefix_buf);
    free(m);
}

const vt_model_config *vt_model_get_config(const vt_model *m) { return &m->cfg; }
void vt_free(void *p) { free(p); }

/* ---- which chains a call runs ------------------------------------------------------------------- */

static int is_encoder_fn(vt_fn fn) {
    return fn == VT_FN_ENCODE || fn == VT_FN_FORWARD || fn == VT_FN_INTERMEDIATES ||
           fn == VT_FN_INTERMEDIATES_NORM;
}
static int is_inter(vt_fn fn) { return fn == VT_FN_INTERMEDIATES || fn == VT_FN_INTERMEDIATES_NORM; }
static int has_pool(const vt_model *m) { return m->cfg.enc.global_pool[0] != 0; }
static int has_norm(const vt_model *m) { return m->enc.norm_w >= 0; }

static int check_fn(const vt_model *m, vt_fn fn) {
    int loss_kind = m->cfg.kind == VT_KIND_MAE || m->cfg.kind == VT_KIND_AIM;
    if (fn == VT_FN_LOSS && !loss_kind)
        return vt_fail(VT_ERR_ARG, "loss needs an MAE or AIM model");
    if (!is_encoder_fn(fn) && fn != VT_FN_LOSS) return vt_fail(VT_ERR_ARG, "unknown call %d", (int)fn);
    return VT_OK;
}

static const vt_chain *chain_k(const vt_model *m, int k) {
    if (k == 0) return &m->enc.chain;
    if (k == 1 && m->cfg.kind == VT_KIND_MAE) return &m->dec;
    if (k == 1 && m->cfg.kind == VT_KIND_AIM) return &m->head;
    return NULL;
}

static uint64_t plan_floats(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                            const vt_chain_layout *lays);

/* Layouts of every chain from the policy; budget: greedy, most memory saved per re-computed
 * flop first, until the plan fits. */
static int resolve_layouts(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                           vt_chain_layout lays[3]) {
    int T[3];
    vt_chain_tokens(m, fn, in, T);
    memset(lays, 0, 3 * sizeof *lays);
    for (int k = 0; k < 3; k++) {
        const vt_chain *c = chain_k(m, k);
        if (!c) continue;
        int keep_all = k == 0 && is_inter(fn);
        vt_layout_for_policy(&m->policy, c, keep_all, &lays[k]);
    }
    if (m->policy.kind != VT_POL_BUDGET || !need_grad) return VT_OK;
    uint64_t budget = m->policy.budget / sizeof(float);
    /* a single move can raise the peak (it adds a re-computation slot), so search the whole
     * (checkpointed, selective) grid of the encoder, other chains in proportion, and keep the
     * fitting layout with the least re-computed flops */
    const vt_chain *c0 = chain_k(m, 0);
    int d0 = c0->depth;
    double best_cost = -1;
    vt_chain_layout best_lay[3], tl[3];
    for (int a = 0; a <= d0; a++)
        for (int s = 0; a + s <= d0; s++) {
            double cost = 0;
            memcpy(tl, lays, sizeof tl);
            for (int k = 0; k < 3; k++) {
                const vt_chain *c = chain_k(m, k);
                if (!c) continue;
                int ak = d0 ? (int)lround((double)a * c->depth / d0) : 0;
                int sk = d0 ? (int)lround((double)s * c->depth / d0) : 0;
                if (ak + sk > c->depth) sk = c->depth - ak;
                vt_layout_mix(c, ak, sk, &tl[k]);
                double full = vt_block_flops(c, in->batch, T[k], 0), selc = vt_block_flops(c, in->batch, T[k], 1);
                cost += ak * full + sk * selc;
            }
            if (best_cost >= 0 && cost >= best_cost) continue;
            if (plan_floats(m, fn, in, need_grad, tl) <= budget) {
                best_cost = cost;
                memcpy(best_lay, tl, sizeof best_lay);
            }
        }
    if (best_cost >= 0) {
        memcpy(lays, best_lay, sizeof best_lay);
        return VT_OK;
    }
    /* nothing fits: report the smallest plan any policy reaches */
    uint64_t best = (uint64_t)-1;
    const char *names[] = {"block", "selective", "sqrt"};
    char bestname[32] = "block";
    for (int K = 0; K <= VT_MAX_DEPTH; K++) {
        vt_chain_layout tl[3];
        memset(tl, 0, sizeof tl);
        int any = 0;
        char nm[32];
        for (int k = 0; k < 3; k++) {
            const vt_chain *c = chain_k(m, k);
            if (!c) continue;
            if (K < 3) {
                vt_policy p;
                vt_policy_parse(names[K], &p);
                vt_layout_for_policy(&p, c, k == 0 && is_inter(fn), &tl[k]);
                snprintf(nm, sizeof nm, "%s", names[K]);
                any = 1;
            } else if (K - 1 <= c->depth) {
                vt_layout_every(c, k == 0 && is_inter(fn) ? 1 : K - 1, &tl[k]);
                snprintf(nm, sizeof nm, "every:%d", K - 1);
                any = 1;
            } else {
                vt_layout_every(c, c->depth, &tl[k]);
            }
        }
        if (!any) break;
        uint64_t f = plan_floats(m, fn, in, need_grad, tl);
        if (f < best) { best = f; snprintf(bestname, sizeof bestname, "%s", nm); }
    }
    return vt_fail(VT_ERR_BUDGET, "checkpointing budget of %llu bytes is too small: the smallest "
                   "activation plan needs %llu bytes (policy %s)", (unsigned long long)m->policy.budget,
                   (unsigned long long)(best * sizeof(float)), bestname);
}

/* ---- encoder calls --------------------------------------------------------------------------------- */

/* the AIM backbone is a masked-causal ViT; an MAE/AIM model's encoder calls run its backbone */
static int causal_kind(const vt_model *m) { return m->cfg.kind == VT_KIND_CAUSAL || m->cfg.kind == VT_KIND_AIM; }

void vt_chain_tokens(const vt_model *m, vt_fn fn, const vt_inputs *in, int T[3]) {
    T[0] = in->idx_keep ? in->n_keep : m->enc.T_full;
    T[1] = T[2] = 0;
    if (fn == VT_FN_LOSS && m->cfg.kind == VT_KIND_MAE) T[1] = m->enc.T_full;
    if (fn == VT_FN_LOSS && m->cfg.kind == VT_KIND_AIM) T[1] = m->enc.T_full;
}

static uint64_t ln_out_floats(uint64_t M, uint64_t D) { return vt_round(M * D) + 2 * vt_round(M); }

static uint64_t encoder_call_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                                const vt_chain_layout *lay) {
    const vt_chain *c = &m->enc.chain;
    uint64_t B = in->batch, D = c->D, T = in->idx_keep ? (uint64_t)in->n_keep : (uint64_t)m->enc.T_full;
    uint64_t x0 = vt_round(B * T * D), pre_f, pre_b, kept, fx, bx;
    vt_encoder_plan_pre(m, in, &pre_f, &pre_b);
    vt_chain_plan(c, lay, (int)B, (int)T, need_grad, is_inter(fn), &kept, &fx, &bx);
    uint64_t post = has_norm(m) ? ln_out_floats(B * T, D) : 0;
    if (fn == VT_FN_FORWARD && has_pool(m)) post += vt_round(B * D);
    if (fn == VT_FN_INTERMEDIATES_NORM && has_norm(m)) post += (uint64_t)c->depth * ln_out_floats(B * T, D);
    uint64_t fwd = x0 + (pre_f > kept + (fx > post ? fx : post) ? pre_f : kept + (fx > post ? fx : post));
    if (!need_grad) return fwd;
    uint64_t bwd = x0 + kept + post + vt_round(B * T * D) +
                 (fn == VT_FN_FORWARD && has_pool(m) ? vt_round(B * T * D) : 0) + (bx > pre_b ? bx : pre_b);
    return fwd > bwd ? fwd : bwd;
}

static uint64_t plan_floats(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                          const vt_chain_layout *lays) {
    if (fn == VT_FN_LOSS) {
        uint64_t f = 0;
        vt_loss_plan(m, in, need_grad, lays, &f);
        return f;
    }
    return encoder_call_plan(m, fn, in, need_grad, &lays[0]);
}

static int encoder_call_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad,
                                const vt_chain_layout *lay) {
    const vt_chain *c = &m->enc.chain;
    vt_arena *ar = &m->arena;
    int B = in->batch, D = c->D, T = in->idx_keep ? in->n_keep : m->enc.T_full;
    size_t MD = (size_t)B * T * D;
    int causal = causal_kind(m);
    float *x0 = vt_arena_alloc(ar, MD);
    if (!x0) return vt_fail(VT_ERR_STATE, "activation arena overflow: a planning bug");
    int rc = vt_encoder_preprocess(m, in, causal, x0);
    if (rc) return rc;
    rc = vt_encoder_blocks(m, in, need_grad, lay, T, x0, causal, is_inter(fn), &m->out);
    if (rc) return rc;
    const vt_chain_run *r = &m->enc_run;
    m->out_ndim = 3;
    m->out_shape[0] = B; m->out_shape[1] = T; m->out_shape[2] = D;
    if (fn == VT_FN_FORWARD && has_pool(m)) {
        float *pooled = vt_arena_alloc(ar, (size_t)B * D);
        if (!pooled) return vt_fail(VT_ERR_STATE, "activation arena overflow: a planning bug");
        int P = m->enc.P;
        for (int b = 0; b < B; b++) {
            const float *x = m->out + (size_t)b * T * D;
            float *y = pooled + (size_t)b * D;
            if (!strcmp(m->cfg.enc.global_pool, "avg")) { /* lightly: x[:, P:].mean(dim=1) */
                for (int d = 0; d < D; d++) {
                    float s = 0.0f;
                    for (int t = P; t < T; t++) s += x[(size_t)t * D + d];
                    y[d] = s / (float)(T - P);
                }
            } else { /* token (and lightly's max/avgmax): x[:, 0] */
                memcpy(y, x, (size_t)D * sizeof(float));
            }
        }
        m->out = pooled;
        m->out_ndim = 2;
        m->out_shape[1] = D;
    }
    if (is_inter(fn))
        for (int i = 0; i < c->depth; i++) {
            m->inter[i] = r->xs[i + 1];
            if (fn == VT_FN_INTERMEDIATES_NORM && has_norm(m)) {
                m->inter[i] = vt_arena_alloc(ar, MD);
                m->inter_m[i] = vt_arena_alloc(ar, (size_t)B * T);
                m->inter_r[i] = vt_arena_alloc(ar, (size_t)B * T);
                if (ar->overflow) return vt_fail(VT_ERR_STATE, "activation arena overflow: a planning bug");
                vt_layernorm_forward(m->inter[i], m->inter_m[i], m->inter_r[i], r->xs[i + 1],
                                     vt_P(m, m->enc.norm_w), vt_P(m, m->enc.norm_b), B * T, D, 1e-6f);
            }
        }
    return VT_OK;
}

typedef struct {
    const float *const *douts;
    int n_douts, pg;
} inject_ctx;

static void inject_intermediates(vt_model *m, void *vctx, int i, float *dres) {
    inject_ctx *ctx = vctx;
    if (1 + i >= ctx->n_douts || !ctx->douts[1 + i]) return;
    const float *dI = ctx->douts[1 + i];
    const vt_chain_run *r = &m->enc_run;
    int M = r->B * r->T, D = r->c->D;
    if (m->fn == VT_FN_INTERMEDIATES_NORM && has_norm(m))
        vt_layernorm_backward(dres, vt_G(m, m->enc.norm_w, ctx->pg), vt_G(m, m->enc.norm_b, ctx->pg), dI,
                              r->xs[i + 1], vt_P(m, m->enc.norm_w), m->inter_m[i], m->inter_r[i], M, D);
    else
        for (size_t e = 0; e < (size_t)M * D; e++) dres[e] += dI[e];
}

static int encoder_call_backward(vt_model *m, const float *const *douts, int n_douts,
                                 float *dimages, int pg) {
    vt_chain_run *r = &m->enc_run;
    vt_arena *ar = &m->arena;
    int B = r->B, T = r->T, D = r->c->D, P = m->enc.P;
    size_t MD = (size_t)B * T * D;
    size_t mark = vt_arena_mark(ar);
    float *dres = vt_arena_zalloc(ar, MD);
    if (!dres) return vt_fail(VT_ERR_STATE, "activation arena overflow: a planning bug");
    const float *dout = n_douts > 0 ? douts[0] : NULL;
    if (m->fn == VT_FN_FORWARD && has_pool(m)) {
        float *dfin = vt_arena_zalloc(ar, MD);
        if (!dfin) return vt_fail(VT_ERR_STATE, "activation arena overflow: a planning bug");
        if (dout)
            for (int b = 0; b < B; b++) {
                const float *dp = dout + (size_t)b * D;
                if (!strcmp(m->cfg.enc.global_pool, "avg")) {
                    for (int t = P; t < T; t++)
                        for (int d = 0; d < D; d++) dfin[((size_t)b * T + t) * D + d] = dp[d] / (float)(T - P);
                } else {
                    memcpy(dfin + (size_t)b * T * D, dp, (size_t)D * sizeof(float));
                }
            }
        dout = dout ? dfin : NULL;
    }
    if (dout) {
        if (has_norm(m))
            vt_layernorm_backward(dres, vt_G(m, m->enc.norm_w, pg), vt_G(m, m->enc.norm_b, pg), dout,
                                  r->xs[r->c->depth], vt_P(m, m->enc.norm_w), m->fin_m, m->fin_r, B * T, D);
        else
            for (size_t e = 0; e < MD; e++) dres[e] += dout[e];
    }
    inject_ctx ctx = {douts, n_douts, pg};
    int rc = vt_chain_backward(m, r, dres, pg, is_inter(m->fn) ? inject_intermediates : NULL, &ctx);
    if (!rc) rc = vt_encoder_backward_pre(m, &m->in, causal_kind(m), dres, dimages, pg);
    vt_arena_reset(ar, mark);
    return rc;
}

/* ---- public calls ------------------------------------------------------------------------------ */

static int check_inputs(const vt_model *m, vt_fn fn, const vt_inputs *in, int values) {
    int rc = check_fn(m, fn);
    if (rc) return rc;
    if (fn == VT_FN_LOSS) return vt_loss_check_inputs(m, in, values);
    rc = vt_check_encoder_inputs(m, in, causal_kind(m), values);
    if (rc) return rc;
    if (fn == VT_FN_FORWARD && !strcmp(m->cfg.enc.global_pool, "avg") &&
        (in->idx_keep ? in->n_keep : m->enc.T_full) <= m->enc.P)
        return vt_fail(VT_ERR_ARG, "avg pooling needs at least one token after the %d prefix tokens", m->enc.P);
    return VT_OK;
}

int vt_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad, vt_plan_bytes *out) {
    if (!m || !out) return vt_fail(VT_ERR_ARG, "vt_plan: NULL argument");
    int rc = check_inputs(m, fn, in, 0);
    if (rc) return rc;
    vt_chain_layout lays[3];
    rc = resolve_layouts(m, fn, in, need_grad, lays);
    if (rc) return rc;
    memset(out, 0, sizeof *out);
    out->params = m->pt.total * sizeof(float);
    out->grads = need_grad ? m->pt.gtotal * sizeof(float) : 0;
    out->optimizer = need_grad ? 2 * m->pt.gtotal * sizeof(float) : 0; /* AdamW m and v */
    out->activations = plan_floats(m, fn, in, need_grad, lays) * sizeof(float);
    out->total = out->params + out->grads + out->optimizer + out->activations;
    return VT_OK;
}

int vt_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad) {
    if (!m) return vt_fail(VT_ERR_ARG, "vt_forward: model is NULL");
    m->have_fwd = 0;
    int rc = check_inputs(m, fn, in, 1);
    if (rc) return rc;
    vt_chain_layout lays[3];
    rc = resolve_layouts(m, fn, in, need_grad, lays);
    if (rc) return rc;
    uint64_t plan = plan_floats(m, fn, in, need_grad, lays);
    if (plan > (uint64_t)((SIZE_MAX - 4096) / sizeof(float)))
        return vt_fail(VT_ERR_NOMEM, "out of memory: the activation arena needs %.3g GB, more than this "
                                     "platform can address", (double)plan * sizeof(float) / 1e9);
    rc = vt_arena_reserve(&m->arena, (size_t)plan);
    if (rc) return rc;
    vt_arena_begin(&m->arena);
    m->planned_floats = (size_t)plan;
    m->fn = fn;
    m->in = *in;
    m->fwd_need_grad = need_grad;
    memset(m->inter, 0, sizeof m->inter);
    m->fin_ln = m->fin_m = m->fin_r = NULL;
    if (fn == VT_FN_LOSS) rc = vt_loss_forward(m, in, need_grad, lays);
    else rc = encoder_call_forward(m, fn, in, need_grad, &lays[0]);
    if (rc) return rc;
    m->have_fwd = 1;
    return VT_OK;
}

int vt_output_count(const vt_model *m) {
    if (!m->have_fwd) return 0;
    return is_inter(m->fn) ? 1 + m->enc.chain.depth : 1;
}

const float *vt_output(const vt_model *m, int i, int64_t shape[4], int *ndim) {
    if (!m->have_fwd || i < 0 || i >= vt_output_count(m)) {
        vt_fail(VT_ERR_ARG, "no output %d (call vt_forward first)", i);
        return NULL;
    }
    if (i == 0) {
        if (shape) memcpy(shape, m->out_shape, sizeof m->out_shape);
        if (ndim) *ndim = m->out_ndim;
        return m->out;
    }
    if (shape) {
        shape[0] = m->enc_run.B; shape[1] = m->enc_run.T; shape[2] = m->enc.chain.D; shape[3] = 0;
    }
    if (ndim) *ndim = 3;
    return m->inter[i - 1];
}

float vt_loss_value(const vt_model *m) { return m->loss; }

int vt_backward(vt_model *m, const float *const *douts, int n_douts, float *dimages, int param_grads) {
    if (!m) return vt_fail(VT_ERR_ARG, "vt_backward: model is NULL");
    if (!m->have_fwd || !m->fwd_need_grad)
        return vt_fail(VT_ERR_STATE, "vt_backward needs a vt_forward with need_grad=1 first");
    if (n_douts < 0 || n_douts > vt_output_count(m))
        return vt_fail(VT_ERR_ARG, "%d upstream gradients given, the call has %d outputs", n_douts, vt_output_count(m));
    int rc;
    m->arena.tl_backward = m->arena.tl_n;
    vt_arena_event(&m->arena);
    if (m->fn == VT_FN_LOSS) {
        float dl = (douts && n_douts > 0 && douts[0]) ? douts[0][0] : 1.0f;
        rc = vt_loss_backward(m, dl, dimages, param_grads);
    } else {
        rc = encoder_call_backward(m, douts, n_douts, dimages, param_grads);
    }
    if (!rc && m->arena.overflow) rc = vt_fail(VT_ERR_STATE, "activation arena overflow: a planning bug");
    return rc;
}

void vt_arena_get_stats(const vt_model *m, vt_arena_stats *out) {
    out->planned = m->planned_floats * sizeof(float);
    out->peak = m->arena.peak * sizeof(float);
    out->capacity = m->arena.cap * sizeof(float);
}

void vt_release_activations(vt_model *m) {
    vt_arena_free(&m->arena);
    m->have_fwd = 0;
}

int vt_activation_timeline(const vt_model *m, size_t *bytes, size_t *live, int max, int *backward_start) {
    int n = m->arena.tl_n < max ? m->arena.tl_n : max;
    for (int i = 0; i < n && bytes; i++) bytes[i] = m->arena.tl[i] * sizeof(float);
    for (int i = 0; i < n && live; i++) live[i] = m->arena.tl_live[i] * sizeof(float);
    if (backward_start) *backward_start = m->arena.tl_backward;
    return n;
}
