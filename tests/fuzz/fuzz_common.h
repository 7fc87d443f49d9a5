/* fuzz_common.h: what the libFuzzer harnesses (tests/fuzz/fuzz_*.c) and their seed writer share:
 * the tiny models whose weights / training states are fuzzed, and the size filter of the parity
 * harness (a valid config may ask for gigabytes; the fuzzer explores file handling, not sizes,
 * which tests/test_hardening.c covers). Built only in the sanitizer build (scripts/test.sh). */
#ifndef VT_FUZZ_COMMON_H
#define VT_FUZZ_COMMON_H
#include "vitrine.h"
#include <stdlib.h>
#include <string.h>

/* img 8, patch 4 (4 patches), embed 8, depth 1, 2 heads; MAE decoder 8 wide, AIM head 8 */
static inline void fz_tiny_config(vt_model_config *c, vt_kind kind) {
    vt_model_config_default(c, kind);
    c->enc.img_size = 8;
    c->enc.patch_size = 4;
    c->enc.in_chans = 3;
    c->enc.embed_dim = 8;
    c->enc.depth = 1;
    c->enc.num_heads = 2;
    c->enc.mlp_ratio = 2.0f;
    c->enc.num_classes = 0;
    if (kind == VT_KIND_TIMM) c->enc.num_classes = 3;
    c->decoder_dim = 8;
    c->decoder_depth = 1;
    c->decoder_heads = 2;
    c->decoder_mlp_ratio = 2.0f;
    c->head_hidden_dim = 8;
    c->head_blocks = 1;
    c->head_mlp_ratio = 2.0f;
}

static inline vt_model *fz_tiny_model(vt_kind kind) {
    vt_model_config c;
    fz_tiny_config(&c, kind);
    vt_model *m = NULL;
    if (vt_model_create(&c, &m) || vt_init_weights(m, 1)) abort();
    return m;
}

/* A training state with the CRC-32 of every tensor written afresh into its "crc32" metadata
 * (entries and tensors otherwise as they are): a mutated state then reaches the checks behind the
 * CRCs. *out is malloc'd; -1 when the bytes are not safetensors (or cannot be written back). */
#include "safetensors.h"
#include <stdio.h>
static inline int fz_fix_crcs(const uint8_t *data, size_t size, uint8_t **out, size_t *out_len) {
    vt_st_file f;
    if (vt_st_parse(data, size, &f)) return -1;
    size_t cap = 3;
    for (size_t i = 0; i < f.n; i++) cap += 6 * strlen(f.tensors[i].name) + 20;
    char *sums = malloc(cap), *w = sums;
    vt_st_entry *e = calloc(f.n + 1, sizeof *e);
    const char **mk = calloc(f.n_meta + 1, sizeof *mk), **mv = calloc(f.n_meta + 1, sizeof *mv);
    int rc = -1;
    if (!sums || !e || !mk || !mv) goto done;
    *w++ = '{';
    for (size_t i = 0; i < f.n; i++) { /* "name": "crc", the name JSON-escaped */
        const vt_st_tensor *t = &f.tensors[i];
        w += sprintf(w, "%s\"", i ? ", " : "");
        for (const unsigned char *c = (const unsigned char *)t->name; *c; c++)
            w += *c == '"' || *c == '\\' ? sprintf(w, "\\%c", *c)
                 : *c < 0x20             ? sprintf(w, "\\u%04x", *c)
                                         : sprintf(w, "%c", *c);
        w += sprintf(w, "\": \"%08x\"", (unsigned)vt_crc32(t->data, t->nbytes));
        e[i] = (vt_st_entry){ t->name, t->dtype, t->ndim, t->shape, t->data };
    }
    strcpy(w, "}");
    size_t nm = 0;
    for (size_t i = 0; i < f.n_meta; i++)
        if (strcmp(f.meta_keys[i], "crc32")) {
            mk[nm] = f.meta_keys[i];
            mv[nm++] = f.meta_vals[i];
        }
    mk[nm] = "crc32";
    mv[nm++] = sums;
    rc = vt_st_write(e, f.n, mk, mv, nm, out, out_len) ? -1 : 0;
done:
    free(sums);
    free(e);
    free(mk);
    free(mv);
    vt_st_free(&f);
    return rc;
}

/* parity files the harness runs: models of at most these sizes (else the input is skipped) */
static inline int fz_small_enough(const vt_model_config *c) {
    const vt_vit_config *e = &c->enc;
    int enc = e->img_size <= 32 && e->in_chans <= 4 && e->embed_dim <= 32 && e->depth <= 3 &&
              e->mlp_ratio <= 8 && e->num_classes <= 32 && e->reg_tokens <= 4;
    if (c->kind == VT_KIND_MAE)
        return enc && c->decoder_dim <= 32 && c->decoder_depth <= 3 && c->decoder_mlp_ratio <= 8;
    if (c->kind == VT_KIND_AIM)
        return enc && c->head_hidden_dim <= 32 && c->head_blocks <= 3 && c->head_mlp_ratio <= 8;
    return enc; /* the decoder / head sizes of other kinds are defaults that are never built */
}
#endif
