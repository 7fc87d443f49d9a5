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
 *   X(name, type, timm's default, min, max, place in timm_kwargs (-1: not a timm kwarg), always)
 * type: INT an integer (JSON true / false read as 1 / 0), BOOL, RATIO a double (Python's float:
 * int(dim * ratio) depends on it), INIT a float (JSON null = 0, no LayerScale), POS pos_embed
 * ("learn" 1, "none" 0), POOL a vt_pool by name, IMG img_size (an integer, or timm's (H, W) as
 * [H, W]: img_size, img_width), FCN fc_norm (null -1, false 0, true 1), ACT act_layer, NORM a
 * norm_layer by name (null: the field's default), EPS a norm's eps. min..max: the validator's range
 * (INT). always 0: written only when not the default, so that the JSON of every config that does
 * not use them stays as it was (training checkpoints compare it byte for byte). norm_eps,
 * embed_norm_eps and distilled are not timm kwargs (timm takes partial(LayerNorm, eps=...) and
 * the VisionTransformerDistilled class): the timm_kwargs writer names them so that nothing is
 * lost, for a reader to map back. */
#define VT_VIT_FIELDS(X)                                                                                     \
    X(img_size, IMG, 224, 1, VT_MAX_DIM, 0, 1)                                                               \
    X(patch_size, INT, 16, 1, VT_MAX_DIM, 1, 1)                                                              \
    X(in_chans, INT, 3, 1, VT_MAX_DIM, 2, 1)                                                                 \
    X(embed_dim, INT, 768, 1, VT_MAX_DIM, 5, 1)                                                              \
    X(depth, INT, 12, 0, VT_MAX_DEPTH, 6, 1)                                                                 \
    X(num_heads, INT, 12, 1, VT_MAX_DIM, 7, 1)                                                               \
    X(mlp_ratio, RATIO, 4.0, 0, 0, 8, 1)                                                                     \
    X(qkv_bias, BOOL, 1, 0, 0, 9, 1)                                                                         \
    X(qk_norm, BOOL, 0, 0, 0, 10, 1)                                                                         \
    X(class_token, BOOL, 1, 0, 0, 12, 1)                                                                     \
    X(reg_tokens, INT, 0, 0, 64, 13, 1)                                                                      \
    X(no_embed_class, BOOL, 0, 0, 0, 14, 1)                                                                  \
    X(pos_embed, POS, 1, 0, 0, 15, 1)                                                                        \
    X(init_values, INIT, 0, 0, 0, 11, 1)                                                                     \
    X(global_pool, POOL, VT_POOL_TOKEN, 0, 0, 4, 1)                                                          \
    X(mask_token, BOOL, 0, 0, 0, -1, 1)                                                                      \
    X(num_classes, INT, 0, 0, VT_MAX_DIM, 3, 1)                                                              \
    X(pre_norm, BOOL, 0, 0, 0, 16, 0)                                                                        \
    X(final_norm, BOOL, 1, 0, 0, 17, 0)                                                                      \
    X(fc_norm, FCN, -1, 0, 0, 18, 0)                                                                         \
    X(proj_bias, BOOL, 1, 0, 0, 19, 0)                                                                       \
    X(scale_attn_norm, BOOL, 0, 0, 0, 20, 0)                                                                 \
    X(scale_mlp_norm, BOOL, 0, 0, 0, 21, 0)                                                                  \
    X(pool_include_prefix, BOOL, 0, 0, 0, 22, 0)                                                             \
    X(dynamic_img_size, BOOL, 0, 0, 0, 23, 0)                                                                \
    X(dynamic_img_pad, BOOL, 0, 0, 0, 24, 0)                                                                 \
    X(act_layer, ACT, VT_ACT_GELU, 0, 0, 25, 0)                                                              \
    X(norm_layer, NORM, VT_NORM_LAYER, 0, 0, 26, 0)                                                          \
    X(norm_eps, EPS, 1e-6, 0, 0, 27, 0)                                                                      \
    X(embed_norm_layer, NORM, VT_NORM_NONE, 0, 0, 28, 0)                                                     \
    X(embed_norm_eps, EPS, 1e-6, 0, 0, 29, 0)                                                                \
    X(distilled, BOOL, 0, 0, 0, 30, 0)
#define VT_TIMM_KWARGS 31 /* places in timm_kwargs */

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

typedef enum { F_INT, F_BOOL, F_RATIO, F_INIT, F_POS, F_POOL, F_IMG, F_FCN, F_ACT, F_NORM, F_EPS } ftype;
typedef struct {
    const char *name;
    ftype type;
    size_t off;
    double dflt;
    int min, max, timm_pos, kind; /* kind: the head fields' model kind */
    int always;                   /* 0: written only when not the default */
} field;
_Static_assert(sizeof(vt_pool) == sizeof(int), "a pool is stored as an int");
#define VT_VIT_FIELD(name, type, dflt, min, max, timm, always)                                               \
    { #name, F_##type, offsetof(vt_vit_config, name), dflt, min, max, timm, 0, always },
static const field vit_fields[] = { VT_VIT_FIELDS(VT_VIT_FIELD) };
#define VT_HEAD_FIELD(kind, name, type, dflt)                                                                \
    { #name, F_##type, offsetof(vt_model_config, name), dflt, 0, 0, -1, VT_KIND_##kind, 1 },
static const field head_fields[] = { VT_HEAD_FIELDS(VT_HEAD_FIELD) };
#define N_VIT  (sizeof vit_fields / sizeof *vit_fields)
#define N_HEAD (sizeof head_fields / sizeof *head_fields)

static int *ival(void *c, const field *f) { return (int *)((char *)c + f->off); }
static double *dval(void *c, const field *f) { return (double *)((char *)c + f->off); }
static float *fval(void *c, const field *f) { return (float *)((char *)c + f->off); }

static void set_default(void *c, const field *f) {
    if (f->type == F_RATIO || f->type == F_EPS)
        *dval(c, f) = f->dflt;
    else if (f->type == F_INIT)
        *fval(c, f) = (float)f->dflt;
    else
        *ival(c, f) = (int)f->dflt;
}

/* ---- pooling ---- */

static const char *pool_names[] = { "", "token", "avg", "max", "avgmax", "map", "prr" };
const char *vt_pool_name(vt_pool p) {
    return (unsigned)p < sizeof pool_names / sizeof *pool_names ? pool_names[p] : "?";
}
vt_status vt_pool_from_name(const char *name, vt_pool *out) {
    for (unsigned i = 0; name && i < sizeof pool_names / sizeof *pool_names; i++)
        if (!strcmp(name, pool_names[i])) {
            *out = (vt_pool)i;
            return VT_OK;
        }
    return vt_fail(VT_ERR_ARG,
                   "config: global_pool '%.40s' is not one of timm's ('', token, avg, max, avgmax, "
                   "map, prr)",
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

/* timm's named ViTs: each is timm's model_args (vision_transformer.py, deit.py) as the kwargs
 * JSON this file reads, over timm's defaults, with num_classes 0 (a classifier sets its own). */
static const struct {
    const char *name, *kwargs;
} presets[] = {
    { "vit_tiny_patch16_224", "{\"patch_size\": 16, \"embed_dim\": 192, \"depth\": 12, \"num_heads\": 3}" },
    { "vit_small_patch16_224", "{\"patch_size\": 16, \"embed_dim\": 384, \"depth\": 12, \"num_heads\": 6}" },
    { "vit_base_patch16_224", "{\"patch_size\": 16, \"embed_dim\": 768, \"depth\": 12, \"num_heads\": 12}" },
    { "vit_base_patch32_224", "{\"patch_size\": 32, \"embed_dim\": 768, \"depth\": 12, \"num_heads\": 12}" },
    /* CLIP image towers: pre_norm, LayerNorm eps 1e-5; OpenAI's weights with QuickGELU */
    { "vit_base_patch16_clip_224",
      "{\"patch_size\": 16, \"embed_dim\": 768, \"depth\": 12, \"num_heads\": 12, \"pre_norm\": true, "
      "\"norm_eps\": 1e-5}" },
    { "vit_base_patch32_clip_224",
      "{\"patch_size\": 32, \"embed_dim\": 768, \"depth\": 12, \"num_heads\": 12, \"pre_norm\": true, "
      "\"norm_eps\": 1e-5}" },
    { "vit_base_patch16_clip_quickgelu_224",
      "{\"patch_size\": 16, \"embed_dim\": 768, \"depth\": 12, \"num_heads\": 12, \"pre_norm\": true, "
      "\"norm_eps\": 1e-5, \"act_layer\": \"quick_gelu\"}" },
    { "vit_base_patch32_clip_quickgelu_224",
      "{\"patch_size\": 32, \"embed_dim\": 768, \"depth\": 12, \"num_heads\": 12, \"pre_norm\": true, "
      "\"norm_eps\": 1e-5, \"act_layer\": \"quick_gelu\"}" },
    /* SigLIP: no class token, attention-pool head */
    { "vit_base_patch16_siglip_224",
      "{\"patch_size\": 16, \"embed_dim\": 768, \"depth\": 12, \"num_heads\": 12, \"class_token\": false, "
      "\"global_pool\": \"map\"}" },
    /* DeiT, and DeiT with its distillation token (VisionTransformerDistilled) */
    { "deit_tiny_patch16_224", "{\"patch_size\": 16, \"embed_dim\": 192, \"depth\": 12, \"num_heads\": 3}" },
    { "deit_small_patch16_224", "{\"patch_size\": 16, \"embed_dim\": 384, \"depth\": 12, \"num_heads\": 6}" },
    { "deit_base_patch16_224", "{\"patch_size\": 16, \"embed_dim\": 768, \"depth\": 12, \"num_heads\": 12}" },
    { "deit_tiny_distilled_patch16_224",
      "{\"patch_size\": 16, \"embed_dim\": 192, \"depth\": 12, \"num_heads\": 3, \"distilled\": true}" },
    { "deit_small_distilled_patch16_224",
      "{\"patch_size\": 16, \"embed_dim\": 384, \"depth\": 12, \"num_heads\": 6, \"distilled\": true}" },
    { "deit_base_distilled_patch16_224",
      "{\"patch_size\": 16, \"embed_dim\": 768, \"depth\": 12, \"num_heads\": 12, \"distilled\": true}" },
    /* DINOv2 with registers: 518 px, patch 14, LayerScale 1e-5, 4 registers, no pos_embed rows for
     * the prefix tokens */
    { "vit_small_patch14_reg4_dinov2",
      "{\"img_size\": 518, \"patch_size\": 14, \"embed_dim\": 384, \"depth\": 12, \"num_heads\": 6, "
      "\"init_values\": 1e-5, \"reg_tokens\": 4, \"no_embed_class\": true}" },
    { "vit_base_patch14_reg4_dinov2",
      "{\"img_size\": 518, \"patch_size\": 14, \"embed_dim\": 768, \"depth\": 12, \"num_heads\": 12, "
      "\"init_values\": 1e-5, \"reg_tokens\": 4, \"no_embed_class\": true}" },
};
#define N_PRESETS (int)(sizeof presets / sizeof presets[0])

const char *vt_preset_name(int i) { return i >= 0 && i < N_PRESETS ? presets[i].name : NULL; }

vt_status vt_preset(const char *name, vt_vit_config *c) {
    for (int i = 0; i < N_PRESETS; i++)
        if (name && !strcmp(name, presets[i].name)) {
            vt_vit_config_default(c);
            return vt_vit_config_from_json(presets[i].kwargs, strlen(presets[i].kwargs), c);
        }
    char list[1024];
    size_t at = 0;
    for (int i = 0; i < N_PRESETS && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", presets[i].name);
    return vt_fail(VT_ERR_ARG, "unknown preset '%s' (%s)", name ? name : "(null)", list);
}

void vt_preset_encoder(const vt_vit_config *p, vt_model_config *c) {
    vt_vit_config kind = c->enc; /* what the kind's defaults set (vt_model_config_default) */
    c->enc = *p;
    c->enc.mask_token = kind.mask_token;
    if (c->kind == VT_KIND_CAUSAL || c->kind == VT_KIND_AIM) { /* lightly's AIM backbone */
        c->enc.class_token = kind.class_token;
        c->enc.no_embed_class = kind.no_embed_class;
        c->enc.global_pool = kind.global_pool;
    }
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
    vt_preset_encoder(&p, c);
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
/* a timm kwarg vitrine does not implement is accepted only with timm's default value; the
 * initialisation-only ones (they change nothing once weights are loaded) with any value */
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
    if (!strcmp(key, "weight_init")) { /* timm's init schemes: init only */
        static const char *modes[] = { "", "skip", "reset", "jax", "jax_nlhb", "moco" };
        for (size_t i = 0; v->type == VT_JSON_STRING && i < sizeof modes / sizeof modes[0]; i++)
            if (!strcmp(v->str, modes[i])) return 1;
        if (v->type == VT_JSON_NULL) return 1;
        vt_fail(VT_ERR_ARG,
                "config: weight_init must be one of timm's ('', skip, reset, jax, jax_nlhb, moco)");
        return 0;
    }
    if (!strcmp(key, "fix_init")) { /* rescales the initial weights only */
        if (v->type == VT_JSON_BOOL) return 1;
        vt_fail(VT_ERR_ARG, "config: fix_init must be true or false");
        return 0;
    }
    if (!strcmp(key, "attn_layer")) { /* timm's Attention by name; 'diff' is another layer */
        if (v->type == VT_JSON_NULL || (v->type == VT_JSON_STRING && (!v->str[0] || !strcmp(v->str, "attn"))))
            return 1;
        vt_fail(VT_ERR_ARG, "config: attn_layer '%.40s' is not supported (timm's Attention: '' or 'attn')",
                v->type == VT_JSON_STRING ? v->str : "?");
        return 0;
    }
    /* layer classes and PyTorch's placement: a config can only say timm's default (null) */
    static const char *only[][2] = { { "block_fn", "timm's Block" },
                                     { "mlp_layer", "timm's Mlp" },
                                     { "embed_layer", "timm's PatchEmbed (a hybrid CNN stem is not)" },
                                     { "device", "its own backends (wasm, WebGPU), not a torch device" },
                                     { "dtype", "in float32" } };
    for (size_t i = 0; i < sizeof only / sizeof only[0]; i++)
        if (!strcmp(key, only[i][0])) {
            if (v->type == VT_JSON_NULL) return 1;
            if (!strcmp(key, "dtype") && v->type == VT_JSON_STRING &&
                (!strcmp(v->str, "float32") || !strcmp(v->str, "torch.float32")))
                return 1;
            vt_fail(VT_ERR_ARG, "config: %s is not supported: vitrine computes %s (null: timm's default)",
                    key, only[i][1]);
            return 0;
        }
    vt_fail(VT_ERR_ARG, "config: unknown option '%s'", key);
    return 0;
}

/* timm's names: get_act_layer lower-cases; get_norm_layer also drops underscores */
static int name_is(const char *s, const char *want, int drop_underscores) {
    for (; *s || *want; s++) {
        if (drop_underscores && *s == '_') continue;
        char c = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
        if (c != *want) return 0;
        want++;
    }
    return 1;
}
static const char *act_names[] = { "gelu", "quick_gelu", "gelu_tanh" };
static const char *norm_names[] = { "", "layernorm", "rmsnorm" };

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
                return vt_fail(
                    VT_ERR_ARG,
                    "config: global_pool must be '', 'token', 'avg', 'max', 'avgmax', 'map' or 'prr'");
            vt_pool p = VT_POOL_NONE;
            int rc = vt_pool_from_name(v->str, &p);
            if (!rc) *ival(c, f) = (int)p;
            return rc;
        }
        case F_IMG: { /* an integer, or timm's (H, W) */
            vt_vit_config *vc = c;
            if (v->type == VT_JSON_ARRAY) {
                int h = 0, w = 0;
                if (v->n != 2)
                    return vt_fail(VT_ERR_ARG, "config: img_size must be an integer or [height, width]");
                int rc = get_int(&v->items[0], "img_size[0]", &h);
                if (!rc) rc = get_int(&v->items[1], "img_size[1]", &w);
                if (rc) return rc;
                vc->img_size = h;
                vc->img_width = w == h ? 0 : w;
                return VT_OK;
            }
            vc->img_width = 0;
            return get_int(v, k, &vc->img_size);
        }
        case F_FCN:
            if (v->type == VT_JSON_NULL)
                *ival(c, f) = -1;
            else if (v->type == VT_JSON_BOOL)
                *ival(c, f) = v->boolean;
            else
                return vt_fail(VT_ERR_ARG, "config: fc_norm must be null, true or false");
            return VT_OK;
        case F_ACT:
            if (v->type == VT_JSON_NULL || (v->type == VT_JSON_STRING && !v->str[0])) {
                *ival(c, f) = VT_ACT_GELU;
                return VT_OK;
            }
            for (int i = 0; v->type == VT_JSON_STRING && i < 3; i++)
                if (name_is(v->str, act_names[i], 0)) {
                    *ival(c, f) = i;
                    return VT_OK;
                }
            return vt_fail(VT_ERR_ARG,
                           "config: act_layer '%.40s' is not supported (gelu, quick_gelu, gelu_tanh: the MLP "
                           "activations of timm's ViTs vitrine computes)",
                           v->type == VT_JSON_STRING ? v->str : "(not a string)");
        case F_NORM:
            if (v->type == VT_JSON_NULL || (v->type == VT_JSON_STRING && !v->str[0])) {
                *ival(c, f) = (int)f->dflt;
                return VT_OK;
            }
            for (int i = 1; v->type == VT_JSON_STRING && i < 3; i++)
                if (name_is(v->str, norm_names[i], 1)) {
                    *ival(c, f) = i;
                    return VT_OK;
                }
            return vt_fail(VT_ERR_ARG, "config: %s '%.40s' is not supported (layernorm, rmsnorm)", k,
                           v->type == VT_JSON_STRING ? v->str : "(not a string)");
        case F_EPS:
            if (v->type != VT_JSON_NUMBER || !(v->number > 0 && v->number < 1))
                return vt_fail(VT_ERR_ARG, "config: %s must be a number in (0, 1)", k);
            *dval(c, f) = v->number;
            return VT_OK;
    }
    return VT_ERR_ARG;
}

static int vit_from_obj(const vt_json *o, vt_vit_config *c) {
    if (!o || o->type != VT_JSON_OBJECT) return vt_fail(VT_ERR_ARG, "config must be a JSON object");
    for (size_t i = 0; i < o->n; i++) {
        const char *k = o->keys[i];
        const vt_json *v = &o->items[i];
        int rc = VT_OK, known = 0;
        for (size_t j = 0; j < N_VIT && !known; j++)
            if (!strcmp(k, vit_fields[j].name)) known = 1, rc = read_field(v, &vit_fields[j], c);
        if (!known && !default_only(v, k)) rc = VT_ERR_ARG;
        if (rc) return rc;
    }
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
        if ((f->type == F_INT || f->type == F_IMG) && (v < f->min || v > f->max))
            return vt_fail(VT_ERR_ARG, "config: %s = %d is not in %d..%d", f->name, v, f->min, f->max);
        if (f->type == F_INIT && !isfinite(*fval((void *)c, f)))
            return vt_fail(VT_ERR_ARG, "config: %s must be finite", f->name);
        if (f->type == F_POOL && (v < VT_POOL_NONE || v > VT_POOL_PRR))
            return vt_fail(
                VT_ERR_ARG,
                "config: global_pool '%s' is not one of timm's ('', token, avg, max, avgmax, map, prr)",
                vt_pool_name((vt_pool)v));
        if (f->type == F_FCN && (v < -1 || v > 1))
            return vt_fail(VT_ERR_ARG, "config: fc_norm must be null, 0 or 1");
        if (f->type == F_ACT && (v < 0 || v > VT_ACT_GELU_TANH))
            return vt_fail(VT_ERR_ARG, "config: act_layer %d is not one vitrine computes", v);
        if (f->type == F_NORM && (v < VT_NORM_NONE || v > VT_NORM_RMS || (v == VT_NORM_NONE && f->dflt != 0)))
            return vt_fail(VT_ERR_ARG, "config: %s %d is not one vitrine computes", f->name, v);
        if (f->type == F_EPS && !(*dval((void *)c, f) > 0 && *dval((void *)c, f) < 1))
            return vt_fail(VT_ERR_ARG, "config: %s must be in (0, 1)", f->name);
    }
    if (c->img_width < 0 || c->img_width > VT_MAX_DIM)
        return vt_fail(VT_ERR_ARG, "config: img_size's width %d is not in 1..%d", c->img_width, VT_MAX_DIM);
    int H = c->img_size, W = vt_img_width(c);
    int square = H == W && H % c->patch_size == 0;
    /* timm floors the grid (PatchEmbed.grid_size = img_size // patch_size); it must have a cell */
    if (H < c->patch_size || W < c->patch_size)
        return vt_fail(VT_ERR_ARG, "config: img_size %dx%d is smaller than patch_size %d (no patch)", H, W,
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
    /* 64-bit: Gh*Gw overflows int (and wasm's 32-bit long) for img 65536 / patch 1 */
    int64_t gh = c->dynamic_img_pad ? (H + c->patch_size - 1) / c->patch_size : H / c->patch_size,
            gw = c->dynamic_img_pad ? (W + c->patch_size - 1) / c->patch_size : W / c->patch_size;
    int64_t tokens = gh * gw + c->class_token + c->reg_tokens + (c->distilled ? 1 : 0);
    if (tokens > VT_MAX_TOKENS)
        return vt_fail(VT_ERR_ARG, "config: %lld tokens exceed %d", (long long)tokens, VT_MAX_TOKENS);
    if (mc->kind == VT_KIND_TIMM && c->mask_token)
        return vt_fail(VT_ERR_ARG,
                       "config: mask_token belongs to lightly's wrapper (kind lightly), not to timm's ViT");
    if (c->distilled) {
        /* VisionTransformerDistilled: [cls, dist, patches] + pos_embed of them all, x[:, 0] and x[:, 1]
         * through head and head_dist (its forward_head: no pooling, no fc_norm) */
        if (mc->kind != VT_KIND_TIMM)
            return vt_fail(VT_ERR_ARG, "config: distilled is timm's VisionTransformerDistilled (kind timm); "
                                       "lightly's wrappers do not know its dist_token");
        if (!c->class_token || c->reg_tokens || c->no_embed_class || !c->pos_embed ||
            c->global_pool != VT_POOL_TOKEN || c->fc_norm == 1)
            return vt_fail(
                VT_ERR_ARG,
                "config: distilled (DeiT's VisionTransformerDistilled) takes class_token, "
                "global_pool 'token', a learned pos_embed with rows for both prefix tokens, and no "
                "reg_tokens, no_embed_class or fc_norm (its forward_head uses none of them)");
    }
    if ((mc->kind == VT_KIND_CAUSAL || mc->kind == VT_KIND_AIM) && c->scale_attn_norm)
        return vt_fail(VT_ERR_ARG,
                       "config: scale_attn_norm with lightly's MaskedCausalVisionTransformer: its "
                       "MaskedCausalAttention builds attn.norm and never applies it");
    if ((mc->kind == VT_KIND_MAE || mc->kind == VT_KIND_AIM) && !square)
        return vt_fail(VT_ERR_ARG,
                       "config: lightly's MAE / AIM patchify square images that are a multiple of patch_size "
                       "(img_size %dx%d, patch_size %d)",
                       H, W, c->patch_size);
    if (c->dynamic_img_pad && !c->dynamic_img_size && c->pos_embed &&
        (H % c->patch_size || W % c->patch_size))
        return vt_fail(
            VT_ERR_ARG,
            "config: dynamic_img_pad without dynamic_img_size pads img_size %dx%d to a grid of %dx%d "
            "patches, and pos_embed has %dx%d (timm fails to add them)",
            H, W, (H + c->patch_size - 1) / c->patch_size, (W + c->patch_size - 1) / c->patch_size,
            H / c->patch_size, W / c->patch_size);
    if ((mc->kind == VT_KIND_LIGHTLY || mc->kind == VT_KIND_MAE) && c->dynamic_img_size &&
        H / c->patch_size != W / c->patch_size)
        return vt_fail(VT_ERR_ARG,
                       "config: lightly's add_pos_embed takes a square grid with dynamic_img_size "
                       "(it reshapes the tokens to sqrt(N) x sqrt(N))");
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

int64_t vt_config_tokens(const vt_vit_config *c) {
    int64_t p = c->patch_size > 0 ? c->patch_size : 1, H = c->img_size, W = vt_img_width(c);
    int64_t gh = c->dynamic_img_pad ? (H + p - 1) / p : H / p,
            gw = c->dynamic_img_pad ? (W + p - 1) / p : W / p;
    return gh * gw + (c->class_token ? 1 : 0) + c->reg_tokens + (c->distilled ? 1 : 0);
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
    int v = *ival((void *)c, f);
    switch (f->type) {
        case F_INT: return snprintf(buf, len, "%d", v);
        case F_BOOL: return snprintf(buf, len, "%s", v ? "true" : "false");
        case F_RATIO:
        case F_EPS: fmt_double(r, sizeof r, *dval((void *)c, f)); return snprintf(buf, len, "%s", r);
        case F_INIT: {
            float x = *fval((void *)c, f);
            return timm && !(x > 0) ? snprintf(buf, len, "null") : snprintf(buf, len, "%.9g", x);
        }
        case F_POS: return snprintf(buf, len, "\"%s\"", v ? "learn" : "none");
        case F_POOL: return snprintf(buf, len, "\"%s\"", vt_pool_name((vt_pool)v));
        case F_IMG: {
            const vt_vit_config *vc = c;
            return vc->img_width && vc->img_width != vc->img_size
                       ? snprintf(buf, len, "[%d, %d]", vc->img_size, vc->img_width)
                       : snprintf(buf, len, "%d", vc->img_size);
        }
        case F_FCN: return snprintf(buf, len, "%s", v < 0 ? "null" : v ? "true" : "false");
        case F_ACT: return snprintf(buf, len, "\"%s\"", v >= 0 && v < 3 ? act_names[v] : "?");
        case F_NORM:
            return v == VT_NORM_NONE ? snprintf(buf, len, "null")
                                     : snprintf(buf, len, "\"%s\"", v > 0 && v < 3 ? norm_names[v] : "?");
    }
    return -1;
}

/* 1 when a field holds its default value (F_IMG: never; it is always written) */
static int at_default(const field *f, const void *c) {
    switch (f->type) {
        case F_RATIO:
        case F_EPS: return *dval((void *)c, f) == f->dflt;
        case F_INIT: return *fval((void *)c, f) == (float)f->dflt;
        case F_IMG: return 0;
        default: return *ival((void *)c, f) == (int)f->dflt;
    }
}

/* {"name": value, ...} of the fields in the given order (a field not always written: only when it
 * is not at its default; sizes_only: only the sizes are always written) */
static int is_size(const field *f) {
    static const char *sizes[] = { "img_size", "patch_size", "in_chans", "embed_dim",
                                   "depth",    "num_heads",  "mlp_ratio" };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(f->name, sizes[i])) return 1;
    return 0;
}
static vt_status write_object_as(char *buf, size_t len, const field *const *fs, int n, const void *c,
                                 int timm, const char *prefix, int sizes_only) {
    size_t at = 0;
    int w = snprintf(buf, len, "{%s", prefix), first = !prefix[0];
    for (int i = 0; i < n && w >= 0 && (size_t)w < len - at; i++) {
        int always = sizes_only ? is_size(fs[i]) : fs[i]->always;
        if (!always && at_default(fs[i], c)) continue;
        at += (size_t)w;
        w = snprintf(buf + at, len - at, "%s\"%s\": ", first ? "" : ", ", fs[i]->name);
        first = 0;
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
static vt_status write_object(char *buf, size_t len, const field *const *fs, int n, const void *c, int timm,
                              const char *prefix) {
    return write_object_as(buf, len, fs, n, c, timm, prefix, 0);
}

/* The inverse of vt_model_config_from_json (what a training checkpoint records, compared byte for
 * byte when one is resumed). */
vt_status vt_model_config_to_json(const vt_model_config *mc, char *buf, size_t len) {
    const field *fs[N_VIT];
    char enc[1280], pre[1400];
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

/* A preset's encoder as kwargs: its sizes, and whatever else differs from timm's defaults (what a
 * config puts an MAE decoder or AIM head under; vtw_manifest's preset_encoders) */
vt_status vt_preset_kwargs_json(const vt_vit_config *c, char *buf, size_t len) {
    const field *fs[N_VIT];
    int n = 0;
    for (size_t i = 0; i < N_VIT; i++)
        if (vit_fields[i].timm_pos >= 0) fs[n++] = &vit_fields[i];
    return write_object_as(buf, len, fs, n, c, 1, "", 1);
}
