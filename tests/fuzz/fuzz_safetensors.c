/* fuzz_safetensors: the safetensors reader on any bytes; what it accepts must convert (every
 * dtype it admits), write back and parse again to the same names, dtypes, shapes, bytes and
 * metadata (the writer is the reader's inverse on everything the reader accepts). */
#include "safetensors.h"
#include "status.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vt_st_file f;
    if (vt_st_parse(data, size, &f)) return 0;
    for (size_t i = 0; i < f.n; i++) { /* conversion of every tensor: no read past its bytes */
        const vt_st_tensor *t = &f.tensors[i];
        void *buf = malloc(t->numel * 8 + 8);
        if (!buf) abort();
        if (vt_st_to_f32(t, buf) && vt_st_to_i64(t, buf)) abort(); /* one of the two must take it */
        free(buf);
    }
    vt_st_entry *e = calloc(f.n + 1, sizeof *e);
    if (!e) abort();
    for (size_t i = 0; i < f.n; i++)
        e[i] = (vt_st_entry){ f.tensors[i].name, f.tensors[i].dtype, f.tensors[i].ndim, f.tensors[i].shape,
                              f.tensors[i].data };
    uint8_t *out = NULL;
    size_t len = 0;
    if (vt_st_write(e, f.n, (const char *const *)f.meta_keys, (const char *const *)f.meta_vals, f.n_meta,
                    &out, &len))
        abort(); /* the reader accepted what the writer refuses */
    vt_st_file g;
    if (vt_st_parse(out, len, &g)) abort();
    if (g.n != f.n || g.n_meta != f.n_meta) abort();
    for (size_t i = 0; i < f.n; i++) {
        const vt_st_tensor *a = &f.tensors[i], *b = &g.tensors[i];
        if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->ndim != b->ndim ||
            a->nbytes != b->nbytes || memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->ndim) ||
            (a->nbytes && memcmp(a->data, b->data, a->nbytes)))
            abort();
    }
    for (size_t i = 0; i < f.n_meta; i++) {
        const char *v = vt_st_meta(&g, f.meta_keys[i]);
        if (!v || strcmp(v, f.meta_vals[i])) abort();
    }
    vt_st_free(&g);
    free(out);
    free(e);
    vt_st_free(&f);
    return 0;
}
