/* fuzz_trainer.h: what the harnesses that feed training states share (fuzz_checkpoint, fuzz_train,
 * fuzz_meta): tiny trainers of every kind with their start state, and a snapshot of everything a
 * refused load or a failed step must leave as it was. */
#ifndef VT_FUZZ_TRAINER_H
#define VT_FUZZ_TRAINER_H
#include "fuzz_common.h"
#include "vit_internal.h"
#include <math.h>

#define FZ_TRAINERS 3 /* 0 MAE, 1 AIM, 2 a classifier (timm, num_classes 3, label smoothing 0.1) */
typedef struct {
    vt_model *m;
    uint8_t *start;
    size_t start_len;
} fz_trainer;

static inline fz_trainer *fz_trainer_get(int k) {
    static fz_trainer t[FZ_TRAINERS];
    static const vt_kind kinds[FZ_TRAINERS] = { VT_KIND_MAE, VT_KIND_AIM, VT_KIND_TIMM };
    if (!t[k].m) {
        t[k].m = fz_tiny_model(kinds[k]);
        vt_train_config c;
        vt_train_config_default(&c, kinds[k]);
        if (kinds[k] == VT_KIND_TIMM) c.label_smoothing = 0.1f;
        if (vt_trainer_init(t[k].m, &c) || vt_train_state_save(t[k].m, &t[k].start, &t[k].start_len)) abort();
        if (t[k].m->pt.total > (1 << 16) || t[k].m->opt.n > (1 << 16)) abort(); /* fz_snap's buffers */
    }
    return &t[k];
}

typedef struct {
    long t;
    vt_rng rng;
    vt_train_config tc;
} fz_snap;
static float fz_p[1 << 16], fz_m[1 << 16], fz_v[1 << 16];
static inline void fz_snap_take(const vt_model *m, fz_snap *s) {
    memcpy(fz_p, m->pt.data, m->pt.total * sizeof(float));
    memcpy(fz_m, m->opt.m, m->opt.n * sizeof(float));
    memcpy(fz_v, m->opt.v, m->opt.n * sizeof(float));
    s->t = m->opt.t;
    s->rng = m->train.rng;
    s->tc = m->train.cfg;
}
static inline int fz_snap_same(const vt_model *m, const fz_snap *s) {
    const vt_train_config *a = &m->train.cfg, *b = &s->tc;
    return !memcmp(m->pt.data, fz_p, m->pt.total * sizeof(float)) &&
           !memcmp(m->opt.m, fz_m, m->opt.n * sizeof(float)) &&
           !memcmp(m->opt.v, fz_v, m->opt.n * sizeof(float)) && m->opt.t == s->t &&
           !memcmp(&m->train.rng, &s->rng, sizeof s->rng) && a->lr == b->lr && a->beta1 == b->beta1 &&
           a->beta2 == b->beta2 && a->eps == b->eps && a->weight_decay == b->weight_decay &&
           a->warmup_steps == b->warmup_steps && a->total_steps == b->total_steps &&
           a->clip_norm == b->clip_norm && a->mask_ratio == b->mask_ratio && a->seed == b->seed &&
           a->label_smoothing == b->label_smoothing;
}

/* every parameter and AdamW moment finite, every second moment >= 0 */
static inline int fz_state_good(const vt_model *m) {
    for (size_t i = 0; i < m->pt.total; i++)
        if (!isfinite(m->pt.data[i])) return 0;
    for (size_t i = 0; i < m->opt.n; i++)
        if (!isfinite(m->opt.m[i]) || !isfinite(m->opt.v[i]) || m->opt.v[i] < 0) return 0;
    return 1;
}

/* Loads state bytes into trainer k: refused, nothing may change; accepted, the state is good and
 * saves to bytes that load again. Returns the load's status. */
static inline int fz_load_checked(int k, const uint8_t *bytes, size_t len) {
    vt_model *m = fz_trainer_get(k)->m;
    fz_snap s;
    fz_snap_take(m, &s);
    int rc = vt_train_state_load(m, bytes, len);
    if (rc) {
        if (!fz_snap_same(m, &s)) abort(); /* refused, yet changed */
        return rc;
    }
    if (!fz_state_good(m)) abort(); /* a non-finite (or negative second-moment) state accepted */
    uint8_t *out = NULL;
    size_t n = 0;
    if (vt_train_state_save(m, &out, &n)) abort(); /* loaded what it would not write */
    if (vt_train_state_load(m, out, n)) abort();
    vt_free(out);
    return rc;
}

/* back to trainer k's start state */
static inline void fz_restart(int k) {
    fz_trainer *t = fz_trainer_get(k);
    if (vt_train_state_load(t->m, t->start, t->start_len)) abort();
}
#endif
