/* params.c: the parameter table. One float buffer holds every parameter in the order of the
 * PyTorch state_dict; a second buffer holds gradients of the trainable ones only (a frozen
 * parameter has no gradient slot). AdamW's m and v reuse the gradient layout. */
#include "exec.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vt_status vt_param_add(struct vt_model *m, int *idx, const char *pfx, const char *name, int ndim, int64_t d0,
                       int64_t d1, int64_t d2, int64_t d3, int trainable) {
    char full[VT_NAME_MAX + 32];
    snprintf(full, sizeof full, "%s%s", pfx, name);
    int64_t shape[4] = { d0, d1, d2, d3 };
    *idx = m->pt.n;
    return vt_ptable_add(&m->pt, full, ndim, shape, trainable);
}

/* numel of a shape in 64 bits, refused when it (or the buffer it joins) would exceed what the
 * platform can address: size_t is 32-bit in wasm, where the product would wrap silently. */
static int checked_numel(const vt_ptable *t, const char *name, int ndim, const int64_t *shape,
                         uint64_t *out) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return vt_fail(VT_ERR_ARG, "parameter %s: negative dimension %lld", name, (long long)shape[i]);
        if (shape[i] && n > VT_MAX_FLOATS / (uint64_t)shape[i])
            n = VT_MAX_FLOATS + 1; /* stays too big */
        else
            n *= (uint64_t)shape[i];
    }
    if (n > VT_MAX_FLOATS - t->total)
        return vt_fail(VT_ERR_NOMEM,
                       "out of memory: with %s the parameters exceed %.3g GB, more than this platform "
                       "can address",
                       name, (double)VT_MAX_FLOATS * sizeof(float) / 1e9);
    *out = n;
    return VT_OK;
}

vt_status vt_ptable_add(vt_ptable *t, const char *name, int ndim, const int64_t *shape, int requires_grad) {
    if (strlen(name) >= VT_NAME_MAX) return vt_fail(VT_ERR_ARG, "parameter name too long: %s", name);
    if (ndim < 0 || ndim > 4) return vt_fail(VT_ERR_ARG, "parameter %s: %d dimensions (0..4)", name, ndim);
    uint64_t numel = 0;
    int rc = checked_numel(t, name, ndim, shape, &numel);
    if (rc) return rc;
    if (t->n == t->cap) {
        int nc = t->cap ? t->cap * 2 : 64;
        vt_param *np = realloc(t->p, (size_t)nc * sizeof *np);
        if (!np)
            return vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes for the parameter table",
                           (size_t)nc * sizeof *np);
        t->p = np;
        t->cap = nc;
    }
    vt_param *p = &t->p[t->n++];
    memset(p, 0, sizeof *p);
    strcpy(p->name, name);
    p->ndim = ndim;
    for (int i = 0; i < ndim; i++) p->shape[i] = shape[i];
    p->numel = (size_t)numel; /* fits: numel <= VT_MAX_FLOATS - total */
    p->off = t->total;
    t->total += p->numel;
    p->requires_grad = requires_grad;
    return VT_OK;
}

static size_t layout_grads(vt_ptable *t) {
    size_t g = 0;
    for (int i = 0; i < t->n; i++) {
        if (t->p[i].requires_grad) {
            t->p[i].goff = (long)g;
            g += t->p[i].numel;
        } else
            t->p[i].goff = -1;
    }
    return g;
}

vt_status vt_ptable_alloc(vt_ptable *t) {
    size_t bytes = (t->total ? t->total : 1) * sizeof(float);
    t->data = calloc(1, bytes);
    if (!t->data) return vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes for parameters", bytes);
    return vt_ptable_relayout_grads(t);
}

vt_status vt_ptable_relayout_grads(vt_ptable *t) {
    /* keep the gradients of parameters that stay trainable */
    long *old = malloc(((size_t)t->n + 1) * sizeof *old);
    if (!old) return vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes", ((size_t)t->n + 1) * sizeof *old);
    for (int i = 0; i < t->n; i++) old[i] = t->p[i].goff;
    float *og = t->grad;
    size_t g = layout_grads(t);
    size_t bytes = (g ? g : 1) * sizeof(float);
    float *ng = calloc(1, bytes);
    if (!ng) {
        for (int i = 0; i < t->n; i++) t->p[i].goff = old[i];
        free(old);
        return vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes for gradients", bytes);
    }
    if (og)
        for (int i = 0; i < t->n; i++)
            if (old[i] >= 0 && t->p[i].goff >= 0)
                memcpy(ng + t->p[i].goff, og + old[i], t->p[i].numel * sizeof(float));
    free(og);
    free(old);
    t->grad = ng;
    t->gtotal = g;
    return VT_OK;
}

void vt_ptable_free(vt_ptable *t) {
    free(t->p);
    free(t->data);
    free(t->grad);
    memset(t, 0, sizeof *t);
}

/* ---- public accessors ---- */
int vt_param_count(const vt_model *m) { return m->pt.n; }
const char *vt_param_name(const vt_model *m, int i) {
    return (i >= 0 && i < m->pt.n) ? m->pt.p[i].name : NULL;
}
int vt_param_ndim(const vt_model *m, int i) { return (i >= 0 && i < m->pt.n) ? m->pt.p[i].ndim : -1; }
const int64_t *vt_param_shape(const vt_model *m, int i) {
    return (i >= 0 && i < m->pt.n) ? m->pt.p[i].shape : NULL;
}
size_t vt_param_numel(const vt_model *m, int i) { return (i >= 0 && i < m->pt.n) ? m->pt.p[i].numel : 0; }
float *vt_param_data(vt_model *m, int i) {
    return (i >= 0 && i < m->pt.n) ? m->pt.data + m->pt.p[i].off : NULL;
}
float *vt_param_grad(vt_model *m, int i) {
    if (i < 0 || i >= m->pt.n || m->pt.p[i].goff < 0) return NULL;
    return m->pt.grad + m->pt.p[i].goff;
}
int vt_param_find(const vt_model *m, const char *name) {
    for (int i = 0; i < m->pt.n; i++)
        if (strcmp(m->pt.p[i].name, name) == 0) return i;
    return -1;
}
size_t vt_param_total(const vt_model *m) { return m->pt.total; }
size_t vt_grad_total(const vt_model *m) { return m->pt.gtotal; }
int vt_param_requires_grad(const vt_model *m, int i) {
    return (i >= 0 && i < m->pt.n) ? m->pt.p[i].requires_grad : 0;
}

static int name_matches(const char *name, const char *sel) {
    size_t n = strlen(sel);
    if (n == 0) return 1;
    return strncmp(name, sel, n) == 0 && (name[n] == 0 || name[n] == '.');
}

vt_status vt_set_requires_grad(vt_model *m, const char *name, int requires_grad, int *matched) {
    if (!name) return vt_fail(VT_ERR_ARG, "vt_set_requires_grad: name is NULL");
    int cnt = 0, changed = 0;
    for (int i = 0; i < m->pt.n; i++)
        if (name_matches(m->pt.p[i].name, name)) {
            cnt++;
            if (m->pt.p[i].requires_grad != (requires_grad != 0)) changed = 1;
        }
    if (matched) *matched = cnt;
    if (!cnt) return vt_fail(VT_ERR_ARG, "no parameter named '%s'", name);
    if (!changed) return VT_OK;
    unsigned char *old = malloc((size_t)m->pt.n);
    if (!old) return vt_fail(VT_ERR_NOMEM, "out of memory: %d bytes", m->pt.n);
    for (int i = 0; i < m->pt.n; i++) {
        old[i] = (unsigned char)m->pt.p[i].requires_grad;
        if (name_matches(m->pt.p[i].name, name)) m->pt.p[i].requires_grad = requires_grad != 0;
    }
    int rc = vt_ptable_relayout_grads(&m->pt);
    if (rc) /* nothing lost: restore the flags (the old gradient buffer is still in place) */
        for (int i = 0; i < m->pt.n; i++) m->pt.p[i].requires_grad = old[i];
    free(old);
    m->last.have_fwd = 0; /* a saved forward no longer matches the gradient layout */
    return rc;
}

void vt_zero_grad(vt_model *m) {
    if (!m->pt.grad) return;
    vt_exec_mark(m, VT_PHASE_OPTIMIZER, -1, -1);
    vt_k_fill(m, m->pt.grad, (int64_t)m->pt.gtotal, 0.0f);
}
