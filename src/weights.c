/* weights.c: parameters in and out of safetensors bytes under timm's / lightly's key names.
 * A model prefix selects part of the model (e.g. "backbone.vit." of an MAE model) and a file
 * prefix is put in front of the names in the file (e.g. "vit." for lightly's wrapper), so that an
 * encoder can be exported under plain timm keys. Loading is all-or-nothing. */
#include "model.h"
#include "safetensors.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

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
    if (!src || !used) { rc = vt_fail(VT_ERR_NOMEM, "out of memory loading weights"); goto done; }
    int selected = 0;
    for (int i = 0; i < m->pt.n && !rc; i++) {
        const vt_param *p = &m->pt.p[i];
        if (!starts(p->name, mp)) continue;
        selected++;
        snprintf(key, sizeof key, "%s%s", fp, p->name + strlen(mp));
        const vt_st_tensor *t = vt_st_find(&f, key);
        if (!t) { rc = vt_fail(VT_ERR_MISMATCH, "missing tensor '%s' (parameter %s)", key, p->name); break; }
        int same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!same) {
            char a[96] = "", b[96] = "";
            for (int d = 0; d < t->ndim && d < 8; d++) snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "", t->shape[d]);
            for (int d = 0; d < p->ndim; d++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "", (long long)p->shape[d]);
            rc = vt_fail(VT_ERR_MISMATCH, "tensor '%s' has shape [%s], the model expects [%s]", key, a, b);
            break;
        }
        if (t->dtype != VT_DT_F32 && t->dtype != VT_DT_F16 && t->dtype != VT_DT_BF16 && t->dtype != VT_DT_F64) {
            rc = vt_fail(VT_ERR_MISMATCH, "tensor '%s' has dtype %s, expected a float dtype", key, vt_dtype_name(t->dtype));
            break;
        }
        src[i] = t;
        used[t - f.tensors] = 1;
    }
    if (!rc && !selected) rc = vt_fail(VT_ERR_ARG, "no parameter of the model starts with '%s'", mp);
    for (size_t j = 0; j < f.n && !rc; j++)
        if (!used[j] && starts(f.tensors[j].name, fp))
            rc = vt_fail(VT_ERR_MISMATCH, "unexpected tensor '%s' in the file (no such parameter)", f.tensors[j].name);
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
    int n = m->pt.n, k = 0, rc = VT_OK;
    vt_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    char (*names)[VT_NAME_MAX * 2 + 8] = calloc((size_t)n + 1, sizeof *names);
    long long (*shapes)[4] = calloc((size_t)n + 1, sizeof *shapes);
    if (!e || !names || !shapes) { rc = vt_fail(VT_ERR_NOMEM, "out of memory saving weights"); goto done; }
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
    if (!k) { rc = vt_fail(VT_ERR_ARG, "no parameter of the model starts with '%s'", mp); goto done; }
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    rc = vt_st_write(e, (size_t)k, mk, mv, 1, out, out_len);
done:
    free(e);
    free(names);
    free(shapes);
    return rc;
}
