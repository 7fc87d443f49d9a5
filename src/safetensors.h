/* safetensors.h: read (zero-copy views into a caller-owned byte buffer) and write safetensors files.
 * Works on memory only: no file I/O, so it builds for wasm32 as is. Little-endian data assumed.
 * Not supported: dtypes other than those in vt_dtype (F8*, I16, U16, U32, U64, C64 are rejected). */
#ifndef VT_SAFETENSORS_H
#define VT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum {
    VT_DT_F32,
    VT_DT_F16,
    VT_DT_BF16,
    VT_DT_F64,
    VT_DT_I64,
    VT_DT_I32,
    VT_DT_I8,
    VT_DT_U8,
    VT_DT_BOOL
} vt_dtype;

int vt_dtype_size(vt_dtype dt);         /* bytes per element; 0 for an invalid value */
const char *vt_dtype_name(vt_dtype dt); /* "F32", "F16", "BF16", ...; "?" for an invalid value */

#define VT_ST_MAX_DIMS   8
#define VT_ST_MAX_HEADER (100u * 1000u * 1000u) /* same 100 MB header cap as the reference reader */
/* tensors read from one file: far more than any model's (a ViT-B's training state holds ~450),
 * counted before the header is parsed (a hostile header of 300,000 keys is refused at once) */
#define VT_ST_MAX_TENSORS 65536u

typedef struct {
    char *name;
    vt_dtype dtype;
    int ndim;
    long long shape[VT_ST_MAX_DIMS];
    size_t numel;
    const unsigned char *data; /* view into the parsed bytes; may be unaligned */
    size_t nbytes;
} vt_st_tensor;

typedef struct {
    vt_st_tensor *tensors;
    size_t n;
    char **meta_keys;
    char **meta_vals;
    size_t n_meta;
} vt_st_file;

/* Parses a whole file held in bytes[0..len). Tensor views point into `bytes`, which must outlive
 * *out. Tensors are kept in header order. On failure *out is left empty (vt_st_free-safe).
 * Gaps between tensor byte ranges are allowed; overlaps are not. Errors: VT_ERR_FORMAT,
 * VT_ERR_NOMEM, VT_ERR_ARG. */
vt_status vt_st_parse(const unsigned char *bytes, size_t len, vt_st_file *out);
void vt_st_free(vt_st_file *f); /* frees what parse allocated (not bytes); resets *f; NULL-safe */
const vt_st_tensor *vt_st_find(const vt_st_file *f, const char *name); /* NULL if absent */
const char *vt_st_meta(const vt_st_file *f, const char *key);          /* NULL if absent */

/* Float tensors (F32, F16 incl. subnormals/inf/nan, BF16, F64) -> t->numel floats in dst.
 * F64 values beyond float range become +-inf. Other dtypes: VT_ERR_MISMATCH. */
vt_status vt_st_to_f32(const vt_st_tensor *t, float *dst);
/* Integer tensors (I64, I32, I8, U8, BOOL as 0/1) -> t->numel int64 in dst. Floats: VT_ERR_MISMATCH. */
vt_status vt_st_to_i64(const vt_st_tensor *t, long long *dst);

/* Writer: one entry per tensor, data read from `data` as little-endian elements of `dtype`. */
typedef struct {
    const char *name;
    vt_dtype dtype;
    int ndim;
    const long long *shape;
    const void *data;
} vt_st_entry;

/* Entries are written in the given order with their data contiguous in that order; the header is
 * space-padded to a multiple of 8 bytes; "__metadata__" (string -> string) comes first if n_meta > 0.
 * Names must be unique, non-empty, valid UTF-8 and not "__metadata__"; metadata keys unique.
 * *out is malloc'd (caller frees). Errors: VT_ERR_ARG, VT_ERR_NOMEM. */
vt_status vt_st_write(const vt_st_entry *e, size_t n, const char *const *meta_keys,
                      const char *const *meta_vals, size_t n_meta, unsigned char **out, size_t *out_len);

/* CRC-32 of n bytes (IEEE, the same value as zlib's crc32). */
uint32_t vt_crc32(const void *data, size_t n);

#endif
