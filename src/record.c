/* record.c: the recorder of recording mode (record.h). */
#include "record.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vt_recorder *vt_rec_new(void) {
    vt_recorder *r = calloc(1, sizeof *r);
    vt_trace *t = calloc(1, sizeof *t);
    if (!r || !t) {
        free(r);
        free(t);
        return NULL;
    }
    r->t = t;
    r->chain = r->block = -1;
    return r;
}

void vt_rec_fail(vt_recorder *r, const char *fmt, ...) {
    if (r->failed) return; /* the first reason */
    r->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
}

void vt_rec_region(vt_recorder *r, int region, const void *base, uint64_t bytes, uint64_t voff) {
    if (!base) return;
    if (r->npieces == VT_REC_PIECES) {
        vt_rec_fail(r, "recording: more than %d buffers", VT_REC_PIECES);
        return;
    }
    r->piece[r->npieces++] = (vt_rec_piece){ region, base, bytes, voff };
    if (voff + bytes > r->t->region_bytes[region]) r->t->region_bytes[region] = voff + bytes;
}

static vt_trace_entry *append(vt_recorder *r, vt_trace_kind kind) {
    vt_trace *t = r->t;
    if (r->failed) return NULL;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 1024;
        vt_trace_entry *e = realloc(t->e, (size_t)cap * sizeof *e);
        if (!e) {
            vt_rec_fail(r, "out of memory: %zu bytes for the recorded list", (size_t)cap * sizeof *e);
            return NULL;
        }
        t->e = e;
        t->cap = cap;
    }
    vt_trace_entry *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->phase = r->phase;
    e->chain = r->chain;
    e->block = r->block;
    e->kernel = -1;
    return e;
}

int vt_rec_call(vt_recorder *r, int kernel, void *const *ptr, const uint64_t *bytes, const uint8_t *acc,
                const uint8_t *dtype, int nops, const int64_t *ia, int nints, const float *fa, int nfloats,
                double flops) {
    vt_trace_entry *e = append(r, VT_TR_CALL);
    if (!e) return -1;
    e->kernel = kernel;
    e->nops = nops;
    e->nints = nints;
    e->nfloats = nfloats;
    memcpy(e->ints, ia, (size_t)nints * sizeof *ia);
    memcpy(e->floats, fa, (size_t)nfloats * sizeof *fa);
    e->flops = flops;
    for (int i = 0; i < nops; i++) {
        vt_trace_operand *o = &e->op[i];
        o->access = acc[i];
        o->dtype = dtype[i];
        if (!ptr[i]) continue; /* absent: region NONE */
        int region = 0;
        if (!vt_rec_locate(r, ptr[i], bytes[i], &region, &o->offset)) {
            r->t->n--;
            return i;
        }
        o->region = (uint8_t)region;
        o->bytes = bytes[i];
    }
    return -1;
}

int vt_rec_locate(const vt_recorder *r, const void *ptr, uint64_t bytes, int *region, uint64_t *offset) {
    const uint8_t *p = ptr;
    for (int k = 0; k < r->npieces; k++) {
        const vt_rec_piece *pc = &r->piece[k];
        if (p >= pc->base && p <= pc->base + pc->bytes && (uint64_t)(p - pc->base) + bytes <= pc->bytes) {
            *region = pc->region;
            *offset = pc->voff + (uint64_t)(p - pc->base);
            return 1;
        }
    }
    return 0;
}

void vt_rec_alloc(vt_recorder *r, uint64_t offset, uint64_t bytes, const char *name) {
    vt_trace_entry *e = append(r, VT_TR_ALLOC);
    if (!e) return;
    e->offset = offset;
    e->bytes = bytes;
    snprintf(e->name, sizeof e->name, "%s", name ? name : "");
}

void vt_rec_reset(vt_recorder *r, uint64_t offset) {
    vt_trace_entry *e = append(r, VT_TR_RESET);
    if (e) e->offset = offset;
}

void vt_rec_release(vt_recorder *r, uint64_t bytes) {
    vt_trace_entry *e = append(r, VT_TR_RELEASE);
    if (e) e->bytes = bytes;
}

static const int input_regions[] = { VT_REG_IMAGES, VT_REG_IDX_KEEP, VT_REG_IDX_MASK, VT_REG_MASK,
                                     VT_REG_LABELS, VT_REG_DOUTS,    VT_REG_SCALARS };

vt_trace *vt_rec_finish(vt_recorder *r) {
    vt_trace *t = r->t;
    for (size_t i = 0; i < sizeof input_regions / sizeof *input_regions && !r->failed; i++) {
        int reg = input_regions[i];
        uint64_t n = t->region_bytes[reg];
        if (!n) continue;
        if (n > SIZE_MAX) {
            vt_rec_fail(r, "recording: region of %llu bytes", (unsigned long long)n);
            break;
        }
        t->input[reg] = calloc(1, (size_t)n);
        if (!t->input[reg]) {
            vt_rec_fail(r, "out of memory: %llu bytes for recorded inputs", (unsigned long long)n);
            break;
        }
        for (int k = 0; k < r->npieces; k++)
            if (r->piece[k].region == reg)
                memcpy(t->input[reg] + r->piece[k].voff, r->piece[k].base, (size_t)r->piece[k].bytes);
    }
    if (r->failed) {
        vt_fail(VT_ERR_STATE, "%s", r->error);
        vt_trace_free(t);
        free(r);
        return NULL;
    }
    free(r);
    return t;
}

void vt_rec_abort(vt_recorder *r) {
    if (!r) return;
    vt_trace_free(r->t);
    free(r);
}

void vt_trace_free(vt_trace *t) {
    if (!t) return;
    for (int i = 0; i < VT_REG_COUNT; i++) free(t->input[i]);
    free(t->e);
    free(t);
}
int vt_trace_count(const vt_trace *t) { return t ? t->n : 0; }
const vt_trace_entry *vt_trace_get(const vt_trace *t, int i) {
    return t && i >= 0 && i < t->n ? &t->e[i] : NULL;
}
uint64_t vt_trace_region_bytes(const vt_trace *t, vt_region r) {
    return t && (int)r >= 0 && r < VT_REG_COUNT ? t->region_bytes[r] : 0;
}
const void *vt_trace_input(const vt_trace *t, vt_region r) {
    return t && (int)r >= 0 && r < VT_REG_COUNT ? t->input[r] : NULL;
}
