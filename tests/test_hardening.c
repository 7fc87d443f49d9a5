/* test_hardening.c: untrusted sizes and numbers (issue 16, items 1, 2 and 10). Every size the engine
 * derives from a config or file is computed in 64 bits and refused before anything is allocated;
 * every training-state number is range-checked before it is converted; a damaged tensor is refused
 * by name; a refused state leaves the model as it was. Built natively (ctest: hardening, also under
 * ASan+UBSan) and for wasm32-wasi, where size_t and long are 32-bit (ctest: hardening_wasm). */
#include "test_util.h"
#include "parity.h"
#include "safetensors.h"
#include "test_state.h"
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
    CHECK_ERR(create_json("{\"embed_dim\": 1000001}", VT_KIND_TIMM, &m), VT_ERR_ARG, "0..1000000",
              "embed_dim 1000001");
    CHECK_ERR(create_json("{\"mlp_ratio\": 1e30}", VT_KIND_TIMM, &m), VT_ERR_ARG, "mlp_ratio",
              "mlp_ratio 1e30");
    CHECK_ERR(create_json("{\"encoder\": {\"embed_dim\": 64, \"num_heads\": 4}, \"decoder_mlp_ratio\": 0}",
                          VT_KIND_MAE, &m),
              VT_ERR_ARG, "decoder_mlp_ratio", "decoder_mlp_ratio 0");
    CHECK_ERR(create_json("{\"encoder\": {\"class_token\": false, \"global_pool\": \"avg\", \"embed_dim\": "
                          "64, \"num_heads\": 4},"
                          " \"head_mlp_ratio\": 1e300}",
                          VT_KIND_AIM, &m),
              VT_ERR_ARG, "head_mlp_ratio", "head_mlp_ratio 1e300");
    /* G*G = 2^32 wraps a 32-bit long (wasm) to 0: must still count 4294967297 tokens */
    CHECK_ERR(create_json("{\"img_size\": 65536, \"patch_size\": 1}", VT_KIND_TIMM, &m), VT_ERR_ARG,
              "4294967297 tokens", "img 65536 / patch 1");
    CHECK_ERR(
        create_json("{\"img_size\": 1000, \"patch_size\": 1000, \"in_chans\": 1000000}", VT_KIND_TIMM, &m),
        VT_ERR_ARG, "patch of 1000000 channels", "a 10^12-value patch");
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
        const char *big[] = {
            "{\"embed_dim\": 16384, \"num_heads\": 16}",
            "{\"embed_dim\": 65536, \"num_heads\": 16, \"depth\": 1}",
            "{\"embed_dim\": 1000000, \"num_heads\": 16, \"depth\": 1, \"mlp_ratio\": 0.5}"
        };
        for (int i = 0; i < 3; i++)
            CHECK_ERR(create_json(big[i], VT_KIND_TIMM, &m), VT_ERR_NOMEM,
                      "more than this platform can address", big[i]);
    }
}

static void test_ptable(void) {
    vt_ptable t;
    memset(&t, 0, sizeof t);
    int64_t huge[2] = { (int64_t)1 << 40, (int64_t)1 << 40 }, qkv[2] = { 3 * 65536, 65536 }, neg[1] = { -1 },
            ok[2] = { 3, 5 };
    CHECK_OK(vt_ptable_add(&t, "a", 2, ok, 1), "a [3, 5]");
    CHECK_ERR(vt_ptable_add(&t, "huge", 2, huge, 1), VT_ERR_NOMEM, "address", "2^40 x 2^40");
    CHECK_ERR(vt_ptable_add(&t, "neg", 1, neg, 1), VT_ERR_ARG, "negative", "shape [-1]");
    CHECK_ERR(vt_ptable_add(&t, "five", 5, ok, 1), VT_ERR_ARG, "dimensions", "5 dimensions");
    if (WASM32)
        CHECK_ERR(vt_ptable_add(&t, "qkv", 2, qkv, 1), VT_ERR_NOMEM, "address", "[196608, 65536] in wasm32");
    else if (CHECK_OK(vt_ptable_add(&t, "qkv", 2, qkv, 1), "[196608, 65536]"))
        CHECK(t.p[1].numel == (size_t)3 << 32 && t.total == ((size_t)3 << 32) + 15, "numel %zu total %zu",
              t.p[1].numel, t.total);
    CHECK(t.n == (WASM32 ? 1 : 2), "refused parameters were added: n = %d", t.n);
    vt_ptable_free(&t);
}

/* a sin-cos parity file whose key names a 17 GB table but holds one float */
static void test_sincos_parity(void) {
    long long shape[1] = { 1 };
    float one = 1;
    vt_st_entry e = { "expect/sincos.d65536.g1024.p64", VT_DT_F32, 1, shape, &one };
    const char *k[] = { "format", "module", "config", "call" };
    const char *v[] = { "vitrine-parity/1", "lightly.sincos", "{}", "{\"fn\": \"sincos\"}" };
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (!CHECK_OK(vt_st_write(&e, 1, k, v, 4, &bytes, &len), "write")) return;
    vt_parity_result r;
    if (WASM32)
        CHECK_ERR(vt_parity_run(bytes, len, NULL, 0, &r), VT_ERR_NOMEM, "do not fit in memory",
                  "sin-cos key naming 17 GB");
    else
        CHECK_ERR(vt_parity_run(bytes, len, NULL, 0, &r), VT_ERR_FORMAT, "68723671040 values",
                  "sin-cos key naming 17 GB");
    CHECK(!r.pass, "passed");
    vt_parity_free(&r);
    free(bytes);
    float tab[4];
    CHECK_ERR(vt_sincos_table(tab, 1 << 24, 1 << 20, 0), VT_ERR_NOMEM, "address", "sin-cos 2^64 floats");
    if (WASM32)
        CHECK_ERR(vt_sincos_table(tab, 65536, 1024, 64), VT_ERR_NOMEM, "address", "sin-cos 2^36 floats");
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
        long long sg[2] = { 2, 4 }, sb[2] = { 1, 4 };
        vt_st_entry eg = { "expect/sincos.d4.g1.p1", VT_DT_F32, 2, sg, good },
                    eb = { "expect/sincos.d4.g1.p0", VT_DT_F32, 2, sb, bad };
        vt_st_entry e[2] = { order ? eb : eg, order ? eg : eb };
        const char *k[] = { "format", "module", "config", "call" };
        const char *v[] = { "vitrine-parity/1", "lightly.sincos", "{}", "{\"fn\": \"sincos\"}" };
        uint8_t *bytes = NULL;
        size_t len = 0;
        if (!CHECK_OK(vt_st_write(e, 2, k, v, 4, &bytes, &len), "write")) return;
        vt_parity_result r;
        CHECK_ERR(vt_parity_run(bytes, len, NULL, 0, &r), VT_ERR_FORMAT,
                  "expect/sincos.d4.g1.p0 holds an infinity (element 2 of [1, 4]): the reference is broken",
                  "an infinite expected value");
        CHECK(!r.pass && r.status == VT_ERR_FORMAT, "order %d: pass %d status %d", order, r.pass, r.status);
        char *js = NULL;
        size_t n = 0;
        if (CHECK_OK(vt_parity_json(&r, NULL, &js, &n), "json")) {
            /* no inf / nan; null only for the absent torch32 errors (these tensors have no torch32/ twin) */
            CHECK(strstr(js, "\"error\": \"expect/sincos.d4.g1.p0 holds an infinity") &&
                      !strstr(js, ": inf") && !strstr(js, ": nan") && !strstr(js, "\"err\": null") &&
                      strstr(js, "\"max_torch32_err\": null"),
                  "JSON: %s", js);
            free(js);
        }
        vt_parity_free(&r);
        free(bytes);
    }
}

/* issue 22: a parity file's metadata checked field by field before any tensor is read (harness/
 * parity.c check_meta), its JSON errors naming the field, never a byte offset */
static void test_parity_meta(void) {
    float w[4] = { 1, 2, 3, 4 };
    long long sh[1] = { 4 };
    vt_st_entry e[2] = { { "param/w", VT_DT_F32, 1, sh, w }, { "input/grad.0", VT_DT_F32, 1, sh, w } };
    const char *adamw_cfg = "{\"betas\": [0.9, 0.95], \"eps\": 1e-08, \"lr\": 0.001, \"weight_decay\": 0.05}";
    struct {
        const char *module, *config, *call, *word;
    } cases[] = {
        { "torch.optim.AdamW", adamw_cfg, "{\"fn\": \"adamw\", \"steps\": 2.5}",
          "metadata call.steps: 2.5 is not a whole number" },
        { "torch.optim.AdamW", adamw_cfg, "{\"fn\": \"adamw\", \"steps\": 0}",
          "metadata call.steps: 0 is outside [1, 100000]" },
        { "torch.optim.AdamW", adamw_cfg, "{\"fn\": \"adamw\", \"steps\": 1, \"steps\": 2}",
          "metadata call.steps appears twice" },
        { "torch.optim.AdamW", "{\"betas\": [0.9, 1], \"eps\": 1e-08, \"lr\": 0.001, \"weight_decay\": 0}",
          "{\"fn\": \"adamw\", \"steps\": 1}", "metadata config.betas[1]: a number in [0, 1) is needed" },
        { "torch.optim.AdamW", "{\"betas\": [0.9, 0.95], \"eps\": 1e-08, \"lr\": 1e300, \"weight_decay\": 0}",
          "{\"fn\": \"adamw\", \"steps\": 1}", "metadata config.lr: 1e+300 is outside [0, 1000]" },
        { "torch.optim.AdamW", "{\"betas\": [0.9, 0.95], \"eps\": -1, \"lr\": 0.001, \"weight_decay\": 0}",
          "{\"fn\": \"adamw\", \"steps\": 1}", "metadata config.eps: -1 is outside [0, 1]" },
        { "torch.optim.AdamW", "{\"betas\": [0.9, 0.95], \"lr\": 0.001}", "{\"fn\": \"adamw\", \"steps\": 1}",
          "metadata config.eps: a number is needed" },
        { "torch.optim.AdamW", adamw_cfg, "{\"fn\": \"adamw\", \"steps\": 1, \"lr\": 2}",
          "unsupported call option 'lr'" },
        { "timm.VisionTransformer", "{}", "{\"fn\": \"forward\", \"norm\": \"yes\"}",
          "metadata call.norm: true or false is needed" },
        { "lightly.MaskedCausalVisionTransformer", "{}", "{\"fn\": \"forward_features\", \"is_causal\": 1}",
          "metadata call.is_causal: true or false" },
        { "timm.VisionTransformer", "{}", "{\"fn\": 5}", "metadata call.fn: the call's name" },
        { "timm.VisionTransformer", "{}", "{\"fn\": ", "metadata call is not JSON (unexpected end of input" },
        { "timm.VisionTransformer", "{\"encoder\": {\"img_size\": 8, \"img_size\": 9}}",
          "{\"fn\": \"forward\"}", "metadata config.encoder.img_size appears twice" },
        { "timm.VisionTransformer", "[1]", "{\"fn\": \"forward\"}",
          "metadata config and call must be JSON objects" },
        { "nope.Module", "{}", "{\"fn\": \"forward\"}", "unsupported module 'nope.Module'" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *k[] = { "format", "module", "config", "call" },
                   *v[] = { "vitrine-parity/1", cases[i].module, cases[i].config, cases[i].call };
        uint8_t *bytes = NULL;
        size_t len = 0;
        if (!CHECK_OK(vt_st_write(e, 2, k, v, 4, &bytes, &len), "write")) continue;
        vt_parity_result r;
        CHECK_ERR(vt_parity_run(bytes, len, NULL, 0, &r), VT_ERR_FORMAT, cases[i].word,
                  WHAT("module %s, config %s, call %s", cases[i].module, cases[i].config, cases[i].call));
        CHECK(!strstr(r.error, "at byte"), "a byte offset instead of the field: %s", r.error);
        vt_parity_free(&r);
        free(bytes);
    }
}

/* ---- training state ---- */

static void test_train_state(void) {
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_MAE, 8, 4, 8, 1, 2, 2.0f);
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), "create")) return;
    CHECK_OK(vt_init_weights(m, 1), "init");
    vt_train_config t;
    vt_train_config_default(&t, VT_KIND_MAE);
    struct {
        const char *what;
        vt_train_config t;
    } bad[] = { { "lr inf", t },  { "lr nan", t },    { "lr 1e4", t },
                { "eps inf", t }, { "beta1 1", t },   { "warmup", t },
                { "total", t },   { "seed 2^60", t }, { "weight_decay -1", t } };
    bad[0].t.lr = INFINITY;
    bad[1].t.lr = NAN;
    bad[2].t.lr = 1e4f;
    bad[3].t.eps = INFINITY;
    bad[4].t.beta1 = 1;
    bad[5].t.warmup_steps = 2000000001L;
    bad[6].t.total_steps = -1;
    bad[7].t.seed = 1ULL << 60;
    bad[8].t.weight_decay = -1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_ERR(vt_trainer_init(m, &bad[i].t), VT_ERR_ARG, "training config",
                  WHAT("trainer_init %s", bad[i].what));
    t.total_steps = 10;
    t.warmup_steps = 2;
    t.seed = 7;
    if (!CHECK_OK(vt_trainer_init(m, &t), "trainer_init")) {
        vt_model_free(m);
        return;
    }
    float img[2 * 3 * 8 * 8], loss;
    tu_rng r = { 3 };
    tu_fill_normal(&r, img, sizeof img / 4, 0, 1);
    CHECK_OK(vt_train_step(m, img, 2, &loss), "step");
    /* a batch whose masks alone exceed a 32-bit address space: refused before any allocation (the
     * images pointer is never read: the refusal comes first) */
    if (WASM32)
        CHECK_ERR(vt_train_step(m, img, 2000000000, &loss), VT_ERR_NOMEM, "address space",
                  "batch 2e9 in wasm32");
    uint8_t *st = NULL;
    size_t len = 0;
    if (!CHECK_OK(vt_train_state_save(m, &st, &len), "save")) {
        vt_model_free(m);
        return;
    }

    /* untrusted train_config numbers: refused before any conversion, the model unchanged */
    const char *tc_ok =
        "\"lr\": 0.00015, \"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-08, \"weight_decay\": 0.05, "
        "\"clip_norm\": 0, \"mask_ratio\": 0.75";
    struct {
        const char *key, *val, *word;
    } cases[] = {
        { "train_config", "{%s, \"warmup_steps\": 1e300, \"total_steps\": 10, \"seed\": 7}", "warmup_steps" },
        { "train_config", "{%s, \"warmup_steps\": 2, \"total_steps\": 10, \"seed\": -1}", "seed" },
        { "train_config", "{%s, \"warmup_steps\": 2, \"total_steps\": 10, \"seed\": 1e30}", "seed" },
        { "train_config", "{%s, \"warmup_steps\": 2.5, \"total_steps\": 10, \"seed\": 7}", "warmup_steps" },
        { "train_config", "{%s, \"warmup_steps\": 2, \"total_steps\": -3, \"seed\": 7}", "total_steps" },
        { "train_config", "{%s, \"warmup_steps\": 2, \"total_steps\": 10, \"seed\": 7, \"lr\": 1e39}", "lr" },
        { "step", "9223372036854775807", "step" },
        { "step", "-1", "step" },
        { "step", "", "step" },
        { "step", "3x", "step" },
        { "step", "+3", "step" },
        { "step", " 3", "step" },
        { "step", "2000000001", "step" },
        { "step", "99999999999999999999999999", "step" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char val[600];
        snprintf(val, sizeof val, cases[i].val, tc_ok);
        if (i == 5) /* lr twice is a duplicate key: replace the first instead */
            snprintf(
                val, sizeof val,
                "{\"lr\": 1e39, \"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-08, \"weight_decay\": 0.05, "
                "\"clip_norm\": 0, \"mask_ratio\": 0.75, \"warmup_steps\": 2, \"total_steps\": 10, \"seed\": "
                "7}");
        size_t bl = 0;
        uint8_t *b = tu_restate(st, len, cases[i].key, val, NULL, 0, NULL, &bl);
        if (!CHECK(b, "restate %s", val)) continue;
        CHECK_ERR(vt_train_state_load(m, b, bl), VT_ERR_FORMAT, cases[i].word,
                  WHAT("%s = %s", cases[i].key, val));
        CHECK(tu_same_state(m, st, len), "a refused state (%s) changed the model", val);
        free(b);
    }
    /* the largest step count loads; AdamW then refuses to count past it instead of overflowing */
    {
        size_t bl = 0;
        uint8_t *b = tu_restate(st, len, "step", "2000000000", NULL, 0, NULL, &bl);
        if (CHECK(b, "restate") && CHECK_OK(vt_train_state_load(m, b, bl), "step 2000000000")) {
            CHECK_ERR(vt_train_step(m, img, 2, &loss), VT_ERR_STATE, "most it counts",
                      "a step past VT_MAX_STEPS");
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
            CHECK_ERR(vt_train_state_load(m, b, len), VT_ERR_FORMAT, word,
                      WHAT("bit flip in %s", f.tensors[i].name));
            free(b);
        }
        CHECK(tu_same_state(m, st, len), "a damaged state changed the model");
        vt_st_free(&f);
    }
    {
        size_t bl = 0;
        uint8_t *b = tu_restate(st, len, "crc32", "{\"param/x\": \"00000000\"}", NULL, 0, NULL, &bl);
        CHECK_ERR(vt_train_state_load(m, b, bl), VT_ERR_FORMAT, "crc32", "checksums of other tensors");
        free(b);
        b = tu_restate(st, len, "crc32", NULL, NULL, 0, NULL,
                       &bl); /* a state from before checksums: loads as before */
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

/* issue 22: the values of a loaded state, and of every update. A state whose CRCs are right may
 * still hold a NaN, an infinity or a negative second moment (crafted, or saved by an older
 * engine): refused by name. An update that goes non-finite from finite values (m / eps past
 * float's range) is caught by the check fused into AdamW: the step fails, nothing saves the state,
 * no step runs, until a good state is loaded. The metadata alone is checked without a model
 * (vt_train_state_check), its JSON errors naming the field. */
static uint8_t *with_value(const uint8_t *bytes, size_t len, const char *tensor, size_t at, float x) {
    uint8_t *b = tu_xmalloc(len);
    memcpy(b, bytes, len);
    vt_st_file f;
    if (vt_st_parse(b, len, &f)) {
        free(b);
        return NULL;
    }
    const vt_st_tensor *t = vt_st_find(&f, tensor);
    if (t) memcpy(b + (t->data - b) + 4 * at, &x, 4);
    vt_st_free(&f);
    if (!t) {
        free(b);
        return NULL;
    }
    /* the CRC-32s written afresh: the values, not the bytes, are what is refused */
    size_t n = 0;
    uint8_t *fixed = tu_restate(b, len, "crc32", NULL, NULL, 0, NULL, &n);
    free(b);
    return fixed;
}

/* a tiny model of `kind` (8 px, patch 4, width 8, one block), initialised; NULL on failure */
static vt_model *tiny_model(vt_kind kind) {
    vt_model_config c;
    tu_tiny_config(&c, kind, 8, 4, 8, 1, 2, 2.0f);
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), "create")) return NULL;
    vt_init_weights(m, 1);
    return m;
}

static void test_state_values(void) {
    vt_model *m = tiny_model(VT_KIND_MAE);
    if (!m) return;
    vt_train_config t;
    vt_train_config_default(&t, VT_KIND_MAE);
    t.seed = 3;
    CHECK_OK(vt_trainer_init(m, &t), "trainer_init");
    float img[2 * 3 * 8 * 8], loss;
    tu_rng r = { 5 };
    tu_fill_normal(&r, img, sizeof img / 4, 0, 1);
    CHECK_OK(vt_train_step(m, img, 2, &loss), "step");
    uint8_t *st = NULL;
    size_t len = 0;
    if (!CHECK_OK(vt_train_state_save(m, &st, &len), "save")) {
        vt_model_free(m);
        return;
    }
    CHECK_OK(vt_train_state_check(st, len), "the metadata of a good state, with no model");
    const char *p0 = vt_param_name(m, 1); /* a trainable tensor (the encoder's patch embedding) */
    char name[3][200];
    snprintf(name[0], sizeof name[0], "param/%s", p0);
    snprintf(name[1], sizeof name[1], "adam_m/%s", p0);
    snprintf(name[2], sizeof name[2], "adam_v/%s", p0);
    struct {
        int tensor;
        float x;
        const char *word;
    } bad[] = { { 0, NAN, "non-finite (nan at element 3)" },
                { 0, INFINITY, "non-finite (inf at element 3)" },
                { 1, -INFINITY, "non-finite" },
                { 1, NAN, "non-finite" },
                { 2, NAN, "non-finite" },
                { 2, -1.0f, "negative: a second moment never is (-1 at element 3)" } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *b = with_value(st, len, name[bad[i].tensor], 3, bad[i].x);
        if (!CHECK(b, "crafting %s", name[bad[i].tensor])) continue;
        char word[300];
        snprintf(word, sizeof word, "training state: %s %s", name[bad[i].tensor], bad[i].word);
        CHECK_ERR(vt_train_state_load(m, b, len), VT_ERR_FORMAT, word,
                  WHAT("%s[3] = %g", name[bad[i].tensor], bad[i].x));
        CHECK(tu_same_state(m, st, len), "a state with %s[3] = %g changed the model", name[bad[i].tensor],
              bad[i].x);
        free(b);
    }
    /* the metadata: a generator of zeros, train_config's errors by field, a model_config checked without a model */
    struct {
        const char *key, *val, *word;
    } meta[] = {
        { "rng", "00000000000000000000000000000000", "rng is all zero" },
        { "rng", "0123456789abcdefXYZ0000000000000",
          "rng '0123456789abcdefXYZ0000000000000' is not 32 hex digits" },
        { "train_config", "{\"lr\": 0.001, \"lr\": 0.002}", "training state: train_config.lr appears twice" },
        { "train_config", "{\"lr\": ", "training state: train_config is not JSON (unexpected end of input" },
        { "train_config", "[1]", "train_config is not a JSON object" },
        { "kind", "aim", "kind 'aim' is not its model_config's" },
        { "kind", "nope", "kind 'nope' is not a model kind" },
        { "kind", NULL, "metadata incomplete: no kind" },
    };
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) {
        size_t bl = 0;
        uint8_t *b = tu_restate(st, len, meta[i].key, meta[i].val, NULL, 0, NULL, &bl);
        if (!CHECK(b, "restate")) continue;
        const char *v = meta[i].val ? meta[i].val : "(none)";
        CHECK_ERR(vt_train_state_load(m, b, bl), VT_ERR_FORMAT, meta[i].word,
                  WHAT("%s = %s", meta[i].key, v));
        /* (without a model, another kind reads model_config as its own: refused there, by its field) */
        CHECK_ERR(vt_train_state_check(b, bl), VT_ERR_FORMAT,
                  strcmp(v, "aim") ? meta[i].word : "training state: model_config: ",
                  WHAT("check: %s = %s", meta[i].key, v));
        CHECK(tu_same_state(m, st, len), "a refused state changed the model");
        free(b);
    }
    {
        size_t bl = 0;
        uint8_t *b = tu_restate(st, len, "model_config", "{\"encoder\": {\"img_size\": 10000000}}", NULL, 0,
                                NULL, &bl);
        CHECK_ERR(vt_train_state_check(b, bl), VT_ERR_FORMAT,
                  "training state: model_config: config: img_size", "model_config, no model");
        free(b);
    }
    /* an update that goes non-finite from finite values: m / eps past float's range */
    m->opt.m[0] = 3e38f;
    m->opt.v[0] = 0.0f;
    long before = vt_train_step_count(m);
    int rc = vt_train_step(m, img, 2, &loss);
    CHECK_ERR(rc, VT_ERR_NUMERIC, "made param/", "an update past float's range");
    CHECK(strstr(vt_last_error(), "non-finite") &&
              strstr(vt_last_error(), "the last good state is the last one saved"),
          "message: %s", vt_last_error());
    uint8_t *out = NULL;
    size_t ol = 0;
    CHECK_ERR(vt_train_state_save(m, &out, &ol), VT_ERR_NUMERIC, "not saved: the update of step",
              "saving a state gone non-finite");
    CHECK_ERR(vt_save_safetensors(m, "", "", &out, &ol), VT_ERR_NUMERIC, "not saved", "its weights");
    CHECK(out == NULL, "bytes returned for a refused save");
    CHECK_ERR(vt_train_step(m, img, 2, &loss), VT_ERR_STATE, "load a training state", "a step after it");
    CHECK(vt_train_step_count(m) == before + 1, "steps %ld, then %ld", before, vt_train_step_count(m));
    /* a good state loaded: training goes on, and saves */
    CHECK_OK(vt_train_state_load(m, st, len), "the last good state, loaded again");
    CHECK_OK(vt_train_step(m, img, 2, &loss), "a step after it");
    CHECK_OK(vt_train_state_save(m, &out, &ol), "saved again");
    free(out);
    /* a NaN put into the parameters by hand: never saved either */
    m->pt.data[2] = NAN;
    CHECK_ERR(vt_train_state_save(m, &out, &ol), VT_ERR_NUMERIC, "non-finite (nan at element",
              "a NaN parameter, state");
    CHECK_ERR(vt_save_safetensors(m, "", "", &out, &ol), VT_ERR_NUMERIC, "not saved",
              "a NaN parameter, weights");
    free(st);
    vt_model_free(m);
}

/* issue 22: weights files hold values too. A NaN, an infinity, or a float64 past float's range
 * loaded as weights is refused by tensor and element, the model unchanged (fuzz_weights found such
 * a file loading, then its weights refused by the save: what loads must save). */
static void test_weights_values(void) {
    vt_model *m = tiny_model(VT_KIND_TIMM);
    if (!m) return;
    uint8_t *w = NULL, *again = NULL;
    size_t len = 0, len2 = 0;
    if (!CHECK_OK(vt_save_safetensors(m, "", "", &w, &len), "save")) {
        vt_model_free(m);
        return;
    }
    const char *name = vt_param_name(m, 1);
    const float bad[] = { NAN, INFINITY, -INFINITY };
    for (int i = 0; i < 3; i++) {
        uint8_t *b = tu_xmalloc(len);
        memcpy(b, w, len);
        vt_st_file f;
        if (CHECK_OK(vt_st_parse(b, len, &f), "parse")) {
            const vt_st_tensor *t = vt_st_find(&f, name);
            if (CHECK(t, "no tensor %s", name)) memcpy(b + (t->data - b) + 4 * 5, &bad[i], 4);
            vt_st_free(&f);
            CHECK_ERR(vt_load_safetensors(m, b, len, "", ""), VT_ERR_FORMAT, "holds",
                      WHAT("%s[5] = %g", name, bad[i]));
            CHECK(strstr(vt_last_error(), name) &&
                      strstr(vt_last_error(), "at element 5: weights must be finite"),
                  "message: %s", vt_last_error());
        }
        free(b);
    }
    /* float64 values that are finite as doubles, not as floats */
    vt_st_file f;
    if (CHECK_OK(vt_st_parse(w, len, &f), "parse")) {
        vt_st_entry e[64];
        double *d = NULL;
        if (CHECK(f.n <= 64, "tensors")) {
            for (size_t i = 0; i < f.n; i++) {
                const vt_st_tensor *t = &f.tensors[i];
                e[i] = (vt_st_entry){ t->name, t->dtype, t->ndim, t->shape, t->data };
                if (strcmp(t->name, name)) continue;
                d = tu_xmalloc(t->numel * sizeof *d);
                for (size_t j = 0; j < t->numel; j++) d[j] = j == 7 ? 1e300 : 0.5;
                e[i].dtype = VT_DT_F64;
                e[i].data = d;
            }
            uint8_t *b = NULL;
            size_t bl = 0;
            if (CHECK_OK(vt_st_write(e, f.n, NULL, NULL, 0, &b, &bl), "write"))
                CHECK_ERR(vt_load_safetensors(m, b, bl, "", ""), VT_ERR_FORMAT, "holds inf at element 7",
                          "a float64 of 1e300");
            free(b);
        }
        free(d);
        vt_st_free(&f);
    }
    CHECK_OK(vt_save_safetensors(m, "", "", &again, &len2), "save after the refusals");
    CHECK(len2 == len && !memcmp(again, w, len), "a refused file changed the weights");
    free(again);
    free(w);
    vt_model_free(m);
}

/* issue 22 (found by fuzz_api): a backward given no list of upstream gradients but a count reads
 * none of them (all zero, as a NULL entry is) instead of dereferencing NULL */
static void test_backward_no_douts(void) {
    vt_model *m = tiny_model(VT_KIND_LIGHTLY);
    if (!m) return;
    float img[2 * 3 * 8 * 8], dimg[2 * 3 * 8 * 8] = { 0 };
    tu_rng r = { 9 };
    tu_fill_normal(&r, img, sizeof img / 4, 0, 1);
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = 2;
    for (int fn = VT_FN_ENCODE; fn <= VT_FN_INTERMEDIATES_NORM; fn++) {
        if (!CHECK_OK(vt_forward(m, (vt_fn)fn, &in, 1), WHAT("forward %d", fn))) continue;
        CHECK_OK(vt_backward(m, NULL, vt_output_count(m), dimg, 0), WHAT("backward %d, douts NULL", fn));
        int zero = 1;
        for (size_t i = 0; i < sizeof dimg / 4; i++) zero &= dimg[i] == 0.0f;
        CHECK(zero, "call %d: zero upstream gradients gave non-zero image gradients", fn);
    }
    vt_model_free(m);
}

int main(void) {
    test_config_sizes();
    test_ptable();
    test_sincos_parity();
    test_parity_nonfinite();
    test_parity_meta();
    test_train_state();
    test_state_values();
    test_weights_values();
    test_backward_no_douts();
    return tu_finish();
}
