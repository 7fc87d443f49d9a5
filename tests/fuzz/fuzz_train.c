/* fuzz_train: training states with valid CRC-32s into a tiny MAE, AIM and classifier trainer, then
 * training. The input's first 4 bytes choose the model, the batch, the checkpointing policy and
 * the step's inputs; the rest is a training state whose CRC-32s the harness writes afresh (so that
 * a mutation reaches the checks behind them: the metadata, the values). A refused state changes
 * nothing; an accepted one trains two steps and runs the encoder calls forward and backward: a step
 * that fails changes nothing, one that succeeds leaves every parameter and AdamW moment finite, and
 * the state saves and loads again. Reaches trainer.c's and api.c's checks, which fuzz_checkpoint
 * (whose mutations mostly stop at the CRC) does not. With data[0] / 3 odd, the first step
 * is also recorded and replayed (vt_trace_train_step, vt_train_step_begin, vt_trace_replay over
 * copies of the model's regions, vt_train_step_end: what the WebGPU backend runs) from the loaded
 * state: the recording changes nothing, the replay is refused or succeeds as the real step does,
 * and what it leaves is the real step's, bit for bit (exec.c's recording and replay paths). */
#include "fuzz_trainer.h"
#include "safetensors.h"
#include <stdint.h>

/* The step of model m recorded and replayed against the real step from the same state; aborts on a
 * difference. The model is back at its state (state bytes st) when it returns. */
static void replayed_step(vt_model *m, const uint8_t *st, size_t st_len, const float *images,
                          const int32_t *labels, int batch) {
    fz_snap s;
    fz_snap_take(m, &s);
    vt_trace *t = NULL;
    int rc = vt_trace_train_step(m, images, labels, batch, &t);
    if (!fz_snap_same(m, &s)) abort(); /* recording runs nothing */
    if (rc) return;
    vt_inputs in;
    vt_scalars sc;
    void *bufs[VT_REG_COUNT] = { 0 };
    int rb = vt_train_step_begin(m, images, labels, batch, &in, &sc);
    if (rb) { /* refused (grad_accum > 1 runs in vt_train_step only): nothing changed */
        if (!fz_snap_same(m, &s)) abort();
        vt_trace_free(t);
        return;
    }
    const void *src[VT_REG_COUNT] = { 0 };
    src[VT_REG_IMAGES] = in.images, src[VT_REG_IDX_KEEP] = in.idx_keep, src[VT_REG_IDX_MASK] = in.idx_mask;
    src[VT_REG_MASK] = in.mask, src[VT_REG_LABELS] = in.labels, src[VT_REG_SCALARS] = &sc;
    for (int g = 1; g < VT_REG_COUNT; g++) {
        uint64_t n = vt_trace_region_bytes(t, (vt_region)g), have = n;
        if (!n) continue;
        const void *from = src[g];
        if (!from && g != VT_REG_ARENA && g != VT_REG_DIMAGES) from = vt_model_region(m, (vt_region)g, &have);
        if (!(bufs[g] = calloc((size_t)n, 1))) abort();
        if (from) memcpy(bufs[g], from, (size_t)(have < n ? have : n));
    }
    if (vt_trace_replay(t, bufs)) abort(); /* every region has its buffer */
    rb = vt_train_step_end(m, bufs[VT_REG_SCALARS]);
    /* the real step from the same state: refused or not as the replay, and the same values */
    if (vt_train_state_load(m, st, st_len)) abort();
    float loss = 0;
    int rr = labels ? vt_train_step_labels(m, images, labels, batch, &loss)
                    : vt_train_step(m, images, batch, &loss);
    if ((rb == 0) != (rr == 0)) abort();
    if (!rb) {
        uint64_t n = 0;
        static const vt_region regs[] = { VT_REG_PARAMS, VT_REG_ADAM_M, VT_REG_ADAM_V };
        for (size_t i = 0; i < sizeof regs / sizeof *regs; i++) {
            const void *want = vt_model_region(m, regs[i], &n);
            if (vt_trace_region_bytes(t, regs[i]) && memcmp(want, bufs[regs[i]], (size_t)n)) abort();
        }
        if (memcmp(&loss, &((vt_scalars *)bufs[VT_REG_SCALARS])->loss, sizeof loss)) abort();
    }
    for (int g = 0; g < VT_REG_COUNT; g++) free(bufs[g]);
    vt_trace_free(t);
    if (vt_train_state_load(m, st, st_len)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    int k = data[0] % 3, batch = 1 + data[1] % 3;
    static const char *policies[] = { "none", "block",       "selective", "every:1",
                                      "sqrt", "budget:20KB", "budget:1" };
    const char *policy = policies[data[2] % 7];
    vt_model *m = fz_trainer_get(k)->m;
    uint8_t *fixed = NULL;
    size_t fixed_len = 0;
    if (fz_fix_crcs(data + 4, size - 4, &fixed, &fixed_len))
        return 0; /* not safetensors: fuzz_checkpoint's part */
    int rc = fz_load_checked(k, fixed, fixed_len);
    free(fixed);
    if (rc) return 0;
    vt_set_grad_checkpointing(m, policy);
    const vt_model_config *c = vt_model_get_config(m);
    int C = c->enc.in_chans, S = c->enc.img_size,
        L = (S / c->enc.patch_size) * (S / c->enc.patch_size) + c->enc.class_token;
    static float images[3 * 3 * 8 * 8];
    static int32_t labels[3];
    float scale = data[3] & 0x80 ? 1e30f : 1.0f; /* huge images: a non-finite loss, refused */
    for (int i = 0; i < batch * C * S * S; i++)
        images[i] = scale * ((float)((i * 37 + data[3]) % 17) / 8.0f - 1.0f);
    for (int b = 0; b < batch; b++)
        labels[b] = (data[3] >> b) % (c->enc.num_classes > 0 ? c->enc.num_classes : 1);
    if (data[0] / 3 % 2) { /* (the model, data[0] % 3, stays the byte's choice) */
        uint8_t *st = NULL;
        size_t st_len = 0;
        if (vt_train_state_save(m, &st, &st_len)) abort(); /* loaded, so it saves */
        replayed_step(m, st, st_len, images, k == 2 ? labels : NULL, batch);
        vt_free(st);
    }
    for (int step = 0; step < 2; step++) {
        fz_snap s;
        fz_snap_take(m, &s);
        float loss = 0;
        rc = k == 2 ? vt_train_step_labels(m, images, labels, batch, &loss)
                    : vt_train_step(m, images, batch, &loss);
        if (!rc) { /* a step that succeeded left finite values */
            if (!fz_state_good(m)) abort();
            continue;
        }
        if (fz_snap_same(m, &s)) continue; /* refused: nothing changed */
        /* only an update that went non-finite may change the state, and then nothing saves it */
        uint8_t *o = NULL;
        size_t ol = 0;
        if (rc != VT_ERR_NUMERIC || !vt_train_state_save(m, &o, &ol)) abort();
        fz_restart(k);
        return 0;
    }
    vt_step_plan plan;
    vt_plan_train_step(m, batch, -1, NULL, (uint64_t)data[2] << 12, &plan);
    /* the encoder calls, forward and backward, idx_keep (repeats allowed) as the bytes choose */
    int64_t keep[3 * 5];
    int nk = 1 + data[3] % L;
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < nk; j++) keep[b * nk + j] = (j * (1 + data[1]) + b) % L;
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = images;
    in.batch = batch;
    if (data[3] & 0x40) {
        in.idx_keep = keep;
        in.n_keep = nk;
    }
    for (int fn = VT_FN_ENCODE; fn <= VT_FN_TIMM_FORWARD; fn++) {
        if (fn == VT_FN_LOSS) continue;
        if (vt_forward(m, (vt_fn)fn, &in, 1)) continue;
        vt_backward(m, NULL, 0, NULL, data[2] & 1);
    }
    /* what trained saves and loads again; then the start state back */
    uint8_t *out = NULL;
    size_t len = 0;
    if (vt_train_state_save(m, &out, &len) || vt_train_state_load(m, out, len)) abort();
    vt_free(out);
    fz_restart(k);
    return 0;
}
