/* json.h: a small, bounded JSON (RFC 8259) DOM parser for untrusted input such as safetensors
 * headers and config files. It is strict (no comments, no trailing commas, no NaN/Infinity,
 * no duplicate keys) and never reads past the given length. It is not a streaming parser, not a
 * writer, and not meant for very large documents: every value becomes a heap node. */
#ifndef VT_JSON_H
#define VT_JSON_H

#include <stddef.h>

#include "status.h"

#define VT_JSON_MAX_DEPTH 64 /* arrays/objects nested deeper than this are rejected */

typedef enum {
    VT_JSON_NULL,
    VT_JSON_BOOL,
    VT_JSON_NUMBER,
    VT_JSON_STRING,
    VT_JSON_ARRAY,
    VT_JSON_OBJECT
} vt_json_type;

typedef struct vt_json {
    vt_json_type type;
    int boolean;       /* BOOL */
    double number;     /* NUMBER: strtod value of the exact token, locale-independent, finite */
    int is_integer;    /* NUMBER: token has no fraction/exponent and fits in long long */
    long long integer; /* NUMBER: the exact value when is_integer */
    char *str;
    size_t len;            /* STRING: decoded UTF-8, NUL-terminated (\u0000 is rejected) */
    size_t n;              /* ARRAY/OBJECT: number of items */
    struct vt_json *items; /* ARRAY elements or OBJECT values */
    char **keys;           /* OBJECT keys (decoded, NUL-terminated), keys[i] belongs to items[i] */
} vt_json;

/* Parses text[0..len) (need not be NUL-terminated). On success *out owns a tree to release with
 * vt_json_free. Errors: VT_ERR_FORMAT (message has the byte offset), VT_ERR_NOMEM, VT_ERR_ARG. */
vt_status vt_json_parse(const char *text, size_t len, vt_json **out);
/* The same, for the JSON of a named field of a file (e.g. "train_config"): its errors name the
 * field instead of a byte offset -- "train_config.lr appears twice", "call is not JSON (unexpected
 * end of input)". */
vt_status vt_json_parse_field(const char *text, size_t len, const char *field, vt_json **out);
void vt_json_free(vt_json *v); /* NULL-safe */
/* Value of `key` in an object; NULL if obj is NULL, not an object, or has no such key. */
const vt_json *vt_json_get(const vt_json *obj, const char *key);
/* 1 if s[0..len) is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF), else 0. */
int vt_json_utf8_valid(const char *s, size_t len);

#endif
