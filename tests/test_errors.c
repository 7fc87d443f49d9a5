/* test_errors.c: every bad input gets its own status and a message naming the problem, and
 * nothing crashes (run it under ASan/UBSan too). Also the safetensors save -> load round trip
 * (bitwise, with model/file prefixes), a NaN image in the MAE loss, and parity on corrupt files. */
#include "test_util.h"
#include "parity.h"
#include "safetensors.h"

static vt_model *tiny(vt_kind kind, tu_rng *r) {
    vt_model_config c;
    tu_tiny_config(&c, kind, 12, 4, 12, 2, 2, 2.0f);
    if (kind == VT_KIND_TIMM) c.enc.mask_token = 0;
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), "create")) return NULL;
    tu_init_params(m, r);
    return m;
}

static void test_inputs(void) {
    tu_rng r = { 1 };
    vt_model *m = tiny(VT_KIND_LIGHTLY, &r); /* L = 9 + 1 = 10 */
    if (!m) return;
    float img[2 * 3 * 12 * 12];
    tu_fill_normal(&r, img, sizeof img / 4, 0, 1);
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = img;
    /* batch */
    in.batch = 0;
    CHECK_ERR(vt_forward(m, VT_FN_ENCODE, &in, 1), VT_ERR_ARG, "batch", "batch 0");
    in.batch = -3;
    CHECK_ERR(vt_forward(m, VT_FN_ENCODE, &in, 1), VT_ERR_ARG, "batch", "batch -3");
    vt_plan_bytes pb;
    in.batch = 0;
    CHECK_ERR(vt_plan(m, VT_FN_ENCODE, &in, 1, &pb), VT_ERR_ARG, "batch", "vt_plan batch 0");
    in.batch = 2;
    in.images = NULL;
    CHECK_ERR(vt_forward(m, VT_FN_ENCODE, &in, 1), VT_ERR_ARG, "images", "images NULL");
    in.images = img;
    CHECK_ERR(vt_forward(m, VT_FN_ENCODE, NULL, 1), VT_ERR_ARG, "NULL", "inputs NULL");
    /* backward without forward, after a no-grad forward, after a failed forward */
    CHECK_ERR(vt_backward(m, NULL, 0, NULL, 1), VT_ERR_STATE, "forward", "vt_backward before any forward");
    CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 0), "no-grad forward");
    CHECK_ERR(vt_backward(m, NULL, 0, NULL, 1), VT_ERR_STATE, "need_grad",
              "vt_backward after a no-grad forward");
    CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 1), "forward");
    in.batch = 0;
    vt_forward(m, VT_FN_ENCODE, &in, 1);
    CHECK_ERR(vt_backward(m, NULL, 0, NULL, 1), VT_ERR_STATE, "forward",
              "vt_backward after a failed forward");
    CHECK(vt_output_count(m) == 0 && vt_output(m, 0, NULL, NULL) == NULL,
          "outputs of a failed forward are still visible");
    in.batch = 2;
    CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 1), "forward");
    CHECK_ERR(vt_backward(m, NULL, 5, NULL, 1), VT_ERR_ARG, "upstream", "5 douts for a 1-output call");
    CHECK(vt_output(m, 3, NULL, NULL) == NULL, "vt_output(3) of a 1-output call is not NULL");
    /* indices */
    int64_t neg[2 * 2] = { 0, -1, 1, 2 }, big[2 * 2] = { 0, 1, 1, 10 }, rep[2 * 2] = { 0, 1, 3, 3 },
                    ok2[2 * 2] = { 0, 1, 2, 3 };
    int64_t many[2 * 11];
    for (int i = 0; i < 22; i++) many[i] = i % 10; /* in range, one repeat per row */
    /* keep_ok: idx_keep is a gather (lightly takes repeats, and so more than L per row);
     * idx_mask is a scatter and refuses both */
    const struct {
        const char *what;
        const int64_t *idx;
        int n;
        const char *word;
        int keep_ok;
    } cases[] = {
        { "negative", neg, 2, "out of range", 0 }, { ">= L", big, 2, "out of range", 0 },
        { "repeated", rep, 2, "repeats", 1 },      { "more than L per row", many, 11, "11", 1 },
        { "zero per row", ok2, 0, "indices", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char w[96];
        memset(&in, 0, sizeof in);
        in.images = img;
        in.batch = 2;
        in.idx_keep = cases[i].idx;
        in.n_keep = cases[i].n;
        snprintf(w, sizeof w, "idx_keep %s", cases[i].what);
        if (cases[i].keep_ok) {
            CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 1), w);
        } else {
            CHECK_ERR(vt_forward(m, VT_FN_ENCODE, &in, 1), VT_ERR_ARG, cases[i].word, w);
            CHECK(strstr(vt_last_error(), "idx_keep") != NULL, "%s: message does not name idx_keep: %s", w,
                  vt_last_error());
        }
        memset(&in, 0, sizeof in);
        in.images = img;
        in.batch = 2;
        in.idx_mask = cases[i].idx;
        in.n_mask = cases[i].n;
        snprintf(w, sizeof w, "idx_mask %s", cases[i].what);
        CHECK_ERR(vt_forward(m, VT_FN_ENCODE, &in, 1), VT_ERR_ARG, cases[i].word, w);
        CHECK(strstr(vt_last_error(), "idx_mask") != NULL, "%s: message does not name idx_mask: %s", w,
              vt_last_error());
    }
    /* idx_mask and mask together */
    uint8_t bm[2 * 10] = { 0 };
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = 2;
    in.idx_mask = ok2;
    in.n_mask = 2;
    in.mask = bm;
    CHECK_ERR(vt_forward(m, VT_FN_ENCODE, &in, 1), VT_ERR_ARG, "idx_mask and mask", "idx_mask + mask");
    /* wrong call for the kind */
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = 2;
    CHECK_ERR(vt_forward(m, VT_FN_LOSS, &in, 1), VT_ERR_ARG, "loss", "loss on a lightly encoder");
    CHECK_ERR(vt_forward(m, (vt_fn)42, &in, 1), VT_ERR_ARG, "unknown", "unknown fn 42");
    /* after all that, a good call still works */
    CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 1), "good forward after errors");
    CHECK_OK(vt_backward(m, NULL, 0, NULL, 1), "good backward after errors");
    vt_model_free(m);

    /* timm kind has no mask token: idx_mask / mask are an error */
    m = tiny(VT_KIND_TIMM, &r);
    if (m) {
        memset(&in, 0, sizeof in);
        in.images = img;
        in.batch = 2;
        in.idx_mask = ok2;
        in.n_mask = 2;
        CHECK_ERR(vt_forward(m, VT_FN_ENCODE, &in, 1), VT_ERR_ARG, "mask token",
                  "idx_mask without a mask token");
        vt_model_free(m);
    }
    /* timm's forward_intermediates: no token masks (lightly's takes them), blocks in range; its
     * indices as timm's feature_take_indices reads them */
    m = tiny(VT_KIND_LIGHTLY, &r);
    if (m) {
        memset(&in, 0, sizeof in);
        in.images = img;
        in.batch = 2;
        in.idx_keep = ok2;
        in.n_keep = 2;
        CHECK_ERR(vt_forward(m, VT_FN_TIMM_INTERMEDIATES, &in, 1), VT_ERR_ARG,
                  "lightly's forward_intermediates", "timm's forward_intermediates with idx_keep");
        in.idx_keep = NULL;
        in.inter.take = 4; /* block 2 of 2 */
        CHECK_ERR(vt_forward(m, VT_FN_TIMM_INTERMEDIATES, &in, 1), VT_ERR_ARG, "block 2 taken",
                  "block 2 of a 2-block model");
        in.inter.take = 2;
        in.inter.stop_early = in.inter.intermediates_only = 1;
        CHECK_OK(vt_forward(m, VT_FN_TIMM_INTERMEDIATES, &in, 1), "block 1, stop_early, intermediates only");
        CHECK(vt_output_count(m) == 1, "one output (block 1's), got %d", vt_output_count(m));
        CHECK_ERR(vt_backward(m, NULL, 2, NULL, 1), VT_ERR_ARG, "upstream", "2 douts for a 1-output call");
        vt_model_free(m);
    }
    uint64_t take = 0;
    int idx[3] = { 0, -1, 1 };
    CHECK(vt_take_indices(4, idx, 3, 0, &take) == VT_OK && take == (1 | 2 | 8), "indices [0, -1, 1]: %llx",
          (unsigned long long)take);
    CHECK(vt_take_indices(4, NULL, -1, 2, &take) == VT_OK && take == (4 | 8), "indices 2: the last two");
    CHECK(vt_take_indices(4, NULL, -1, 0, &take) == VT_OK && take == 15, "indices None: every block");
    CHECK_ERR(vt_take_indices(4, NULL, -1, 5, &take), VT_ERR_ARG, "last-n (5) is out of range (1 to 4)",
              "indices 5 of 4 blocks");
    idx[1] = -5;
    CHECK_ERR(vt_take_indices(4, idx, 3, 0, &take), VT_ERR_ARG, "feature index -1 is out of range (0 to 3)",
              "index -5 of 4 blocks");
    CHECK_ERR(vt_take_indices(4, idx, 0, 0, &take), VT_ERR_ARG, "empty", "an empty list");
    /* causal kind takes no idx_keep */
    m = tiny(VT_KIND_CAUSAL, &r);
    if (m) {
        memset(&in, 0, sizeof in);
        in.images = img;
        in.batch = 2;
        in.idx_keep = ok2;
        in.n_keep = 2;
        CHECK_ERR(vt_forward(m, VT_FN_ENCODE, &in, 1), VT_ERR_ARG, "idx_keep", "idx_keep on the causal ViT");
        vt_model_free(m);
    }
}

static void test_policies_presets_configs(void) {
    tu_rng r = { 2 };
    vt_model *m = tiny(VT_KIND_LIGHTLY, &r);
    if (!m) return;
    const struct {
        const char *p, *word;
    } bad[] = {
        { "every:0", "every:K" },
        { "every:", "every:K" },
        { "every:2x", "every:K" },
        { "every:-1", "every:K" },
        { "budget:abc", "budget" },
        { "budget:", "budget" },
        { "budget:12XB", "budget" },
        { "budget:-5", "budget" },
        { "foo", "unknown checkpointing policy" },
        { "", "unknown checkpointing policy" },
        { "blockblockblockblockblockblockblockblockblockblockblock", "unknown checkpointing policy" },
    };
    CHECK_OK(vt_set_grad_checkpointing(m, "every:2"), "every:2");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char w[120];
        snprintf(w, sizeof w, "policy '%s'", bad[i].p);
        CHECK_ERR(vt_set_grad_checkpointing(m, bad[i].p), VT_ERR_ARG, bad[i].word, w);
    }
    CHECK_ERR(vt_set_grad_checkpointing(m, NULL), VT_ERR_ARG, "NULL", "policy NULL");
    CHECK(!strcmp(vt_get_grad_checkpointing(m), "every:2"), "a rejected policy replaced the current one: %s",
          vt_get_grad_checkpointing(m));
    const char *good[] = { "none",         "block",         "every:3",     "sqrt", "selective",
                           "budget:300MB", "budget:256MiB", "budget:1000", "true", "off" };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK_OK(vt_set_grad_checkpointing(m, good[i]), good[i]);
    vt_model_free(m);

    vt_vit_config vc;
    CHECK_ERR(vt_preset("vit_huge_patch99", &vc), VT_ERR_ARG, "unknown preset", "unknown preset");
    CHECK_ERR(vt_preset(NULL, &vc), VT_ERR_ARG, "unknown preset", "NULL preset");

    vt_model_config c;
    vt_model *x = NULL;
    /* timm floors the grid (12 / 5: 2 x 2 patches); lightly's MAE patchify does not */
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 12, 5, 12, 2, 2, 2.0f);
    CHECK_OK(vt_model_create(&c, &x), "img_size 12 with patch 5 (a floored grid)");
    vt_model_free(x);
    x = NULL;
    tu_tiny_config(&c, VT_KIND_MAE, 12, 5, 12, 2, 2, 2.0f);
    CHECK_ERR(vt_model_create(&c, &x), VT_ERR_ARG, "multiple", "MAE img_size 12 with patch 5");
    CHECK(x == NULL, "failed create left a model");
    tu_tiny_config(&c, VT_KIND_TIMM, 4, 5, 12, 2, 2, 2.0f);
    CHECK_ERR(vt_model_create(&c, &x), VT_ERR_ARG, "smaller than patch_size", "img_size 4 with patch 5");
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 12, 4, 10, 2, 3, 2.0f);
    CHECK_ERR(vt_model_create(&c, &x), VT_ERR_ARG, "divisible", "embed_dim 10 with 3 heads");
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 12, 4, 12, 2, 2, 2.0f);
    CHECK_ERR(vt_pool_from_name("gem", &c.enc.global_pool), VT_ERR_ARG, "gem", "global_pool gem");
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 12, 4, 12, 2, 2, 2.0f);
    c.enc.distilled = 1;
    CHECK_ERR(vt_model_create(&c, &x), VT_ERR_ARG, "distilled", "distilled lightly");
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 12, 4, 12, 2, 2, 2.0f);
    c.enc.class_token = 0;
    CHECK_ERR(vt_model_create(&c, &x), VT_ERR_ARG, "class_token", "token pool without class token");
    tu_tiny_config(&c, VT_KIND_TIMM, 12, 4, 12, 2, 2, 2.0f);
    c.enc.mask_token = 1;
    CHECK_ERR(vt_model_create(&c, &x), VT_ERR_ARG, "mask_token", "timm kind with a mask token");
    tu_tiny_config(&c, VT_KIND_MAE, 12, 4, 12, 2, 2, 2.0f);
    c.decoder_dim = 10;
    c.decoder_heads = 3;
    CHECK_ERR(vt_model_create(&c, &x), VT_ERR_ARG, "decoder", "MAE decoder_dim 10 / 3 heads");
    tu_tiny_config(&c, VT_KIND_AIM, 12, 4, 12, 2, 2, 2.0f);
    c.enc.class_token = 1;
    vt_pool_from_name("token", &c.enc.global_pool);
    CHECK_ERR(vt_model_create(&c, &x), VT_ERR_ARG, "prefix", "AIM with a class token");
    CHECK_ERR(vt_model_create(NULL, &x), VT_ERR_ARG, "NULL", "create NULL config");

    /* JSON configs */
    const struct {
        const char *j, *word, *what;
        int code;
    } js[] = {
        { "{\"img_size\": 32, \"patch_size\": 4, \"embedd_dim\": 16}", "embedd_dim", "unknown JSON key",
          VT_ERR_ARG },
        { "{\"drop_rate\": 0.1}", "drop_rate", "drop_rate 0.1", VT_ERR_ARG },
        { "{\"drop_path_rate\": 0.2}", "drop_path_rate", "drop_path_rate 0.2", VT_ERR_ARG },
        { "{\"pos_embed\": \"rope\"}", "pos_embed", "pos_embed rope", VT_ERR_ARG },
        { "{\"depth\": -1}", "depth", "negative depth", VT_ERR_ARG },
        { "{\"mlp_ratio\": \"4\"}", "mlp_ratio", "mlp_ratio as a string", VT_ERR_ARG },
        { "{\"qk_norm\": 1}", "qk_norm", "qk_norm as a number", VT_ERR_ARG },
        { "{\"pre_norm\": 1}", "pre_norm", "pre_norm as a number", VT_ERR_ARG },
        { "{\"act_layer\": \"silu\"}", "act_layer", "act_layer silu", VT_ERR_ARG },
        { "{\"norm_layer\": \"batchnorm\"}", "norm_layer", "norm_layer batchnorm", VT_ERR_ARG },
        { "{\"norm_eps\": 0}", "norm_eps", "norm_eps 0", VT_ERR_ARG },
        { "{\"img_size\": [32]}", "img_size", "img_size of one value", VT_ERR_ARG },
        { "{\"weight_init\": \"xavier\"}", "weight_init", "weight_init xavier", VT_ERR_ARG },
        { "{\"attn_layer\": \"diff\"}", "attn_layer", "attn_layer diff", VT_ERR_ARG },
        { "{\"global_pool\": \"gem\"}", "global_pool", "global_pool gem", VT_ERR_ARG },
        { "{\"block_fn\": \"ResPostBlock\"}", "computes timm's Block", "block_fn", VT_ERR_ARG },
        { "{\"mlp_layer\": \"SwiGLU\"}", "computes timm's Mlp", "mlp_layer", VT_ERR_ARG },
        { "{\"embed_layer\": \"HybridEmbed\"}", "timm's PatchEmbed", "embed_layer", VT_ERR_ARG },
        { "{\"dtype\": \"float16\"}", "in float32", "dtype float16", VT_ERR_ARG },
        { "{\"device\": \"cuda\"}", "not a torch device", "device cuda", VT_ERR_ARG },
        { "[1, 2]", "object", "config not an object", VT_ERR_ARG },
        { "{\"img_size\": 32", NULL, "truncated JSON", VT_ERR_FORMAT },
    };
    for (size_t i = 0; i < sizeof js / sizeof js[0]; i++) {
        vt_vit_config_default(&vc);
        CHECK_ERR(vt_vit_config_from_json(js[i].j, strlen(js[i].j), &vc), js[i].code, js[i].word, js[i].what);
    }
    const char *okj =
        "{\"img_size\": 32, \"patch_size\": 8, \"embed_dim\": 16, \"depth\": 1, \"num_heads\": 2, "
        "\"drop_rate\": 0.0, \"fc_norm\": null, \"init_values\": null, \"global_pool\": \"avg\", "
        "\"block_fn\": null, \"mlp_layer\": null, \"embed_layer\": null, \"device\": null, \"dtype\": "
        "\"float32\"}";
    vt_vit_config_default(&vc);
    CHECK_OK(vt_vit_config_from_json(okj, strlen(okj), &vc), "timm kwargs with defaults");
    CHECK(vc.img_size == 32 && vc.patch_size == 8 && vc.embed_dim == 16 && vc.depth == 1 &&
              vc.global_pool == VT_POOL_AVG,
          "JSON config values not taken");
    /* the rest of timm's kwargs and the init-only ones parse; the model is made */
    const char *mapj = "{\"img_size\": [32, 24], \"patch_size\": 8, \"embed_dim\": 16, \"num_heads\": 2, "
                       "\"global_pool\": \"map\", \"pre_norm\": true, \"act_layer\": \"quick_gelu\", "
                       "\"norm_layer\": \"RmsNorm\", \"norm_eps\": 1e-5, \"weight_init\": \"jax\", "
                       "\"fix_init\": true, \"proj_bias\": false, \"scale_mlp_norm\": true}";
    int rc = vt_model_config_from_json(mapj, strlen(mapj), VT_KIND_TIMM, &c);
    CHECK_OK(rc, "timm kwargs (map, pre_norm, quick_gelu, rmsnorm, init-only)");
    if (rc == VT_OK) {
        CHECK(c.enc.img_size == 32 && c.enc.img_width == 24 && c.enc.global_pool == VT_POOL_MAP &&
                  c.enc.act_layer == VT_ACT_QUICK_GELU && c.enc.norm_layer == VT_NORM_RMS &&
                  c.enc.norm_eps == 1e-5,
              "JSON kwargs not taken");
        CHECK_OK(vt_model_create(&c, &x), "global_pool map (JSON) create");
        vt_model_free(x);
        x = NULL;
    }
    const char *mae_bad = "{\"encoder\": {\"img_size\": 32}, \"decoder_width\": 8}";
    CHECK_ERR(vt_model_config_from_json(mae_bad, strlen(mae_bad), VT_KIND_MAE, &c), VT_ERR_ARG,
              "decoder_width", "MAE config unknown key");
    const char *mae_noenc = "{\"decoder_dim\": 8}";
    CHECK_ERR(vt_model_config_from_json(mae_noenc, strlen(mae_noenc), VT_KIND_MAE, &c), VT_ERR_ARG, "encoder",
              "MAE config without encoder");
}

/* ---- safetensors ------------------------------------------------------------------------------------ */
/* Re-writes the parameters of m (F32, names with prefix) with one tensor changed by `mode`. */
enum { DROP, EXTRA, RESHAPE, AS_I64 };
static uint8_t *variant(vt_model *m, int target, int mode, size_t *len) {
    int n = vt_param_count(m);
    vt_st_entry *e = tu_xcalloc((size_t)n + 1, sizeof *e);
    long long(*sh)[4] = tu_xcalloc((size_t)n + 1, sizeof *sh);
    int64_t *ibuf = NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (mode == DROP && i == target) continue;
        e[k].name = vt_param_name(m, i);
        e[k].dtype = VT_DT_F32;
        e[k].ndim = vt_param_ndim(m, i);
        for (int d = 0; d < e[k].ndim; d++) sh[k][d] = vt_param_shape(m, i)[d];
        e[k].shape = sh[k];
        e[k].data = vt_param_data(m, i);
        if (i == target && mode == RESHAPE) { /* same numel, other shape: [a, b] -> [b, a] or [n] -> [1, n] */
            if (e[k].ndim >= 2) {
                long long t = sh[k][0];
                sh[k][0] = sh[k][1];
                sh[k][1] = t;
            } else {
                sh[k][1] = sh[k][0];
                sh[k][0] = 1;
                e[k].ndim = 2;
            }
        }
        if (i == target && mode == AS_I64) {
            ibuf = tu_xcalloc(vt_param_numel(m, i), 8);
            e[k].dtype = VT_DT_I64;
            e[k].data = ibuf;
        }
        k++;
    }
    float extra[3] = { 1, 2, 3 };
    long long esh[1] = { 3 };
    if (mode == EXTRA) {
        e[k].name = "blocks.0.attn.extra_bias";
        e[k].dtype = VT_DT_F32;
        e[k].ndim = 1;
        e[k].shape = esh;
        e[k].data = extra;
        k++;
    }
    uint8_t *out = NULL;
    int rc = vt_st_write(e, (size_t)k, NULL, NULL, 0, &out, len);
    if (rc) {
        CHECK_OK(rc, "vt_st_write");
        out = NULL;
    }
    free(e);
    free(sh);
    free(ibuf);
    return out;
}

static void test_safetensors_io(void) {
    tu_rng r = { 3 };
    vt_model *a = tiny(VT_KIND_TIMM, &r), *b = tiny(VT_KIND_TIMM, &r);
    if (!a || !b) {
        vt_model_free(a);
        vt_model_free(b);
        return;
    }
    /* round trip: save a, load into b (different random params) -> bitwise equal */
    uint8_t *bytes = NULL;
    size_t len = 0;
    CHECK_OK(vt_save_safetensors(a, "", "", &bytes, &len), "save");
    size_t tot = vt_param_total(a);
    float *bsave = tu_xmalloc(tot * 4);
    memcpy(bsave, vt_param_data(b, 0), tot * 4);
    CHECK(memcmp(vt_param_data(a, 0), vt_param_data(b, 0), tot * 4) != 0, "two random inits are equal");
    /* failures first: b must stay untouched */
    int target = vt_param_find(a, "blocks.1.attn.qkv.weight");
    const char *tname = "blocks.1.attn.qkv.weight";
    const struct {
        int mode;
        int code;
        const char *word, *what;
    } bad[] = {
        { DROP, VT_ERR_MISMATCH, "missing", "missing tensor" },
        { EXTRA, VT_ERR_MISMATCH, "unexpected", "unexpected tensor" },
        { RESHAPE, VT_ERR_MISMATCH, "shape", "wrong shape" },
        { AS_I64, VT_ERR_MISMATCH, "I64", "dtype I64" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t vl = 0;
        uint8_t *v = variant(a, target, bad[i].mode, &vl);
        if (!v) continue;
        CHECK_ERR(vt_load_safetensors(b, v, vl, "", ""), bad[i].code, bad[i].word, bad[i].what);
        const char *want = bad[i].mode == EXTRA ? "blocks.0.attn.extra_bias" : tname;
        CHECK(strstr(vt_last_error(), want) != NULL, "%s: message does not name %s: %s", bad[i].what, want,
              vt_last_error());
        CHECK(!memcmp(vt_param_data(b, 0), bsave, tot * 4), "%s: a failed load changed parameters",
              bad[i].what);
        free(v);
    }
    /* truncated bytes: the last tensor runs past the end */
    int last = vt_param_count(a) - 1;
    for (size_t cut = 1; cut <= 9; cut += 4) {
        uint8_t *t = tu_xmalloc(len - cut);
        memcpy(t, bytes, len - cut);
        CHECK_ERR(vt_load_safetensors(b, t, len - cut, "", ""), VT_ERR_FORMAT, vt_param_name(a, last),
                  "truncated file");
        free(t);
    }
    {
        uint8_t *t = tu_xmalloc(5);
        memcpy(t, bytes, 5);
        CHECK_ERR(vt_load_safetensors(b, t, 5, "", ""), VT_ERR_FORMAT, "header", "file of 5 bytes");
        free(t);
    }
    /* lying header: the header length says more than the file holds */
    {
        uint8_t *t = tu_xmalloc(len);
        memcpy(t, bytes, len);
        uint64_t hl = 0;
        for (int i = 0; i < 8; i++) hl |= (uint64_t)t[i] << (8 * i);
        uint64_t lie = hl + len;
        for (int i = 0; i < 8; i++) t[i] = (uint8_t)(lie >> (8 * i));
        CHECK_ERR(vt_load_safetensors(b, t, len, "", ""), VT_ERR_FORMAT, "header length",
                  "header length beyond the file");
        free(t);
    }
    /* lying header: a tensor's data_offsets disagree with its shape (hand-written header) */
    {
        const char *hdr = "{\"norm.weight\":{\"dtype\":\"F32\",\"shape\":[12],\"data_offsets\":[0,44]}}";
        size_t hlen = strlen(hdr), flen = 8 + hlen + 48;
        uint8_t *t = tu_xcalloc(flen, 1);
        for (int i = 0; i < 8; i++) t[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
        memcpy(t + 8, hdr, hlen);
        CHECK_ERR(vt_load_safetensors(b, t, flen, "norm.", "norm."), VT_ERR_FORMAT, "norm.weight",
                  "data_offsets vs shape");
        const char *hdr2 = "{\"norm.weight\":{\"dtype\":\"F32\",\"shape\":[12],\"data_offsets\":[0,4800]}}";
        hlen = strlen(hdr2);
        flen = 8 + hlen + 48;
        uint8_t *t2 = tu_xcalloc(flen, 1);
        for (int i = 0; i < 8; i++) t2[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
        memcpy(t2 + 8, hdr2, hlen);
        CHECK_ERR(vt_load_safetensors(b, t2, flen, "norm.", "norm."), VT_ERR_FORMAT, "norm.weight",
                  "data_offsets beyond the data");
        free(t);
        free(t2);
    }
    CHECK(!memcmp(vt_param_data(b, 0), bsave, tot * 4), "failed loads changed parameters");
    /* the good load */
    CHECK_OK(vt_load_safetensors(b, bytes, len, "", ""), "load round trip");
    CHECK(!memcmp(vt_param_data(a, 0), vt_param_data(b, 0), tot * 4), "save -> load is not bitwise");
    CHECK_ERR(vt_load_safetensors(b, bytes, len, "nosuch.", ""), VT_ERR_ARG, "nosuch.",
              "model prefix matching nothing");
    uint8_t *dummy = NULL;
    size_t dl = 0;
    CHECK_ERR(vt_save_safetensors(a, "nosuch.", "", &dummy, &dl), VT_ERR_ARG, "nosuch.",
              "save prefix matching nothing");
    free(bytes);
    free(bsave);
    vt_model_free(a);
    vt_model_free(b);

    /* prefixes: an MAE model's backbone.vit.* exported under plain timm keys, loaded into timm */
    vt_model_config mc;
    tu_tiny_config(&mc, VT_KIND_MAE, 12, 4, 12, 2, 2, 2.0f);
    vt_model *mae = NULL, *timm = NULL, *lt = NULL;
    CHECK_OK(vt_model_create(&mc, &mae), "MAE create");
    vt_model_config tc = mc;
    tc.kind = VT_KIND_TIMM;
    tc.enc.mask_token = 0;
    CHECK_OK(vt_model_create(&tc, &timm), "timm create");
    vt_model_config lc = mc;
    lc.kind = VT_KIND_LIGHTLY;
    CHECK_OK(vt_model_create(&lc, &lt), "lightly create");
    if (mae && timm && lt) {
        tu_init_params(mae, &r);
        tu_init_params(timm, &r);
        tu_init_params(lt, &r);
        CHECK_OK(vt_save_safetensors(mae, "backbone.vit.", "", &bytes, &len), "save backbone.vit.");
        int rc = vt_load_safetensors(timm, bytes, len, "", "");
        if (CHECK_OK(rc, "load the exported encoder into timm")) {
            int all = 1, n = 0;
            for (int i = 0; i < vt_param_count(timm); i++) {
                char nm[160];
                snprintf(nm, sizeof nm, "backbone.vit.%s", vt_param_name(timm, i));
                int j = vt_param_find(mae, nm);
                if (j < 0) {
                    all = 0;
                    continue;
                }
                n++;
                all &= !memcmp(vt_param_data(timm, i), vt_param_data(mae, j), vt_param_numel(timm, i) * 4);
            }
            CHECK(all && n == vt_param_count(timm), "exported MAE encoder != timm params (%d matched)", n);
        }
        /* the same file into the lightly wrapper's vit.* part (mask_token stays as it was) */
        float mt[12];
        memcpy(mt, vt_param_data(lt, vt_param_find(lt, "mask_token")), sizeof mt);
        rc = vt_load_safetensors(lt, bytes, len, "vit.", "");
        if (CHECK_OK(rc, "load the exported encoder into lightly vit.")) {
            int i = vt_param_find(lt, "vit.blocks.1.mlp.fc2.weight"),
                j = vt_param_find(mae, "backbone.vit.blocks.1.mlp.fc2.weight");
            CHECK(!memcmp(vt_param_data(lt, i), vt_param_data(mae, j), vt_param_numel(lt, i) * 4),
                  "lightly vit. load differs");
            CHECK(!memcmp(vt_param_data(lt, vt_param_find(lt, "mask_token")), mt, sizeof mt),
                  "mask_token changed by a vit. load");
        }
        /* loading with the wrong prefix: every tensor missing */
        CHECK_ERR(vt_load_safetensors(lt, bytes, len, "", ""), VT_ERR_MISMATCH, "missing",
                  "timm keys into the whole lightly model");
        free(bytes);
        /* file prefix: save timm under "vit." and load into the lightly wrapper's vit. part */
        CHECK_OK(vt_save_safetensors(timm, "", "vit.", &bytes, &len), "save timm with file prefix vit.");
        CHECK_OK(vt_load_safetensors(lt, bytes, len, "vit.", "vit."), "load with model and file prefix vit.");
        free(bytes);
    }
    vt_model_free(mae);
    vt_model_free(timm);
    vt_model_free(lt);
}

static void test_nan(void) {
    tu_rng r = { 4 };
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_MAE, 12, 4, 8, 2, 2, 2.0f);
    for (int np = 0; np <= 1; np++) {
        c.norm_pix_loss = np;
        vt_model *m = NULL;
        if (!CHECK_OK(vt_model_create(&c, &m), "MAE create")) continue;
        tu_init_params(m, &r);
        float img[2 * 3 * 12 * 12];
        tu_fill_normal(&r, img, sizeof img / 4, 0, 1);
        int64_t ik[2 * 4], im[2 * 6];
        tu_random_token_mask(&r, 2, 1, 9, 6, ik, im);
        vt_inputs in;
        memset(&in, 0, sizeof in);
        in.images = img;
        in.batch = 2;
        in.idx_keep = ik;
        in.n_keep = 4;
        in.idx_mask = im;
        in.n_mask = 6;
        CHECK_OK(vt_forward(m, VT_FN_LOSS, &in, 1), "MAE loss");
        CHECK(isfinite(vt_loss_value(m)), "finite loss expected");
        /* a NaN pixel in a masked patch (target) and in a kept patch (encoder input) */
        for (int w = 0; w < 2; w++) {
            int64_t tok = w == 0 ? im[0] : ik[1]; /* token index; patch = tok - 1 */
            int pn = (int)tok - 1, row = pn / 3, col = pn % 3;
            size_t px = (size_t)1 * 144 + (size_t)(row * 4 + 1) * 12 + (size_t)(col * 4 + 2);
            float keep = img[px];
            img[px] = NAN;
            char what[64];
            snprintf(what, sizeof what, "NaN pixel in a %s patch (norm_pix %d)", w == 0 ? "masked" : "kept",
                     np);
            CHECK_ERR(vt_forward(m, VT_FN_LOSS, &in, 1), VT_ERR_NUMERIC, "NaN", what);
            CHECK_ERR(vt_backward(m, NULL, 0, NULL, 1), VT_ERR_STATE, NULL, "backward after a NaN loss");
            img[px] = keep;
        }
        img[5] = INFINITY;
        in.images = img;
        /* an Inf pixel: kept or masked, the loss is not finite */
        int rc = vt_forward(m, VT_FN_LOSS, &in, 1);
        CHECK(rc == VT_ERR_NUMERIC, "Inf pixel: rc %d (%s)", rc, vt_last_error());
        vt_model_free(m);
    }
}

static void test_parity_errors(void) {
    int n = 0;
    char **files = tu_list_fixtures(&n);
    const char *pick = NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(tu_base(files[i]), "vit_encode.safetensors")) pick = files[i];
    if (!CHECK(pick != NULL, "vit_encode.safetensors not found in %s", VT_FIXTURES_DIR)) {
        tu_free_list(files, n);
        return;
    }
    size_t len = 0;
    uint8_t *bytes = tu_read_file(pick, &len);
    if (!CHECK(bytes, "cannot read %s", pick)) {
        tu_free_list(files, n);
        return;
    }
    vt_parity_result r;
    /* truncations: in the data, in the header, inside the length */
    size_t cuts[] = { len - 1, len / 2, 200, 7, 0 };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        uint8_t *t = tu_xmalloc(cuts[i]);
        memcpy(t, bytes, cuts[i]);
        int rc = vt_parity_run(t, cuts[i], NULL, 1, &r);
        CHECK(rc == VT_ERR_FORMAT && r.error[0] && !r.pass && r.dump == NULL,
              "parity on %zu of %zu bytes: rc %d pass %d error '%s'", cuts[i], len, rc, r.pass, r.error);
        vt_parity_free(&r);
        free(t);
    }
    /* a bad policy */
    int rc = vt_parity_run(bytes, len, "every:0", 0, &r);
    CHECK(rc == VT_ERR_ARG && strstr(r.error, "every") && !r.pass,
          "parity with policy every:0: rc %d error '%s'", rc, r.error);
    vt_parity_free(&r);
    /* an unknown module: same tensors, metadata rewritten */
    vt_st_file f;
    if (CHECK_OK(vt_st_parse(bytes, len, &f), "parse fixture")) {
        vt_st_entry *e = tu_xcalloc(f.n, sizeof *e);
        for (size_t i = 0; i < f.n; i++) {
            e[i].name = f.tensors[i].name;
            e[i].dtype = f.tensors[i].dtype;
            e[i].ndim = f.tensors[i].ndim;
            e[i].shape = f.tensors[i].shape;
            e[i].data = f.tensors[i].data;
        }
        const char **mk = tu_xcalloc(f.n_meta, sizeof *mk), **mv = tu_xcalloc(f.n_meta, sizeof *mv);
        for (size_t i = 0; i < f.n_meta; i++) {
            mk[i] = f.meta_keys[i];
            mv[i] = !strcmp(f.meta_keys[i], "module") ? "timm.SwinTransformer" : f.meta_vals[i];
        }
        uint8_t *out = NULL;
        size_t ol = 0;
        if (CHECK_OK(vt_st_write(e, f.n, mk, mv, f.n_meta, &out, &ol), "rewrite fixture")) {
            rc = vt_parity_run(out, ol, NULL, 0, &r);
            CHECK(rc != VT_OK && strstr(r.error, "SwinTransformer") && !r.pass,
                  "parity on an unknown module: rc %d error '%s'", rc, r.error);
            vt_parity_free(&r);
            /* sanity: the rewrite itself is fine with the right module */
            free(out);
            for (size_t i = 0; i < f.n_meta; i++) mv[i] = f.meta_vals[i];
            out = NULL;
            if (CHECK_OK(vt_st_write(e, f.n, mk, mv, f.n_meta, &out, &ol), "rewrite fixture")) {
                rc = vt_parity_run(out, ol, NULL, 0, &r);
                CHECK(rc == VT_OK && r.pass, "rewritten fixture does not pass: rc %d error '%s'", rc,
                      r.error);
                vt_parity_free(&r);
            }
            /* a missing parameter tensor */
            vt_st_entry *e2 = tu_xcalloc(f.n, sizeof *e2);
            size_t k = 0;
            const char *dropped = NULL;
            for (size_t i = 0; i < f.n; i++) {
                if (!dropped && !strncmp(e[i].name, "param/", 6) && strstr(e[i].name, "qkv.weight")) {
                    dropped = e[i].name;
                    continue;
                }
                e2[k++] = e[i];
            }
            free(out);
            out = NULL;
            if (dropped && CHECK_OK(vt_st_write(e2, k, mk, mv, f.n_meta, &out, &ol), "rewrite fixture")) {
                rc = vt_parity_run(out, ol, NULL, 0, &r);
                CHECK(rc == VT_ERR_MISMATCH && strstr(r.error, dropped + 6) && !r.pass,
                      "parity without %s: rc %d error '%s'", dropped, rc, r.error);
                vt_parity_free(&r);
            }
            free(e2);
        }
        free(out);
        free(mk);
        free(mv);
        free(e);
        vt_st_free(&f);
    }
    rc = vt_parity_run(NULL, 0, NULL, 0, &r);
    CHECK(rc == VT_ERR_ARG && r.error[0], "parity on NULL bytes: rc %d", rc);
    vt_parity_free(&r);
    free(bytes);
    tu_free_list(files, n);
}

int main(void) {
    double t0 = tu_now();
    test_inputs();
    test_policies_presets_configs();
    test_safetensors_io();
    test_nan();
    test_parity_errors();
    tu_info("%.2f s", tu_now() - t0);
    return tu_finish();
}
