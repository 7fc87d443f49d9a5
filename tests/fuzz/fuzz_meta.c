/* fuzz_meta: the checks of a training state's metadata (trainer.c check_state_meta: format, kind,
 * model_config, train_config, step, rng, crc32), fed directly: the input is a trainer (byte 0: MAE,
 * AIM, classifier) and metadata entries "key\0value\0..."; the harness puts them on that trainer's
 * own tensors with valid CRC-32s (unless the input names a crc32 of its own), so every input
 * reaches the metadata checks, which mutations of whole files (fuzz_checkpoint) seldom do. What
 * loads also passes the check without a model (vt_train_state_check); a refused load changes
 * nothing; an accepted one is good and saves again. Seeds: the entries vitrine writes. */
#include "fuzz_trainer.h"
#include <stdint.h>

#define MAX_META 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 16) return 0;
    int k = data[0] % FZ_TRAINERS;
    fz_trainer *t = fz_trainer_get(k);
    /* the entries: NUL-separated key / value pairs (a key repeated: the first one) */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    const char *keys[MAX_META + 1], *vals[MAX_META + 1];
    size_t n = 0, p = 0, end = size - 1;
    int own_crc = 0;
    while (p < end && n < MAX_META) {
        const char *k8 = text + p;
        p += strlen(k8) + 1;
        if (p > end) break;
        const char *v8 = text + p;
        p += strlen(v8) + 1;
        int dup = !k8[0];
        for (size_t i = 0; i < n && !dup; i++) dup = !strcmp(keys[i], k8);
        if (dup) continue;
        own_crc |= !strcmp(k8, "crc32");
        keys[n] = k8;
        vals[n++] = v8;
    }
    /* the trainer's own tensors under those entries */
    vt_st_file f;
    if (vt_st_parse(t->start, t->start_len, &f)) abort();
    vt_st_entry e[256];
    if (f.n > 256) abort();
    for (size_t i = 0; i < f.n; i++)
        e[i] = (vt_st_entry){ f.tensors[i].name, f.tensors[i].dtype, f.tensors[i].ndim, f.tensors[i].shape,
                              f.tensors[i].data };
    uint8_t *file = NULL, *fixed = NULL;
    size_t len = 0, fixed_len = 0;
    if (!vt_st_write(e, f.n, keys, vals, n, &file,
                     &len)) { /* (keys that are not UTF-8 are the writer's to refuse) */
        const uint8_t *in = file;
        size_t in_len = len;
        if (!own_crc && !fz_fix_crcs(file, len, &fixed, &fixed_len)) {
            in = fixed;
            in_len = fixed_len;
        }
        /* what loads passes the check without a model (vt_train_state_check) too */
        int checked = vt_train_state_check(in, in_len), loaded = fz_load_checked(k, in, in_len);
        if (!loaded && checked) abort(); /* loaded what the check refuses */
        if (!loaded) fz_restart(k);
    }
    free(file);
    free(fixed);
    vt_st_free(&f);
    free(text);
    return 0;
}
