/* test_safetensors.c: standalone tests for src/json.c and src/safetensors.c (no test framework).
 * Prints one line per check and ends with "N passed, M failed"; exits non-zero on any failure.
 * Not a benchmark. The fuzz loops only prove "no crash / no out-of-bounds access" when the program
 * is built with sanitizers, and every input is copied into an exact-size heap buffer (no NUL, no
 * slack) so that ASan sees any read past `len`. Build and run:
 *   cd /work/main && gcc -std=c11 -Wall -Wextra -Werror -g -fsanitize=address,undefined \
 *       -Isrc src/status.c src/json.c src/safetensors.c tests/test_safetensors.c -lm -o /tmp/tst && /tmp/tst
 */
#include "json.h"
#include "safetensors.h"
#include "status.h"

#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;

static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok)
        n_pass++;
    else
        n_fail++;
}

/* Checks a failure status and that the message mentions needle1 and needle2 (either may be NULL). */
static void expect_err(int rc, int want, const char *needle1, const char *needle2, const char *what) {
    const char *msg = vt_last_error();
    int ok = rc == want && (!needle1 || strstr(msg, needle1)) && (!needle2 || strstr(msg, needle2));
    check(ok, "%s -> %s (rc %d): %s", what, vt_status_name(want), rc, msg);
}

static void expect_ok(int rc, const char *what) {
    check(rc == VT_OK, "%s (%s)", what, rc ? vt_last_error() : "ok");
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory\n");
        exit(2);
    }
    return p;
}


/* ----------------------------------------------------------------------------------------------
 * JSON */

/* Parses a copy of s[0..len) held in an exact-size heap buffer, so ASan catches over-reads. */
static int jparse(const char *s, size_t len, vt_json **out) {
    char *b = xmalloc(len);
    memcpy(b, s, len);
    int rc = vt_json_parse(b, len, out);
    free(b);
    return rc;
}

static int jparse_s(const char *s, vt_json **out) { return jparse(s, strlen(s), out); }

static void json_ok(const char *s, const char *what) {
    vt_json *v = NULL;
    int rc = jparse_s(s, &v);
    check(rc == VT_OK && v, "json accepts %s (%s)", what, rc ? vt_last_error() : "ok");
    vt_json_free(v);
}

static void json_bad(const char *s, size_t len, const char *needle, const char *what) {
    vt_json *v = NULL;
    int rc = jparse(s, len, &v);
    expect_err(rc, VT_ERR_FORMAT, needle, NULL, what);
    check(v == NULL, "json leaves out NULL on failure (%s)", what);
}

static void json_string_is(const char *s, const char *want, size_t want_len, const char *what) {
    vt_json *v = NULL;
    int rc = jparse_s(s, &v);
    int ok = rc == VT_OK && v->type == VT_JSON_STRING && v->len == want_len &&
             memcmp(v->str, want, want_len) == 0 && v->str[want_len] == 0;
    check(ok, "json string %s", what);
    vt_json_free(v);
}

static char *nested(int depth, char open, char close, const char *inner) {
    size_t il = strlen(inner);
    char *s = xmalloc(2 * (size_t)depth + il + 1);
    for (int i = 0; i < depth; i++) s[i] = open;
    memcpy(s + depth, inner, il);
    for (int i = 0; i < depth; i++) s[depth + il + i] = close;
    s[2 * depth + il] = 0;
    return s;
}

static void test_json(void) {
    vt_json *v = NULL;

    /* structure + get */
    int rc = jparse_s(" {\"a\": [1, \"x\", true, false, null, {}], \"b\": {\"c\": -2}} \n", &v);
    int ok = rc == VT_OK && v->type == VT_JSON_OBJECT && v->n == 2;
    const vt_json *a = vt_json_get(v, "a");
    ok = ok && a && a->type == VT_JSON_ARRAY && a->n == 6 && a->items[0].is_integer &&
         a->items[0].integer == 1 && a->items[1].type == VT_JSON_STRING &&
         strcmp(a->items[1].str, "x") == 0 && a->items[2].type == VT_JSON_BOOL && a->items[2].boolean == 1 &&
         a->items[3].boolean == 0 && a->items[4].type == VT_JSON_NULL && a->items[5].type == VT_JSON_OBJECT &&
         a->items[5].n == 0;
    const vt_json *c = vt_json_get(vt_json_get(v, "b"), "c");
    ok = ok && c && c->integer == -2 && vt_json_get(v, "zz") == NULL && vt_json_get(a, "a") == NULL &&
         vt_json_get(NULL, "a") == NULL;
    check(ok, "json nested structure and vt_json_get");
    vt_json_free(v);
    vt_json_free(NULL);
    check(1, "json vt_json_free(NULL) is a no-op");

    /* strings */
    json_string_is("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t", 8, "simple escapes");
    json_string_is("\"\\u00e9\\u20AC\"", "\xC3\xA9\xE2\x82\xAC", 5, "\\u00e9 \\u20AC -> UTF-8");
    json_string_is("\"\\uD83D\\uDE00\"", "\xF0\x9F\x98\x80", 4, "surrogate pair -> U+1F600");
    json_string_is("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"", "caf\xC3\xA9 \xF0\x9F\x98\x80", 10,
                   "raw UTF-8 passes through");
    json_string_is("\"\"", "", 0, "empty");
    json_bad("\"\\uD83D\"", 8, "lone high surrogate", "lone high surrogate");
    json_bad("\"\\uD83D\\u0041\"", 14, "lone high surrogate", "high surrogate + non-low");
    json_bad("\"\\uDE00\"", 8, "lone low surrogate", "lone low surrogate");
    json_bad("\"\\u0000\"", 8, "\\u0000", "\\u0000 in string");
    json_bad("\"\\x41\"", 6, "invalid escape", "invalid escape \\x");
    json_bad("\"\\u12G4\"", 8, "invalid \\u", "bad hex in \\u");
    json_bad("\"a\nb\"", 5, "control character 0x0a", "raw newline in string");
    json_bad("\"a\0b\"", 5, "control character 0x00", "NUL byte in string");
    json_bad("\"\xC0\xAF\"", 4, "UTF-8", "overlong UTF-8");
    json_bad("\"\xED\xA0\x80\"", 5, "UTF-8", "UTF-8 encoded surrogate");
    json_bad("\"\xFF\"", 3, "UTF-8", "0xFF byte");
    json_bad("\"\xE2\x82\"", 4, "UTF-8", "truncated UTF-8 sequence");
    json_bad("\"abc", 4, "unterminated string", "unterminated string");
    json_bad("\"ab\\", 4, "unterminated", "string ending in backslash");
    json_bad("\"\\u12", 5, NULL, "truncated \\u escape");

    /* numbers */
    rc = jparse_s(
        "[0, -0, 123, -123, 9223372036854775807, -9223372036854775808, 9223372036854775808, 1.5, 1e3, "
        "1E-2, 0.1, 1e-400, 2.5e+1]",
        &v);
    ok = rc == VT_OK && v->n == 13;
    if (ok) {
        vt_json *it = v->items;
        ok = it[0].is_integer && it[0].integer == 0 && it[0].number == 0.0 && !signbit(it[0].number) &&
             it[1].is_integer && it[1].integer == 0 && signbit(it[1].number) && it[2].integer == 123 &&
             it[2].number == 123.0 && it[3].integer == -123 && it[4].is_integer &&
             it[4].integer == INT64_MAX && it[5].is_integer && it[5].integer == INT64_MIN &&
             !it[6].is_integer && it[6].number == 9223372036854775808.0 && !it[7].is_integer &&
             it[7].number == 1.5 && !it[8].is_integer && it[8].number == 1000.0 && it[9].number == 0.01 &&
             it[10].number == 0.1 && it[11].number == 0.0 && it[12].number == 25.0;
    }
    check(ok, "json numbers: ints, int64 limits, overflow to double, fractions, exponents, underflow");
    vt_json_free(v);
    json_bad("01", 2, "leading zero", "leading zero 01");
    json_bad("-01", 3, "leading zero", "leading zero -01");
    json_bad("[00]", 4, "leading zero", "leading zero 00");
    json_bad("1.", 2, "digit after '.'", "1.");
    json_bad(".5", 2, "unexpected character '.'", ".5");
    json_bad("+1", 2, "unexpected character '+'", "+1");
    json_bad("-", 1, "invalid number", "lone minus");
    json_bad("1e", 2, "exponent", "1e");
    json_bad("1e+", 3, "exponent", "1e+");
    json_bad("1e400", 5, "out of double range", "1e400 overflows double");
    json_bad("-1e400", 6, "out of double range", "-1e400 overflows double");
    json_bad("NaN", 3, NULL, "NaN literal");
    json_bad("Infinity", 8, NULL, "Infinity literal");

    /* locale independence: a comma-decimal locale must not change "1.5" */
    const char *locs[] = { "de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8",
                           "de_DE",       "fr_FR",      "C.UTF-8" };
    const char *got = NULL;
    for (size_t i = 0; i < sizeof locs / sizeof locs[0] && !got; i++)
        if (setlocale(LC_NUMERIC, locs[i]) && strcmp(localeconv()->decimal_point, ",") == 0) got = locs[i];
    rc = jparse_s("[1.5, 2.25e1]", &v);
    ok = rc == VT_OK && v->items[0].number == 1.5 && v->items[1].number == 22.5;
    check(ok, "json numbers are locale-independent (LC_NUMERIC=%s)",
          got ? got : "C; no comma-decimal locale installed");
    vt_json_free(v);
    setlocale(LC_NUMERIC, "C");

    /* depth limit */
    char *s = nested(64, '[', ']', "1");
    json_ok(s, "64 nested arrays");
    free(s);
    s = nested(65, '[', ']', "1");
    json_bad(s, strlen(s), "nesting deeper than 64", "65 nested arrays");
    free(s);
    for (int depth = 64; depth <= 65; depth++) {
        s = xmalloc((size_t)depth * 6 + 2);
        size_t k = 0;
        for (int i = 0; i < depth; i++) k += (size_t)sprintf(s + k, "{\"a\":");
        k += (size_t)sprintf(s + k, "1");
        for (int i = 0; i < depth; i++) s[k++] = '}';
        s[k] = 0;
        if (depth == 64)
            json_ok(s, "64 nested objects");
        else
            json_bad(s, k, "nesting deeper than 64", "65 nested objects");
        free(s);
    }
    s = nested(200000, '[', ']', "");
    json_bad(s, strlen(s), "nesting deeper than 64", "200000 nested arrays (no stack overflow)");
    free(s);

    /* syntax and trailing garbage */
    json_ok("  {}  \n", "surrounding whitespace");
    json_ok("\"top-level string\"", "top-level scalar");
    json_bad("", 0, "empty input", "empty input");
    json_bad("  \n ", 4, "empty input", "whitespace only");
    json_bad("{} x", 4, "trailing characters after JSON value at byte 3",
             "trailing garbage (with byte offset)");
    json_bad("1 2", 3, "trailing", "two top-level values");
    json_bad("{}\0", 3, "NUL byte", "NUL after value");
    json_bad("[1,\0]", 5, "NUL byte", "NUL inside array");
    json_bad("[1,]", 4, "unexpected character ']'", "trailing comma in array");
    json_bad("{\"a\":1,}", 8, "expected string key", "trailing comma in object");
    json_bad("[1 2]", 5, "expected ',' or ']'", "missing comma");
    json_bad("[1,2,x]", 7, "at byte 5", "error names byte offset 5");
    json_bad("{\"a\" 1}", 7, "expected ':'", "missing colon");
    json_bad("{1:2}", 5, "expected string key", "non-string key");
    json_bad("tru", 3, "invalid literal", "truncated true");
    json_bad("nul", 3, "invalid literal", "truncated null");
    json_bad("[1,2", 4, "end of input", "unterminated array");
    json_bad("{\"a\":1", 6, "end of input", "unterminated object");
    json_bad("{\"a\"", 4, "expected ':'", "object ends after key");
    json_bad("\xEF\xBB\xBF{}", 5, "unexpected byte 0xef", "UTF-8 BOM");
    /* Input is not NUL-terminated: the parse must stop at len even if more text follows. */
    json_bad("[1,2]", 3, "end of input", "len cuts array short");

    /* duplicate keys: small (pairwise) and large (sorted) objects */
    json_bad("{\"a\":1,\"a\":2}", 13, "duplicate key \"a\" at byte 7", "duplicate key (small object)");
    char big[4096];
    size_t k = (size_t)sprintf(big, "{");
    for (int i = 0; i < 100; i++) k += (size_t)sprintf(big + k, "%s\"k%d\":%d", i ? "," : "", i, i);
    strcpy(big + k, "}");
    json_ok(big, "100 distinct keys");
    k = (size_t)sprintf(big + k, ",\"k42\":0}");
    json_bad(big, strlen(big), "duplicate key \"k42\"", "duplicate key (large object)");
}

/* ----------------------------------------------------------------------------------------------
 * safetensors */

/* Builds 8-byte length + header + data in an exact-size heap buffer; hl_override != 0 lies. */
static unsigned char *mkfile_n(const char *header, size_t hl, unsigned long long hl_override,
                               const void *data, size_t dlen, size_t *len) {
    *len = 8 + hl + dlen;
    unsigned char *b = xmalloc(*len);
    unsigned long long h = hl_override ? hl_override : hl;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(h >> (8 * i));
    memcpy(b + 8, header, hl);
    if (dlen) memcpy(b + 8 + hl, data, dlen);
    return b;
}

static unsigned char *mkfile(const char *header, unsigned long long hl_override, const void *data,
                             size_t dlen, size_t *len) {
    return mkfile_n(header, strlen(header), hl_override, data, dlen, len);
}

static int st_try_n(const char *header, size_t hl, const void *data, size_t dlen) {
    size_t len;
    unsigned char *b = mkfile_n(header, hl, 0, data, dlen, &len);
    vt_st_file f;
    int rc = vt_st_parse(b, len, &f);
    int zeroed = f.n == 0 && f.tensors == NULL && f.n_meta == 0 && f.meta_keys == NULL;
    if (rc && !zeroed) {
        printf("FAIL - vt_st_parse left a non-empty file after an error\n");
        n_fail++;
    }
    vt_st_free(&f);
    free(b);
    return rc;
}

static int st_try(const char *header, const void *data, size_t dlen) {
    return st_try_n(header, strlen(header), data, dlen);
}

static void test_roundtrip(void) {
    float w[6] = { 1.0f, -2.5f, 0.0f, -0.0f, INFINITY, FLT_MIN / 4 };
    uint32_t nan_bits = 0x7FC01234u; /* NaN with a payload must survive bit-exactly */
    memcpy(&w[2], &nan_bits, 4);
    long long idx[4] = { INT64_MIN, -1, 0, INT64_MAX };
    unsigned char mask[3] = { 1, 0, 1 };
    float scalar = 3.25f;
    long long sh_w[2] = { 2, 3 }, sh_idx[1] = { 4 }, sh_mask[1] = { 3 }, sh_empty[2] = { 0, 5 };
    vt_st_entry e[] = {
        { "w", VT_DT_F32, 2, sh_w, w },
        { "idx", VT_DT_I64, 1, sh_idx, idx },
        { "mask", VT_DT_BOOL, 1, sh_mask, mask },
        { "scalar", VT_DT_F32, 0, NULL, &scalar },
        { "empty \"quoted\" \xC3\xA9", VT_DT_F32, 2, sh_empty, NULL },
    };
    const char *mk[] = { "format", "note" };
    const char *mv[] = { "pt", "quote \" backslash \\ newline \n tab \t caf\xC3\xA9" };
    unsigned char *buf = NULL;
    size_t len = 0;
    int rc = vt_st_write(e, 5, mk, mv, 2, &buf, &len);
    check(rc == VT_OK, "write 5 tensors + metadata (%s)", rc ? vt_last_error() : "ok");
    if (rc) return;
    unsigned long long hl = 0;
    for (int i = 0; i < 8; i++) hl |= (unsigned long long)buf[i] << (8 * i);
    check(hl % 8 == 0 && len == 8 + hl + 24 + 32 + 3 + 4,
          "header length %llu is a multiple of 8, file is %zu bytes", hl, len);
    check(memcmp(buf + 8, "{\"__metadata__\":", 16) == 0, "__metadata__ is written first");

    /* Parse from an odd address so every multi-byte load is unaligned. */
    unsigned char *odd = xmalloc(len + 1);
    memcpy(odd + 1, buf, len);
    vt_st_file f;
    rc = vt_st_parse(odd + 1, len, &f);
    check(rc == VT_OK && f.n == 5 && f.n_meta == 2, "parse round-trip (%s)", rc ? vt_last_error() : "ok");
    if (rc) {
        free(buf);
        free(odd);
        return;
    }
    int order = 1;
    for (int i = 0; i < 5; i++) order = order && strcmp(f.tensors[i].name, e[i].name) == 0;
    check(order, "tensors kept in header order");
    const vt_st_tensor *tw = vt_st_find(&f, "w");
    check(tw && tw->dtype == VT_DT_F32 && tw->ndim == 2 && tw->shape[0] == 2 && tw->shape[1] == 3 &&
              tw->numel == 6 && tw->nbytes == 24 && memcmp(tw->data, w, 24) == 0,
          "F32 tensor w: dtype, shape, bytes identical");
    float wf[6];
    rc = vt_st_to_f32(tw, wf);
    check(rc == VT_OK && memcmp(wf, w, 24) == 0,
          "F32 -> f32 bitwise identical (incl. -0, inf, nan payload, subnormal)");
    const vt_st_tensor *ti = vt_st_find(&f, "idx");
    long long iv[4];
    rc = ti ? vt_st_to_i64(ti, iv) : -1;
    check(rc == VT_OK && ti->dtype == VT_DT_I64 && memcmp(ti->data, idx, 32) == 0 && iv[0] == INT64_MIN &&
              iv[1] == -1 && iv[2] == 0 && iv[3] == INT64_MAX,
          "I64 tensor idx bitwise and via to_i64 (INT64_MIN..INT64_MAX)");
    const vt_st_tensor *tm = vt_st_find(&f, "mask");
    long long mv64[3];
    rc = tm ? vt_st_to_i64(tm, mv64) : -1;
    check(rc == VT_OK && tm->dtype == VT_DT_BOOL && memcmp(tm->data, mask, 3) == 0 && mv64[0] == 1 &&
              mv64[1] == 0 && mv64[2] == 1,
          "BOOL tensor mask bitwise and via to_i64");
    const vt_st_tensor *ts = vt_st_find(&f, "scalar");
    float sv = 0;
    rc = ts ? vt_st_to_f32(ts, &sv) : -1;
    check(rc == VT_OK && ts->ndim == 0 && ts->numel == 1 && sv == 3.25f, "0-dim scalar tensor");
    const vt_st_tensor *te = vt_st_find(&f, "empty \"quoted\" \xC3\xA9");
    check(te && te->numel == 0 && te->nbytes == 0 && te->shape[0] == 0 && te->shape[1] == 5,
          "zero-size tensor with escaped UTF-8 name");
    check(vt_st_find(&f, "nope") == NULL && vt_st_meta(&f, "nope") == NULL,
          "find/meta return NULL when absent");
    check(vt_st_meta(&f, "format") && strcmp(vt_st_meta(&f, "format"), "pt") == 0 && vt_st_meta(&f, "note") &&
              strcmp(vt_st_meta(&f, "note"), mv[1]) == 0,
          "metadata strings round-trip (with escapes)");
    float tmpf[4];
    rc = vt_st_to_f32(ti, tmpf);
    expect_err(rc, VT_ERR_MISMATCH, "\"idx\"", "I64", "to_f32 on I64 tensor");
    rc = vt_st_to_i64(tw, iv);
    expect_err(rc, VT_ERR_MISMATCH, "\"w\"", "F32", "to_i64 on F32 tensor");
    vt_st_free(&f);
    vt_st_free(&f);
    check(f.n == 0 && f.tensors == NULL, "vt_st_free resets and is idempotent");
    vt_st_free(NULL);

    /* the empty file */
    free(buf);
    rc = vt_st_write(NULL, 0, NULL, NULL, 0, &buf, &len);
    rc = rc ? rc : vt_st_parse(buf, len, &f);
    check(rc == VT_OK && len == 16 && f.n == 0 && f.n_meta == 0,
          "empty file (no tensors, no metadata) round-trips");
    vt_st_free(&f);
    free(buf);
    free(odd);
}

/* Writes one tensor of raw little-endian bytes and parses it back. */
static int one_tensor(vt_dtype dt, const void *raw, long long count, unsigned char **buf, vt_st_file *f) {
    long long sh[1] = { count };
    vt_st_entry e = { "t", dt, 1, sh, raw };
    size_t len;
    int rc = vt_st_write(&e, 1, NULL, NULL, 0, buf, &len);
    if (rc) return rc;
    return vt_st_parse(*buf, len, f);
}

static void test_conversions(void) {
    unsigned char *buf = NULL;
    vt_st_file f;
    /* F16, stored little-endian byte by byte */
    uint16_t h[] = { 0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x7C00, 0xFC00, 0x7E00, 0x8000, 0x3555 };
    unsigned char hb[sizeof h];
    for (size_t i = 0; i < sizeof h / 2; i++) {
        hb[2 * i] = (unsigned char)h[i];
        hb[2 * i + 1] = (unsigned char)(h[i] >> 8);
    }
    float out[16];
    int rc = one_tensor(VT_DT_F16, hb, 11, &buf, &f);
    rc = rc ? rc : vt_st_to_f32(&f.tensors[0], out);
    check(rc == VT_OK, "F16 tensor parse + convert (%s)", rc ? vt_last_error() : "ok");
    if (!rc) {
        check(out[0] == 1.0f, "F16 0x3C00 = 1.0 (got %g)", out[0]);
        check(out[1] == -2.5f, "F16 0xC100 = -2.5 (got %g)", out[1]);
        check(out[2] == 65504.0f, "F16 0x7BFF = 65504 (got %g)", out[2]);
        check(out[3] == ldexpf(1.0f, -24), "F16 0x0001 = 2^-24 smallest subnormal (got %g)", out[3]);
        check(out[4] == 1023.0f * ldexpf(1.0f, -24), "F16 0x03FF = largest subnormal (got %g)", out[4]);
        check(out[5] == ldexpf(1.0f, -14), "F16 0x0400 = 2^-14 smallest normal (got %g)", out[5]);
        check(isinf(out[6]) && out[6] > 0, "F16 0x7C00 = +inf");
        check(isinf(out[7]) && out[7] < 0, "F16 0xFC00 = -inf");
        check(isnan(out[8]), "F16 0x7E00 = nan");
        check(out[9] == 0.0f && signbit(out[9]), "F16 0x8000 = -0.0");
        check(out[10] == 0.333251953125f, "F16 0x3555 = 0.333251953125 (got %.12g)", out[10]);
    }
    vt_st_free(&f);
    free(buf);

    uint16_t bf[] = { 0x3F80, 0xC020, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x4049 };
    unsigned char bb[sizeof bf];
    for (size_t i = 0; i < sizeof bf / 2; i++) {
        bb[2 * i] = (unsigned char)bf[i];
        bb[2 * i + 1] = (unsigned char)(bf[i] >> 8);
    }
    rc = one_tensor(VT_DT_BF16, bb, 7, &buf, &f);
    rc = rc ? rc : vt_st_to_f32(&f.tensors[0], out);
    check(rc == VT_OK, "BF16 tensor parse + convert (%s)", rc ? vt_last_error() : "ok");
    if (!rc) {
        check(out[0] == 1.0f, "BF16 0x3F80 = 1.0 (got %g)", out[0]);
        check(out[1] == -2.5f, "BF16 0xC020 = -2.5 (got %g)", out[1]);
        check(isinf(out[2]) && out[2] > 0 && isinf(out[3]) && out[3] < 0, "BF16 0x7F80/0xFF80 = +-inf");
        check(isnan(out[4]), "BF16 0x7FC0 = nan");
        check(out[5] == ldexpf(1.0f, -133), "BF16 0x0001 = 2^-133 subnormal (got %g)", out[5]);
        check(out[6] == 3.140625f, "BF16 0x4049 = 3.140625 (got %g)", out[6]);
    }
    vt_st_free(&f);
    free(buf);

    double dv[] = {
        1.5, -1e300, 1e300, (double)FLT_MAX, 1e-50, 0.1, (double)FLT_MAX + 0x1p102, (double)FLT_MAX + 0x1p103
    };
    rc = one_tensor(VT_DT_F64, dv, 8, &buf, &f);
    rc = rc ? rc : vt_st_to_f32(&f.tensors[0], out);
    check(rc == VT_OK && out[0] == 1.5f && isinf(out[1]) && out[1] < 0 && isinf(out[2]) && out[2] > 0 &&
              out[3] == FLT_MAX && out[4] == 0.0f && out[5] == 0.1f && out[6] == FLT_MAX && isinf(out[7]),
          "F64 -> f32: rounding, overflow to +-inf, FLT_MAX boundary, underflow");
    vt_st_free(&f);
    free(buf);

    long long iv[8];
    int32_t i32[] = { -5, INT32_MIN, INT32_MAX };
    rc = one_tensor(VT_DT_I32, i32, 3, &buf, &f);
    rc = rc ? rc : vt_st_to_i64(&f.tensors[0], iv);
    check(rc == VT_OK && iv[0] == -5 && iv[1] == INT32_MIN && iv[2] == INT32_MAX,
          "I32 -> i64 sign extension");
    vt_st_free(&f);
    free(buf);
    int8_t i8[] = { -128, -1, 127 };
    rc = one_tensor(VT_DT_I8, i8, 3, &buf, &f);
    rc = rc ? rc : vt_st_to_i64(&f.tensors[0], iv);
    check(rc == VT_OK && iv[0] == -128 && iv[1] == -1 && iv[2] == 127, "I8 -> i64 sign extension");
    vt_st_free(&f);
    free(buf);
    uint8_t u8[] = { 0, 200, 255 };
    rc = one_tensor(VT_DT_U8, u8, 3, &buf, &f);
    rc = rc ? rc : vt_st_to_i64(&f.tensors[0], iv);
    check(rc == VT_OK && iv[0] == 0 && iv[1] == 200 && iv[2] == 255, "U8 -> i64");
    rc = vt_st_to_f32(&f.tensors[0], out);
    expect_err(rc, VT_ERR_MISMATCH, "\"t\"", "U8", "to_f32 on U8 tensor");
    vt_st_free(&f);
    free(buf);

    check(vt_dtype_size(VT_DT_BF16) == 2 && vt_dtype_size(VT_DT_I64) == 8 &&
              vt_dtype_size((vt_dtype)99) == 0 && strcmp(vt_dtype_name(VT_DT_BOOL), "BOOL") == 0 &&
              strcmp(vt_dtype_name(VT_DT_BF16), "BF16") == 0,
          "vt_dtype_size / vt_dtype_name");
}

static void test_hostile(void) {
    unsigned char d[64];
    for (int i = 0; i < 64; i++) d[i] = (unsigned char)i;
    size_t len;
    vt_st_file f;
    int rc;

    unsigned char five[5] = { 1, 0, 0, 0, 0 };
    rc = vt_st_parse(five, 5, &f);
    expect_err(rc, VT_ERR_FORMAT, "5 bytes", NULL, "truncated file (5 bytes)");
    rc = vt_st_parse(NULL, 0, &f);
    expect_err(rc, VT_ERR_FORMAT, "0 bytes", NULL, "empty file");

    const char *good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_ok(st_try(good, d, 8), "valid single-tensor file parses");

    unsigned char *b = mkfile("", 0, NULL, 0, &len);
    rc = vt_st_parse(b, len, &f);
    expect_err(rc, VT_ERR_FORMAT, "header length is 0", NULL, "header length 0");
    free(b);
    b = mkfile(good, 200000000ull, d, 8, &len);
    rc = vt_st_parse(b, len, &f);
    expect_err(rc, VT_ERR_FORMAT, "200000000", "limit", "header length 200000000 > 100 MB");
    free(b);
    b = mkfile(good, strlen(good) + 100, d, 8, &len);
    char num[64];
    snprintf(num, sizeof num, "header length %zu exceeds file size %zu", strlen(good) + 100, len);
    rc = vt_st_parse(b, len, &f);
    expect_err(rc, VT_ERR_FORMAT, num, NULL, "lying header length");
    free(b);
    b = mkfile(good, 0xFFFFFFFFFFFFFFFFull, d, 8, &len);
    rc = vt_st_parse(b, len, &f);
    expect_err(rc, VT_ERR_FORMAT, "18446744073709551615", NULL, "header length 2^64-1");
    free(b);
    /* More entries than VT_ST_MAX_TENSORS: refused from a count, before the JSON is parsed (a
     * 20 MB header of 300,000 keys took seconds); exactly the cap (and __metadata__) parses. Keys
     * holding ':', '{' and escaped quotes are one key each. */
    for (int k = 0; k < 2; k++) {
        size_t n = k ? 300000 : VT_ST_MAX_TENSORS, cap = 64 + n * 80, o = 0;
        char *h = xmalloc(cap);
        o += (size_t)snprintf(h + o, cap - o, "{\"__metadata__\":{\"a:{\":\"b\\\":[\"}");
        for (size_t i = 0; i < n; i++)
            o += (size_t)snprintf(h + o, cap - o,
                                  ",\"t:{\\\"%zu\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                                  i);
        o += (size_t)snprintf(h + o, cap - o, "}");
        rc = st_try_n(h, o, d, 0);
        if (k) {
            snprintf(num, sizeof num, "%zu entries in the header", n + 1);
            expect_err(rc, VT_ERR_FORMAT, num, "more than the 65536 tensors read", "300,000 tensors refused");
        } else {
            expect_ok(rc, "VT_ST_MAX_TENSORS tensors and __metadata__ parse");
        }
        free(h);
    }
    /* A valid file cut inside its data section. */
    b = mkfile(good, 0, d, 8, &len);
    rc = vt_st_parse(b, len - 3, &f);
    expect_err(rc, VT_ERR_FORMAT, "\"a\"", "beyond the 5-byte data section", "file truncated inside data");
    rc = vt_st_parse(b, 20, &f);
    expect_err(rc, VT_ERR_FORMAT, "exceeds file size 20", NULL, "file truncated inside header");
    free(b);

    expect_err(st_try("{\"a\":", d, 0), VT_ERR_FORMAT, "not valid JSON", "end of input",
               "truncated JSON header");
    expect_err(st_try("{\"a\":1,}", d, 0), VT_ERR_FORMAT, "not valid JSON", NULL, "invalid JSON header");
    expect_err(st_try("[1,2]", d, 0), VT_ERR_FORMAT, "not a JSON object", NULL, "header is an array");
    expect_err(st_try_n("{\"a\":{}}\0\0\0", 11, d, 0), VT_ERR_FORMAT, "NUL byte", NULL,
               "header padded with NUL bytes");
    char deep[512];
    snprintf(deep, sizeof deep, "{\"a\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[0,0]}}",
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]"
             "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
    expect_err(st_try(deep, d, 0), VT_ERR_FORMAT, "nesting deeper than 64", NULL, "deeply nested header");
    expect_err(st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      d, 8),
               VT_ERR_FORMAT, "duplicate key \"a\"", NULL, "duplicate tensor names");
    expect_err(st_try("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", d, 1),
               VT_ERR_FORMAT, "\"a\"", "\"F8_E4M3\"", "unknown dtype");
    expect_err(st_try("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", d, 1), VT_ERR_FORMAT,
               "\"a\"", "dtype", "non-string dtype");
    expect_err(st_try("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", d, 1), VT_ERR_FORMAT, "\"a\"",
               "dtype", "missing dtype");
    expect_err(st_try("{\"a\":[1]}", d, 0), VT_ERR_FORMAT, "\"a\"", "not an object",
               "tensor entry is an array");
    expect_err(st_try("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", d, 1), VT_ERR_FORMAT,
               "empty name", NULL, "empty tensor name");
    expect_err(st_try("{\"bad\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", d, 4),
               VT_ERR_FORMAT, "\"bad\"", "non-negative integers", "negative dim");
    expect_err(st_try("{\"bad\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", d, 4),
               VT_ERR_FORMAT, "\"bad\"", "non-negative integers", "fractional dim");
    expect_err(st_try("{\"bad\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", d, 4),
               VT_ERR_FORMAT, "\"bad\"", "non-negative integers", "dim written with exponent");
    expect_err(st_try("{\"bad\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", d, 4),
               VT_ERR_FORMAT, "\"bad\"", "non-negative integers", "string dim");
    expect_err(st_try("{\"bad\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}}", d, 4),
               VT_ERR_FORMAT, "\"bad\"", "not a list", "shape not a list");
    expect_err(
        st_try("{\"bad\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", d, 1),
        VT_ERR_FORMAT, "\"bad\"", "9 dims", "ndim 9 > 8");
    expect_ok(st_try("{\"ok8\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", d, 1),
              "ndim 8 accepted");
    expect_err(st_try("{\"big\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                      "\"data_offsets\":[0,4]}}",
                      d, 4),
               VT_ERR_FORMAT, "\"big\"", "overflows", "numel overflow");
    expect_err(
        st_try("{\"big\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,8]}}", d, 8),
        VT_ERR_FORMAT, "\"big\"", "overflows", "numel * dtype size overflow");
    expect_ok(st_try("{\"z\":{\"dtype\":\"F32\",\"shape\":[0,9223372036854775807,9223372036854775807],"
                     "\"data_offsets\":[0,0]}}",
                     d, 0),
              "zero dim makes huge other dims harmless");
    expect_err(st_try("{\"o\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", d, 4), VT_ERR_FORMAT,
               "\"o\"", "[begin, end]", "data_offsets with one element");
    expect_err(st_try("{\"o\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", d, 8),
               VT_ERR_FORMAT, "\"o\"", "[begin, end]", "data_offsets with three elements");
    expect_err(st_try("{\"o\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",\"4\"]}}", d, 4),
               VT_ERR_FORMAT, "\"o\"", "[begin, end]", "data_offsets as strings");
    expect_err(st_try("{\"o\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", d, 4),
               VT_ERR_FORMAT, "\"o\"", "[begin, end]", "negative data_offsets");
    expect_err(st_try("{\"o\":{\"dtype\":\"F32\",\"shape\":[1]}}", d, 4), VT_ERR_FORMAT, "\"o\"",
               "data_offsets", "missing data_offsets");
    expect_err(st_try("{\"o\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", d, 8),
               VT_ERR_FORMAT, "\"o\"", "begin 8 > end 4", "data_offsets begin > end");
    expect_err(st_try("{\"o\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}", d, 16),
               VT_ERR_FORMAT, "\"o\"", "end 400 is beyond the 16-byte data section",
               "data_offsets out of range");
    expect_err(st_try("{\"o\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[18446744073709551615,"
                      "18446744073709551615]}}",
                      d, 16),
               VT_ERR_FORMAT, "\"o\"", NULL, "data_offsets beyond int64");
    expect_err(st_try("{\"m\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", d, 24),
               VT_ERR_FORMAT, "tensor \"m\": shape [2, 3] F32 needs 24 bytes, data_offsets give 20", NULL,
               "byte-size mismatch");
    expect_err(st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                      d, 24),
               VT_ERR_FORMAT, "\"a\" [0, 16)", "\"b\" [8, 24) overlap", "overlapping offsets");
    expect_err(st_try("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[10,12]},"
                      "\"c\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[20,24]},"
                      "\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]}}",
                      d, 24),
               VT_ERR_FORMAT, "\"a\"", "\"b\"", "overlap found regardless of header order");
    expect_ok(st_try("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                     "\"z1\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]},"
                     "\"z2\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}",
                     d, 16),
              "gaps, out-of-order ranges and empty ranges are allowed");
    expect_err(st_try("{\"__metadata__\":{\"k\":1}}", d, 0), VT_ERR_FORMAT, "__metadata__", "\"k\"",
               "non-string metadata value");
    expect_err(st_try("{\"__metadata__\":[\"k\"]}", d, 0), VT_ERR_FORMAT, "__metadata__", "not an object",
               "metadata not an object");
    expect_ok(st_try("{\"__metadata__\":{},\"x\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[0,1]},"
                     "\"y\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[1,2],\"extra\":null}}        ",
                     d, 2),
              "empty metadata, scalar, unknown extra field, trailing spaces accepted");

    /* writer argument checks */
    float x[2] = { 1, 2 };
    long long sh2[1] = { 2 }, shneg[1] = { -2 }, sh9[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    unsigned char *out = NULL;
    vt_st_entry dup[2] = { { "p", VT_DT_F32, 1, sh2, x }, { "p", VT_DT_F32, 1, sh2, x } };
    expect_err(vt_st_write(dup, 2, NULL, NULL, 0, &out, &len), VT_ERR_ARG, "duplicate tensor name \"p\"",
               NULL, "write: duplicate names");
    vt_st_entry noname = { "", VT_DT_F32, 1, sh2, x };
    expect_err(vt_st_write(&noname, 1, NULL, NULL, 0, &out, &len), VT_ERR_ARG, "empty name", NULL,
               "write: empty name");
    vt_st_entry nullname = { NULL, VT_DT_F32, 1, sh2, x };
    expect_err(vt_st_write(&nullname, 1, NULL, NULL, 0, &out, &len), VT_ERR_ARG, "empty name", NULL,
               "write: NULL name");
    vt_st_entry meta = { "__metadata__", VT_DT_F32, 1, sh2, x };
    expect_err(vt_st_write(&meta, 1, NULL, NULL, 0, &out, &len), VT_ERR_ARG, "reserved", NULL,
               "write: reserved name");
    vt_st_entry neg = { "n", VT_DT_F32, 1, shneg, x };
    expect_err(vt_st_write(&neg, 1, NULL, NULL, 0, &out, &len), VT_ERR_ARG, "\"n\"", "-2",
               "write: negative dim");
    vt_st_entry nine = { "n9", VT_DT_F32, 9, sh9, x };
    expect_err(vt_st_write(&nine, 1, NULL, NULL, 0, &out, &len), VT_ERR_ARG, "\"n9\"", "ndim 9",
               "write: ndim 9");
    vt_st_entry nodata = { "nd", VT_DT_F32, 1, sh2, NULL };
    expect_err(vt_st_write(&nodata, 1, NULL, NULL, 0, &out, &len), VT_ERR_ARG, "\"nd\"", "NULL",
               "write: NULL data");
    vt_st_entry badutf = { "\xC3(", VT_DT_F32, 1, sh2, x };
    expect_err(vt_st_write(&badutf, 1, NULL, NULL, 0, &out, &len), VT_ERR_ARG, "UTF-8", NULL,
               "write: invalid UTF-8 name");
    vt_st_entry baddt = { "bd", (vt_dtype)42, 1, sh2, x };
    expect_err(vt_st_write(&baddt, 1, NULL, NULL, 0, &out, &len), VT_ERR_ARG, "\"bd\"", "42",
               "write: invalid dtype");
    const char *k2[] = { "k", "k" }, *v2[] = { "1", "2" };
    expect_err(vt_st_write(dup, 1, k2, v2, 2, &out, &len), VT_ERR_ARG, "duplicate metadata key \"k\"", NULL,
               "write: duplicate metadata keys");
    check(out == NULL, "write leaves *out NULL on failure");
}

/* ----------------------------------------------------------------------------------------------
 * fuzz */

static uint64_t lcg_state;
static uint32_t lcg(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(lcg_state >> 33);
}

/* Mutates b[0..len) in place; returns the (possibly truncated) length. hdr_end = 8 + header length. */
static size_t mutate(unsigned char *b, size_t len, size_t hdr_end) {
    static const char interesting[] = "{}[]\",:0123456789-+eE.\\u \x01\x7f\xff";
    switch (lcg() % 5) {
        case 0: /* flip a few bits anywhere */
            for (int i = 0, n = 1 + (int)(lcg() % 3); i < n; i++)
                b[lcg() % len] ^= (unsigned char)(1u << (lcg() % 8));
            break;
        case 1: /* JSON-meaningful bytes inside the header */
            for (int i = 0, n = 1 + (int)(lcg() % 4); i < n; i++)
                b[8 + lcg() % (hdr_end - 8)] = (unsigned char)interesting[lcg() % (sizeof interesting - 1)];
            break;
        case 2: /* truncate */ return lcg() % len;
        case 3: /* perturb the header length */ b[lcg() % 8] = (unsigned char)lcg(); break;
        default: { /* overwrite a digit in the header with another digit: plausible but wrong numbers */
            size_t start = 8 + lcg() % (hdr_end - 8);
            for (size_t i = start; i < hdr_end; i++)
                if (b[i] >= '0' && b[i] <= '9') {
                    b[i] = (unsigned char)('0' + lcg() % 10);
                    break;
                }
            break;
        }
    }
    return len;
}

static void test_fuzz(void) {
    float w[6] = { 1, 2, 3, 4, 5, 6 };
    uint16_t hw[3] = { 0x3C00, 0x7C00, 0x0001 };
    long long iv[2] = { 7, -7 };
    unsigned char bo[3] = { 1, 0, 1 };
    long long sh23[2] = { 2, 3 }, sh3[1] = { 3 }, sh2[1] = { 2 };
    vt_st_entry e[] = { { "w", VT_DT_F32, 2, sh23, w },
                        { "h", VT_DT_F16, 1, sh3, hw },
                        { "b16", VT_DT_BF16, 1, sh3, hw },
                        { "i", VT_DT_I64, 1, sh2, iv },
                        { "m", VT_DT_BOOL, 1, sh3, bo } };
    const char *mk[] = { "format" }, *mv[] = { "pt" };
    unsigned char *base = NULL;
    size_t base_len = 0;
    int rc = vt_st_write(e, 5, mk, mv, 1, &base, &base_len);
    check(rc == VT_OK, "fuzz: base file written (%zu bytes)", base_len);
    if (rc) return;
    size_t hdr_end = 8 + (size_t)(base[0] | (base[1] << 8) | (base[2] << 16));

    lcg_state = 0x5AFE7E45u;
    int bad_status = 0, parsed_ok = 0, empty_msg = 0;
    for (int v = 0; v < 2000; v++) {
        unsigned char *m = xmalloc(base_len);
        memcpy(m, base, base_len);
        size_t len = mutate(m, base_len, hdr_end);
        unsigned char *exact = xmalloc(len); /* exact size: ASan flags any read past len */
        memcpy(exact, m, len);
        free(m);
        vt_clear_error();
        vt_st_file f;
        rc = vt_st_parse(exact, len, &f);
        if (rc == VT_OK) {
            parsed_ok++;
            for (size_t i = 0; i < f.n; i++) {
                const vt_st_tensor *t = &f.tensors[i];
                if (vt_st_find(&f, t->name) != t) bad_status++;
                float *fd = xmalloc(t->numel * sizeof(float));
                long long *id = xmalloc(t->numel * sizeof(long long));
                int r1 = vt_st_to_f32(t, fd), r2 = vt_st_to_i64(t, id);
                if (!((r1 == VT_OK) ^ (r2 == VT_OK))) bad_status++; /* exactly one converter applies */
                free(fd);
                free(id);
            }
        } else {
            if (rc != VT_ERR_FORMAT) bad_status++;
            if (vt_last_error()[0] == 0) empty_msg++;
        }
        vt_st_free(&f);
        free(exact);
    }
    check(bad_status == 0 && empty_msg == 0,
          "fuzz: 2000 mutated safetensors files, no crash, only OK/FORMAT, every error has a message (%d "
          "parsed OK)",
          parsed_ok);
    free(base);

    /* The same idea straight on the JSON parser. */
    const char *js =
        "{\"a\":[1,-2.5e3,true,false,null,\"x\\u00e9\\uD83D\\uDE00\\n\"],\"b\":{\"c\":{\"d\":[[]]}},"
        "\"e\":\"caf\xC3\xA9\",\"f\":0.125}";
    size_t jl = strlen(js);
    bad_status = parsed_ok = 0;
    for (int v = 0; v < 2000; v++) {
        char *m = xmalloc(jl);
        memcpy(m, js, jl);
        size_t len = jl;
        int kind = (int)(lcg() % 3);
        if (kind == 0)
            len = lcg() % jl;
        else if (kind == 1)
            m[lcg() % jl] ^= (char)(1u << (lcg() % 8));
        else
            m[lcg() % jl] = "{}[]\",:0-e.\\u\x00\xc3"[lcg() % 16];
        vt_json *jv = NULL;
        rc = vt_json_parse(m, len, &jv); /* m is exact-size, not NUL-terminated */
        if (rc == VT_OK)
            parsed_ok++;
        else if (rc != VT_ERR_FORMAT || jv)
            bad_status++;
        vt_json_free(jv);
        free(m);
    }
    check(bad_status == 0, "fuzz: 2000 mutated JSON texts, no crash, only OK/FORMAT (%d parsed OK)",
          parsed_ok);
}

int main(void) {
    test_json();
    test_roundtrip();
    test_conversions();
    test_hostile();
    test_fuzz();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
