/* fuzz_checkpoint: training states (vitrine-train/1) into a tiny MAE and AIM trainer: a refused
 * state leaves parameters, AdamW state, step, generator and schedule as they were; an accepted
 * one saves again (never a non-JSON number) and that loads. */
#include "fuzz_common.h"
#include "vit_internal.h"
#include <stdint.h>

static vt_model *models[2];
static uint8_t *start[2];
static size_t start_len[2];

static int same(const vt_model *a, const float *p, const float *mm, const float *vv, long t, vt_rng rng, vt_train_config tc) {
    return !memcmp(a->pt.data, p, a->pt.total * sizeof(float)) && !memcmp(a->opt.m, mm, a->opt.n * sizeof(float)) &&
           !memcmp(a->opt.v, vv, a->opt.n * sizeof(float)) && a->opt.t == t && !memcmp(&a->train.rng, &rng, sizeof rng) &&
           a->train.cfg.lr == tc.lr && a->train.cfg.beta1 == tc.beta1 && a->train.cfg.beta2 == tc.beta2 && a->train.cfg.eps == tc.eps &&
           a->train.cfg.weight_decay == tc.weight_decay && a->train.cfg.warmup_steps == tc.warmup_steps && a->train.cfg.total_steps == tc.total_steps &&
           a->train.cfg.clip_norm == tc.clip_norm && a->train.cfg.mask_ratio == tc.mask_ratio && a->train.cfg.seed == tc.seed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int k = 0; k < 2; k++) {
        if (!models[k]) {
            models[k] = fz_tiny_model(k ? VT_KIND_AIM : VT_KIND_MAE);
            vt_train_config t;
            vt_train_config_default(&t, k ? VT_KIND_AIM : VT_KIND_MAE);
            if (vt_trainer_init(models[k], &t) || vt_train_state_save(models[k], &start[k], &start_len[k])) abort();
        }
        vt_model *m = models[k];
        static float p[1 << 16], mm[1 << 16], vv[1 << 16];
        if (m->pt.total > (1 << 16) || m->opt.n > (1 << 16)) abort();
        memcpy(p, m->pt.data, m->pt.total * sizeof(float));
        memcpy(mm, m->opt.m, m->opt.n * sizeof(float));
        memcpy(vv, m->opt.v, m->opt.n * sizeof(float));
        long t = m->opt.t;
        vt_rng rng = m->train.rng;
        vt_train_config tc = m->train.cfg;
        int rc = vt_train_state_load(m, data, size);
        if (rc && !same(m, p, mm, vv, t, rng, tc)) abort(); /* refused, yet changed */
        if (!rc) {
            uint8_t *out = NULL;
            size_t len = 0;
            if (vt_train_state_save(m, &out, &len)) abort(); /* loaded what it would not write */
            if (vt_train_state_load(m, out, len)) abort();
            vt_free(out);
            if (vt_train_state_load(m, start[k], start_len[k])) abort();
        }
    }
    return 0;
}
