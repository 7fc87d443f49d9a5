/* parity.c: the parity harness (parity.h): runs a PyTorch reference dump through the engine's
 * public API and compares every expect/ tensor. A file whose module, call or keys it does not
 * understand is an error, never a silent skip. Besides src/vitrine.h it uses only the engine's
 * format readers (safetensors.h, json.h), never the model's internals. */
#include "parity.h"
#include "json.h"
#include "safetensors.h"
#include "vitrine.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n elements of `size` bytes, zeroed, the size checked in 64 bits first (size_t is 32-bit in
 * wasm); NULL with the message on failure */
static void *alloc_n(uint64_t n, size_t size) {
    uint64_t bytes = (n ? n : 1) * (uint64_t)size;
    if (bytes / size != (n ? n : 1) || bytes > SIZE_MAX) {
        vt_fail(VT_ERR_NOMEM, "%llu elements of %zu bytes do not fit in memory", (unsigned long long)n, size);
        return NULL;
    }
    void *p = calloc(1, (size_t)bytes);
    if (!p) vt_fail(VT_ERR_NOMEM, "out of memory: %llu bytes", (unsigned long long)bytes);
    return p;
}

/* ---- what the engine computed, to compare and to dump ---------------------------------------- */

typedef struct {
    char name[160];
    int ndim;
    long long shape[4];
    float *data; /* a copy */
    size_t n;
} outt;

typedef struct {
    outt *o;
    int n, cap;
    /* the model's config and call, to explain a size mismatch (have_cfg 0 for primitives) */
    int have_cfg;
    vt_model_config cfg;
    vt_fn fn;
} outs;

static vt_status push(outs *s, const char *name, const float *data, size_t n, int ndim,
                      const long long *shape) {
    if (s->n == s->cap) {
        int nc = s->cap ? 2 * s->cap : 64;
        outt *no = realloc(s->o, (size_t)nc * sizeof *no);
        if (!no) return vt_fail(VT_ERR_NOMEM, "out of memory");
        s->o = no;
        s->cap = nc;
    }
    outt *t = &s->o[s->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    for (int i = 0; i < ndim && i < 4; i++) t->shape[i] = shape[i];
    t->n = n;
    t->data = alloc_n(n, sizeof(float));
    if (!t->data) return VT_ERR_NOMEM;
    memcpy(t->data, data, n * sizeof(float));
    s->n++;
    return VT_OK;
}

static void outs_free(outs *s) {
    for (int i = 0; i < s->n; i++) free(s->o[i].data);
    free(s->o);
    memset(s, 0, sizeof *s);
}

static void shape_str(char *buf, size_t len, int ndim, const long long *shape) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? ", " : "", shape[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

/* Why an output of ours (shape a) and the file's (shape b) may differ in size: the likely cause,
 * from the config and the call. */
static const char *mismatch_cause(const outs *o, int na, const long long *a, int nb, const long long *b,
                                  char *buf, size_t len) {
    if (!o->have_cfg) return "";
    const vt_vit_config *c = &o->cfg.enc;
    int fwd = o->fn == VT_FN_FORWARD || o->fn == VT_FN_TIMM_FORWARD;
    long long la = na ? a[na - 1] : 0, lb = nb ? b[nb - 1] : 0;
    if (na >= 1 && nb >= 1 && a[0] != b[0])
        snprintf(buf, len, "; likely cause: a batch of %lld in the file against %lld images", b[0], a[0]);
    else if (fwd && na != nb)
        snprintf(buf, len,
                 "; likely cause: pooling (global_pool '%s'): '' keeps every token [B, T, .], the "
                 "others pool to [B, .]",
                 vt_pool_name(c->global_pool));
    else if (fwd && lb == c->embed_dim && la != lb)
        snprintf(buf, len,
                 "; likely cause: the file's output has no classifier head (%lld = embed_dim) but the "
                 "config has num_classes %d: set num_classes 0",
                 lb, c->num_classes);
    else if (fwd && la == c->embed_dim && lb != la)
        snprintf(buf, len,
                 "; likely cause: a classifier head: the file's output has %lld values per row, as "
                 "logits of num_classes %lld would (timm's forward applies `head`; lightly's forward "
                 "never does): set num_classes %lld in the config",
                 lb, lb, lb);
    else if (fwd && la != lb)
        snprintf(buf, len, "; likely cause: num_classes (config %d) or global_pool ('%s')", c->num_classes,
                 vt_pool_name(c->global_pool));
    else
        snprintf(buf, len,
                 "; likely cause: the config (img_size %d, patch_size %d, class_token %d, reg_tokens %d, "
                 "global_pool '%s', num_classes %d) or the call's indices",
                 c->img_size, c->patch_size, c->class_token, c->reg_tokens, vt_pool_name(c->global_pool),
                 c->num_classes);
    return buf;
}

/* ---- reading the file ------------------------------------------------------------------------- */

static float *tensor_f32(const vt_st_tensor *t) {
    float *d = alloc_n(t->numel, sizeof(float));
    if (!d) return NULL;
    if (vt_st_to_f32(t, d)) {
        free(d);
        return NULL;
    }
    return d;
}

/* An optional [B, *] integer tensor as int64; *out stays NULL when the file has none. */
static vt_status read_i64(const vt_st_file *f, const char *key, int batch, long long want_cols,
                          long long **out, int *cols) {
    const vt_st_tensor *t = vt_st_find(f, key);
    if (!t) return VT_OK;
    if (t->ndim != 2 || t->shape[0] != batch || (want_cols >= 0 && t->shape[1] != want_cols)) {
        if (want_cols >= 0) return vt_fail(VT_ERR_MISMATCH, "%s must be [B, %lld]", key, want_cols);
        return vt_fail(VT_ERR_MISMATCH, "%s must be [B, K]", key);
    }
    *out = alloc_n(t->numel, sizeof **out);
    if (!*out) return VT_ERR_NOMEM;
    *cols = (int)t->shape[1];
    return vt_st_to_i64(t, *out);
}

/* ---- comparing -------------------------------------------------------------------------------- */

static vt_status perr(vt_parity_result *r, int rc) {
    snprintf(r->error, sizeof r->error, "%s", vt_last_error());
    return rc ? rc : VT_ERR_FORMAT;
}

static double rel_err(const float *ours, const float *ref, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)ours[i] - ref[i]);
        if (isnan(d)) return INFINITY; /* a NaN on either side is a failure, wherever it is */
        if (d > md) md = d;
        if (fabs((double)ref[i]) > mr) mr = fabs((double)ref[i]);
    }
    /* a non-finite value on either side (NaN, or Inf that makes md / mr NaN) is the worst error */
    if (!isfinite(md) || !isfinite(mr)) return INFINITY;
    return mr > 0 ? md / mr : md;
}

/* PyTorch's own float32 error against its float64 expect, in *err (-1 when the file has no
 * torch32/ key); a torch32/ tensor of another size than its expect/ one is an error */
static vt_status torch32_err(const vt_st_file *f, const vt_st_tensor *expect, const float *ref,
                             const char *key, double *err) {
    char tk[200];
    snprintf(tk, sizeof tk, "torch32/%s", key);
    const vt_st_tensor *t32 = vt_st_find(f, tk);
    *err = -1;
    if (!t32) return VT_OK;
    if (t32->numel != expect->numel) {
        char sa[96], sb[96];
        shape_str(sa, sizeof sa, t32->ndim, t32->shape);
        shape_str(sb, sizeof sb, expect->ndim, expect->shape);
        return vt_fail(VT_ERR_MISMATCH, "%s is %s, %s is %s", tk, sa, expect->name, sb);
    }
    float *a = tensor_f32(t32);
    if (!a) return VT_ERR_FORMAT;
    *err = rel_err(a, ref, expect->numel);
    free(a);
    return VT_OK;
}

/* an expected value that is NaN or infinite makes the comparison meaningless: the dump is broken */
static vt_status check_finite(const vt_st_tensor *t, const float *v) {
    for (size_t i = 0; i < t->numel; i++)
        if (!isfinite(v[i])) {
            char sh[96];
            shape_str(sh, sizeof sh, t->ndim, t->shape);
            return vt_fail(VT_ERR_FORMAT,
                           "%s holds %s (element %zu of %s): the reference is broken; make the dump again",
                           t->name, isnan(v[i]) ? "NaN" : "an infinity", i, sh);
        }
    return VT_OK;
}

/* compares every expect/ key of the file with the computed outputs */
static vt_status compare(const vt_st_file *f, const outs *o, vt_parity_result *r) {
    int ne = 0;
    for (size_t i = 0; i < f->n; i++) ne += !strncmp(f->tensors[i].name, "expect/", 7);
    r->t = calloc((size_t)ne + 1, sizeof *r->t);
    if (!r->t) return perr(r, vt_fail(VT_ERR_NOMEM, "out of memory"));
    r->worst = -1;
    r->pass = ne > 0;
    if (!ne) return perr(r, vt_fail(VT_ERR_FORMAT, "the file has no expect/ tensors"));
    for (size_t i = 0; i < f->n; i++) {
        const vt_st_tensor *t = &f->tensors[i];
        if (strncmp(t->name, "expect/", 7)) continue;
        const char *key = t->name + 7;
        const outt *mine = NULL;
        for (int j = 0; j < o->n; j++)
            if (!strcmp(o->o[j].name, key)) mine = &o->o[j];
        if (!mine)
            return perr(r,
                        vt_fail(VT_ERR_FORMAT, "vitrine computes nothing for '%s' (unsupported)", t->name));
        if (mine->n != t->numel) {
            char sa[96], sb[96], why[400];
            shape_str(sa, sizeof sa, mine->ndim, mine->shape);
            shape_str(sb, sizeof sb, t->ndim, t->shape);
            return perr(
                r, vt_fail(VT_ERR_MISMATCH,
                           "output '%s': vitrine computed %s (%zu values), the file's %s is %s "
                           "(%zu values)%s",
                           key, sa, mine->n, t->name, sb, t->numel,
                           mismatch_cause(o, mine->ndim, mine->shape, t->ndim, t->shape, why, sizeof why)));
        }
        float *ref = tensor_f32(t);
        if (!ref) return perr(r, VT_ERR_FORMAT);
        double t32 = -1;
        int rc = check_finite(t, ref);
        if (!rc) rc = torch32_err(f, t, ref, key, &t32);
        if (rc) {
            free(ref);
            return perr(r, rc);
        }
        vt_parity_tensor *pt = &r->t[r->n++];
        snprintf(pt->name, sizeof pt->name, "%s", key);
        pt->err = rel_err(mine->data, ref, t->numel);
        free(ref);
        pt->torch32_err = t32;
        if (pt->torch32_err > r->max_torch32_err) r->max_torch32_err = pt->torch32_err;
        if (!(pt->err <= VT_PARITY_TOL)) r->pass = 0;
        if (r->worst < 0 || !(pt->err <= r->t[r->worst].err)) r->worst = r->n - 1;
    }
    return VT_OK;
}

static vt_status make_dump(const outs *o, vt_parity_result *r) {
    vt_st_entry *e = calloc((size_t)o->n + 1, sizeof *e);
    if (!e) return perr(r, vt_fail(VT_ERR_NOMEM, "out of memory"));
    for (int i = 0; i < o->n; i++) {
        e[i].name = o->o[i].name;
        e[i].dtype = VT_DT_F32;
        e[i].ndim = o->o[i].ndim;
        e[i].shape = o->o[i].shape;
        e[i].data = o->o[i].data;
    }
    const char *mk[] = { "format" }, *mv[] = { "vitrine-parity-dump/1" };
    int rc = vt_st_write(e, (size_t)o->n, mk, mv, 1, &r->dump, &r->dump_len);
    free(e);
    return rc ? perr(r, rc) : VT_OK;
}

/* ---- files of a primitive: the sin-cos table, AdamW -------------------------------------------- */

static vt_status run_sincos(const vt_st_file *f, outs *o) {
    for (size_t i = 0; i < f->n; i++) {
        const vt_st_tensor *t = &f->tensors[i];
        int D, G, P;
        if (strncmp(t->name, "expect/", 7)) continue;
        if (sscanf(t->name, "expect/sincos.d%d.g%d.p%d", &D, &G, &P) != 3)
            return vt_fail(VT_ERR_FORMAT, "unexpected key '%s' in a sin-cos file", t->name);
        if (D <= 0 || D > 65536 || G <= 0 || G > 1024 || P < 0 || P > 64)
            return vt_fail(VT_ERR_FORMAT, "sin-cos key '%s' out of range", t->name);
        /* only as large as the file's own expected tensor (which is in the file): a 120-byte file
         * must not ask for gigabytes natively (nor wrap wasm's 32-bit size_t) */
        uint64_t rows = (uint64_t)P + (uint64_t)G * G, n64 = rows * (uint64_t)D;
        if (n64 <= SIZE_MAX / sizeof(float) &&
            n64 != (uint64_t)t->numel) /* past the address space: alloc_n says so */
            return vt_fail(VT_ERR_FORMAT, "sin-cos key '%s' names %llu values, the tensor holds %llu",
                           t->name, (unsigned long long)n64, (unsigned long long)t->numel);
        float *tab = alloc_n(rows * D, sizeof(float));
        if (!tab) return VT_ERR_NOMEM;
        size_t n = (size_t)(rows * D); /* fits: alloc_n checked its bytes */
        int rc = vt_sincos_table(tab, D, G, P);
        long long shape[2] = { P + G * G, D };
        if (!rc) rc = push(o, t->name + 7, tab, n, 2, shape);
        free(tab);
        if (rc) return rc;
    }
    return VT_OK;
}

/* ---- the file's metadata, checked before any tensor is read (one validator, every field named) ---- */

typedef enum { PM_SINCOS, PM_ADAMW, PM_MODEL } pm_what;
typedef struct {
    pm_what what;
    vt_kind kind;         /* PM_MODEL: the module's */
    int distilled;        /* the module is timm's VisionTransformerDistilled */
    const char *cfg_text; /* the config as written (PM_MODEL: vt_model_config_from_json) */
    vt_json *cfg, *call;
    double lr, eps, weight_decay, b1, b2; /* PM_ADAMW */
    long steps;
} parity_meta;

static const struct {
    const char *module;
    pm_what what;
    vt_kind kind;
} MODULES[] = { { "timm.VisionTransformer", PM_MODEL, VT_KIND_TIMM },
                { "timm.VisionTransformerDistilled", PM_MODEL, VT_KIND_TIMM },
                { "lightly.MaskedVisionTransformerTIMM", PM_MODEL, VT_KIND_LIGHTLY },
                { "lightly.MaskedCausalVisionTransformer", PM_MODEL, VT_KIND_CAUSAL },
                { "lightly.examples.MAE", PM_MODEL, VT_KIND_MAE },
                { "lightly.examples.AIM", PM_MODEL, VT_KIND_AIM },
                { "torch.optim.AdamW", PM_ADAMW, VT_KIND_TIMM },
                { "lightly.models.utils.get_2d_sine_cosine_positional_embedding", PM_SINCOS, VT_KIND_TIMM } };

/* a number of o (named field) in [lo, hi] (hi_open: [lo, hi)) */
static vt_status meta_num(const vt_json *o, const char *field, const char *k, double lo, double hi,
                          int hi_open, double *v) {
    const vt_json *j = vt_json_get(o, k);
    if (!j || j->type != VT_JSON_NUMBER)
        return vt_fail(VT_ERR_FORMAT, "metadata %s.%s: a number is needed", field, k);
    if (!(j->number >= lo && (hi_open ? j->number < hi : j->number <= hi)))
        return vt_fail(VT_ERR_FORMAT, "metadata %s.%s: %g is outside %s%g, %g%s", field, k, j->number, "[",
                       lo, hi, hi_open ? ")" : "]");
    *v = j->number;
    return VT_OK;
}

/* format, module, config and call: present, of their types, every option known and of its type,
 * every number in range. pm holds the parsed config and call (parity_meta_free). */
static vt_status check_meta(const vt_st_file *f, parity_meta *pm) {
    memset(pm, 0, sizeof *pm);
    const char *fmt = vt_st_meta(f, "format"), *module = vt_st_meta(f, "module"),
               *call_text = vt_st_meta(f, "call");
    pm->cfg_text = vt_st_meta(f, "config");
    if (!fmt || strcmp(fmt, "vitrine-parity/1"))
        return vt_fail(VT_ERR_FORMAT, "not a vitrine-parity/1 file (metadata format = %s)",
                       fmt ? fmt : "missing");
    if (!module || !pm->cfg_text || !call_text)
        return vt_fail(VT_ERR_FORMAT, "metadata needs module, config and call");
    int rc = vt_json_parse_field(pm->cfg_text, strlen(pm->cfg_text), "metadata config", &pm->cfg);
    if (!rc) rc = vt_json_parse_field(call_text, strlen(call_text), "metadata call", &pm->call);
    if (rc) return rc;
    if (pm->cfg->type != VT_JSON_OBJECT || pm->call->type != VT_JSON_OBJECT)
        return vt_fail(VT_ERR_FORMAT, "metadata config and call must be JSON objects");
    const vt_json *fn = vt_json_get(pm->call, "fn");
    if (!fn || fn->type != VT_JSON_STRING)
        return vt_fail(VT_ERR_FORMAT, "metadata call.fn: the call's name (a string) is needed");
    size_t i = 0, nm = sizeof MODULES / sizeof MODULES[0];
    while (i < nm && strcmp(MODULES[i].module, module)) i++;
    /* a sin-cos table is recognised by its call (whatever module wrote it) */
    pm->what = !strcmp(fn->str, "sincos") ? PM_SINCOS : i < nm ? MODULES[i].what : PM_MODEL;
    if (pm->what == PM_MODEL && i == nm) return vt_fail(VT_ERR_FORMAT, "unsupported module '%s'", module);
    pm->kind = i < nm ? MODULES[i].kind : VT_KIND_TIMM;
    pm->distilled = !strcmp(module, "timm.VisionTransformerDistilled");
    /* the call's options: known for what the file runs, each of its type */
    static const char *const model_opts[] = { "fn", "idx_mask", "idx_keep", "mask", "is_causal", "norm",
                                              "distilled_training",
                                              /* timm's forward_intermediates */
                                              "indices", "return_prefix_tokens", "stop_early", "output_fmt",
                                              "intermediates_only", "output_dict", NULL };
    static const char *const adamw_opts[] = { "fn", "steps", NULL }, *const sincos_opts[] = { "fn", "keys",
                                                                                              NULL };
    const char *const *opts = pm->what == PM_MODEL   ? model_opts
                              : pm->what == PM_ADAMW ? adamw_opts
                                                     : sincos_opts;
    for (size_t k = 0; k < pm->call->n; k++) {
        const char *key = pm->call->keys[k];
        const vt_json *v = &pm->call->items[k];
        int o = 0;
        while (opts[o] && strcmp(opts[o], key)) o++;
        if (!opts[o]) return vt_fail(VT_ERR_FORMAT, "unsupported call option '%s'", key);
        if (!strcmp(key, "indices")) { /* timm's: null, a count of last blocks, or a list of indices */
            int ok = v->type == VT_JSON_NULL || v->type == VT_JSON_NUMBER;
            if (v->type == VT_JSON_ARRAY) {
                ok = v->n > 0 && v->n <= 64;
                for (size_t e = 0; e < v->n && ok; e++) ok = v->items[e].type == VT_JSON_NUMBER;
            }
            if (!ok)
                return vt_fail(VT_ERR_FORMAT,
                               "metadata call.indices: null, a whole number or a list of 1 to 64 of them");
        } else if (!strcmp(key, "output_fmt")) {
            if (v->type != VT_JSON_STRING || (strcmp(v->str, "NCHW") && strcmp(v->str, "NLC")))
                return vt_fail(VT_ERR_FORMAT, "metadata call.output_fmt: \"NCHW\" or \"NLC\"");
        } else if (pm->what == PM_MODEL && strcmp(key, "fn") && v->type != VT_JSON_BOOL)
            return vt_fail(VT_ERR_FORMAT, "metadata call.%s: true or false is needed", key);
        if (!strcmp(key, "keys") && v->type != VT_JSON_STRING)
            return vt_fail(VT_ERR_FORMAT, "metadata call.keys: a string is needed");
    }
    if (pm->what != PM_ADAMW) return VT_OK;
    double steps = 0;
    if ((rc = meta_num(pm->call, "call", "steps", 1, 100000, 0, &steps))) return rc;
    if (steps != (long)steps)
        return vt_fail(VT_ERR_FORMAT, "metadata call.steps: %g is not a whole number", steps);
    pm->steps = (long)steps;
    const vt_json *betas = vt_json_get(pm->cfg, "betas");
    if (!betas || betas->type != VT_JSON_ARRAY || betas->n != 2)
        return vt_fail(VT_ERR_FORMAT, "metadata config.betas: [b1, b2] is needed");
    for (int b = 0; b < 2; b++) {
        const vt_json *x = &betas->items[b];
        if (x->type != VT_JSON_NUMBER || !(x->number >= 0 && x->number < 1))
            return vt_fail(VT_ERR_FORMAT, "metadata config.betas[%d]: a number in [0, 1) is needed", b);
        *(b ? &pm->b2 : &pm->b1) = x->number;
    }
    /* torch's own bounds (lr, eps, weight_decay >= 0); lr at most the engine's 1e3 (VT_MAX_LR) */
    if (!(rc = meta_num(pm->cfg, "config", "lr", 0, 1e3, 0, &pm->lr)) &&
        !(rc = meta_num(pm->cfg, "config", "eps", 0, 1, 0, &pm->eps)))
        rc = meta_num(pm->cfg, "config", "weight_decay", 0, 1e6, 0, &pm->weight_decay);
    return rc;
}

static void parity_meta_free(parity_meta *pm) {
    vt_json_free(pm->cfg);
    vt_json_free(pm->call);
    memset(pm, 0, sizeof *pm);
}

static vt_status run_adamw(const vt_st_file *f, const parity_meta *pm, outs *o) {
    int rc;
    const vt_st_tensor *w = vt_st_find(f, "param/w");
    if (!w) return vt_fail(VT_ERR_FORMAT, "AdamW file needs param/w");
    size_t n = w->numel;
    float *p = tensor_f32(w), *m = alloc_n(n, sizeof(float)), *v = alloc_n(n, sizeof(float));
    rc = (p && m && v) ? VT_OK : VT_ERR_NOMEM;
    for (long s = 0; s < pm->steps && !rc; s++) {
        char k[64];
        snprintf(k, sizeof k, "input/grad.%ld", s);
        const vt_st_tensor *g = vt_st_find(f, k);
        if (!g || g->numel != n) {
            rc = vt_fail(VT_ERR_FORMAT, "missing or mis-shaped %s", k);
            break;
        }
        float *gd = tensor_f32(g);
        if (!gd) {
            rc = VT_ERR_FORMAT;
            break;
        }
        vt_adamw_update(p, gd, m, v, n, s + 1, (float)pm->lr, (float)pm->b1, (float)pm->b2, (float)pm->eps,
                        (float)pm->weight_decay);
        free(gd);
        snprintf(k, sizeof k, "param.%ld", s);
        rc = push(o, k, p, n, w->ndim, w->shape);
    }
    free(p);
    free(m);
    free(v);
    return rc;
}

/* ---- files of a model: parameters in, one call forward and backward, outputs and gradients out -- */

/* a call option (checked by check_meta to be true or false when present) */
static int call_flag(const vt_json *call, const char *k, int dflt) {
    const vt_json *j = vt_json_get(call, k);
    return j ? j->boolean : dflt;
}

/* timm's forward_intermediates options of the call into o (indices against the model's depth) */
static vt_status read_inter_opts(const vt_json *call, int depth, vt_inter_opts *o) {
    memset(o, 0, sizeof *o);
    const vt_json *ix = vt_json_get(call, "indices"), *fmt = vt_json_get(call, "output_fmt");
    int list[64], n = -1, last_n = 0;
    if (ix && ix->type == VT_JSON_NUMBER) {
        if (ix->number != (int)ix->number)
            return vt_fail(VT_ERR_FORMAT, "metadata call.indices: %g is not a whole number", ix->number);
        last_n = (int)ix->number;
        if (last_n == 0) /* timm's assert: 0 < n */
            return vt_fail(VT_ERR_FORMAT, "metadata call.indices: last-n (0) is out of range (1 to %d)",
                           depth);
    } else if (ix && ix->type == VT_JSON_ARRAY) {
        n = (int)ix->n;
        for (int k = 0; k < n; k++) {
            double d = ix->items[k].number;
            if (d != (int)d || d < -1e6 || d > 1e6)
                return vt_fail(VT_ERR_FORMAT, "metadata call.indices[%d]: %g is not a block index", k, d);
            list[k] = (int)d;
        }
    }
    int rc = vt_take_indices(depth, n >= 0 ? list : NULL, n, last_n, &o->take);
    if (rc) return vt_fail(VT_ERR_FORMAT, "metadata call.%s", vt_last_error());
    o->norm = call_flag(call, "norm", 0);
    o->return_prefix_tokens = call_flag(call, "return_prefix_tokens", 0);
    o->stop_early = call_flag(call, "stop_early", 0);
    o->intermediates_only = call_flag(call, "intermediates_only", 0);
    o->nchw = !fmt || !strcmp(fmt->str, "NCHW"); /* timm's default output_fmt */
    return VT_OK;
}

/* The call's fn (PyTorch's method name) as a vt_fn for this kind of module. */
static vt_status call_fn(const vt_json *call, vt_kind kind, vt_fn *fn) {
    const char *s = vt_json_get(call, "fn")->str;
    int loss_kind = kind == VT_KIND_MAE || kind == VT_KIND_AIM;
    if (!strcmp(s, "encode") || !strcmp(s, "forward_features")) *fn = VT_FN_ENCODE;
    /* timm's VisionTransformer.forward is forward_features + forward_head (pool, fc_norm, head);
     * lightly's modules' forward pools only */
    else if (!strcmp(s, "forward"))
        *fn = kind == VT_KIND_TIMM ? VT_FN_TIMM_FORWARD : VT_FN_FORWARD;
    else if (!strcmp(s, "forward_intermediates") && kind == VT_KIND_TIMM) /* timm's own */
        *fn = VT_FN_TIMM_INTERMEDIATES;
    else if (!strcmp(s, "forward_intermediates"))
        *fn = call_flag(call, "norm", 0) ? VT_FN_INTERMEDIATES_NORM : VT_FN_INTERMEDIATES;
    else if (!strcmp(s, "loss") && loss_kind)
        *fn = VT_FN_LOSS;
    else
        return vt_fail(VT_ERR_FORMAT, "unsupported call '%s' for this module", s);
    return VT_OK;
}

/* Parameters: param/<name> trainable, frozen/<name> frozen; every one present exactly once, and
 * no other param/ or frozen/ tensor. */
static vt_status load_params(const vt_st_file *f, vt_model *m) {
    int rc = VT_OK;
    for (int i = 0; i < vt_param_count(m) && !rc; i++) {
        const char *name = vt_param_name(m, i);
        char a[200], b[200];
        snprintf(a, sizeof a, "param/%s", name);
        snprintf(b, sizeof b, "frozen/%s", name);
        const vt_st_tensor *ta = vt_st_find(f, a), *tb = vt_st_find(f, b), *t = ta ? ta : tb;
        if (!t)
            return vt_fail(VT_ERR_MISMATCH, "%s is missing (the model has this parameter; nor is there %s)",
                           a, b);
        if (ta && tb) return vt_fail(VT_ERR_MISMATCH, "the file must hold exactly one of %s, %s", a, b);
        if (t->numel != vt_param_numel(m, i))
            return vt_fail(VT_ERR_MISMATCH, "%s has %zu values, the model expects %zu", t->name, t->numel,
                           vt_param_numel(m, i));
        int trainable = ta != NULL;
        if (vt_param_requires_grad(m, i) != trainable) rc = vt_set_requires_grad(m, name, trainable, NULL);
        if (!rc) rc = vt_st_to_f32(t, vt_param_data(m, i));
    }
    for (size_t j = 0; j < f->n && !rc; j++) {
        const char *nm = f->tensors[j].name;
        if (!strncmp(nm, "param/", 6) && vt_param_find(m, nm + 6) < 0)
            rc = vt_fail(VT_ERR_MISMATCH, "unexpected tensor '%s'", nm);
        if (!strncmp(nm, "frozen/", 7) && vt_param_find(m, nm + 7) < 0)
            rc = vt_fail(VT_ERR_MISMATCH, "unexpected tensor '%s'", nm);
    }
    return rc;
}

/* The call's inputs as the file gives them, in the buffers vt_inputs points into. */
typedef struct {
    vt_inputs in;
    float *images;
    long long *idx_mask, *idx_keep;
    uint8_t *mask;
} model_inputs;

static void inputs_free(model_inputs *x) {
    free(x->images);
    free(x->idx_mask);
    free(x->idx_keep);
    free(x->mask);
    memset(x, 0, sizeof *x);
}

static vt_status read_inputs(const vt_st_file *f, const vt_model *m, const vt_json *call, model_inputs *x) {
    const vt_vit_config *ec = &vt_model_get_config(m)->enc;
    vt_inputs *in = &x->in;
    const vt_st_tensor *ti = vt_st_find(f, "input/images");
    if (!ti) return vt_fail(VT_ERR_MISMATCH, "input/images is missing");
    int W0 = vt_img_width(ec);
    if (ti->ndim != 4 || ti->shape[1] != ec->in_chans ||
        (!ec->dynamic_img_size && (ti->shape[2] != ec->img_size || ti->shape[3] != W0)))
        return vt_fail(VT_ERR_MISMATCH, "input/images must be [B, %d, %d, %d]%s", ec->in_chans, ec->img_size,
                       W0, ec->dynamic_img_size ? " (any height and width: dynamic_img_size)" : "");
    if (ti->shape[2] < 1 || ti->shape[2] > 1000000 || ti->shape[3] < 1 || ti->shape[3] > 1000000)
        return vt_fail(VT_ERR_MISMATCH, "input/images: %lld x %lld pixels", ti->shape[2], ti->shape[3]);
    in->height = (int)ti->shape[2];
    in->width = (int)ti->shape[3];
    in->batch = (int)ti->shape[0];
    x->images = tensor_f32(ti);
    if (!x->images) return VT_ERR_FORMAT;
    in->images = x->images;
    int rc = read_i64(f, "input/idx_mask", in->batch, -1, &x->idx_mask, &in->n_mask);
    if (!rc) rc = read_i64(f, "input/idx_keep", in->batch, -1, &x->idx_keep, &in->n_keep);
    in->idx_mask = (const int64_t *)x->idx_mask;
    in->idx_keep = (const int64_t *)x->idx_keep;
    /* the mask covers the whole sequence, prefix tokens included (as vit.c reads it), for the
     * token-replacing mask of lightly's encoder and the causal prefix mask alike */
    long long p = ec->patch_size, pad = ec->dynamic_img_pad;
    long long Gh = pad ? (in->height + p - 1) / p : in->height / p,
              Gw = pad ? (in->width + p - 1) / p : in->width / p;
    long long L = Gh * Gw + (ec->class_token ? 1 : 0) + ec->reg_tokens + (ec->distilled ? 1 : 0);
    long long *mask = NULL;
    int cols = 0;
    if (!rc) rc = read_i64(f, "input/mask", in->batch, L, &mask, &cols);
    if (!rc && mask) {
        size_t n = (size_t)in->batch * (size_t)L;
        x->mask = alloc_n(n, 1);
        if (!x->mask) rc = VT_ERR_NOMEM;
        for (size_t i = 0; i < n && !rc; i++) x->mask[i] = mask[i] != 0;
        in->mask = x->mask;
    }
    free(mask);
    in->is_causal = call_flag(call, "is_causal", 1); /* lightly's default is_causal=True */
    in->distilled_training = call_flag(call, "distilled_training", 0);
    const char *fname = vt_json_get(call, "fn")->str;
    if (!rc && !strcmp(fname, "forward_intermediates") && vt_model_get_config(m)->kind == VT_KIND_TIMM)
        rc = read_inter_opts(call, ec->depth, &in->inter);
    else /* an option of timm's forward_intermediates on another call would be ignored: refused */
        for (const char *const *k =
                 (const char *const[]){ "indices", "return_prefix_tokens", "stop_early", "output_fmt",
                                        "intermediates_only", "output_dict", NULL };
             !rc && *k; k++)
            if (vt_json_get(call, *k))
                rc = vt_fail(VT_ERR_FORMAT,
                             "metadata call.%s: an option of timm's forward_intermediates, not of %s", *k,
                             fname);
    return rc;
}

/* output i's name in the file: out, intermediates.<i>, or DeiT's out_dist (head_dist's output in
 * timm's distilled training mode, output 1 of timm's forward); timm's forward_intermediates: [out],
 * intermediates.<k>, intermediates_prefix.<k> (its output_dict's image_intermediates_prefix) */
static void output_name(char *nm, size_t len, vt_fn fn, const vt_inputs *in, int i) {
    if (fn == VT_FN_TIMM_INTERMEDIATES) {
        int o_sp = in->inter.intermediates_only ? 0 : 1, n = 0;
        for (int b = 0; b < 64; b++) n += (int)(in->inter.take >> b & 1);
        if (i < o_sp)
            snprintf(nm, len, "out");
        else if (i < o_sp + n)
            snprintf(nm, len, "intermediates.%d", i - o_sp);
        else
            snprintf(nm, len, "intermediates_prefix.%d", i - o_sp - n);
        return;
    }
    if (i == 0)
        snprintf(nm, len, "out");
    else if (fn == VT_FN_TIMM_FORWARD)
        snprintf(nm, len, "out_dist");
    else
        snprintf(nm, len, "intermediates.%d", i - 1);
}

static int has_prefix(const vt_st_file *f, const char *prefix) {
    for (size_t i = 0; i < f->n; i++)
        if (!strncmp(f->tensors[i].name, prefix, strlen(prefix))) return 1;
    return 0;
}

/* Pushes each output of the call (loss, or out + intermediates.i) and reads the upstream gradient
 * the file gives for it (input/dout/<name>) into douts[i]; *n_douts = outputs that take one. */
static vt_status push_outputs(const vt_st_file *f, const vt_model *m, vt_fn fn, const vt_inputs *in, outs *o,
                              float **douts, int *n_douts) {
    int nout = vt_output_count(m);
    for (int i = 0; i < nout; i++) {
        int64_t sh[4];
        int nd;
        const float *y = vt_output(m, i, sh, &nd);
        long long shl[4] = { sh[0], sh[1], sh[2], sh[3] };
        size_t n = 1;
        for (int d = 0; d < nd; d++) n *= (size_t)sh[d];
        char nm[64];
        if (fn == VT_FN_LOSS)
            snprintf(nm, sizeof nm, "loss");
        else
            output_name(nm, sizeof nm, fn, in, i);
        int rc = push(o, nm, y, n, nd, shl);
        if (rc) return rc;
        if (fn == VT_FN_LOSS) continue;
        char dk[96];
        snprintf(dk, sizeof dk, "input/dout/%s", nm);
        const vt_st_tensor *dt = vt_st_find(f, dk);
        if (dt) {
            if (dt->numel != n) {
                char sa[96], sb[96], why[400];
                shape_str(sa, sizeof sa, nd, shl);
                shape_str(sb, sizeof sb, dt->ndim, dt->shape);
                return vt_fail(VT_ERR_MISMATCH,
                               "output '%s': vitrine computed %s (%zu values), the file's %s is %s "
                               "(%zu values)%s",
                               nm, sa, n, dk, sb, dt->numel,
                               mismatch_cause(o, nd, shl, dt->ndim, dt->shape, why, sizeof why));
            }
            douts[i] = tensor_f32(dt);
            if (!douts[i]) return VT_ERR_FORMAT;
        } else if (has_prefix(f, "expect/grad/")) {
            /* a missing upstream gradient would be taken as zero: every gradient would then fail */
            return vt_fail(VT_ERR_FORMAT,
                           "%s is missing: the expect/grad/ tensors are gradients of sum(%s * dout)", dk, nm);
        }
        *n_douts = i + 1;
    }
    return VT_OK;
}

/* Pushes grad/<name> of every trainable parameter, in the model's order. */
static vt_status push_grads(vt_model *m, outs *o) {
    for (int i = 0; i < vt_param_count(m); i++) {
        const float *g = vt_param_grad(m, i);
        if (!g) continue;
        char nm[160];
        long long shl[4] = { 0 };
        for (int d = 0; d < vt_param_ndim(m, i); d++) shl[d] = vt_param_shape(m, i)[d];
        snprintf(nm, sizeof nm, "grad/%s", vt_param_name(m, i));
        int rc = push(o, nm, g, vt_param_numel(m, i), vt_param_ndim(m, i), shl);
        if (rc) return rc;
    }
    return VT_OK;
}

/* The model from the file's config and parameters, one call forward (keeping what backward
 * needs, under `policy`) and backward with the file's upstream gradients; pushes the outputs,
 * the parameter gradients and, when the file expects it, the image gradient. */
/* The model of the file's config and parameters under `policy`, and the call's inputs (*m NULL
 * on failure; x freed by the caller either way). */
static vt_status model_open(const vt_st_file *f, const parity_meta *pm, const char *policy, vt_fn *fn,
                            vt_model_config *mc, vt_model **m, model_inputs *x) {
    *m = NULL;
    memset(x, 0, sizeof *x);
    int rc = call_fn(pm->call, pm->kind, fn);
    if (!rc) rc = vt_model_config_from_json(pm->cfg_text, strlen(pm->cfg_text), pm->kind, mc);
    if (!rc && pm->distilled != mc->enc.distilled)
        rc = vt_fail(VT_ERR_FORMAT, "module %s with config distilled %s: they disagree",
                     pm->distilled ? "timm.VisionTransformerDistilled" : "timm.VisionTransformer",
                     mc->enc.distilled ? "true" : "false");
    if (!rc) rc = vt_model_create(mc, m);
    if (!rc) rc = load_params(f, *m);
    if (!rc && policy) rc = vt_set_grad_checkpointing(*m, policy);
    if (!rc) rc = read_inputs(f, *m, pm->call, x);
    return rc;
}

static vt_status run_model(const vt_st_file *f, const parity_meta *pm, const char *policy, outs *o) {
    vt_fn fn = VT_FN_ENCODE;
    vt_model_config mc;
    vt_model *m = NULL;
    model_inputs x;
    int rc = model_open(f, pm, policy, &fn, &mc, &m, &x);
    float **douts = NULL, *dimages = NULL;
    int n_douts = 0;
    const vt_vit_config *ec = &mc.enc;

    o->have_cfg = 1;
    o->cfg = mc;
    o->fn = fn;
    if (!rc) rc = vt_forward(m, fn, &x.in, 1);
    if (!rc) {
        douts = calloc((size_t)vt_output_count(m) + 1, sizeof *douts);
        rc = douts ? push_outputs(f, m, fn, &x.in, o, douts, &n_douts)
                   : vt_fail(VT_ERR_NOMEM, "out of memory");
    }
    uint64_t img_n = (uint64_t)x.in.batch * ec->in_chans * (uint64_t)x.in.height * (uint64_t)x.in.width;
    if (!rc && vt_st_find(f, "expect/grad/input/images")) {
        dimages = alloc_n(img_n, sizeof(float));
        if (!dimages) rc = VT_ERR_NOMEM;
    }
    if (!rc) {
        vt_zero_grad(m);
        rc = vt_backward(m, (const float *const *)douts, n_douts, dimages, 1);
    }
    if (!rc) rc = push_grads(m, o);
    if (!rc && dimages) {
        long long shl[4] = { x.in.batch, ec->in_chans, x.in.height, x.in.width };
        rc = push(o, "grad/input/images", dimages, (size_t)img_n, 4, shl);
    }

    for (int i = 0; douts && i < n_douts; i++) free(douts[i]);
    free(douts);
    free(dimages);
    inputs_free(&x);
    vt_model_free(m);
    return rc;
}

/* ---- the harness ------------------------------------------------------------------------------ */

vt_status vt_parity_run(const uint8_t *bytes, size_t len, const char *policy, int want_dump,
                        vt_parity_result *r) {
    if (!r) return vt_fail(VT_ERR_ARG, "vt_parity_run: result is NULL");
    memset(r, 0, sizeof *r);
    r->worst = -1;
    if (!bytes) return r->status = perr(r, vt_fail(VT_ERR_ARG, "vt_parity_run: bytes are NULL"));
    vt_st_file f;
    int rc = vt_st_parse(bytes, len, &f);
    if (rc) return r->status = perr(r, rc);
    outs o = { 0 };
    parity_meta pm;
    const char *module = vt_st_meta(&f, "module");
    snprintf(r->module, sizeof r->module, "%s", module ? module : "");
    rc = check_meta(&f, &pm);
    const vt_json *fnj = pm.call ? vt_json_get(pm.call, "fn") : NULL;
    snprintf(r->fn, sizeof r->fn, "%s", fnj && fnj->type == VT_JSON_STRING ? fnj->str : "?");
    if (rc) goto out;
    rc = pm.what == PM_SINCOS  ? run_sincos(&f, &o)
         : pm.what == PM_ADAMW ? run_adamw(&f, &pm, &o)
                               : run_model(&f, &pm, policy, &o);
    if (rc) goto out;
    rc = compare(&f, &o, r);
    if (rc) r->pass = 0;
    goto done;
out:
    perr(r, rc);
    r->pass = 0;
done:
    /* the dump holds whatever was computed, pass or fail: a failing file is when it is needed */
    if (want_dump && o.n > 0) {
        char keep[sizeof r->error];
        memcpy(keep, r->error, sizeof keep);
        int drc = make_dump(&o, r);
        if (rc)
            memcpy(r->error, keep, sizeof keep); /* the first failure is the one to report */
        else if (drc) {
            rc = drc;
            r->pass = 0;
        }
    }
    r->status = rc;
    parity_meta_free(&pm);
    outs_free(&o);
    vt_st_free(&f);
    return rc;
}

/* ---- a file run elsewhere (parity.h: vt_parity_open / _record / _check) ------------------------ */

struct vt_parity_job {
    vt_st_file f;
    parity_meta pm;
    vt_fn fn;
    vt_model *m;
    model_inputs x;
    float **douts, *dimages;
    int n_douts;
};

void vt_parity_close(vt_parity_job *j) {
    if (!j) return;
    for (int i = 0; j->douts && i < j->n_douts; i++) free(j->douts[i]);
    free(j->douts);
    free(j->dimages);
    inputs_free(&j->x);
    vt_model_free(j->m);
    parity_meta_free(&j->pm);
    vt_st_free(&j->f);
    free(j);
}

vt_status vt_parity_open(const uint8_t *bytes, size_t len, const char *policy, vt_parity_job **out) {
    if (!bytes || !out) return vt_fail(VT_ERR_ARG, "vt_parity_open: NULL argument");
    *out = NULL;
    vt_parity_job *j = calloc(1, sizeof *j);
    if (!j) return vt_fail(VT_ERR_NOMEM, "out of memory");
    int rc = vt_st_parse(bytes, len, &j->f);
    vt_model_config mc;
    if (!rc) rc = check_meta(&j->f, &j->pm);
    if (!rc && j->pm.what != PM_MODEL)
        rc = vt_fail(VT_ERR_ARG, "vt_parity_open: not a model's file (AdamW, sin-cos)");
    if (!rc) rc = model_open(&j->f, &j->pm, policy, &j->fn, &mc, &j->m, &j->x);
    if (rc) {
        vt_parity_close(j);
        return rc;
    }
    *out = j;
    return VT_OK;
}

vt_model *vt_parity_model(vt_parity_job *j) { return j ? j->m : NULL; }

vt_status vt_parity_output_name(const vt_parity_job *j, int i, char *name, size_t len) {
    if (!j || !name || len < 2 || i < 0 || i > 64)
        return vt_fail(VT_ERR_ARG, "vt_parity_output_name: no output %d", i);
    if (j->fn == VT_FN_LOSS)
        snprintf(name, len, "loss");
    else
        output_name(name, len, j->fn, &j->x.in, i);
    return VT_OK;
}

vt_status vt_parity_record(vt_parity_job *j, vt_trace **fwd, vt_trace **full) {
    if (!j || !fwd || !full) return vt_fail(VT_ERR_ARG, "vt_parity_record: NULL argument");
    *fwd = *full = NULL;
    int rc = vt_trace_call(j->m, j->fn, &j->x.in, 0, NULL, 0, NULL, 0, fwd);
    if (rc) return rc;
    /* the upstream gradients the file gives for the outputs the forward leaves (push_outputs' rules) */
    const vt_st_file *f = &j->f;
    int nout = vt_trace_output_count(*fwd);
    j->douts = calloc((size_t)nout + 1, sizeof *j->douts);
    if (!j->douts) rc = vt_fail(VT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nout && !rc && j->fn != VT_FN_LOSS; i++) {
        char nm[64], dk[96];
        output_name(nm, sizeof nm, j->fn, &j->x.in, i);
        snprintf(dk, sizeof dk, "input/dout/%s", nm);
        const vt_st_tensor *dt = vt_st_find(f, dk);
        uint64_t n = vt_trace_output_bytes(*fwd, i) / sizeof(float);
        if (dt && dt->numel != n)
            rc = vt_fail(VT_ERR_MISMATCH, "output '%s': vitrine computes %llu values, the file's %s has %zu",
                         nm, (unsigned long long)n, dk, dt->numel);
        else if (dt && !(j->douts[i] = tensor_f32(dt)))
            rc = VT_ERR_FORMAT;
        else if (!dt && has_prefix(f, "expect/grad/"))
            rc = vt_fail(VT_ERR_FORMAT,
                         "%s is missing: the expect/grad/ tensors are gradients of sum(%s * dout)", dk, nm);
        if (!rc) j->n_douts = i + 1;
    }
    if (!rc && vt_st_find(f, "expect/grad/input/images")) {
        const vt_vit_config *ec = &vt_model_get_config(j->m)->enc;
        j->dimages = alloc_n(
            (uint64_t)j->x.in.batch * ec->in_chans * (uint64_t)j->x.in.height * j->x.in.width, sizeof(float));
        if (!j->dimages) rc = VT_ERR_NOMEM;
    }
    if (!rc)
        rc = vt_trace_call(j->m, j->fn, &j->x.in, 1, (const float *const *)j->douts, j->n_douts, j->dimages,
                           1, full);
    if (rc) {
        vt_trace_free(*fwd);
        *fwd = NULL;
    }
    return rc;
}

vt_status vt_parity_check(const uint8_t *bytes, size_t len, const uint8_t *dump, size_t dump_len,
                          vt_parity_result *r) {
    if (!r) return vt_fail(VT_ERR_ARG, "vt_parity_check: result is NULL");
    memset(r, 0, sizeof *r);
    r->worst = -1;
    if (!bytes || !dump) return r->status = perr(r, vt_fail(VT_ERR_ARG, "vt_parity_check: bytes are NULL"));
    vt_st_file f, d;
    memset(&d, 0, sizeof d);
    outs o = { 0 };
    int rc = vt_st_parse(bytes, len, &f);
    if (rc) return r->status = perr(r, rc);
    const char *module = vt_st_meta(&f, "module"), *call_text = vt_st_meta(&f, "call");
    snprintf(r->module, sizeof r->module, "%s", module ? module : "?");
    vt_json *call = NULL;
    const vt_json *fnj =
        call_text && !vt_json_parse(call_text, strlen(call_text), &call) ? vt_json_get(call, "fn") : NULL;
    snprintf(r->fn, sizeof r->fn, "%s", fnj && fnj->type == VT_JSON_STRING ? fnj->str : "?");
    rc = vt_st_parse(dump, dump_len, &d);
    for (size_t i = 0; i < d.n && !rc; i++) { /* what was computed, under the expect/ keys */
        const vt_st_tensor *t = &d.tensors[i];
        float *v = tensor_f32(t);
        rc = v ? push(&o, t->name, v, t->numel, t->ndim, t->shape) : VT_ERR_FORMAT;
        free(v);
    }
    if (!rc)
        rc = compare(&f, &o, r);
    else
        perr(r, rc);
    if (rc) r->pass = 0;
    r->status = rc;
    vt_json_free(call);
    outs_free(&o);
    vt_st_free(&d);
    vt_st_free(&f);
    return rc;
}

void vt_parity_fail(vt_parity_result *r, vt_status status, const char *message) {
    memset(r, 0, sizeof *r);
    r->worst = -1;
    r->status = status;
    snprintf(r->error, sizeof r->error, "%s", message ? message : "");
}

void vt_parity_free(vt_parity_result *r) {
    if (!r) return;
    free(r->t);
    free(r->dump);
    r->t = NULL;
    r->dump = NULL;
}

/* ---- the result as JSON ----------------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = 2 * (b->n + n + 1);
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void put_raw(sbuf *b, const char *s) { put(b, s, strlen(s)); }
static void put_str(sbuf *b, const char *s) {
    put_raw(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[8];
        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            put(b, e, 2);
        } else if (c < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", c);
            put_raw(b, e);
        } else
            put(b, s, 1);
    }
    put_raw(b, "\"");
}
/* JSON has no inf / nan: an infinite error (NaN in our output) is 1e999, which JSON readers
 * (JavaScript's JSON.parse, strtod) read as infinity. */
static void put_num(sbuf *b, double v) {
    char e[40];
    if (isnan(v))
        snprintf(e, sizeof e, "null");
    else if (isinf(v))
        snprintf(e, sizeof e, "%s1e999", v < 0 ? "-" : "");
    else
        snprintf(e, sizeof e, "%.9e", v);
    put_raw(b, e);
}
/* A PyTorch float32 error, absent (null) when the file has none for the tensor (-1). */
static void put_torch32(sbuf *b, double v) {
    if (v < 0)
        put_raw(b, "null");
    else
        put_num(b, v);
}
static void put_key(sbuf *b, const char *key) {
    put_raw(b, ", \"");
    put_raw(b, key);
    put_raw(b, "\": ");
}

double vt_parity_max_torch32(const vt_parity_result *r) {
    int any = 0;
    for (int k = 0; k < r->n; k++) any |= r->t[k].torch32_err >= 0;
    return any ? r->max_torch32_err : -1;
}

vt_status vt_parity_json(const vt_parity_result *r, const char *file, char **out, size_t *out_len) {
    sbuf b = { 0 };
    char st[16];
    put_raw(&b, "{");
    if (file) {
        put_raw(&b, "\"file\": ");
        put_str(&b, file);
        put_raw(&b, ", ");
    }
    put_raw(&b, r->pass ? "\"pass\": true" : "\"pass\": false");
    snprintf(st, sizeof st, "%d", r->status);
    put_key(&b, "status");
    put_raw(&b, st);
    put_key(&b, "module");
    put_str(&b, r->module);
    put_key(&b, "fn");
    put_str(&b, r->fn);
    if (r->error[0]) {
        put_key(&b, "error");
        put_str(&b, r->error);
    }
    if (r->worst >= 0) {
        put_key(&b, "worst");
        put_str(&b, r->t[r->worst].name);
        put_key(&b, "err");
        put_num(&b, r->t[r->worst].err);
        put_key(&b, "torch32_err");
        put_torch32(&b, r->t[r->worst].torch32_err);
    }
    put_key(&b, "max_torch32_err");
    put_torch32(&b, vt_parity_max_torch32(r));
    put_key(&b, "tensors");
    put_raw(&b, "[");
    for (int k = 0; k < r->n; k++) {
        put_raw(&b, k ? ", {\"name\": " : "{\"name\": ");
        put_str(&b, r->t[k].name);
        put_key(&b, "err");
        put_num(&b, r->t[k].err);
        put_key(&b, "torch32_err");
        put_torch32(&b, r->t[k].torch32_err);
        put_raw(&b, "}");
    }
    put_raw(&b, "]}");
    if (b.oom) {
        free(b.s);
        return vt_fail(VT_ERR_NOMEM, "out of memory writing the parity result");
    }
    *out = b.s;
    if (out_len) *out_len = b.n;
    return VT_OK;
}
