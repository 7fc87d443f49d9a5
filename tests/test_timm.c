/* test_timm.c: timm / lightly semantics of issue 12 against explicit references:
 *   1. the MLP hidden size is Python's int(dim * ratio) in double (encoder, MAE decoder, AIM head),
 *      over a table made by Python and over many (dim, ratio) pairs against exact arithmetic;
 *   2. timm's forward (forward_features + forward_head: pool -> fc_norm -> head) against a double
 *      reference built on the engine's forward_features, every pooling, with and without a head;
 *      the parity harness runs it for module timm.VisionTransformer, fn forward;
 *   3. idx_keep with repeated indices (a gather) against the full sequence gathered by hand,
 *      forward and backward (gradients of a repeated token add up); the MAE refuses repeats;
 *   4. parity --dump holds what was computed when a file fails;
 *   5. a size mismatch against expect/ or dout/ names the output, both shapes and the cause;
 *   7. the state_dict of each tests/parity file (timm's, lightly's: every option and family) loads
 *      strictly with vt_init_from_safetensors.
 * The gradients of 2 and 3 against finite differences are in test_grad.c. */
#include "test_util.h"
#include "parity.h"
#include "safetensors.h"
#include <stddef.h>

/* ---- 1. MLP hidden size ---------------------------------------------------------------------- */

/* (dim, ratio as Python reads it, int(dim * ratio) printed by CPython 3.11); the first 48 are
 * pairs where float32 arithmetic gives another answer */
static const struct {
    int dim;
    const char *ratio;
    int hidden;
} PY[] = { { 15, "4.20", 63 },    { 25, "1.16", 28 },    { 165, "4.60", 758 }, { 100, "2.35", 235 },
           { 200, "1.17", 234 },  { 175, "4.52", 790 },  { 200, "2.07", 413 }, { 105, "4.60", 482 },
           { 75, "3.36", 252 },   { 150, "1.06", 159 },  { 25, "2.36", 59 },   { 150, "0.42", 63 },
           { 170, "1.30", 221 },  { 100, "2.51", 250 },  { 200, "0.59", 118 }, { 225, "2.08", 468 },
           { 150, "6.56", 983 },  { 200, "2.37", 474 },  { 185, "2.60", 481 }, { 100, "1.05", 105 },
           { 180, "1.30", 234 },  { 15, "4.20", 63 },    { 200, "2.01", 401 }, { 190, "5.10", 968 },
           { 75, "4.24", 318 },   { 150, "5.24", 786 },  { 120, "2.10", 252 }, { 75, "6.52", 488 },
           { 100, "4.97", 497 },  { 95, "2.60", 247 },   { 50, "2.12", 106 },  { 180, "4.20", 756 },
           { 225, "4.52", 1016 }, { 90, "4.60", 413 },   { 50, "4.06", 202 },  { 175, "2.12", 371 },
           { 200, "2.35", 470 },  { 100, "4.95", 495 },  { 200, "2.30", 459 }, { 150, "2.76", 413 },
           { 220, "4.20", 924 },  { 275, "1.56", 429 },  { 50, "4.24", 212 },  { 25, "4.56", 113 },
           { 50, "2.26", 112 },   { 170, "5.70", 969 },  { 100, "0.58", 57 },  { 50, "4.56", 227 },
           { 140, "0.91", 127 },  { 146, "5.16", 753 },  { 37, "7.16", 264 },  { 218, "0.44", 95 },
           { 139, "7.33", 1018 }, { 45, "2.26", 101 },   { 178, "1.05", 186 }, { 103, "5.09", 524 },
           { 290, "4.61", 1336 }, { 205, "1.02", 209 },  { 184, "2.27", 417 }, { 54, "5.23", 282 },
           { 229, "6.91", 1582 }, { 291, "5.91", 1719 }, { 17, "6.63", 112 },  { 183, "2.37", 433 } };

static int64_t fc1_rows(const vt_model *m, const char *name) {
    int i = vt_param_find(m, name);
    return i < 0 ? -1 : vt_param_shape(m, i)[0];
}

static void test_mlp_hidden(void) {
    int n = (int)(sizeof PY / sizeof PY[0]), wrong = 0;
    for (int i = 0; i < n; i++) {
        int64_t h = vt_mlp_hidden(PY[i].dim, strtod(PY[i].ratio, NULL));
        if (h != PY[i].hidden && wrong++ < 5)
            CHECK(0, "dim %d ratio %s: hidden %lld, Python %d", PY[i].dim, PY[i].ratio, (long long)h,
                  PY[i].hidden);
    }
    CHECK(wrong == 0, "%d of %d (dim, ratio) pairs differ from Python", wrong, n);
    /* every dim 1..1024 x ratio 0.01..8.00 (as decimal text): the double product, rounded once,
     * truncated. The reference multiplies exactly in long double (64-bit mantissa on x86, 113 in
     * wasm: dim * ratio needs 53 + 11 bits) and rounds that to double. */
    long pairs = 0, bad = 0, float_differs = 0;
    for (int dim = 1; dim <= 1024; dim++)
        for (int k = 1; k <= 800; k++) {
            char txt[16];
            snprintf(txt, sizeof txt, "%d.%02d", k / 100, k % 100);
            double r = strtod(txt, NULL);
            int64_t want = (int64_t)(double)((long double)dim * (long double)r);
            int64_t got = vt_mlp_hidden(dim, r);
            pairs++;
            if (got != want && bad++ < 5)
                CHECK(0, "dim %d ratio %s: %lld, want %lld", dim, txt, (long long)got, (long long)want);
            float_differs += (int64_t)((float)dim * (float)r) != want;
        }
    CHECK(bad == 0, "%ld of %ld pairs wrong", bad, pairs);
    CHECK(float_differs > 1000, "float arithmetic differs on only %ld pairs: the sweep would not catch it",
          float_differs);
    tu_info("mlp hidden: %d Python pairs, %ld swept (float32 arithmetic would get %ld wrong)", n, pairs,
            float_differs);
    CHECK(vt_mlp_hidden(8, 1e30) < 0 && vt_mlp_hidden(8, NAN) < 0, "a huge / NaN ratio must give -1");

    /* end to end: JSON -> config -> parameter shapes, for the encoder, the MAE decoder, the AIM head */
    const char *enc =
        "{\"img_size\": 8, \"patch_size\": 4, \"embed_dim\": 15, \"depth\": 1, \"num_heads\": 3, "
        "\"mlp_ratio\": 4.2, \"num_classes\": 0}";
    vt_model_config c;
    vt_model *m = NULL;
    if (CHECK_OK(vt_model_config_from_json(enc, strlen(enc), VT_KIND_TIMM, &c), "timm config")) {
        CHECK(c.enc.mlp_ratio == 4.2, "mlp_ratio read as %.17g, not the double 4.2", c.enc.mlp_ratio);
        if (CHECK_OK(vt_model_create(&c, &m), "timm dim 15 ratio 4.2")) {
            CHECK(fc1_rows(m, "blocks.0.mlp.fc1.weight") == 63,
                  "dim 15 ratio 4.2: fc1 has %lld rows, timm 63",
                  (long long)fc1_rows(m, "blocks.0.mlp.fc1.weight"));
            vt_model_free(m);
        }
        char js[2048];
        vt_model_config back;
        CHECK_OK(vt_model_config_to_json(&c, js, sizeof js), "config to JSON");
        CHECK(strstr(js, "\"mlp_ratio\": 4.2,") != NULL, "config JSON writes mlp_ratio as %s", js);
        CHECK_OK(vt_model_config_from_json(js, strlen(js), VT_KIND_TIMM, &back), "config JSON back");
        CHECK(back.enc.mlp_ratio == c.enc.mlp_ratio, "mlp_ratio does not round-trip through JSON");
    }
    const char *mae = "{\"encoder\": {\"img_size\": 8, \"patch_size\": 4, \"embed_dim\": 8, \"depth\": 1, "
                      "\"num_heads\": 2, "
                      "\"num_classes\": 0}, \"decoder_dim\": 25, \"decoder_depth\": 1, \"decoder_heads\": 5, "
                      "\"decoder_mlp_ratio\": 1.16}";
    if (CHECK_OK(vt_model_config_from_json(mae, strlen(mae), VT_KIND_MAE, &c), "MAE config") &&
        CHECK_OK(vt_model_create(&c, &m), "MAE decoder dim 25 ratio 1.16")) {
        int64_t r = fc1_rows(m, "decoder.blocks.0.mlp.fc1.weight");
        CHECK(r == 28, "MAE decoder dim 25 ratio 1.16: fc1 has %lld rows, lightly 28", (long long)r);
        vt_model_free(m);
    }
    const char *aim =
        "{\"encoder\": {\"img_size\": 8, \"patch_size\": 4, \"embed_dim\": 8, \"depth\": 1, \"num_heads\": "
        "2, "
        "\"class_token\": false, \"no_embed_class\": true, \"global_pool\": \"avg\", \"num_classes\": 0}, "
        "\"head_hidden_dim\": 15, \"head_blocks\": 1, \"head_mlp_ratio\": 4.2}";
    if (CHECK_OK(vt_model_config_from_json(aim, strlen(aim), VT_KIND_AIM, &c), "AIM config") &&
        CHECK_OK(vt_model_create(&c, &m), "AIM head 15 ratio 4.2")) {
        int64_t r = -1;
        for (int i = 0; i < vt_param_count(m); i++)
            if (strstr(vt_param_name(m, i), "mlp.fc1.weight") &&
                !strncmp(vt_param_name(m, i), "projection_head", 15))
                r = vt_param_shape(m, i)[0];
        CHECK(r == 63, "AIM head hidden 15 ratio 4.2: fc1 has %lld rows, lightly 63", (long long)r);
        vt_model_free(m);
    }
}

/* ---- 2. timm's forward ----------------------------------------------------------------------- */

static vt_model *tiny_timm(const char *pool, int num_classes, int reg, tu_rng *r) {
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_TIMM, 8, 4, 8, 2, 2, 2.0f);
    c.enc.reg_tokens = reg;
    c.enc.num_classes = num_classes;
    vt_pool_from_name(pool, &c.enc.global_pool);
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), pool)) return NULL;
    tu_init_params(m, r);
    return m;
}

static const float *P(vt_model *m, const char *name) {
    int i = vt_param_find(m, name);
    return i < 0 ? NULL : vt_param_data(m, i);
}

/* timm forward_head in double from the features x [B,T,D] (reference-models.md 1.4) into y */
static void ref_forward_head(vt_model *m, const float *x, int B, int T, double *y, int *rows_out,
                             int *width) {
    const vt_vit_config *c = &vt_model_get_config(m)->enc;
    int D = c->embed_dim, Pn = (c->class_token ? 1 : 0) + c->reg_tokens, C = c->num_classes;
    const char *gp = vt_pool_name(c->global_pool);
    int none = !gp[0], fcn = !strcmp(gp, "avg") || !strcmp(gp, "max") || !strcmp(gp, "avgmax");
    int rows = none ? B * T : B;
    double *pooled = tu_xcalloc((size_t)rows * D, sizeof(double));
    for (int rw = 0; rw < rows; rw++)
        for (int d = 0; d < D; d++) {
            if (none) {
                pooled[(size_t)rw * D + d] = x[(size_t)rw * D + d];
                continue;
            }
            const float *xb = x + (size_t)rw * T * D;
            if (!strcmp(gp, "token")) {
                pooled[(size_t)rw * D + d] = xb[d];
                continue;
            }
            double s = 0, mx = -INFINITY;
            for (int t = Pn; t < T; t++) {
                s += xb[(size_t)t * D + d];
                mx = fmax(mx, xb[(size_t)t * D + d]);
            }
            double avg = s / (T - Pn);
            pooled[(size_t)rw * D + d] = !strcmp(gp, "avg")   ? avg
                                         : !strcmp(gp, "max") ? mx
                                                              : 0.5 * (mx + avg);
        }
    if (fcn) {
        const float *w = P(m, "fc_norm.weight"), *b = P(m, "fc_norm.bias");
        for (int rw = 0; rw < rows; rw++) {
            double *p = pooled + (size_t)rw * D, mu = 0, var = 0;
            for (int d = 0; d < D; d++) mu += p[d];
            mu /= D;
            for (int d = 0; d < D; d++) var += (p[d] - mu) * (p[d] - mu);
            var /= D;
            for (int d = 0; d < D; d++) p[d] = (p[d] - mu) / sqrt(var + 1e-6) * w[d] + b[d];
        }
    }
    if (C > 0) {
        const float *w = P(m, "head.weight"), *b = P(m, "head.bias");
        for (int rw = 0; rw < rows; rw++)
            for (int k = 0; k < C; k++) {
                double s = b[k];
                for (int d = 0; d < D; d++) s += (double)w[(size_t)k * D + d] * pooled[(size_t)rw * D + d];
                y[(size_t)rw * C + k] = s;
            }
    } else {
        memcpy(y, pooled, (size_t)rows * D * sizeof(double));
    }
    *rows_out = rows;
    *width = C > 0 ? C : D;
    free(pooled);
}

static void test_timm_forward(void) {
    tu_rng r = { 2024 };
    const char *pools[] = { "token", "avg", "max", "avgmax", "" };
    const int B = 2;
    float img[2 * 3 * 8 * 8];
    tu_fill_normal(&r, img, sizeof img / sizeof img[0], 0, 1);
    for (int pi = 0; pi < 5; pi++)
        for (int nc = 0; nc <= 3; nc += 3) {
            vt_model *m = tiny_timm(pools[pi], nc, 1, &r);
            if (!m) continue;
            vt_inputs in;
            memset(&in, 0, sizeof in);
            in.images = img;
            in.batch = B;
            int64_t fs[4], ys[4];
            int fnd, ynd;
            if (!CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 0), "forward_features")) {
                vt_model_free(m);
                continue;
            }
            const float *f = vt_output(m, 0, fs, &fnd);
            size_t nf = tu_numel(fs, fnd);
            float *feat = tu_xmalloc(nf * sizeof(float));
            memcpy(feat, f, nf * sizeof(float));
            int T = (int)fs[1], rows, width;
            double *ref = tu_xcalloc((size_t)B * T * 8 + 64, sizeof(double));
            ref_forward_head(m, feat, B, T, ref, &rows, &width);
            if (CHECK_OK(vt_forward(m, VT_FN_TIMM_FORWARD, &in, 1), "timm forward")) {
                const float *y = vt_output(m, 0, ys, &ynd);
                int want_nd = pools[pi][0] ? 2 : 3;
                CHECK(ynd == want_nd && ys[0] == B && ys[ynd - 1] == width &&
                          tu_numel(ys, ynd) == (size_t)rows * width,
                      "pool '%s' nc %d: output rank %d [%lld .. %lld], want rank %d, %d x %d", pools[pi], nc,
                      ynd, (long long)ys[0], (long long)ys[ynd - 1], want_nd, rows, width);
                double md = 0, mr = 0;
                for (size_t i = 0; i < (size_t)rows * width; i++) {
                    md = fmax(md, fabs(y[i] - ref[i]));
                    mr = fmax(mr, fabs(ref[i]));
                }
                CHECK(md <= 1e-5 * mr,
                      "pool '%s' num_classes %d: timm forward off the reference by %.3g (max %.3g)",
                      pools[pi], nc, md, mr);
                /* the plan is what the call used */
                vt_arena_stats st;
                CHECK_OK(vt_backward(m, NULL, 0, NULL, 1), "timm forward backward (no dout)");
                vt_arena_get_stats(m, &st);
                CHECK(st.peak <= st.planned, "pool '%s' nc %d: arena peak %zu > planned %zu", pools[pi], nc,
                      st.peak, st.planned);
            }
            free(ref);
            free(feat);
            vt_model_free(m);
        }
    /* max pooling over tied tokens: PyTorch's amax shares the gradient evenly among the maxima.
     * A constant image, no pos_embed and no blocks make every patch token the same, so max = avg
     * and both poolings must give the same image gradient (one winner would take it all) */
    {
        float cimg[2 * 3 * 8 * 8], *dimg[2];
        for (size_t i = 0; i < sizeof cimg / sizeof cimg[0]; i++) cimg[i] = 0.7f;
        const char *two[] = { "max", "avg" };
        for (int k = 0; k < 2; k++) {
            vt_model_config c;
            tu_tiny_config(&c, VT_KIND_TIMM, 8, 4, 8, 0, 2, 2.0f);
            c.enc.pos_embed = 0;
            c.enc.num_classes = 3;
            vt_pool_from_name(two[k], &c.enc.global_pool);
            vt_model *m = NULL;
            dimg[k] = tu_xcalloc(sizeof cimg / sizeof cimg[0], sizeof(float));
            if (!CHECK_OK(vt_model_create(&c, &m), two[k])) continue;
            tu_rng rr = { 31 };
            tu_init_params(m, &rr); /* the same parameters for both (same table, same seed) */
            vt_inputs in;
            memset(&in, 0, sizeof in);
            in.images = cimg;
            in.batch = B;
            float dy[2 * 3] = { 1.0f, -0.5f, 0.25f, 0.3f, 0.9f, -1.2f };
            const float *dd[1] = { dy };
            if (CHECK_OK(vt_forward(m, VT_FN_TIMM_FORWARD, &in, 1), two[k]))
                CHECK_OK(vt_backward(m, dd, 1, dimg[k], 1), two[k]);
            vt_model_free(m);
        }
        double md = 0, mr = 0;
        for (size_t i = 0; i < sizeof cimg / sizeof cimg[0]; i++) {
            md = fmax(md, fabs(dimg[0][i] - dimg[1][i]));
            mr = fmax(mr, fabs(dimg[1][i]));
        }
        CHECK(mr > 0 && md <= 1e-6 * mr,
              "max pooling over tied tokens: image gradient %.3g off the evenly shared one (max %.3g)", md,
              mr);
        free(dimg[0]);
        free(dimg[1]);
    }
    /* timm's forward takes none of lightly's token selections */
    vt_model *m = tiny_timm("token", 0, 0, &r);
    if (m) {
        int64_t keep[2] = { 0, 1 };
        vt_inputs in;
        memset(&in, 0, sizeof in);
        in.images = img;
        in.batch = B;
        in.idx_keep = keep;
        in.n_keep = 1;
        CHECK_ERR(vt_forward(m, VT_FN_TIMM_FORWARD, &in, 0), VT_ERR_ARG, "idx_keep",
                  "timm forward with idx_keep");
        vt_model_free(m);
    }
    /* fc_norm given explicitly (timm: it moves the final norm after the pooling, or before) */
    vt_model_config c;
    vt_model *x = NULL;
    const char *fcn = "{\"img_size\": 8, \"patch_size\": 4, \"embed_dim\": 8, \"depth\": 1, \"num_heads\": "
                      "2, \"fc_norm\": true}";
    CHECK_OK(vt_model_config_from_json(fcn, strlen(fcn), VT_KIND_TIMM, &c),
             "fc_norm=true with token pooling");
    if (CHECK_OK(vt_model_create(&c, &x), "fc_norm=true with token pooling"))
        CHECK(vt_param_find(x, "fc_norm.weight") >= 0 && vt_param_find(x, "norm.weight") < 0,
              "fc_norm=true: fc_norm.* and no norm.*");
    vt_model_free(x);
    const char *fcn_avg0 =
        "{\"fc_norm\": false, \"global_pool\": \"avg\", \"embed_dim\": 8, \"num_heads\": 2, "
        "\"img_size\": 8, \"patch_size\": 4, \"depth\": 1}";
    x = NULL;
    CHECK_OK(vt_model_config_from_json(fcn_avg0, strlen(fcn_avg0), VT_KIND_TIMM, &c), "fc_norm=false, avg");
    if (CHECK_OK(vt_model_create(&c, &x), "fc_norm=false with avg pooling"))
        CHECK(vt_param_find(x, "fc_norm.weight") < 0 && vt_param_find(x, "norm.weight") >= 0,
              "fc_norm=false: norm.* and no fc_norm.*");
    vt_model_free(x);
    const char *nofin =
        "{\"final_norm\": false, \"global_pool\": \"avg\", \"embed_dim\": 8, \"num_heads\": 2, "
        "\"img_size\": 8, \"patch_size\": 4, \"depth\": 1}";
    x = NULL;
    CHECK_OK(vt_model_config_from_json(nofin, strlen(nofin), VT_KIND_TIMM, &c), "final_norm=false");
    if (CHECK_OK(vt_model_create(&c, &x), "final_norm=false"))
        CHECK(vt_param_find(x, "fc_norm.weight") < 0 && vt_param_find(x, "norm.weight") < 0,
              "final_norm=false: neither norm");
    vt_model_free(x);
    const char *fcn_null = "{\"fc_norm\": null}";
    CHECK_OK(vt_model_config_from_json(fcn_null, strlen(fcn_null), VT_KIND_TIMM, &c), "fc_norm=null");
}

/* ---- 3. idx_keep with repeated indices --------------------------------------------------------- */

static void test_repeated_keep(void) {
    tu_rng r = { 77 };
    vt_model_config c;
    /* depth 0: encode = norm(gather(preprocess)), so the kept rows must be the full sequence's
     * rows, bit for bit, and the backward the full backward of the scattered-and-summed dout */
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 8, 4, 8, 0, 2, 2.0f);
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), "lightly depth 0")) return;
    tu_init_params(m, &r);
    const int B = 2, L = 5, K = 7, D = 8;
    int64_t keep[2 * 7] = { 0, 3, 3, 1, 0, 3, 2, 4, 4, 4, 0, 1, 2, 4 };
    size_t nimg = (size_t)B * 3 * 8 * 8;
    float *img = tu_xmalloc(nimg * sizeof(float)), *dout = tu_xmalloc((size_t)B * K * D * sizeof(float));
    tu_fill_normal(&r, img, nimg, 0, 1);
    tu_fill_normal(&r, dout, (size_t)B * K * D, 0, 1);
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = B;
    int64_t sh[4];
    int nd;
    CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 1), "full encode");
    float *full = tu_xmalloc((size_t)B * L * D * sizeof(float));
    memcpy(full, vt_output(m, 0, sh, &nd), (size_t)B * L * D * sizeof(float));
    /* reference backward: the full sequence's dout = dout scattered with +=; its gradients */
    float *dfull = tu_xcalloc((size_t)B * L * D, sizeof(float));
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++)
            for (int d = 0; d < D; d++)
                dfull[((size_t)b * L + keep[b * K + k]) * D + d] += dout[((size_t)b * K + k) * D + d];
    float *dimg_ref = tu_xcalloc(nimg, sizeof(float)), *dimg = tu_xcalloc(nimg, sizeof(float));
    const float *dd[1] = { dfull };
    vt_zero_grad(m);
    CHECK_OK(vt_backward(m, dd, 1, dimg_ref, 1), "full backward");
    size_t ng;
    float *g_ref = tu_copy_grads(m, &ng);

    in.idx_keep = keep;
    in.n_keep = K;
    if (CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 1), "encode with repeated idx_keep (K > L)")) {
        const float *y = vt_output(m, 0, sh, &nd);
        CHECK(nd == 3 && sh[1] == K, "repeated idx_keep: output [%lld, %lld, %lld], want [2, 7, 8]",
              (long long)sh[0], (long long)sh[1], (long long)sh[2]);
        int same = 1;
        for (int b = 0; b < B; b++)
            for (int k = 0; k < K; k++)
                same &= !memcmp(y + ((size_t)b * K + k) * D, full + ((size_t)b * L + keep[b * K + k]) * D,
                                D * sizeof(float));
        CHECK(same, "repeated idx_keep: kept rows are not the full sequence's rows");
        dd[0] = dout;
        vt_zero_grad(m);
        CHECK_OK(vt_backward(m, dd, 1, dimg, 1), "backward with repeated idx_keep");
        float *g = tu_copy_grads(m, &ng);
        double md = 0, mr = 0;
        for (size_t i = 0; i < ng; i++) {
            md = fmax(md, fabs(g[i] - g_ref[i]));
            mr = fmax(mr, fabs(g_ref[i]));
        }
        for (size_t i = 0; i < nimg; i++) {
            md = fmax(md, fabs(dimg[i] - dimg_ref[i]));
            mr = fmax(mr, fabs(dimg_ref[i]));
        }
        CHECK(mr > 0 && md <= 1e-5 * mr,
              "repeated idx_keep backward off the scatter-add reference by %.3g (max %.3g)", md, mr);
        free(g);
    }
    free(g_ref);
    free(dimg_ref);
    free(dimg);
    free(dfull);
    free(full);
    free(img);
    free(dout);
    vt_model_free(m);

    /* the MAE scatters encoded tokens back to idx_keep: repeats are refused there, with why */
    tu_tiny_config(&c, VT_KIND_MAE, 8, 4, 8, 1, 2, 2.0f);
    if (CHECK_OK(vt_model_create(&c, &m), "MAE")) {
        int64_t k2[2 * 3] = { 0, 1, 1, 0, 2, 3 }, m2[2 * 2] = { 2, 3, 1, 4 };
        float im[2 * 3 * 8 * 8] = { 0 };
        memset(&in, 0, sizeof in);
        in.images = im;
        in.batch = 2;
        in.idx_keep = k2;
        in.n_keep = 3;
        in.idx_mask = m2;
        in.n_mask = 2;
        CHECK_ERR(vt_forward(m, VT_FN_LOSS, &in, 0), VT_ERR_ARG, "scatters",
                  "MAE loss with a repeated idx_keep");
        vt_model_free(m);
    }
}

/* ---- 4, 5. the parity harness: a dump when a file fails; size mismatches explained ------------- */

/* A parity file of a timm model's forward: params of m, images, expect/out (+ input/dout/out). */
static uint8_t *timm_file(vt_model *m, const char *cfg_json, const float *img, int B, const float *out,
                          int out_nd, const long long *out_shape, const float *dout, int dout_nd,
                          const long long *dout_shape, size_t *len) {
    int np = vt_param_count(m), n = 0;
    vt_st_entry *e = tu_xcalloc((size_t)np + 3, sizeof *e);
    char(*names)[128] = tu_xcalloc((size_t)np, 128);
    long long(*shapes)[4] = tu_xcalloc((size_t)np, sizeof *shapes);
    for (int i = 0; i < np; i++, n++) {
        snprintf(names[i], 128, "param/%s", vt_param_name(m, i));
        for (int d = 0; d < vt_param_ndim(m, i); d++) shapes[i][d] = vt_param_shape(m, i)[d];
        e[n] = (vt_st_entry){ names[i], VT_DT_F32, vt_param_ndim(m, i), shapes[i], vt_param_data(m, i) };
    }
    long long ish[4] = { B, 3, 8, 8 };
    e[n++] = (vt_st_entry){ "input/images", VT_DT_F32, 4, ish, img };
    e[n++] = (vt_st_entry){ "expect/out", VT_DT_F32, out_nd, out_shape, out };
    if (dout) e[n++] = (vt_st_entry){ "input/dout/out", VT_DT_F32, dout_nd, dout_shape, dout };
    const char *mk[] = { "format", "module", "config", "call" };
    const char *mv[] = { "vitrine-parity/1", "timm.VisionTransformer", cfg_json, "{\"fn\": \"forward\"}" };
    uint8_t *bytes = NULL;
    CHECK_OK(vt_st_write(e, (size_t)n, mk, mv, 4, &bytes, len), "write a parity file");
    free(e);
    free(names);
    free(shapes);
    return bytes;
}

static int dump_has(const vt_parity_result *r, const char *key) {
    vt_st_file f;
    if (!r->dump || vt_st_parse(r->dump, r->dump_len, &f)) return 0;
    int has = vt_st_find(&f, key) != NULL;
    vt_st_free(&f);
    return has;
}

static void test_parity_files(void) {
    tu_rng r = { 99 };
    const int B = 2;
    float img[2 * 3 * 8 * 8];
    tu_fill_normal(&r, img, sizeof img / sizeof img[0], 0, 1);
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = B;
    int64_t sh[4];
    int nd;
    char cfg[512];
    /* avg pooling + a 3-class head: the harness runs timm's forward (fc_norm and head), PASS */
    vt_model *m = tiny_timm("avg", 3, 0, &r);
    if (!m) return;
    snprintf(cfg, sizeof cfg,
             "{\"img_size\": 8, \"patch_size\": 4, \"embed_dim\": 8, \"depth\": 2, \"num_heads\": 2, "
             "\"mlp_ratio\": 2.0, \"global_pool\": \"avg\", \"num_classes\": 3}");
    CHECK_OK(vt_forward(m, VT_FN_TIMM_FORWARD, &in, 0), "timm forward");
    float logits[2 * 3];
    memcpy(logits, vt_output(m, 0, sh, &nd), sizeof logits);
    long long lsh[2] = { B, 3 }, fsh[2] = { B, 8 };
    size_t len = 0;
    uint8_t *file = timm_file(m, cfg, img, B, logits, 2, lsh, NULL, 0, NULL, &len);
    vt_parity_result res;
    vt_parity_run(file, len, NULL, 1, &res);
    CHECK(res.pass && res.status == VT_OK, "timm.VisionTransformer forward (avg, head 3): pass %d: %s",
          res.pass, res.error);
    vt_parity_free(&res);
    free(file);

    /* 4. a wrong expect/out: FAIL, and the dump still holds what was computed */
    logits[0] += 1.0f;
    file = timm_file(m, cfg, img, B, logits, 2, lsh, NULL, 0, NULL, &len);
    vt_parity_run(file, len, NULL, 1, &res);
    CHECK(!res.pass && res.status == VT_OK && dump_has(&res, "out"), "a failing file: pass %d, dump %p (%s)",
          res.pass, (void *)res.dump, res.error);
    vt_parity_free(&res);
    free(file);

    /* 5. expect/out of another size: the message names the output, both shapes and the cause */
    float feat8[2 * 8] = { 0 };
    file = timm_file(m, cfg, img, B, feat8, 2, fsh, NULL, 0, NULL, &len);
    vt_parity_run(file, len, NULL, 1, &res);
    CHECK(!res.pass && strstr(res.error, "'out'") && strstr(res.error, "[2, 3]") &&
              strstr(res.error, "[2, 8]") && strstr(res.error, "no classifier head") && dump_has(&res, "out"),
          "size mismatch message (file without head, config with): %s", res.error);
    vt_parity_free(&res);
    free(file);
    /* a dout of another size: the same, and the dump still has out */
    float dl[2 * 5] = { 0 };
    long long dsh[2] = { B, 5 };
    file = timm_file(m, cfg, img, B, logits, 2, lsh, dl, 2, dsh, &len);
    vt_parity_run(file, len, NULL, 1, &res);
    CHECK(!res.pass && strstr(res.error, "'out'") && strstr(res.error, "input/dout/out") &&
              strstr(res.error, "[2, 5]") && strstr(res.error, "[2, 3]") &&
              strstr(res.error, "num_classes") && dump_has(&res, "out"),
          "dout size mismatch message: %s", res.error);
    vt_parity_free(&res);
    free(file);
    vt_model_free(m);

    /* the config without a head, the file with one (what lightly's forward used to hit) */
    m = tiny_timm("token", 0, 0, &r);
    if (!m) return;
    snprintf(cfg, sizeof cfg,
             "{\"img_size\": 8, \"patch_size\": 4, \"embed_dim\": 8, \"depth\": 2, \"num_heads\": 2, "
             "\"mlp_ratio\": 2.0, \"num_classes\": 0}");
    float l7[2 * 7] = { 0 };
    long long l7s[2] = { B, 7 };
    file = timm_file(m, cfg, img, B, l7, 2, l7s, NULL, 0, NULL, &len);
    vt_parity_run(file, len, NULL, 0, &res);
    CHECK(!res.pass && strstr(res.error, "[2, 8]") && strstr(res.error, "[2, 7]") &&
              strstr(res.error, "classifier head") && strstr(res.error, "num_classes 7"),
          "size mismatch message (file with a 7-class head): %s", res.error);
    vt_parity_free(&res);
    free(file);
    /* pooling: a [B, T, D] expect against a pooled output */
    float tok[2 * 5 * 8] = { 0 };
    long long ts[3] = { B, 5, 8 };
    file = timm_file(m, cfg, img, B, tok, 3, ts, NULL, 0, NULL, &len);
    vt_parity_run(file, len, NULL, 0, &res);
    CHECK(!res.pass && strstr(res.error, "[2, 5, 8]") && strstr(res.error, "pooling"),
          "pooling mismatch message: %s", res.error);
    vt_parity_free(&res);
    free(file);
    vt_model_free(m);
}

/* ---- training from timm / lightly / vitrine weights ---------------------------------------------- */

/* the same tensors under prefix + name (plus extra tensors), without metadata: a file as timm /
 * lightly write it */
static uint8_t *relabel(const uint8_t *bytes, size_t len, const char *prefix, int drop_head,
                        size_t *out_len) {
    vt_st_file f;
    if (!CHECK_OK(vt_st_parse(bytes, len, &f), "parse")) return NULL;
    vt_st_entry *e = tu_xcalloc(f.n + 1, sizeof *e);
    char(*nm)[160] = tu_xcalloc(f.n + 1, 160);
    size_t k = 0;
    for (size_t i = 0; i < f.n; i++) {
        const vt_st_tensor *t = &f.tensors[i];
        if (drop_head && (!strcmp(t->name, "head.weight") || !strcmp(t->name, "head.bias"))) continue;
        snprintf(nm[k], 160, "%s%s", !strcmp(t->name, "mask_token") ? "" : prefix, t->name);
        e[k] = (vt_st_entry){ nm[k], t->dtype, t->ndim, t->shape, t->data };
        k++;
    }
    uint8_t *out = NULL;
    CHECK_OK(vt_st_write(e, k, NULL, NULL, 0, &out, out_len), "write");
    free(e);
    free(nm);
    vt_st_free(&f);
    return out;
}

static vt_model *fresh(vt_kind kind, int num_classes, uint64_t seed) {
    vt_model_config c;
    tu_tiny_config(&c, kind, 8, 4, 8, 2, 2, 2.0f);
    c.enc.num_classes = num_classes;
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), vt_kind_name(kind))) return NULL;
    CHECK_OK(vt_init_weights(m, seed), "init");
    return m;
}

/* every parameter of `to` under to_prefix equals `from`'s under from_prefix */
static int same_weights(vt_model *to, const char *to_prefix, vt_model *from, const char *from_prefix) {
    int n = 0;
    for (int i = 0; i < vt_param_count(to); i++) {
        const char *name = vt_param_name(to, i);
        if (strncmp(name, to_prefix, strlen(to_prefix))) continue;
        char other[256];
        snprintf(other, sizeof other, "%s%s", from_prefix, name + strlen(to_prefix));
        int j = vt_param_find(from, other);
        if (j < 0) continue;
        if (memcmp(vt_param_data(to, i), vt_param_data(from, j), vt_param_numel(to, i) * sizeof(float)))
            return -1;
        n++;
    }
    return n;
}

static void test_init(void) {
    tu_rng r = { 5 };
    vt_init_report rep;
    uint8_t *file = NULL, *t = NULL;
    size_t len = 0, tl = 0;
    /* timm with a 10-class head -> an MAE model (no head): the head is skipped with a message, the
     * learned pos_embed becomes trainable; strict refuses the skip */
    vt_model *src = fresh(VT_KIND_TIMM, 10, 1), *dst = fresh(VT_KIND_MAE, 0, 2);
    if (!src || !dst) return;
    tu_init_params(src, &r);
    CHECK_OK(vt_save_safetensors(src, "", "", &file, &len), "save timm");
    t = relabel(file, len, "", 0, &tl);
    CHECK_ERR(vt_init_from_safetensors(dst, t, tl, 1, &rep), VT_ERR_MISMATCH, "head.weight",
              "strict: a head skipped");
    int pi = vt_param_find(dst, "backbone.vit.pos_embed");
    CHECK(!vt_param_requires_grad(dst, pi), "a failed strict init changed pos_embed's flag");
    CHECK(same_weights(dst, "backbone.vit.", src, "") < 0, "a failed strict init loaded weights");
    if (CHECK_OK(vt_init_from_safetensors(dst, t, tl, 0, &rep), "timm (head) -> MAE")) {
        CHECK(
            !strcmp(rep.source, "timm VisionTransformer state_dict") && rep.skipped == 2 &&
                rep.missing == 0 &&
                strstr(rep.notes, "head.weight [10, 8]: skipped: a classifier head, and the model has none"),
            "timm -> MAE report: %s, skipped %d missing %d\n%s", rep.source, rep.skipped, rep.missing,
            rep.notes);
        CHECK(same_weights(dst, "backbone.vit.", src, "") == rep.loaded && rep.loaded > 10,
              "timm -> MAE: %d loaded", rep.loaded);
        CHECK(rep.pos_embed == VT_INIT_POS_LEARNED_NOW_TRAINABLE && vt_param_requires_grad(dst, pi),
              "a learned pos_embed from timm must train (report %d)", rep.pos_embed);
    }
    free(t);
    /* the same file without its head: nothing skipped, strict passes */
    t = relabel(file, len, "", 1, &tl);
    vt_model_free(dst);
    dst = fresh(VT_KIND_MAE, 0, 2);
    CHECK_OK(vt_init_from_safetensors(dst, t, tl, 1, &rep), "strict timm (no head) -> MAE");
    CHECK(rep.skipped == 0 && rep.missing == 0, "timm without head: skipped %d missing %d", rep.skipped,
          rep.missing);
    free(t);
    /* a head of another size into a timm classifier: skipped, named */
    vt_model *cls = fresh(VT_KIND_TIMM, 5, 3);
    t = relabel(file, len, "", 0, &tl);
    if (cls && CHECK_OK(vt_init_from_safetensors(cls, t, tl, 0, &rep), "timm head 10 -> timm head 5"))
        CHECK(rep.skipped == 2 &&
                  strstr(rep.notes, "head.weight [10, 8]: skipped: a classifier head of another size "
                                    "(the model's is [5, 8])"),
              "head of another size:\n%s", rep.notes);
    vt_model_free(cls);
    free(t);
    free(file);
    vt_model_free(src);
    vt_model_free(dst);

    /* lightly MaskedVisionTransformerTIMM (mask_token, vit.*, sin-cos pos_embed) -> MAE: all of it,
     * mask token included; the sin-cos pos_embed stays frozen (lightly's MAE freezes it) */
    src = fresh(VT_KIND_LIGHTLY, 0, 4);
    dst = fresh(VT_KIND_MAE, 0, 5);
    CHECK_OK(vt_save_safetensors(src, "", "", &file, &len), "save lightly");
    if (CHECK_OK(vt_init_from_safetensors(dst, file, len, 1, &rep), "lightly -> MAE")) {
        CHECK(!strcmp(rep.source, "lightly MaskedVisionTransformerTIMM (vit. keys)") && rep.skipped == 0 &&
                  rep.pos_embed == VT_INIT_POS_SINCOS_FROZEN,
              "lightly -> MAE: %s, skipped %d, pos %d", rep.source, rep.skipped, rep.pos_embed);
        CHECK(same_weights(dst, "backbone.", src, "") == rep.loaded, "lightly -> MAE: weights differ");
        CHECK(!vt_param_requires_grad(dst, vt_param_find(dst, "backbone.vit.pos_embed")),
              "sin-cos pos_embed must stay frozen");
    }
    free(file);
    /* a lightly file into a timm model: the mask token has no place there, named */
    vt_model *tm = fresh(VT_KIND_TIMM, 0, 6);
    CHECK_OK(vt_save_safetensors(src, "", "", &file, &len), "save lightly");
    if (tm && CHECK_OK(vt_init_from_safetensors(tm, file, len, 0, &rep), "lightly -> timm"))
        CHECK(rep.skipped == 1 && strstr(rep.notes, "mask_token [1, 1, 8]: skipped"), "lightly -> timm:\n%s",
              rep.notes);
    vt_model_free(tm);
    free(file);
    vt_model_free(src);
    vt_model_free(dst);

    /* vitrine: the encoder file (timm keys + timm_kwargs) and a training checkpoint (everything,
     * decoder included; AdamW's moments are not weights) */
    src = fresh(VT_KIND_MAE, 0, 7);
    tu_init_params(src, &r);
    vt_train_config tc;
    vt_train_config_default(&tc, VT_KIND_MAE);
    CHECK_OK(vt_trainer_init(src, &tc), "trainer");
    CHECK_OK(vt_save_safetensors(src, "backbone.vit.", "", &file, &len), "save encoder");
    dst = fresh(VT_KIND_AIM, 0, 8);
    /* an AIM backbone has no class token: cls_token is skipped, the shapes of pos_embed differ */
    if (dst && CHECK_OK(vt_init_from_safetensors(dst, file, len, 0, &rep), "vitrine encoder -> AIM"))
        CHECK(!strcmp(rep.source, "vitrine encoder (timm keys)") && strstr(rep.notes, "cls_token") &&
                  strstr(rep.notes,
                         "pos_embed [1, 5, 8]: skipped: the model's backbone.pos_embed is [1, 4, 8]"),
              "vitrine encoder -> AIM: %s\n%s", rep.source, rep.notes);
    vt_model_free(dst);
    vt_st_file f;
    if (CHECK_OK(vt_st_parse(file, len, &f), "parse encoder")) {
        const char *kw = vt_st_meta(&f, "timm_kwargs");
        vt_vit_config back;
        vt_vit_config_default(&back);
        CHECK(kw && vt_vit_config_from_json(kw, strlen(kw), &back) == VT_OK &&
                  !memcmp(&back, &vt_model_get_config(src)->enc, offsetof(vt_vit_config, mask_token)),
              "timm_kwargs do not rebuild the encoder's config: %s", kw ? kw : "(none)");
        /* only keyword arguments of timm's VisionTransformer (reference-models.md 1.1) */
        static const char *timm_args[] = { "img_size",    "patch_size", "in_chans",       "num_classes",
                                           "global_pool", "embed_dim",  "depth",          "num_heads",
                                           "mlp_ratio",   "qkv_bias",   "qk_norm",        "init_values",
                                           "class_token", "reg_tokens", "no_embed_class", "pos_embed" };
        for (const char *q = kw; q && (q = strchr(q, '"'));) {
            const char *end = strchr(q + 1, '"');
            if (!end) break;
            if (end[1] == ':') {
                int ok = 0;
                for (size_t i = 0; i < sizeof timm_args / sizeof timm_args[0]; i++)
                    ok |= (size_t)(end - q - 1) == strlen(timm_args[i]) &&
                          !strncmp(q + 1, timm_args[i], (size_t)(end - q - 1));
                CHECK(ok, "timm_kwargs has '%.*s', not a VisionTransformer argument", (int)(end - q - 1),
                      q + 1);
            }
            q = end + 1;
        }
        vt_st_free(&f);
    }
    free(file);
    uint8_t *state = NULL;
    size_t sl = 0;
    CHECK_OK(vt_train_state_save(src, &state, &sl), "checkpoint");
    dst = fresh(VT_KIND_MAE, 0, 9);
    if (dst && CHECK_OK(vt_init_from_safetensors(dst, state, sl, 1, &rep), "vitrine checkpoint -> MAE")) {
        CHECK(!strcmp(rep.source, "vitrine training checkpoint (parameters only)") &&
                  rep.loaded == vt_param_count(dst) && same_weights(dst, "", src, "") == vt_param_count(dst),
              "checkpoint -> MAE: %s, %d of %d loaded", rep.source, rep.loaded, vt_param_count(dst));
    }
    vt_model_free(dst);
    free(state);
    vt_model_free(src);
    /* no ViT in the file */
    dst = fresh(VT_KIND_TIMM, 0, 10);
    float one = 1;
    long long s1[1] = { 1 };
    vt_st_entry e1 = { "foo", VT_DT_F32, 1, s1, &one };
    CHECK_OK(vt_st_write(&e1, 1, NULL, NULL, 0, &file, &len), "write");
    CHECK_ERR(vt_init_from_safetensors(dst, file, len, 0, &rep), VT_ERR_FORMAT, "no ViT",
              "a file without a ViT");
    free(file);
    vt_model_free(dst);
}

/* ---- 7. a state_dict saved by timm loads strictly ---------------------------------------------- */

/* Each tests/parity file's parameters are its module's state_dict as timm / lightly made it: written
 * as a plain state_dict file (what save_file(model.state_dict()) writes) and started from with
 * vt_init_from_safetensors(strict): every tensor taken, none missing, the values unchanged. */
static void test_state_dicts_load_strictly(void) {
    int n = 0, checked = 0;
    char **files = tu_list_parity(&n);
    for (int f = 0; f < n; f++) {
        size_t len = 0;
        uint8_t *bytes = tu_read_file(files[f], &len);
        vt_st_file st;
        if (!CHECK(bytes && !vt_st_parse(bytes, len, &st), "%s: read", files[f])) {
            free(bytes);
            continue;
        }
        const char *module = vt_st_meta(&st, "module"), *cfg = vt_st_meta(&st, "config");
        vt_kind kind = VT_KIND_TIMM;
        if (strstr(module, "MaskedVisionTransformerTIMM")) kind = VT_KIND_LIGHTLY;
        if (strstr(module, "MaskedCausal")) kind = VT_KIND_CAUSAL;
        if (strstr(module, "MAE")) kind = VT_KIND_MAE;
        if (strstr(module, "AIM")) kind = VT_KIND_AIM;
        vt_st_entry *e = tu_xcalloc(st.n + 1, sizeof *e);
        float **data = tu_xcalloc(st.n + 1, sizeof *data);
        size_t ne = 0;
        for (size_t i = 0; i < st.n; i++) {
            const vt_st_tensor *t = &st.tensors[i];
            const char *k = !strncmp(t->name, "param/", 6)    ? t->name + 6
                            : !strncmp(t->name, "frozen/", 7) ? t->name + 7
                                                              : NULL;
            if (!k) continue;
            data[ne] = tu_xmalloc(t->numel * 4 + 4);
            vt_st_to_f32(t, data[ne]);
            e[ne] = (vt_st_entry){ k, VT_DT_F32, t->ndim, t->shape, data[ne] };
            ne++;
        }
        uint8_t *sd = NULL;
        size_t sd_len = 0;
        vt_model_config mc;
        vt_model *m = NULL;
        vt_init_report rep;
        const char *base = tu_base(files[f]);
        int rc = vt_st_write(e, ne, NULL, NULL, 0, &sd, &sd_len);
        if (!rc) rc = vt_model_config_from_json(cfg, strlen(cfg), kind, &mc);
        if (!rc) rc = vt_model_create(&mc, &m);
        if (!rc) rc = vt_init_from_safetensors(m, sd, sd_len, 1, &rep);
        if (CHECK_OK(rc, base)) {
            int same = rep.skipped == 0 && rep.missing == 0 && rep.resampled == 0;
            for (size_t i = 0; i < ne && same; i++) {
                int j = vt_param_find(m, e[i].name);
                same = j >= 0 && !memcmp(vt_param_data(m, j), data[i], vt_param_numel(m, j) * 4);
            }
            CHECK(same && rep.loaded == vt_param_count(m),
                  "%s: loaded %d of %d (skipped %d, missing %d, resampled %d)", base, rep.loaded,
                  vt_param_count(m), rep.skipped, rep.missing, rep.resampled);
            checked++;
        }
        vt_model_free(m);
        free(sd);
        for (size_t i = 0; i < ne; i++) free(data[i]);
        free(data);
        free(e);
        vt_st_free(&st);
        free(bytes);
    }
    tu_free_list(files, n);
    CHECK(checked >= 30, "state_dicts of %d tests/parity files loaded strictly", checked);
}

int main(void) {
    test_state_dicts_load_strictly();
    test_mlp_hidden();
    test_timm_forward();
    test_repeated_keep();
    test_parity_files();
    test_init();
    return tu_finish();
}
