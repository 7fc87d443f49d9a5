/* safetensors.c: safetensors reader (zero-copy, hostile-input safe) and writer (see safetensors.h).
 * Layout: 8-byte little-endian header length N, N bytes of JSON header, then the data section.
 * Not a file loader (no I/O here) and not a general dtype converter: only the dtypes in vt_dtype.
 * All multi-byte values are assembled from single bytes, so unaligned data and big-endian hosts
 * are both fine. */
#include "safetensors.h"
#include "json.h"
#include "status.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------------------------------
 * dtypes */

static const char *const dtype_names[] = { "F32", "F16", "BF16", "F64", "I64", "I32", "I8", "U8", "BOOL" };
static const int dtype_sizes[] = { 4, 2, 2, 8, 8, 4, 1, 1, 1 };
#define N_DTYPES ((int)(sizeof dtype_sizes / sizeof dtype_sizes[0]))

static int dtype_ok(vt_dtype dt) { return (unsigned)dt < (unsigned)N_DTYPES; }

int vt_dtype_size(vt_dtype dt) { return dtype_ok(dt) ? dtype_sizes[dt] : 0; }
const char *vt_dtype_name(vt_dtype dt) { return dtype_ok(dt) ? dtype_names[dt] : "?"; }

static int dtype_from_name(const char *s, vt_dtype *dt) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(s, dtype_names[i]) == 0) {
            *dt = (vt_dtype)i;
            return 1;
        }
    return 0;
}

static uint16_t ld16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t ld32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t ld64(const unsigned char *p) { return (uint64_t)ld32(p) | ((uint64_t)ld32(p + 4) << 32); }

/* Element count and byte size of a shape, with overflow checks. Returns 0 on overflow. */
static int shape_size(const long long *shape, int ndim, int esize, size_t *numel, size_t *nbytes) {
    unsigned long long n = 1;
    for (int i = 0; i < ndim; i++) {
        unsigned long long d = (unsigned long long)shape[i];
        if (d != 0 && n > ULLONG_MAX / d) return 0;
        n *= d;
    }
    if (n > SIZE_MAX || n > SIZE_MAX / (unsigned)esize) return 0;
    *numel = (size_t)n;
    *nbytes = (size_t)n * (size_t)esize;
    return 1;
}

static void shape_str(char *buf, size_t cap, const long long *shape, int ndim) {
    size_t k = 0;
    k += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? ", %lld" : "%lld", shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* ----------------------------------------------------------------------------------------------
 * reader */

void vt_st_free(vt_st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    memset(f, 0, sizeof *f);
}

const vt_st_tensor *vt_st_find(const vt_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *vt_st_meta(const vt_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

static int st_nomem(size_t bytes) {
    return vt_fail(VT_ERR_NOMEM, "safetensors: out of memory allocating %zu bytes", bytes);
}

/* Takes ownership of the metadata strings out of the JSON tree. */
static int parse_metadata(vt_json *m, vt_st_file *out) {
    if (m->type != VT_JSON_OBJECT)
        return vt_fail(VT_ERR_FORMAT, "safetensors: __metadata__ is not an object");
    if (m->n == 0) return VT_OK;
    out->meta_keys = calloc(m->n, sizeof(char *));
    out->meta_vals = calloc(m->n, sizeof(char *));
    if (!out->meta_keys || !out->meta_vals) return st_nomem(m->n * sizeof(char *));
    for (size_t j = 0; j < m->n; j++) {
        if (m->items[j].type != VT_JSON_STRING)
            return vt_fail(VT_ERR_FORMAT,
                           "safetensors: __metadata__ value for key \"%.200s\" is not a string", m->keys[j]);
        out->meta_keys[j] = m->keys[j];
        out->meta_vals[j] = m->items[j].str;
        m->keys[j] = NULL;
        m->items[j].str = NULL;
        out->n_meta++;
    }
    return VT_OK;
}

static int json_nonneg_int(const vt_json *v) {
    return v->type == VT_JSON_NUMBER && v->is_integer && v->integer >= 0;
}

/* Fills *t (except the name) from one header entry and checks it against the data section. */
static int parse_tensor(const char *name, const vt_json *v, const unsigned char *data, size_t data_len,
                        vt_st_tensor *t) {
    if (name[0] == 0) return vt_fail(VT_ERR_FORMAT, "safetensors: tensor with an empty name");
    if (v->type != VT_JSON_OBJECT)
        return vt_fail(VT_ERR_FORMAT, "safetensors: tensor \"%.200s\": entry is not an object", name);

    const vt_json *dt = vt_json_get(v, "dtype");
    if (!dt || dt->type != VT_JSON_STRING)
        return vt_fail(VT_ERR_FORMAT, "safetensors: tensor \"%.200s\": missing or non-string dtype", name);
    if (!dtype_from_name(dt->str, &t->dtype))
        return vt_fail(VT_ERR_FORMAT,
                       "safetensors: tensor \"%.200s\": unknown or unsupported dtype \"%.40s\"", name,
                       dt->str);

    const vt_json *sh = vt_json_get(v, "shape");
    if (!sh || sh->type != VT_JSON_ARRAY)
        return vt_fail(VT_ERR_FORMAT, "safetensors: tensor \"%.200s\": shape is not a list", name);
    if (sh->n > VT_ST_MAX_DIMS)
        return vt_fail(VT_ERR_FORMAT,
                       "safetensors: tensor \"%.200s\": shape has %zu dims, at most %d supported", name,
                       sh->n, VT_ST_MAX_DIMS);
    t->ndim = (int)sh->n;
    for (int i = 0; i < t->ndim; i++) {
        if (!json_nonneg_int(&sh->items[i]))
            return vt_fail(
                VT_ERR_FORMAT,
                "safetensors: tensor \"%.200s\": shape must be a list of non-negative integers (dim %d)",
                name, i);
        t->shape[i] = sh->items[i].integer;
    }
    char sbuf[256];
    shape_str(sbuf, sizeof sbuf, t->shape, t->ndim);
    int esize = vt_dtype_size(t->dtype);
    if (!shape_size(t->shape, t->ndim, esize, &t->numel, &t->nbytes))
        return vt_fail(VT_ERR_FORMAT, "safetensors: tensor \"%.200s\": shape %s %s overflows the byte count",
                       name, sbuf, vt_dtype_name(t->dtype));

    const vt_json *off = vt_json_get(v, "data_offsets");
    if (!off || off->type != VT_JSON_ARRAY || off->n != 2 || !json_nonneg_int(&off->items[0]) ||
        !json_nonneg_int(&off->items[1]))
        return vt_fail(
            VT_ERR_FORMAT,
            "safetensors: tensor \"%.200s\": data_offsets must be [begin, end] non-negative integers", name);
    unsigned long long b = (unsigned long long)off->items[0].integer;
    unsigned long long e = (unsigned long long)off->items[1].integer;
    if (b > e)
        return vt_fail(VT_ERR_FORMAT, "safetensors: tensor \"%.200s\": data_offsets begin %llu > end %llu",
                       name, b, e);
    if (e > data_len)
        return vt_fail(
            VT_ERR_FORMAT,
            "safetensors: tensor \"%.200s\": data_offsets end %llu is beyond the %zu-byte data section", name,
            e, data_len);
    if (e - b != t->nbytes)
        return vt_fail(VT_ERR_FORMAT,
                       "safetensors: tensor \"%.200s\": shape %s %s needs %zu bytes, data_offsets give %llu",
                       name, sbuf, vt_dtype_name(t->dtype), t->nbytes, e - b);
    t->data = data + b;
    return VT_OK;
}

typedef struct {
    size_t begin, end, idx;
} range;

static int range_cmp(const void *a, const void *b) {
    const range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Gaps are tolerated, overlaps are not: sort by begin and compare each non-empty range with the
 * previous non-empty one (their ends are increasing once no overlap has been found). */
static int check_overlap(const vt_st_file *f, const unsigned char *data) {
    if (f->n < 2) return VT_OK;
    range *r = malloc(f->n * sizeof(range));
    if (!r) return st_nomem(f->n * sizeof(range));
    for (size_t i = 0; i < f->n; i++) {
        r[i].begin = (size_t)(f->tensors[i].data - data);
        r[i].end = r[i].begin + f->tensors[i].nbytes;
        r[i].idx = i;
    }
    qsort(r, f->n, sizeof(range), range_cmp);
    int rc = VT_OK;
    const range *prev = NULL;
    for (size_t i = 0; i < f->n; i++) {
        if (r[i].begin == r[i].end) continue;
        if (prev && r[i].begin < prev->end) {
            rc = vt_fail(VT_ERR_FORMAT,
                         "safetensors: tensors \"%.200s\" [%zu, %zu) and \"%.200s\" [%zu, %zu) overlap",
                         f->tensors[prev->idx].name, prev->begin, prev->end, f->tensors[r[i].idx].name,
                         r[i].begin, r[i].end);
            break;
        }
        prev = &r[i];
    }
    free(r);
    return rc;
}

/* The keys of a JSON text's top-level object, counted without parsing it (strings and nesting
 * followed; malformed text is left to the parser). */
static size_t top_level_keys(const char *s, size_t n) {
    size_t keys = 0;
    long depth = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ':' && depth == 1) {
            keys++;
        }
    }
    return keys;
}

vt_status vt_st_parse(const unsigned char *bytes, size_t len, vt_st_file *out) {
    if (!out) return vt_fail(VT_ERR_ARG, "safetensors: out is NULL");
    memset(out, 0, sizeof *out);
    if (!bytes && len) return vt_fail(VT_ERR_ARG, "safetensors: bytes is NULL");
    if (len < 8)
        return vt_fail(VT_ERR_FORMAT, "safetensors: file is %zu bytes, shorter than the 8-byte header length",
                       len);
    unsigned long long hl = ld64(bytes);
    if (hl == 0) return vt_fail(VT_ERR_FORMAT, "safetensors: header length is 0");
    if (hl > VT_ST_MAX_HEADER)
        return vt_fail(VT_ERR_FORMAT, "safetensors: header length %llu exceeds the %u-byte limit", hl,
                       VT_ST_MAX_HEADER);
    if (hl > len - 8)
        return vt_fail(VT_ERR_FORMAT, "safetensors: header length %llu exceeds file size %zu", hl, len);
    const unsigned char *data = bytes + 8 + hl;
    size_t data_len = len - 8 - (size_t)hl;
    size_t keys = top_level_keys((const char *)bytes + 8, (size_t)hl);
    if (keys > VT_ST_MAX_TENSORS + 1) /* (+1: __metadata__) */
        return vt_fail(VT_ERR_FORMAT, "safetensors: %zu entries in the header, more than the %u tensors read",
                       keys, VT_ST_MAX_TENSORS);

    vt_json *root = NULL;
    int rc = vt_json_parse((const char *)bytes + 8, (size_t)hl, &root);
    if (rc) {
        /* Copy first: vt_fail must not format from its own buffer. Offsets are within the header. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", vt_last_error());
        if (rc == VT_ERR_FORMAT)
            return vt_fail(rc, "safetensors: header is not valid JSON: %s (offset within the header)", msg);
        return vt_fail(rc, "safetensors: header: %s", msg);
    }
    if (root->type != VT_JSON_OBJECT) {
        vt_json_free(root);
        return vt_fail(VT_ERR_FORMAT, "safetensors: header is not a JSON object");
    }

    size_t count = root->n;
    if (vt_json_get(root, "__metadata__")) count--;
    if (count) {
        out->tensors = calloc(count, sizeof(vt_st_tensor));
        if (!out->tensors) {
            rc = st_nomem(count * sizeof(vt_st_tensor));
            goto fail;
        }
    }
    for (size_t i = 0; i < root->n; i++) {
        if (strcmp(root->keys[i], "__metadata__") == 0) {
            rc = parse_metadata(&root->items[i], out);
        } else {
            vt_st_tensor *t = &out->tensors[out->n];
            rc = parse_tensor(root->keys[i], &root->items[i], data, data_len, t);
            if (!rc) {
                t->name = root->keys[i]; /* steal the decoded key from the tree */
                root->keys[i] = NULL;
                out->n++;
            }
        }
        if (rc) goto fail;
    }
    rc = check_overlap(out, data);
    if (rc) goto fail;
    vt_json_free(root);
    return VT_OK;
fail:
    vt_json_free(root);
    vt_st_free(out);
    return rc;
}

/* ----------------------------------------------------------------------------------------------
 * conversion */

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
    if (exp == 0) {
        /* Zero or subnormal: mant * 2^-24 is exact in float32. */
        float f = (float)mant * 0x1p-24f;
        return sign ? -f : f;
    }
    if (exp == 31)
        bits = sign | 0x7F800000u | (mant << 13); /* inf, nan (payload kept) */
    else
        bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13); /* rebias exponent */
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float bits_to_f32(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* double -> float without the undefined behaviour of converting out-of-range values:
 * anything at or beyond the rounding midpoint above FLT_MAX becomes inf, like IEEE rounding. */
static float f64_to_f32(double d) {
    const double mid = (double)FLT_MAX + 0x1p103; /* halfway between FLT_MAX and 2^128 */
    if (d > FLT_MAX) return d < mid ? FLT_MAX : INFINITY;
    if (d < -FLT_MAX) return d > -mid ? -FLT_MAX : -INFINITY;
    return (float)d;
}

vt_status vt_st_to_f32(const vt_st_tensor *t, float *dst) {
    if (!t) return vt_fail(VT_ERR_ARG, "safetensors: to_f32: tensor is NULL");
    if (!dst && t->numel) return vt_fail(VT_ERR_ARG, "safetensors: to_f32: dst is NULL");
    const unsigned char *p = t->data;
    size_t n = t->numel;
    switch (t->dtype) {
        case VT_DT_F32:
            for (size_t i = 0; i < n; i++) dst[i] = bits_to_f32(ld32(p + 4 * i));
            break;
        case VT_DT_F16:
            for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32(ld16(p + 2 * i));
            break;
        case VT_DT_BF16:
            for (size_t i = 0; i < n; i++) dst[i] = bits_to_f32((uint32_t)ld16(p + 2 * i) << 16);
            break;
        case VT_DT_F64:
            for (size_t i = 0; i < n; i++) {
                uint64_t b = ld64(p + 8 * i);
                double d;
                memcpy(&d, &b, 8);
                dst[i] = f64_to_f32(d);
            }
            break;
        default:
            return vt_fail(VT_ERR_MISMATCH,
                           "safetensors: tensor \"%.200s\" has dtype %s, expected a float dtype",
                           t->name ? t->name : "?", vt_dtype_name(t->dtype));
    }
    return VT_OK;
}

vt_status vt_st_to_i64(const vt_st_tensor *t, long long *dst) {
    if (!t) return vt_fail(VT_ERR_ARG, "safetensors: to_i64: tensor is NULL");
    if (!dst && t->numel) return vt_fail(VT_ERR_ARG, "safetensors: to_i64: dst is NULL");
    const unsigned char *p = t->data;
    size_t n = t->numel;
    /* memcpy into the signed type gives two's complement reinterpretation without impl-defined casts. */
    switch (t->dtype) {
        case VT_DT_I64:
            for (size_t i = 0; i < n; i++) {
                uint64_t u = ld64(p + 8 * i);
                int64_t s;
                memcpy(&s, &u, 8);
                dst[i] = s;
            }
            break;
        case VT_DT_I32:
            for (size_t i = 0; i < n; i++) {
                uint32_t u = ld32(p + 4 * i);
                int32_t s;
                memcpy(&s, &u, 4);
                dst[i] = s;
            }
            break;
        case VT_DT_I8:
            for (size_t i = 0; i < n; i++) {
                int8_t s;
                memcpy(&s, p + i, 1);
                dst[i] = s;
            }
            break;
        case VT_DT_U8:
            for (size_t i = 0; i < n; i++) dst[i] = p[i];
            break;
        case VT_DT_BOOL:
            for (size_t i = 0; i < n; i++) dst[i] = p[i] != 0;
            break;
        default:
            return vt_fail(VT_ERR_MISMATCH,
                           "safetensors: tensor \"%.200s\" has dtype %s, expected an integer dtype",
                           t->name ? t->name : "?", vt_dtype_name(t->dtype));
    }
    return VT_OK;
}

/* ----------------------------------------------------------------------------------------------
 * writer */

typedef struct {
    char *p;
    size_t len, cap;
    int nomem;
    size_t want; /* size of the allocation that failed */
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->nomem) return;
    if (n > SIZE_MAX / 2 - b->len) {
        b->nomem = 1;
        b->want = SIZE_MAX;
        return;
    }
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) {
            b->nomem = 1;
            b->want = nc;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(sbuf *b, unsigned long long v) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%llu", v);
    sb_str(b, tmp);
}

/* Writes s as a JSON string literal. s is already known to be valid UTF-8. */
static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"')
            sb_put(b, "\\\"", 2);
        else if (*c == '\\')
            sb_put(b, "\\\\", 2);
        else if (*c < 0x20) {
            char tmp[8];
            snprintf(tmp, sizeof tmp, "\\u%04x", *c);
            sb_put(b, tmp, 6);
        } else
            sb_put(b, (const char *)c, 1);
    }
    sb_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Finds a repeated string among s[0..n); returns it or NULL. O(n log n). */
static int find_duplicate(const char *const *s, size_t n, const char **dup) {
    *dup = NULL;
    if (n < 2) return VT_OK;
    const char **tmp = malloc(n * sizeof(char *));
    if (!tmp) return st_nomem(n * sizeof(char *));
    memcpy(tmp, s, n * sizeof(char *));
    qsort(tmp, n, sizeof(char *), cmp_str_ptr);
    for (size_t i = 1; i < n && !*dup; i++)
        if (strcmp(tmp[i - 1], tmp[i]) == 0) *dup = tmp[i];
    free(tmp);
    return VT_OK;
}

static int check_entries(const vt_st_entry *e, size_t n, size_t *data_total) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *nm = e[i].name;
        if (!nm || !nm[0]) return vt_fail(VT_ERR_ARG, "safetensors write: entry %zu has an empty name", i);
        if (strcmp(nm, "__metadata__") == 0)
            return vt_fail(VT_ERR_ARG, "safetensors write: entry %zu uses the reserved name __metadata__", i);
        if (!vt_json_utf8_valid(nm, strlen(nm)))
            return vt_fail(VT_ERR_ARG, "safetensors write: entry %zu name is not valid UTF-8", i);
        if (!dtype_ok(e[i].dtype))
            return vt_fail(VT_ERR_ARG, "safetensors write: tensor \"%.200s\": invalid dtype %d", nm,
                           (int)e[i].dtype);
        if (e[i].ndim < 0 || e[i].ndim > VT_ST_MAX_DIMS)
            return vt_fail(VT_ERR_ARG, "safetensors write: tensor \"%.200s\": ndim %d not in [0, %d]", nm,
                           e[i].ndim, VT_ST_MAX_DIMS);
        if (e[i].ndim > 0 && !e[i].shape)
            return vt_fail(VT_ERR_ARG, "safetensors write: tensor \"%.200s\": shape is NULL", nm);
        for (int d = 0; d < e[i].ndim; d++)
            if (e[i].shape[d] < 0)
                return vt_fail(VT_ERR_ARG,
                               "safetensors write: tensor \"%.200s\": shape[%d] = %lld is negative", nm, d,
                               e[i].shape[d]);
        size_t numel = 0, nbytes = 0;
        if (!shape_size(e[i].shape, e[i].ndim, vt_dtype_size(e[i].dtype), &numel, &nbytes) ||
            nbytes > SIZE_MAX - total)
            return vt_fail(VT_ERR_ARG, "safetensors write: tensor \"%.200s\": byte size overflows", nm);
        if (nbytes && !e[i].data)
            return vt_fail(VT_ERR_ARG, "safetensors write: tensor \"%.200s\": data is NULL", nm);
        total += nbytes;
    }
    *data_total = total;
    return VT_OK;
}

vt_status vt_st_write(const vt_st_entry *e, size_t n, const char *const *meta_keys,
                      const char *const *meta_vals, size_t n_meta, unsigned char **out, size_t *out_len) {
    if (!out || !out_len) return vt_fail(VT_ERR_ARG, "safetensors write: out or out_len is NULL");
    *out = NULL;
    *out_len = 0;
    if (n && !e) return vt_fail(VT_ERR_ARG, "safetensors write: entries are NULL");
    if (n_meta && (!meta_keys || !meta_vals))
        return vt_fail(VT_ERR_ARG, "safetensors write: metadata arrays are NULL");
    for (size_t i = 0; i < n_meta; i++) {
        if (!meta_keys[i] || !meta_vals[i])
            return vt_fail(VT_ERR_ARG, "safetensors write: metadata entry %zu is NULL", i);
        if (!vt_json_utf8_valid(meta_keys[i], strlen(meta_keys[i])) ||
            !vt_json_utf8_valid(meta_vals[i], strlen(meta_vals[i])))
            return vt_fail(VT_ERR_ARG, "safetensors write: metadata entry %zu is not valid UTF-8", i);
    }
    size_t data_total = 0;
    int rc = check_entries(e, n, &data_total);
    if (rc) return rc;

    /* Uniqueness: names among themselves, metadata keys among themselves. */
    const char *dup = NULL;
    if (n) {
        const char **names = malloc(n * sizeof(char *));
        if (!names) return st_nomem(n * sizeof(char *));
        for (size_t i = 0; i < n; i++) names[i] = e[i].name;
        rc = find_duplicate(names, n, &dup);
        free(names);
        if (rc) return rc;
        if (dup) return vt_fail(VT_ERR_ARG, "safetensors write: duplicate tensor name \"%.200s\"", dup);
    }
    rc = find_duplicate(meta_keys, n_meta, &dup);
    if (rc) return rc;
    if (dup) return vt_fail(VT_ERR_ARG, "safetensors write: duplicate metadata key \"%.200s\"", dup);

    sbuf h = { 0 };
    sb_put(&h, "{", 1);
    if (n_meta) {
        sb_str(&h, "\"__metadata__\":{");
        for (size_t i = 0; i < n_meta; i++) {
            if (i) sb_put(&h, ",", 1);
            sb_json_str(&h, meta_keys[i]);
            sb_put(&h, ":", 1);
            sb_json_str(&h, meta_vals[i]);
        }
        sb_put(&h, "}", 1);
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (i || n_meta) sb_put(&h, ",", 1);
        sb_json_str(&h, e[i].name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, vt_dtype_name(e[i].dtype));
        sb_str(&h, "\",\"shape\":[");
        for (int d = 0; d < e[i].ndim; d++) {
            if (d) sb_put(&h, ",", 1);
            sb_u64(&h, (unsigned long long)e[i].shape[d]);
        }
        size_t numel = 0, nbytes = 0;
        shape_size(e[i].shape, e[i].ndim, vt_dtype_size(e[i].dtype), &numel, &nbytes); /* checked above */
        sb_str(&h, "],\"data_offsets\":[");
        sb_u64(&h, off);
        sb_put(&h, ",", 1);
        sb_u64(&h, off + nbytes);
        sb_str(&h, "]}");
        off += nbytes;
    }
    sb_put(&h, "}", 1);
    while (!h.nomem && h.len % 8) sb_put(&h, " ", 1); /* pad so the data section starts 8-aligned */
    if (h.nomem) {
        free(h.p);
        return st_nomem(h.want);
    }
    if (h.len > VT_ST_MAX_HEADER) {
        free(h.p);
        return vt_fail(VT_ERR_ARG, "safetensors write: header would be %zu bytes, over the %u-byte limit",
                       h.len, VT_ST_MAX_HEADER);
    }
    if (data_total > SIZE_MAX - 8 - h.len) {
        free(h.p);
        return vt_fail(VT_ERR_NOMEM, "safetensors write: file size overflows size_t");
    }
    size_t total = 8 + h.len + data_total;
    unsigned char *buf = malloc(total);
    if (!buf) {
        free(h.p);
        return st_nomem(total);
    }
    unsigned long long hl = h.len;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hl >> (8 * i));
    memcpy(buf + 8, h.p, h.len);
    free(h.p);
    unsigned char *d = buf + 8 + h.len;
    for (size_t i = 0; i < n; i++) {
        size_t numel = 0, nbytes = 0;
        shape_size(e[i].shape, e[i].ndim, vt_dtype_size(e[i].dtype), &numel, &nbytes);
        if (nbytes) memcpy(d, e[i].data, nbytes);
        d += nbytes;
    }
    *out = buf;
    *out_len = total;
    return VT_OK;
}

/* CRC-32 (IEEE 802.3, zlib's crc32): checksums of tensor bytes in training-state metadata, so a
 * flipped bit is refused with the tensor's name. One 256-entry table, built on first use. */
uint32_t vt_crc32(const void *data, size_t n) {
    static uint32_t table[256];
    static int ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
            table[i] = c;
        }
        ready = 1;
    }
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
    return c ^ 0xffffffffu;
}
