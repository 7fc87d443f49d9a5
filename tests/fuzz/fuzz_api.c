/* fuzz_api: the engine's calls with arguments from the bytes -- what a JS caller can pass through
 * vtw_forward / vtw_backward: the encoder calls and the loss of every model kind, the batch, idx_keep
 * / idx_mask (their counts and values: out of range, negative, repeated), a token or prefix mask,
 * is_causal, labels and label smoothing, the gradients given to backward (how many, missing ones),
 * a checkpointing policy; then the outputs by index (out of range too), a second backward, the
 * memory queries. Reaches the checks of check.c, api.c and the objectives, which the file harnesses
 * do not. A call that is refused says so; one that succeeds gives finite outputs (finite images
 * through a tiny model initialised as timm does) and finite input gradients; no backward follows a
 * forward without need_grad.
 * Input: 8 control bytes, then the values of idx_keep, idx_mask, mask and labels (int8 each). */
#include "fuzz_common.h"
#include <math.h>
#include <stdint.h>

#define FZ_B   3  /* the largest batch passed (the images buffer holds it) */
#define FZ_K   24 /* the most indices per row (the sequence has 5 tokens: some counts refused) */
#define FZ_IMG (FZ_B * 3 * 8 * 8)

static int finite_all(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    static const vt_kind kinds[] = { VT_KIND_TIMM, VT_KIND_LIGHTLY, VT_KIND_CAUSAL, VT_KIND_MAE,
                                     VT_KIND_AIM };
    static vt_model *models[5];
    static const char *policies[] = { "none", "block",       "selective", "every:1",
                                      "sqrt", "budget:20KB", "budget:1",  "every:0" };
    int k = data[0] % 5;
    if (!models[k]) models[k] = fz_tiny_model(kinds[k]);
    vt_model *m = models[k];
    vt_fn fn = (vt_fn)(data[1] % 7 == 6 ? -1 : data[1] % 7); /* -1: not a call */
    int need_grad = data[1] >> 7 & 1, want_dimages = data[1] >> 6 & 1, param_grads = data[1] >> 5 & 1;
    int batch = (int)(data[2] % (FZ_B + 2)) - 1;                              /* -1 .. FZ_B */
    int n_keep = data[3] % (FZ_K + 2) - 1, n_mask = data[4] % (FZ_K + 2) - 1; /* -1: not given */
    uint8_t f = data[5];
    vt_set_grad_checkpointing(m, policies[data[6] % 8]);
    float smoothing = data[7] == 255 ? NAN : data[7] / 200.0f; /* >= 1 and NaN refused */
    /* the values, as long as the bytes last (then zeros) */
    size_t p = 8;
    const int8_t *v = (const int8_t *)data;
#define NEXT() (p < size ? v[p++] : 0)
    static int64_t keep[FZ_B * FZ_K], mask_idx[FZ_B * FZ_K];
    static uint8_t mask[FZ_B * 32];
    static int32_t labels[FZ_B];
    static float images[FZ_IMG], dimages[FZ_IMG];
    for (int i = 0; i < FZ_B * FZ_K; i++) keep[i] = NEXT();
    for (int i = 0; i < FZ_B * FZ_K; i++) mask_idx[i] = NEXT();
    for (int i = 0; i < FZ_B * 32; i++) mask[i] = (uint8_t)NEXT() & 1;
    for (int i = 0; i < FZ_B; i++) labels[i] = NEXT();
    if (f & 0x80 && size > 8) keep[0] = (int64_t)INT64_MAX - data[8]; /* far out of range */
    for (int i = 0; i < FZ_IMG; i++) images[i] = (float)((i * 37 + data[0]) % 17) / 8.0f - 1.0f;
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = f & 0x40 ? NULL : images;
    in.batch = batch;
    if (n_keep >= 0) {
        in.idx_keep = keep;
        in.n_keep = n_keep;
    }
    if (n_mask >= 0) {
        in.idx_mask = mask_idx;
        in.n_mask = n_mask;
    }
    if (f & 1) in.mask = mask;
    in.is_causal = f >> 1 & 1;
    if (f & 4) in.labels = labels;
    in.label_smoothing = smoothing;
    int rc = vt_forward(m, fn, &in, need_grad);
    if (rc) {
        if (!vt_last_error()[0]) abort(); /* refused without saying why */
        return 0;
    }
    int n_out = vt_output_count(m);
    if (n_out < 1 || n_out > 64) abort();
    static float *douts_buf[64];
    const float *douts[65] = { 0 };
    for (int i = -1; i <= n_out; i++) {
        int64_t shape[4] = { 0 };
        int nd = 0;
        const float *o = vt_output(m, i, shape, &nd);
        if (i < 0 || i == n_out) {
            if (o) abort();
            continue;
        } /* out of range: none */
        if (!o || nd < 1 || nd > 4) abort();
        int64_t numel = 1;
        for (int d = 0; d < nd; d++) {
            if (shape[d] < 1 || shape[d] > 4096) abort();
            numel *= shape[d];
        }
        if (!finite_all(o, numel)) abort(); /* finite images, finite weights: finite outputs */
        free(douts_buf[i]);
        douts_buf[i] = malloc((size_t)numel * sizeof(float));
        if (!douts_buf[i]) abort();
        for (int64_t j = 0; j < numel; j++) douts_buf[i][j] = (float)((j * 7 + i) % 5) * 0.01f;
        douts[i] = douts_buf[i];
    }
    if (fn == VT_FN_LOSS && !isfinite(vt_loss_value(m))) abort();
    if (need_grad) {
        /* how many gradients: as many as outputs, one more or fewer, none; one of them missing */
        int n_d = f & 8 ? n_out + (f & 16 ? 1 : -1) : n_out;
        if (f & 32 && n_d > 0) douts[(data[6] >> 3) % n_d] = NULL;
        int brc =
            vt_backward(m, f & 2 && f & 8 ? NULL : douts, n_d, want_dimages ? dimages : NULL, param_grads);
        if (!brc && want_dimages && batch > 0 && !finite_all(dimages, (int64_t)batch * 3 * 8 * 8)) abort();
        if (brc && !vt_last_error()[0]) abort();
        /* another backward of the same forward (what it kept may serve again, or be gone) */
        vt_backward(m, douts, n_out, NULL, 0);
    } else if (!vt_backward(m, douts, n_out, NULL, 0))
        abort(); /* no backward without need_grad */
    size_t bytes[8], live[8];
    int bs = 0;
    vt_activation_timeline(m, bytes, live, 8, &bs);
    vt_arena_stats st;
    vt_arena_get_stats(m, &st);
    if (data[6] & 0x80) vt_release_activations(m);
    return 0;
}
