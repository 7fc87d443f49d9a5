/* config.c: model configurations: timm's defaults, timm's named presets, the JSON form (timm
 * VisionTransformer kwargs, as parity files and the CLI give them) and validation. */
#include "json.h"
#include "model.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the fields: one list for the defaults, the JSON reader, the validator and both writers ---- */

/* vt_vit_config, one row per field, in its JSON order (vt_model_config_to_json):
 *   X(name, type, timm's default, min, max, place in timm_kwargs (-1: not a timm kwarg))
 * type: INT an integer (JSON true / false read as 1 / 0), BOOL, RATIO a double (Python's float:
 * int(dim * ratio) depends on it), INIT a float (JSON null = 0, no LayerScale), POS pos_embed
 * ("learn" 1, "none" 0), POOL a vt_pool by name. min..max: the validator's range (INT). */
#define VT_VIT_FIELDS(X)                                                                                     \
    X(img_size, INT, 224, 1, VT_MAX_DIM, 0)                                                                  \
    X(patch_size, INT, 16, 1, VT_MAX_DIM, 1)                                                                 \
    X(in_chans, INT, 3, 1, VT_MAX_DIM, 2)                                                                    \
    X(embed_dim, INT, 768, 1, VT_MAX_DIM, 5)                                                                 \
    X(depth, INT, 12, 0, VT_MAX_DEPTH, 6)                                                                    \
    X(num_heads, INT, 12, 1, VT_MAX_DIM, 7)                                                                  \
    X(mlp_ratio, RATIO, 4.0, 0, 0, 8)                                                                        \
    X(qkv_bias, BOOL, 1, 0, 0, 9)                                                                            \
    X(qk_norm, BOOL, 0, 0, 0, 10)                                                                            \
    X(class_token, BOOL, 1, 0, 0, 12)                                                                        \
    X(reg_tokens, INT, 0, 0, 64, 13)                                                                         \
    X(no_embed_class, BOOL, 0, 0, 0, 14)                                                                     \
    X(pos_embed, POS, 1, 0, 0, 15)                                                                           \
    X(init_values, INIT, 0, 0, 0, 11)                                                                        \
    X(global_pool, POOL, VT_POOL_TOKEN, 0, 0, 4)                                                             \
    X(mask_token, BOOL, 0, 0, 0, -1)                                                                         \
    X(num_classes, INT, 0, 0, VT_MAX_DIM, 3)
#define VT_TIMM_KWARGS 16 /* places in timm_kwargs */

/* vt_model_config's fields of the MAE decoder / AIM head: X(kind, name, type, default) (lightly's
 * examples' sizes; a kind reads and writes its own, after "encoder") */
#define VT_HEAD_FIELDS(X)                                                                                    \
    X(MAE, decoder_dim, INT, 512)                                                                            \
    X(MAE, decoder_depth, INT, 8)                                                                            \
    X(MAE, decoder_heads, INT, 16)                                                                           \
    X(MAE, decoder_mlp_ratio, RATIO, 4.0)                                                                    \
    X(MAE, norm_pix_loss, BOOL, 0)                                                                           \
    X(AIM, head_hidden_dim, INT, 2048)                                                                       \
    X(AIM, head_blocks, INT, 12)                                                                             \
    X(AIM, head_mlp_ratio, RATIO, 4.0)

typedef enum { F_INT, F_BOOL, F_RATIO, F_INIT, F_POS, F_POOL } ftype;
typedef struct {
    const char *name;
    ftype type;
    size_t off;
    double dflt;
    int min, max, timm_pos, kind; /* kind: the head fields' model kind */
} field;
_Static_assert(sizeof(vt_pool) == sizeof(int), "a pool is stored as an int");
#define VT_VIT_FIELD(name, type, dflt, min, max, timm)                                                       \
    { #name, F_##type, offsetof(vt_vit_config, name), dflt, min, max, timm, 0 },
static const field vit_fields[] = { VT_VIT_FIELDS(VT_VIT_FIELD) };
#define VT_HEAD_FIELD(kind, name, type, dflt)                                                                \
    { #name, F_##type, offsetof(vt_model_config, name), dflt, 0, 0, -1, VT_KIND_##kind },
static const field head_fields[] = { VT_HEAD_FIELDS(VT_HEAD_FIELD) };
#define N_VIT  (sizeof vit_fields / sizeof *vit_fields)
#define N_HEAD (sizeof head_fields / sizeof *head_fields)

static int *ival(void *c, const field *f) { return (int *)((char *)c + f->off); }
static double *dval(void *c, const field *f) { return (double *)((char *)c + f->off); }
static float *fval(void *c, const field *f) { return (float *)((char *)c + f->off); }

static void set_default(void *c, const field *f) {
    if (f->type == F_RATIO)
        *dval(c, f) = f->dflt;
    else if (f->type == F_INIT)
        *fval(c, f) = (float)f->dflt;
    else
        *ival(c, f) = (int)f->dflt;
}

/* ---- pooling ---- */

static const char *pool_names[] = { "", "token", "avg", "max", "avgmax", "map" };
const char *vt_pool_name(vt_pool p) {
    return (unsigned)p < sizeof pool_names / sizeof *pool_names ? pool_names[p] : "?";
}
vt_status vt_pool_from_name(const char *name, vt_pool *out) {
    for (unsigned i = 0; name && i < sizeof pool_names / sizeof *pool_names; i++)
        if (!strcmp(name, pool_names[i])) {
            *out = (vt_pool)i;
            return VT_OK;
        }
    return vt_fail(VT_ERR_ARG, "config: global_pool '%.40s' is not supported ('', token, avg, max, avgmax)",
                   name ? name : "(null)");
}

void vt_vit_config_default(vt_vit_config *c) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < N_VIT; i++) set_default(c, &vit_fields[i]);
}

void vt_model_config_default(vt_model_config *c, vt_kind kind) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    vt_vit_config_default(&c->enc);
    for (size_t i = 0; i < N_HEAD; i++) set_default(c, &head_fields[i]);
    c->enc.mask_token = kind == VT_KIND_LIGHTLY || kind == VT_KIND_MAE;
    if (kind == VT_KIND_CAUSAL || kind == VT_KIND_AIM) { /* lightly's AIM backbone */
        c->enc.class_token = 0;
        c->enc.no_embed_class = 1;
        c->enc.global_pool = VT_POOL_AVG;
    }
}

static const struct {
    const char *name;
    int patch, dim, heads;
} presets[] = {
    { "vit_tiny_patch16_224", 16, 192, 3 },
    { "vit_small_patch16_224", 16, 384, 6 },
    { "vit_base_patch16_224", 16, 768, 12 },
    { "vit_base_patch32_224", 32, 768, 12 },
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
    return vt_fail(VT_ERR_ARG,
                   "unknown preset '%s' (vit_tiny_patch16_224, vit_small_patch16_224, "
                   "vit_base_patch16_224, vit_base_patch32_224)",
                   name ? name : "(null)");
}

/* The small training presets for 28x28 grey images (Fashion-MNIST), with their MAE decoder / AIM
 * head: what `vitrine train` and the demo run. Any other name: a timm preset's encoder (vt_preset)
 * in the kind's defaults. */
static const struct {
    const char *name;
    int img, patch, chans, dim, depth, heads;
    double mlp;
} small_presets[] = {
    { "fmnist", 28, 4, 1, 64, 4, 4, 4.0 },
    { "fmnist-p7", 28, 7, 1, 128, 4, 4, 4.0 },
    { "fmnist-p7-mlp2", 28, 7, 1, 128, 4, 4, 2.0 },
    { "fmnist-base", 28, 4, 1, 128, 6, 4, 4.0 },
};
#define N_SMALL (int)(sizeof small_presets / sizeof small_presets[0])

const char *vt_model_preset_name(int i) { return i >= 0 && i < N_SMALL ? small_presets[i].name : NULL; }

vt_status vt_model_preset(const char *name, vt_kind kind, vt_model_config *c) {
    vt_model_config_default(c, kind);
    for (int i = 0; i < N_SMALL; i++)
        if (name && !strcmp(name, small_presets[i].name)) {
            c->enc.img_size = small_presets[i].img;
            c->enc.patch_size = small_presets[i].patch;
            c->enc.in_chans = small_presets[i].chans;
            c->enc.embed_dim = small_presets[i].dim;
            c->enc.depth = small_presets[i].depth;
            c->enc.num_heads = small_presets[i].heads;
            c->enc.mlp_ratio = small_presets[i].mlp;
            /* every small preset's MAE decoder and AIM head */
            c->decoder_dim = 64;
            c->decoder_depth = 2;
            c->decoder_heads = 4;
            c->norm_pix_loss = 1;
            c->head_hidden_dim = 128;
            c->head_blocks = 2;
            return VT_OK;
        }
    vt_vit_config p;
    vt_vit_config_default(&p);
    vt_status rc = vt_preset(name, &p);
    if (rc) return rc;
    c->enc.img_size = p.img_size;
    c->enc.patch_size = p.patch_size;
    c->enc.embed_dim = p.embed_dim;
    c->enc.depth = p.depth;
    c->enc.num_heads = p.num_heads;
    c->enc.mlp_ratio = p.mlp_ratio;
    return VT_OK;
}

/* ---- JSON ---- */

static int get_int(const vt_json *v, const char *key, int *out) {
    if (v->type == VT_JSON_BOOL) {
        *out = v->boolean;
        return VT_OK;
    }
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
    if (v->type == VT_JSON_NULL && null_ok) {
        *out = 0;
        return VT_OK;
    }
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
    static const char *zero_ok[] = { "drop_rate",      "pos_drop_rate",  "patch_drop_rate",
                                     "proj_drop_rate", "attn_drop_rate", "drop_path_rate" };
    for (size_t i = 0; i < sizeof zero_ok / sizeof zero_ok[0]; i++)
        if (!strcmp(key, zero_ok[i])) {
            if (v->type == VT_JSON_NUMBER && v->number == 0) return 1;
            vt_fail(VT_ERR_ARG, "config: %s = %g is not supported (vitrine computes without dropout; use 0)",
                    key, v->number);
            return 0;
        }
    struct {
        const char *k;
        int truth;
    } bools[] = { { "pre_norm", 0 },   { "dynamic_img_size", 0 }, { "dynamic_img_pad", 0 },
                  { "final_norm", 1 }, { "proj_bias", 1 },        { "pool_include_prefix", 0 } };
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++)
        if (!strcmp(key, bools[i].k)) {
            if (v->type == VT_JSON_BOOL && v->boolean == bools[i].truth) return 1;
            vt_fail(VT_ERR_ARG, "config: %s other than %s is not supported", key,
                    bools[i].truth ? "true" : "false");
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

/* one field's JSON value into c */
static int read_field(const vt_json *v, const field *f, void *c) {
    const char *k = f->name;
    switch (f->type) {
        case F_INT: return get_int(v, k, ival(c, f));
        case F_BOOL: return get_bool(v, k, ival(c, f));
        case F_RATIO: return get_double(v, k, dval(c, f));
        case F_INIT: return get_float(v, k, fval(c, f), 1);
        case F_POS:
            if (v->type != VT_JSON_STRING) return vt_fail(VT_ERR_ARG, "config: pos_embed must be a string");
            if (!strcmp(v->str, "learn"))
                *ival(c, f) = 1;
            else if (!strcmp(v->str, "none") || !v->str[0])
                *ival(c, f) = 0;
            else
                return vt_fail(VT_ERR_ARG, "config: pos_embed '%s' is not supported (learn, none)", v->str);
            return VT_OK;
        case F_POOL: {
            if (v->type != VT_JSON_STRING || v->len >= 8)
                return vt_fail(VT_ERR_ARG,
                               "config: global_pool must be '', 'token', 'avg', 'max' or 'avgmax'");
            vt_pool p = VT_POOL_NONE;
            int rc = vt_pool_from_name(v->str, &p);
            if (!rc) *ival(c, f) = (int)p;
            return rc;
        }
    }
    return VT_ERR_ARG;
}

static int vit_from_obj(const vt_json *o, vt_vit_config *c) {
    if (!o || o->type != VT_JSON_OBJECT) return vt_fail(VT_ERR_ARG, "config must be a JSON object");
    int fc_norm = -1; /* timm's fc_norm: None (-1) = LayerNorm after avg / max / avgmax pooling */
    for (size_t i = 0; i < o->n; i++) {
        const char *k = o->keys[i];
        const vt_json *v = &o->items[i];
        int rc = VT_OK, known = 0;
        for (size_t j = 0; j < N_VIT && !known; j++)
            if (!strcmp(k, vit_fields[j].name)) known = 1, rc = read_field(v, &vit_fields[j], c);
        if (known) {
        } else if (!strcmp(k, "fc_norm")) {
            if (v->type == VT_JSON_BOOL)
                fc_norm = v->boolean;
            else if (v->type != VT_JSON_NULL)
                rc = vt_fail(VT_ERR_ARG, "config: fc_norm must be null, true or false");
        } else if (!default_only(v, k))
            rc = VT_ERR_ARG;
        if (rc) return rc;
    }
    /* an explicit fc_norm is accepted when it is what timm's default gives for this pooling */
    vt_pool gp = c->global_pool;
    int dflt = gp == VT_POOL_AVG || gp == VT_POOL_MAX || gp == VT_POOL_AVGMAX;
    if (fc_norm >= 0 && fc_norm != dflt)
        return vt_fail(VT_ERR_ARG,
                       "config: fc_norm=%s with global_pool '%s' is not supported: vitrine computes timm's "
                       "default fc_norm=None (the LayerNorm after avg / max / avgmax pooling, the final "
                       "norm before pooling otherwise), which is fc_norm=%s here",
                       fc_norm ? "true" : "false", vt_pool_name(gp), dflt ? "true" : "false");
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
            int known = !strcmp(k, "encoder");
            for (size_t j = 0; j < N_HEAD && !known; j++)
                if ((int)kind == head_fields[j].kind && !strcmp(k, head_fields[j].name))
                    known = 1, rc = read_field(&root->items[i], &head_fields[j], c);
            if (!known) rc = vt_fail(VT_ERR_ARG, "config: unknown option '%s'", k);
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
    for (size_t i = 0; i < N_VIT; i++) { /* each field in its range */
        const field *f = &vit_fields[i];
        int v = *ival((void *)c, f);
        if (f->type == F_INT && (v < f->min || v > f->max))
            return vt_fail(VT_ERR_ARG, "config: %s = %d is not in %d..%d", f->name, v, f->min, f->max);
        if (f->type == F_INIT && !isfinite(*fval((void *)c, f)))
            return vt_fail(VT_ERR_ARG, "config: %s must be finite", f->name);
        if (f->type == F_POOL && (v < VT_POOL_NONE || v > VT_POOL_AVGMAX))
            return vt_fail(VT_ERR_ARG,
                           "config: global_pool '%s' is not supported ('', token, avg, max, avgmax)",
                           vt_pool_name((vt_pool)v));
    }
    if (c->img_size % c->patch_size)
        return vt_fail(VT_ERR_ARG, "config: img_size %d is not a multiple of patch_size %d", c->img_size,
                       c->patch_size);
    if (c->embed_dim % c->num_heads)
        return vt_fail(VT_ERR_ARG, "config: embed_dim %d is not divisible by num_heads %d", c->embed_dim,
                       c->num_heads);
    if (vt_mlp_hidden(c->embed_dim, c->mlp_ratio) < 1)
        return vt_fail(VT_ERR_ARG, "config: mlp_ratio %.17g gives %s hidden units", c->mlp_ratio,
                       vt_mlp_hidden(c->embed_dim, c->mlp_ratio) ? "too many" : "no");
    /* a patch is one row of in_chans * patch_size^2 values that the kernels index with int */
    int64_t pv = (int64_t)c->in_chans * c->patch_size * c->patch_size;
    if (pv > VT_MAX_DIM)
        return vt_fail(VT_ERR_ARG, "config: a patch of %d channels x %d x %d is %lld values, more than %d",
                       c->in_chans, c->patch_size, c->patch_size, (long long)pv, VT_MAX_DIM);
    if (!c->class_token && c->global_pool == VT_POOL_TOKEN)
        return vt_fail(VT_ERR_ARG, "config: global_pool 'token' needs class_token (timm asserts this)");
    int G = c->img_size / c->patch_size;
    /* 64-bit: G*G overflows int (and wasm's 32-bit long) for img 65536 / patch 1 */
    int64_t tokens = (int64_t)G * G + c->class_token + c->reg_tokens;
    if (tokens > VT_MAX_TOKENS)
        return vt_fail(VT_ERR_ARG, "config: %lld tokens exceed %d", (long long)tokens, VT_MAX_TOKENS);
    if (mc->kind == VT_KIND_TIMM && c->mask_token)
        return vt_fail(VT_ERR_ARG,
                       "config: mask_token belongs to lightly's wrapper (kind lightly), not to timm's ViT");
    if (mc->kind == VT_KIND_MAE && vt_mlp_hidden(mc->decoder_dim, mc->decoder_mlp_ratio) < 1)
        return vt_fail(VT_ERR_ARG, "config: decoder_mlp_ratio %.17g gives no usable hidden size",
                       mc->decoder_mlp_ratio);
    if (mc->kind == VT_KIND_AIM && vt_mlp_hidden(mc->head_hidden_dim, mc->head_mlp_ratio) < 1)
        return vt_fail(VT_ERR_ARG, "config: head_mlp_ratio %.17g gives no usable hidden size",
                       mc->head_mlp_ratio);
    if (mc->kind == VT_KIND_MAE) {
        if (mc->decoder_dim < 1 || mc->decoder_heads < 1 || mc->decoder_dim % mc->decoder_heads ||
            mc->decoder_depth < 0 || mc->decoder_depth > VT_MAX_DEPTH)
            return vt_fail(VT_ERR_ARG,
                           "config: decoder_dim %d must be divisible by decoder_heads %d (depth 0..%d)",
                           mc->decoder_dim, mc->decoder_heads, VT_MAX_DEPTH);
    }
    if (mc->kind == VT_KIND_AIM) {
        if (mc->head_hidden_dim < 1 || mc->head_blocks < 0 || mc->head_blocks > VT_MAX_DEPTH)
            return vt_fail(VT_ERR_ARG, "config: head_hidden_dim must be >= 1 and head_blocks in 0..%d",
                           VT_MAX_DEPTH);
        if (c->class_token || c->reg_tokens)
            return vt_fail(VT_ERR_ARG,
                           "config: the AIM backbone has no prefix tokens (its loss covers every position)");
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

/* One field's JSON value: timm's kwargs write init_values 0 (no LayerScale) as null. */
static int write_field(char *buf, size_t len, const field *f, const void *c, int timm) {
    char r[32];
    switch (f->type) {
        case F_INT: return snprintf(buf, len, "%d", *ival((void *)c, f));
        case F_BOOL: return snprintf(buf, len, "%s", *ival((void *)c, f) ? "true" : "false");
        case F_RATIO: fmt_double(r, sizeof r, *dval((void *)c, f)); return snprintf(buf, len, "%s", r);
        case F_INIT: {
            float v = *fval((void *)c, f);
            return timm && !(v > 0) ? snprintf(buf, len, "null") : snprintf(buf, len, "%.9g", v);
        }
        case F_POS: return snprintf(buf, len, "\"%s\"", *ival((void *)c, f) ? "learn" : "none");
        case F_POOL: return snprintf(buf, len, "\"%s\"", vt_pool_name((vt_pool)*ival((void *)c, f)));
    }
    return -1;
}

/* {"name": value, ...} of the fields in the given order */
static vt_status write_object(char *buf, size_t len, const field *const *fs, int n, const void *c, int timm,
                              const char *prefix) {
    size_t at = 0;
    int w = snprintf(buf, len, "{%s", prefix);
    for (int i = 0; i < n && w >= 0 && (size_t)w < len - at; i++) {
        at += (size_t)w;
        w = snprintf(buf + at, len - at, "%s\"%s\": ", i || prefix[0] ? ", " : "", fs[i]->name);
        if (w < 0 || (size_t)w >= len - at) break;
        at += (size_t)w;
        w = write_field(buf + at, len - at, fs[i], c, timm);
    }
    if (w >= 0 && (size_t)w < len - at) {
        at += (size_t)w;
        w = snprintf(buf + at, len - at, "}");
    }
    if (w < 0 || (size_t)w >= len - at)
        return vt_fail(VT_ERR_ARG, "config JSON needs more than the %zu bytes of the buffer", len);
    return VT_OK;
}

/* The inverse of vt_model_config_from_json (what a training checkpoint records, compared byte for
 * byte when one is resumed). */
vt_status vt_model_config_to_json(const vt_model_config *mc, char *buf, size_t len) {
    const field *fs[N_VIT];
    char enc[640], pre[700];
    for (size_t i = 0; i < N_VIT; i++) fs[i] = &vit_fields[i];
    if (write_object(enc, sizeof enc, fs, (int)N_VIT, &mc->enc, 0, ""))
        return vt_fail(VT_ERR_ARG, "config too long");
    int n = 0;
    for (size_t i = 0; i < N_HEAD; i++)
        if (head_fields[i].kind == (int)mc->kind) fs[n++] = &head_fields[i];
    if (!n) { /* the encoder alone */
        int w = snprintf(buf, len, "%s", enc);
        return w < 0 || (size_t)w >= len
                   ? vt_fail(VT_ERR_ARG, "config JSON needs %d bytes, the buffer has %zu", w, len)
                   : VT_OK;
    }
    snprintf(pre, sizeof pre, "\"encoder\": %s", enc);
    return write_object(buf, len, fs, n, mc, 0, pre);
}

/* timm's VisionTransformer kwargs of the encoder (timm_kwargs of a saved encoder, weights.c):
 * timm's own kwargs, in timm's order (lightly's mask_token is not one) */
vt_status vt_timm_kwargs_json(const vt_vit_config *c, char *buf, size_t len) {
    const field *fs[VT_TIMM_KWARGS];
    int n = 0;
    for (int pos = 0; pos < VT_TIMM_KWARGS; pos++)
        for (size_t i = 0; i < N_VIT; i++)
            if (vit_fields[i].timm_pos == pos) fs[n++] = &vit_fields[i];
    return write_object(buf, len, fs, n, c, 1, "");
}

const char *vt_kind_name(vt_kind k) {
    static const char *names[] = { "timm", "lightly", "causal", "mae", "aim" };
    return (unsigned)k < 5 ? names[k] : "?";
}

vt_status vt_kind_from_name(const char *name, vt_kind *k) {
    for (int i = 0; i < 5; i++)
        if (name && !strcmp(name, vt_kind_name((vt_kind)i))) {
            *k = (vt_kind)i;
            return VT_OK;
        }
    return vt_fail(VT_ERR_ARG, "unknown model kind '%s' (timm, lightly, causal, mae, aim)",
                   name ? name : "(null)");
}
