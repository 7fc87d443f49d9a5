/* test_state.h: safetensors bytes (a training state) rewritten for the C tests that damage them
 * (test_api.c, test_hardening.c), and whether a model's state is still what it was. After
 * test_util.h and safetensors.h. */
#ifndef VT_TEST_STATE_H
#define VT_TEST_STATE_H

/* The state's bytes again with metadata `key` set to `value` (NULL: dropped), tensor `tensor`
 * (NULL: none) reshaped to [numel] or dropped (numel 0), and a tensor `extra` added; NULL on error. */
static inline uint8_t *tu_restate(const uint8_t *bytes, size_t len, const char *key, const char *value,
                                  const char *tensor, int64_t numel, const char *extra, size_t *out_len) {
    vt_st_file f;
    if (vt_st_parse(bytes, len, &f)) return NULL;
    vt_st_entry *e = tu_xcalloc(f.n + 2, sizeof *e);
    const char **mk = tu_xcalloc(f.n_meta + 1, sizeof *mk), **mv = tu_xcalloc(f.n_meta + 1, sizeof *mv);
    static const float zeros[64];
    static const long long one[1] = { 1 };
    long long shape[1] = { numel };
    size_t n = 0, nm = 0;
    for (size_t i = 0; i < f.n; i++) {
        const vt_st_tensor *t = &f.tensors[i];
        if (tensor && !strcmp(t->name, tensor)) {
            if (numel > 0) e[n++] = (vt_st_entry){ t->name, VT_DT_F32, 1, shape, t->data };
        } else
            e[n++] = (vt_st_entry){ t->name, t->dtype, t->ndim, t->shape, t->data };
    }
    if (extra) e[n++] = (vt_st_entry){ extra, VT_DT_F32, 1, one, zeros };
    for (size_t i = 0; i < f.n_meta; i++) {
        int hit = key && !strcmp(f.meta_keys[i], key);
        if (hit && !value) continue;
        mk[nm] = f.meta_keys[i];
        mv[nm++] = hit ? value : f.meta_vals[i];
    }
    uint8_t *out = NULL;
    if (vt_st_write(e, n, mk, mv, nm, &out, out_len)) out = NULL;
    free(e);
    free(mk);
    free(mv);
    vt_st_free(&f);
    return out;
}

static inline int tu_same_state(vt_model *m, const uint8_t *want, size_t want_len) {
    uint8_t *now = NULL;
    size_t n = 0;
    if (vt_train_state_save(m, &now, &n)) return 0;
    int same = n == want_len && !memcmp(now, want, n);
    free(now);
    return same;
}

#endif
