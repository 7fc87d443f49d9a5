/* test_checkpoint.c: gradient checkpointing never changes a bit.
 * 1. Every model fixture (vit_*, causal_*, mae_*, aim_*) under every policy: the parity dump
 *    (outputs, intermediates, every parameter gradient, the image gradient) is byte-identical to
 *    the policy-none dump.
 * 2. The same through the public API on deeper tiny models (depth 5 encoders, 3-block MAE decoder
 *    and AIM head, so that every:2 / every:3 / sqrt make partial segments), on one model object
 *    whose policy is switched between calls.
 * 3. Masked-causal: is_causal changes the output; each is bitwise stable under checkpointing.
 * 4. Frozen preprocessing: block gradients non-zero and bitwise equal to the unfrozen run's.
 * 5. Input-gradient-only backward: parameter gradients untouched, same d images bits. */
#include "test_util.h"
#include "json.h"
#include "parity.h"
#include "safetensors.h"

#define TU_MAX_OUT 16
static const char *POLICIES[] = { "block", "every:2", "every:3", "sqrt", "selective" };
#define NPOL (int)(sizeof POLICIES / sizeof POLICIES[0])

/* ---- plans: a budget halfway between the 'block' and the 'none' plan -------------------------------- */
static int plan_act(vt_model *m, vt_fn fn, const vt_inputs *in, const char *policy, size_t *bytes) {
    int rc = vt_set_grad_checkpointing(m, policy);
    vt_plan_bytes pb;
    if (!rc) rc = vt_plan(m, fn, in, 1, &pb);
    if (!rc) *bytes = pb.activations;
    return rc;
}

/* budgets[0..2] at 25%, 50%, 75% between block and none */
static int mid_budgets(vt_model *m, vt_fn fn, const vt_inputs *in, size_t budgets[3], size_t *pnone,
                       size_t *pblock) {
    size_t none = 0, block = 0;
    int rc = plan_act(m, fn, in, "none", &none);
    if (!rc) rc = plan_act(m, fn, in, "block", &block);
    if (rc) return rc;
    for (int i = 0; i < 3; i++) budgets[i] = block + (none - block) * (size_t)(i + 1) / 4;
    *pnone = none;
    *pblock = block;
    vt_set_grad_checkpointing(m, "none");
    return VT_OK;
}

/* ---- 1. fixtures --------------------------------------------------------------------------------------- */
static int fixture_budgets(const uint8_t *bytes, size_t len, size_t budgets[3], size_t *pnone,
                           size_t *pblock) {
    vt_st_file f;
    int rc = vt_st_parse(bytes, len, &f);
    if (rc) return rc;
    const char *module = vt_st_meta(&f, "module"), *cfg = vt_st_meta(&f, "config"),
               *call = vt_st_meta(&f, "call");
    vt_json *cj = NULL;
    vt_model *m = NULL;
    vt_kind kind;
    if (!module || !cfg || !call) {
        rc = vt_fail(VT_ERR_FORMAT, "metadata");
        goto out;
    }
    if (!strcmp(module, "lightly.MaskedVisionTransformerTIMM"))
        kind = VT_KIND_LIGHTLY;
    else if (!strcmp(module, "lightly.MaskedCausalVisionTransformer"))
        kind = VT_KIND_CAUSAL;
    else if (!strcmp(module, "timm.VisionTransformer") || !strcmp(module, "timm.VisionTransformerDistilled"))
        kind = VT_KIND_TIMM;
    else if (!strcmp(module, "lightly.examples.MAE"))
        kind = VT_KIND_MAE;
    else if (!strcmp(module, "lightly.examples.AIM"))
        kind = VT_KIND_AIM;
    else {
        rc = vt_fail(VT_ERR_FORMAT, "module %s", module);
        goto out;
    }
    if ((rc = vt_json_parse(call, strlen(call), &cj))) goto out;
    const vt_json *fnj = vt_json_get(cj, "fn"), *nj = vt_json_get(cj, "norm");
    const char *fs = fnj && fnj->type == VT_JSON_STRING ? fnj->str : "";
    const vt_json *dtj = vt_json_get(cj, "distilled_training");
    vt_fn fn =
        !strcmp(fs, "forward") ? (kind == VT_KIND_TIMM ? VT_FN_TIMM_FORWARD : VT_FN_FORWARD)
        : !strcmp(fs, "forward_intermediates")
            ? (nj && nj->type == VT_JSON_BOOL && nj->boolean ? VT_FN_INTERMEDIATES_NORM : VT_FN_INTERMEDIATES)
        : !strcmp(fs, "loss") ? VT_FN_LOSS
                              : VT_FN_ENCODE;
    vt_model_config mc;
    if ((rc = vt_model_config_from_json(cfg, strlen(cfg), kind, &mc))) goto out;
    if ((rc = vt_model_create(&mc, &m))) goto out;
    vt_inputs in;
    memset(&in, 0, sizeof in);
    const vt_st_tensor *t = vt_st_find(&f, "input/images");
    if (!t) {
        rc = vt_fail(VT_ERR_FORMAT, "no images");
        goto out;
    }
    in.batch = (int)t->shape[0];
    in.height = (int)t->shape[2];
    in.width = (int)t->shape[3];
    in.distilled_training = dtj && dtj->type == VT_JSON_BOOL && dtj->boolean;
    static const int64_t dummy[1] = { 0 };
    static const uint8_t dmask[1] = { 0 };
    if ((t = vt_st_find(&f, "input/idx_keep"))) {
        in.idx_keep = dummy;
        in.n_keep = (int)t->shape[1];
    }
    if ((t = vt_st_find(&f, "input/idx_mask"))) {
        in.idx_mask = dummy;
        in.n_mask = (int)t->shape[1];
    }
    if (vt_st_find(&f, "input/mask")) in.mask = dmask;
    in.is_causal = 1;
    rc = mid_budgets(m, fn, &in, budgets, pnone, pblock);
out:
    vt_model_free(m);
    vt_json_free(cj);
    vt_st_free(&f);
    return rc;
}

static int is_model_fixture(const char *base) {
    return !strncmp(base, "vit_", 4) || !strncmp(base, "causal_", 7) || !strncmp(base, "mae_", 4) ||
           !strncmp(base, "aim_", 4);
}

/* every model file of a folder (all: tests/parity's are all models) under every policy */
static void test_fixtures_in(char **files, int n, int all, const char *dir, int want) {
    int nmodel = 0;
    CHECK(n > 0, "no parity files found in %s", dir);
    for (int i = 0; i < n; i++) {
        const char *base = tu_base(files[i]);
        if (!all && !is_model_fixture(base)) continue;
        nmodel++;
        size_t len = 0;
        uint8_t *bytes = tu_read_file(files[i], &len);
        if (!CHECK(bytes, "%s: cannot read", files[i])) continue;
        vt_parity_result r0;
        int rc = vt_parity_run(bytes, len, "none", 1, &r0);
        if (!CHECK(rc == VT_OK && r0.pass && r0.dump && r0.dump_len > 0, "%s: policy none: rc %d pass %d: %s",
                   base, rc, r0.pass, r0.error)) {
            vt_parity_free(&r0);
            free(bytes);
            continue;
        }
        size_t budgets[3] = { 0, 0, 0 }, none = 0, block = 0;
        rc = fixture_budgets(bytes, len, budgets, &none, &block);
        CHECK_OK(rc, "fixture plan for a budget");
        /* (tests/parity's depth-1 models: block equals none, the one block handed over) */
        CHECK(all ? block <= none : block < none, "%s: block plan %zu not below none plan %zu", base, block,
              none);
        char pol[NPOL + 3][48];
        for (int p = 0; p < NPOL; p++) snprintf(pol[p], sizeof pol[p], "%s", POLICIES[p]);
        for (int b = 0; b < 3; b++) snprintf(pol[NPOL + b], sizeof pol[NPOL + b], "budget:%zu", budgets[b]);
        for (int p = 0; p < NPOL + 3; p++) {
            vt_parity_result r;
            rc = vt_parity_run(bytes, len, pol[p], 1, &r);
            int ok = CHECK(rc == VT_OK && r.pass,
                           "%s%s: policy %s (block plan %zu, none plan %zu): rc %d pass %d: %s",
                           p >= NPOL && rc == VT_ERR_BUDGET ? "ENGINE BUG (budget search): " : "", base,
                           pol[p], block, none, rc, r.pass, r.error);
            if (ok)
                CHECK(
                    r.dump_len == r0.dump_len && !memcmp(r.dump, r0.dump, r0.dump_len),
                    "%s: policy %s: computed tensors are not bitwise equal to policy none (%zu vs %zu bytes)",
                    base, pol[p], r.dump_len, r0.dump_len);
            vt_parity_free(&r);
        }
        vt_parity_free(&r0);
        free(bytes);
    }
    CHECK(nmodel >= want, "only %d model files found in %s", nmodel, dir);
    tu_info("%s: %d model files x %d policies bitwise equal to none", dir, nmodel, NPOL + 3);
    tu_free_list(files, n);
}
static void test_fixtures(void) {
    int n = 0;
    char **files = tu_list_fixtures(&n);
    test_fixtures_in(files, n, 0, VT_FIXTURES_DIR, 12);
    files = tu_list_parity(&n);
    test_fixtures_in(files, n, 1, VT_PARITY_DIR, 30);
}

/* ---- 2. direct API ---------------------------------------------------------------------------------------- */
typedef struct {
    int nout;
    int64_t shape[TU_MAX_OUT][4];
    int ndim[TU_MAX_OUT];
    float *outs[TU_MAX_OUT];
    size_t nel[TU_MAX_OUT];
    float *grads;
    size_t ng;
    float *dimg;
    size_t nimg;
} result;

static void result_free(result *r) {
    for (int i = 0; i < r->nout; i++) free(r->outs[i]);
    free(r->grads);
    free(r->dimg);
    memset(r, 0, sizeof *r);
}

/* forward(need_grad) + backward (param_grads pg, d images) with the model's current policy */
static int run(vt_model *m, vt_fn fn, const vt_inputs *in, float **douts, int ndo, size_t nimg, int pg,
               result *res) {
    memset(res, 0, sizeof *res);
    int rc = vt_forward(m, fn, in, 1);
    if (rc) return rc;
    res->nout = vt_output_count(m);
    for (int i = 0; i < res->nout; i++) {
        const float *y = vt_output(m, i, res->shape[i], &res->ndim[i]);
        res->nel[i] = tu_numel(res->shape[i], res->ndim[i]);
        res->outs[i] = tu_xmalloc(res->nel[i] * 4);
        memcpy(res->outs[i], y, res->nel[i] * 4);
    }
    res->nimg = nimg;
    res->dimg = tu_xcalloc(nimg, 4);
    if (pg) vt_zero_grad(m);
    rc = vt_backward(m, (const float *const *)douts, ndo, res->dimg, pg);
    res->grads = tu_copy_grads(m, &res->ng);
    return rc;
}

static void compare(const char *what, const result *a, const result *b, int grads_too) {
    int ok = a->nout == b->nout;
    for (int i = 0; ok && i < a->nout; i++)
        ok = a->ndim[i] == b->ndim[i] && !memcmp(a->shape[i], b->shape[i], sizeof a->shape[i]) &&
             !memcmp(a->outs[i], b->outs[i], a->nel[i] * 4);
    CHECK(ok, "%s: outputs (count %d vs %d, shapes, bits) differ", what, a->nout, b->nout);
    if (grads_too)
        CHECK(a->ng == b->ng && !memcmp(a->grads, b->grads, a->ng * 4), "%s: parameter gradients differ",
              what);
    CHECK(a->nimg == b->nimg && !memcmp(a->dimg, b->dimg, a->nimg * 4), "%s: d images differ", what);
}

/* All policies on one model object (policy switched between calls), vs none; then none again,
 * and the input-gradient-only backward under every policy. */
static void policies_case(const char *name, const vt_model_config *cfg, vt_fn fn, vt_inputs *in,
                          uint64_t seed) {
    tu_rng r = { seed };
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(cfg, &m), name)) return;
    tu_init_params(m, &r);
    size_t nimg = (size_t)in->batch * cfg->enc.in_chans * (in->height ? in->height : cfg->enc.img_size) *
                  (in->width ? in->width : vt_img_width(&cfg->enc));
    float *img = tu_xmalloc(nimg * 4);
    tu_fill_normal(&r, img, nimg, 0, 1);
    in->images = img;
    int ndo = 0;
    float **douts = NULL;
    if (fn != VT_FN_LOSS) {
        if (!CHECK_OK(vt_forward(m, fn, in, 0), name)) goto out;
        douts = tu_random_douts(m, &r, &ndo);
    }
    size_t budgets[3], none = 0, block = 0;
    if (!CHECK_OK(mid_budgets(m, fn, in, budgets, &none, &block), name)) goto out;
    result ref;
    CHECK_OK(vt_set_grad_checkpointing(m, "none"), name);
    int rc = run(m, fn, in, douts, ndo, nimg, 1, &ref);
    if (!CHECK_OK(rc, name)) {
        result_free(&ref);
        goto out;
    }
    double gmax = 0;
    for (size_t k = 0; k < ref.ng; k++) gmax = fmax(gmax, fabs(ref.grads[k]));
    CHECK(gmax > 0, "%s: all-zero gradients", name);
    char pol[NPOL + 4][48];
    for (int p = 0; p < NPOL; p++) snprintf(pol[p], sizeof pol[p], "%s", POLICIES[p]);
    for (int b = 0; b < 3; b++) snprintf(pol[NPOL + b], sizeof pol[NPOL + b], "budget:%zu", budgets[b]);
    snprintf(pol[NPOL + 3], sizeof pol[NPOL + 3], "none");
    for (int p = 0; p < NPOL + 4; p++) {
        char what[512];
        snprintf(what, sizeof what, "%s [%s]", name, pol[p]);
        if (!CHECK_OK(vt_set_grad_checkpointing(m, pol[p]), what)) continue;
        if (!strncmp(pol[p],
                     "budget:", 7)) { /* between the block and none plans: must resolve to a fitting mix */
            vt_plan_bytes pb;
            rc = vt_plan(m, fn, in, 1, &pb);
            if (!CHECK(rc == VT_OK,
                       "ENGINE BUG (budget search): %s: a budget between the block plan (%zu) and the none "
                       "plan (%zu) is refused: rc %d: %s",
                       what, block, none, rc, vt_last_error()))
                continue;
            CHECK(pb.activations <= budgets[p - NPOL] && pb.activations < none,
                  "%s: budget plan %zu (budget %zu, none %zu)", what, pb.activations, budgets[p - NPOL],
                  none);
        }
        result res;
        rc = run(m, fn, in, douts, ndo, nimg, 1, &res);
        if (CHECK_OK(rc, what)) compare(what, &ref, &res, 1);
        result_free(&res);
        /* input gradient only: gradients untouched (sentinel), same d images bits */
        tu_fill_grads(m, 1234.5f);
        rc = run(m, fn, in, douts, ndo, nimg, 0, &res);
        if (CHECK_OK(rc, what)) {
            int untouched = 1;
            for (size_t k = 0; k < res.ng; k++) untouched &= res.grads[k] == 1234.5f;
            CHECK(untouched, "%s: backward(param_grads=0) wrote parameter gradients", what);
            compare(what, &ref, &res, 0);
        }
        result_free(&res);
    }
    /* a policy switch between the forward and its backward: a clean error or the same bits */
    {
        vt_set_grad_checkpointing(m, "block");
        rc = vt_forward(m, fn, in, 1);
        CHECK_OK(rc, name);
        vt_set_grad_checkpointing(m, "none");
        float *d = tu_xcalloc(nimg, 4);
        vt_zero_grad(m);
        rc = vt_backward(m, (const float *const *)douts, ndo, d, 1);
        CHECK(rc == VT_ERR_STATE || (rc == VT_OK && !memcmp(d, ref.dimg, nimg * 4)),
              "%s: policy switched between forward and backward: rc %d (%s)", name, rc, vt_last_error());
        free(d);
    }
    result_free(&ref);
out:
    tu_free_douts(douts, ndo);
    free(img);
    vt_model_free(m);
}

static void test_direct(void) {
    vt_model_config c;
    vt_inputs in;
    tu_rng r = { 99 };
    const int B = 2;
    /* lightly depth 5, registers, qk_norm, LayerScale */
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 12, 4, 12, 5, 2, 2.0f);
    c.enc.reg_tokens = 1;
    c.enc.qk_norm = 1;
    c.enc.init_values = 0.1f;
    int64_t im[2 * 3] = { 1, 4, 8, 3, 9, 6 }, ik[2 * 6] = { 0, 2, 3, 5, 7, 10, 10, 0, 1, 4, 8, 6 };
    memset(&in, 0, sizeof in);
    in.batch = B;
    policies_case("lightly d5 encode", &c, VT_FN_ENCODE, &in, 1);
    in.idx_mask = im;
    in.n_mask = 3;
    in.idx_keep = ik;
    in.n_keep = 6;
    policies_case("lightly d5 encode idx_mask+idx_keep", &c, VT_FN_ENCODE, &in, 2);
    memset(&in, 0, sizeof in);
    in.batch = B;
    policies_case("lightly d5 forward (token)", &c, VT_FN_FORWARD, &in, 3);
    policies_case("lightly d5 intermediates", &c, VT_FN_INTERMEDIATES, &in, 4);
    policies_case("lightly d5 intermediates norm", &c, VT_FN_INTERMEDIATES_NORM, &in, 5);
    /* repeated idx_keep (a gather; more tokens than the sequence) */
    int64_t rk[2 * 12] = { 0, 3, 3, 1, 0, 3, 2, 9, 9, 9, 4, 5, 4, 4, 4, 0, 1, 2, 4, 10, 10, 8, 7, 6 };
    in.idx_keep = rk;
    in.n_keep = 12;
    policies_case("lightly d5 encode repeated idx_keep", &c, VT_FN_ENCODE, &in, 41);
    memset(&in, 0, sizeof in);
    in.batch = B;
    /* timm's forward: avgmax pooling, fc_norm, a classifier head */
    {
        vt_model_config t = c;
        t.kind = VT_KIND_TIMM;
        t.enc.mask_token = 0;
        t.enc.num_classes = 3;
        vt_pool_from_name("avgmax", &t.enc.global_pool);
        policies_case("timm d5 forward (avgmax, fc_norm, head)", &t, VT_FN_TIMM_FORWARD, &in, 42);
    }
    /* the rest of timm's options (tu_option_case), depth 5, timm's forward */
    for (int o = 0;; o++) {
        vt_model_config oc;
        memset(&in, 0, sizeof in);
        const char *nm = tu_option_case(o, 5, &oc, &in);
        if (!nm) break;
        in.batch = B;
        char what[160];
        snprintf(what, sizeof what, "timm d5 %s", nm);
        policies_case(what, &oc, VT_FN_TIMM_FORWARD, &in, 300 + (uint64_t)o);
    }
    memset(&in, 0, sizeof in);
    in.batch = B;
    /* plain block (no qk_norm / LayerScale), depth 7, bool mask */
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 8, 4, 8, 7, 2, 2.0f);
    uint8_t bm[2 * 5] = { 0, 1, 0, 0, 1, 1, 0, 1, 0, 0 };
    memset(&in, 0, sizeof in);
    in.batch = B;
    in.mask = bm;
    policies_case("lightly d7 bool mask encode", &c, VT_FN_ENCODE, &in, 6);
    /* masked causal */
    tu_tiny_config(&c, VT_KIND_CAUSAL, 12, 4, 12, 5, 2, 1.5f);
    uint8_t cm[2 * 9] = { 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1 };
    memset(&in, 0, sizeof in);
    in.batch = B;
    in.mask = cm;
    in.is_causal = 1;
    policies_case("causal d5 mask is_causal=1", &c, VT_FN_ENCODE, &in, 7);
    in.is_causal = 0;
    policies_case("causal d5 mask is_causal=0", &c, VT_FN_ENCODE, &in, 7);
    in.is_causal = 1;
    policies_case("causal d5 mask is_causal=1 forward", &c, VT_FN_FORWARD, &in, 8);
    /* MAE: encoder depth 3, decoder depth 3 */
    tu_tiny_config(&c, VT_KIND_MAE, 12, 4, 8, 3, 2, 2.0f);
    c.decoder_depth = 3;
    c.norm_pix_loss = 1;
    int64_t mk[2 * 5], mm[2 * 5];
    tu_random_token_mask(&r, B, 1, 9, 5, mk, mm);
    memset(&in, 0, sizeof in);
    in.batch = B;
    in.idx_keep = mk;
    in.n_keep = 5;
    in.idx_mask = mm;
    in.n_mask = 5;
    policies_case("MAE e3 d3 loss", &c, VT_FN_LOSS, &in, 9);
    /* AIM: encoder depth 3, head blocks 3 */
    tu_tiny_config(&c, VT_KIND_AIM, 8, 4, 8, 3, 2, 2.0f);
    c.head_blocks = 3;
    uint8_t am[2 * 4] = { 0, 1, 1, 1, 0, 0, 1, 1 };
    memset(&in, 0, sizeof in);
    in.batch = B;
    in.mask = am;
    in.is_causal = 1;
    policies_case("AIM e3 h3 loss", &c, VT_FN_LOSS, &in, 10);
    /* the classifier loss (timm + cross-entropy, label smoothing), token and avg (fc_norm) pools */
    int32_t labels[2] = { 2, 0 };
    for (int avg = 0; avg <= 1; avg++) {
        tu_tiny_config(&c, VT_KIND_TIMM, 12, 4, 12, 5, 2, 2.0f);
        c.enc.num_classes = 3;
        c.enc.reg_tokens = 1;
        vt_pool_from_name(avg ? "avg" : "token", &c.enc.global_pool);
        memset(&in, 0, sizeof in);
        in.batch = B;
        in.labels = labels;
        in.label_smoothing = 0.1f;
        policies_case(avg ? "classifier d5 loss (avg, fc_norm)" : "classifier d5 loss (token)", &c,
                      VT_FN_LOSS, &in, 11 + (uint64_t)avg);
    }
}

/* ---- 3. masked causal: is_causal matters, and each is stable ------------------------------------------ */
static void test_causal(void) {
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_CAUSAL, 12, 4, 12, 3, 2, 2.0f);
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), "causal create")) return;
    tu_rng r = { 5 };
    tu_init_params(m, &r);
    float img[2 * 3 * 12 * 12];
    tu_fill_normal(&r, img, sizeof img / 4, 0, 1);
    uint8_t cm[2 * 9] = { 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1 };
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = 2;
    in.mask = cm;
    float *o[2][NPOL + 1];
    size_t n = 2 * 9 * 12;
    for (int ic = 0; ic <= 1; ic++) {
        in.is_causal = ic;
        for (int p = 0; p <= NPOL; p++) {
            vt_set_grad_checkpointing(m, p == 0 ? "none" : POLICIES[p - 1]);
            o[ic][p] = tu_xmalloc(n * 4);
            int rc = vt_forward(m, VT_FN_ENCODE, &in, 1);
            if (CHECK_OK(rc, "causal forward"))
                memcpy(o[ic][p], vt_output(m, 0, NULL, NULL), n * 4);
            else
                memset(o[ic][p], 0, n * 4);
        }
    }
    CHECK(memcmp(o[0][0], o[1][0], n * 4) != 0,
          "masked causal: is_causal=1 gives the same output as is_causal=0");
    for (int ic = 0; ic <= 1; ic++)
        for (int p = 1; p <= NPOL; p++)
            CHECK(!memcmp(o[ic][0], o[ic][p], n * 4),
                  "masked causal is_causal=%d: output under %s differs from none", ic, POLICIES[p - 1]);
    /* an all-zero mask with is_causal=1 is fully bidirectional: the is_causal=0 output */
    uint8_t z[2 * 9] = { 0 };
    in.mask = z;
    in.is_causal = 1;
    vt_set_grad_checkpointing(m, "none");
    if (CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 0), "causal zero mask"))
        CHECK(!memcmp(vt_output(m, 0, NULL, NULL), o[0][0], n * 4),
              "masked causal: all-zero mask with is_causal=1 differs from bidirectional");
    for (int ic = 0; ic <= 1; ic++)
        for (int p = 0; p <= NPOL; p++) free(o[ic][p]);
    vt_model_free(m);
}

/* ---- 4. frozen preprocessing ----------------------------------------------------------------------------- */
static void test_frozen(void) {
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 12, 4, 12, 3, 2, 2.0f);
    c.enc.reg_tokens = 1;
    vt_model *a = NULL, *b = NULL;
    if (!CHECK_OK(vt_model_create(&c, &a), "frozen create") ||
        !CHECK_OK(vt_model_create(&c, &b), "frozen create")) {
        vt_model_free(a);
        return;
    }
    tu_rng r1 = { 42 }, r2 = { 42 };
    tu_init_params(a, &r1);
    tu_init_params(b, &r2);
    const char *frz[] = { "mask_token", "vit.cls_token", "vit.reg_token", "vit.pos_embed",
                          "vit.patch_embed" };
    for (size_t i = 0; i < sizeof frz / sizeof frz[0]; i++) {
        int matched = 0;
        CHECK_OK(vt_set_requires_grad(b, frz[i], 0, &matched), frz[i]);
        CHECK(matched >= 1, "freeze %s matched %d", frz[i], matched);
    }
    CHECK(vt_param_grad(b, vt_param_find(b, "vit.patch_embed.proj.weight")) == NULL,
          "frozen patch_embed has a gradient slot");
    size_t nimg = 2 * 3 * 12 * 12;
    float *img = tu_xmalloc(nimg * 4), *da = tu_xcalloc(nimg, 4), *db = tu_xcalloc(nimg, 4);
    tu_rng r = { 7 };
    tu_fill_normal(&r, img, nimg, 0, 1);
    int64_t im[2 * 2] = { 2, 5, 0, 7 };
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = 2;
    in.idx_mask = im;
    in.n_mask = 2;
    float *dout = tu_xmalloc(2 * 11 * 12 * 4);
    tu_fill_normal(&r, dout, 2 * 11 * 12, 0, 1);
    const float *douts[1] = { dout };
    CHECK_OK(vt_forward(a, VT_FN_ENCODE, &in, 1), "unfrozen forward");
    vt_zero_grad(a);
    CHECK_OK(vt_backward(a, douts, 1, da, 1), "unfrozen backward");
    for (int p = 0; p <= NPOL; p++) {
        const char *pol = p == 0 ? "none" : POLICIES[p - 1];
        vt_set_grad_checkpointing(b, pol);
        memset(db, 0, nimg * 4);
        int rc = vt_forward(b, VT_FN_ENCODE, &in, 1);
        vt_zero_grad(b);
        if (!rc) rc = vt_backward(b, douts, 1, db, 1);
        if (!CHECK_OK(rc, "frozen run")) continue;
        int nblk = 0, eq = 1, nz = 1;
        for (int i = 0; i < vt_param_count(b); i++) {
            const char *nm = vt_param_name(b, i);
            if (strncmp(nm, "vit.blocks.", 11) && strncmp(nm, "vit.norm.", 9)) continue;
            const float *gb = vt_param_grad(b, i), *ga = vt_param_grad(a, vt_param_find(a, nm));
            if (!gb || !ga) {
                eq = 0;
                continue;
            }
            nblk++;
            size_t n = vt_param_numel(b, i);
            eq &= !memcmp(ga, gb, n * 4);
            double mx = 0;
            for (size_t k = 0; k < n; k++) mx = fmax(mx, fabs(gb[k]));
            nz &= mx > 0;
        }
        CHECK(nblk > 0 && eq && nz,
              "frozen preprocessing [%s]: %d block/norm gradients, bitwise equal to unfrozen %d, all "
              "non-zero %d",
              pol, nblk, eq, nz);
        CHECK(!memcmp(da, db, nimg * 4), "frozen preprocessing [%s]: d images differ from the unfrozen run",
              pol);
    }
    free(img);
    free(da);
    free(db);
    free(dout);
    vt_model_free(a);
    vt_model_free(b);
}

int main(void) {
    double t0 = tu_now();
    test_fixtures();
    double t1 = tu_now();
    test_direct();
    test_causal();
    test_frozen();
    tu_info("fixtures %.2f s, API %.2f s", t1 - t0, tu_now() - t1);
    return tu_finish();
}
