/* json.c: strict, bounded JSON DOM parser for untrusted bytes (see json.h).
 * Not a writer, not streaming, no extensions. Every read is bounds-checked against `len`, nesting is
 * capped at VT_JSON_MAX_DEPTH so recursion is bounded, and every failure is reported through
 * vt_fail with the byte offset. */
#include "json.h"
#include "status.h"

#include <assert.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const unsigned char *s;
    size_t len;
    size_t pos;
    char path[256]; /* where the parser is: "encoder.img_size", "betas[1]" (cut short when longer) */
    size_t plen;
} jparser;

/* what the last failure was, without its offset: vt_json_parse_field names the field instead */
static struct {
    char what[96];
    char dup[464];
} jlast;

static int jerr(const jparser *p, const char *what) {
    snprintf(jlast.what, sizeof jlast.what, "%s", what);
    jlast.dup[0] = 0;
    return vt_fail(VT_ERR_FORMAT, "json: %s at byte %zu", what, p->pos);
}

/* the path one level down: ".key" (or "key" at the top) or "[i]"; returns the length to restore */
static size_t path_push(jparser *p, const char *key, size_t index) {
    size_t old = p->plen, room = sizeof p->path - old;
    int n = key ? snprintf(p->path + old, room, "%s%s", old ? "." : "", key)
                : snprintf(p->path + old, room, "[%zu]", index);
    p->plen = n < 0 || (size_t)n >= room ? sizeof p->path - 1 : old + (size_t)n;
    return old;
}
static void path_pop(jparser *p, size_t old) {
    p->plen = old;
    p->path[old] = 0;
}

static int jnomem(size_t bytes) {
    return vt_fail(VT_ERR_NOMEM, "json: out of memory allocating %zu bytes", bytes);
}

/* Length of the well-formed UTF-8 sequence starting at s (avail > 0 bytes left), 0 if malformed.
 * Follows the RFC 3629 table, so overlongs, surrogates and > U+10FFFF are rejected. */
static size_t utf8_seq(const unsigned char *s, size_t avail) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0; /* stray continuation byte or overlong 2-byte form */
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0xE0) {
        need = 2;
    } else if (c < 0xF0) {
        need = 3;
        if (c == 0xE0) lo = 0xA0; /* overlong */
        if (c == 0xED) hi = 0x9F; /* UTF-16 surrogates */
    } else if (c < 0xF5) {
        need = 4;
        if (c == 0xF0) lo = 0x90; /* overlong */
        if (c == 0xF4) hi = 0x8F; /* > U+10FFFF */
    } else {
        return 0;
    }
    if (avail < need) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < need; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return need;
}

int vt_json_utf8_valid(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    if (!s) return len == 0;
    while (i < len) {
        size_t k = utf8_seq(u + i, len - i);
        if (k == 0) return 0;
        i += k;
    }
    return 1;
}

static void free_contents(vt_json *v) {
    free(v->str);
    for (size_t i = 0; i < v->n; i++) {
        if (v->items) free_contents(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

void vt_json_free(vt_json *v) {
    if (!v) return;
    free_contents(v);
    free(v);
}

const vt_json *vt_json_get(const vt_json *obj, const char *key) {
    if (!obj || obj->type != VT_JSON_OBJECT || !key) return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

static void skip_ws(jparser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at s[at..at+4); returns the value or -1. */
static long hex4(const jparser *p, size_t at) {
    if (at > p->len || p->len - at < 4) return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[at + i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static size_t utf8_put(unsigned char *o, unsigned long cp) {
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* p->s[p->pos] is the opening quote. On success *out is a malloc'd, NUL-terminated decoded copy.
 * On failure nothing is allocated. */
static int parse_string(jparser *p, char **out, size_t *out_len) {
    size_t start = p->pos;
    p->pos++; /* opening quote */
    /* Pre-scan for the closing quote to size the buffer: decoding never grows the text
     * (\uXXXX = 6 bytes -> at most 3, a surrogate pair = 12 -> 4, raw UTF-8 is copied). */
    size_t i = p->pos;
    while (i < p->len && p->s[i] != '"') i += (p->s[i] == '\\') ? 2 : 1;
    if (i >= p->len) {
        p->pos = start;
        return jerr(p, "unterminated string");
    }
    size_t cap = i - p->pos + 1;
    unsigned char *o = malloc(cap);
    if (!o) return jnomem(cap);
    size_t n = 0;
    int rc = VT_OK;
    for (;;) {
        if (p->pos >= p->len) {
            rc = jerr(p, "unterminated string");
            break;
        }
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            rc = vt_fail(VT_ERR_FORMAT, "json: control character 0x%02x in string at byte %zu", c, p->pos);
            break;
        }
        if (c >= 0x80) {
            size_t k = utf8_seq(p->s + p->pos, p->len - p->pos);
            if (k == 0) {
                rc = jerr(p, "invalid UTF-8 in string");
                break;
            }
            memcpy(o + n, p->s + p->pos, k);
            n += k;
            p->pos += k;
            continue;
        }
        if (c != '\\') {
            o[n++] = c;
            p->pos++;
            continue;
        }
        if (p->pos + 1 >= p->len) {
            rc = jerr(p, "unterminated escape");
            break;
        }
        unsigned char e = p->s[p->pos + 1];
        unsigned char simple = 0;
        switch (e) {
            case '"': simple = '"'; break;
            case '\\': simple = '\\'; break;
            case '/': simple = '/'; break;
            case 'b': simple = '\b'; break;
            case 'f': simple = '\f'; break;
            case 'n': simple = '\n'; break;
            case 'r': simple = '\r'; break;
            case 't': simple = '\t'; break;
            case 'u': break;
            default: rc = jerr(p, "invalid escape"); break;
        }
        if (rc) break;
        if (simple) {
            o[n++] = simple;
            p->pos += 2;
            continue;
        }
        long cp = hex4(p, p->pos + 2);
        if (cp < 0) {
            rc = jerr(p, "invalid \\u escape");
            break;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            /* High surrogate: must be followed by an escaped low surrogate. */
            size_t q = p->pos + 6;
            long lo = -1;
            if (q + 1 < p->len && p->s[q] == '\\' && p->s[q + 1] == 'u') lo = hex4(p, q + 2);
            if (lo < 0xDC00 || lo > 0xDFFF) {
                rc = jerr(p, "lone high surrogate in \\u escape");
                break;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p->pos += 12;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            rc = jerr(p, "lone low surrogate in \\u escape");
            break;
        } else {
            /* A decoded NUL would silently truncate C-string keys and names, so refuse it. */
            if (cp == 0) {
                rc = jerr(p, "\\u0000 not allowed in strings");
                break;
            }
            p->pos += 6;
        }
        n += utf8_put(o + n, (unsigned long)cp);
    }
    if (rc) {
        free(o);
        return rc;
    }
    assert(n < cap); /* the output never outgrows its input: a bug if it did */
    o[n] = 0;
    *out = (char *)o;
    *out_len = n;
    return VT_OK;
}

/* Converts a validated JSON number token with strtod, replacing '.' by the locale's decimal point
 * so that the result does not depend on setlocale() calls made by the host program. */
static int number_value(jparser *p, size_t start, size_t end, double *out) {
    const char *dp = localeconv()->decimal_point;
    size_t dpl = (dp && dp[0]) ? strlen(dp) : 1;
    if (!dp || !dp[0]) dp = ".";
    size_t tl = end - start;
    if (tl > (SIZE_MAX - 1) / dpl) return jnomem(SIZE_MAX);
    size_t need = tl * dpl + 1;
    char stackbuf[128];
    char *buf = need <= sizeof stackbuf ? stackbuf : malloc(need);
    if (!buf) return jnomem(need);
    size_t k = 0;
    for (size_t i = start; i < end; i++) {
        if (p->s[i] == '.') {
            memcpy(buf + k, dp, dpl);
            k += dpl;
        } else
            buf[k++] = (char)p->s[i];
    }
    buf[k] = 0;
    char *endp = NULL;
    double d = strtod(buf, &endp);
    int consumed = (endp == buf + k);
    if (buf != stackbuf) free(buf);
    if (!consumed) return jerr(p, "number not understood by strtod");
    if (isinf(d)) {
        size_t save = p->pos;
        p->pos = start;
        int rc = jerr(p, "number out of double range");
        p->pos = save;
        return rc;
    }
    *out = d;
    return VT_OK;
}

static int isdigit_(unsigned char c) { return c >= '0' && c <= '9'; }

static int parse_number(jparser *p, vt_json *v) {
    size_t start = p->pos;
    int neg = 0;
    if (p->s[p->pos] == '-') {
        neg = 1;
        p->pos++;
    }
    if (p->pos >= p->len || !isdigit_(p->s[p->pos])) return jerr(p, "invalid number");
    size_t int_start = p->pos;
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->len && isdigit_(p->s[p->pos])) return jerr(p, "leading zero in number");
    } else {
        while (p->pos < p->len && isdigit_(p->s[p->pos])) p->pos++;
    }
    size_t int_end = p->pos;
    int is_int = 1;
    if (p->pos < p->len && p->s[p->pos] == '.') {
        is_int = 0;
        p->pos++;
        if (p->pos >= p->len || !isdigit_(p->s[p->pos])) return jerr(p, "expected digit after '.'");
        while (p->pos < p->len && isdigit_(p->s[p->pos])) p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        is_int = 0;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || !isdigit_(p->s[p->pos])) return jerr(p, "expected digit in exponent");
        while (p->pos < p->len && isdigit_(p->s[p->pos])) p->pos++;
    }
    v->type = VT_JSON_NUMBER;
    if (is_int) {
        /* Exact int64 when it fits; the limit for negatives is one larger (LLONG_MIN). */
        unsigned long long limit = neg ? (unsigned long long)LLONG_MAX + 1u : (unsigned long long)LLONG_MAX;
        unsigned long long mag = 0;
        int fits = 1;
        for (size_t i = int_start; i < int_end; i++) {
            unsigned d = (unsigned)(p->s[i] - '0');
            if (mag > (limit - d) / 10) {
                fits = 0;
                break;
            }
            mag = mag * 10 + d;
        }
        if (fits) {
            v->is_integer = 1;
            if (!neg)
                v->integer = (long long)mag;
            else if (mag == (unsigned long long)LLONG_MAX + 1u)
                v->integer = LLONG_MIN;
            else
                v->integer = -(long long)mag;
            /* int64 -> double conversion rounds correctly, matching strtod; keep -0 as -0.0. */
            v->number = (neg && mag == 0) ? -0.0 : (double)v->integer;
            return VT_OK;
        }
    }
    return number_value(p, start, p->pos, &v->number);
}

static int parse_value(jparser *p, vt_json *v, int depth);

/* Grows items (and keys, for objects) to hold at least n+1 entries. */
static int grow(vt_json *v, size_t *cap, int with_keys) {
    if (v->n < *cap) return VT_OK;
    size_t nc = *cap ? *cap * 2 : 4;
    if (nc > SIZE_MAX / sizeof(vt_json)) return jnomem(SIZE_MAX);
    vt_json *it = realloc(v->items, nc * sizeof(vt_json));
    if (!it) return jnomem(nc * sizeof(vt_json));
    v->items = it;
    if (with_keys) {
        char **ks = realloc(v->keys, nc * sizeof(char *));
        if (!ks) return jnomem(nc * sizeof(char *));
        v->keys = ks;
    }
    *cap = nc;
    return VT_OK;
}

static int parse_array(jparser *p, vt_json *v, int depth) {
    if (depth > VT_JSON_MAX_DEPTH) return jerr(p, "nesting deeper than 64 levels");
    v->type = VT_JSON_ARRAY;
    size_t cap = 0;
    p->pos++; /* '[' */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        return VT_OK;
    }
    for (;;) {
        skip_ws(p);
        vt_json child;
        memset(&child, 0, sizeof child);
        size_t at = path_push(p, NULL, v->n);
        int rc = parse_value(p, &child, depth);
        path_pop(p, at);
        if (!rc) rc = grow(v, &cap, 0);
        if (rc) {
            free_contents(&child);
            return rc;
        }
        v->items[v->n++] = child;
        skip_ws(p);
        if (p->pos >= p->len) return jerr(p, "unexpected end of input in array");
        unsigned char c = p->s[p->pos++];
        if (c == ']') return VT_OK;
        if (c != ',') {
            p->pos--;
            return jerr(p, "expected ',' or ']'");
        }
    }
}

typedef struct {
    const char *key;
    size_t off;
} keyref;

static int keyref_cmp(const void *a, const void *b) {
    const keyref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return (x->off > y->off) - (x->off < y->off);
}

/* a key of the object at p->path met twice: the message, and its path for vt_json_parse_field */
static int dup_key(const jparser *p, const char *key, size_t off) {
    snprintf(jlast.dup, sizeof jlast.dup, "%s%s%.200s", p->path, p->plen ? "." : "", key);
    return vt_fail(VT_ERR_FORMAT, "json: duplicate key \"%.200s\" at byte %zu", key, off);
}

/* Rejects duplicate keys. Sorting keeps this O(n log n) even for hostile objects with many keys. */
static int check_duplicates(const jparser *p, const vt_json *v, const size_t *koff) {
    if (v->n < 2) return VT_OK;
    if (v->n <= 8) {
        for (size_t j = 1; j < v->n; j++)
            for (size_t i = 0; i < j; i++)
                if (strcmp(v->keys[i], v->keys[j]) == 0) return dup_key(p, v->keys[j], koff[j]);
        return VT_OK;
    }
    keyref *r =
        malloc(v->n * sizeof(keyref)); /* n * 16 cannot overflow: items already hold n * sizeof(vt_json) */
    if (!r) return jnomem(v->n * sizeof(keyref));
    for (size_t i = 0; i < v->n; i++) {
        r[i].key = v->keys[i];
        r[i].off = koff[i];
    }
    qsort(r, v->n, sizeof(keyref), keyref_cmp);
    int rc = VT_OK;
    for (size_t i = 1; i < v->n; i++)
        if (strcmp(r[i - 1].key, r[i].key) == 0) {
            rc = dup_key(p, r[i].key, r[i].off);
            break;
        }
    free(r);
    return rc;
}

static int parse_object(jparser *p, vt_json *v, int depth) {
    if (depth > VT_JSON_MAX_DEPTH) return jerr(p, "nesting deeper than 64 levels");
    v->type = VT_JSON_OBJECT;
    size_t cap = 0, koff_cap = 0;
    size_t *koff = NULL; /* byte offset of each key, for the duplicate-key message */
    int rc = VT_OK;
    p->pos++; /* '{' */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        return VT_OK;
    }
    for (;;) {
        skip_ws(p);
        if (p->pos >= p->len) {
            rc = jerr(p, "unexpected end of input in object");
            goto done;
        }
        if (p->s[p->pos] != '"') {
            rc = jerr(p, "expected string key");
            goto done;
        }
        size_t key_off = p->pos;
        char *key = NULL;
        size_t key_len = 0;
        rc = parse_string(p, &key, &key_len);
        if (rc) goto done;
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':') {
            free(key);
            rc = jerr(p, "expected ':' after object key");
            goto done;
        }
        p->pos++;
        skip_ws(p);
        vt_json child;
        memset(&child, 0, sizeof child);
        size_t at = path_push(p, key, 0);
        rc = parse_value(p, &child, depth);
        path_pop(p, at);
        if (!rc) rc = grow(v, &cap, 1);
        if (!rc && koff_cap < cap) {
            size_t *k2 = realloc(koff, cap * sizeof(size_t));
            if (!k2)
                rc = jnomem(cap * sizeof(size_t));
            else {
                koff = k2;
                koff_cap = cap;
            }
        }
        if (rc) {
            free(key);
            free_contents(&child);
            goto done;
        }
        v->keys[v->n] = key;
        v->items[v->n] = child;
        koff[v->n] = key_off;
        v->n++;
        skip_ws(p);
        if (p->pos >= p->len) {
            rc = jerr(p, "unexpected end of input in object");
            goto done;
        }
        unsigned char c = p->s[p->pos++];
        if (c == '}') break;
        if (c != ',') {
            p->pos--;
            rc = jerr(p, "expected ',' or '}'");
            goto done;
        }
    }
    rc = check_duplicates(p, v, koff);
done:
    free(koff);
    return rc;
}

static int parse_literal(jparser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return jerr(p, "invalid literal");
    p->pos += n;
    return VT_OK;
}

/* On failure *v may hold partially built children; the caller releases them with free_contents. */
static int parse_value(jparser *p, vt_json *v, int depth) {
    if (p->pos >= p->len) return jerr(p, "unexpected end of input");
    unsigned char c = p->s[p->pos];
    switch (c) {
        case '{': return parse_object(p, v, depth + 1);
        case '[': return parse_array(p, v, depth + 1);
        case '"': v->type = VT_JSON_STRING; return parse_string(p, &v->str, &v->len);
        case 't':
            v->type = VT_JSON_BOOL;
            v->boolean = 1;
            return parse_literal(p, "true");
        case 'f':
            v->type = VT_JSON_BOOL;
            v->boolean = 0;
            return parse_literal(p, "false");
        case 'n': v->type = VT_JSON_NULL; return parse_literal(p, "null");
        default: break;
    }
    if (c == '-' || isdigit_(c)) return parse_number(p, v);
    if (c == 0) return jerr(p, "NUL byte");
    char what[40];
    if (c >= 0x20 && c < 0x7F)
        snprintf(what, sizeof what, "unexpected character '%c'", c);
    else
        snprintf(what, sizeof what, "unexpected byte 0x%02x", c);
    return jerr(p, what);
}

vt_status vt_json_parse(const char *text, size_t len, vt_json **out) {
    if (!out) return vt_fail(VT_ERR_ARG, "json: out is NULL");
    *out = NULL;
    if (!text && len) return vt_fail(VT_ERR_ARG, "json: text is NULL");
    jparser p = { (const unsigned char *)text, len, 0, { 0 }, 0 };
    skip_ws(&p);
    if (p.pos >= p.len) return jerr(&p, "empty input");
    vt_json *root = calloc(1, sizeof(vt_json));
    if (!root) return jnomem(sizeof(vt_json));
    int rc = parse_value(&p, root, 0);
    if (!rc) {
        skip_ws(&p);
        if (p.pos < p.len)
            rc = p.s[p.pos] == 0 ? jerr(&p, "NUL byte after JSON value")
                                 : jerr(&p, "trailing characters after JSON value");
    }
    if (rc) {
        vt_json_free(root);
        return rc;
    }
    *out = root;
    return VT_OK;
}

vt_status vt_json_parse_field(const char *text, size_t len, const char *field, vt_json **out) {
    jlast.what[0] = jlast.dup[0] = 0;
    int rc = vt_json_parse(text, len, out);
    if (rc != VT_ERR_FORMAT) return rc;
    if (jlast.dup[0])
        return vt_fail(rc, "%s%s%s appears twice", field, jlast.dup[0] == '[' ? "" : ".", jlast.dup);
    char what[160]; /* failures without a jerr (strings, numbers): their message, less its offset */
    const char *m = vt_last_error(), *at = strstr(m, " at byte ");
    if (!strncmp(m, "json: ", 6)) m += 6;
    if (jlast.what[0])
        snprintf(what, sizeof what, "%s", jlast.what);
    else
        snprintf(what, sizeof what, "%.*s", (int)(at && at > m ? (size_t)(at - m) : strlen(m)), m);
    return vt_fail(rc, "%s is not JSON (%s)", field, what);
}
