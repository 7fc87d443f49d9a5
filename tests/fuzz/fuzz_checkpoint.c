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
    return !memcmp(a->pt.data, p, a->pt.total * sizeof(float)) && !memcmp(a->opt_m, mm, a->opt_n * sizeof(float)) &&
           !memcmp(a->opt_v, vv, a->opt_n * sizeof(float)) && a->opt_t == t && !memcmp(&a->rng, &rng, sizeof rng) &&
           a->tc.lr == tc.lr && a->tc.beta1 == tc.beta1 && a->tc.beta2 == tc.beta2 && a->tc.eps == tc.eps &&
           a->tc.weight_decay == tc.weight_decay && a->tc.warmup_steps == tc.warmup_steps && a->tc.total_steps == tc.total_steps &&
           a->tc.clip_norm == tc.clip_norm && a->tc.mask_ratio == tc.mask_ratio && a->tc.seed == tc.seed;
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
        if (m->pt.total > (1 << 16) || m->opt_n > (1 << 16)) abort();
        memcpy(p, m->pt.data, m->pt.total * sizeof(float));
        memcpy(mm, m->opt_m, m->opt_n * sizeof(float));
        memcpy(vv, m->opt_v, m->opt_n * sizeof(float));
        long t = m->opt_t;
        vt_rng rng = m->rng;
        vt_train_config tc = m->tc;
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
