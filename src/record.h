/* record.h: recording mode's recorder and the trace it fills (internal; the public side is
 * vitrine.h's vt_trace_*). While a model records (its arena's `rec` is set), exec.c hands every
 * kernel call here instead of running it and arena.c every allocation, scope end and release; a
 * pointer operand becomes (region, offset) by address range against the regions registered (the
 * model's buffers, the arena, the call's inputs). An operand in no region is a bug: the recording
 * fails and says which. Nothing here calls the engine. */
#ifndef VT_RECORD_H
#define VT_RECORD_H
#include "model.h"

struct vt_trace {
    vt_trace_entry *e;
    int n, cap;
    uint64_t region_bytes[VT_REG_COUNT];
    uint8_t *input[VT_REG_COUNT]; /* the input regions' bytes as recorded */
    /* what was recorded, for the summary */
    char what[192];
    int nchains;
    vt_chain_layout lay[VT_CHAINS];
    char chain_name[VT_CHAINS][8];
    int depth[VT_CHAINS];
    uint64_t arena_planned; /* bytes */
    /* a call's outputs (vt_output's order) where the list leaves them: region, offset, shape */
    int nout;
    struct {
        int region, ndim;
        uint64_t offset, bytes;
        int64_t shape[4];
    } out[VT_MAX_DEPTH + 1];
};

#define VT_REC_PIECES (VT_MAX_DEPTH + 32)
typedef struct {
    int region;
    const uint8_t *base;
    uint64_t bytes, voff; /* the piece is the region's bytes [voff, voff + bytes) */
} vt_rec_piece;

struct vt_recorder {
    vt_trace *t;
    vt_rec_piece piece[VT_REC_PIECES];
    int npieces;
    int phase, chain, block; /* the marker of what is recorded next */
    int failed;
    char error[300];
};
typedef struct vt_recorder vt_recorder;

vt_recorder *vt_rec_new(void); /* NULL when out of memory */
/* bytes at base are the region's [voff, voff + bytes) */
void vt_rec_region(vt_recorder *r, int region, const void *base, uint64_t bytes, uint64_t voff);
/* a call: each operand's pointer, bytes, access, dtype; -1 when all map to regions, else the index
 * of the first operand in none (the recording has failed) */
int vt_rec_call(vt_recorder *r, int kernel, void *const *ptr, const uint64_t *bytes, const uint8_t *acc,
                const uint8_t *dtype, int nops, const int64_t *ia, int nints, const float *fa, int nfloats,
                double flops);
/* bytes at p as (region, offset): 1 when they lie in one registered piece, else 0 */
int vt_rec_locate(const vt_recorder *r, const void *p, uint64_t bytes, int *region, uint64_t *offset);
void vt_rec_alloc(vt_recorder *r, uint64_t offset, uint64_t bytes, const char *name);
void vt_rec_reset(vt_recorder *r, uint64_t offset);
void vt_rec_release(vt_recorder *r, uint64_t bytes);
void vt_rec_fail(vt_recorder *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Ends the recording: copies the input regions' bytes into the trace and frees the recorder.
 * Returns the trace, or NULL with the reason (vt_fail) when the recording failed. */
vt_trace *vt_rec_finish(vt_recorder *r);
void vt_rec_abort(vt_recorder *r);
#endif
