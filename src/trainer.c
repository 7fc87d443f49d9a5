/* trainer.c: one MAE or AIM training step, and the training state that makes a run resumable.
 *   step = draw masks (seeded) -> zero grads -> loss forward -> backward -> clip -> AdamW at the
 *          scheduled learning rate
 * A classifier (timm VisionTransformer with num_classes, classify.c) takes the same step with
 * labels instead of masks (vt_train_step_labels).
 * The same seed and data give the same bits whatever the checkpointing policy, and a step that
 * meets a non-finite loss or gradient changes nothing (parameters, optimizer, generator, step
 * count stay at the last good state). The state (parameters, AdamW m/v, step, generator, both
 * configs) round-trips through safetensors bytes; writing them to disk atomically is the
 * caller's part (web/train.js writes a temporary file and renames it). */
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
}

/* Every field range-checked (they also arrive from checkpoints, i.e. from untrusted files): finite
 * floats only (a checkpoint must never hold "inf", which is not JSON), step counts that fit the
 * 32-bit long of wasm, a seed exactly representable as a JSON (double) number. */
static int check_train_config(const vt_train_config *t) {
    if (!(t->lr >= 0 && t->lr <= VT_MAX_LR) || !(t->clip_norm >= 0 && isfinite(t->clip_norm)) ||
        !(t->mask_ratio >= 0 && t->mask_ratio < 1) || !(t->weight_decay >= 0 && isfinite(t->weight_decay)) ||
        !(t->eps >= 0 && isfinite(t->eps)) || !(t->beta1 >= 0 && t->beta1 < 1) || !(t->beta2 >= 0 && t->beta2 < 1) ||
        !(t->label_smoothing >= 0 && t->label_smoothing < 1))
        return vt_fail(VT_ERR_ARG, "training config: needs 0 <= lr <= %g, finite clip_norm, weight_decay, eps >= 0, "
                                   "0 <= mask_ratio, beta1, beta2, label_smoothing < 1 (got lr %g, clip_norm %g, weight_decay %g, "
                                   "eps %g, mask_ratio %g, betas %g %g, label_smoothing %g)", VT_MAX_LR, t->lr, t->clip_norm,
                       t->weight_decay, t->eps, t->mask_ratio, t->beta1, t->beta2, t->label_smoothing);
    if (t->warmup_steps < 0 || t->warmup_steps > VT_MAX_STEPS || t->total_steps < 0 || t->total_steps > VT_MAX_STEPS)
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
        return vt_fail(VT_ERR_ARG, "training needs an MAE or AIM model, or a timm classifier (num_classes > 0)");
    int rc = check_train_config(t);
    if (rc) return rc;
    vt_adamw_config oc = {t->lr, t->beta1, t->beta2, t->eps, t->weight_decay};
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
    return t->lr * vt_cosine_warmup(step, (double)t->warmup_steps, (double)t->total_steps);
}

/* mask buffers grow with the largest batch seen (allocation happens before the step's work) */
static int masks_reserve(vt_model *m, int B) {
    uint64_t need64 = (uint64_t)B * (uint64_t)m->enc.T_full; /* 64-bit: wasm's size_t would wrap */
    if (need64 > SIZE_MAX / sizeof(int64_t))
        return vt_fail(VT_ERR_NOMEM, "out of memory: masks of batch %d x %d tokens exceed the address space", B, m->enc.T_full);
    size_t need = (size_t)need64;
    if (need <= m->train.cap) return VT_OK;
    int64_t *k = realloc(m->train.keep, need * sizeof *k);
    if (k) m->train.keep = k;
    int64_t *q = k ? realloc(m->train.masked, need * sizeof *q) : NULL;
    if (q) m->train.masked = q;
    uint8_t *b = q ? realloc(m->train.prefix, need) : NULL;
    if (b) m->train.prefix = b;
    if (!b) return vt_fail(VT_ERR_NOMEM, "out of memory: %llu bytes for masks", (unsigned long long)need64 * 17);
    m->train.cap = need;
    return VT_OK;
}

/* zero grads -> loss forward -> backward -> clip -> AdamW; on failure the generator goes back to
 * `saved` (the next try draws the same masks) and a numeric failure names the step */
static vt_status step_on(vt_model *m, const vt_inputs *in, vt_rng saved, float *loss) {
    vt_zero_grad(m);
    vt_status rc = vt_forward(m, VT_FN_LOSS, in, 1);
    if (!rc) rc = vt_backward(m, NULL, 0, NULL, 1);
    if (!rc && m->train.cfg.clip_norm > 0) rc = vt_clip_grad_norm(m, m->train.cfg.clip_norm, NULL);
    if (!rc) rc = vt_optimizer_apply(m, vt_train_lr(m, m->opt.t), 1); /* checks the loss and gradients first */
    if (loss) *loss = m->sc.loss;
    if (rc) {
        m->train.rng = saved;
        if (rc == VT_ERR_NUMERIC) {
            char msg[900];
            snprintf(msg, sizeof msg, "%s", vt_last_error());
            vt_fail(VT_ERR_NUMERIC, "training stopped at step %ld: %s; the last good state is kept", m->opt.t, msg);
        }
    }
    return rc;
}

/* A step's checks and inputs: labels (a classifier) or masks drawn from the generator (its state
 * before them in *saved, for a step that fails: the next try draws the same masks). who: the
 * public call, for its messages. */
static vt_status step_inputs(vt_model *m, const float *images, const int32_t *labels, int batch, const char *who,
                             vt_inputs *in, vt_rng *saved) {
    if (!m || !images || (!strcmp(who, "vt_train_step_labels") && !labels))
        return vt_fail(VT_ERR_ARG, "%s: NULL argument", who);
    if (!m->train.on) return vt_fail(VT_ERR_STATE, "call vt_trainer_init first");
    if (labels && !m->obj->labels)
        return vt_fail(VT_ERR_ARG, "labels train a classifier (timm, num_classes > 0); an MAE / AIM model takes vt_train_step");
    if (!labels && m->obj->labels) return vt_fail(VT_ERR_ARG, "a classifier trains on labels: vt_train_step_labels");
    if (batch < 1) return vt_fail(VT_ERR_ARG, "batch must be >= 1, got %d", batch);
    int rc = labels ? VT_OK : masks_reserve(m, batch);
    if (rc) return rc;
    *saved = m->train.rng;
    vt_step_draw draw = {&m->train.rng, m->train.keep, m->train.masked, m->train.prefix};
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

vt_status vt_train_step_begin(vt_model *m, const float *images, const int32_t *labels, int batch, vt_inputs *in,
                              vt_scalars *sc) {
    if (!in || !sc) return vt_fail(VT_ERR_ARG, "vt_train_step_begin: NULL argument");
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
        return vt_fail(VT_ERR_NUMERIC, "training stopped at step %ld: the loss or a gradient is not finite; the last "
                                       "good state is kept", m->opt.t);
    }
    m->opt.t++;
    return VT_OK;
}

/* ---- training state <-> safetensors bytes ------------------------------------------------- */

#define TRAIN_FORMAT "vitrine-train/1"

static int train_config_json(const vt_train_config *t, char *buf, size_t len) {
    int rc = check_train_config(t); /* never write a non-JSON number (inf, nan) */
    if (rc) return rc;
    int n = snprintf(buf, len,
                     "{\"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, \"weight_decay\": %.9g, "
                     "\"warmup_steps\": %ld, \"total_steps\": %ld, \"clip_norm\": %.9g, \"mask_ratio\": %.9g, "
                     "\"seed\": %llu, \"label_smoothing\": %.9g}",
                     t->lr, t->beta1, t->beta2, t->eps, t->weight_decay, t->warmup_steps, t->total_steps, t->clip_norm,
                     t->mask_ratio, (unsigned long long)t->seed, t->label_smoothing);
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
        w += sprintf(w, "%s\"%s\": \"%08x\"", i ? ", " : "", e[i].name, (unsigned)vt_crc32(e[i].data, elem_bytes(&e[i])));
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
        if (!v || v->type != VT_JSON_STRING) rc = vt_fail(VT_ERR_FORMAT, "training state: no checksum for '%s'", t->name);
        else if (strcmp(v->str, want))
            rc = vt_fail(VT_ERR_FORMAT, "training state: tensor '%s' is damaged (crc32 %s, recorded %.16s)", t->name, want, v->str);
    }
    vt_json_free(j);
    return rc;
}

vt_status vt_train_state_save(const vt_model *m, uint8_t **out, size_t *out_len) {
    if (!m || !out || !out_len) return vt_fail(VT_ERR_ARG, "vt_train_state_save: NULL argument");
    if (!m->train.on) return vt_fail(VT_ERR_STATE, "no training state: call vt_trainer_init first");
    int n = m->pt.n, k = 0, rc;
    vt_st_entry *e = calloc((size_t)3 * n + 1, sizeof *e);
    char (*names)[VT_NAME_MAX + 16] = calloc((size_t)3 * n + 1, sizeof *names);
    long long (*shapes)[4] = calloc((size_t)n + 1, sizeof *shapes);
    char cfg[2048], tcfg[512], step[32], rng[48], *sums = NULL;
    if (!e || !names || !shapes) { rc = vt_fail(VT_ERR_NOMEM, "out of memory saving the training state"); goto done; }
    for (int i = 0; i < n; i++) {
        const vt_param *p = &m->pt.p[i];
        for (int d = 0; d < p->ndim; d++) shapes[i][d] = p->shape[d];
        const char *pfx[3] = {"param/", "adam_m/", "adam_v/"};
        const float *src[3] = {m->pt.data + p->off, p->goff >= 0 ? m->opt.m + p->goff : NULL,
                               p->goff >= 0 ? m->opt.v + p->goff : NULL};
        for (int j = 0; j < 3; j++) {
            if (!src[j]) continue;
            snprintf(names[k], sizeof names[k], "%s%s", pfx[j], p->name);
            e[k] = (vt_st_entry){names[k], VT_DT_F32, p->ndim, shapes[i], src[j]};
            k++;
        }
    }
    rc = vt_model_config_to_json(&m->cfg, cfg, sizeof cfg);
    if (!rc) rc = train_config_json(&m->train.cfg, tcfg, sizeof tcfg);
    if (!rc) rc = checksums_json(e, (size_t)k, &sums);
    if (rc) goto done;
    snprintf(step, sizeof step, "%ld", m->opt.t);
    snprintf(rng, sizeof rng, "%08x%08x%08x%08x", m->train.rng.s[0], m->train.rng.s[1], m->train.rng.s[2], m->train.rng.s[3]);
    const char *mk[] = {"format", "kind", "model_config", "train_config", "step", "rng", "grad_checkpointing", "crc32"};
    const char *mv[] = {TRAIN_FORMAT, vt_kind_name(m->cfg.kind), cfg, tcfg, step, rng, m->policy.text, sums};
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
    if (!j || j->type != VT_JSON_NUMBER) return vt_fail(VT_ERR_FORMAT, "training state: train_config needs '%s'", k);
    if (!(j->number >= lo && j->number <= hi))
        return vt_fail(VT_ERR_FORMAT, "training state: train_config '%s' = %g is outside %g..%g", k, j->number, lo, hi);
    *v = j->number;
    return VT_OK;
}

vt_status vt_train_state_load(vt_model *m, const uint8_t *bytes, size_t len) {
    if (!m || !bytes) return vt_fail(VT_ERR_ARG, "vt_train_state_load: NULL argument");
    vt_st_file f;
    int rc = vt_st_parse(bytes, len, &f);
    if (rc) return rc;
    vt_json *tj = NULL;
    float *nm = NULL, *nv = NULL, *np = NULL;
    char cfg[2048];
    const char *fmt = vt_st_meta(&f, "format"), *mcfg = vt_st_meta(&f, "model_config");
    const char *tcfg = vt_st_meta(&f, "train_config"), *step = vt_st_meta(&f, "step"), *rng = vt_st_meta(&f, "rng");
    if (!fmt || strcmp(fmt, TRAIN_FORMAT)) { rc = vt_fail(VT_ERR_FORMAT, "not a vitrine training state (format %s)", fmt ? fmt : "missing"); goto done; }
    if (!mcfg || !tcfg || !step || !rng || strlen(rng) != 32) { rc = vt_fail(VT_ERR_FORMAT, "training state metadata incomplete"); goto done; }
    if ((rc = verify_checksums(&f))) goto done;
    rc = vt_model_config_to_json(&m->cfg, cfg, sizeof cfg);
    if (rc) goto done;
    if (strcmp(cfg, mcfg)) { rc = vt_fail(VT_ERR_MISMATCH, "the training state is of another model: %s (this model: %s)", mcfg, cfg); goto done; }
    /* decimal digits by hand: no errno, which is thread-local and so absent from the shared-memory
     * wasi build (clang-14: "only -ftls-model=local-exec is supported") */
    long long st = 0;
    const char *d = step;
    for (; *d >= '0' && *d <= '9' && st <= VT_MAX_STEPS; d++) st = st * 10 + (*d - '0');
    if (d == step || *d || st > VT_MAX_STEPS) {
        rc = vt_fail(VT_ERR_FORMAT, "training state: step '%.40s' is not an integer in 0..%ld", step, (long)VT_MAX_STEPS);
        goto done;
    }
    vt_rng r;
    for (int i = 0; i < 4; i++) {
        char h[9];
        memcpy(h, rng + 8 * i, 8);
        h[8] = 0;
        char *end;
        r.s[i] = (uint32_t)strtoul(h, &end, 16);
        if (*end) { rc = vt_fail(VT_ERR_FORMAT, "training state: bad rng '%s'", rng); goto done; }
    }
    rc = vt_json_parse(tcfg, strlen(tcfg), &tj);
    if (rc) goto done;
    vt_train_config t;
    memset(&t, 0, sizeof t);
    double v[10];
    const char *keys[] = {"lr", "beta1", "beta2", "eps", "weight_decay", "warmup_steps", "total_steps", "clip_norm", "mask_ratio", "seed"};
    const double hi[] = {VT_MAX_LR, 1, 1, 1e30, 1e30, VT_MAX_STEPS, VT_MAX_STEPS, 1e30, 1, (double)VT_MAX_SEED};
    for (int i = 0; i < 10 && !rc; i++) rc = num(tj, keys[i], 0, hi[i], &v[i]);
    for (int i = 5; i < 10 && !rc; i++)
        if (i != 7 && i != 8 && v[i] != floor(v[i])) rc = vt_fail(VT_ERR_FORMAT, "training state: %s must be an integer", keys[i]);
    if (rc) goto done;
    t = (vt_train_config){(float)v[0], (float)v[1], (float)v[2], (float)v[3], (float)v[4], (long)v[5], (long)v[6],
                          (float)v[7], (float)v[8], (uint64_t)v[9], 0.0f};
    if (vt_json_get(tj, "label_smoothing")) { /* absent in states written before the classifier */
        double ls = 0;
        if ((rc = num(tj, "label_smoothing", 0, 1, &ls))) goto done;
        t.label_smoothing = (float)ls;
    }
    if ((rc = check_train_config(&t))) goto done;
    /* every tensor checked and converted before anything of the model changes */
    size_t P = m->pt.total, G = m->pt.gtotal;
    np = malloc((P + 1) * sizeof *np);
    nm = malloc((G + 1) * sizeof *nm);
    nv = malloc((G + 1) * sizeof *nv);
    if (!np || !nm || !nv) { rc = vt_fail(VT_ERR_NOMEM, "out of memory loading the training state"); goto done; }
    size_t expected = 0;
    for (int i = 0; i < m->pt.n && !rc; i++) {
        const vt_param *p = &m->pt.p[i];
        const char *pfx[3] = {"param/", "adam_m/", "adam_v/"};
        float *dst[3] = {np + p->off, p->goff >= 0 ? nm + p->goff : NULL, p->goff >= 0 ? nv + p->goff : NULL};
        for (int j = 0; j < 3 && !rc; j++) {
            if (!dst[j]) continue;
            char key[VT_NAME_MAX + 16];
            snprintf(key, sizeof key, "%s%s", pfx[j], p->name);
            const vt_st_tensor *tt = vt_st_find(&f, key);
            expected++;
            if (!tt) rc = vt_fail(VT_ERR_MISMATCH, "training state: missing '%s' (was the parameter frozen differently?)", key);
            else if (tt->numel != p->numel) rc = vt_fail(VT_ERR_MISMATCH, "training state: '%s' has %zu values, expected %zu", key, tt->numel, p->numel);
            else rc = vt_st_to_f32(tt, dst[j]);
        }
    }
    if (!rc && expected != f.n) rc = vt_fail(VT_ERR_MISMATCH, "training state: %zu tensors, expected %zu (trainable parameters differ)", f.n, expected);
    if (rc) goto done;
    if (!m->train.on || m->opt.n != G) {
        vt_adamw_config oc = {t.lr, t.beta1, t.beta2, t.eps, t.weight_decay};
        if ((rc = vt_optimizer_init(m, &oc))) goto done;
    }
    vt_k_copy2d(m, m->pt.data, np, 1, (int64_t)P, 0, 0);
    vt_k_copy2d(m, m->opt.m, nm, 1, (int64_t)G, 0, 0);
    vt_k_copy2d(m, m->opt.v, nv, 1, (int64_t)G, 0, 0);
    m->opt.cfg = (vt_adamw_config){t.lr, t.beta1, t.beta2, t.eps, t.weight_decay};
    m->opt.t = (long)st;
    m->train.cfg = t;
    m->train.rng = r;
    m->train.on = 1;
    m->last.have_fwd = 0;
done:
    free(np);
    free(nm);
    free(nv);
    vt_json_free(tj);
    vt_st_free(&f);
    return rc;
}
