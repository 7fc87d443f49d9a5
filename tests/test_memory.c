/* test_memory.c: the activation plan is exact.
 * For tiny configs and vit_tiny_patch16_224 (kinds lightly, timm, causal, MAE, AIM; with and
 * without idx_keep; fns encode / forward / intermediates (norm) / loss) and every policy:
 *   vt_plan(need_grad=1).activations == arena peak after vt_forward(need_grad=1) + vt_backward
 *   (parameter gradients and d images), and vt_plan(need_grad=0) == peak after a no-grad forward.
 * Also: 'block' plans strictly less than 'none' (depth >= 2); a no-grad forward plans less than
 * 'block'; budget below the minimum -> VT_ERR_BUDGET naming the minimum; budgets in between give a
 * plan within the budget (and the run then peaks exactly there). vt_plan_train_step: the plan of a
 * training step as the step sizes it, and its search of what fits a budget. */
#include "test_util.h"

static const char *POL[] = { "none", "block", "every:2", "every:3", "sqrt", "selective", "budget:MID" };
#define NPOL (int)(sizeof POL / sizeof POL[0])

static int plan_of(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad, const char *pol, size_t *act) {
    int rc = vt_set_grad_checkpointing(m, pol);
    vt_plan_bytes pb;
    if (!rc) rc = vt_plan(m, fn, in, need_grad, &pb);
    if (!rc) {
        *act = pb.activations;
        if (pb.params != vt_param_total(m) * 4 || (need_grad && pb.grads != vt_grad_total(m) * 4) ||
            pb.total != pb.params + pb.grads + pb.optimizer + pb.activations)
            CHECK(0, "vt_plan: params %zu / grads %zu / total %zu inconsistent with the model", pb.params,
                  pb.grads, pb.total);
    }
    return rc;
}

/* Checks planned == measured for every policy; returns via *none_act, *block_act, *nograd_act. */
static void plan_case(const char *name, vt_model *m, vt_fn fn, vt_inputs *in, tu_rng *r) {
    const vt_model_config *cfg = vt_model_get_config(m);
    size_t nimg = (size_t)in->batch * cfg->enc.in_chans * (in->height ? in->height : cfg->enc.img_size) *
                  (in->width ? in->width : vt_img_width(&cfg->enc));
    float *dimg = tu_xcalloc(nimg, 4);
    float **douts = NULL;
    int ndo = 0;
    size_t none = 0, block = 0;
    int rc = plan_of(m, fn, in, 1, "none", &none);
    if (!rc) rc = plan_of(m, fn, in, 1, "block", &block);
    if (!CHECK_OK(rc, name)) goto out;
    for (int p = 0; p < NPOL; p++) {
        char pol[48], what[256];
        if (!strcmp(POL[p], "budget:MID"))
            snprintf(pol, sizeof pol, "budget:%zu", (none + block) / 2);
        else
            snprintf(pol, sizeof pol, "%s", POL[p]);
        snprintf(what, sizeof what, "%s [%s]", name, pol);
        size_t planned = 0, planned0 = 0;
        rc = plan_of(m, fn, in, 1, pol, &planned);
        if (!CHECK(rc == VT_OK, "%s%s: vt_plan(need_grad=1): rc %d: %s",
                   rc == VT_ERR_BUDGET ? "ENGINE BUG (budget search): " : "", what, rc, vt_last_error()))
            continue;
        rc = vt_forward(m, fn, in, 1);
        if (!CHECK_OK(rc, what)) continue;
        if (fn != VT_FN_LOSS && !douts) douts = tu_random_douts(m, r, &ndo);
        rc = vt_backward(m, (const float *const *)douts, ndo, dimg, 1);
        if (!CHECK_OK(rc, what)) continue;
        vt_arena_stats st;
        vt_arena_get_stats(m, &st);
        CHECK(st.peak == planned && st.planned == planned,
              "%s: need_grad=1: planned %zu bytes, measured peak %zu (stats.planned %zu, capacity %zu)", what,
              planned, st.peak, st.planned, st.capacity);
        CHECK(st.capacity >= st.peak, "%s: capacity %zu below peak %zu", what, st.capacity, st.peak);
        if (!strncmp(pol, "budget:", 7))
            CHECK(planned <= (none + block) / 2, "%s: plan %zu exceeds the budget", what, planned);
        /* no-grad forward */
        rc = plan_of(m, fn, in, 0, pol, &planned0);
        if (!CHECK_OK(rc, what)) continue;
        rc = vt_forward(m, fn, in, 0);
        if (!CHECK_OK(rc, what)) continue;
        vt_arena_get_stats(m, &st);
        CHECK(st.peak == planned0, "%s: need_grad=0: planned %zu bytes, measured peak %zu", what, planned0,
              st.peak);
        CHECK(planned0 < block, "%s: no-grad plan %zu not below the block plan %zu", what, planned0, block);
    }
    if (cfg->enc.depth >= 2)
        CHECK(block < none, "%s: block plan %zu not below none plan %zu", name, block, none);
    tu_info("%-48s none %8zu  block %8zu bytes", name, none, block);
out:
    tu_free_douts(douts, ndo);
    free(dimg);
    vt_set_grad_checkpointing(m, "none");
}

static vt_model *make(const vt_model_config *c, tu_rng *r) {
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(c, &m), "create")) return NULL;
    tu_init_params(m, r);
    return m;
}

static float *images(tu_rng *r, const vt_model_config *c, int B) {
    size_t n = (size_t)B * c->enc.in_chans * c->enc.img_size * c->enc.img_size;
    float *x = tu_xmalloc(n * 4);
    tu_fill_normal(r, x, n, 0, 1);
    return x;
}

static void test_tiny(void) {
    tu_rng r = { 2024 };
    vt_model_config c;
    vt_inputs in;
    const int B = 2;
    /* lightly: all encoder fns, with and without idx_keep / idx_mask */
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 12, 4, 12, 4, 2, 2.0f);
    c.enc.reg_tokens = 1;
    c.enc.qk_norm = 1;
    c.enc.init_values = 0.2f;
    vt_model *m = make(&c, &r);
    float *img = images(&r, &c, B);
    int64_t im[2 * 3] = { 1, 4, 8, 3, 9, 6 }, ik[2 * 6] = { 0, 2, 3, 5, 7, 10, 10, 0, 1, 4, 8, 6 };
    const vt_fn fns[] = { VT_FN_ENCODE, VT_FN_FORWARD, VT_FN_INTERMEDIATES, VT_FN_INTERMEDIATES_NORM };
    const char *fnn[] = { "encode", "forward", "intermediates", "intermediates_norm" };
    for (int f = 0; f < 4 && m; f++)
        for (int k = 0; k < 2; k++) {
            char nm[96];
            snprintf(nm, sizeof nm, "lightly d4 %s%s", fnn[f], k ? " idx_keep+idx_mask" : "");
            memset(&in, 0, sizeof in);
            in.images = img;
            in.batch = B;
            if (k) {
                in.idx_keep = ik;
                in.n_keep = 6;
                in.idx_mask = im;
                in.n_mask = 3;
            }
            plan_case(nm, m, fns[f], &in, &r);
        }
    vt_model_free(m);
    free(img);
    /* timm kind: avg pool (no final norm) and global_pool '' */
    tu_tiny_config(&c, VT_KIND_TIMM, 8, 4, 8, 3, 2, 1.5f);
    c.enc.mask_token = 0;
    vt_pool_from_name("avg", &c.enc.global_pool);
    m = make(&c, &r);
    img = images(&r, &c, B);
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = B;
    if (m) plan_case("timm d3 avg forward", m, VT_FN_FORWARD, &in, &r);
    in.idx_keep = ik;
    in.n_keep = 3;
    int64_t ik3[2 * 3] = { 0, 2, 4, 3, 1, 0 };
    in.idx_keep = ik3;
    if (m) plan_case("timm d3 avg forward idx_keep", m, VT_FN_FORWARD, &in, &r);
    vt_model_free(m);
    free(img);
    tu_tiny_config(&c, VT_KIND_TIMM, 8, 4, 8, 3, 2, 1.5f);
    c.enc.mask_token = 0;
    vt_pool_from_name("", &c.enc.global_pool);
    m = make(&c, &r);
    img = images(&r, &c, B);
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = B;
    if (m) plan_case("timm d3 pool '' forward", m, VT_FN_FORWARD, &in, &r);
    vt_model_free(m);
    free(img);
    /* timm's forward (forward_head: pool -> fc_norm -> head), every pooling, with a head */
    {
        const char *pools[] = { "token", "avg", "max", "avgmax", "" };
        for (int pi = 0; pi < 5; pi++)
            for (int nc = 0; nc <= 4; nc += 4) {
                char nm[96];
                tu_tiny_config(&c, VT_KIND_TIMM, 8, 4, 8, 3, 2, 1.5f);
                c.enc.reg_tokens = 1;
                c.enc.num_classes = nc;
                vt_pool_from_name(pools[pi], &c.enc.global_pool);
                m = make(&c, &r);
                img = images(&r, &c, B);
                memset(&in, 0, sizeof in);
                in.images = img;
                in.batch = B;
                snprintf(nm, sizeof nm, "timm d3 forward_head '%s' num_classes %d", pools[pi], nc);
                if (m) plan_case(nm, m, VT_FN_TIMM_FORWARD, &in, &r);
                vt_model_free(m);
                free(img);
            }
    }
    /* the rest of timm's options (tu_option_case), timm's forward and the classifier loss */
    for (int o = 0;; o++) {
        memset(&in, 0, sizeof in);
        const char *nm = tu_option_case(o, 3, &c, &in);
        if (!nm) break;
        m = make(&c, &r);
        size_t n = (size_t)B * c.enc.in_chans * (in.height ? in.height : c.enc.img_size) *
                   (in.width ? in.width : vt_img_width(&c.enc));
        img = tu_xmalloc(n * 4);
        tu_fill_normal(&r, img, n, 0, 1);
        in.images = img;
        in.batch = B;
        char what[160];
        snprintf(what, sizeof what, "timm d3 %s", nm);
        if (m) plan_case(what, m, VT_FN_TIMM_FORWARD, &in, &r);
        /* timm's forward_intermediates: all blocks NCHW normed with prefix; two NLC, no out;
         * stop_early after block 1 */
        const vt_inter_opts ti[] = { { 0, 1, 1, 0, 1, 0 }, { 5, 0, 1, 0, 0, 1 }, { 2, 1, 0, 1, 1, 0 } };
        for (int k = 0; k < 3 && m && !in.distilled_training; k++) {
            in.inter = ti[k];
            snprintf(what, sizeof what, "timm d3 %s intermediates %d", nm, k);
            plan_case(what, m, VT_FN_TIMM_INTERMEDIATES, &in, &r);
        }
        memset(&in.inter, 0, sizeof in.inter);
        int32_t labels[2] = { 2, 0 };
        if (m && !in.distilled_training) {
            in.labels = labels;
            snprintf(what, sizeof what, "classifier d3 %s", nm);
            plan_case(what, m, VT_FN_LOSS, &in, &r);
        }
        vt_model_free(m);
        free(img);
    }
    /* causal */
    tu_tiny_config(&c, VT_KIND_CAUSAL, 12, 4, 12, 4, 2, 2.0f);
    m = make(&c, &r);
    img = images(&r, &c, B);
    uint8_t cm[2 * 9] = { 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1 };
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = B;
    in.mask = cm;
    in.is_causal = 1;
    if (m) plan_case("causal d4 encode mask", m, VT_FN_ENCODE, &in, &r);
    if (m) plan_case("causal d4 forward mask", m, VT_FN_FORWARD, &in, &r);
    in.mask = NULL;
    if (m) plan_case("causal d4 intermediates_norm", m, VT_FN_INTERMEDIATES_NORM, &in, &r);
    vt_model_free(m);
    free(img);
    /* MAE */
    for (int np = 0; np <= 1; np++) {
        tu_tiny_config(&c, VT_KIND_MAE, 12, 4, 8, 3, 2, 2.0f);
        c.decoder_depth = 3;
        c.norm_pix_loss = np;
        m = make(&c, &r);
        img = images(&r, &c, B);
        int64_t mk[2 * 4], mm[2 * 6];
        tu_random_token_mask(&r, B, 1, 9, 6, mk, mm);
        memset(&in, 0, sizeof in);
        in.images = img;
        in.batch = B;
        in.idx_keep = mk;
        in.n_keep = 4;
        in.idx_mask = mm;
        in.n_mask = 6;
        if (m) plan_case(np ? "MAE e3 d3 loss norm_pix" : "MAE e3 d3 loss", m, VT_FN_LOSS, &in, &r);
        vt_model_free(m);
        free(img);
    }
    /* AIM */
    tu_tiny_config(&c, VT_KIND_AIM, 8, 4, 8, 3, 2, 2.0f);
    c.head_blocks = 3;
    m = make(&c, &r);
    img = images(&r, &c, B);
    uint8_t am[2 * 4] = { 0, 1, 1, 1, 0, 0, 1, 1 };
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = B;
    in.mask = am;
    in.is_causal = 1;
    if (m) plan_case("AIM e3 h3 loss", m, VT_FN_LOSS, &in, &r);
    vt_model_free(m);
    free(img);
    /* the classifier loss (timm forward + cross-entropy), with and without fc_norm */
    for (int avg = 0; avg <= 1; avg++) {
        tu_tiny_config(&c, VT_KIND_TIMM, 12, 4, 8, 3, 2, 2.0f);
        c.enc.num_classes = 4;
        vt_pool_from_name(avg ? "avg" : "token", &c.enc.global_pool);
        m = make(&c, &r);
        img = images(&r, &c, B);
        int32_t labels[2] = { 3, 1 };
        memset(&in, 0, sizeof in);
        in.images = img;
        in.batch = B;
        in.labels = labels;
        in.label_smoothing = 0.1f;
        if (m)
            plan_case(avg ? "classifier e3 loss (avg)" : "classifier e3 loss (token)", m, VT_FN_LOSS, &in,
                      &r);
        vt_model_free(m);
        free(img);
    }
}

static void test_vit_tiny(void) {
    tu_rng r = { 7 };
    vt_model_config c;
    vt_model_config_default(&c, VT_KIND_LIGHTLY);
    CHECK_OK(vt_preset("vit_tiny_patch16_224", &c.enc), "preset");
    c.enc.mask_token = 1;
    vt_model *m = make(&c, &r);
    if (!m) return;
    float *img = images(&r, &c, 2);
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = 1;
    plan_case("vit_tiny_patch16_224 B1 encode", m, VT_FN_ENCODE, &in, &r);
    int64_t ik[2 * 50], im[2 * 147];
    tu_random_token_mask(&r, 2, 1, 196, 147, ik, im);
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = 2;
    in.idx_keep = ik;
    in.n_keep = 50;
    plan_case("vit_tiny_patch16_224 B2 forward idx_keep 50", m, VT_FN_FORWARD, &in, &r);
    vt_model_free(m);
    free(img);
}

/* ---- budget ------------------------------------------------------------------------------------------ */
static void test_budget(void) {
    tu_rng r = { 31 };
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_LIGHTLY, 12, 4, 12, 6, 2, 2.0f);
    vt_model *m = make(&c, &r);
    if (!m) return;
    float *img = images(&r, &c, 2);
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = 2;
    /* the smallest plan any policy reaches */
    size_t minp = (size_t)-1, none = 0, a = 0;
    char pol[48];
    const char *fixed[] = { "block", "selective", "sqrt" };
    for (int i = 0; i < 3; i++)
        if (!plan_of(m, VT_FN_ENCODE, &in, 1, fixed[i], &a) && a < minp) minp = a;
    for (int k = 1; k <= c.enc.depth; k++) {
        snprintf(pol, sizeof pol, "every:%d", k);
        if (!plan_of(m, VT_FN_ENCODE, &in, 1, pol, &a) && a < minp) minp = a;
    }
    CHECK_OK(plan_of(m, VT_FN_ENCODE, &in, 1, "none", &none), "none plan");
    char want[32];
    snprintf(want, sizeof want, "%zu", minp);
    /* below the minimum */
    snprintf(pol, sizeof pol, "budget:%zu", minp - 1);
    CHECK_OK(vt_set_grad_checkpointing(m, pol), pol);
    vt_plan_bytes pb;
    CHECK_ERR(vt_plan(m, VT_FN_ENCODE, &in, 1, &pb), VT_ERR_BUDGET, want,
              "vt_plan with a budget 1 byte below the minimum");
    CHECK_ERR(vt_forward(m, VT_FN_ENCODE, &in, 1), VT_ERR_BUDGET, want,
              "vt_forward with a budget 1 byte below the minimum");
    CHECK_OK(vt_set_grad_checkpointing(m, "budget:1k"), "budget:1k");
    CHECK_ERR(vt_plan(m, VT_FN_ENCODE, &in, 1, &pb), VT_ERR_BUDGET, want,
              "budget:1k (far too small) names the minimum");
    /* a no-grad call ignores the budget (nothing is kept) */
    snprintf(pol, sizeof pol, "budget:%zu", minp - 1);
    vt_set_grad_checkpointing(m, pol);
    CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 0), "no-grad forward under a too-small budget");
    /* budgets from the minimum up to none: the plan fits, and the run peaks exactly there */
    size_t budgets[6] = {
        minp, minp + (none - minp) / 4, (minp + none) / 2, none - (none - minp) / 4, none - 1, none
    };
    for (int i = 0; i < 6; i++) {
        snprintf(pol, sizeof pol, "budget:%zu", budgets[i]);
        CHECK_OK(vt_set_grad_checkpointing(m, pol), pol);
        int rc = vt_plan(m, VT_FN_ENCODE, &in, 1, &pb);
        if (!CHECK(rc == VT_OK, "ENGINE BUG (budget search): %s (min %zu, none %zu) refused: rc %d: %s", pol,
                   minp, none, rc, vt_last_error()))
            continue;
        CHECK(pb.activations <= budgets[i], "%s: plan %zu exceeds the budget", pol, pb.activations);
        if (budgets[i] >= none)
            CHECK(pb.activations == none, "%s: a budget >= none plans %zu, not none's %zu", pol,
                  pb.activations, none);
        rc = vt_forward(m, VT_FN_ENCODE, &in, 1);
        if (!rc) rc = vt_backward(m, NULL, 0, NULL, 1);
        if (CHECK_OK(rc, pol)) {
            vt_arena_stats st;
            vt_arena_get_stats(m, &st);
            CHECK(st.peak <= budgets[i], "%s: measured peak %zu exceeds the budget", pol, st.peak);
        }
    }
    tu_info("budget: smallest plan %zu bytes, none %zu", minp, none);
    vt_model_free(m);
    free(img);
}

/* ---- a training step's plan ---------------------------------------------------------------------------- */
/* vt_plan_train_step against what vt_train_step does (the tokens its masks keep, the arena it
 * sizes) and against vt_plan of the same sizes, per policy; then its fit search: the cheapest
 * fitting policy fits and no named policy that fits re-computes less; one byte below the
 * smallest plan nothing fits and max_batch is the largest batch that does. */
static void test_train_step_plan(void) {
    tu_rng r = { 77 };
    const int B = 3;
    for (int kind = 0; kind < 4; kind++) { /* MAE, AIM, classifier; MAE with qk_norm and LayerScale */
        vt_model_config c;
        if (kind == 0)
            tu_tiny_config(&c, VT_KIND_MAE, 16, 4, 8, 4, 2, 2.0f);
        else if (kind == 1)
            tu_tiny_config(&c, VT_KIND_AIM, 8, 4, 8, 4, 2, 2.0f);
        else if (kind == 2) {
            tu_tiny_config(&c, VT_KIND_TIMM, 8, 4, 8, 4, 2, 2.0f);
            c.enc.num_classes = 3;
        } else {
            tu_tiny_config(&c, VT_KIND_MAE, 16, 4, 8, 5, 2, 2.0f);
            c.enc.qk_norm = 1;
            c.enc.init_values = 0.2f;
        }
        int mae = kind == 0 || kind == 3;
        const char *name = kind == 0   ? "mae"
                           : kind == 1 ? "aim"
                           : kind == 2 ? "classifier"
                                       : "mae qk_norm+LayerScale";
        static const int32_t labels[3] = { 0, 2, 1 };
        vt_model *m = make(&c, &r);
        if (!m) return;
        float *img = images(&r, &c, B);
        int L = (c.enc.img_size / c.enc.patch_size) * (c.enc.img_size / c.enc.patch_size) +
                c.enc.class_token + c.enc.reg_tokens;
        vt_train_config t;
        vt_train_config_default(&t, c.kind);
        t.mask_ratio = 0.6f;
        CHECK_OK(vt_trainer_init(m, &t), "trainer init");
        vt_step_plan sp;
        for (int p = 0; p < NPOL - 1; p++) {
            char what[96];
            snprintf(what, sizeof what, "%s [%s] train-step plan", name, POL[p]);
            if (!CHECK_OK(vt_plan_train_step(m, B, -1.0f, POL[p], 0, &sp), what)) continue;
            /* the trainer's masks keep what the plan says */
            int nk = L;
            if (mae) {
                vt_rng g;
                vt_rng_seed(&g, 1);
                int64_t *keep = tu_xmalloc((size_t)B * L * 8), *msk = tu_xmalloc((size_t)B * L * 8);
                CHECK_OK(vt_random_token_mask(&g, B, L, t.mask_ratio, 0, keep, msk, &nk), "mask");
                free(keep);
                free(msk);
            }
            CHECK(sp.tokens_kept == nk && sp.tokens_masked == (mae ? L - nk : 0),
                  "%s: tokens %d / %d, the trainer keeps %d of %d", what, sp.tokens_kept, sp.tokens_masked,
                  nk, L);
            CHECK(sp.policy_met && !sp.fits && !sp.fit_policy[0] && !sp.max_batch, "%s: no budget, no search",
                  what);
            /* = vt_plan of the loss with those sizes */
            static const int64_t idx = 0;
            static const uint8_t pm = 0;
            vt_inputs in;
            memset(&in, 0, sizeof in);
            in.batch = B;
            if (mae) {
                in.idx_keep = &idx;
                in.n_keep = nk;
                in.idx_mask = &idx;
                in.n_mask = L - nk;
            } else if (kind == 1) {
                in.mask = &pm;
                in.is_causal = 1;
            } else
                in.labels = labels;
            vt_plan_bytes pb;
            CHECK_OK(vt_set_grad_checkpointing(m, POL[p]), POL[p]);
            if (CHECK_OK(vt_plan(m, VT_FN_LOSS, &in, 1, &pb), what))
                CHECK(!memcmp(&pb, &sp.bytes, sizeof pb), "%s: activations %llu, vt_plan says %llu", what,
                      (unsigned long long)sp.bytes.activations, (unsigned long long)pb.activations);
            /* the plan's re-computed FLOPs are what the recorded step re-computes */
            vt_trace *tr = NULL;
            if (CHECK_OK(vt_trace_train_step(m, img, kind == 2 ? labels : NULL, B, &tr), what)) {
                double rec = 0;
                for (int e = 0; e < vt_trace_count(tr); e++) {
                    const vt_trace_entry *te = vt_trace_get(tr, e);
                    if (te->kind == VT_TR_CALL && te->phase == VT_PHASE_RECOMPUTE) rec += te->flops;
                }
                CHECK(rec == sp.recompute_flops, "%s: plan re-computes %.0f FLOPs, the recorded step %.0f",
                      what, sp.recompute_flops, rec);
            }
            vt_trace_free(tr);
            /* the step sizes its arena from the same plan */
            float loss;
            if (CHECK_OK(kind == 2 ? vt_train_step_labels(m, img, labels, B, &loss)
                                   : vt_train_step(m, img, B, &loss),
                         what)) {
                vt_arena_stats st;
                vt_arena_get_stats(m, &st);
                CHECK(st.planned == sp.bytes.activations && st.peak <= st.planned,
                      "%s: the step planned %zu (peak %zu), vt_plan_train_step %llu", what, st.planned,
                      st.peak, (unsigned long long)sp.bytes.activations);
            }
        }
        CHECK_OK(vt_set_grad_checkpointing(m, "none"), "none");
        vt_step_plan none, least;
        if (!CHECK_OK(vt_plan_train_step(m, B, -1.0f, NULL, 1, &least), "plan")) goto next;
        CHECK(!least.fits && !least.fit_policy[0] && !least.max_batch, "%s: a 1-byte budget fits nothing",
              name);
        CHECK_OK(vt_plan_train_step(m, B, -1.0f, NULL, least.least_bytes.total + (1u << 30), &none), "plan");
        CHECK(none.fits && !strcmp(none.fit_policy, "none") && none.fit_recompute_flops == 0 &&
                  none.max_batch == B,
              "%s: a large budget fits 'none' (got '%s')", name, none.fit_policy);
        uint64_t budgets[3] = { least.least_bytes.total, (least.least_bytes.total + none.bytes.total) / 2,
                                none.bytes.total - 1 };
        for (int i = 0; i < 3; i++) {
            vt_step_plan s, q;
            if (!CHECK_OK(vt_plan_train_step(m, B, -1.0f, "none", budgets[i], &s), "plan")) continue;
            if (!CHECK(s.fit_policy[0] && s.fit_bytes.total <= budgets[i] && !s.fits && s.max_batch == B,
                       "%s: budget %llu: no fit found (least %llu)", name, (unsigned long long)budgets[i],
                       (unsigned long long)least.least_bytes.total))
                continue;
            CHECK_OK(vt_plan_train_step(m, B, -1.0f, s.fit_policy, 0, &q), s.fit_policy);
            CHECK(q.policy_met && q.bytes.total == s.fit_bytes.total &&
                      q.recompute_flops == s.fit_recompute_flops,
                  "%s: '%s' planned alone differs from the search's answer", name, s.fit_policy);
            for (int p = 1; p < NPOL - 1; p++) {
                CHECK_OK(vt_plan_train_step(m, B, -1.0f, POL[p], 0, &q), POL[p]);
                if (q.bytes.total <= budgets[i])
                    CHECK(q.recompute_flops >= s.fit_recompute_flops,
                          "%s: budget %llu: '%s' fits and re-computes less "
                          "than the answer '%s'",
                          name, (unsigned long long)budgets[i], POL[p], s.fit_policy);
            }
        }
        /* below the smallest plan: nothing fits; the largest batch that does */
        vt_step_plan s, q;
        if (CHECK_OK(vt_plan_train_step(m, B, -1.0f, NULL, least.least_bytes.total - 1, &s), "plan")) {
            CHECK(!s.fit_policy[0] && s.max_batch < B && !strcmp(s.least_policy, least.least_policy),
                  "%s: one byte below the smallest plan: fit '%s', max batch %d", name, s.fit_policy,
                  s.max_batch);
            if (s.max_batch > 0 &&
                CHECK_OK(vt_plan_train_step(m, s.max_batch, -1.0f, NULL, least.least_bytes.total - 1, &q),
                         "plan"))
                CHECK(q.fit_policy[0], "%s: batch %d said to fit does not", name, s.max_batch);
            CHECK_OK(vt_plan_train_step(m, s.max_batch + 1, -1.0f, NULL, least.least_bytes.total - 1, &q),
                     "plan");
            CHECK(!q.fit_policy[0], "%s: batch %d fits, above max_batch %d", name, s.max_batch + 1,
                  s.max_batch);
        }
        /* a budget:B policy no layout meets: the smallest plan, flagged */
        if (CHECK_OK(vt_plan_train_step(m, B, -1.0f, "budget:1", none.bytes.total, &s), "budget:1"))
            CHECK(!s.policy_met && !s.fits && s.bytes.total == least.least_bytes.total,
                  "%s: budget:1 is not met, and plans the smallest layout", name);
        /* the ratio given, not the trainer's */
        if (mae && CHECK_OK(vt_plan_train_step(m, B, 0.25f, NULL, 0, &s), "ratio"))
            CHECK(s.tokens_kept == vt_mask_keep_count(L, 0.25f, 0), "%s: mask ratio 0.25 keeps %d", name,
                  s.tokens_kept);
        if (mae)
            CHECK_ERR(vt_plan_train_step(m, B, 1.0f, NULL, 0, &s), VT_ERR_ARG, "mask_ratio", "mask ratio 1");
        else
            CHECK_OK(vt_plan_train_step(m, B, 1.0f, NULL, 0, &s), "AIM draws no token mask");
        CHECK_ERR(vt_plan_train_step(m, 0, -1.0f, NULL, 0, &s), VT_ERR_ARG, "batch", "batch 0");
    next:
        vt_model_free(m);
        free(img);
    }
}

int main(void) {
    double t0 = tu_now();
    test_tiny();
    test_budget();
    test_train_step_plan();
    double t1 = tu_now();
    test_vit_tiny();
    tu_info("tiny %.2f s, vit_tiny %.2f s", t1 - t0, tu_now() - t1);
    return tu_finish();
}
