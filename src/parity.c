/* parity.c: runs a PyTorch reference dump (../shared/docs/parity-format.md) through the engine
 * and compares every expect/ tensor: err = max|ours - expect| / max|expect|, pass when every
 * err <= 1e-4. Works on bytes (no files), so the native CLI and the wasm builds share it.
 * A file whose module, call or keys it does not understand is an error, never a silent skip. */
#include "json.h"
#include "model.h"
#include "optim.h"
#include "safetensors.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { /* one computed tensor, to compare and to dump */
    char name[160];
    int ndim;
    long long shape[4];
    float *data;
    size_t n;
    int owned;
} outt;

typedef struct {
    outt *o;
    int n, cap;
} outs;

static int push(outs *s, const char *name, const float *data, size_t n, int ndim, const long long *shape, int copy) {
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
    if (copy) {
        t->data = malloc((n ? n : 1) * sizeof(float));
        if (!t->data) return vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes", n * sizeof(float));
        memcpy(t->data, data, n * sizeof(float));
        t->owned = 1;
    } else {
        t->data = (float *)data;
    }
    s->n++;
    return VT_OK;
}

static void outs_free(outs *s) {
    for (int i = 0; i < s->n; i++)
        if (s->o[i].owned) free(s->o[i].data);
    free(s->o);
    memset(s, 0, sizeof *s);
}

static int perr(vt_parity_result *r, int rc) {
    snprintf(r->error, sizeof r->error, "%s", vt_last_error());
    return rc ? rc : VT_ERR_FORMAT;
}

static float *tensor_f32(const vt_st_tensor *t) {
    float *d = malloc((t->numel ? t->numel : 1) * sizeof(float));
    if (!d) { vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes", t->numel * sizeof(float)); return NULL; }
    if (vt_st_to_f32(t, d)) { free(d); return NULL; }
    return d;
}

static double rel_err(const float *ours, const float *ref, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)ours[i] - ref[i]);
        if (!(d <= md)) md = d; /* NaN propagates as a failure */
        if (fabs((double)ref[i]) > mr) mr = fabs((double)ref[i]);
    }
    if (isnan(md)) return INFINITY;
    return mr > 0 ? md / mr : md;
}

/* compares every expect/ key of the file with the computed outputs */
static int compare(const vt_st_file *f, const outs *o, vt_parity_result *r) {
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
        if (!mine) return perr(r, vt_fail(VT_ERR_FORMAT, "vitrine computes nothing for '%s' (unsupported)", t->name));
        if (mine->n != t->numel)
            return perr(r, vt_fail(VT_ERR_MISMATCH, "'%s': vitrine computed %zu values, the file has %zu", t->name, mine->n, t->numel));
        float *ref = tensor_f32(t);
        if (!ref) return perr(r, VT_ERR_FORMAT);
        vt_parity_tensor *pt = &r->t[r->n++];
        snprintf(pt->name, sizeof pt->name, "%s", key);
        pt->err = rel_err(mine->data, ref, t->numel);
        free(ref);
        pt->torch32_err = -1;
        char tk[200];
        snprintf(tk, sizeof tk, "torch32/%s", key);
        const vt_st_tensor *t32 = vt_st_find(f, tk);
        if (t32 && t32->numel == t->numel) {
            float *a = tensor_f32(t32), *b = tensor_f32(t);
            if (a && b) pt->torch32_err = rel_err(a, b, t->numel);
            free(a);
            free(b);
            if (pt->torch32_err > r->max_torch32_err) r->max_torch32_err = pt->torch32_err;
        }
        if (!(pt->err <= VT_PARITY_TOL)) r->pass = 0;
        if (r->worst < 0 || !(pt->err <= r->t[r->worst].err)) r->worst = r->n - 1;
    }
    return VT_OK;
}

static int make_dump(const outs *o, vt_parity_result *r) {
    vt_st_entry *e = calloc((size_t)o->n + 1, sizeof *e);
    if (!e) return perr(r, vt_fail(VT_ERR_NOMEM, "out of memory"));
    for (int i = 0; i < o->n; i++) {
        e[i].name = o->o[i].name;
        e[i].dtype = VT_DT_F32;
        e[i].ndim = o->o[i].ndim;
        e[i].shape = o->o[i].shape;
        e[i].data = o->o[i].data;
    }
    const char *mk[] = {"format"}, *mv[] = {"vitrine-parity-dump/1"};
    int rc = vt_st_write(e, (size_t)o->n, mk, mv, 1, &r->dump, &r->dump_len);
    free(e);
    return rc ? perr(r, rc) : VT_OK;
}

/* ---- the kinds of file ---------------------------------------------------------------------- */

static int run_sincos(const vt_st_file *f, outs *o) {
    for (size_t i = 0; i < f->n; i++) {
        const vt_st_tensor *t = &f->tensors[i];
        int D, G, P;
        if (strncmp(t->name, "expect/", 7)) continue;
        if (sscanf(t->name, "expect/sincos.d%d.g%d.p%d", &D, &G, &P) != 3)
            return vt_fail(VT_ERR_FORMAT, "unexpected key '%s' in a sin-cos file", t->name);
        if (D <= 0 || D > 65536 || G <= 0 || G > 1024 || P < 0 || P > 64)
            return vt_fail(VT_ERR_FORMAT, "sin-cos key '%s' out of range", t->name);
        /* 64-bit, and only as large as the file's own expected tensor (which is in the file):
         * a 120-byte file must not ask for gigabytes (or wrap in wasm's 32-bit size_t) */
        uint64_t n64 = ((uint64_t)P + (uint64_t)G * G) * (uint64_t)D;
        if (n64 != (uint64_t)t->numel)
            return vt_fail(VT_ERR_FORMAT, "sin-cos key '%s' names %llu values, the tensor holds %llu", t->name,
                           (unsigned long long)n64, (unsigned long long)t->numel);
        size_t n = (size_t)n64;
        float *tab = malloc(n * sizeof(float));
        if (!tab) return vt_fail(VT_ERR_NOMEM, "out of memory");
        int rc = vt_sincos_table(tab, D, G, P);
        long long shape[2] = {P + G * G, D};
        if (!rc) rc = push(o, t->name + 7, tab, n, 2, shape, 1);
        free(tab);
        if (rc) return rc;
    }
    return VT_OK;
}

static int json_num(const vt_json *o, const char *k, double *v) {
    const vt_json *j = vt_json_get(o, k);
    if (!j || j->type != VT_JSON_NUMBER) return vt_fail(VT_ERR_FORMAT, "AdamW config needs a number '%s'", k);
    *v = j->number;
    return VT_OK;
}

static int run_adamw(const vt_st_file *f, const vt_json *cfg, const vt_json *call, outs *o) {
    double lr = 0, eps = 0, wd = 0, b1, b2;
    const vt_json *betas = vt_json_get(cfg, "betas");
    int rc = json_num(cfg, "lr", &lr);
    if (!rc) rc = json_num(cfg, "eps", &eps);
    if (!rc) rc = json_num(cfg, "weight_decay", &wd);
    if (rc) return rc;
    if (!betas || betas->type != VT_JSON_ARRAY || betas->n != 2 || betas->items[0].type != VT_JSON_NUMBER ||
        betas->items[1].type != VT_JSON_NUMBER)
        return vt_fail(VT_ERR_FORMAT, "AdamW config needs betas [b1, b2]");
    b1 = betas->items[0].number;
    b2 = betas->items[1].number;
    const vt_json *steps = vt_json_get(call, "steps");
    if (!steps || !steps->is_integer || steps->integer < 1 || steps->integer > 100000)
        return vt_fail(VT_ERR_FORMAT, "AdamW call needs steps >= 1");
    const vt_st_tensor *w = vt_st_find(f, "param/w");
    if (!w) return vt_fail(VT_ERR_FORMAT, "AdamW file needs param/w");
    size_t n = w->numel;
    float *p = tensor_f32(w), *m = calloc(n + 1, sizeof(float)), *v = calloc(n + 1, sizeof(float));
    rc = (p && m && v) ? VT_OK : vt_fail(VT_ERR_NOMEM, "out of memory");
    for (long s = 0; s < steps->integer && !rc; s++) {
        char k[64];
        snprintf(k, sizeof k, "input/grad.%ld", s);
        const vt_st_tensor *g = vt_st_find(f, k);
        if (!g || g->numel != n) { rc = vt_fail(VT_ERR_FORMAT, "missing or mis-shaped %s", k); break; }
        float *gd = tensor_f32(g);
        if (!gd) { rc = VT_ERR_FORMAT; break; }
        vt_adamw_update(p, gd, m, v, n, s + 1, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd);
        free(gd);
        snprintf(k, sizeof k, "param.%ld", s);
        rc = push(o, k, p, n, w->ndim, w->shape, 1);
    }
    free(p);
    free(m);
    free(v);
    return rc;
}

static int kind_of(const char *module, vt_kind *k) {
    if (!strcmp(module, "lightly.MaskedVisionTransformerTIMM")) *k = VT_KIND_LIGHTLY;
    else if (!strcmp(module, "lightly.MaskedCausalVisionTransformer")) *k = VT_KIND_CAUSAL;
    else if (!strcmp(module, "timm.VisionTransformer")) *k = VT_KIND_TIMM;
    else if (!strcmp(module, "lightly.examples.MAE")) *k = VT_KIND_MAE;
    else if (!strcmp(module, "lightly.examples.AIM")) *k = VT_KIND_AIM;
    else return vt_fail(VT_ERR_FORMAT, "unsupported module '%s'", module);
    return VT_OK;
}

static int call_flag(const vt_json *call, const char *k, int dflt) {
    const vt_json *j = vt_json_get(call, k);
    return j && j->type == VT_JSON_BOOL ? j->boolean : dflt;
}

static int run_model(const vt_st_file *f, vt_kind kind, const char *cfg_text, const vt_json *call,
                     const char *policy, outs *o) {
    const vt_json *fnj = vt_json_get(call, "fn");
    if (!fnj || fnj->type != VT_JSON_STRING) return vt_fail(VT_ERR_FORMAT, "call has no fn");
    const char *fns = fnj->str;
    vt_fn fn;
    int loss_kind = kind == VT_KIND_MAE || kind == VT_KIND_AIM;
    if (!strcmp(fns, "encode") || !strcmp(fns, "forward_features")) fn = VT_FN_ENCODE;
    else if (!strcmp(fns, "forward")) fn = VT_FN_FORWARD;
    else if (!strcmp(fns, "forward_intermediates")) fn = call_flag(call, "norm", 0) ? VT_FN_INTERMEDIATES_NORM : VT_FN_INTERMEDIATES;
    else if (!strcmp(fns, "loss") && loss_kind) fn = VT_FN_LOSS;
    else return vt_fail(VT_ERR_FORMAT, "unsupported call '%s' for this module", fns);
    for (size_t i = 0; i < call->n; i++) {
        const char *k = call->keys[i];
        if (strcmp(k, "fn") && strcmp(k, "idx_mask") && strcmp(k, "idx_keep") && strcmp(k, "mask") &&
            strcmp(k, "is_causal") && strcmp(k, "norm"))
            return vt_fail(VT_ERR_FORMAT, "unsupported call option '%s'", k);
    }
    vt_model_config mc;
    int rc = vt_model_config_from_json(cfg_text, strlen(cfg_text), kind, &mc);
    if (rc) return rc;
    vt_model *m = NULL;
    rc = vt_model_create(&mc, &m);
    if (rc) return rc;
    long long *idx_mask = NULL, *idx_keep = NULL;
    uint8_t *mask = NULL;
    float *images = NULL, *dimages = NULL, *douts[VT_MAX_DEPTH + 1] = {0};
    int n_douts = 0;
    /* parameters: param/ trainable, frozen/ frozen; every one present exactly once */
    for (int i = 0; i < m->pt.n && !rc; i++) {
        char a[200], b[200];
        snprintf(a, sizeof a, "param/%s", m->pt.p[i].name);
        snprintf(b, sizeof b, "frozen/%s", m->pt.p[i].name);
        const vt_st_tensor *ta = vt_st_find(f, a), *tb = vt_st_find(f, b), *t = ta ? ta : tb;
        if (!t || (ta && tb)) { rc = vt_fail(VT_ERR_MISMATCH, "the file must hold exactly one of %s, %s", a, b); break; }
        if (t->numel != m->pt.p[i].numel) { rc = vt_fail(VT_ERR_MISMATCH, "%s has %zu values, the model expects %zu", t->name, t->numel, m->pt.p[i].numel); break; }
        m->pt.p[i].requires_grad = ta != NULL;
        rc = vt_st_to_f32(t, m->pt.data + m->pt.p[i].off);
    }
    for (size_t j = 0; j < f->n && !rc; j++) {
        const char *nm = f->tensors[j].name;
        if (!strncmp(nm, "param/", 6) && vt_param_find(m, nm + 6) < 0) rc = vt_fail(VT_ERR_MISMATCH, "unexpected tensor '%s'", nm);
        if (!strncmp(nm, "frozen/", 7) && vt_param_find(m, nm + 7) < 0) rc = vt_fail(VT_ERR_MISMATCH, "unexpected tensor '%s'", nm);
    }
    if (!rc) rc = vt_ptable_relayout_grads(&m->pt);
    if (!rc && policy) rc = vt_set_grad_checkpointing(m, policy);
    if (rc) goto done;
    vt_inputs in;
    memset(&in, 0, sizeof in);
    const vt_st_tensor *ti = vt_st_find(f, "input/images");
    const vt_vit_config *ec = &mc.enc;
    if (!ti || ti->ndim != 4 || ti->shape[1] != ec->in_chans || ti->shape[2] != ec->img_size || ti->shape[3] != ec->img_size) {
        rc = vt_fail(VT_ERR_MISMATCH, "input/images must be [B, %d, %d, %d]", ec->in_chans, ec->img_size, ec->img_size);
        goto done;
    }
    in.batch = (int)ti->shape[0];
    images = tensor_f32(ti);
    if (!images) { rc = VT_ERR_FORMAT; goto done; }
    in.images = images;
    const vt_st_tensor *t;
    if ((t = vt_st_find(f, "input/idx_mask"))) {
        if (t->ndim != 2 || t->shape[0] != in.batch) { rc = vt_fail(VT_ERR_MISMATCH, "input/idx_mask must be [B, K]"); goto done; }
        idx_mask = malloc(t->numel * sizeof *idx_mask + 8);
        if (!idx_mask || (rc = vt_st_to_i64(t, idx_mask))) { rc = rc ? rc : VT_ERR_NOMEM; goto done; }
        in.idx_mask = (const int64_t *)idx_mask;
        in.n_mask = (int)t->shape[1];
    }
    if ((t = vt_st_find(f, "input/idx_keep"))) {
        if (t->ndim != 2 || t->shape[0] != in.batch) { rc = vt_fail(VT_ERR_MISMATCH, "input/idx_keep must be [B, K]"); goto done; }
        idx_keep = malloc(t->numel * sizeof *idx_keep + 8);
        if (!idx_keep || (rc = vt_st_to_i64(t, idx_keep))) { rc = rc ? rc : VT_ERR_NOMEM; goto done; }
        in.idx_keep = (const int64_t *)idx_keep;
        in.n_keep = (int)t->shape[1];
    }
    if ((t = vt_st_find(f, "input/mask"))) {
        long long want = (kind == VT_KIND_CAUSAL || kind == VT_KIND_AIM) ? m->enc.T_full : m->enc.T_full;
        if (t->ndim != 2 || t->shape[0] != in.batch || t->shape[1] != want) {
            rc = vt_fail(VT_ERR_MISMATCH, "input/mask must be [B, %lld]", want);
            goto done;
        }
        long long *tmp = malloc(t->numel * sizeof *tmp + 8);
        mask = malloc(t->numel + 1);
        if (!tmp || !mask || (rc = vt_st_to_i64(t, tmp))) { free(tmp); rc = rc ? rc : VT_ERR_NOMEM; goto done; }
        for (size_t i = 0; i < t->numel; i++) mask[i] = tmp[i] != 0;
        free(tmp);
        in.mask = mask;
    }
    in.is_causal = call_flag(call, "is_causal", 1); /* lightly's default is_causal=True */
    rc = vt_forward(m, fn, &in, 1);
    if (rc) goto done;
    /* outputs */
    int nout = vt_output_count(m);
    for (int i = 0; i < nout && !rc; i++) {
        int64_t sh[4];
        int nd;
        const float *y = vt_output(m, i, sh, &nd);
        long long shl[4] = {sh[0], sh[1], sh[2], sh[3]};
        size_t n = 1;
        for (int d = 0; d < nd; d++) n *= (size_t)sh[d];
        char nm[64];
        if (fn == VT_FN_LOSS) snprintf(nm, sizeof nm, "loss");
        else if (i == 0) snprintf(nm, sizeof nm, "out");
        else snprintf(nm, sizeof nm, "intermediates.%d", i - 1);
        rc = push(o, nm, y, n, nd, shl, 1);
        if (rc) break;
        if (fn != VT_FN_LOSS) {
            char dk[96];
            snprintf(dk, sizeof dk, "input/dout/%s", nm);
            const vt_st_tensor *dt = vt_st_find(f, dk);
            if (dt) {
                if (dt->numel != n) { rc = vt_fail(VT_ERR_MISMATCH, "%s has %zu values, the output %zu", dk, dt->numel, n); break; }
                douts[i] = tensor_f32(dt);
                if (!douts[i]) { rc = VT_ERR_FORMAT; break; }
            }
            n_douts = i + 1;
        }
    }
    if (rc) goto done;
    size_t img_n = (size_t)in.batch * ec->in_chans * ec->img_size * ec->img_size;
    if (vt_st_find(f, "expect/grad/input/images")) {
        dimages = calloc(img_n, sizeof(float));
        if (!dimages) { rc = vt_fail(VT_ERR_NOMEM, "out of memory"); goto done; }
    }
    vt_zero_grad(m);
    rc = vt_backward(m, (const float *const *)douts, n_douts, dimages, 1);
    if (rc) goto done;
    for (int i = 0; i < m->pt.n && !rc; i++) {
        if (m->pt.p[i].goff < 0) continue;
        char nm[160];
        long long shl[4] = {0};
        for (int d = 0; d < m->pt.p[i].ndim; d++) shl[d] = m->pt.p[i].shape[d];
        snprintf(nm, sizeof nm, "grad/%s", m->pt.p[i].name);
        rc = push(o, nm, m->pt.grad + m->pt.p[i].goff, m->pt.p[i].numel, m->pt.p[i].ndim, shl, 1);
    }
    if (!rc && dimages) {
        long long shl[4] = {in.batch, ec->in_chans, ec->img_size, ec->img_size};
        rc = push(o, "grad/input/images", dimages, img_n, 4, shl, 1);
    }
done:
    for (int i = 0; i <= VT_MAX_DEPTH; i++) free(douts[i]);
    free(images);
    free(dimages);
    free(idx_mask);
    free(idx_keep);
    free(mask);
    vt_model_free(m);
    return rc;
}

int vt_parity_run(const uint8_t *bytes, size_t len, const char *policy, int want_dump,
                  vt_parity_result *r) {
    if (!r) return vt_fail(VT_ERR_ARG, "vt_parity_run: result is NULL");
    memset(r, 0, sizeof *r);
    r->worst = -1;
    if (!bytes) return perr(r, vt_fail(VT_ERR_ARG, "vt_parity_run: bytes are NULL"));
    vt_st_file f;
    int rc = vt_st_parse(bytes, len, &f);
    if (rc) return perr(r, rc);
    vt_json *cfg = NULL, *call = NULL;
    outs o = {0};
    const char *fmt = vt_st_meta(&f, "format"), *module = vt_st_meta(&f, "module");
    const char *cfg_text = vt_st_meta(&f, "config"), *call_text = vt_st_meta(&f, "call");
    if (!fmt || strcmp(fmt, "vitrine-parity/1")) { rc = vt_fail(VT_ERR_FORMAT, "not a vitrine-parity/1 file (metadata format = %s)", fmt ? fmt : "missing"); goto out; }
    if (!module || !cfg_text || !call_text) { rc = vt_fail(VT_ERR_FORMAT, "metadata needs module, config and call"); goto out; }
    snprintf(r->module, sizeof r->module, "%s", module);
    if ((rc = vt_json_parse(cfg_text, strlen(cfg_text), &cfg)) || (rc = vt_json_parse(call_text, strlen(call_text), &call))) goto out;
    if (call->type != VT_JSON_OBJECT || cfg->type != VT_JSON_OBJECT) { rc = vt_fail(VT_ERR_FORMAT, "config and call must be JSON objects"); goto out; }
    const vt_json *fnj = vt_json_get(call, "fn");
    snprintf(r->fn, sizeof r->fn, "%s", fnj && fnj->type == VT_JSON_STRING ? fnj->str : "?");
    if (!strcmp(r->fn, "sincos")) rc = run_sincos(&f, &o);
    else if (!strcmp(module, "torch.optim.AdamW")) rc = run_adamw(&f, cfg, call, &o);
    else {
        vt_kind kind = VT_KIND_TIMM;
        rc = kind_of(module, &kind);
        if (!rc) rc = run_model(&f, kind, cfg_text, call, policy, &o);
    }
    if (rc) goto out;
    rc = compare(&f, &o, r);
    if (!rc && want_dump) rc = make_dump(&o, r);
    if (rc) r->pass = 0;
    goto done;
out:
    perr(r, rc);
    r->pass = 0;
done:
    vt_json_free(cfg);
    vt_json_free(call);
    outs_free(&o);
    vt_st_free(&f);
    return rc;
}

void vt_parity_free(vt_parity_result *r) {
    if (!r) return;
    free(r->t);
    free(r->dump);
    r->t = NULL;
    r->dump = NULL;
}
