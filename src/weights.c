/* weights.c: parameters in and out of safetensors bytes under timm's / lightly's key names.
 * A model prefix selects part of the model (e.g. "backbone.vit." of an MAE model) and a file
 * prefix is put in front of the names in the file (e.g. "vit." for lightly's wrapper), so that an
 * encoder can be exported under plain timm keys. Loading is all-or-nothing. */
#include "model.h"
#include "resample.h"
#include "safetensors.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* The first element of t that is not a finite float once converted (a NaN, an infinity, a float64
 * past float's range): 1 with *at and *x, else 0. Converted in blocks on the stack, before anything
 * of the model is written. */
static int first_nonfinite(const vt_st_tensor *t, size_t *at, float *x) {
    float buf[256];
    vt_st_tensor c = *t;
    size_t es = (size_t)vt_dtype_size(t->dtype);
    for (size_t i = 0; i < t->numel; i += 256) {
        c.numel = t->numel - i < 256 ? t->numel - i : 256;
        c.data = t->data + i * es;
        c.nbytes = c.numel * es;
        if (vt_st_to_f32(&c, buf)) return 0;
        for (size_t j = 0; j < c.numel; j++)
            if (!isfinite(buf[j])) {
                *at = i + j;
                *x = buf[j];
                return 1;
            }
    }
    return 0;
}

vt_status vt_load_safetensors(vt_model *m, const uint8_t *bytes, size_t len, const char *model_prefix,
                              const char *file_prefix) {
    if (!m || !bytes) return vt_fail(VT_ERR_ARG, "vt_load_safetensors: NULL argument");
    const char *mp = model_prefix ? model_prefix : "", *fp = file_prefix ? file_prefix : "";
    vt_st_file f;
    int rc = vt_st_parse(bytes, len, &f);
    if (rc) return rc;
    const vt_st_tensor **src = calloc((size_t)m->pt.n + 1, sizeof *src);
    unsigned char *used = calloc(f.n + 1, 1);
    char key[VT_NAME_MAX * 2 + 8];
    if (!src || !used) {
        rc = vt_fail(VT_ERR_NOMEM, "out of memory loading weights");
        goto done;
    }
    int selected = 0;
    for (int i = 0; i < m->pt.n && !rc; i++) {
        const vt_param *p = &m->pt.p[i];
        if (!starts(p->name, mp)) continue;
        selected++;
        snprintf(key, sizeof key, "%s%s", fp, p->name + strlen(mp));
        const vt_st_tensor *t = vt_st_find(&f, key);
        if (!t) {
            rc = vt_fail(VT_ERR_MISMATCH, "missing tensor '%s' (parameter %s)", key, p->name);
            break;
        }
        int same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!same) {
            char a[96] = "", b[96] = "";
            for (int d = 0; d < t->ndim && d < 8; d++)
                snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "", t->shape[d]);
            for (int d = 0; d < p->ndim; d++)
                snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "", (long long)p->shape[d]);
            rc = vt_fail(VT_ERR_MISMATCH, "tensor '%s' has shape [%s], the model expects [%s]", key, a, b);
            break;
        }
        if (t->dtype != VT_DT_F32 && t->dtype != VT_DT_F16 && t->dtype != VT_DT_BF16 &&
            t->dtype != VT_DT_F64) {
            rc = vt_fail(VT_ERR_MISMATCH, "tensor '%s' has dtype %s, expected a float dtype", key,
                         vt_dtype_name(t->dtype));
            break;
        }
        /* weights that are not finite are damaged: refused here rather than trained from (every
         * loss NaN) or kept until a save refuses them (nothing non-finite is ever saved) */
        size_t at = 0;
        float x = 0;
        if (first_nonfinite(t, &at, &x)) {
            rc = vt_fail(VT_ERR_FORMAT, "tensor '%s' holds %g at element %zu: weights must be finite", key,
                         (double)x, at);
            break;
        }
        src[i] = t;
        used[t - f.tensors] = 1;
    }
    if (!rc && !selected) rc = vt_fail(VT_ERR_ARG, "no parameter of the model starts with '%s'", mp);
    for (size_t j = 0; j < f.n && !rc; j++)
        if (!used[j] && starts(f.tensors[j].name, fp))
            rc = vt_fail(VT_ERR_MISMATCH, "unexpected tensor '%s' in the file (no such parameter)",
                         f.tensors[j].name);
    for (int i = 0; i < m->pt.n && !rc; i++)
        if (src[i]) rc = vt_st_to_f32(src[i], m->pt.data + m->pt.p[i].off);
done:
    free(src);
    free(used);
    vt_st_free(&f);
    return rc;
}

vt_status vt_save_safetensors(const vt_model *m, const char *model_prefix, const char *file_prefix,
                              uint8_t **out, size_t *out_len) {
    if (!m || !out || !out_len) return vt_fail(VT_ERR_ARG, "vt_save_safetensors: NULL argument");
    const char *mp = model_prefix ? model_prefix : "", *fp = file_prefix ? file_prefix : "";
    /* weights are never written with a NaN or infinity in them (an update that went non-finite, or
     * values set so): nothing non-finite is saved as good */
    if (m->opt.bad)
        return vt_fail(VT_ERR_NUMERIC, "not saved: the update of step %ld made the state non-finite",
                       m->opt.bad);
    for (int i = 0; i < m->pt.n; i++) {
        const vt_param *p = &m->pt.p[i];
        if (!starts(p->name, mp)) continue;
        for (size_t j = 0; j < p->numel; j++)
            if (!isfinite(m->pt.data[p->off + j]))
                return vt_fail(VT_ERR_NUMERIC, "not saved: %s holds %g at element %zu", p->name,
                               (double)m->pt.data[p->off + j], j);
    }
    int n = m->pt.n, k = 0, rc = VT_OK;
    vt_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    char(*names)[VT_NAME_MAX * 2 + 8] = calloc((size_t)n + 1, sizeof *names);
    long long(*shapes)[4] = calloc((size_t)n + 1, sizeof *shapes);
    if (!e || !names || !shapes) {
        rc = vt_fail(VT_ERR_NOMEM, "out of memory saving weights");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const vt_param *p = &m->pt.p[i];
        if (!starts(p->name, mp)) continue;
        snprintf(names[k], sizeof names[k], "%s%s", fp, p->name + strlen(mp));
        for (int d = 0; d < p->ndim; d++) shapes[k][d] = p->shape[d];
        e[k].name = names[k];
        e[k].dtype = VT_DT_F32;
        e[k].ndim = p->ndim;
        e[k].shape = shapes[k];
        e[k].data = m->pt.data + p->off;
        k++;
    }
    if (!k) {
        rc = vt_fail(VT_ERR_ARG, "no parameter of the model starts with '%s'", mp);
        goto done;
    }
    /* the encoder alone under timm keys (the ViT's own prefix selected, no file prefix, no
     * lightly mask_token): with its timm kwargs */
    char kw[2048], pe[VT_NAME_MAX + 32];
    snprintf(pe, sizeof pe, "%spatch_embed.proj.weight", mp);
    int vit_only = !fp[0] && vt_param_find(m, pe) >= 0;
    for (int i = 0; i < k && vit_only; i++) vit_only = strcmp(e[i].name, "mask_token") != 0;
    /* so that timm rebuilds it from the file alone: VisionTransformer(**json.loads(timm_kwargs)) */
    if (vit_only && (rc = vt_timm_kwargs_json(&m->cfg.enc, kw, sizeof kw))) goto done;
    const char *mk[] = { "format", "timm_kwargs" }, *mv[] = { "pt", kw };
    rc = vt_st_write(e, (size_t)k, mk, mv, vit_only ? 2 : 1, out, out_len);
done:
    free(e);
    free(names);
    free(shapes);
    return rc;
}

/* ---- starting a training run from timm / lightly / vitrine weights ------------------------------- */

static int ends(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static void shape_txt(char *buf, size_t len, int ndim, const long long *shape) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", d ? ", " : "", shape[d]);
    if (k < len) snprintf(buf + k, len - k, "]");
}

/* one line of the report (truncated, with "...", when the buffer is full) */
static void note(vt_init_report *r, const char *fmt, const char *a, const char *b, const char *c) {
    size_t k = strlen(r->notes);
    if (k + 4 >= sizeof r->notes) return;
    int n = snprintf(r->notes + k, sizeof r->notes - k, fmt, a, b, c);
    if (n < 0 || (size_t)n >= sizeof r->notes - k) strcpy(r->notes + sizeof r->notes - 5, "...\n");
}

/* the prefix of the ViT's keys: what comes before "patch_embed.proj.weight" (exactly one) */
static vt_status vit_prefix(const char *const *names, size_t n, const char *skip, char *out, size_t len,
                            const char *what) {
    const char *suf = "patch_embed.proj.weight";
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = names[i];
        if (skip && strncmp(s, skip, strlen(skip))) continue;
        if (skip) s += strlen(skip);
        if (!ends(s, suf) || strlen(s) - strlen(suf) >= len) continue;
        if (found++)
            return vt_fail(VT_ERR_FORMAT, "%s holds more than one ViT ('%s%s' and '%s')", what, out, suf, s);
        snprintf(out, len, "%.*s", (int)(strlen(s) - strlen(suf)), s);
    }
    if (!found)
        return vt_fail(VT_ERR_FORMAT, "%s holds no ViT: no tensor named ...patch_embed.proj.weight", what);
    return VT_OK;
}

/* A pos_embed or patch_embed of another grid, resampled as timm's checkpoint_filter_fn does when
 * it loads a checkpoint into a model of another image or patch size (resample.h), into *out
 * (malloc'd, the model's shape) and said in the report. VT_ERR_MISMATCH: it cannot be (the
 * caller skips it as a tensor of another shape); VT_OK with *out NULL: not taken, on purpose
 * (counted as skipped, noted); VT_ERR_NOMEM. */
static vt_status resample_on_load(vt_model *m, int i, const vt_st_tensor *t, const char *shape, float **out,
                                  vt_init_report *rep) {
    const vt_param *p = &m->pt.p[i];
    const vt_encoder *e = &m->enc;
    int pos = i == e->pos, g = 0, prefix = 0;
    char line[512];
    if (pos) { /* [1, prefix + g*g, D], the prefix rows as many as the model's (timm assumes so) */
        prefix = (int)p->shape[1] - e->N;
        if (t->ndim != 3 || t->shape[0] != 1 || t->shape[2] != p->shape[2] || t->shape[1] <= prefix ||
            t->shape[1] > VT_MAX_TOKENS)
            return VT_ERR_MISMATCH;
        long long cells = t->shape[1] - prefix;
        while ((long long)(g + 1) * (g + 1) <= cells) g++;
        if ((long long)g * g != cells) return VT_ERR_MISMATCH; /* no square grid after the prefix rows */
    } else if (t->ndim != 4 || t->shape[0] != p->shape[0] || t->shape[1] != p->shape[1] ||
               t->shape[2] > 4096 || t->shape[3] > 4096) {
        return VT_ERR_MISMATCH;
    }
    size_t n_in = 1;
    for (int d = 0; d < t->ndim; d++) n_in *= (size_t)t->shape[d]; /* < 2^24 * D: the checks above */
    float *in = malloc(n_in * sizeof(float)), *res = malloc(p->numel * sizeof(float)), *tab = NULL;
    vt_status rc =
        in && res ? vt_st_to_f32(t, in) : vt_fail(VT_ERR_NOMEM, "out of memory resampling %s", p->name);
    if (!rc && pos && !p->requires_grad && p->shape[2] % 4 == 0) {
        /* lightly's frozen sin-cos table: the model computes its own for its grid, as lightly does */
        int sincos = (tab = malloc(n_in * sizeof(float))) &&
                     vt_sincos_table(tab, (int)p->shape[2], g, prefix) == VT_OK;
        for (size_t k = 0; sincos && k < n_in; k++) sincos = fabsf(in[k] - tab[k]) <= 1e-6f;
        if (sincos) {
            rep->skipped++;
            snprintf(line, sizeof line,
                     "pos_embed %s: not taken: lightly's sin-cos table of a %dx%d grid; the model keeps "
                     "its own of %dx%d\n",
                     shape, g, g, e->Gh, e->Gw);
            note(rep, "%s%s%s", line, "", "");
            goto done;
        }
    }
    if (!rc && pos) {
        rc =
            vt_resample_pos_embed(in, prefix, g, g, (int)p->shape[2], res, e->Gh, e->Gw, VT_RESAMPLE_ON_LOAD);
        snprintf(line, sizeof line,
                 "%s %s: resampled as timm loads it (bicubic, antialias): grid %dx%d -> %dx%d, %d prefix "
                 "row%s kept\n",
                 p->name, shape, g, g, e->Gh, e->Gw, prefix, prefix == 1 ? "" : "s");
    } else if (!rc) {
        rc = vt_resample_patch_embed(in, p->shape[0] * p->shape[1], (int)t->shape[2], (int)t->shape[3], res,
                                     (int)p->shape[2], (int)p->shape[3], VT_RESAMPLE_ON_LOAD);
        snprintf(line, sizeof line,
                 "%s %s: resampled as timm loads it (FlexiViT: the pseudo-inverse of the bicubic "
                 "resize): patch %lldx%lld -> %lldx%lld\n",
                 p->name, shape, t->shape[2], t->shape[3], (long long)p->shape[2], (long long)p->shape[3]);
    }
    if (rc == VT_ERR_ARG) rc = VT_ERR_MISMATCH; /* no full-rank resize: skipped as of another shape */
    if (!rc) {
        *out = res;
        res = NULL;
        rep->resampled++;
        note(rep, "%s%s%s", line, "", "");
    }
done:
    free(in);
    free(res);
    free(tab);
    return rc;
}

vt_status vt_init_from_safetensors(vt_model *m, const uint8_t *bytes, size_t len, int strict,
                                   vt_init_report *rep) {
    if (!m || !bytes || !rep) return vt_fail(VT_ERR_ARG, "vt_init_from_safetensors: NULL argument");
    memset(rep, 0, sizeof *rep);
    vt_st_file f;
    vt_status rc = vt_st_parse(bytes, len, &f);
    if (rc) return rc;
    const vt_st_tensor **src = calloc((size_t)m->pt.n + 1, sizeof *src);
    float **resampled = calloc((size_t)m->pt.n + 1, sizeof *resampled); /* src[i] at the model's size */
    unsigned char *used = calloc(f.n + 1, 1);
    const char **fnames = calloc(f.n + 1, sizeof *fnames),
               **mnames = calloc((size_t)m->pt.n + 1, sizeof *mnames);
    if (!src || !resampled || !used || !fnames || !mnames) {
        rc = vt_fail(VT_ERR_NOMEM, "out of memory loading weights");
        goto done;
    }
    /* a vitrine training checkpoint holds the parameters under param/ (and AdamW's moments,
     * which a new run does not take) */
    const char *fmt = vt_st_meta(&f, "format");
    int ckpt = fmt && !strcmp(fmt, "vitrine-train/1");
    const char *ns = ckpt ? "param/" : "";
    for (size_t j = 0; j < f.n; j++) fnames[j] = f.tensors[j].name;
    for (int i = 0; i < m->pt.n; i++) mnames[i] = m->pt.p[i].name;
    char fp[64], mp[64], fw[64], mw[64];
    rc = vit_prefix(fnames, f.n, ckpt ? ns : NULL, fp, sizeof fp, "the file");
    if (!rc) rc = vit_prefix(mnames, (size_t)m->pt.n, NULL, mp, sizeof mp, "the model");
    if (rc) goto done;
    /* the wrapper around the ViT (lightly's mask_token sits beside vit.) */
    snprintf(fw, sizeof fw, "%.*s", (int)(strlen(fp) - (ends(fp, "vit.") ? 4 : 0)), fp);
    snprintf(mw, sizeof mw, "%.*s", (int)(strlen(mp) - (ends(mp, "vit.") ? 4 : 0)), mp);
    snprintf(rep->file_prefix, sizeof rep->file_prefix, "%s", fp);
    const char *src_name = ckpt     ? "vitrine training checkpoint (parameters only)"
                           : !fp[0] ? (vt_st_meta(&f, "timm_kwargs") ? "vitrine encoder (timm keys)"
                                                                     : "timm VisionTransformer state_dict")
                           : !strcmp(fp, "vit.")          ? "lightly MaskedVisionTransformerTIMM (vit. keys)"
                           : !strcmp(fp, "backbone.vit.") ? "lightly MAE model (backbone.vit. keys)"
                           : !strcmp(fp, "backbone.")     ? "lightly AIM model (backbone. keys)"
                                                          : "a ViT under its own prefix";
    snprintf(rep->source, sizeof rep->source, "%s", src_name);

    char key[2 * VT_NAME_MAX + 16], a[96], b[96];
    const vt_encoder *e = &m->enc;
    for (int i = 0; i < m->pt.n; i++) {
        const vt_param *p = &m->pt.p[i];
        int in_vit = starts(p->name, mp),
            is_mt = !strncmp(p->name, mw, strlen(mw)) && !strcmp(p->name + strlen(mw), "mask_token");
        if (in_vit)
            snprintf(key, sizeof key, "%s%s%s", ns, fp, p->name + strlen(mp));
        else if (is_mt)
            snprintf(key, sizeof key, "%s%smask_token", ns, fw);
        else if (!strcmp(fp, mp))
            snprintf(key, sizeof key, "%s%s", ns, p->name); /* the same model's layout */
        else
            continue;
        const vt_st_tensor *t = vt_st_find(&f, key);
        if (!t) {
            if (in_vit && i != e->head_w && i != e->head_b && i != e->hdist_w && i != e->hdist_b) {
                rep->missing++;
                note(rep, "%s: not in the file (kept as initialised)%s%s\n", p->name, "", "");
            }
            continue;
        }
        used[t - f.tensors] = 1;
        long long ps[4];
        for (int d = 0; d < p->ndim; d++) ps[d] = p->shape[d];
        shape_txt(a, sizeof a, t->ndim, t->shape);
        shape_txt(b, sizeof b, p->ndim, ps);
        int same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (t->dtype != VT_DT_F32 && t->dtype != VT_DT_F16 && t->dtype != VT_DT_BF16 &&
            t->dtype != VT_DT_F64) {
            rep->skipped++;
            note(rep, "%s %s: skipped: dtype %s is not a float dtype\n", key, a, vt_dtype_name(t->dtype));
        } else if (!same && (i == e->head_w || i == e->head_b || i == e->hdist_w || i == e->hdist_b)) {
            rep->skipped++;
            note(rep, "%s %s: skipped: a classifier head of another size (the model's is %s)\n", key, a, b);
        } else if (!same && (i == e->pos || i == e->pe_w) &&
                   (rc = resample_on_load(m, i, t, a, &resampled[i], rep)) != VT_ERR_MISMATCH) {
            if (rc) goto done; /* out of memory */
            if (resampled[i]) {
                src[i] = t;
                rep->loaded++;
            }
        } else if (!same) {
            rc = VT_OK;
            rep->skipped++;
            note(rep, "%s %s: skipped: the model's %s is ", key, a, p->name);
            note(rep, "%s (another config: img_size / patch_size / embed_dim / tokens differ)\n", b, "", "");
        } else {
            src[i] = t;
            rep->loaded++;
        }
    }
    for (size_t j = 0; j < f.n; j++) {
        const char *nm = f.tensors[j].name;
        if (used[j] || strncmp(nm, ns, strlen(ns)))
            continue; /* checkpoint: adam_m/, adam_v/ are not weights */
        const char *rest = nm + strlen(ns);
        rep->skipped++;
        shape_txt(a, sizeof a, f.tensors[j].ndim, f.tensors[j].shape);
        if (starts(rest, fp) &&
            (!strcmp(rest + strlen(fp), "head.weight") || !strcmp(rest + strlen(fp), "head.bias") ||
             !strcmp(rest + strlen(fp), "head_dist.weight") || !strcmp(rest + strlen(fp), "head_dist.bias")))
            note(rep, "%s %s: skipped: a classifier head, and the model has none (num_classes 0)%s\n", nm, a,
                 "");
        else if (starts(rest, fp))
            note(rep,
                 "%s %s: skipped: the model has no such parameter (its config differs: reg_tokens, qk_norm, "
                 "init_values, global_pool (norm / fc_norm), class_token%s)\n",
                 nm, a, "");
        else
            note(rep, "%s %s: skipped: not part of the ViT under '%s' (another model's part)\n", nm, a, fp);
    }
    if (strict && (rep->skipped || rep->missing)) {
        rc = vt_fail(VT_ERR_MISMATCH,
                     "--init-strict: %d tensor(s) of the file skipped, %d parameter(s) of the "
                     "encoder not in the file:\n%s",
                     rep->skipped, rep->missing, rep->notes);
        goto done;
    }
    if (!rep->loaded) {
        rc = vt_fail(VT_ERR_MISMATCH, "nothing in the file fits the model:\n%s", rep->notes);
        goto done;
    }
    for (int i = 0; i < m->pt.n && !rc; i++) {
        if (resampled[i])
            memcpy(m->pt.data + m->pt.p[i].off, resampled[i], m->pt.p[i].numel * sizeof(float));
        else if (src[i])
            rc = vt_st_to_f32(src[i], m->pt.data + m->pt.p[i].off);
    }
    /* pos_embed: the objective freezes lightly's sin-cos table; a learned one (timm's) trains */
    if (!rc && e->pos >= 0 && src[e->pos]) {
        const vt_param *p = &m->pt.p[e->pos];
        int rows = (int)p->shape[1], D = (int)p->shape[2], P = rows - e->N;
        float *tab = malloc((size_t)rows * D * sizeof(float));
        if (!tab) {
            rc = vt_fail(VT_ERR_NOMEM, "out of memory");
            goto done;
        }
        int sincos = D % 4 == 0 && e->Gh == e->Gw && vt_sincos_table(tab, D, e->G, P) == VT_OK;
        const float *v = m->pt.data + p->off;
        for (size_t k = 0; sincos && k < (size_t)rows * D; k++) sincos = fabsf(v[k] - tab[k]) <= 1e-6f;
        free(tab);
        if (!p->requires_grad && !sincos) {
            rc = vt_set_requires_grad(m, p->name, 1, NULL);
            rep->pos_embed = VT_INIT_POS_LEARNED_NOW_TRAINABLE;
        } else {
            rep->pos_embed = p->requires_grad ? VT_INIT_POS_TRAINABLE : VT_INIT_POS_SINCOS_FROZEN;
        }
    }
done:
    for (int i = 0; resampled && i < m->pt.n; i++) free(resampled[i]);
    free(resampled);
    free(src);
    free(used);
    free(fnames);
    free(mnames);
    vt_st_free(&f);
    return rc;
}
