/* test_util.h: small shared helpers for the native C tests (no framework).
 * Every test program prints one line per FAILED check (plus a few info lines) and ends with
 * "N passed, M failed"; main returns non-zero when anything failed (tu_finish).
 * Header-only: each test is one .c file plus this header. */
#ifndef VT_TEST_UTIL_H
#define VT_TEST_UTIL_H
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vitrine.h"

#ifndef VT_FIXTURES_DIR
#define VT_FIXTURES_DIR "../../shared/fixtures"
#endif

static int tu_pass, tu_fail;

/* One check: silent when it passes, one "FAIL ..." line when it does not. Returns ok. */
static int tu_check(int ok, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static int tu_check(int ok, const char *file, int line, const char *fmt, ...) {
    if (ok) {
        tu_pass++;
        return 1;
    }
    tu_fail++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s:%d: ", file, line);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    return 0;
}
#define CHECK(cond, ...) tu_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* A call that must succeed: prints the engine's message when it does not. rc is evaluated once. */
#define CHECK_OK(rc, what) tu_check_ok((rc), (what), __FILE__, __LINE__)
static int tu_check_ok(int rc, const char *what, const char *file, int line) {
    return tu_check(rc == VT_OK, file, line, "%s: rc %d (%s): %s", what, rc, vt_status_name(rc),
                    vt_last_error());
}
/* A call that must fail with `want` and a message containing `word` (NULL: any message). */
#define CHECK_ERR(rc, want, word, what) tu_check_err((rc), (want), (word), (what), __FILE__, __LINE__)
static int tu_check_err(int rc, int want, const char *word, const char *what, const char *file, int line) {
    const char *msg = vt_last_error();
    int ok = rc == want && msg && msg[0] && (!word || strstr(msg, word));
    return tu_check(ok, file, line, "%s: want %s with '%s' in the message, got rc %d (%s): \"%s\"", what,
                    vt_status_name(want), word ? word : "", rc, vt_status_name(rc), msg ? msg : "(null)");
}

static void tu_info(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static void tu_info(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("info: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

static int tu_finish(void) {
    printf("%d passed, %d failed\n", tu_pass, tu_fail);
    return tu_fail ? 1 : 0;
}

static void *tu_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}
static void *tu_xcalloc(size_t n, size_t s) {
    void *p = calloc(n ? n : 1, s ? s : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory (%zu x %zu bytes)\n", n, s);
        exit(2);
    }
    return p;
}

/* Whole file into a malloc'd buffer (exact size). NULL on error. */
static uint8_t *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END)) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET)) {
        fclose(f);
        return NULL;
    }
    uint8_t *b = tu_xmalloc((size_t)n);
    size_t r = fread(b, 1, (size_t)n, f);
    fclose(f);
    if (r != (size_t)n) {
        free(b);
        return NULL;
    }
    *len = (size_t)n;
    return b;
}

/* Sorted list of *.safetensors in a folder (full paths, malloc'd; free with tu_free_list):
 * tu_list_fixtures: VT_FIXTURES_DIR (../shared/fixtures), tu_list_parity: VT_PARITY_DIR
 * (tests/parity: the options of timm's ViT, dumped from timm by tests/parity/make_dumps.py). */
static int tu_cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static char **tu_list_dir(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **v = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 12 || strcmp(e->d_name + l - 12, ".safetensors")) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 32;
            v = realloc(v, (size_t)cap * sizeof *v);
            if (!v) exit(2);
        }
        size_t pl = strlen(dir) + l + 2;
        v[*n] = tu_xmalloc(pl);
        snprintf(v[*n], pl, "%s/%s", dir, e->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n) qsort(v, (size_t)*n, sizeof *v, tu_cmp_str);
    return v;
}
static char **tu_list_fixtures(int *n) { return tu_list_dir(VT_FIXTURES_DIR, n); }
#ifndef VT_PARITY_DIR
#define VT_PARITY_DIR "tests/parity"
#endif
static char **tu_list_parity(int *n) { return tu_list_dir(VT_PARITY_DIR, n); }
static void tu_free_list(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}
static const char *tu_base(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Seeded RNG (splitmix64): deterministic across platforms. */
typedef struct {
    uint64_t s;
} tu_rng;
static uint64_t tu_next(tu_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double tu_unif(tu_rng *r) {
    return (double)(tu_next(r) >> 11) * (1.0 / 9007199254740992.0);
} /* [0,1) */
static float tu_uniform(tu_rng *r, float lo, float hi) { return lo + (hi - lo) * (float)tu_unif(r); }
static float tu_normal(tu_rng *r) {
    double u1 = tu_unif(r), u2 = tu_unif(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
static int tu_randint(tu_rng *r, int n) { return (int)(tu_next(r) % (uint64_t)n); }
static void tu_fill_normal(tu_rng *r, float *x, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i++) x[i] = mean + std * tu_normal(r);
}
static void tu_shuffle(tu_rng *r, int *v, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = tu_randint(r, i + 1), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static double tu_now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Non-trivial random parameters: LayerNorm weights ~ 1 + noise, LayerScale gammas ~ 0.5,
 * everything else ~ N(0, std) (std ~ 1/sqrt(fan_in) for matrices). Frozen ones too. */
static void tu_init_params(vt_model *m, tu_rng *r) {
    for (int i = 0; i < vt_param_count(m); i++) {
        const char *nm = vt_param_name(m, i);
        float *p = vt_param_data(m, i);
        size_t n = vt_param_numel(m, i);
        int nd = vt_param_ndim(m, i);
        const int64_t *sh = vt_param_shape(m, i);
        size_t len = strlen(nm);
        int is_norm_w = len > 7 && !strcmp(nm + len - 7, ".weight") && nd == 1;
        if (strstr(nm, "gamma"))
            tu_fill_normal(r, p, n, 0.5f, 0.2f);
        else if (is_norm_w)
            tu_fill_normal(r, p, n, 1.0f, 0.2f);
        else if (nd >= 2 && strstr(nm, "weight")) {
            size_t fan_in = n / (size_t)sh[0];
            tu_fill_normal(r, p, n, 0.0f, 1.0f / sqrtf((float)fan_in));
        } else
            tu_fill_normal(r, p, n, 0.0f, 0.3f);
    }
}

/* Tiny model configs. */
static void tu_tiny_config(vt_model_config *c, vt_kind kind, int img, int patch, int D, int depth, int heads,
                           float mlp) {
    vt_model_config_default(c, kind);
    c->enc.img_size = img;
    c->enc.patch_size = patch;
    c->enc.embed_dim = D;
    c->enc.depth = depth;
    c->enc.num_heads = heads;
    c->enc.mlp_ratio = mlp;
    c->enc.num_classes = 0;
    c->decoder_dim = 8;
    c->decoder_depth = 2;
    c->decoder_heads = 2;
    c->decoder_mlp_ratio = 2.0f;
    c->head_hidden_dim = 8;
    c->head_blocks = 2;
    c->head_mlp_ratio = 2.0f;
}

/* MAE-style random_token_mask: per row, shuffle the patch indices P..L-1; the first n_mask go to
 * idx_mask, the rest (after the prefix indices 0..P-1) to idx_keep; n_keep = P + N - n_mask. */
/* The options of timm's VisionTransformer beyond the tiny defaults, one case each (tests of
 * planned == measured memory and of bitwise checkpointing walk them): case i into c (kind timm, a
 * classifier head, timm's forward) and the call's image size / flags into in (batch set by the
 * caller); returns its name, NULL past the end. img 8 / patch 4 / D 8 / 2 heads unless the case
 * says otherwise; depth as given. */
static const char *tu_option_case(int i, int depth, vt_model_config *c, vt_inputs *in) {
    tu_tiny_config(c, VT_KIND_TIMM, 8, 4, 8, depth, 2, 2.0f);
    c->enc.num_classes = 3;
    in->height = in->width = in->distilled_training = 0;
    vt_vit_config *e = &c->enc;
    switch (i) {
        case 0:
            e->pre_norm = 1, e->norm_eps = 1e-5, e->act_layer = VT_ACT_QUICK_GELU;
            return "CLIP (pre_norm, eps 1e-5, quick_gelu)";
        case 1:
            e->norm_layer = VT_NORM_RMS, e->act_layer = VT_ACT_GELU_TANH,
            e->scale_attn_norm = e->scale_mlp_norm = 1;
            e->qk_norm = 1, e->global_pool = VT_POOL_AVG, e->init_values = 0.1f;
            return "rmsnorm gelu_tanh qk_norm scale norms LayerScale avg";
        case 2: e->class_token = 0, e->global_pool = VT_POOL_MAP; return "SigLIP (map, no class token)";
        case 3:
            e->global_pool = VT_POOL_MAP, e->reg_tokens = 2, e->pool_include_prefix = 1, e->fc_norm = 1;
            return "map over prefix tokens, fc_norm";
        case 4: e->global_pool = VT_POOL_PRR; return "prr (token)";
        case 5: e->global_pool = VT_POOL_PRR, e->class_token = 0, e->reg_tokens = 1; return "prr (avg)";
        case 6: e->distilled = 1; return "DeiT distilled";
        case 7: e->distilled = 1, in->distilled_training = 1; return "DeiT distilled training (two heads)";
        case 8:
            e->img_size = 10, e->img_width = 14, e->embed_norm_layer = VT_NORM_LAYER, e->proj_bias = 0;
            return "non-square floored grid, embed norm, no proj bias";
        case 9:
            e->dynamic_img_size = 1, e->reg_tokens = 1, in->height = 12, in->width = 16;
            return "dynamic_img_size 12x16";
        case 10:
            e->dynamic_img_size = e->dynamic_img_pad = 1, e->no_embed_class = 1, in->height = 13,
            in->width = 6;
            return "dynamic_img_pad 13x6";
        case 11:
            e->final_norm = 0, e->global_pool = VT_POOL_AVGMAX, e->pool_include_prefix = 1, e->reg_tokens = 1;
            return "final_norm off, avgmax over prefix";
        case 12:
            e->global_pool = VT_POOL_AVG, e->fc_norm = 0, e->class_token = 0;
            return "avg with fc_norm off (gap)";
        default: return NULL;
    }
}

static void tu_random_token_mask(tu_rng *r, int B, int P, int N, int n_mask, int64_t *idx_keep,
                                 int64_t *idx_mask) {
    int *perm = tu_xmalloc((size_t)N * sizeof(int));
    int n_keep = P + N - n_mask;
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < N; i++) perm[i] = P + i;
        tu_shuffle(r, perm, N);
        for (int j = 0; j < n_mask; j++) idx_mask[(size_t)b * n_mask + j] = perm[j];
        for (int j = 0; j < P; j++) idx_keep[(size_t)b * n_keep + j] = j;
        for (int j = n_mask; j < N; j++) idx_keep[(size_t)b * n_keep + P + j - n_mask] = perm[j];
    }
    free(perm);
}

/* Fills the gradient buffer (every trainable parameter) with a value. */
static void tu_fill_grads(vt_model *m, float v) {
    for (int i = 0; i < vt_param_count(m); i++) {
        float *g = vt_param_grad(m, i);
        if (!g) continue;
        for (size_t k = 0; k < vt_param_numel(m, i); k++) g[k] = v;
    }
}

/* Copy of all gradients, concatenated in parameter order (trainable only). */
static float *tu_copy_grads(vt_model *m, size_t *n) {
    size_t tot = 0;
    for (int i = 0; i < vt_param_count(m); i++)
        if (vt_param_grad(m, i)) tot += vt_param_numel(m, i);
    float *out = tu_xmalloc((tot ? tot : 1) * sizeof(float));
    size_t k = 0;
    for (int i = 0; i < vt_param_count(m); i++) {
        const float *g = vt_param_grad(m, i);
        if (!g) continue;
        memcpy(out + k, g, vt_param_numel(m, i) * sizeof(float));
        k += vt_param_numel(m, i);
    }
    *n = tot;
    return out;
}

static size_t tu_numel(const int64_t *shape, int nd) {
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)shape[d];
    return n;
}

/* Upstream gradients for every output of the last vt_forward, normal(0, 1) from r: *n arrays
 * (free with tu_free_douts). */
static float **tu_random_douts(vt_model *m, tu_rng *r, int *n) {
    *n = vt_output_count(m);
    float **d = tu_xcalloc((size_t)*n + 1, sizeof(float *));
    for (int i = 0; i < *n; i++) {
        int64_t sh[4];
        int nd;
        vt_output(m, i, sh, &nd);
        size_t k = tu_numel(sh, nd);
        d[i] = tu_xmalloc(k * sizeof(float));
        tu_fill_normal(r, d[i], k, 0, 1);
    }
    return d;
}
static void tu_free_douts(float **d, int n) {
    for (int i = 0; d && i < n; i++) free(d[i]);
    free(d);
}

#endif
