/* optim.c: AdamW with PyTorch's semantics (torch.optim.AdamW, single-tensor path), parameter
 * groups without weight decay (norms, biases, tokens, positional embeddings: lightly's
 * benchmarks), lightly's CosineWarmupScheduler, and global-norm gradient clipping
 * (torch.nn.utils.clip_grad_norm_). The optimizer state m, v uses the gradient layout. */
#include "optim.h"
#include "model.h"
#include "exec.h"
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

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
    if (!cfg || !(cfg->lr >= 0) || !(cfg->beta1 >= 0 && cfg->beta1 < 1) ||
        !(cfg->beta2 >= 0 && cfg->beta2 < 1) || !(cfg->eps > 0) || !(cfg->weight_decay >= 0))
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
    m->opt.bad = 0;
    m->opt.cfg = *cfg;
    return VT_OK;
}

void vt_optimizer_free(vt_model *m) {
    free(m->opt.m);
    free(m->opt.v);
    m->opt.m = m->opt.v = NULL;
    m->opt.n = 0;
}

vt_status vt_clip_grad_norm(vt_model *m, float max_norm, double *norm_out) {
    vt_exec_mark(m, VT_PHASE_OPTIMIZER, -1, -1);
    vt_k_grad_norm(m, &m->sc.grad_norm, m->pt.grad, (int64_t)m->pt.gtotal);
    if (!vt_exec_recording(m)) { /* recorded: clip_grads itself skips a non-finite norm */
        if (norm_out) *norm_out = m->sc.grad_norm;
        if (!isfinite(m->sc.grad_norm)) return vt_fail(VT_ERR_NUMERIC, "the gradient norm is not finite");
    }
    vt_k_clip_grads(m, m->pt.grad, &m->sc.grad_norm, (int64_t)m->pt.gtotal, max_norm);
    return VT_OK;
}

/* AdamW over the trainable parameters: one call per run of consecutive parameters that share a
 * weight decay (contiguous in both buffers). The step's learning rate and count are the scalars
 * region's inputs, and the non-finite flag (loss and gradients, computed by kernels) makes every
 * call skip: a recorded step refuses a bad update without reading anything back mid-step. */
vt_status vt_optimizer_apply(vt_model *m, float lr, int check_loss) {
    if (!m->opt.m) return vt_fail(VT_ERR_STATE, "call vt_optimizer_init first");
    if (m->opt.n != m->pt.gtotal)
        return vt_fail(VT_ERR_STATE, "the set of trainable parameters changed since vt_optimizer_init");
    if (m->opt.bad)
        return vt_fail(VT_ERR_STATE,
                       "the update of step %ld made the state non-finite: load a good one first", m->opt.bad);
    vt_exec_mark(m, VT_PHASE_OPTIMIZER, -1, -1);
    vt_k_fill(m, &m->sc.nonfinite, 1, 0.0f);
    vt_k_fill(m, &m->sc.update_nonfinite, 1, 0.0f);
    if (check_loss) vt_k_check_finite(m, &m->sc.nonfinite, &m->sc.loss, 1);
    vt_k_check_finite(m, &m->sc.nonfinite, m->pt.grad, (int64_t)m->pt.gtotal);
    int run = !vt_exec_recording(m);
    if (run && m->sc.nonfinite != 0.0f)
        return vt_fail(VT_ERR_NUMERIC, "a gradient is not finite; no update made");
    if (m->opt.t >= VT_MAX_STEPS)
        return vt_fail(VT_ERR_STATE, "AdamW has taken %ld steps, the most it counts", m->opt.t);
    m->sc.lr = lr;
    m->sc.step = (float)(m->opt.t + 1);
    const vt_adamw_config *c = &m->opt.cfg;
    for (int i = 0; i < m->pt.n;) {
        const vt_param *p = &m->pt.p[i];
        if (p->goff < 0) {
            i++;
            continue;
        }
        int dec = !no_decay(p), j = i + 1;
        size_t n = p->numel;
        while (j < m->pt.n && m->pt.p[j].goff >= 0 && (!no_decay(&m->pt.p[j])) == dec)
            n += m->pt.p[j++].numel;
        vt_k_adamw(m, m->pt.data + p->off, m->opt.m + p->goff, m->opt.v + p->goff, m->pt.grad + p->goff,
                   &m->sc.lr, &m->sc.step, &m->sc.nonfinite, &m->sc.update_nonfinite, (int64_t)n, c->beta1,
                   c->beta2, c->eps, dec ? c->weight_decay : 0.0f);
        i = j;
    }
    if (!run) return VT_OK; /* a recorded step counts nothing: its replays do */
    m->opt.t++;
    return vt_optimizer_after_update(m);
}

/* After an update: its finite check (fused into the AdamW kernel) passed, or the state is marked
 * bad and the value where it went wrong named. The update has been written by then (a check
 * before writing would read everything twice): a run keeps its last good state in its last
 * checkpoint, which nothing overwrites with this one. */
vt_status vt_optimizer_after_update(vt_model *m) {
    if (m->sc.update_nonfinite == 0.0f) return VT_OK;
    m->opt.bad = m->opt.t;
    char where[300];
    if (!vt_state_bad_value(m, m->pt.data, m->opt.m, m->opt.v, where, sizeof where))
        snprintf(where, sizeof where, "a value");
    return vt_fail(VT_ERR_NUMERIC,
                   "the update of step %ld made %s; the state is not good any more (nothing saves it)",
                   m->opt.t, where);
}

int vt_state_bad_value(const vt_model *m, const float *p, const float *mm, const float *vv, char *buf,
                       size_t len) {
    for (int i = 0; i < m->pt.n; i++) {
        const vt_param *q = &m->pt.p[i];
        const float *x[3] = { p + q->off, q->goff >= 0 && mm ? mm + q->goff : NULL,
                              q->goff >= 0 && vv ? vv + q->goff : NULL };
        static const char *const kind[3] = { "param/", "adam_m/", "adam_v/" };
        for (int j = 0; j < 3; j++)
            for (size_t k = 0; x[j] && k < q->numel; k++)
                if (!isfinite(x[j][k]) || (j == 2 && x[j][k] < 0)) {
                    snprintf(buf, len, "%s%s %s (%g at element %zu)", kind[j], q->name,
                             isfinite(x[j][k]) ? "negative: a second moment never is" : "non-finite",
                             (double)x[j][k], k);
                    return 1;
                }
    }
    return 0;
}

vt_status vt_optimizer_step(vt_model *m, float lr) { return vt_optimizer_apply(m, lr, 0); }
