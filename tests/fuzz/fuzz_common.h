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
    c->enc.img_size = 8; c->enc.patch_size = 4; c->enc.in_chans = 3; c->enc.embed_dim = 8; c->enc.depth = 1;
    c->enc.num_heads = 2; c->enc.mlp_ratio = 2.0f; c->enc.num_classes = 0;
    if (kind == VT_KIND_TIMM) c->enc.num_classes = 3;
    c->decoder_dim = 8; c->decoder_depth = 1; c->decoder_heads = 2; c->decoder_mlp_ratio = 2.0f;
    c->head_hidden_dim = 8; c->head_blocks = 1; c->head_mlp_ratio = 2.0f;
}

static inline vt_model *fz_tiny_model(vt_kind kind) {
    vt_model_config c;
    fz_tiny_config(&c, kind);
    vt_model *m = NULL;
    if (vt_model_create(&c, &m) || vt_init_weights(m, 1)) abort();
    return m;
}

/* parity files the harness runs: models of at most these sizes (else the input is skipped) */
static inline int fz_small_enough(const vt_model_config *c) {
    const vt_vit_config *e = &c->enc;
    int enc = e->img_size <= 32 && e->in_chans <= 4 && e->embed_dim <= 32 && e->depth <= 3 && e->mlp_ratio <= 8 &&
              e->num_classes <= 32 && e->reg_tokens <= 4;
    if (c->kind == VT_KIND_MAE) return enc && c->decoder_dim <= 32 && c->decoder_depth <= 3 && c->decoder_mlp_ratio <= 8;
    if (c->kind == VT_KIND_AIM) return enc && c->head_hidden_dim <= 32 && c->head_blocks <= 3 && c->head_mlp_ratio <= 8;
    return enc; /* the decoder / head sizes of other kinds are defaults that are never built */
}
#endif
