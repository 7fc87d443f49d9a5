/* test_api.c: the paths of the public calls (api.c, trainer.c, exec.c) that the other tests leave:
 * the kernel contract as data (what a WebGPU backend reads) against the markdown table and the
 * kernel list, a kernel run from its operand pointers, a replay refusing a damaged list, the
 * activations released and made again bit for bit, the trainer's refusals (a model that does not
 * train, NULL images or labels, a step begun at AdamW's last count, a replayed step that was not
 * finite: the same masks drawn again) and training states with damaged metadata or tensors -- each a
 * status and a message naming the problem, the model unchanged. */
#include "test_util.h"
#include "exec.h"
#include "json.h"
#include "safetensors.h"
#include "test_state.h"

static char what_buf[256];
#define WHAT(...) (snprintf(what_buf, sizeof what_buf, __VA_ARGS__), what_buf)

static vt_model *tiny_mae(int B, float **img) {
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_MAE, 8, 4, 8, 1, 2, 2.0f);
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), "create")) return NULL;
    CHECK_OK(vt_init_weights(m, 1), "init");
    *img = tu_xcalloc((size_t)B * 3 * 8 * 8, sizeof(float));
    tu_rng r = { 5 };
    tu_fill_normal(&r, *img, (size_t)B * 3 * 8 * 8, 0, 1);
    return m;
}

/* ---- exec.c: the contract, a kernel from its pointers, names ---------------------------------- */

static void test_contract(void) {
    char *json = NULL, *md = NULL;
    size_t jn = 0, mn = 0;
    if (!CHECK_OK(vt_kernel_contract_json(&json, &jn), "contract JSON")) return;
    CHECK_OK(vt_kernel_contract(&md, &mn), "contract table");
    CHECK(jn == strlen(json) && mn == strlen(md), "lengths %zu %zu", jn, mn);
    vt_json *j = NULL;
    if (!CHECK_OK(vt_json_parse(json, jn, &j), "the contract is JSON")) {
        free(json);
        free(md);
        return;
    }
    int n = vt_kernel_count();
    CHECK(j->type == VT_JSON_OBJECT && (int)j->n == n, "%zu kernels in the JSON, %d in the list", j->n, n);
    for (int k = 0; k < n && k < (int)j->n; k++) {
        const char *name = vt_kernel_name(k);
        /* in list order, each with its operands (name, type, access, length), ints and floats */
        CHECK(!strcmp(j->keys[k], name), "kernel %d: '%s' in the JSON, '%s' in the list", k, j->keys[k],
              name);
        const vt_json *ops = vt_json_get(&j->items[k], "ops"), *ints = vt_json_get(&j->items[k], "ints"),
                      *fl = vt_json_get(&j->items[k], "floats");
        if (!CHECK(ops && ops->type == VT_JSON_ARRAY && ops->n >= 1 && ints && ints->type == VT_JSON_ARRAY &&
                       fl && fl->type == VT_JSON_ARRAY,
                   "%s: ops, ints, floats", name))
            continue;
        for (size_t i = 0; i < ops->n; i++) {
            const vt_json *o = &ops->items[i];
            int ok = o->type == VT_JSON_ARRAY && o->n == 4;
            for (size_t f = 0; ok && f < 4; f++)
                ok = o->items[f].type == VT_JSON_STRING && o->items[f].str[0];
            CHECK(ok, "%s: operand %zu is not [name, type, access, length]", name, i);
            if (!ok) continue;
            const char *dt = o->items[1].str, *acc = o->items[2].str;
            CHECK(!strcmp(dt, "f32") || !strcmp(dt, "f64") || !strcmp(dt, "i64") || !strcmp(dt, "i32") ||
                      !strcmp(dt, "u8"),
                  "%s: operand %s of type %s", name, o->items[0].str, dt);
            CHECK(!strcmp(acc, "r") || !strcmp(acc, "w") || !strcmp(acc, "rw"), "%s: access %s", name, acc);
        }
        /* the markdown row of the same kernel names the same first operand */
        char row[160];
        snprintf(row, sizeof row, "| `%s` | `%s` ", name,
                 ops->items[0].type == VT_JSON_ARRAY ? ops->items[0].items[0].str : "?");
        CHECK(md && strstr(md, row), "the table has no row starting '%s'", row);
    }
    vt_json_free(j);
    free(json);
    free(md);
    /* names out of range are "?", never a read past a table */
    CHECK(!strcmp(vt_kernel_name(-1), "?") && !strcmp(vt_kernel_name(n), "?"), "kernel name out of range");
    CHECK(!strcmp(vt_region_name(-1), "?") && !strcmp(vt_region_name(VT_REG_COUNT), "?") &&
              !strcmp(vt_region_name(VT_REG_SCALARS), "scalars"),
          "region names");
    CHECK(!strcmp(vt_phase_name(4), "?") && !strcmp(vt_phase_name(2), "backward"), "phase names");
}

/* A kernel run from its operand pointers (the dispatcher a replay uses) does what its entry point does. */
static void test_kernel_run(void) {
    int fill = -1, n = vt_kernel_count();
    for (int k = 0; k < n; k++)
        if (!strcmp(vt_kernel_name(k), "fill")) fill = k;
    if (!CHECK(fill >= 0, "no kernel 'fill' in the list")) return;
    float x[37];
    for (int i = 0; i < 37; i++) x[i] = -1.0f;
    void *op[2] = { x, NULL };
    int64_t ia[2] = { 33, 0 };
    float fa[2] = { 2.5f, 0 };
    vt_kernel_run(fill, op, ia, fa);
    int ok = 1;
    for (int i = 0; i < 37; i++) ok &= x[i] == (i < 33 ? 2.5f : -1.0f);
    CHECK(ok, "fill of 33 from its pointers: x[0] %g, x[32] %g, x[33] %g", x[0], x[32], x[33]);
}

/* A replay refuses a list without buffers, a region without its buffer and a damaged kernel index
 * before running anything. */
static void test_replay_refusals(void) {
    float *img = NULL;
    vt_model *m = tiny_mae(2, &img);
    if (!m) return;
    vt_train_config t;
    vt_train_config_default(&t, VT_KIND_MAE);
    vt_trace *tr = NULL;
    if (!CHECK_OK(vt_trainer_init(m, &t), "trainer") ||
        !CHECK_OK(vt_trace_train_step(m, img, NULL, 2, &tr), "record a step")) {
        vt_model_free(m);
        free(img);
        return;
    }
    void *bufs[VT_REG_COUNT] = { 0 };
    CHECK_ERR(vt_trace_replay(NULL, bufs), VT_ERR_ARG, "NULL", "replay of no list");
    CHECK_ERR(vt_trace_replay(tr, NULL), VT_ERR_ARG, "NULL", "replay without buffers");
    CHECK_ERR(vt_trace_replay(tr, bufs), VT_ERR_ARG, "no buffer given", "replay with every buffer missing");
    for (int r = 1; r < VT_REG_COUNT; r++) {
        uint64_t b = vt_trace_region_bytes(tr, (vt_region)r);
        bufs[r] = b ? tu_xcalloc((size_t)b, 1) : NULL;
    }
    /* the first call's kernel index damaged: refused, nothing run (the buffers stay zero) */
    vt_trace_entry *first = NULL;
    for (int i = 0; i < vt_trace_count(tr) && !first; i++)
        if (vt_trace_get(tr, i)->kind == VT_TR_CALL) first = (vt_trace_entry *)vt_trace_get(tr, i);
    if (CHECK(first, "a recorded step has calls")) {
        int k = first->kernel;
        first->kernel = vt_kernel_count();
        CHECK_ERR(vt_trace_replay(tr, bufs), VT_ERR_ARG, "kernel", "replay of a damaged kernel index");
        first->kernel = -3;
        CHECK_ERR(vt_trace_replay(tr, bufs), VT_ERR_ARG, "kernel -3", "replay of a negative kernel index");
        int zero = 1;
        for (int r = 1; r < VT_REG_COUNT; r++) {
            uint64_t b = vt_trace_region_bytes(tr, (vt_region)r);
            for (uint64_t i = 0; bufs[r] && i < b; i++) zero &= ((uint8_t *)bufs[r])[i] == 0;
        }
        CHECK(zero, "a refused replay wrote to a buffer");
        first->kernel = k;
    }
    for (int r = 1; r < VT_REG_COUNT; r++) free(bufs[r]);
    vt_trace_free(tr);
    vt_model_free(m);
    free(img);
}

/* ---- api.c: activations released, then made again ------------------------------------------- */

static void test_release_activations(void) {
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_TIMM, 8, 4, 8, 2, 2, 2.0f);
    c.enc.mask_token = 0;
    vt_model *m = NULL;
    if (!CHECK_OK(vt_model_create(&c, &m), "create")) return;
    tu_rng r = { 9 };
    tu_init_params(m, &r);
    float img[2 * 3 * 8 * 8];
    tu_fill_normal(&r, img, sizeof img / 4, 0, 1);
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = 2;
    if (!CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 1), "forward")) {
        vt_model_free(m);
        return;
    }
    int64_t shape[4];
    int nd = 0;
    const float *out = vt_output(m, 0, shape, &nd);
    size_t n = tu_numel(shape, nd);
    float *first = tu_xmalloc(n * sizeof *first);
    memcpy(first, out, n * sizeof *first);
    vt_release_activations(m);
    vt_arena_stats st;
    vt_arena_get_stats(m, &st);
    CHECK(st.capacity == 0, "after vt_release_activations the arena holds %zu bytes", st.capacity);
    CHECK(vt_output_count(m) == 0 && vt_output(m, 0, NULL, NULL) == NULL, "outputs after release");
    CHECK_ERR(vt_backward(m, NULL, 0, NULL, 1), VT_ERR_STATE, "vt_forward", "backward after release");
    /* made again: the same bits */
    if (CHECK_OK(vt_forward(m, VT_FN_ENCODE, &in, 1), "forward after release")) {
        out = vt_output(m, 0, NULL, NULL);
        CHECK(out && !memcmp(out, first, n * sizeof *first), "a forward after release differs");
        CHECK_OK(vt_backward(m, NULL, 0, NULL, 1), "backward after the new forward");
    }
    CHECK_ERR(vt_backward(m, NULL, -1, NULL, 1), VT_ERR_ARG, "upstream gradients", "-1 upstream gradients");
    free(first);
    vt_model_free(m);
}

/* ---- trainer.c: refusals, step begin / end --------------------------------------------------- */

static void test_trainer_refusals(void) {
    /* a timm encoder without a head does not train; its mask ratio is the default's */
    vt_model_config c;
    tu_tiny_config(&c, VT_KIND_TIMM, 8, 4, 8, 1, 2, 2.0f);
    c.enc.mask_token = 0;
    vt_model *enc = NULL;
    vt_train_config t;
    if (CHECK_OK(vt_model_create(&c, &enc), "create a timm encoder")) {
        vt_train_config_default(&t, VT_KIND_TIMM);
        CHECK_ERR(vt_trainer_init(enc, &t), VT_ERR_ARG, "training needs", "trainer on a headless encoder");
        CHECK_ERR(vt_trainer_init(enc, NULL), VT_ERR_ARG, "NULL", "trainer without a config");
        vt_model_free(enc);
    }
    float *img = NULL, loss = 0;
    vt_model *m = tiny_mae(4, &img);
    if (!m) return;
    vt_train_config_default(&t, VT_KIND_MAE);
    /* the plan of a step at "the trainer's" mask ratio: the default's before vt_trainer_init */
    vt_step_plan want, got;
    CHECK_OK(vt_plan_train_step(m, 4, t.mask_ratio, NULL, 0, &want), "plan at the default ratio");
    CHECK_OK(vt_plan_train_step(m, 4, -1, NULL, 0, &got), "plan at the trainer's ratio, before it");
    CHECK(got.tokens_kept == want.tokens_kept && got.bytes.total == want.bytes.total,
          "plan before vt_trainer_init: %d tokens kept, the default ratio's %d", got.tokens_kept,
          want.tokens_kept);
    CHECK_ERR(vt_train_step(m, img, 4, &loss), VT_ERR_STATE, "vt_trainer_init", "step before the trainer");
    t.mask_ratio = 0.5f;
    t.total_steps = 10;
    if (!CHECK_OK(vt_trainer_init(m, &t), "trainer")) goto out;
    CHECK_OK(vt_plan_train_step(m, 4, 0.5f, NULL, 0, &want), "plan at 0.5");
    CHECK_OK(vt_plan_train_step(m, 4, -1, NULL, 0, &got), "plan at the trainer's ratio");
    CHECK(got.tokens_kept == want.tokens_kept && got.tokens_kept != 0,
          "plan after vt_trainer_init at 0.5: %d tokens kept, want %d", got.tokens_kept, want.tokens_kept);
    CHECK_ERR(vt_train_step(m, NULL, 4, &loss), VT_ERR_ARG, "vt_train_step: NULL", "step of NULL images");
    int32_t labels[4] = { 0, 1, 0, 1 };
    CHECK_ERR(vt_train_step_labels(m, img, NULL, 4, &loss), VT_ERR_ARG, "vt_train_step_labels: NULL",
              "labels NULL");
    CHECK_ERR(vt_train_step_labels(m, img, labels, 4, &loss), VT_ERR_ARG, "classifier", "labels for an MAE");
    CHECK_ERR(vt_train_step(m, img, 0, &loss), VT_ERR_ARG, "batch", "batch 0");
    CHECK(vt_train_step_count(m) == 0, "a refused step counted");

    /* begin / end: refusals, then a step whose replay was not finite is not counted and the next
     * begin draws the same masks */
    vt_inputs in, again;
    vt_scalars sc;
    CHECK_ERR(vt_train_step_begin(m, img, NULL, 4, NULL, &sc), VT_ERR_ARG, "NULL", "begin without inputs");
    CHECK_ERR(vt_train_step_begin(m, img, NULL, 4, &in, NULL), VT_ERR_ARG, "NULL", "begin without scalars");
    CHECK_ERR(vt_train_step_end(m, NULL), VT_ERR_ARG, "NULL", "end without scalars");
    CHECK_ERR(vt_train_step_end(m, &sc), VT_ERR_STATE, "vt_train_step_begin first", "end before begin");
    if (!CHECK_OK(vt_train_step_begin(m, img, NULL, 4, &in, &sc), "begin")) goto out;
    CHECK(sc.step == 1.0f && sc.dloss == 1.0f && sc.lr == vt_train_lr(m, 0), "begin's scalars: step %g lr %g",
          sc.step, sc.lr);
    int n_keep = in.n_keep;
    int64_t *keep = tu_xmalloc((size_t)4 * n_keep * sizeof *keep);
    memcpy(keep, in.idx_keep, (size_t)4 * n_keep * sizeof *keep);
    sc.nonfinite = 1.0f;
    CHECK_ERR(vt_train_step_end(m, &sc), VT_ERR_NUMERIC, "not finite", "end of a non-finite step");
    CHECK(vt_train_step_count(m) == 0, "a non-finite step counted");
    CHECK_ERR(vt_train_step_end(m, &sc), VT_ERR_STATE, "begin", "end twice");
    if (CHECK_OK(vt_train_step_begin(m, img, NULL, 4, &again, &sc), "begin again"))
        CHECK(again.n_keep == n_keep && !memcmp(again.idx_keep, keep, (size_t)4 * n_keep * sizeof *keep),
              "the step begun again after a non-finite one draws other masks");
    free(keep);
    /* a finite end counts the step, as vt_train_step would */
    sc.nonfinite = 0.0f;
    CHECK_OK(vt_train_step_end(m, &sc), "end");
    CHECK(vt_train_step_count(m) == 1, "steps after one end: %ld", vt_train_step_count(m));
    /* grad_accum > 1 runs in vt_train_step only */
    t.grad_accum = 2;
    if (CHECK_OK(vt_trainer_init(m, &t), "trainer with grad_accum 2")) {
        CHECK_ERR(vt_train_step_begin(m, img, NULL, 4, &in, &sc), VT_ERR_ARG, "grad_accum", "begin at K = 2");
        CHECK_ERR(vt_train_step(m, img, 3, &loss), VT_ERR_ARG, "multiple of grad_accum", "batch 3 at K = 2");
        CHECK_OK(vt_train_step(m, img, 4, &loss), "step at K = 2");
        CHECK(isfinite(loss), "loss %g", loss);
    }
out:
    vt_model_free(m);
    free(img);
}

/* ---- trainer.c: training states with damaged metadata or tensors ------------------------------ */

static void test_damaged_states(void) {
    float *img = NULL, loss = 0;
    vt_model *m = tiny_mae(2, &img);
    if (!m) return;
    vt_train_config t;
    vt_train_config_default(&t, VT_KIND_MAE);
    t.total_steps = 10;
    t.warmup_steps = 2;
    t.seed = 11;
    uint8_t *st = NULL;
    size_t len = 0;
    CHECK_ERR(vt_train_state_save(m, &st, &len), VT_ERR_STATE, "vt_trainer_init", "save before the trainer");
    if (!CHECK_OK(vt_trainer_init(m, &t), "trainer") || !CHECK_OK(vt_train_step(m, img, 2, &loss), "step") ||
        !CHECK_OK(vt_train_state_save(m, &st, &len), "save")) {
        vt_model_free(m);
        free(img);
        return;
    }
    const char *tc_ok =
        "\"lr\": 0.00015, \"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-08, \"weight_decay\": 0.05, "
        "\"clip_norm\": 0, \"mask_ratio\": 0.75, \"warmup_steps\": 2, \"total_steps\": 10, "
        "\"seed\": 11";
    char tc[3][400];
    snprintf(tc[0], sizeof tc[0],
             "{\"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-08, \"weight_decay\": 0.05, "
             "\"clip_norm\": 0, \"mask_ratio\": 0.75, \"warmup_steps\": 2, \"total_steps\": "
             "10, \"seed\": 11}");
    snprintf(tc[1], sizeof tc[1], "{%s, \"grad_accum\": 1.5}", tc_ok);
    snprintf(tc[2], sizeof tc[2], "{%s, \"min_lr\": 0.5}", tc_ok);
    /* metadata: every damage refused by name (the checksums dropped where a tensor is changed: a
     * state written before them loads as before, so the checks behind them are the ones tested) */
    struct {
        const char *key, *value, *tensor;
        int64_t numel;
        const char *extra;
        int status;
        const char *word;
    } cases[] = {
        { "format", NULL, NULL, 0, NULL, VT_ERR_FORMAT, "format missing" },
        { "format", "vitrine-train/0", NULL, 0, NULL, VT_ERR_FORMAT, "vitrine-train/0" },
        { "kind", NULL, NULL, 0, NULL, VT_ERR_FORMAT, "no kind" },
        { "kind", "cnn", NULL, 0, NULL, VT_ERR_FORMAT, "'cnn' is not a model kind" },
        { "kind", "aim", NULL, 0, NULL, VT_ERR_FORMAT, "not its model_config's" },
        { "rng", "0123456789abcdef0123456789abcdeg", NULL, 0, NULL, VT_ERR_FORMAT, "32 hex digits" },
        { "rng", "00000000000000000000000000000000", NULL, 0, NULL, VT_ERR_FORMAT, "all zero" },
        { "train_config", tc[0], NULL, 0, NULL, VT_ERR_FORMAT, "train_config.lr: a number is needed" },
        { "train_config", tc[1], NULL, 0, NULL, VT_ERR_FORMAT, "grad_accum must be an integer" },
        { "train_config", tc[2], NULL, 0, NULL, VT_ERR_FORMAT, "training state: training config" },
        { "train_config", "[1, 2]", NULL, 0, NULL, VT_ERR_FORMAT, "not a JSON object" },
        { "crc32", "[]", NULL, 0, NULL, VT_ERR_FORMAT, "crc32 metadata lists 0 tensors" },
        { "crc32", NULL, "param/backbone.vit.cls_token", 3, NULL, VT_ERR_MISMATCH,
          "has 3 values, expected 8" },
        { "crc32", NULL, "adam_v/backbone.vit.cls_token", 0, NULL, VT_ERR_MISMATCH,
          "missing 'adam_v/backbone.vit.cls_token'" },
        { "crc32", NULL, NULL, 0, "param/stray", VT_ERR_MISMATCH, "tensors, expected" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t bl = 0;
        uint8_t *b = tu_restate(st, len, cases[i].key, cases[i].value, cases[i].tensor, cases[i].numel,
                                cases[i].extra, &bl);
        if (!CHECK(b, "rewrite case %zu", i)) continue;
        CHECK_ERR(vt_train_state_load(m, b, bl), cases[i].status, cases[i].word,
                  WHAT("load with %s = %.60s%s%s", cases[i].key, cases[i].value ? cases[i].value : "(none)",
                       cases[i].tensor ? ", tensor " : "", cases[i].tensor ? cases[i].tensor : ""));
        CHECK(tu_same_state(m, st, len), "a refused state (case %zu) changed the model", i);
        /* the check without a model refuses the metadata's damage alike */
        if (cases[i].status == VT_ERR_FORMAT && strcmp(cases[i].key, "kind"))
            CHECK_ERR(
                vt_train_state_check(b, bl), VT_ERR_FORMAT, cases[i].word,
                WHAT("check with %s = %.60s", cases[i].key, cases[i].value ? cases[i].value : "(none)"));
        free(b);
    }
    /* a checksum entry under another name: the tensor has none */
    {
        vt_st_file f;
        if (CHECK_OK(vt_st_parse(st, len, &f), "parse the state")) {
            const char *sums = vt_st_meta(&f, "crc32");
            char *renamed = tu_xmalloc(strlen(sums) + 1);
            strcpy(renamed, sums);
            char *at = strstr(renamed, "\"param/backbone.vit.cls_token\"");
            if (CHECK(at, "the checksums name param/backbone.vit.cls_token")) {
                at[strlen("\"param/backbone.vit.cls_toke")] = 'm'; /* cls_tokem: no such tensor */
                size_t bl = 0;
                uint8_t *b = tu_restate(st, len, "crc32", renamed, NULL, 0, NULL, &bl);
                if (CHECK(b, "rewrite")) {
                    CHECK_ERR(vt_train_state_load(m, b, bl), VT_ERR_FORMAT,
                              "no checksum for 'param/backbone.vit.cls_token'",
                              "a checksum under another name");
                    CHECK(tu_same_state(m, st, len), "a refused state changed the model");
                    free(b);
                }
            }
            free(renamed);
            vt_st_free(&f);
        }
    }
    CHECK_ERR(vt_train_state_check(NULL, 0), VT_ERR_ARG, "NULL", "check of NULL");
    CHECK_ERR(vt_train_state_load(m, NULL, 0), VT_ERR_ARG, "NULL", "load of NULL");
    CHECK_ERR(vt_train_state_save(m, NULL, &len), VT_ERR_ARG, "NULL", "save to NULL");
    /* at AdamW's last count a state loads; a step begun from it is refused, its masks not drawn */
    {
        size_t bl = 0;
        uint8_t *b = tu_restate(st, len, "step", "2000000000", NULL, 0, NULL, &bl);
        vt_inputs in;
        vt_scalars sc;
        if (CHECK(b, "rewrite") && CHECK_OK(vt_train_state_load(m, b, bl), "a state at step 2000000000")) {
            CHECK_ERR(vt_train_step_begin(m, img, NULL, 2, &in, &sc), VT_ERR_STATE, "the most it counts",
                      "begin at step 2000000000");
            CHECK(tu_same_state(m, b, bl), "a refused begin changed the state (its generator)");
        }
        free(b);
    }
    /* the good state still loads, and a step from it is the step from the original */
    float l1 = 0, l2 = 0;
    CHECK_OK(vt_train_state_load(m, st, len), "load the good state");
    CHECK_OK(vt_train_step(m, img, 2, &l1), "step 2");
    if (CHECK_OK(vt_train_state_load(m, st, len), "load the good state")) {
        CHECK_OK(vt_train_step(m, img, 2, &l2), "step 2 again");
        CHECK(l1 == l2, "step 2 from the loaded state: loss %.9g, straight %.9g", l2, l1);
    }
    free(st);
    vt_model_free(m);
    free(img);
}

int main(void) {
    test_contract();
    test_kernel_run();
    test_replay_refusals();
    test_release_activations();
    test_trainer_refusals();
    test_damaged_states();
    return tu_finish();
}
