/* test_resample.c: pos_embed / patch_embed at another grid (src/resample.c), as timm resamples them
 * on load: against PyTorch's F.interpolate(mode='bicubic') with and without antialias (values
 * printed by torch 1.13 for a fixed 4x4 input), the properties that must hold exactly (same size,
 * prefix rows, constants, the pseudo-inverse's identity when growing), bad arguments, and the
 * load path (vt_init_from_safetensors into a model of another image / patch size). */
#include "test_util.h"
#include "resample.h"

/* x[i] = (0.37 i - 1.1)^2 * 0.1, as torch computed it in float32 */
static const float X44[16] = { 0.121000007f,  0.0532900058f, 0.0129600009f, 9.99998065e-06f,
                               0.0144400001f, 0.0562500022f, 0.125440001f,  0.222010046f,
                               0.345959991f,  0.497289985f,  0.675999939f,  0.882090211f,
                               1.11556005f,   1.37641001f,   1.66464031f,   1.98025024f };
static const struct {
    int size, aa;
    float want[36];
} TORCH[] = {
    { 2, 0, { 0.0246410202f, 0.0337464921f, 0.847168386f, 1.38034427f } },
    { 2, 1, { 0.0602976717f, 0.104011506f, 0.783175528f, 1.19223785f } },
    { 3,
      0,
      { 0.0926767662f, 0.0276674777f, 0.0198266767f, 0.109767735f, 0.251471281f, 0.45034349f, 1.04155362f,
        1.38996994f, 1.79555523f } },
    { 3,
      1,
      { 0.0652233437f, 0.0170984417f, 0.0140554123f, 0.166133448f, 0.305975467f, 0.490899622f, 0.98835355f,
        1.31616271f, 1.68905389f } },
    { 6, 0, { 0.136952907f,  0.0963137671f, 0.039567586f,  0.0109574767f, -0.0127045847f, -0.021210229f,
              0.0386554226f, 0.0246410202f, 0.0114568863f, 0.0138464756f, 0.0337464996f,  0.0518655702f,
              0.0337541439f, 0.0633017793f, 0.121391669f,  0.174501374f,  0.265675485f,   0.327356637f,
              0.21861355f,   0.279160827f,  0.387970865f,  0.477174103f,  0.619068444f,   0.711749375f,
              0.743059218f,  0.847168446f,  1.02725267f,   1.16717613f,   1.38034439f,    1.51658738f,
              1.1588974f,    1.28963125f,   1.51327729f,   1.68420076f,   1.94093084f,    2.10379863f } },
    { 6, 1, { 0.132939145f,  0.0955524892f, 0.0432713367f, 0.0115811694f, -0.0079065999f, -0.0159212369f,
              0.0528406836f, 0.0404309183f, 0.0276324339f, 0.0308100916f, 0.0508049987f,  0.0677672774f,
              0.0353194922f, 0.0623923913f, 0.112006836f,  0.170302391f,  0.252710283f,   0.309155256f,
              0.251529485f,  0.313470215f,  0.418202609f,  0.525173604f,  0.662699521f,   0.754012465f,
              0.758702278f,  0.860125661f,  1.02727103f,   1.18936002f,   1.38929892f,    1.52009428f,
              1.14855659f,   1.27495682f,   1.48158491f,   1.6785419f,    1.91796339f,    2.07373548f } },
};

static void test_against_torch(void) {
    for (size_t c = 0; c < sizeof TORCH / sizeof TORCH[0]; c++) {
        int n = TORCH[c].size, aa = TORCH[c].aa;
        float out[36];
        CHECK_OK(vt_resample_grid(X44, 4, 4, 1, out, n, n, aa), "vt_resample_grid");
        double worst = 0;
        for (int i = 0; i < n * n; i++)
            worst = fmax(worst, fabs(out[i] - TORCH[c].want[i]) / fmax(1.0, fabs(TORCH[c].want[i])));
        /* PyTorch's float32 rounding differs from ours in the last place (its AVX2 kernels) */
        CHECK(worst <= 4e-7, "4x4 -> %dx%d antialias %d: max error %.3g against torch", n, n, aa, worst);
    }
}

static uint32_t lcg = 12345;
static float rnd(void) {
    lcg = lcg * 1664525u + 1013904223u;
    return (float)(lcg >> 8) / 16777216.0f - 0.5f;
}

static void test_exact_properties(void) {
    enum { D = 5, P = 2 };
    float in[(P + 14 * 14) * D], out[(P + 20 * 20) * D];
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) in[i] = rnd();
    for (int aa = 0; aa < 2; aa++) {
        /* the same grid: the same values, bit for bit */
        CHECK_OK(vt_resample_pos_embed(in, P, 14, 14, D, out, 14, 14, aa), "same size");
        CHECK(!memcmp(in, out, sizeof in), "14x14 -> 14x14 (antialias %d) changed values", aa);
        /* prefix rows copied as they are, whatever the grid */
        for (int g = 1; g <= 20; g += 19 - (g == 1 ? 12 : 0)) {
            CHECK_OK(vt_resample_pos_embed(in, P, 14, 14, D, out, g, g, aa), "pos_embed");
            CHECK(!memcmp(in, out, P * D * sizeof(float)), "prefix rows changed (14 -> %d, antialias %d)", g,
                  aa);
        }
        /* a constant grid stays constant: the weights of every output sum to 1 (up to their float
         * rounding: antialias normalises them, the plain cubic's are each rounded, as in torch) */
        float cst[7 * 7 * 2], co[10 * 3 * 2];
        for (int i = 0; i < 7 * 7 * 2; i++) cst[i] = i % 2 ? -0.75f : 0.3f;
        CHECK_OK(vt_resample_grid(cst, 7, 7, 2, co, 10, 3, aa), "constant grid");
        double worst = 0;
        for (int i = 0; i < 10 * 3 * 2; i++) worst = fmax(worst, fabs(co[i] - (i % 2 ? -0.75 : 0.3)));
        CHECK(worst <= 1e-6, "a constant 7x7 grid -> 10x3 (antialias %d) moved by %.3g", aa, worst);
    }
    /* patch_embed, growing 4 -> 8 (and 3 -> 5 x 7): the resize has full column rank, so
     * <resize(x), w_new> = <x, w> for every patch x (FlexiViT's point), up to rounding */
    for (int aa = 0; aa < 2; aa++) {
        int oh = 3, ow = 4, nh = 5, nw = 7;
        float w[2 * 3 * 4], wn[2 * 5 * 7], x[3 * 4], xr[5 * 7];
        for (int i = 0; i < 24; i++) w[i] = rnd();
        CHECK_OK(vt_resample_patch_embed(w, 2, oh, ow, wn, nh, nw, aa), "patch_embed 3x4 -> 5x7");
        double worst = 0;
        for (int trial = 0; trial < 8; trial++) {
            for (int i = 0; i < 12; i++) x[i] = rnd();
            CHECK_OK(vt_resample_grid(x, oh, ow, 1, xr, nh, nw, aa), "resize a patch");
            for (int k = 0; k < 2; k++) {
                double a = 0, b = 0;
                for (int i = 0; i < 12; i++) a += (double)x[i] * w[k * 12 + i];
                for (int i = 0; i < 35; i++) b += (double)xr[i] * wn[k * 35 + i];
                worst = fmax(worst, fabs(a - b));
            }
        }
        CHECK(worst <= 2e-6,
              "patch_embed grown 3x4 -> 5x7 (antialias %d): <resize(x), w_new> - <x, w> up to %.3g", aa,
              worst);
    }
    /* shrinking 16 -> 8: w_new = w pinv(R) is the least-squares solution, so R^T w_new is w's
     * projection onto R's row space: applying it again changes nothing */
    {
        static float w[16 * 16], wn[8 * 8], back[16 * 16], again[8 * 8];
        for (int i = 0; i < 256; i++) w[i] = rnd();
        CHECK_OK(vt_resample_patch_embed(w, 1, 16, 16, wn, 8, 8, 1), "patch_embed 16 -> 8");
        /* R^T w_new through the resize of each basis patch: back[p] = <resize(e_p), w_new> */
        for (int p = 0; p < 256; p++) {
            float e[256] = { 0 }, r[64];
            e[p] = 1;
            CHECK_OK(vt_resample_grid(e, 16, 16, 1, r, 8, 8, 1), "resize a basis patch");
            double s = 0;
            for (int i = 0; i < 64; i++) s += (double)r[i] * wn[i];
            back[p] = (float)s;
        }
        CHECK_OK(vt_resample_patch_embed(back, 1, 16, 16, again, 8, 8, 1), "patch_embed of the projection");
        double worst = 0;
        for (int i = 0; i < 64; i++) worst = fmax(worst, fabs(again[i] - wn[i]));
        CHECK(worst <= 1e-5, "pinv: resampling the projection again moved w_new by %.3g", worst);
    }
}

static void test_bad_arguments(void) {
    float a[4] = { 0 }, b[4];
    CHECK_ERR(vt_resample_grid(NULL, 2, 2, 1, b, 1, 1, 1), VT_ERR_ARG, "NULL", "NULL input");
    CHECK_ERR(vt_resample_grid(a, 0, 2, 1, b, 1, 1, 1), VT_ERR_ARG, "sizes", "empty grid");
    CHECK_ERR(vt_resample_grid(a, 2, 2, 1, b, 1, -3, 0), VT_ERR_ARG, "sizes", "negative size");
    CHECK_ERR(vt_resample_grid(a, 2, 2, 0, b, 1, 1, 0), VT_ERR_ARG, "channels", "no channels");
    CHECK_ERR(vt_resample_patch_embed(a, 0, 2, 2, b, 1, 1, 1), VT_ERR_ARG, "kernels", "no kernels");
    CHECK_ERR(vt_resample_pos_embed(a, -1, 1, 1, 1, b, 1, 1, 1), VT_ERR_ARG, "prefix", "negative prefix");
}

/* a timm ViT's weights as safetensors bytes, made by vitrine itself */
static uint8_t *timm_bytes(const char *json, size_t *len, uint64_t seed) {
    vt_model_config c;
    vt_model_config_default(&c, VT_KIND_TIMM);
    vt_model *m = NULL;
    uint8_t *out = NULL;
    if (!CHECK_OK(vt_vit_config_from_json(json, strlen(json), &c.enc), json) ||
        !CHECK_OK(vt_model_create(&c, &m), json))
        return NULL;
    CHECK_OK(vt_init_weights(m, seed), "init");
    CHECK_OK(vt_save_safetensors(m, "", "", &out, len), "save");
    vt_model_free(m);
    return out;
}
static int find(vt_model *m, const char *name) { return vt_param_find(m, name); }

static void test_load_path(void) {
    const char *src_json = "{\"img_size\": 32, \"patch_size\": 8, \"embed_dim\": 16, \"depth\": 1, "
                           "\"num_heads\": 2, \"reg_tokens\": 2}";
    size_t len = 0;
    uint8_t *bytes = timm_bytes(src_json, &len, 7);
    if (!bytes) return;
    vt_model *src = NULL;
    vt_model_config c;
    vt_model_config_default(&c, VT_KIND_TIMM);
    CHECK_OK(vt_vit_config_from_json(src_json, strlen(src_json), &c.enc), "config");
    CHECK_OK(vt_model_create(&c, &src), "source model");
    CHECK_OK(vt_load_safetensors(src, bytes, len, "", ""), "load the source");
    /* 32 px -> 56 px at patch 8 (grid 4 -> 7), and 32 px at patch 4 (patch 8 -> 4, grid 4 -> 8) */
    const char *to[] = { "{\"img_size\": 56, \"patch_size\": 8, \"embed_dim\": 16, \"depth\": 1, "
                         "\"num_heads\": 2, \"reg_tokens\": 2}",
                         "{\"img_size\": 32, \"patch_size\": 4, \"embed_dim\": 16, \"depth\": 1, "
                         "\"num_heads\": 2, \"reg_tokens\": 2}" };
    for (int k = 0; k < 2; k++) {
        vt_model_config_default(&c, VT_KIND_TIMM);
        vt_model *m = NULL;
        if (!CHECK_OK(vt_vit_config_from_json(to[k], strlen(to[k]), &c.enc), "config") ||
            !CHECK_OK(vt_model_create(&c, &m), "model"))
            continue;
        CHECK_OK(vt_init_weights(m, 1), "init");
        static vt_init_report r;
        CHECK_OK(vt_init_from_safetensors(m, bytes, len, 1, &r),
                 "init from a checkpoint of another size, strict");
        CHECK(r.resampled == (k ? 2 : 1) && r.skipped == 0 && r.missing == 0,
              "case %d: resampled %d skipped %d missing %d:\n%s", k, r.resampled, r.skipped, r.missing,
              r.notes);
        CHECK(strstr(r.notes, k ? "grid 4x4 -> 8x8, 3 prefix rows kept"
                                : "grid 4x4 -> 7x7, 3 prefix rows kept") != NULL,
              "case %d: the notes say what was resampled:\n%s", k, r.notes);
        CHECK(!k || strstr(r.notes, "patch 8x8 -> 4x4"), "the patch_embed note:\n%s", r.notes);
        /* pos_embed: what vt_resample_pos_embed gives for the source's table */
        int ps = find(src, "pos_embed"), pm = find(m, "pos_embed");
        int G = k ? 8 : 7;
        float *want = malloc((3 + G * G) * 16 * sizeof(float));
        CHECK_OK(vt_resample_pos_embed(vt_param_data(src, ps), 3, 4, 4, 16, want, G, G, VT_RESAMPLE_ON_LOAD),
                 "reference");
        CHECK(!memcmp(want, vt_param_data(m, pm), (3 + G * G) * 16 * sizeof(float)),
              "case %d: pos_embed is not the resampled table", k);
        free(want);
        /* the rest as it was */
        int bs = find(src, "blocks.0.attn.qkv.weight"), bm = find(m, "blocks.0.attn.qkv.weight");
        CHECK(!memcmp(vt_param_data(src, bs), vt_param_data(m, bm), vt_param_numel(m, bm) * sizeof(float)),
              "qkv changed");
        vt_model_free(m);
    }
    /* a pos_embed that is not a square grid after the prefix rows is skipped, as before */
    vt_model_free(src);
    vt_free(bytes);
}

int main(void) {
    test_against_torch();
    test_exact_properties();
    test_bad_arguments();
    test_load_path();
    return tu_finish();
}
