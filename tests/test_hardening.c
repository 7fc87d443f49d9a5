/* test_hardening.c: untrusted sizes and numbers (issue 16, items 1, 2 and 10). Every size the engine
 * derives from a config or file is computed in 64 bits and refused before anything is allocated;
 * every training-state number is range-checked before it is converted; a damaged tensor is refused
 * by name; a refused state leaves the model as it was. Built natively (ctest: hardening, also under
 * ASan+UBSan) and for wasm32-wasi, where size_t and long are 32-bit (ctest: hardening_wasm). */
#include "test_util.h"
#include "parity.h"
#include "safetensors.h"
#include "vit_internal.h"

static const int WASM32 = SIZE_MAX <= UINT32_MAX;
static char what_buf[700];
#define WHAT(...) (snprintf(what_buf, sizeof what_buf, __VA_ARGS__), what_buf)

static int create_json(const char *json, vt_kind kind, vt_model **m) {
    vt_model_config c;
    *m = NULL;
    int rc = vt_model_config_from_json(json, strlen(json), kind, &c);
    if (rc) return rc;
    return vt_model_create(&c, m);
}

static void test_config_sizes(void) {
    vt_model *m = NULL;
    CHECK_ERR(create_json("{\"embed_dim\": 1000001}", VT_KIND_TIMM, &m), VT_ERR_ARG, "0..1000000", "embed_dim 1000001");
    CHECK_ERR(create_json("{\"mlp_ratio\": 1e30}", VT_KIND_TIMM, &m), VT_ERR_ARG, "mlp_ratio", "mlp_ratio 1e30");
    CHECK_ERR(create_json("{\"encoder\": {\"embed_dim\": 64, \"num_heads\": 4}, \"decoder_mlp_ratio\": 0}", VT_KIND_MAE, &m),
              VT_ERR_ARG, "decoder_mlp_ratio", "decoder_mlp_ratio 0");
    CHECK_ERR(create_json("{\"encoder\": {\"class_token\": false, \"global_pool\": \"avg\", \"embed_dim\": 64, \"num_heads\": 4},"
                          " \"head_mlp_ratio\": 1e300}", VT_KIND_AIM, &m), VT_ERR_ARG, "head_mlp_ratio", "head_mlp_ratio 1e300");
    /* G*G = 2^32 wraps a 32-bit long (wasm) to 0: must still count 4294967297 tokens */
    CHECK_ERR(create_json("{\"img_size\": 65536, \"patch_size\": 1}", VT_KIND_TIMM, &m), VT_ERR_ARG, "4294967297 tokens",
              "img 65536 / patch 1");
    CHECK_ERR(create_json("{\"img_size\": 1000, \"patch_size\": 1000, \"in_chans\": 1000000}", VT_KIND_TIMM, &m), VT_ERR_ARG,
              "patch of 1000000 channels", "a 10^12-value patch");
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_TIMM, 8, 4, 8, 1, 2, 2.0f);
    c.enc.mlp_ratio = INFINITY;
    CHECK_ERR(vt_model_create(&c, &m), VT_ERR_ARG, "mlp_ratio", "mlp_ratio inf");
    c.enc.mlp_ratio = NAN;
    CHECK_ERR(vt_model_create(&c, &m), VT_ERR_ARG, "mlp_ratio", "mlp_ratio nan");
    c.enc.mlp_ratio = 2.0f;
    c.enc.init_values = INFINITY;
    CHECK_ERR(vt_model_create(&c, &m), VT_ERR_ARG, "init_values", "init_values inf");
    CHECK(m == NULL, "a refused config returned a model");
    if (WASM32) {
        /* the cases: 12.9 GB planned as 2.49 MB, a 0-element qkv, an out-of-bounds trap */
        const char *big[] = {"{\"embed_dim\": 16384, \"num_heads\": 16}", "{\"embed_dim\": 65536, \"num_heads\": 16, \"depth\": 1}",
                             "{\"embed_dim\": 1000000, \"num_heads\": 16, \"depth\": 1, \"mlp_ratio\": 0.5}"};
        for (int i = 0; i < 3; i++)
            CHECK_ERR(create_json(big[i], VT_KIND_TIMM, &m), VT_ERR_NOMEM, "more than this platform can address", big[i]);
    }
}

static void test_ptable(void) {
    vt_ptable t;
    memset(&t, 0, sizeof t);
    int64_t huge[2] = {(int64_t)1 << 40, (int64_t)1 << 40}, qkv[2] = {3 * 65536, 65536}, neg[1] = {-1}, ok[2] = {3, 5};
    CHECK_OK(vt_ptable_add(&t, "a", 2, ok, 1), "a [3, 5]");
    CHECK_ERR(vt_ptable_add(&t, "huge", 2, huge, 1), VT_ERR_NOMEM, "address", "2^40 x 2^40");
    CHECK_ERR(vt_ptable_add(&t, "neg", 1, neg, 1), VT_ERR_ARG, "negative", "shape [-1]");
    CHECK_ERR(vt_ptable_add(&t, "five", 5, ok, 1), VT_ERR_ARG, "dimensions", "5 dimensions");
    if (WASM32) CHECK_ERR(vt_ptable_add(&t, "qkv", 2, qkv, 1), VT_ERR_NOMEM, "address", "[196608, 65536] in wasm32");
    else if (CHECK_OK(vt_ptable_add(&t, "qkv", 2, qkv, 1), "[196608, 65536]"))
        CHECK(t.p[1].numel == (size_t)3 << 32 && t.total == ((size_t)3 << 32) + 15, "numel %zu total %zu", t.p[1].numel, t.total);
    CHECK(t.n == (WASM32 ? 1 : 2), "refused parameters were added: n = %d", t.n);
    vt_ptable_free(&t);
}

/* a sin-cos parity file whose key names a 17 GB table but holds one float */
static void test_sincos_parity(void) {
    long long shape[1] = {1};
    float one = 1;
    vt_st_entry e = {"expect/sincos.d65536.g1024.p64", VT_DT_F32, 1, shape, &one};
    const char *k[] = {"format", "module", "config", "call"};
    const char *v[] = {"vitrine-parity/1", "lightly.sincos", "{}", "{\"fn\": \"sincos\"}"};
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (!CHECK_OK(vt_st_write(&e, 1, k, v, 4, &bytes, &len), "write")) return;
    vt_parity_result r;
    if (WASM32) CHECK_ERR(vt_parity_run(bytes, len, NULL, 0, &r), VT_ERR_NOMEM, "do not fit in memory", "sin-cos key naming 17 GB");
    else CHECK_ERR(vt_parity_run(bytes, len, NULL, 0, &r), VT_ERR_FORMAT, "68723671040 values", "sin-cos key naming 17 GB");
    CHECK(!r.pass, "passed");
    vt_parity_free(&r);
    free(bytes);
    float tab[4];
    CHECK_ERR(vt_sincos_table(tab, 1 << 24, 1 << 20, 0), VT_ERR_NOMEM, "address", "sin-cos 2^64 floats");
    if (WASM32) CHECK_ERR(vt_sincos_table(tab, 65536, 1024, 64), VT_ERR_NOMEM, "address", "sin-cos 2^36 floats");
}

/* item 5: a non-finite expected value is a broken reference: the file cannot be run, and the
 * error names the tensor and the element, in valid JSON (an Inf expectation once gave
 * inf / inf = NaN, "null" in the JSON). A non-finite value of ours is the worst error, Infinity
 * (tests/node/parity.test.mjs). */
static void test_parity_nonfinite(void) {
    float good[8], bad[4];
    CHECK_OK(vt_sincos_table(good, 4, 1, 1), "table");
    CHECK_OK(vt_sincos_table(bad, 4, 1, 0), "table");
    bad[2] = INFINITY;
    for (int order = 0; order < 2; order++) {
        long long sg[2] = {2, 4}, sb[2] = {1, 4};
        vt_st_entry eg = {"expect/sincos.d4.g1.p1", VT_DT_F32, 2, sg, good}, eb = {"expect/sincos.d4.g1.p0", VT_DT_F32, 2, sb, bad};
        vt_st_entry e[2] = {order ? eb : eg, order ? eg : eb};
        const char *k[] = {"format", "module", "config", "call"};
        const char *v[] = {"vitrine-parity/1", "lightly.sincos", "{}", "{\"fn\": \"sincos\"}"};
        uint8_t *bytes = NULL;
        size_t len = 0;
        if (!CHECK_OK(vt_st_write(e, 2, k, v, 4, &bytes, &len), "write")) return;
        vt_parity_result r;
        CHECK_ERR(vt_parity_run(bytes, len, NULL, 0, &r), VT_ERR_FORMAT,
                  "expect/sincos.d4.g1.p0 holds an infinity (element 2 of [1, 4]): the reference is broken", "an infinite expected value");
        CHECK(!r.pass && r.status == VT_ERR_FORMAT, "order %d: pass %d status %d", order, r.pass, r.status);
        char *js = NULL;
        size_t n = 0;
        if (CHECK_OK(vt_parity_json(&r, NULL, &js, &n), "json")) {
            /* no inf / nan; null only for the absent torch32 errors (these tensors have no torch32/ twin) */
            CHECK(strstr(js, "\"error\": \"expect/sincos.d4.g1.p0 holds an infinity") && !strstr(js, ": inf") &&
                      !strstr(js, ": nan") && !strstr(js, "\"err\": null") && strstr(js, "\"max_torch32_err\": null"), "JSON: %s", js);
            free(js);
        }
        vt_parity_free(&r);
        free(bytes);
    }
}

/* ---- training state ---- */

/* The same safetensors bytes with one metadata value replaced (value NULL: the key removed). */
static uint8_t *restate(const uint8_t *bytes, size_t len, const char *key, const char *value, size_t *out_len) {
    vt_st_file f;
    if (vt_st_parse(bytes, len, &f)) return NULL;
    vt_st_entry *e = tu_xcalloc(f.n + 1, sizeof *e);
    const char **mk = tu_xcalloc(f.n_meta + 1, sizeof *mk), **mv = tu_xcalloc(f.n_meta + 1, sizeof *mv);
    for (size_t i = 0; i < f.n; i++)
        e[i] = (vt_st_entry){f.tensors[i].name, f.tensors[i].dtype, f.tensors[i].ndim, f.tensors[i].shape, f.tensors[i].data};
    size_t nm = 0;
    for (size_t i = 0; i < f.n_meta; i++) {
        if (!strcmp(f.meta_keys[i], key) && !value) continue;
        mk[nm] = f.meta_keys[i];
        mv[nm++] = strcmp(f.meta_keys[i], key) ? f.meta_vals[i] : value;
    }
    uint8_t *out = NULL;
    if (vt_st_write(e, f.n, mk, mv, nm, &out, out_len)) out = NULL;
    free(e); free(mk); free(mv);
    vt_st_free(&f);
    return out;
}

static int same_state(vt_model *m, const uint8_t *want, size_t want_len) {
    uint8_t *now = NULL;
    size_t n = 0;
    if (vt_train_state_save(m, &now, &n)) return 0;
    int same = n == want_len && !memcmp(now, want, n);
    free(now);
    return same;
}

static void test_train_state(void) {
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_MAE, 8, 4, 8, 1, 2, 2.0f);
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), "create")) return;
    CHECK_OK(vt_init_weights(m, 1), "init");
    vt_train_config t;
    vt_train_config_default(&t, VT_KIND_MAE);
    struct { const char *what; vt_train_config t; } bad[] = {{"lr inf", t}, {"lr nan", t}, {"lr 1e4", t}, {"eps inf", t},
        {"beta1 1", t}, {"warmup", t}, {"total", t}, {"seed 2^60", t}, {"weight_decay -1", t}};
    bad[0].t.lr = INFINITY; bad[1].t.lr = NAN; bad[2].t.lr = 1e4f; bad[3].t.eps = INFINITY; bad[4].t.beta1 = 1;
    bad[5].t.warmup_steps = 2000000001L; bad[6].t.total_steps = -1; bad[7].t.seed = 1ULL << 60; bad[8].t.weight_decay = -1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_ERR(vt_trainer_init(m, &bad[i].t), VT_ERR_ARG, "training config", WHAT("trainer_init %s", bad[i].what));
    t.total_steps = 10;
    t.warmup_steps = 2;
    t.seed = 7;
    if (!CHECK_OK(vt_trainer_init(m, &t), "trainer_init")) { vt_model_free(m); return; }
    float img[2 * 3 * 8 * 8], loss;
    tu_rng r = {3};
    tu_fill_normal(&r, img, sizeof img / 4, 0, 1);
    CHECK_OK(vt_train_step(m, img, 2, &loss), "step");
    /* a batch whose masks alone exceed a 32-bit address space: refused before any allocation (the
     * images pointer is never read: the refusal comes first) */
    if (WASM32) CHECK_ERR(vt_train_step(m, img, 2000000000, &loss), VT_ERR_NOMEM, "address space", "batch 2e9 in wasm32");
    uint8_t *st = NULL;
    size_t len = 0;
    if (!CHECK_OK(vt_train_state_save(m, &st, &len), "save")) { vt_model_free(m); return; }

    /* untrusted train_config numbers: refused before any conversion, the model unchanged */
    const char *tc_ok = "\"lr\": 0.00015, \"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-08, \"weight_decay\": 0.05, "
                        "\"clip_norm\": 0, \"mask_ratio\": 0.75";
    struct { const char *key, *val, *word; } cases[] = {
        {"train_config", "{%s, \"warmup_steps\": 1e300, \"total_steps\": 10, \"seed\": 7}", "warmup_steps"},
        {"train_config", "{%s, \"warmup_steps\": 2, \"total_steps\": 10, \"seed\": -1}", "seed"},
        {"train_config", "{%s, \"warmup_steps\": 2, \"total_steps\": 10, \"seed\": 1e30}", "seed"},
        {"train_config", "{%s, \"warmup_steps\": 2.5, \"total_steps\": 10, \"seed\": 7}", "warmup_steps"},
        {"train_config", "{%s, \"warmup_steps\": 2, \"total_steps\": -3, \"seed\": 7}", "total_steps"},
        {"train_config", "{%s, \"warmup_steps\": 2, \"total_steps\": 10, \"seed\": 7, \"lr\": 1e39}", "lr"},
        {"step", "9223372036854775807", "step"},
        {"step", "-1", "step"},
        {"step", "", "step"},
        {"step", "3x", "step"},
        {"step", "+3", "step"},
        {"step", " 3", "step"},
        {"step", "2000000001", "step"},
        {"step", "99999999999999999999999999", "step"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char val[600];
        snprintf(val, sizeof val, cases[i].val, tc_ok);
        if (i == 5) /* lr twice is a duplicate key: replace the first instead */
            snprintf(val, sizeof val, "{\"lr\": 1e39, \"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-08, \"weight_decay\": 0.05, "
                                      "\"clip_norm\": 0, \"mask_ratio\": 0.75, \"warmup_steps\": 2, \"total_steps\": 10, \"seed\": 7}");
        size_t bl = 0;
        uint8_t *b = restate(st, len, cases[i].key, val, &bl);
        if (!CHECK(b, "restate %s", val)) continue;
        CHECK_ERR(vt_train_state_load(m, b, bl), VT_ERR_FORMAT, cases[i].word, WHAT("%s = %s", cases[i].key, val));
        CHECK(same_state(m, st, len), "a refused state (%s) changed the model", val);
        free(b);
    }
    /* the largest step count loads; AdamW then refuses to count past it instead of overflowing */
    {
        size_t bl = 0;
        uint8_t *b = restate(st, len, "step", "2000000000", &bl);
        if (CHECK(b, "restate") && CHECK_OK(vt_train_state_load(m, b, bl), "step 2000000000")) {
            CHECK_ERR(vt_train_step(m, img, 2, &loss), VT_ERR_STATE, "most it counts", "a step past VT_MAX_STEPS");
            CHECK(vt_train_step_count(m) == 2000000000L, "step count moved: %ld", vt_train_step_count(m));
        }
        free(b);
        CHECK_OK(vt_train_state_load(m, st, len), "reload");
    }
    /* a flipped bit in any tensor is refused with its name */
    vt_st_file f;
    if (CHECK_OK(vt_st_parse(st, len, &f), "parse")) {
        for (size_t i = 0; i < f.n; i += 5) {
            uint8_t *b = tu_xmalloc(len);
            memcpy(b, st, len);
            size_t at = (size_t)(f.tensors[i].data - st) + f.tensors[i].nbytes / 2;
            b[at] ^= 0x10;
            char word[200];
            snprintf(word, sizeof word, "tensor '%s' is damaged", f.tensors[i].name);
            CHECK_ERR(vt_train_state_load(m, b, len), VT_ERR_FORMAT, word, WHAT("bit flip in %s", f.tensors[i].name));
            free(b);
        }
        CHECK(same_state(m, st, len), "a damaged state changed the model");
        vt_st_free(&f);
    }
    {
        size_t bl = 0;
        uint8_t *b = restate(st, len, "crc32", "{\"param/x\": \"00000000\"}", &bl);
        CHECK_ERR(vt_train_state_load(m, b, bl), VT_ERR_FORMAT, "crc32", "checksums of other tensors");
        free(b);
        b = restate(st, len, "crc32", NULL, &bl); /* a state from before checksums: loads as before */
        CHECK_OK(vt_train_state_load(m, b, bl), "a state without checksums");
        free(b);
    }
    /* never write a non-JSON number */
    m->train.cfg.lr = INFINITY;
    uint8_t *out = NULL;
    size_t ol = 0;
    CHECK_ERR(vt_train_state_save(m, &out, &ol), VT_ERR_ARG, "lr", "saving lr inf");
    CHECK(out == NULL, "bytes returned for a refused save");
    free(st);
    vt_model_free(m);
}

int main(void) {
    test_config_sizes();
    test_ptable();
    test_sincos_parity();
    test_parity_nonfinite();
    test_train_state();
    return tu_finish();
}
