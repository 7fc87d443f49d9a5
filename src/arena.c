/* arena.c: the activation arena, a bump allocator over one buffer sized by the plan. It never
 * grows during a call: running past the capacity is a planning bug, reported, never a crash. */
#include "record.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float *vt_arena_alloc(vt_arena *a, size_t nfloats, const char *name, ...) {
    size_t n = vt_round(nfloats);
    if (a->top + n > a->cap || !a->base) {
        a->overflow = 1;
        return NULL;
    }
    float *p = a->base + a->top;
    a->top += n;
    if (a->top > a->peak) a->peak = a->top;
    vt_arena_event(a);
    if (a->rec) {
        char text[64];
        va_list ap;
        va_start(ap, name);
        vsnprintf(text, sizeof text, name, ap);
        va_end(ap);
        vt_rec_alloc(a->rec, (uint64_t)(p - a->base) * sizeof(float), (uint64_t)n * sizeof(float), text);
    }
    return p;
}

void vt_arena_release(vt_arena *a, uint64_t nfloats) {
    a->released += (size_t)nfloats;
    vt_arena_event(a);
    if (a->rec) vt_rec_release(a->rec, nfloats * sizeof(float));
}

void vt_arena_reset(vt_arena *a, size_t mark) {
    a->top = mark;
    vt_arena_event(a);
    if (a->rec) vt_rec_reset(a->rec, (uint64_t)mark * sizeof(float));
}

vt_status vt_arena_overflow(const vt_arena *a) {
    return vt_fail(VT_ERR_STATE, "activation arena overflow (planned %zu floats): a planning bug", a->cap);
}

vt_status vt_arena_reserve(vt_arena *a, size_t nfloats) {
    if (nfloats <= a->cap && a->base) return VT_OK;
    /* 64-byte alignment by hand (aligned_alloc is missing on some wasm libcs): the raw pointer
     * is stored just below the aligned base; the spare bytes cover the pointer and the shift */
    size_t bytes = (nfloats ? nfloats : 1) * sizeof(float) + VT_ARENA_SPARE_BYTES;
    void *raw = malloc(bytes);
    if (!raw) return vt_fail(VT_ERR_NOMEM, "out of memory: the activation arena needs %zu bytes", bytes);
    if (a->base) free(((void **)a->base)[-1]);
    uintptr_t u = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    a->base = (float *)u;
    ((void **)a->base)[-1] = raw;
    a->cap = nfloats;
    return VT_OK;
}

void vt_arena_begin(vt_arena *a) {
    a->top = 0;
    a->peak = 0;
    a->overflow = 0;
    a->tl_n = 0;
    a->tl_backward = -1;
    a->released = 0;
    if (a->rec) vt_rec_reset(a->rec, 0);
}

void vt_arena_free(vt_arena *a) {
    if (a->base) free(((void **)a->base)[-1]);
    a->base = NULL;
    a->cap = a->top = a->peak = 0;
    a->overflow = 0;
    a->tl_n = 0;
    a->tl_backward = -1;
}
