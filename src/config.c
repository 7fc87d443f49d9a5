/* config.c: model configurations: timm's defaults, timm's named presets, the JSON form (timm
 * VisionTransformer kwargs, as parity files and the CLI give them) and validation. */
#include "json.h"
#include "model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vt_vit_config_default(vt_vit_config *c) {
    memset(c, 0, sizeof *c);
    c->img_size = 224; c->patch_size = 16; c->in_chans = 3; c->embed_dim = 768; c->depth = 12;
    c->num_heads = 12; c->mlp_ratio = 4.0; c->qkv_bias = 1; c->class_token = 1; c->pos_embed = 1;
    strcpy(c->global_pool, "token");
}

void vt_model_config_default(vt_model_config *c, vt_kind kind) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    vt_vit_config_default(&c->enc);
    c->enc.mask_token = kind == VT_KIND_LIGHTLY || kind == VT_KIND_MAE;
    /* lightly MAE example decoder / AIM head sizes (scaled by the caller as it likes) */
    c->decoder_dim = 512; c->decoder_depth = 8; c->decoder_heads = 16; c->decoder_mlp_ratio = 4.0;
    c->head_hidden_dim = 2048; c->head_blocks = 12; c->head_mlp_ratio = 4.0;
    if (kind == VT_KIND_CAUSAL || kind == VT_KIND_AIM) { /* lightly's AIM backbone */
        c->enc.class_token = 0; c->enc.no_embed_class = 1; strcpy(c->enc.global_pool, "avg");
    }
}

static const struct { const char *name; int patch, dim, heads; } presets[] = {
    {"vit_tiny_patch16_224", 16, 192, 3},
    {"vit_small_patch16_224", 16, 384, 6},
    {"vit_base_patch16_224", 16, 768, 12},
    {"vit_base_patch32_224", 32, 768, 12},
};

const char *vt_preset_name(int i) {
    return (i >= 0 && i < (int)(sizeof presets / sizeof presets[0])) ? presets[i].name : NULL;
}

vt_status vt_preset(const char *name, vt_vit_config *c) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (name && !strcmp(name, presets[i].name)) {
            vt_vit_config_default(c);
            c->patch_size = presets[i].patch;
            c->embed_dim = presets[i].dim;
            c->num_heads = presets[i].heads;
            return VT_OK;
        }
    return vt_fail(VT_ERR_ARG, "unknown preset '%s' (vit_tiny_patch16_224, vit_small_patch16_224, "
                               "vit_base_patch16_224, vit_base_patch32_224)", name ? name : "(null)");
}

/* The small training presets for 28x28 grey images (Fashion-MNIST), with their MAE decoder / AIM
 * head: what `vitrine train` and the demo run. Any other name: a timm preset's encoder (vt_preset)
 * in the kind's defaults. */
static const struct {
    const char *name;
    int img, patch, chans, dim, depth, heads;
    double mlp;
} small_presets[] = {
    {"fmnist", 28, 4, 1, 64, 4, 4, 4.0},
    {"fmnist-p7", 28, 7, 1, 128, 4, 4, 4.0},
    {"fmnist-p7-mlp2", 28, 7, 1, 128, 4, 4, 2.0},
    {"fmnist-base", 28, 4, 1, 128, 6, 4, 4.0},
};
#define N_SMALL (int)(sizeof small_presets / sizeof small_presets[0])

const char *vt_model_preset_name(int i) { return i >= 0 && i < N_SMALL ? small_presets[i].name : NULL; }

vt_status vt_model_preset(const char *name, vt_kind kind, vt_model_config *c) {
    vt_model_config_default(c, kind);
    for (int i = 0; i < N_SMALL; i++)
        if (name && !strcmp(name, small_presets[i].name)) {
            c->enc.img_size = small_presets[i].img; c->enc.patch_size = small_presets[i].patch;
            c->enc.in_chans = small_presets[i].chans; c->enc.embed_dim = small_presets[i].dim;
            c->enc.depth = small_presets[i].depth; c->enc.num_heads = small_presets[i].heads;
            c->enc.mlp_ratio = small_presets[i].mlp;
            /* every small preset's MAE decoder and AIM head */
            c->decoder_dim = 64; c->decoder_depth = 2; c->decoder_heads = 4; c->norm_pix_loss = 1;
            c->head_hidden_dim = 128; c->head_blocks = 2;
            return VT_OK;
        }
    vt_vit_config p;
    vt_vit_config_default(&p);
    vt_status rc = vt_preset(name, &p);
    if (rc) return rc;
    c->enc.img_size = p.img_size; c->enc.patch_size = p.patch_size; c->enc.embed_dim = p.embed_dim;
    c->enc.depth = p.depth; c->enc.num_heads = p.num_heads; c->enc.mlp_ratio = p.mlp_ratio;
    return VT_OK;
}

/* ---- JSON ---- */

static int get_int(const vt_json *v, const char *key, int *out) {
    if (v->type == VT_JSON_BOOL) { *out = v->boolean; return VT_OK; }
    if (v->type != VT_JSON_NUMBER || !v->is_integer || v->integer < 0 || v->integer > VT_MAX_DIM)
        return vt_fail(VT_ERR_ARG, "config: %s must be an integer in 0..%d", key, VT_MAX_DIM);
    *out = (int)v->integer;
    return VT_OK;
}
static int get_bool(const vt_json *v, const char *key, int *out) {
    if (v->type != VT_JSON_BOOL) return vt_fail(VT_ERR_ARG, "config: %s must be true or false", key);
    *out = v->boolean;
    return VT_OK;
}
static int get_float(const vt_json *v, const char *key, float *out, int null_ok) {
    if (v->type == VT_JSON_NULL && null_ok) { *out = 0; return VT_OK; }
    if (v->type != VT_JSON_NUMBER || !isfinite(v->number) || v->number < 0)
        return vt_fail(VT_ERR_ARG, "config: %s must be a non-negative number", key);
    *out = (float)v->number;
    return VT_OK;
}
/* ratios stay double, as Python's floats are: the MLP hidden size int(dim * ratio) depends on it */
static int get_double(const vt_json *v, const char *key, double *out) {
    if (v->type != VT_JSON_NUMBER || !isfinite(v->number) || v->number < 0)
        return vt_fail(VT_ERR_ARG, "config: %s must be a non-negative number", key);
    *out = v->number;
    return VT_OK;
}
/* a timm kwarg vitrine does not implement is accepted only with timm's default value */
static int default_only(const vt_json *v, const char *key) {
    static const char *zero_ok[] = {"drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate",
                                    "attn_drop_rate", "drop_path_rate"};
    for (size_t i = 0; i < sizeof zero_ok / sizeof zero_ok[0]; i++)
        if (!strcmp(key, zero_ok[i])) {
            if (v->type == VT_JSON_NUMBER && v->number == 0) return 1;
            vt_fail(VT_ERR_ARG, "config: %s = %g is not supported (vitrine computes without dropout; use 0)", key, v->number);
            return 0;
        }
    struct { const char *k; int truth; } bools[] = {{"pre_norm", 0}, {"dynamic_img_size", 0},
        {"dynamic_img_pad", 0}, {"final_norm", 1}, {"proj_bias", 1}, {"pool_include_prefix", 0}};
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++)
        if (!strcmp(key, bools[i].k)) {
            if (v->type == VT_JSON_BOOL && v->boolean == bools[i].truth) return 1;
            vt_fail(VT_ERR_ARG, "config: %s other than %s is not supported", key, bools[i].truth ? "true" : "false");
            return 0;
        }
    if (!strcmp(key, "weight_init")) {
        if (v->type == VT_JSON_NULL || (v->type == VT_JSON_STRING && v->len == 0)) return 1;
        vt_fail(VT_ERR_ARG, "config: %s other than timm's default is not supported", key);
        return 0;
    }
    vt_fail(VT_ERR_ARG, "config: unknown option '%s'", key);
    return 0;
}

static int vit_from_obj(const vt_json *o, vt_vit_config *c) {
    if (!o || o->type != VT_JSON_OBJECT) return vt_fail(VT_ERR_ARG, "config must be a JSON object");
    int fc_norm = -1; /* timm's fc_norm: None (-1) = LayerNorm after avg / max / avgmax pooling */
    for (size_t i = 0; i < o->n; i++) {
        const char *k = o->keys[i];
        const vt_json *v = &o->items[i];
        int rc = VT_OK;
        if (!strcmp(k, "img_size")) rc = get_int(v, k, &c->img_size);
        else if (!strcmp(k, "patch_size")) rc = get_int(v, k, &c->patch_size);
        else if (!strcmp(k, "in_chans")) rc = get_int(v, k, &c->in_chans);
        else if (!strcmp(k, "embed_dim")) rc = get_int(v, k, &c->embed_dim);
        else if (!strcmp(k, "depth")) rc = get_int(v, k, &c->depth);
        else if (!strcmp(k, "num_heads")) rc = get_int(v, k, &c->num_heads);
        else if (!strcmp(k, "mlp_ratio")) rc = get_double(v, k, &c->mlp_ratio);
        else if (!strcmp(k, "qkv_bias")) rc = get_bool(v, k, &c->qkv_bias);
        else if (!strcmp(k, "qk_norm")) rc = get_bool(v, k, &c->qk_norm);
        else if (!strcmp(k, "class_token")) rc = get_bool(v, k, &c->class_token);
        else if (!strcmp(k, "reg_tokens")) rc = get_int(v, k, &c->reg_tokens);
        else if (!strcmp(k, "no_embed_class")) rc = get_bool(v, k, &c->no_embed_class);
        else if (!strcmp(k, "init_values")) rc = get_float(v, k, &c->init_values, 1);
        else if (!strcmp(k, "mask_token")) rc = get_bool(v, k, &c->mask_token);
        else if (!strcmp(k, "num_classes")) rc = get_int(v, k, &c->num_classes);
        else if (!strcmp(k, "pos_embed")) {
            if (v->type != VT_JSON_STRING) rc = vt_fail(VT_ERR_ARG, "config: pos_embed must be a string");
            else if (!strcmp(v->str, "learn")) c->pos_embed = 1;
            else if (!strcmp(v->str, "none") || !v->str[0]) c->pos_embed = 0;
            else rc = vt_fail(VT_ERR_ARG, "config: pos_embed '%s' is not supported (learn, none)", v->str);
        } else if (!strcmp(k, "global_pool")) {
            if (v->type != VT_JSON_STRING || v->len >= sizeof c->global_pool)
                rc = vt_fail(VT_ERR_ARG, "config: global_pool must be '', 'token', 'avg', 'max' or 'avgmax'");
            else strcpy(c->global_pool, v->str);
        } else if (!strcmp(k, "fc_norm")) {
            if (v->type == VT_JSON_BOOL) fc_norm = v->boolean;
            else if (v->type != VT_JSON_NULL) rc = vt_fail(VT_ERR_ARG, "config: fc_norm must be null, true or false");
        } else if (!default_only(v, k)) rc = VT_ERR_ARG;
        if (rc) return rc;
    }
    /* an explicit fc_norm is accepted when it is what timm's default gives for this pooling */
    const char *gp = c->global_pool;
    int dflt = !strcmp(gp, "avg") || !strcmp(gp, "max") || !strcmp(gp, "avgmax");
    if (fc_norm >= 0 && fc_norm != dflt)
        return vt_fail(VT_ERR_ARG, "config: fc_norm=%s with global_pool '%s' is not supported: vitrine computes timm's "
                                   "default fc_norm=None (the LayerNorm after avg / max / avgmax pooling, the final "
                                   "norm before pooling otherwise), which is fc_norm=%s here",
                       fc_norm ? "true" : "false", gp, dflt ? "true" : "false");
    return VT_OK;
}

vt_status vt_vit_config_from_json(const char *json, size_t len, vt_vit_config *c) {
    vt_json *root = NULL;
    int rc = vt_json_parse(json, len, &root);
    if (rc) return rc;
    rc = vit_from_obj(root, c);
    vt_json_free(root);
    return rc;
}

vt_status vt_model_config_from_json(const char *json, size_t len, vt_kind kind, vt_model_config *c) {
    vt_model_config_default(c, kind);
    vt_json *root = NULL;
    int rc = vt_json_parse(json, len, &root);
    if (rc) return rc;
    if (root->type != VT_JSON_OBJECT) {
        vt_json_free(root);
        return vt_fail(VT_ERR_ARG, "config must be a JSON object");
    }
    if (kind == VT_KIND_MAE || kind == VT_KIND_AIM) {
        const vt_json *enc = vt_json_get(root, "encoder");
        if (!enc) rc = vt_fail(VT_ERR_ARG, "config: an MAE/AIM config needs an 'encoder' object");
        if (!rc) rc = vit_from_obj(enc, &c->enc);
        for (size_t i = 0; i < root->n && !rc; i++) {
            const char *k = root->keys[i];
            const vt_json *v = &root->items[i];
            if (!strcmp(k, "encoder")) continue;
            if (kind == VT_KIND_MAE && !strcmp(k, "decoder_dim")) rc = get_int(v, k, &c->decoder_dim);
            else if (kind == VT_KIND_MAE && !strcmp(k, "decoder_depth")) rc = get_int(v, k, &c->decoder_depth);
            else if (kind == VT_KIND_MAE && !strcmp(k, "decoder_heads")) rc = get_int(v, k, &c->decoder_heads);
            else if (kind == VT_KIND_MAE && !strcmp(k, "decoder_mlp_ratio")) rc = get_double(v, k, &c->decoder_mlp_ratio);
            else if (kind == VT_KIND_MAE && !strcmp(k, "norm_pix_loss")) rc = get_bool(v, k, &c->norm_pix_loss);
            else if (kind == VT_KIND_AIM && !strcmp(k, "head_hidden_dim")) rc = get_int(v, k, &c->head_hidden_dim);
            else if (kind == VT_KIND_AIM && !strcmp(k, "head_blocks")) rc = get_int(v, k, &c->head_blocks);
            else if (kind == VT_KIND_AIM && !strcmp(k, "head_mlp_ratio")) rc = get_double(v, k, &c->head_mlp_ratio);
            else rc = vt_fail(VT_ERR_ARG, "config: unknown option '%s'", k);
        }
        /* lightly's MAE backbone is a MaskedVisionTransformerTIMM: it always has a mask token */
        if (kind == VT_KIND_MAE) c->enc.mask_token = 1;
    } else {
        rc = vit_from_obj(root, &c->enc);
    }
    vt_json_free(root);
    return rc;
}

vt_status vt_config_validate(const vt_model_config *mc) {
    const vt_vit_config *c = &mc->enc;
    if (c->img_size < 1 || c->patch_size < 1 || c->in_chans < 1 || c->embed_dim < 1 || c->depth < 0 ||
        c->num_heads < 1)
        return vt_fail(VT_ERR_ARG, "config: img_size, patch_size, in_chans, embed_dim, num_heads must be >= 1 and depth >= 0");
    if (c->img_size % c->patch_size)
        return vt_fail(VT_ERR_ARG, "config: img_size %d is not a multiple of patch_size %d", c->img_size, c->patch_size);
    if (c->embed_dim % c->num_heads)
        return vt_fail(VT_ERR_ARG, "config: embed_dim %d is not divisible by num_heads %d", c->embed_dim, c->num_heads);
    if (c->depth > VT_MAX_DEPTH) return vt_fail(VT_ERR_ARG, "config: depth %d exceeds %d", c->depth, VT_MAX_DEPTH);
    if (vt_mlp_hidden(c->embed_dim, c->mlp_ratio) < 1)
        return vt_fail(VT_ERR_ARG, "config: mlp_ratio %.17g gives %s hidden units", c->mlp_ratio,
                       vt_mlp_hidden(c->embed_dim, c->mlp_ratio) ? "too many" : "no");
    /* a patch is one row of in_chans * patch_size^2 values that the kernels index with int */
    int64_t pv = (int64_t)c->in_chans * c->patch_size * c->patch_size;
    if (pv > VT_MAX_DIM)
        return vt_fail(VT_ERR_ARG, "config: a patch of %d channels x %d x %d is %lld values, more than %d",
                       c->in_chans, c->patch_size, c->patch_size, (long long)pv, VT_MAX_DIM);
    if (!isfinite(c->init_values)) return vt_fail(VT_ERR_ARG, "config: init_values must be finite");
    const char *gp = c->global_pool;
    if (strcmp(gp, "") && strcmp(gp, "token") && strcmp(gp, "avg") && strcmp(gp, "max") && strcmp(gp, "avgmax"))
        return vt_fail(VT_ERR_ARG, "config: global_pool '%s' is not supported ('', token, avg, max, avgmax)", gp);
    if (!c->class_token && !strcmp(gp, "token"))
        return vt_fail(VT_ERR_ARG, "config: global_pool 'token' needs class_token (timm asserts this)");
    if (c->reg_tokens < 0 || c->reg_tokens > 64) return vt_fail(VT_ERR_ARG, "config: reg_tokens %d out of range", c->reg_tokens);
    int G = c->img_size / c->patch_size;
    /* 64-bit: G*G overflows int (and wasm's 32-bit long) for img 65536 / patch 1 */
    int64_t tokens = (int64_t)G * G + c->class_token + c->reg_tokens;
    if (tokens > VT_MAX_TOKENS)
        return vt_fail(VT_ERR_ARG, "config: %lld tokens exceed %d", (long long)tokens, VT_MAX_TOKENS);
    if (mc->kind == VT_KIND_TIMM && c->mask_token)
        return vt_fail(VT_ERR_ARG, "config: mask_token belongs to lightly's wrapper (kind lightly), not to timm's ViT");
    if (mc->kind == VT_KIND_MAE && vt_mlp_hidden(mc->decoder_dim, mc->decoder_mlp_ratio) < 1)
        return vt_fail(VT_ERR_ARG, "config: decoder_mlp_ratio %.17g gives no usable hidden size", mc->decoder_mlp_ratio);
    if (mc->kind == VT_KIND_AIM && vt_mlp_hidden(mc->head_hidden_dim, mc->head_mlp_ratio) < 1)
        return vt_fail(VT_ERR_ARG, "config: head_mlp_ratio %.17g gives no usable hidden size", mc->head_mlp_ratio);
    if (mc->kind == VT_KIND_MAE) {
        if (mc->decoder_dim < 1 || mc->decoder_heads < 1 || mc->decoder_dim % mc->decoder_heads || mc->decoder_depth < 0 ||
            mc->decoder_depth > VT_MAX_DEPTH)
            return vt_fail(VT_ERR_ARG, "config: decoder_dim %d must be divisible by decoder_heads %d (depth 0..%d)",
                           mc->decoder_dim, mc->decoder_heads, VT_MAX_DEPTH);
    }
    if (mc->kind == VT_KIND_AIM) {
        if (mc->head_hidden_dim < 1 || mc->head_blocks < 0 || mc->head_blocks > VT_MAX_DEPTH)
            return vt_fail(VT_ERR_ARG, "config: head_hidden_dim must be >= 1 and head_blocks in 0..%d", VT_MAX_DEPTH);
        if (c->class_token || c->reg_tokens)
            return vt_fail(VT_ERR_ARG, "config: the AIM backbone has no prefix tokens (its loss covers every position)");
    }
    return VT_OK;
}

int64_t vt_mlp_hidden(int dim, double ratio) {
    double h = (double)dim * ratio; /* Python: int(dim * mlp_ratio), dim promoted to double */
    if (!(h >= 0 && h < 2147483648.0)) return -1;
    return (int64_t)h; /* truncation toward zero, as int() */
}

/* A double as JSON that reads back to the same double (Python writes repr: the shortest such) */
static void fmt_double(char *buf, size_t len, double v) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* The inverse of vt_model_config_from_json (what a training checkpoint records). */
vt_status vt_model_config_to_json(const vt_model_config *mc, char *buf, size_t len) {
    const vt_vit_config *c = &mc->enc;
    char enc[640], r_enc[32], r_dec[32], r_head[32];
    fmt_double(r_enc, sizeof r_enc, c->mlp_ratio);
    fmt_double(r_dec, sizeof r_dec, mc->decoder_mlp_ratio);
    fmt_double(r_head, sizeof r_head, mc->head_mlp_ratio);
    int n = snprintf(enc, sizeof enc,
                     "{\"img_size\": %d, \"patch_size\": %d, \"in_chans\": %d, \"embed_dim\": %d, \"depth\": %d, "
                     "\"num_heads\": %d, \"mlp_ratio\": %s, \"qkv_bias\": %s, \"qk_norm\": %s, \"class_token\": %s, "
                     "\"reg_tokens\": %d, \"no_embed_class\": %s, \"pos_embed\": \"%s\", \"init_values\": %.9g, "
                     "\"global_pool\": \"%s\", \"mask_token\": %s, \"num_classes\": %d}",
                     c->img_size, c->patch_size, c->in_chans, c->embed_dim, c->depth, c->num_heads, r_enc,
                     c->qkv_bias ? "true" : "false", c->qk_norm ? "true" : "false", c->class_token ? "true" : "false",
                     c->reg_tokens, c->no_embed_class ? "true" : "false", c->pos_embed ? "learn" : "none",
                     c->init_values, c->global_pool, c->mask_token ? "true" : "false", c->num_classes);
    if (n < 0 || (size_t)n >= sizeof enc) return vt_fail(VT_ERR_ARG, "config too long");
    if (mc->kind == VT_KIND_MAE)
        n = snprintf(buf, len, "{\"encoder\": %s, \"decoder_dim\": %d, \"decoder_depth\": %d, \"decoder_heads\": %d, "
                               "\"decoder_mlp_ratio\": %s, \"norm_pix_loss\": %s}",
                     enc, mc->decoder_dim, mc->decoder_depth, mc->decoder_heads, r_dec,
                     mc->norm_pix_loss ? "true" : "false");
    else if (mc->kind == VT_KIND_AIM)
        n = snprintf(buf, len, "{\"encoder\": %s, \"head_hidden_dim\": %d, \"head_blocks\": %d, \"head_mlp_ratio\": %s}",
                     enc, mc->head_hidden_dim, mc->head_blocks, r_head);
    else
        n = snprintf(buf, len, "%s", enc);
    if (n < 0 || (size_t)n >= len) return vt_fail(VT_ERR_ARG, "config JSON needs %d bytes, the buffer has %zu", n, len);
    return VT_OK;
}

const char *vt_kind_name(vt_kind k) {
    static const char *names[] = {"timm", "lightly", "causal", "mae", "aim"};
    return (unsigned)k < 5 ? names[k] : "?";
}

vt_status vt_kind_from_name(const char *name, vt_kind *k) {
    for (int i = 0; i < 5; i++)
        if (name && !strcmp(name, vt_kind_name((vt_kind)i))) { *k = (vt_kind)i; return VT_OK; }
    return vt_fail(VT_ERR_ARG, "unknown model kind '%s' (timm, lightly, causal, mae, aim)", name ? name : "(null)");
}
