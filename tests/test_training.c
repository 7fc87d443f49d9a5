/* test_training.c: the training pieces -- seeded generator, initialisation, lightly's random
 * masks, AdamW parameter groups, the cosine-warmup schedule, gradient clipping, refusal of
 * non-finite gradients, and a loss that falls over a short MAE and AIM run. */
#include "vitrine.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
#define CHECK(c, ...)                                                                                        \
    do {                                                                                                     \
        if (c)                                                                                               \
            passed++;                                                                                        \
        else {                                                                                               \
            failed++;                                                                                        \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                      \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
        }                                                                                                    \
    } while (0)

static vt_model *tiny(vt_kind kind) {
    vt_model_config mc;
    vt_model_config_default(&mc, kind);
    mc.enc.img_size = 16;
    mc.enc.patch_size = 4;
    mc.enc.embed_dim = 16;
    mc.enc.depth = 2;
    mc.enc.num_heads = 2;
    mc.decoder_dim = 8;
    mc.decoder_depth = 1;
    mc.decoder_heads = 2;
    mc.head_hidden_dim = 12;
    mc.head_blocks = 1;
    vt_model *m = NULL;
    if (vt_model_create(&mc, &m)) {
        printf("create: %s\n", vt_last_error());
        exit(1);
    }
    return m;
}

static void test_init(void) {
    vt_model *a = tiny(VT_KIND_MAE), *b = tiny(VT_KIND_MAE);
    vt_init_weights(a, 42);
    vt_init_weights(b, 42);
    size_t n = vt_param_total(a);
    CHECK(!memcmp(vt_param_data(a, 0), vt_param_data(b, 0), n * sizeof(float)), "same seed -> same bits");
    vt_init_weights(b, 43);
    CHECK(memcmp(vt_param_data(a, 0), vt_param_data(b, 0), n * sizeof(float)), "another seed -> other bits");
    int qkv = vt_param_find(a, "backbone.vit.blocks.0.attn.qkv.weight");
    float bound = sqrtf(6.0f / (48 + 16)), mx = 0;
    for (size_t i = 0; i < vt_param_numel(a, qkv); i++) mx = fmaxf(mx, fabsf(vt_param_data(a, qkv)[i]));
    CHECK(mx <= bound && mx > 0.8f * bound, "xavier bound %g, max %g", bound, mx);
    int nw = vt_param_find(a, "backbone.vit.norm.weight"),
        qb = vt_param_find(a, "backbone.vit.blocks.0.attn.qkv.bias");
    CHECK(vt_param_data(a, nw)[3] == 1.0f && vt_param_data(a, qb)[5] == 0.0f, "LayerNorm 1, Linear bias 0");
    int mt = vt_param_find(a, "backbone.mask_token");
    CHECK(vt_param_data(a, mt)[0] == 0.0f, "encoder mask token starts at 0");
    int pos = vt_param_find(a, "backbone.vit.pos_embed");
    float tab[17 * 16];
    vt_sincos_table(tab, 16, 4, 1);
    CHECK(!memcmp(vt_param_data(a, pos), tab, sizeof tab), "pos_embed is the sin-cos table");
    CHECK(!vt_param_requires_grad(a, pos), "sin-cos pos_embed is frozen");
    vt_model_free(a);
    vt_model_free(b);
}

static void test_masks(void) {
    vt_rng r;
    vt_rng_seed(&r, 1);
    int B = 3, L = 197, nk = 0;
    int64_t keep[3 * 197], msk[3 * 197];
    CHECK(!vt_random_token_mask(&r, B, L, 0.75f, 0, keep, msk, &nk), "token mask");
    CHECK(nk == 50, "n_keep %d == int(196 * 0.25) + 1 = 50", nk);
    for (int b = 0; b < B; b++) {
        int seen[197] = { 0 };
        CHECK(keep[b * nk] == 0, "class token kept first");
        for (int k = 0; k < nk; k++) seen[keep[b * nk + k]]++;
        for (int k = 0; k < L - nk; k++) seen[msk[b * (L - nk) + k]]++;
        int ok = 1;
        for (int l = 0; l < L; l++) ok &= seen[l] == 1;
        CHECK(ok, "keep and mask partition the sequence");
    }
    uint8_t pm[4 * 16];
    CHECK(!vt_random_prefix_mask(&r, 4, 16, 15, pm), "prefix mask");
    for (int b = 0; b < 4; b++) {
        int pre = 0;
        while (pre < 16 && !pm[b * 16 + pre]) pre++;
        int ok = pre <= 14;
        for (int j = pre; j < 16; j++) ok &= pm[b * 16 + j] == 1;
        CHECK(ok, "prefix of length %d in [0, 14], causal after it", pre);
    }
    CHECK(vt_random_token_mask(&r, 1, 10, 1.5f, 0, keep, msk, &nk) == VT_ERR_ARG, "bad ratio refused");
}

static void test_optim(void) {
    vt_model *m = tiny(VT_KIND_LIGHTLY);
    vt_init_weights(m, 3);
    vt_adamw_config oc = { 0.1f, 0.9f, 0.95f, 1e-8f, 0.5f };
    CHECK(!vt_optimizer_init(m, &oc), "optimizer init");
    vt_zero_grad(m);
    int w = vt_param_find(m, "vit.blocks.0.mlp.fc1.weight"),
        b = vt_param_find(m, "vit.blocks.0.mlp.fc1.bias");
    int cls = vt_param_find(m, "vit.cls_token");
    float w0 = vt_param_data(m, w)[0], b0 = vt_param_data(m, b)[0] = 0.25f, c0 = vt_param_data(m, cls)[0];
    CHECK(!vt_optimizer_step(m, 0.1f), "step");
    CHECK(vt_param_data(m, w)[0] == w0 * (1.0f - 0.1f * 0.5f), "weight decayed with zero grad");
    CHECK(vt_param_data(m, b)[0] == b0 && vt_param_data(m, cls)[0] == c0, "bias and token not decayed");
    vt_param_grad(m, w)[1] = NAN;
    float before = vt_param_data(m, w)[2];
    CHECK(vt_optimizer_step(m, 0.1f) == VT_ERR_NUMERIC && vt_param_data(m, w)[2] == before,
          "NaN grad refused, nothing changed");
    vt_zero_grad(m);
    for (int i = 0; i < vt_param_count(m); i++)
        if (vt_param_grad(m, i))
            for (size_t k = 0; k < vt_param_numel(m, i); k++) vt_param_grad(m, i)[k] = 1.0f;
    double norm;
    CHECK(!vt_clip_grad_norm(m, 1.0f, &norm) && fabs(norm - sqrt((double)vt_grad_total(m))) < 1e-3 * norm,
          "grad norm");
    double s = 0;
    for (int i = 0; i < vt_param_count(m); i++)
        if (vt_param_grad(m, i))
            for (size_t k = 0; k < vt_param_numel(m, i); k++)
                s += (double)vt_param_grad(m, i)[k] * vt_param_grad(m, i)[k];
    CHECK(fabs(sqrt(s) - 1.0) < 1e-4, "clipped to norm 1 (%g)", sqrt(s));
    CHECK(vt_cosine_warmup(0, 10, 100) == 0.1f && vt_cosine_warmup(9, 10, 100) == 1.0f, "warmup (step+1)/W");
    CHECK(vt_cosine_warmup(10, 10, 100) == 1.0f && fabsf(vt_cosine_warmup(99, 10, 100) - 0.001f) < 1e-7f,
          "cosine 1 -> 0.001");
    vt_model_free(m);
}

static void test_training(vt_kind kind) {
    vt_model *m = tiny(kind);
    vt_init_weights(m, 5);
    vt_adamw_config oc = { 3e-3f, 0.9f, 0.95f, 1e-8f, 0.05f };
    vt_optimizer_init(m, &oc);
    vt_set_grad_checkpointing(m, "block");
    int B = 4, S = 16, n = B * 3 * S * S, L = 17, nk = 0;
    float *img = malloc(n * sizeof(float));
    vt_rng r;
    vt_rng_seed(&r, 9);
    for (int i = 0; i < n; i++) img[i] = sinf(0.05f * i) + 0.1f * vt_rng_normal(&r);
    int64_t keep[4 * 17], msk[4 * 17];
    uint8_t pm[4 * 16];
    float first = 0, last = 0;
    int rc = 0;
    for (int step = 0; step < 40 && !rc; step++) {
        vt_inputs in = { 0 };
        in.images = img;
        in.batch = B;
        if (kind == VT_KIND_MAE) {
            vt_random_token_mask(&r, B, L, 0.75f, 0, keep, msk, &nk);
            in.idx_keep = keep;
            in.n_keep = nk;
            in.idx_mask = msk;
            in.n_mask = L - nk;
        } else {
            vt_random_prefix_mask(&r, B, 16, 15, pm);
            in.mask = pm;
            in.is_causal = 1;
        }
        vt_zero_grad(m);
        rc = vt_forward(m, VT_FN_LOSS, &in, 1);
        if (!rc) rc = vt_backward(m, NULL, 0, NULL, 1);
        if (!rc) rc = vt_clip_grad_norm(m, 1.0f, NULL);
        if (!rc) rc = vt_optimizer_step(m, 3e-3f * vt_cosine_warmup(step, 4, 40));
        if (step == 0) first = vt_loss_value(m);
        last = vt_loss_value(m);
    }
    CHECK(!rc, "training ran (%s)", vt_last_error());
    CHECK(last < 0.8f * first, "%s loss falls: %g -> %g", kind == VT_KIND_MAE ? "MAE" : "AIM", first, last);
    free(img);
    vt_model_free(m);
}

/* N steps straight == N/2, save, load into a fresh model, N/2; policy switching changes no bit */
static void test_trainer(vt_kind kind) {
    const char *name = kind == VT_KIND_MAE ? "MAE" : "AIM";
    int B = 3, n = B * 3 * 16 * 16, N = 6;
    float *img = malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) img[i] = cosf(0.37f * i);
    vt_train_config tc;
    vt_train_config_default(&tc, kind);
    tc.lr = 1e-3f;
    tc.warmup_steps = 2;
    tc.total_steps = N;
    tc.seed = 11;
    tc.clip_norm = 1.0f;
    vt_model *a = tiny(kind), *b = tiny(kind), *c = tiny(kind);
    vt_init_weights(a, 1);
    vt_init_weights(b, 1);
    vt_init_weights(c, 1);
    vt_trainer_init(a, &tc);
    vt_trainer_init(b, &tc);
    int rc = 0;
    const char *pol[] = { "none", "block", "selective", "every:2", "sqrt", "none" };
    for (int s = 0; s < N && !rc; s++) rc = vt_train_step(a, img, B, NULL);
    for (int s = 0; s < N / 2 && !rc; s++) {
        vt_set_grad_checkpointing(b, pol[s]);
        rc = vt_train_step(b, img, B, NULL);
    }
    uint8_t *st = NULL;
    size_t len = 0;
    if (!rc) rc = vt_train_state_save(b, &st, &len);
    if (!rc) rc = vt_train_state_load(c, st, len);
    CHECK(!rc, "%s save/load: %s", name, vt_last_error());
    CHECK(vt_train_step_count(c) == N / 2, "%s resumed at step %ld", name, vt_train_step_count(c));
    for (int s = N / 2; s < N && !rc; s++) {
        vt_set_grad_checkpointing(c, pol[s]);
        rc = vt_train_step(c, img, B, NULL);
    }
    CHECK(!rc, "%s steps: %s", name, vt_last_error());
    CHECK(!memcmp(vt_param_data(a, 0), vt_param_data(c, 0), vt_param_total(a) * sizeof(float)),
          "%s: %d steps straight == %d, save, resume, %d (policies switched) bit for bit", name, N, N / 2,
          N / 2);
    /* a NaN stops the step and keeps the last good state */
    size_t P = vt_param_total(c);
    float *before = malloc(P * sizeof(float));
    memcpy(before, vt_param_data(c, 0), P * sizeof(float));
    img[5] = NAN;
    rc = vt_train_step(c, img, B, NULL);
    CHECK(rc == VT_ERR_NUMERIC && strstr(vt_last_error(), "last good state"), "%s NaN refused: %s", name,
          vt_last_error());
    CHECK(!memcmp(before, vt_param_data(c, 0), P * sizeof(float)) && vt_train_step_count(c) == N,
          "%s state unchanged after NaN", name);
    img[5] = 0.5f;
    vt_model *d = tiny(kind == VT_KIND_MAE ? VT_KIND_AIM : VT_KIND_MAE);
    CHECK(vt_train_state_load(d, st, len) == VT_ERR_MISMATCH, "%s state refused by another model", name);
    CHECK(vt_train_state_load(c, st, len / 2) == VT_ERR_FORMAT && vt_train_step_count(c) == N,
          "%s truncated state refused, nothing changed", name);
    /* pictures after a loss forward */
    vt_inputs in = { 0 };
    in.images = img;
    in.batch = B;
    int64_t keep[3 * 17], msk[3 * 17];
    int nk;
    vt_rng r;
    vt_rng_seed(&r, 2);
    uint8_t pm[3 * 16];
    if (kind == VT_KIND_MAE) {
        vt_random_token_mask(&r, B, 17, 0.75f, 0, keep, msk, &nk);
        in.idx_keep = keep;
        in.n_keep = nk;
        in.idx_mask = msk;
        in.n_mask = 17 - nk;
    } else {
        vt_random_prefix_mask(&r, B, 16, 15, pm);
        in.mask = pm;
        in.is_causal = 1;
    }
    float *mk = malloc(n * sizeof(float)), *rc_img = malloc(n * sizeof(float));
    CHECK(!vt_forward(c, VT_FN_LOSS, &in, 0) && !vt_loss_visualize(c, mk, rc_img), "%s visualize: %s", name,
          vt_last_error());
    int changed = 0;
    for (int i = 0; i < n; i++) changed += rc_img[i] != img[i];
    CHECK(changed > 0, "%s reconstruction differs from the original", name);
    free(mk);
    free(rc_img);
    free(before);
    free(img);
    vt_free(st);
    vt_model_free(a);
    vt_model_free(b);
    vt_model_free(c);
    vt_model_free(d);
}

/* The classifier (timm, num_classes 2, cross-entropy with label smoothing): a two-class task
 * (bright top half vs bright bottom half, noisy) is learnt -- the loss falls and the training
 * images are classified right; N steps straight == N/2, save, resume, N/2 (policies switched) bit
 * for bit; a NaN keeps the last good state; the MAE step and the labelled step refuse each
 * other's model. */
static void test_classifier(void) {
    vt_model_config mc;
    vt_model_config_default(&mc, VT_KIND_TIMM);
    mc.enc.img_size = 16;
    mc.enc.patch_size = 4;
    mc.enc.embed_dim = 16;
    mc.enc.depth = 2;
    mc.enc.num_heads = 2;
    mc.enc.num_classes = 2;
    int B = 8, S = 16, per = 3 * S * S, n = B * per, N = 6;
    float *img = malloc(n * sizeof(float));
    int32_t y[8];
    vt_rng r;
    vt_rng_seed(&r, 4);
    for (int b = 0; b < B; b++) {
        y[b] = b % 2;
        for (int i = 0; i < per; i++) {
            int row = (i % (S * S)) / S;
            img[b * per + i] = ((row < S / 2) == (y[b] == 0) ? 1.0f : -1.0f) + 0.5f * vt_rng_normal(&r);
        }
    }
    vt_train_config tc;
    vt_train_config_default(&tc, VT_KIND_TIMM);
    tc.lr = 3e-3f;
    tc.warmup_steps = 2;
    tc.total_steps = 30;
    tc.clip_norm = 1.0f;
    tc.label_smoothing = 0.1f;
    vt_model *a = NULL, *b = NULL, *c = NULL;
    vt_model_create(&mc, &a);
    vt_model_create(&mc, &b);
    vt_model_create(&mc, &c);
    if (!a || !b || !c) {
        CHECK(0, "classifier create: %s", vt_last_error());
        return;
    }
    vt_init_weights(a, 1);
    vt_init_weights(b, 1);
    vt_init_weights(c, 1);
    CHECK(!vt_trainer_init(a, &tc) && !vt_trainer_init(b, &tc), "classifier trainer init: %s",
          vt_last_error());
    float first = 0, last = 0;
    int rc = 0;
    CHECK(vt_train_step(a, img, B, NULL) == VT_ERR_ARG && strstr(vt_last_error(), "labels"),
          "a classifier refuses the unlabelled step");
    for (int s = 0; s < 30 && !rc; s++) {
        rc = vt_train_step_labels(a, img, y, B, s ? &last : &first);
        if (s == N - 1) { /* b: N/2 steps under switching policies, saved, resumed in c */
            const char *pol[] = { "none", "block", "selective", "every:2", "sqrt", "none" };
            for (int k = 0; k < N / 2 && !rc; k++) {
                vt_set_grad_checkpointing(b, pol[k]);
                rc = vt_train_step_labels(b, img, y, B, NULL);
            }
            uint8_t *st = NULL;
            size_t len = 0;
            if (!rc) rc = vt_train_state_save(b, &st, &len);
            if (!rc) rc = vt_train_state_load(c, st, len);
            for (int k = N / 2; k < N && !rc; k++) {
                vt_set_grad_checkpointing(c, pol[k]);
                rc = vt_train_step_labels(c, img, y, B, NULL);
            }
            CHECK(
                !rc && !memcmp(vt_param_data(a, 0), vt_param_data(c, 0), vt_param_total(a) * sizeof(float)),
                "classifier: %d steps straight == %d, save, resume, %d (policies switched) bit for bit (%s)",
                N, N / 2, N / 2, rc ? vt_last_error() : "");
            vt_free(st);
        }
    }
    CHECK(!rc, "classifier training ran (%s)", vt_last_error());
    CHECK(last < 0.5f * first, "classifier loss falls: %g -> %g", first, last);
    vt_inputs in = { 0 };
    in.images = img;
    in.batch = B;
    int correct = 0;
    CHECK(!vt_forward(a, VT_FN_TIMM_FORWARD, &in, 0), "timm forward: %s", vt_last_error());
    const float *z = vt_output(a, 0, NULL, NULL);
    for (int k = 0; k < B && z; k++) correct += (z[2 * k + 1] > z[2 * k]) == (y[k] == 1);
    CHECK(correct == B, "classifier: %d of %d training images right after 30 steps", correct, B);
    /* a NaN stops the step and keeps the last good state */
    size_t P = vt_param_total(a);
    float *before = malloc(P * sizeof(float));
    memcpy(before, vt_param_data(a, 0), P * sizeof(float));
    long steps = vt_train_step_count(a);
    img[7] = NAN;
    rc = vt_train_step_labels(a, img, y, B, NULL);
    CHECK(rc == VT_ERR_NUMERIC && !memcmp(before, vt_param_data(a, 0), P * sizeof(float)) &&
              vt_train_step_count(a) == steps,
          "classifier NaN refused, state kept: %s", vt_last_error());
    int32_t bad[8] = { 0, 1, 0, 2, 0, 1, 0, 1 };
    img[7] = 0.0f;
    CHECK(vt_train_step_labels(a, img, bad, B, NULL) == VT_ERR_ARG &&
              strstr(vt_last_error(), "labels[3] = 2"),
          "label out of range: %s", vt_last_error());
    vt_model *mae = tiny(VT_KIND_MAE);
    vt_train_config_default(&tc, VT_KIND_MAE);
    vt_trainer_init(mae, &tc);
    CHECK(vt_train_step_labels(mae, img, y, 1, NULL) == VT_ERR_ARG, "an MAE model refuses labels");
    free(before);
    free(img);
    vt_model_free(a);
    vt_model_free(b);
    vt_model_free(c);
    vt_model_free(mae);
}

/* the activation timeline comes from the arena itself: its maximum is the measured peak */
static void test_timeline(void) {
    vt_model *m = tiny(VT_KIND_MAE);
    vt_init_weights(m, 1);
    vt_train_config tc;
    vt_train_config_default(&tc, VT_KIND_MAE);
    vt_trainer_init(m, &tc);
    float img[2 * 3 * 16 * 16];
    for (int i = 0; i < 2 * 3 * 16 * 16; i++) img[i] = sinf((float)i);
    size_t none_peak = 0;
    for (int k = 0; k < 2; k++) {
        vt_set_grad_checkpointing(m, k ? "block" : "none");
        CHECK(!vt_train_step(m, img, 2, NULL), "step");
        size_t tl[4096], live[4096];
        int bstart = -2, n = vt_activation_timeline(m, tl, live, 4096, &bstart);
        size_t mx = 0, live_mx = 0, live_ok = 1;
        for (int i = 0; i < n; i++) {
            mx = tl[i] > mx ? tl[i] : mx;
            live_mx = live[i] > live_mx ? live[i] : live_mx;
            live_ok &= live[i] <= tl[i];
        }
        CHECK(live_ok && n > 0 && live[n - 1] < live_mx && live[n - 1] < tl[n - 1],
              "live <= in use, and it falls through the backward (%zu of %zu at the end, max %zu)",
              n ? live[n - 1] : 0, n ? tl[n - 1] : 0, live_mx);
        vt_arena_stats st;
        vt_arena_get_stats(m, &st);
        CHECK(n > 10 && bstart > 0 && bstart < n, "timeline of %d events, backward from %d", n, bstart);
        CHECK(mx == st.peak, "timeline max %zu == peak %zu", mx, st.peak);
        if (!k)
            none_peak = mx;
        else
            CHECK(mx < none_peak, "block timeline peak %zu < none %zu", mx, none_peak);
    }
    vt_model_free(m);
}

/* Gradient accumulation (timm's --grad-accum-steps): a step of B images with grad_accum K runs K
 * micro-batches of B/K, each loss scaled by 1/K, then one clip + AdamW. The masks are drawn for
 * the whole batch, so the step is the one-batch step up to fp32 summation order: the gradients
 * agree to a few ulps of their largest value and the loss is the mean of the K losses. The
 * accumulated step is itself exact: policies change no bit, and it resumes bit for bit. */
static void test_grad_accum(vt_kind kind, int classifier) {
    const char *name = classifier ? "classifier" : kind == VT_KIND_MAE ? "MAE" : "AIM";
    vt_model_config mc;
    vt_model_config_default(&mc, kind);
    mc.enc.img_size = 16;
    mc.enc.patch_size = 4;
    mc.enc.embed_dim = 16;
    mc.enc.depth = 2;
    mc.enc.num_heads = 2;
    mc.decoder_dim = 8;
    mc.decoder_depth = 1;
    mc.decoder_heads = 2;
    mc.head_hidden_dim = 12;
    mc.head_blocks = 1;
    if (classifier) mc.enc.num_classes = 3;
    enum { B = 8, per = 3 * 16 * 16, K = 4 };
    float *img = malloc(B * per * sizeof(float));
    int32_t y[B];
    for (int i = 0; i < B * per; i++) img[i] = sinf(0.11f * i) + 0.3f * cosf(0.017f * i * i);
    for (int b = 0; b < B; b++) y[b] = (b * 5) % 3;
    vt_train_config tc;
    vt_train_config_default(&tc, kind);
    tc.lr = 1e-3f;
    tc.warmup_steps = 1;
    tc.total_steps = 10;
    tc.seed = 7;
    tc.clip_norm = 1.0f;
    tc.label_smoothing = classifier ? 0.1f : 0;
    vt_model *one = NULL, *acc = NULL, *acc2 = NULL;
    vt_model_create(&mc, &one);
    vt_model_create(&mc, &acc);
    vt_model_create(&mc, &acc2);
    if (!one || !acc || !acc2) {
        CHECK(0, "%s create: %s", name, vt_last_error());
        return;
    }
    vt_init_weights(one, 3);
    vt_init_weights(acc, 3);
    vt_init_weights(acc2, 3);
    vt_set_grad_checkpointing(one, "none");
    vt_set_grad_checkpointing(acc, "none");
    vt_set_grad_checkpointing(acc2, "block");
    int rc = vt_trainer_init(one, &tc);
    tc.grad_accum = K;
    if (!rc) rc = vt_trainer_init(acc, &tc);
    if (!rc) rc = vt_trainer_init(acc2, &tc);
    CHECK(!rc, "%s trainer init: %s", name, vt_last_error());
#define STEP(m, bb, loss)                                                                                    \
    (classifier ? vt_train_step_labels(m, img, y, bb, loss) : vt_train_step(m, img, bb, loss))
    CHECK(STEP(acc, 6, NULL) == VT_ERR_ARG && strstr(vt_last_error(), "not a multiple of grad_accum 4") &&
              vt_train_step_count(acc) == 0,
          "%s batch 6 of grad_accum 4 refused: %s", name, vt_last_error());
    vt_trace *tr = NULL;
    CHECK(vt_trace_train_step(acc, img, classifier ? y : NULL, B, &tr) == VT_ERR_ARG && !tr &&
              strstr(vt_last_error(), "not recorded"),
          "%s an accumulated step is not traced: %s", name, vt_last_error());
    vt_inputs bin;
    vt_scalars bsc;
    CHECK(vt_train_step_begin(acc, img, classifier ? y : NULL, B, &bin, &bsc) == VT_ERR_ARG &&
              strstr(vt_last_error(), "grad_accum 4"),
          "%s an accumulated step is not begun elsewhere: %s", name, vt_last_error());
    float l1 = 0, lk = 0, lk2 = 0;
    rc = STEP(one, B, &l1);
    if (!rc) rc = STEP(acc, B, &lk);
    CHECK(!rc, "%s steps: %s", name, vt_last_error());
    uint64_t gb = 0, pb = 0;
    const float *g1 = vt_model_region(one, VT_REG_GRADS, &gb), *gk = vt_model_region(acc, VT_REG_GRADS, &gb);
    const float *p1 = vt_model_region(one, VT_REG_PARAMS, &pb),
                *pk = vt_model_region(acc, VT_REG_PARAMS, &pb);
    double gmax = 0, gdiff = 0, pdiff = 0;
    for (size_t i = 0; i < gb / 4; i++) {
        gmax = fmax(gmax, fabs(g1[i]));
        gdiff = fmax(gdiff, fabs((double)g1[i] - gk[i]));
    }
    for (size_t i = 0; i < pb / 4; i++) pdiff = fmax(pdiff, fabs((double)p1[i] - pk[i]));
    printf("grad_accum %d vs one batch of %d (%s): loss %.9g vs %.9g, max |d grad| %.3g (%.3g of max |grad| "
           "%.3g), "
           "max |d param| after AdamW %.3g (lr %g)\n",
           K, B, name, l1, lk, gdiff, gdiff / gmax, gmax, pdiff, tc.lr);
    /* fp32 sums of up to B*T terms regrouped in K parts: a few ulps (2^-23 = 1.2e-7) of the largest gradient */
    CHECK(gdiff <= 64 * 1.2e-7 * gmax && gdiff > 0,
          "%s gradients as one batch within fp32 summation order (%.3g of max)", name, gdiff / gmax);
    CHECK(fabs((double)l1 - lk) <= 8 * 1.2e-7 * fabs(l1),
          "%s loss the mean of the micro-batch losses: %.9g vs %.9g", name, l1, lk);
    /* the accumulated step under another policy, and resumed after a save: bit for bit */
    uint8_t *st = NULL;
    size_t len = 0;
    rc = STEP(acc2, B, &lk2);
    if (!rc) rc = vt_train_state_save(acc2, &st, &len);
    vt_model *res = NULL;
    vt_model_create(&mc, &res);
    if (!rc && res) {
        vt_init_weights(res, 3);
        rc = vt_train_state_load(res, st, len);
    }
    for (int s = 0; s < 2 && !rc; s++) rc = STEP(acc, B, NULL);
    for (int s = 0; s < 2 && !rc && res; s++) rc = STEP(res, B, NULL);
    CHECK(!rc && res && lk == lk2 &&
              !memcmp(vt_model_region(acc, VT_REG_PARAMS, &pb), vt_model_region(res, VT_REG_PARAMS, &pb), pb),
          "%s accumulated: none == block, resumed bit for bit: %s", name, vt_last_error());
#undef STEP
    vt_free(st);
    free(img);
    vt_model_free(one);
    vt_model_free(acc);
    vt_model_free(acc2);
    vt_model_free(res);
}

/* timm's lr_min: the cosine falls to min_lr + (lr - min_lr) * 0.001; the warmup is unchanged, and
 * min_lr 0 is the schedule before it, bit for bit. It survives a save / load; bad values refused. */
static void test_min_lr(void) {
    vt_model *a = tiny(VT_KIND_MAE), *b = tiny(VT_KIND_MAE);
    vt_init_weights(a, 1);
    vt_init_weights(b, 1);
    vt_train_config tc;
    vt_train_config_default(&tc, VT_KIND_MAE);
    tc.lr = 1e-3f;
    tc.warmup_steps = 10;
    tc.total_steps = 100;
    vt_trainer_init(a, &tc);
    int same = 1;
    for (long s = 0; s < 100; s++) same &= vt_train_lr(a, s) == tc.lr * vt_cosine_warmup(s, 10, 100);
    CHECK(same, "min_lr 0: lr * cosine_warmup bit for bit");
    tc.min_lr = 1e-5f;
    CHECK(!vt_trainer_init(b, &tc), "min_lr init: %s", vt_last_error());
    float end = vt_train_lr(b, 99), want = 1e-5f + (1e-3f - 1e-5f) * 0.001f, mid = vt_train_lr(b, 55);
    CHECK(vt_train_lr(b, 3) == vt_train_lr(a, 3) && end == want && mid > vt_train_lr(a, 55) && mid < 1e-3f,
          "min_lr: warmup as before, end %g == %g, mid %g", end, want, mid);
    uint8_t *st = NULL;
    size_t len = 0;
    CHECK(!vt_train_state_save(b, &st, &len) && !vt_train_state_load(a, st, len) &&
              vt_train_lr(a, 99) == want,
          "min_lr saved and loaded: %s", vt_last_error());
    vt_free(st);
    tc.min_lr = 2e-3f;
    CHECK(vt_trainer_init(b, &tc) == VT_ERR_ARG && strstr(vt_last_error(), "min_lr"),
          "min_lr > lr refused: %s", vt_last_error());
    tc.min_lr = 0;
    tc.grad_accum = 0;
    CHECK(vt_trainer_init(b, &tc) == VT_ERR_ARG && strstr(vt_last_error(), "grad_accum 0"),
          "grad_accum 0 refused: %s", vt_last_error());
    vt_model_free(a);
    vt_model_free(b);
}

int main(void) {
    test_timeline();
    test_trainer(VT_KIND_MAE);
    test_trainer(VT_KIND_AIM);
    test_init();
    test_masks();
    test_optim();
    test_training(VT_KIND_MAE);
    test_training(VT_KIND_AIM);
    test_classifier();
    test_grad_accum(VT_KIND_MAE, 0);
    test_grad_accum(VT_KIND_AIM, 0);
    test_grad_accum(VT_KIND_TIMM, 1);
    test_min_lr();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
