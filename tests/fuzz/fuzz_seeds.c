/* fuzz_seeds DIR [FIXTURES]: writes the seed corpus of every harness into DIR/<harness>/ (nothing
 * of it is committed): weights and training states of the tiny models, configs of every kind,
 * small parity files of every module made from those models (expected outputs zero: the run and
 * the comparison are what is fuzzed), safetensors of every dtype, and the small PyTorch fixtures
 * (AdamW, sin-cos) from FIXTURES when given. */
#include "fuzz_common.h"
#include "safetensors.h"
#include <stdint.h>
#include <stdio.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir;

/* DIR/<harness>/name; the first write to a harness folder empties it (the seeds alone, each run) */
static void put(const char *harness, const char *name, const void *data, size_t len) {
    static char seen[16][32];
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, harness);
    mkdir(p, 0777);
    int known = 0;
    for (int i = 0; i < 16 && seen[i][0] && !known; i++) known = !strcmp(seen[i], harness);
    if (!known) {
        for (int i = 0; i < 16; i++)
            if (!seen[i][0]) {
                snprintf(seen[i], sizeof seen[i], "%s", harness);
                break;
            }
        DIR *d = opendir(p);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char f[1300];
            snprintf(f, sizeof f, "%s/%s", p, e->d_name);
            unlink(f);
        }
        if (d) closedir(d);
    }
    snprintf(p, sizeof p, "%s/%s/%s", dir, harness, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f)) {
        perror(p);
        exit(1);
    }
}

static void check(int rc, const char *what) {
    if (rc) {
        fprintf(stderr, "fuzz_seeds: %s: %s\n", what, vt_last_error());
        exit(1);
    }
}

/* fuzz_meta's seeds: the trainer byte, then the state's metadata entries (its crc32 left out:
 * the harness writes it) as "key\0value\0...", and variants with one entry changed */
static void meta_seed(const char *kind, int model, const uint8_t *state, size_t len) {
    vt_st_file f;
    check(vt_st_parse(state, len, &f), "meta seed");
    static char buf[1 << 16];
    const char *swap[][2] = { { NULL, NULL },
                              { "step", "2000000000" },
                              { "rng", "00000000000000000000000000000000" },
                              { "train_config", "{\"lr\": 1e9}" },
                              { "format", "vitrine-train/2" } };
    for (size_t s = 0; s < sizeof swap / sizeof swap[0]; s++) {
        size_t n = 0;
        buf[n++] = (char)model;
        for (size_t i = 0; i < f.n_meta; i++) {
            if (!strcmp(f.meta_keys[i], "crc32")) continue;
            const char *v = swap[s][0] && !strcmp(swap[s][0], f.meta_keys[i]) ? swap[s][1] : f.meta_vals[i];
            size_t kl = strlen(f.meta_keys[i]) + 1, vl = strlen(v) + 1;
            if (n + kl + vl > sizeof buf) break;
            memcpy(buf + n, f.meta_keys[i], kl), n += kl;
            memcpy(buf + n, v, vl), n += vl;
        }
        char nm[64];
        snprintf(nm, sizeof nm, "%s.%zu.meta", kind, s);
        put("meta", nm, buf, n);
    }
    vt_st_free(&f);
}

/* a parity file: the model's parameters (one frozen when asked), images, the call's inputs, zero
 * expectations of the right shapes (out, every gradient, the image gradient) */
static void parity_seed(const char *name, vt_kind kind, const char *module, const char *call, int idx,
                        int mask, int frozen) {
    vt_model *m = fz_tiny_model(kind);
    const vt_model_config *c = vt_model_get_config(m);
    char cfg[4096];
    check(vt_model_config_to_json(c, cfg, sizeof cfg), "config");
    int B = 2, C = c->enc.in_chans, S = c->enc.img_size, np = vt_param_count(m), k = 0;
    int L = (S / c->enc.patch_size) * (S / c->enc.patch_size) + (c->enc.class_token ? 1 : 0);
    vt_st_entry e[256];
    char names[256][128];
    long long shapes[256][4];
    static float zeros[1 << 16], images[2 * 3 * 8 * 8];
    for (int i = 0; i < 2 * 3 * 8 * 8; i++) images[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < np; i++) {
        const int64_t *sh = vt_param_shape(m, i);
        for (int d = 0; d < vt_param_ndim(m, i); d++) shapes[k][d] = sh[d];
        snprintf(names[k], sizeof names[k], "%s/%s", frozen && i == 0 ? "frozen" : "param",
                 vt_param_name(m, i));
        e[k] = (vt_st_entry){ names[k], VT_DT_F32, vt_param_ndim(m, i), shapes[k], vt_param_data(m, i) };
        k++;
        if (!(frozen && i == 0)) {
            for (int d = 0; d < vt_param_ndim(m, i); d++) shapes[k][d] = sh[d];
            snprintf(names[k], sizeof names[k], "expect/grad/%s", vt_param_name(m, i));
            e[k] = (vt_st_entry){ names[k], VT_DT_F32, vt_param_ndim(m, i), shapes[k], zeros };
            k++;
        }
    }
    long long ish[4] = { B, C, S, S };
    e[k++] = (vt_st_entry){ "input/images", VT_DT_F32, 4, ish, images };
    e[k++] = (vt_st_entry){ "expect/grad/input/images", VT_DT_F32, 4, ish, zeros };
    static long long keep[2 * 3] = { 0, 1, 3, 0, 2, 4 }, msk[2 * 2] = { 2, 4, 1, 3 };
    static uint8_t bmask[2 * 16];
    for (int i = 0; i < 2 * L; i++) bmask[i] = (i % L) >= 2;
    long long kshape[2] = { B, 3 }, mshape[2] = { B, 2 }, bshape[2] = { B, L };
    if (idx & 1) e[k++] = (vt_st_entry){ "input/idx_keep", VT_DT_I64, 2, kshape, keep };
    if (idx & 2) e[k++] = (vt_st_entry){ "input/idx_mask", VT_DT_I64, 2, mshape, msk };
    if (mask) e[k++] = (vt_st_entry){ "input/mask", VT_DT_BOOL, 2, bshape, bmask };
    /* the call's output shape: run it */
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = images;
    in.batch = B;
    if (idx & 1) {
        in.idx_keep = (const int64_t *)keep;
        in.n_keep = 3;
    }
    if (idx & 2) {
        in.idx_mask = (const int64_t *)msk;
        in.n_mask = 2;
    }
    if (mask) {
        in.mask = bmask;
        in.is_causal = 1;
    }
    vt_fn fn = strstr(call, "\"loss\"")      ? VT_FN_LOSS
               : strstr(call, "\"forward\"") ? VT_FN_FORWARD
                                             : VT_FN_ENCODE;
    check(vt_forward(m, fn, &in, 0), name);
    int64_t osh[4];
    int ond;
    vt_output(m, 0, osh, &ond);
    long long oshape[4] = { osh[0], osh[1], osh[2], osh[3] };
    long long dshape[4];
    memcpy(dshape, oshape, sizeof dshape);
    e[k++] = (vt_st_entry){ fn == VT_FN_LOSS ? "expect/loss" : "expect/out", VT_DT_F32, ond, oshape, zeros };
    if (fn != VT_FN_LOSS) e[k++] = (vt_st_entry){ "input/dout/out", VT_DT_F32, ond, dshape, images };
    const char *mk[] = { "format", "module", "config", "call" };
    const char *mv[] = { "vitrine-parity/1", module, cfg, call };
    uint8_t *out = NULL;
    size_t len = 0;
    check(vt_st_write(e, (size_t)k, mk, mv, 4, &out, &len), name);
    put("parity", name, out, len);
    put("safetensors", name, out, len);
    free(out);
    vt_model_free(m);
}

/* fuzz_api: 8 control bytes (model, call and backward bits, batch + 1, n_keep + 1, n_mask + 1,
 * flags, policy, smoothing x 200), then idx_keep, idx_mask (72 each), mask (96), labels (3) */
static void api_seed(const char *name, int model, int call, int batch, int n_keep, int n_mask, int flags,
                     const int8_t *keep, const int8_t *midx, const int8_t *mask, int smoothing) {
    uint8_t b[8 + 72 + 72 + 96 + 3] = { (uint8_t)model,
                                        (uint8_t)(call | 0x80 | 0x40 | 0x20),
                                        (uint8_t)(batch + 1),
                                        (uint8_t)(n_keep + 1),
                                        (uint8_t)(n_mask + 1),
                                        (uint8_t)flags,
                                        1,
                                        (uint8_t)smoothing };
    for (int r = 0; r < batch; r++) { /* the same row for every image */
        for (int j = 0; j < n_keep; j++) b[8 + r * n_keep + j] = (uint8_t)keep[j];
        for (int j = 0; j < n_mask; j++) b[80 + r * n_mask + j] = (uint8_t)midx[j];
        for (int j = 0; mask && j < 5; j++) b[152 + r * 5 + j] = (uint8_t)mask[j];
        b[248 + r] = (uint8_t)r;
    }
    put("api", name, b, sizeof b);
}

static void copy_fixture(const char *fixtures, const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", fixtures, name);
    FILE *f = fopen(p, "rb");
    if (!f) return; /* fixtures are optional seeds */
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    put("parity", name, buf, n);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR [FIXTURES]\n");
        return 2;
    }
    dir = argv[1];
    mkdir(dir, 0777);
    /* weights of every kind, with the prefixes the weights harness tries */
    const char *kinds[] = { "timm", "lightly", "causal", "mae", "aim" };
    for (int k = 0; k < 5; k++) {
        vt_model *m = fz_tiny_model((vt_kind)k);
        uint8_t *out = NULL;
        size_t len = 0;
        char nm[64];
        check(vt_save_safetensors(m, "", "", &out, &len), "weights");
        snprintf(nm, sizeof nm, "%s.safetensors", kinds[k]);
        put("weights", nm, out, len);
        put("safetensors", nm, out, len);
        vt_free(out);
        char cfg[4096];
        check(vt_model_config_to_json(vt_model_get_config(m), cfg, sizeof cfg), "config");
        snprintf(nm, sizeof nm, "%s.json", kinds[k]);
        put("config", nm, cfg, strlen(cfg));
        if (k >= 3 ||
            k == VT_KIND_TIMM) { /* a training state after one step (the timm model is a classifier) */
            vt_train_config t;
            vt_train_config_default(&t, (vt_kind)k);
            t.total_steps = 10;
            t.warmup_steps = 2;
            t.seed = 5;
            if (k == VT_KIND_TIMM) t.label_smoothing = 0.1f;
            check(vt_trainer_init(m, &t), "trainer");
            float img[2 * 3 * 8 * 8], loss;
            int32_t labels[2] = { 2, 0 };
            for (int i = 0; i < 2 * 3 * 8 * 8; i++) img[i] = (float)((i * 13) % 11) / 5.0f - 1.0f;
            check(k == VT_KIND_TIMM ? vt_train_step_labels(m, img, labels, 2, &loss)
                                    : vt_train_step(m, img, 2, &loss),
                  "step");
            check(vt_train_state_save(m, &out, &len), "state");
            snprintf(nm, sizeof nm, "%s.state", kinds[k]);
            put("checkpoint", nm, out, len);
            /* fuzz_train: 4 control bytes (model and replay, batch, policy, inputs) before the state; the
             * metadata harness: its entries */
            static const uint8_t ctrl[][4] = {
                { 0, 0, 0, 0 }, { 0, 1, 1, 0x41 }, { 0, 2, 2, 0x02 }, { 0, 0, 5, 0x80 }, { 0, 1, 3, 0x43 }
            };
            int model = k == VT_KIND_MAE ? 0 : k == VT_KIND_AIM ? 1 : 2;
            for (size_t c = 0; c < sizeof ctrl / sizeof ctrl[0]; c++) {
                uint8_t *in = malloc(len + 4);
                if (!in) {
                    perror("malloc");
                    exit(1);
                }
                memcpy(in, ctrl[c], 4);
                in[0] = (uint8_t)(model + (c % 2 ? 3 : 0)); /* c odd: the step replayed too */
                memcpy(in + 4, out, len);
                snprintf(nm, sizeof nm, "%s.%zu.train", kinds[k], c);
                put("train", nm, in, len + 4);
                free(in);
            }
            meta_seed(kinds[k], model, out, len);
            vt_free(out);
        }
        vt_model_free(m);
    }
    const char *cfgs[] = {
        "{}",
        ("{\"img_size\": 32, \"patch_size\": 8, \"embed_dim\": 16, \"num_heads\": 2, \"depth\": 2, "
         "\"reg_tokens\": 2, \"qk_norm\": true, \"init_values\": 1e-5, \"global_pool\": \"avg\", "
         "\"no_embed_class\": true}"),
        "{\"encoder\": {\"embed_dim\": 64, \"num_heads\": 4}, \"decoder_dim\": 32, \"norm_pix_loss\": true}",
        "{\"drop_rate\": 0, \"fc_norm\": null, \"pos_embed\": \"none\", \"class_token\": false, "
        "\"global_pool\": \"max\"}"
    };
    for (int i = 0; i < 4; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "extra%d.json", i);
        put("config", nm, cfgs[i], strlen(cfgs[i]));
    }
    /* parity files of every module and call option */
    parity_seed("timm_encode.st", VT_KIND_TIMM, "timm.VisionTransformer", "{\"fn\": \"encode\"}", 0, 0, 0);
    parity_seed("timm_forward.st", VT_KIND_TIMM, "timm.VisionTransformer", "{\"fn\": \"forward\"}", 0, 0, 0);
    parity_seed("lightly_keep.st", VT_KIND_LIGHTLY, "lightly.MaskedVisionTransformerTIMM",
                "{\"fn\": \"encode\", \"idx_keep\": true}", 1, 0, 1);
    parity_seed("lightly_mask.st", VT_KIND_LIGHTLY, "lightly.MaskedVisionTransformerTIMM",
                "{\"fn\": \"encode\", \"idx_mask\": true}", 2, 0, 0);
    parity_seed("causal_mask.st", VT_KIND_CAUSAL, "lightly.MaskedCausalVisionTransformer",
                "{\"fn\": \"forward_features\", \"mask\": true, \"is_causal\": true}", 0, 1, 0);
    parity_seed("mae_loss.st", VT_KIND_MAE, "lightly.examples.MAE",
                "{\"fn\": \"loss\", \"idx_keep\": true, \"idx_mask\": true}", 3, 0, 0);
    parity_seed("aim_loss.st", VT_KIND_AIM, "lightly.examples.AIM", "{\"fn\": \"loss\", \"mask\": true}", 0,
                1, 0);
    /* encoder calls and losses of every kind, with the inputs each takes (a sequence of 5 tokens) */
    {
        static const int8_t keep[] = { 0, 1, 3 }, midx[] = { 2, 4 }, pre[] = { 1, 1, 0, 0, 0 };
        api_seed("timm_encode", 0, VT_FN_ENCODE, 2, -1, -1, 0, keep, midx, NULL, 0);
        api_seed("timm_forward", 0, VT_FN_TIMM_FORWARD, 2, -1, -1, 0, keep, midx, NULL, 0);
        api_seed("timm_loss", 0, VT_FN_LOSS, 3, -1, -1, 4, keep, midx, NULL, 20);
        api_seed("lightly_keep", 1, VT_FN_INTERMEDIATES, 2, 3, -1, 0, keep, midx, NULL, 0);
        api_seed("lightly_mask", 1, VT_FN_FORWARD, 2, -1, 2, 0, keep, midx, NULL, 0);
        api_seed("lightly_tokmask", 1, VT_FN_INTERMEDIATES_NORM, 1, -1, -1, 1, keep, midx, pre, 0);
        api_seed("causal", 2, VT_FN_ENCODE, 2, -1, -1, 3, keep, midx, pre, 0);
        api_seed("mae_loss", 3, VT_FN_LOSS, 2, 3, 2, 0, keep, midx, NULL, 0);
        api_seed("aim_loss", 4, VT_FN_LOSS, 2, -1, -1, 3, keep, midx, pre, 0);
    }
    /* every dtype */
    {
        static const uint8_t bytes[64] = { 1, 2, 3, 4, 0x80, 0x7f, 0xff, 0x3c, 0, 0x7c, 0, 0xfc, 0, 0x7e };
        long long s1[1] = { 4 }, s2[2] = { 2, 2 }, s0[1] = { 0 };
        vt_st_entry e[] = { { "f32", VT_DT_F32, 1, s1, bytes },   { "f16", VT_DT_F16, 2, s2, bytes },
                            { "bf16", VT_DT_BF16, 1, s1, bytes }, { "f64", VT_DT_F64, 1, s1, bytes },
                            { "i64", VT_DT_I64, 1, s1, bytes },   { "i32", VT_DT_I32, 2, s2, bytes },
                            { "i8", VT_DT_I8, 1, s1, bytes },     { "u8", VT_DT_U8, 1, s1, bytes },
                            { "b", VT_DT_BOOL, 1, s1, bytes },    { "empty", VT_DT_F32, 1, s0, bytes },
                            { "scalar", VT_DT_F32, 0, s0, bytes } };
        const char *mk[] = { "format", "k" }, *mv[] = { "pt", "v\"\\u00e9" };
        uint8_t *out = NULL;
        size_t len = 0;
        check(vt_st_write(e, sizeof e / sizeof e[0], mk, mv, 2, &out, &len), "dtypes");
        put("safetensors", "dtypes.st", out, len);
        free(out);
    }
    if (argc > 2) {
        copy_fixture(argv[2], "adamw_steps.safetensors");
        copy_fixture(argv[2], "sincos_pos_embed.safetensors");
    }
    return 0;
}
