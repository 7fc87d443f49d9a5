/* test_replay.c: the step as data. One training step of every objective (MAE, AIM, classifier)
 * and the encoder calls with their backward (encode, forward, forward_intermediates with and
 * without norm, timm's forward; the losses with image gradients), over configs with qk_norm,
 * LayerScale, registers, no_embed_class, causal masks (is_causal on and off), token masks and a
 * repeated idx_keep, under every checkpointing policy: recorded, replayed over fresh buffers, and
 * compared bit for bit with the real step (harness/replay.c) -- through the scalar references and
 * through this build's kernels, at 1 and 2 threads (split down to the smallest shapes). Also:
 * what a recording must refuse, and what the recorded list says. */
#include "test_util.h"
#include "replay.h"
#include "threads.h"

static void test_replays(void) {
    int n = vt_replay_case_count(), checked = 0;
    long calls = 0;
    for (int threads = 1; threads <= 2; threads++) {
        CHECK(vt_set_threads(threads) == threads, "%d threads: %s", threads, vt_last_error());
        vt_threads_set_min_work(threads > 1 ? 0 : 2e5); /* split even these tiny shapes */
        for (int i = 0; i < n; i++)
            for (int p = 0; vt_replay_policy(p); p++)
                for (int ref = 0; ref <= 1; ref++) {
                    vt_replay_case c;
                    const char *name = vt_replay_case_get(i, p, ref, &c);
                    vt_replay_result r;
                    CHECK_OK(vt_replay_check(&c, &r), "replay check");
                    CHECK(r.pass, "%s, %s, %s kernels, %d thread(s): %s", name, c.policy,
                          ref ? "reference" : "this build's", threads, r.error);
                    checked++;
                    calls += r.calls;
                }
    }
    vt_threads_set_min_work(2e5);
    vt_set_threads(1);
    tu_info("%d recorded steps replayed bit for bit (%ld kernel calls)", checked, calls);
}

/* The oracle's small MAE model, initialised, its trainer ready; *img: B zero images of its size. */
static vt_model *small_mae(int B, float **img) {
    vt_model_config mc;
    vt_replay_small(&mc, VT_KIND_MAE);
    vt_model *m = NULL;
    CHECK_OK(vt_model_create(&mc, &m), "create");
    vt_init_weights(m, 1);
    vt_train_config tc;
    vt_train_config_default(&tc, VT_KIND_MAE);
    CHECK_OK(vt_trainer_init(m, &tc), "trainer");
    *img = tu_xcalloc((size_t)B * 3 * 16 * 16, sizeof(float));
    return m;
}

/* What the list says: regions, markers, FLOPs re-computed; and what recording refuses. */
static void test_list(void) {
    int B = 2;
    float *img = NULL;
    vt_model *m = small_mae(B, &img);
    vt_trace *none = NULL, *block = NULL;
    CHECK_OK(vt_trace_train_step(m, img, NULL, B, &none), "record under none");
    vt_set_grad_checkpointing(m, "block");
    CHECK_OK(vt_trace_train_step(m, img, NULL, B, &block), "record under block");
    double re_none = 0, re_block = 0;
    int phases[4] = { 0 }, allocs = 0, named = 0, lr_in = 0;
    for (int i = 0; i < vt_trace_count(none); i++)
        re_none += vt_trace_get(none, i)->phase == VT_PHASE_RECOMPUTE;
    for (int i = 0; i < vt_trace_count(block); i++) {
        const vt_trace_entry *e = vt_trace_get(block, i);
        if (e->kind == VT_TR_CALL) {
            phases[e->phase]++;
            if (e->phase == VT_PHASE_RECOMPUTE) re_block += e->flops;
            for (int k = 0; k < e->nops; k++) /* AdamW reads the learning rate from the scalars region */
                if (!strcmp(vt_kernel_name(e->kernel), "adamw") && e->op[k].region == VT_REG_SCALARS &&
                    e->op[k].offset == offsetof(vt_scalars, lr))
                    lr_in = 1;
        }
        if (e->kind == VT_TR_ALLOC)
            allocs++, named += !strncmp(e->name, "enc.blocks.", 11) || !strncmp(e->name, "dec.blocks.", 11);
    }
    CHECK(re_none == 0 && re_block > 0, "none re-computes nothing (%g calls), block re-computes %g FLOPs",
          re_none, re_block);
    CHECK(phases[0] && phases[1] && phases[2] && phases[3], "every phase marked (%d %d %d %d)", phases[0],
          phases[1], phases[2], phases[3]);
    CHECK(allocs > 0 && named > 0, "arena events named (%d allocations, %d block buffers)", allocs, named);
    CHECK(lr_in, "the learning rate is an input of the list (scalars), not a number in it");
    const vt_scalars *sc = vt_trace_input(block, VT_REG_SCALARS);
    CHECK(sc && sc->step == 1.0f && sc->dloss == 1.0f, "the recorded inputs: step %g, dloss %g",
          sc ? sc->step : -1, sc ? sc->dloss : -1);
    CHECK(vt_trace_region_bytes(block, VT_REG_IDX_KEEP) && vt_trace_input(block, VT_REG_IDX_KEEP),
          "idx_keep is an input");
    char *text = NULL, *json = NULL;
    size_t len = 0, jlen = 0;
    CHECK_OK(vt_trace_summary(block, &text, &len), "summary");
    CHECK(text && strstr(text, "re-computed") && strstr(text, "chain enc") && strstr(text, "chain dec"),
          "summary: %.200s", text ? text : "");
    CHECK_OK(vt_trace_json(block, &json, &jlen), "json");
    CHECK(json && strstr(json, "\"format\": \"vitrine-trace/1\"") && strstr(json, "\"call\": \"adamw\""),
          "json");
    vt_free(text), vt_free(json);
    CHECK(vt_train_step_count(m) == 0, "recording took no step");
    /* a replay without a buffer for a region the list addresses is refused */
    void *bufs[VT_REG_COUNT] = { 0 };
    CHECK_ERR(vt_trace_replay(block, bufs), VT_ERR_ARG, "no buffer", "replay without buffers");
    vt_trace_free(none), vt_trace_free(block);
    /* recording refuses what the call refuses, and leaves no recording behind */
    vt_trace *t = NULL;
    CHECK(vt_trace_train_step(m, img, NULL, 0, &t) != VT_OK && !t, "batch 0 refused");
    CHECK_OK(vt_trace_train_step(m, img, NULL, B, &t), "records again after a refusal");
    vt_trace_free(t);
    free(img);
    vt_model_free(m);
    /* the contract names every kernel */
    CHECK_OK(vt_kernel_contract(&text, &len), "contract");
    for (int k = 0; k < vt_kernel_count(); k++) {
        char want[64];
        snprintf(want, sizeof want, "| `%s` |", vt_kernel_name(k));
        CHECK(strstr(text, want), "the contract lists %s", vt_kernel_name(k));
    }
    vt_free(text);
}

/* A replayed step that meets a NaN refuses the update without a read-back: the flag makes AdamW
 * skip, parameters and moments stay as they were, and vt_train_step_end reports it, counting no
 * step and giving the generator back (the next step draws the same masks). */
static void test_refused_replay(void) {
    int B = 2;
    float *img = NULL;
    vt_model *m = small_mae(B, &img);
    CHECK_OK(vt_train_step(m, img, B, NULL), "a real step first");
    vt_trace *t = NULL;
    CHECK_OK(vt_trace_train_step(m, img, NULL, B, &t), "record");
    void *bufs[VT_REG_COUNT] = { 0 };
    uint64_t bytes[VT_REG_COUNT] = { 0 };
    for (int g = 1; g < VT_REG_COUNT; g++) {
        bytes[g] = vt_trace_region_bytes(t, (vt_region)g);
        if (!bytes[g]) continue;
        bufs[g] = tu_xcalloc((size_t)bytes[g], 1);
        uint64_t have = 0;
        const void *src = vt_model_region(m, (vt_region)g, &have);
        if (src && g != VT_REG_ARENA && g != VT_REG_SCALARS) memcpy(bufs[g], src, (size_t)bytes[g]);
    }
    vt_inputs in;
    vt_scalars sc;
    img[7] = NAN; /* one pixel */
    CHECK_OK(vt_train_step_begin(m, img, NULL, B, &in, &sc), "begin");
    memcpy(bufs[VT_REG_IMAGES], in.images, (size_t)bytes[VT_REG_IMAGES]);
    memcpy(bufs[VT_REG_IDX_KEEP], in.idx_keep, (size_t)bytes[VT_REG_IDX_KEEP]);
    memcpy(bufs[VT_REG_IDX_MASK], in.idx_mask, (size_t)bytes[VT_REG_IDX_MASK]);
    memcpy(bufs[VT_REG_SCALARS], &sc, sizeof sc);
    uint8_t *keep_drawn = tu_xmalloc((size_t)bytes[VT_REG_IDX_KEEP]);
    memcpy(keep_drawn, in.idx_keep, (size_t)bytes[VT_REG_IDX_KEEP]);
    CHECK_OK(vt_trace_replay(t, bufs), "replay");
    const vt_scalars *out = bufs[VT_REG_SCALARS];
    CHECK(out->nonfinite == 1.0f, "the replay flags the NaN (loss %g)", out->loss);
    static const vt_region kept[] = { VT_REG_PARAMS, VT_REG_ADAM_M, VT_REG_ADAM_V };
    for (int k = 0; k < 3; k++)
        CHECK(!memcmp(bufs[kept[k]], vt_model_region(m, kept[k], NULL), (size_t)bytes[kept[k]]),
              "%s unchanged", vt_region_name(kept[k]));
    long steps = vt_train_step_count(m);
    CHECK_ERR(vt_train_step_end(m, out), VT_ERR_NUMERIC, "not finite", "the refused replay is reported");
    CHECK(vt_train_step_count(m) == steps, "no step counted");
    img[7] = 0;
    CHECK_OK(vt_train_step_begin(m, img, NULL, B, &in, &sc), "begin again");
    CHECK(!memcmp(in.idx_keep, keep_drawn, (size_t)bytes[VT_REG_IDX_KEEP]),
          "the next try draws the same masks");
    sc.nonfinite = 0;
    CHECK_OK(vt_train_step_end(m, &sc), "a finite step counts");
    CHECK(vt_train_step_count(m) == steps + 1, "one step counted");
    CHECK_ERR(vt_train_step_end(m, &sc), VT_ERR_STATE, "begin", "end without begin");
    for (int g = 0; g < VT_REG_COUNT; g++) free(bufs[g]);
    free(keep_drawn);
    free(img);
    vt_trace_free(t);
    vt_model_free(m);
}

int main(void) {
    test_list();
    test_refused_replay();
    test_replays();
    vt_threads_shutdown();
    return tu_finish();
}
