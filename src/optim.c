/* optim.c: AdamW with PyTorch's semantics (torch.optim.AdamW, single-tensor path), parameter
 * groups without weight decay (norms, biases, tokens, positional embeddings: lightly's
 * benchmarks), lightly's CosineWarmupScheduler, and global-norm gradient clipping
 * (torch.nn.utils.clip_grad_norm_). The optimizer state m, v uses the gradient layout. */
#include "optim.h"
#include "model.h"
#include "kernels/kernels.h" /* vt_adamw_step: the update of one flat range (kernels_ref.c, SIMD) */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "threads.h"

float vt_cosine_warmup(long step, double warmup, double total) {
    /* lightly CosineWarmupScheduler: linear warmup (step+1)/W, then cosine from 1 to 0.001 */
    if (step < warmup) return (float)((double)(step + 1) / warmup);
    double s = (double)step - warmup, M = total - warmup;
    if (s >= M - 1) return 0.001f;
    return (float)(0.001 - (0.001 - 1.0) * (cos(M_PI * s / (M - 1)) + 1.0) / 2.0);
}

static int no_decay(const vt_param *p) {
    /* biases and norm parameters are 1-D; tokens and positional embeddings by name */
    if (p->ndim <= 1) return 1;
    const char *n = p->name;
    return strstr(n, "token") || strstr(n, "pos_embed") || strstr(n, "gamma");
}

vt_status vt_optimizer_init(vt_model *m, const vt_adamw_config *cfg) {
    if (!cfg || !(cfg->lr >= 0) || !(cfg->beta1 >= 0 && cfg->beta1 < 1) || !(cfg->beta2 >= 0 && cfg->beta2 < 1) ||
        !(cfg->eps > 0) || !(cfg->weight_decay >= 0))
        return vt_fail(VT_ERR_ARG, "AdamW: lr >= 0, betas in [0,1), eps > 0, weight_decay >= 0");
    size_t n = m->pt.gtotal ? m->pt.gtotal : 1;
    float *mm = calloc(n, sizeof(float)), *vv = calloc(n, sizeof(float));
    if (!mm || !vv) {
        free(mm);
        free(vv);
        return vt_fail(VT_ERR_NOMEM, "out of memory: AdamW state needs %zu bytes", 2 * n * sizeof(float));
    }
    free(m->opt.m);
    free(m->opt.v);
    m->opt.m = mm;
    m->opt.v = vv;
    m->opt.n = m->pt.gtotal;
    m->opt.t = 0;
    m->opt.cfg = *cfg;
    return VT_OK;
}

void vt_optimizer_free(vt_model *m) {
    free(m->opt.m);
    free(m->opt.v);
    m->opt.m = m->opt.v = NULL;
    m->opt.n = 0;
}

vt_status vt_grad_norm(const vt_model *m, double *norm) {
    double s = 0;
    for (size_t i = 0; i < m->pt.gtotal; i++) s += (double)m->pt.grad[i] * m->pt.grad[i];
    *norm = sqrt(s);
    if (!isfinite(*norm)) return vt_fail(VT_ERR_NUMERIC, "the gradient norm is not finite");
    return VT_OK;
}

vt_status vt_clip_grad_norm(vt_model *m, float max_norm, double *norm_out) {
    double norm;
    int rc = vt_grad_norm(m, &norm);
    if (norm_out) *norm_out = norm;
    if (rc) return rc;
    float coef = (float)(max_norm / (norm + 1e-6));
    if (coef < 1.0f)
        for (size_t i = 0; i < m->pt.gtotal; i++) m->pt.grad[i] *= coef;
    return VT_OK;
}

/* The update is element-wise (each element's arithmetic is the same in any split), so threads
 * take ranges of VT_ADAMW_UNIT gradient elements, cutting across parameters. */
#define VT_ADAMW_UNIT 4096
typedef struct { vt_model *m; float lr; } adamw_job;
static void adamw_units(void *ctx, int lo, int hi, int tid) {
    const adamw_job *j = ctx;
    vt_model *m = j->m;
    const vt_adamw_config *c = &m->opt.cfg;
    size_t g0 = (size_t)lo * VT_ADAMW_UNIT, g1 = (size_t)hi * VT_ADAMW_UNIT;
    for (int i = 0; i < m->pt.n; i++) {
        const vt_param *p = &m->pt.p[i];
        if (p->goff < 0) continue;
        size_t a = (size_t)p->goff, b = a + p->numel; /* this parameter's gradient range */
        if (a < g0) a = g0;
        if (b > g1) b = g1;
        if (a >= b) continue;
        size_t o = a - (size_t)p->goff;
        vt_adamw_step(m->pt.data + p->off + o, m->pt.grad + a, m->opt.m + a, m->opt.v + a, b - a,
                      m->opt.t, j->lr, c->beta1, c->beta2, c->eps, no_decay(p) ? 0.0f : c->weight_decay);
    }
}

vt_status vt_optimizer_step(vt_model *m, float lr) {
    if (!m->opt.m) return vt_fail(VT_ERR_STATE, "call vt_optimizer_init first");
    if (m->opt.n != m->pt.gtotal)
        return vt_fail(VT_ERR_STATE, "the set of trainable parameters changed since vt_optimizer_init");
    for (size_t i = 0; i < m->pt.gtotal; i++)
        if (!isfinite(m->pt.grad[i])) return vt_fail(VT_ERR_NUMERIC, "a gradient is not finite; no update made");
    m->opt.t++;
    adamw_job j = {m, lr};
    size_t units = (m->pt.gtotal + VT_ADAMW_UNIT - 1) / VT_ADAMW_UNIT;
    vt_parallel_for((int)units, 1, 20.0 * (double)m->pt.gtotal, adamw_units, &j);
    return VT_OK;
}
