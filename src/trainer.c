/* trainer.c: one MAE or AIM training step, and the training state that makes a run resumable.
 *   step = draw masks (seeded) -> zero grads -> loss forward -> backward -> clip -> AdamW at the
 *          scheduled learning rate
 * A classifier (timm VisionTransformer with num_classes, classify.c) takes the same step with
 * labels instead of masks (vt_train_step_labels).
 * The same seed and data give the same bits whatever the checkpointing policy, and a step that
 * meets a non-finite loss or gradient changes nothing (parameters, optimizer, generator, step
 * count stay at the last good state). The state (parameters, AdamW m/v, step, generator, both
 * configs) round-trips through safetensors bytes; writing them to disk atomically is the
 * caller's part (web/train/node-data.js writeAtomic writes a temporary file and renames it). */
#include "json.h"
#include "safetensors.h"
#include "vit_internal.h"
#include "exec.h"
#include "objective.h"
#include "optim.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vt_train_config_default(vt_train_config *t, vt_kind kind) {
    memset(t, 0, sizeof *t);
    /* lightly's benchmarks: MAE lr 1.5e-4 * bs / 256, AIM lr 1e-3 * bs / 4096 with clipping 1.0;
     * both AdamW(betas 0.9, 0.95), weight decay 0.05; the caller scales lr to its batch */
    t->lr = kind == VT_KIND_AIM ? 1e-3f : 1.5e-4f;
    t->beta1 = 0.9f;
    t->beta2 = 0.95f;
    t->eps = 1e-8f;
    t->weight_decay = 0.05f;
    t->clip_norm = kind == VT_KIND_AIM ? 1.0f : 0.0f;
    t->mask_ratio = 0.75f;
    t->seed = 0;
    t->grad_accum = 1;
}

/* Every field range-checked (they also arrive from checkpoints, i.e. from untrusted files): finite
 * floats only (a checkpoint must never hold "inf", which is not JSON), step counts that fit the
 * 32-bit long of wasm, a seed exactly representable as a JSON (double) number. */
static int check_train_config(const vt_train_config *t) {
    if (!(t->lr >= 0 && t->lr <= VT_MAX_LR) || !(t->clip_norm >= 0 && isfinite(t->clip_norm)) ||
        !(t->mask_ratio >= 0 && t->mask_ratio < 1) || !(t->weight_decay >= 0 && isfinite(t->weight_decay)) ||
        !(t->eps >= 0 && isfinite(t->eps)) || !(t->beta1 >= 0 && t->beta1 < 1) ||
        !(t->beta2 >= 0 && t->beta2 < 1) || !(t->label_smoothing >= 0 && t->label_smoothing < 1) ||
        !(t->min_lr >= 0 && t->min_lr <= t->lr))
        return vt_fail(
            VT_ERR_ARG,
            "training config: needs 0 <= lr <= %g, 0 <= min_lr <= lr, finite clip_norm, weight_decay, "
            "eps >= 0, 0 <= mask_ratio, beta1, beta2, label_smoothing < 1 (got lr %g, min_lr %g, clip_norm "
            "%g, "
            "weight_decay %g, eps %g, mask_ratio %g, betas %g %g, label_smoothing %g)",
            VT_MAX_LR, t->lr, t->min_lr, t->clip_norm, t->weight_decay, t->eps, t->mask_ratio, t->beta1,
            t->beta2, t->label_smoothing);
    if (t->grad_accum < 1 || t->grad_accum > VT_MAX_ACCUM)
        return vt_fail(VT_ERR_ARG, "training config: grad_accum %d must be in 1..%d", t->grad_accum,
                       VT_MAX_ACCUM);
    if (t->warmup_steps < 0 || t->warmup_steps > VT_MAX_STEPS || t->total_steps < 0 ||
        t->total_steps > VT_MAX_STEPS)
        return vt_fail(VT_ERR_ARG, "training config: warmup_steps %ld and total_steps %ld must be in 0..%ld",
                       t->warmup_steps, t->total_steps, (long)VT_MAX_STEPS);
    if (t->seed > VT_MAX_SEED)
        return vt_fail(VT_ERR_ARG, "training config: seed %llu exceeds 2^53 (it must survive JSON)",
                       (unsigned long long)t->seed);
    return VT_OK;
}

vt_status vt_trainer_init(vt_model *m, const vt_train_config *t) {
    if (!m || !t) return vt_fail(VT_ERR_ARG, "vt_trainer_init: NULL argument");
    if (!m->obj->step_inputs)
        return vt_fail(VT_ERR_ARG,
                       "training needs an MAE or AIM model, or a timm classifier (num_classes > 0)");
    int rc = check_train_config(t);
    if (rc) return rc;
    vt_adamw_config oc = { t->lr, t->beta1, t->beta2, t->eps, t->weight_decay };
    rc = vt_optimizer_init(m, &oc);
    if (rc) return rc;
    m->train.cfg = *t;
    vt_rng_seed(&m->train.rng, t->seed);
    m->train.on = 1;
    return VT_OK;
}

long vt_train_step_count(const vt_model *m) { return m->opt.t; }

float vt_trainer_mask_ratio(const vt_model *m) {
    if (m->train.on) return m->train.cfg.mask_ratio;
    vt_train_config t;
    vt_train_config_default(&t, m->cfg.kind);
    return t.mask_ratio;
}

float vt_train_lr(const vt_model *m, long step) {
    const vt_train_config *t = &m->train.cfg;
    if (t->total_steps <= 0) return t->lr;
    float f = vt_cosine_warmup(step, (double)t->warmup_steps, (double)t->total_steps);
    /* the warmup rises from 0 to lr, the cosine falls towards min_lr (min_lr 0: lr * f exactly) */
    return step < t->warmup_steps ? t->lr * f : t->min_lr + (t->lr - t->min_lr) * f;
}

/* mask buffers grow with the largest batch seen (allocation happens before the step's work) */
static int masks_reserve(vt_model *m, int B) {
    uint64_t need64 = (uint64_t)B * (uint64_t)m->enc.T_full; /* 64-bit: wasm's size_t would wrap */
    if (need64 > SIZE_MAX / sizeof(int64_t))
        return vt_fail(VT_ERR_NOMEM, "out of memory: masks of batch %d x %d tokens exceed the address space",
                       B, m->enc.T_full);
    size_t need = (size_t)need64;
    if (need <= m->train.cap) return VT_OK;
    int64_t *k = realloc(m->train.keep, need * sizeof *k);
    if (k) m->train.keep = k;
    int64_t *q = k ? realloc(m->train.masked, need * sizeof *q) : NULL;
    if (q) m->train.masked = q;
    uint8_t *b = q ? realloc(m->train.prefix, need) : NULL;
    if (b) m->train.prefix = b;
    if (!b)
        return vt_fail(VT_ERR_NOMEM, "out of memory: %llu bytes for masks", (unsigned long long)need64 * 17);
    m->train.cap = need;
    return VT_OK;
}

/* Micro-batch j of K of a step's inputs: its images, masks / prefix masks and labels. */
static vt_inputs micro_batch(const vt_model *m, const vt_inputs *in, int j, int K) {
    vt_inputs u = *in;
    int64_t B = in->batch / K, L = m->enc.T_full;
    const vt_vit_config *c = &m->cfg.enc;
    u.batch = (int)B;
    u.images = in->images + (size_t)(j * B * c->in_chans * c->img_size * vt_img_width(c));
    if (in->idx_keep) u.idx_keep = in->idx_keep + (size_t)(j * B * in->n_keep);
    if (in->idx_mask) u.idx_mask = in->idx_mask + (size_t)(j * B * in->n_mask);
    if (in->mask) u.mask = in->mask + (size_t)(j * B * L);
    if (in->labels) u.labels = in->labels + (size_t)(j * B);
    return u;
}

/* zero grads -> K x (loss forward -> backward with d loss = 1/K) -> clip -> AdamW; on failure the
 * generator goes back to `saved` (the next try draws the same masks) and a numeric failure names
 * the step. The loss is the mean of the K losses (timm scales each by 1/K before its backward). */
static vt_status step_on(vt_model *m, const vt_inputs *in, vt_rng saved, float *loss) {
    int K = m->train.cfg.grad_accum;
    if (K > 1 && vt_exec_recording(m)) { /* the K losses are summed here, not by a kernel of the list */
        m->train.rng = saved;
        return vt_fail(VT_ERR_ARG,
                       "a step of grad_accum %d micro-batches is not recorded: record one micro-batch "
                       "(batch %d, grad_accum 1)",
                       K, in->batch / K);
    }
    vt_zero_grad(m);
    vt_status rc = VT_OK;
    if (K == 1) {
        rc = vt_forward(m, VT_FN_LOSS, in, 1);
        if (!rc) rc = vt_backward(m, NULL, 0, NULL, 1);
    } else {
        const float dl = 1.0f / (float)K, *dls[1] = { &dl };
        double sum = 0;
        for (int j = 0; j < K && !rc; j++) {
            vt_inputs u = micro_batch(m, in, j, K);
            rc = vt_forward(m, VT_FN_LOSS, &u, 1);
            if (!rc) sum += m->sc.loss;
            if (!rc) rc = vt_backward(m, dls, 1, NULL, 1);
        }
        if (!rc) m->sc.loss = (float)(sum / K); /* AdamW's finite check reads it */
    }
    if (!rc && m->train.cfg.clip_norm > 0) rc = vt_clip_grad_norm(m, m->train.cfg.clip_norm, NULL);
    if (!rc)
        rc = vt_optimizer_apply(m, vt_train_lr(m, m->opt.t), 1); /* checks the loss and gradients first */
    if (loss) *loss = m->sc.loss;
    if (rc) {
        m->train.rng = saved;
        if (rc == VT_ERR_NUMERIC) {
            char msg[900];
            snprintf(msg, sizeof msg, "%s", vt_last_error());
            if (m->opt
                    .bad) /* the update went through, non-finite: what was saved before it is the good state */
                vt_fail(VT_ERR_NUMERIC, "training stopped: %s; the last good state is the last one saved",
                        msg);
            else
                vt_fail(VT_ERR_NUMERIC, "training stopped at step %ld: %s; the last good state is kept",
                        m->opt.t, msg);
        }
    }
    return rc;
}

/* A step's checks and inputs: labels (a classifier) or masks drawn from the generator (its state
 * before them in *saved, for a step that fails: the next try draws the same masks). who: the
 * public call, for its messages. */
static vt_status step_inputs(vt_model *m, const float *images, const int32_t *labels, int batch,
                             const char *who, vt_inputs *in, vt_rng *saved) {
    if (!m || !images || (!strcmp(who, "vt_train_step_labels") && !labels))
        return vt_fail(VT_ERR_ARG, "%s: NULL argument", who);
    if (!m->train.on) return vt_fail(VT_ERR_STATE, "call vt_trainer_init first");
    if (m->opt.bad)
        return vt_fail(VT_ERR_STATE,
                       "the update of step %ld made the state non-finite: load a training state "
                       "(vt_train_state_load) or start again (vt_trainer_init)",
                       m->opt.bad);
    if (labels && !m->obj->labels)
        return vt_fail(
            VT_ERR_ARG,
            "labels train a classifier (timm, num_classes > 0); an MAE / AIM model takes vt_train_step");
    if (!labels && m->obj->labels)
        return vt_fail(VT_ERR_ARG, "a classifier trains on labels: vt_train_step_labels");
    if (batch < 1) return vt_fail(VT_ERR_ARG, "batch must be >= 1, got %d", batch);
    if (batch % m->train.cfg.grad_accum)
        return vt_fail(VT_ERR_ARG,
                       "batch %d is not a multiple of grad_accum %d (the micro-batches are equal)", batch,
                       m->train.cfg.grad_accum);
    int rc = labels ? VT_OK : masks_reserve(m, batch);
    if (rc) return rc;
    *saved = m->train.rng;
    vt_step_draw draw = { &m->train.rng, m->train.keep, m->train.masked, m->train.prefix };
    rc = m->obj->step_inputs(m, labels ? NULL : &draw, batch, m->train.cfg.mask_ratio, in);
    if (rc) {
        m->train.rng = *saved;
        return rc;
    }
    in->images = images;
    if (labels) {
        in->labels = labels;
        in->label_smoothing = m->train.cfg.label_smoothing;
    }
    return VT_OK;
}

vt_status vt_train_step_labels(vt_model *m, const float *images, const int32_t *labels, int batch,
                               float *loss) {
    vt_inputs in;
    vt_rng saved;
    vt_status rc = step_inputs(m, images, labels, batch, "vt_train_step_labels", &in, &saved);
    return rc ? rc : step_on(m, &in, saved, loss);
}

vt_status vt_train_step(vt_model *m, const float *images, int batch, float *loss) {
    vt_inputs in;
    vt_rng saved;
    vt_status rc = step_inputs(m, images, NULL, batch, "vt_train_step", &in, &saved);
    return rc ? rc : step_on(m, &in, saved, loss);
}

/* ---- a step run elsewhere (a replayed list) ---- */

vt_status vt_train_step_begin(vt_model *m, const float *images, const int32_t *labels, int batch,
                              vt_inputs *in, vt_scalars *sc) {
    if (!in || !sc) return vt_fail(VT_ERR_ARG, "vt_train_step_begin: NULL argument");
    if (m && m->train.on && m->train.cfg.grad_accum > 1)
        return vt_fail(VT_ERR_ARG,
                       "vt_train_step_begin: a step of grad_accum %d micro-batches runs here only "
                       "(vt_train_step)",
                       m->train.cfg.grad_accum);
    vt_status rc = step_inputs(m, images, labels, batch, "vt_train_step_begin", in, &m->train.begun_rng);
    if (rc) return rc;
    if (m->opt.t >= VT_MAX_STEPS) {
        m->train.rng = m->train.begun_rng;
        return vt_fail(VT_ERR_STATE, "AdamW has taken %ld steps, the most it counts", m->opt.t);
    }
    memset(sc, 0, sizeof *sc);
    sc->lr = vt_train_lr(m, m->opt.t); /* what vt_optimizer_apply would set */
    sc->step = (float)(m->opt.t + 1);
    sc->dloss = 1.0f;
    m->train.begun = 1;
    return VT_OK;
}

vt_status vt_train_step_end(vt_model *m, const vt_scalars *sc) {
    if (!m || !sc) return vt_fail(VT_ERR_ARG, "vt_train_step_end: NULL argument");
    if (!m->train.begun) return vt_fail(VT_ERR_STATE, "vt_train_step_end needs a vt_train_step_begin first");
    m->train.begun = 0;
    if (sc->nonfinite != 0.0f) { /* AdamW skipped every update: the state is the last good one */
        m->train.rng = m->train.begun_rng;
        return vt_fail(VT_ERR_NUMERIC,
                       "training stopped at step %ld: the loss or a gradient is not finite; the last "
                       "good state is kept",
                       m->opt.t);
    }
    m->opt.t++;
    m->sc.update_nonfinite = sc->update_nonfinite;
    return vt_optimizer_after_update(m);
}

/* ---- training state <-> safetensors bytes ------------------------------------------------- */

#define TRAIN_FORMAT "vitrine-train/1"

static int train_config_json(const vt_train_config *t, char *buf, size_t len) {
    int rc = check_train_config(t); /* never write a non-JSON number (inf, nan) */
    if (rc) return rc;
    int n = snprintf(
        buf, len,
        "{\"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, \"weight_decay\": %.9g, "
        "\"warmup_steps\": %ld, \"total_steps\": %ld, \"clip_norm\": %.9g, \"mask_ratio\": %.9g, "
        "\"seed\": %llu, \"label_smoothing\": %.9g, \"min_lr\": %.9g, \"grad_accum\": %d}",
        t->lr, t->beta1, t->beta2, t->eps, t->weight_decay, t->warmup_steps, t->total_steps, t->clip_norm,
        t->mask_ratio, (unsigned long long)t->seed, t->label_smoothing, t->min_lr, t->grad_accum);
    return n < 0 || (size_t)n >= len ? vt_fail(VT_ERR_ARG, "training config too long") : VT_OK;
}

/* metadata "crc32": {"<tensor>": "<crc32 of its bytes, 8 hex>", ...}; tensor names are parameter
 * names with a prefix ([A-Za-z0-9._]), so they need no JSON escaping. */
static size_t elem_bytes(const vt_st_entry *e) {
    size_t n = 4;
    for (int d = 0; d < e->ndim; d++) n *= (size_t)e->shape[d];
    return n;
}
static int checksums_json(const vt_st_entry *e, size_t n, char **out) {
    size_t cap = 3;
    for (size_t i = 0; i < n; i++) cap += strlen(e[i].name) + 16;
    char *s = malloc(cap), *w = s;
    if (!s) return vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes for checksums", cap);
    *w++ = '{';
    for (size_t i = 0; i < n; i++)
        w += sprintf(w, "%s\"%s\": \"%08x\"", i ? ", " : "", e[i].name,
                     (unsigned)vt_crc32(e[i].data, elem_bytes(&e[i])));
    strcpy(w, "}");
    *out = s;
    return VT_OK;
}

/* Every tensor's bytes against its checksum (when the state has checksums: states written before
 * they existed load as before). A tensor without one, or a checksum without a tensor, is refused. */
static int verify_checksums(const vt_st_file *f) {
    const char *sums = vt_st_meta(f, "crc32");
    if (!sums) return VT_OK;
    vt_json *j = NULL;
    int rc = vt_json_parse(sums, strlen(sums), &j);
    if (rc) return vt_fail(VT_ERR_FORMAT, "training state: crc32 metadata is not JSON");
    if (j->type != VT_JSON_OBJECT || j->n != f->n)
        rc = vt_fail(VT_ERR_FORMAT, "training state: crc32 metadata lists %zu tensors, the file holds %zu",
                     j->type == VT_JSON_OBJECT ? j->n : 0, f->n);
    for (size_t i = 0; i < f->n && !rc; i++) {
        const vt_st_tensor *t = &f->tensors[i];
        const vt_json *v = vt_json_get(j, t->name);
        char want[16];
        snprintf(want, sizeof want, "%08x", (unsigned)vt_crc32(t->data, t->nbytes));
        if (!v || v->type != VT_JSON_STRING)
            rc = vt_fail(VT_ERR_FORMAT, "training state: no checksum for '%s'", t->name);
        else if (strcmp(v->str, want))
            rc = vt_fail(VT_ERR_FORMAT, "training state: tensor '%s' is damaged (crc32 %s, recorded %.16s)",
                         t->name, want, v->str);
    }
    vt_json_free(j);
    return rc;
}

vt_status vt_train_state_save(const vt_model *m, uint8_t **out, size_t *out_len) {
    if (!m || !out || !out_len) return vt_fail(VT_ERR_ARG, "vt_train_state_save: NULL argument");
    if (!m->train.on) return vt_fail(VT_ERR_STATE, "no training state: call vt_trainer_init first");
    /* never a state that is not good: one an update made non-finite, or any NaN / infinity that got
     * into it otherwise (a scan is cheap beside the CRC of every byte) */
    char bad[300];
    if (m->opt.bad)
        return vt_fail(VT_ERR_NUMERIC, "not saved: the update of step %ld made the state non-finite",
                       m->opt.bad);
    if (vt_state_bad_value(m, m->pt.data, m->opt.m, m->opt.v, bad, sizeof bad))
        return vt_fail(VT_ERR_NUMERIC, "not saved: %s", bad);
    int n = m->pt.n, k = 0, rc;
    vt_st_entry *e = calloc((size_t)3 * n + 1, sizeof *e);
    char(*names)[VT_NAME_MAX + 16] = calloc((size_t)3 * n + 1, sizeof *names);
    long long(*shapes)[4] = calloc((size_t)n + 1, sizeof *shapes);
    char cfg[2048], tcfg[640], step[32], rng[48], *sums = NULL;
    if (!e || !names || !shapes) {
        rc = vt_fail(VT_ERR_NOMEM, "out of memory saving the training state");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const vt_param *p = &m->pt.p[i];
        for (int d = 0; d < p->ndim; d++) shapes[i][d] = p->shape[d];
        const char *pfx[3] = { "param/", "adam_m/", "adam_v/" };
        const float *src[3] = { m->pt.data + p->off, p->goff >= 0 ? m->opt.m + p->goff : NULL,
                                p->goff >= 0 ? m->opt.v + p->goff : NULL };
        for (int j = 0; j < 3; j++) {
            if (!src[j]) continue;
            snprintf(names[k], sizeof names[k], "%s%s", pfx[j], p->name);
            e[k] = (vt_st_entry){ names[k], VT_DT_F32, p->ndim, shapes[i], src[j] };
            k++;
        }
    }
    rc = vt_model_config_to_json(&m->cfg, cfg, sizeof cfg);
    if (!rc) rc = train_config_json(&m->train.cfg, tcfg, sizeof tcfg);
    if (!rc) rc = checksums_json(e, (size_t)k, &sums);
    if (rc) goto done;
    snprintf(step, sizeof step, "%ld", m->opt.t);
    snprintf(rng, sizeof rng, "%08x%08x%08x%08x", m->train.rng.s[0], m->train.rng.s[1], m->train.rng.s[2],
             m->train.rng.s[3]);
    const char *mk[] = { "format", "kind", "model_config",       "train_config",
                         "step",   "rng",  "grad_checkpointing", "crc32" };
    const char *mv[] = {
        TRAIN_FORMAT, vt_kind_name(m->cfg.kind), cfg, tcfg, step, rng, m->policy.text, sums
    };
    rc = vt_st_write(e, (size_t)k, mk, mv, 8, out, out_len);
done:
    free(sums);
    free(e);
    free(names);
    free(shapes);
    return rc;
}

/* A number of train_config, in [lo, hi] (finite) before any conversion: casting 1e300 or -1 to an
 * integer type is undefined behaviour. */
static int num(const vt_json *o, const char *k, double lo, double hi, double *v) {
    const vt_json *j = vt_json_get(o, k);
    if (!j || j->type != VT_JSON_NUMBER)
        return vt_fail(VT_ERR_FORMAT, "training state: train_config.%s: a number is needed", k);
    if (!(j->number >= lo && j->number <= hi))
        return vt_fail(VT_ERR_FORMAT, "training state: train_config.%s = %g is outside %g..%g", k, j->number,
                       lo, hi);
    *v = j->number;
    return VT_OK;
}

/* A training state's metadata, as the checks below read it */
typedef struct {
    vt_model_config cfg; /* model_config, read and checked */
    vt_train_config t;   /* train_config, every number in range */
    long step;
    vt_rng rng;
} state_meta;

/* The one check of a training state's metadata, before anything is allocated or converted for its
 * tensors: format, kind, model_config (checked as a config is; the model's own when m is given),
 * train_config (every number by name), step, rng (hex, never all zero: a xoshiro128** state of
 * zeros draws only zeros) and the CRC-32 of every tensor (when the state has them: states written
 * before they existed load as before, docs/cli.md says why). Errors name the field. */
static vt_status check_state_meta(const vt_st_file *f, const vt_model *m, state_meta *sm) {
    memset(sm, 0, sizeof *sm);
    const char *fmt = vt_st_meta(f, "format"), *kind = vt_st_meta(f, "kind"),
               *mcfg = vt_st_meta(f, "model_config");
    const char *tcfg = vt_st_meta(f, "train_config"), *step = vt_st_meta(f, "step"),
               *rng = vt_st_meta(f, "rng");
    if (!fmt || strcmp(fmt, TRAIN_FORMAT))
        return vt_fail(VT_ERR_FORMAT, "not a vitrine training state (format %s)", fmt ? fmt : "missing");
    const char *missing = !kind   ? "kind"
                          : !mcfg ? "model_config"
                          : !tcfg ? "train_config"
                          : !step ? "step"
                          : !rng  ? "rng"
                                  : NULL;
    if (missing) return vt_fail(VT_ERR_FORMAT, "training state metadata incomplete: no %s", missing);
    vt_kind k;
    if (vt_kind_from_name(kind, &k))
        return vt_fail(VT_ERR_FORMAT, "training state: kind '%.40s' is not a model kind", kind);
    int rc;
    if (m) { /* the model's own config, written as a state writes it */
        char cfg[2048];
        if ((rc = vt_model_config_to_json(&m->cfg, cfg, sizeof cfg))) return rc;
        if (strcmp(cfg, mcfg))
            return vt_fail(VT_ERR_MISMATCH, "the training state is of another model: %s (this model: %s)",
                           mcfg, cfg);
        sm->cfg = m->cfg;
    } else if ((rc = vt_model_config_from_json(mcfg, strlen(mcfg), k, &sm->cfg)) ||
               (rc = vt_config_validate(&sm->cfg))) {
        char why[700];
        snprintf(why, sizeof why, "%s", vt_last_error());
        return vt_fail(VT_ERR_FORMAT, "training state: model_config: %s", why);
    }
    if (sm->cfg.kind != k)
        return vt_fail(VT_ERR_FORMAT, "training state: kind '%s' is not its model_config's", kind);
    /* decimal digits by hand: no errno, which is thread-local and so absent from the shared-memory
     * wasi build (clang-14: "only -ftls-model=local-exec is supported") */
    long long st = 0;
    const char *d = step;
    for (; *d >= '0' && *d <= '9' && st <= VT_MAX_STEPS; d++) st = st * 10 + (*d - '0');
    if (d == step || *d || st > VT_MAX_STEPS)
        return vt_fail(VT_ERR_FORMAT, "training state: step '%.40s' is not an integer in 0..%ld", step,
                       (long)VT_MAX_STEPS);
    sm->step = (long)st;
    int hex = strlen(rng) == 32;
    for (int i = 0; hex && i < 32; i++)
        hex = (rng[i] >= '0' && rng[i] <= '9') || (rng[i] >= 'a' && rng[i] <= 'f');
    if (!hex) return vt_fail(VT_ERR_FORMAT, "training state: rng '%.40s' is not 32 hex digits", rng);
    for (int i = 0; i < 4; i++) {
        uint32_t w = 0;
        for (int c = 0; c < 8; c++)
            w = w * 16 + (uint32_t)(rng[8 * i + c] <= '9' ? rng[8 * i + c] - '0' : rng[8 * i + c] - 'a' + 10);
        sm->rng.s[i] = w;
    }
    if (!(sm->rng.s[0] | sm->rng.s[1] | sm->rng.s[2] | sm->rng.s[3]))
        return vt_fail(VT_ERR_FORMAT,
                       "training state: rng is all zero (a generator in that state draws nothing but zeros)");
    vt_json *tj = NULL;
    if ((rc = vt_json_parse_field(tcfg, strlen(tcfg), "training state: train_config", &tj))) return rc;
    double v[10];
    const char *keys[] = { "lr",           "beta1",       "beta2",     "eps",        "weight_decay",
                           "warmup_steps", "total_steps", "clip_norm", "mask_ratio", "seed" };
    const double hi[] = { VT_MAX_LR,          1, 1, 1e30, 1e30, VT_MAX_STEPS, VT_MAX_STEPS, 1e30, 1,
                          (double)VT_MAX_SEED };
    if (tj->type != VT_JSON_OBJECT)
        rc = vt_fail(VT_ERR_FORMAT, "training state: train_config is not a JSON object");
    for (int i = 0; i < 10 && !rc; i++) rc = num(tj, keys[i], 0, hi[i], &v[i]);
    for (int i = 5; i < 10 && !rc; i++)
        if (i != 7 && i != 8 && v[i] != floor(v[i]))
            rc = vt_fail(VT_ERR_FORMAT, "training state: train_config.%s must be an integer", keys[i]);
    /* absent in states written before the classifier (label_smoothing) and before min_lr / grad_accum */
    double opt[3] = { 0, 0, 1 };
    const char *okeys[3] = { "label_smoothing", "min_lr", "grad_accum" };
    const double ohi[3] = { 1, VT_MAX_LR, VT_MAX_ACCUM };
    for (int i = 0; i < 3 && !rc; i++)
        if (vt_json_get(tj, okeys[i])) rc = num(tj, okeys[i], 0, ohi[i], &opt[i]);
    if (!rc && opt[2] != floor(opt[2]))
        rc = vt_fail(VT_ERR_FORMAT, "training state: train_config.grad_accum must be an integer");
    vt_json_free(tj);
    if (rc) return rc;
    sm->t = (vt_train_config){ (float)v[0],   (float)v[1],   (float)v[2], (float)v[3], (float)v[4],
                               (long)v[5],    (long)v[6],    (float)v[7], (float)v[8], (uint64_t)v[9],
                               (float)opt[0], (float)opt[1], (int)opt[2] };
    if ((rc = check_train_config(&sm->t))) {
        char why[700];
        snprintf(why, sizeof why, "%s", vt_last_error());
        return vt_fail(VT_ERR_FORMAT, "training state: %s", why);
    }
    return verify_checksums(f);
}

vt_status vt_train_state_check(const uint8_t *bytes, size_t len) {
    if (!bytes) return vt_fail(VT_ERR_ARG, "vt_train_state_check: NULL argument");
    vt_st_file f;
    int rc = vt_st_parse(bytes, len, &f);
    if (rc) return rc;
    state_meta sm;
    rc = check_state_meta(&f, NULL, &sm);
    vt_st_free(&f);
    return rc;
}

vt_status vt_train_state_load(vt_model *m, const uint8_t *bytes, size_t len) {
    if (!m || !bytes) return vt_fail(VT_ERR_ARG, "vt_train_state_load: NULL argument");
    vt_st_file f;
    int rc = vt_st_parse(bytes, len, &f);
    if (rc) return rc;
    float *nm = NULL, *nv = NULL, *np = NULL;
    state_meta sm;
    if ((rc = check_state_meta(&f, m, &sm))) goto done;
    const vt_train_config t = sm.t;
    /* every tensor checked and converted before anything of the model changes */
    size_t P = m->pt.total, G = m->pt.gtotal;
    np = malloc((P + 1) * sizeof *np);
    nm = malloc((G + 1) * sizeof *nm);
    nv = malloc((G + 1) * sizeof *nv);
    if (!np || !nm || !nv) {
        rc = vt_fail(VT_ERR_NOMEM, "out of memory loading the training state");
        goto done;
    }
    size_t expected = 0;
    for (int i = 0; i < m->pt.n && !rc; i++) {
        const vt_param *p = &m->pt.p[i];
        const char *pfx[3] = { "param/", "adam_m/", "adam_v/" };
        float *dst[3] = { np + p->off, p->goff >= 0 ? nm + p->goff : NULL,
                          p->goff >= 0 ? nv + p->goff : NULL };
        for (int j = 0; j < 3 && !rc; j++) {
            if (!dst[j]) continue;
            char key[VT_NAME_MAX + 16];
            snprintf(key, sizeof key, "%s%s", pfx[j], p->name);
            const vt_st_tensor *tt = vt_st_find(&f, key);
            expected++;
            if (!tt)
                rc = vt_fail(VT_ERR_MISMATCH,
                             "training state: missing '%s' (was the parameter frozen differently?)", key);
            else if (tt->numel != p->numel)
                rc = vt_fail(VT_ERR_MISMATCH, "training state: '%s' has %zu values, expected %zu", key,
                             tt->numel, p->numel);
            else
                rc = vt_st_to_f32(tt, dst[j]);
        }
    }
    if (!rc && expected != f.n)
        rc =
            vt_fail(VT_ERR_MISMATCH,
                    "training state: %zu tensors, expected %zu (trainable parameters differ)", f.n, expected);
    if (rc) goto done;
    /* the values are a state to go on from: finite, second moments >= 0 (a CRC says only that they
     * are what was written) */
    char bad[300];
    if (vt_state_bad_value(m, np, nm, nv, bad, sizeof bad)) {
        rc = vt_fail(VT_ERR_FORMAT, "training state: %s", bad);
        goto done;
    }
    if (!m->train.on || m->opt.n != G) {
        vt_adamw_config oc = { t.lr, t.beta1, t.beta2, t.eps, t.weight_decay };
        if ((rc = vt_optimizer_init(m, &oc))) goto done;
    }
    vt_k_copy2d(m, m->pt.data, np, 1, (int64_t)P, 0, 0);
    vt_k_copy2d(m, m->opt.m, nm, 1, (int64_t)G, 0, 0);
    vt_k_copy2d(m, m->opt.v, nv, 1, (int64_t)G, 0, 0);
    m->opt.cfg = (vt_adamw_config){ t.lr, t.beta1, t.beta2, t.eps, t.weight_decay };
    m->opt.t = sm.step;
    m->opt.bad = 0;
    m->train.cfg = t;
    m->train.rng = sm.rng;
    m->train.on = 1;
    m->last.have_fwd = 0;
done:
    free(np);
    free(nm);
    free(nv);
    vt_st_free(&f);
    return rc;
}
