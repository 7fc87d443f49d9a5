/* replay.c: the replay oracle (replay.h). */
#include "replay.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(vt_replay_result *r, const char *fmt, ...) {
    if (!r->error[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->error, sizeof r->error, fmt, ap);
        va_end(ap);
    }
    r->pass = 0;
    return 0;
}

/* "budget": half way between the activation plans of none and block, a layout of its own */
static vt_status set_policy(vt_model *m, const vt_replay_case *c, const vt_inputs *in) {
    if (strcmp(c->policy, "budget")) return vt_set_grad_checkpointing(m, c->policy);
    uint64_t act[2];
    for (int k = 0; k < 2; k++) {
        vt_status rc = vt_set_grad_checkpointing(m, k ? "block" : "none");
        vt_step_plan sp;
        vt_plan_bytes pb;
        if (!rc && c->fn < 0)
            rc = vt_plan_train_step(m, c->batch, -1, NULL, 0, &sp), pb = sp.bytes;
        else if (!rc)
            rc = vt_plan(m, (vt_fn)c->fn, in, 1, &pb);
        if (rc) return rc;
        act[k] = pb.activations;
    }
    char text[48];
    snprintf(text, sizeof text, "budget:%llu", (unsigned long long)(act[0] + act[1]) / 2);
    return vt_set_grad_checkpointing(m, text);
}

static vt_model *make(const vt_replay_case *c, const vt_inputs *in, vt_replay_result *r) {
    vt_model *m = NULL;
    if (vt_model_create(&c->cfg, &m)) {
        fail(r, "create: %s", vt_last_error());
        return NULL;
    }
    if (vt_init_weights(m, 3)) {
        fail(r, "init: %s", vt_last_error());
        vt_model_free(m);
        return NULL;
    }
    if (c->fn < 0) {
        vt_train_config tc;
        vt_train_config_default(&tc, c->cfg.kind);
        tc.lr = 1e-3f;
        tc.warmup_steps = 1;
        tc.total_steps = 10;
        tc.seed = 5;
        tc.clip_norm = c->clip_norm;
        tc.label_smoothing = 0.1f;
        if (vt_trainer_init(m, &tc)) {
            fail(r, "trainer: %s", vt_last_error());
            vt_model_free(m);
            return NULL;
        }
    }
    if (set_policy(m, c, in)) {
        fail(r, "policy %s: %s", c->policy, vt_last_error());
        vt_model_free(m);
        return NULL;
    }
    return m;
}

/* a copy of a model region, or of the trace's recorded input, or NaN bytes of the trace's size */
static void *buffer(const void *src, uint64_t bytes, int nan_fill) {
    void *b = malloc(bytes ? (size_t)bytes : 1);
    if (!b) return NULL;
    if (src)
        memcpy(b, src, (size_t)bytes);
    else if (nan_fill)
        memset(b, 0xff, (size_t)bytes); /* NaN floats: what a kernel reads before it writes shows */
    else
        memset(b, 0, (size_t)bytes);
    return b;
}

static int same(vt_replay_result *r, const char *what, const void *want, const void *got, uint64_t bytes) {
    if (!bytes || !memcmp(want, got, (size_t)bytes)) return 1;
    const uint8_t *a = want, *b = got;
    uint64_t i = 0;
    while (a[i] == b[i]) i++;
    return fail(r, "%s differs from the real step at byte %llu of %llu", what, (unsigned long long)i,
                (unsigned long long)bytes);
}

/* the replay of t over fresh buffers: B's regions (params, grads, moments) before the step, the
 * recorded inputs, a NaN arena, zeroed d images */
static int replay(const vt_trace *t, vt_model *B, void *bufs[VT_REG_COUNT], vt_replay_result *r) {
    memset(bufs, 0, VT_REG_COUNT * sizeof *bufs);
    for (int g = 1; g < VT_REG_COUNT; g++) {
        uint64_t n = vt_trace_region_bytes(t, (vt_region)g), have = 0;
        if (!n) continue;
        const void *src = vt_trace_input(t, (vt_region)g);
        if (!src && g != VT_REG_ARENA && g != VT_REG_DIMAGES) src = vt_model_region(B, (vt_region)g, &have);
        if (src && g != VT_REG_SCALARS && !vt_trace_input(t, (vt_region)g) && have < n)
            return fail(r, "region %s: the model has %llu bytes, the list addresses %llu", vt_region_name(g),
                        (unsigned long long)have, (unsigned long long)n);
        bufs[g] = buffer(src, n, g == VT_REG_ARENA || g == VT_REG_GRADS);
        if (!bufs[g]) return fail(r, "out of memory");
    }
    if (vt_trace_replay(t, bufs)) return fail(r, "replay: %s", vt_last_error());
    return 1;
}

static void free_bufs(void *bufs[VT_REG_COUNT]) {
    for (int g = 0; g < VT_REG_COUNT; g++) free(bufs[g]);
}

/* A's model regions against the replay's buffers */
static void compare_state(vt_replay_result *r, vt_model *A, const vt_trace *t, void *bufs[VT_REG_COUNT]) {
    static const vt_region regs[] = { VT_REG_PARAMS, VT_REG_GRADS, VT_REG_ADAM_M, VT_REG_ADAM_V };
    for (size_t k = 0; k < sizeof regs / sizeof *regs; k++) {
        uint64_t n = 0;
        const void *want = vt_model_region(A, regs[k], &n);
        if (vt_trace_region_bytes(t, regs[k]) && want)
            same(r, vt_region_name(regs[k]), want, bufs[regs[k]], n);
    }
}

static void fill_images(float *img, size_t n) {
    for (size_t i = 0; i < n; i++) img[i] = cosf(0.37f * (float)i) + 0.1f * sinf(0.011f * (float)i);
}

static void train_case(const vt_replay_case *c, vt_replay_result *r) {
    vt_model *A = make(c, NULL, r), *B = A ? make(c, NULL, r) : NULL;
    size_t n = (size_t)c->batch * c->cfg.enc.in_chans * c->cfg.enc.img_size * vt_img_width(&c->cfg.enc);
    float *img = malloc(n * sizeof *img);
    int32_t *labels = malloc((size_t)c->batch * sizeof *labels);
    int classifier = c->cfg.kind == VT_KIND_TIMM;
    vt_trace *t = NULL;
    void *bufs[VT_REG_COUNT] = { 0 };
    if (!A || !B || !img || !labels) {
        if (A && B) fail(r, "out of memory");
        goto done;
    }
    fill_images(img, n);
    for (int b = 0; b < c->batch; b++)
        labels[b] = b % (c->cfg.enc.num_classes > 0 ? c->cfg.enc.num_classes : 1);
#define STEP(m)                                                                                              \
    (classifier ? vt_train_step_labels((m), img, labels, c->batch, NULL)                                     \
                : vt_train_step((m), img, c->batch, NULL))
    for (int w = 0; w < c->warm_steps; w++)
        if (STEP(A) || STEP(B)) {
            fail(r, "warm step: %s", vt_last_error());
            goto done;
        }
    if (vt_trace_train_step(B, img, classifier ? labels : NULL, c->batch, &t)) {
        fail(r, "record: %s", vt_last_error());
        goto done;
    }
    r->entries = vt_trace_count(t);
    for (int i = 0; i < r->entries; i++) r->calls += vt_trace_get(t, i)->kind == VT_TR_CALL;
    vt_kernels_use_reference(c->reference);
    if (replay(t, B, bufs, r)) {
        if (STEP(A)) fail(r, "real step: %s", vt_last_error());
        compare_state(r, A, t, bufs);
        same(r, "the loss", &((vt_scalars *)vt_model_region(A, VT_REG_SCALARS, NULL))->loss,
             &((vt_scalars *)bufs[VT_REG_SCALARS])->loss, sizeof(float));
        /* B only recorded: its own step is A's */
        if (STEP(B)) fail(r, "B's step after recording: %s", vt_last_error());
        uint64_t pb = 0;
        const void *pa = vt_model_region(A, VT_REG_PARAMS, &pb);
        same(r, "the recording model's next step", pa, vt_model_region(B, VT_REG_PARAMS, NULL), pb);
        /* the same list at the next steps: new masks, learning rate and step count as inputs
         * (vt_train_step_begin / _end), the state carried on in the replay's buffers */
        for (int s = 0; s < 2 && r->pass; s++) {
            vt_inputs in;
            vt_scalars sc;
            if (vt_train_step_begin(B, img, classifier ? labels : NULL, c->batch, &in, &sc)) {
                fail(r, "step begin: %s", vt_last_error());
                break;
            }
            const void *src[VT_REG_COUNT] = { 0 };
            src[VT_REG_IMAGES] = in.images, src[VT_REG_IDX_KEEP] = in.idx_keep,
            src[VT_REG_IDX_MASK] = in.idx_mask;
            src[VT_REG_MASK] = in.mask, src[VT_REG_LABELS] = in.labels, src[VT_REG_SCALARS] = &sc;
            for (int g = 0; g < VT_REG_COUNT; g++)
                if (src[g] && bufs[g])
                    memcpy(bufs[g], src[g], (size_t)vt_trace_region_bytes(t, (vt_region)g));
            if (vt_trace_replay(t, bufs)) {
                fail(r, "replay at a later step: %s", vt_last_error());
                break;
            }
            if (vt_train_step_end(B, bufs[VT_REG_SCALARS])) {
                fail(r, "step end: %s", vt_last_error());
                break;
            }
            if (STEP(A)) fail(r, "real step: %s", vt_last_error());
            compare_state(r, A, t, bufs);
            same(r, "the loss at a later step",
                 &((vt_scalars *)vt_model_region(A, VT_REG_SCALARS, NULL))->loss,
                 &((vt_scalars *)bufs[VT_REG_SCALARS])->loss, sizeof(float));
        }
        if (r->pass && vt_train_step_count(A) != vt_train_step_count(B))
            fail(r, "step counts %ld (real) and %ld (replayed)", vt_train_step_count(A),
                 vt_train_step_count(B));
    }
    vt_kernels_use_reference(0);
#undef STEP
done:
    free_bufs(bufs);
    vt_trace_free(t);
    vt_model_free(A), vt_model_free(B);
    free(img), free(labels);
}

static void call_case(const vt_replay_case *c, vt_replay_result *r) {
    vt_model *A = NULL, *B = NULL;
    const vt_vit_config *e = &c->cfg.enc;
    int Bn = c->batch, L = (int)vt_config_tokens(e), P = e->class_token + e->reg_tokens + e->distilled;
    size_t n = (size_t)Bn * e->in_chans * (c->height ? c->height : e->img_size) *
               (c->width ? c->width : vt_img_width(e));
    float *img = malloc(n * sizeof *img), *dimA = calloc(n, sizeof *dimA);
    int64_t *keep = malloc(((size_t)Bn * L + 1) * sizeof *keep),
            *msk = malloc(((size_t)Bn * L + 1) * sizeof *msk);
    uint8_t *bm = malloc((size_t)Bn * L + 1);
    int32_t *labels = malloc((size_t)Bn * sizeof *labels);
    float *douts[80] = { 0 }; /* one per output: at most 1 + depth (<= 64) */
    vt_trace *t = NULL;
    void *bufs[VT_REG_COUNT] = { 0 };
    if (!img || !dimA || !keep || !msk || !bm || !labels) {
        fail(r, "out of memory");
        goto done;
    }
    fill_images(img, n);
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = img;
    in.batch = Bn;
    in.height = c->height;
    in.width = c->width;
    in.distilled_training = c->distilled_training;
    in.inter = c->inter;
    int loss = c->fn == VT_FN_LOSS, nk = c->idx_keep, nm = c->idx_mask;
    for (int b = 0; b < Bn; b++) {
        if (loss) { /* MAE: a permutation of the patches, kept then masked (the class token kept first) */
            int perm[4096];
            for (int l = 0; l < L; l++) perm[l] = l;
            for (int l = L - 1; l > P; l--) {
                int j = P + (l * 7 + b * 3) % (l - P + 1), x = perm[l];
                perm[l] = perm[j];
                perm[j] = x;
            }
            for (int k = 0; k < nk; k++) keep[b * nk + k] = perm[k];
            for (int k = 0; k < nm; k++) msk[b * nm + k] = perm[nk + k];
        } else {
            for (int k = 0; k < nk; k++) keep[b * nk + k] = (k * 5 + b) % L;
            if (nk > 1) keep[b * nk + nk - 1] = keep[b * nk]; /* a repeated index */
            for (int k = 0; k < nm; k++) msk[b * nm + k] = P + (k * 3 + b) % (L - P);
        }
        for (int l = 0; l < L; l++)
            bm[b * L + l] = c->is_causal || e->class_token == 0 ? l >= 1 + b % L : (l * 3 + b) % 4 == 0;
        labels[b] = b % (e->num_classes > 0 ? e->num_classes : 1);
    }
    if (nk) {
        in.idx_keep = keep;
        in.n_keep = nk;
    }
    if (nm) {
        in.idx_mask = msk;
        in.n_mask = nm;
    }
    if (c->bool_mask) {
        in.mask = bm;
        in.is_causal = c->is_causal;
    }
    if (loss && c->cfg.kind == VT_KIND_TIMM) {
        in.labels = labels;
        in.label_smoothing = 0.2f;
    }
    if (!(A = make(c, &in, r)) || !(B = make(c, &in, r))) goto done;
    vt_kernels_use_reference(c->reference);
    if (vt_forward(A, (vt_fn)c->fn, &in, 1)) {
        fail(r, "A forward: %s", vt_last_error());
        goto done;
    }
    int nout = vt_output_count(A);
    if (nout > 80) {
        fail(r, "%d outputs", nout);
        goto done;
    }
    static float dl = 0.7f;
    for (int i = 0; i < nout && !loss; i++) { /* upstream gradients of every output */
        int64_t sh[4];
        int nd = 0;
        vt_output(A, i, sh, &nd);
        size_t k = 1;
        for (int d = 0; d < nd; d++) k *= (size_t)sh[d];
        if (!(douts[i] = malloc(k * sizeof(float)))) {
            fail(r, "out of memory");
            goto done;
        }
        for (size_t j = 0; j < k; j++) douts[i][j] = 0.01f * cosf(0.7f * (float)(j + 13 * i));
    }
    const float *dl_ptr[1] = { &dl };
    const float *const *dd = loss ? dl_ptr : (const float *const *)douts;
    int nd = loss ? 1 : nout;
    if (vt_trace_call(B, (vt_fn)c->fn, &in, 1, dd, nd, dimA /* any buffer of the size */, 1, &t)) {
        fail(r, "record: %s", vt_last_error());
        goto done;
    }
    r->entries = vt_trace_count(t);
    for (int i = 0; i < r->entries; i++) r->calls += vt_trace_get(t, i)->kind == VT_TR_CALL;
    if (!replay(t, B, bufs, r)) goto done;
    if (vt_backward(A, dd, nd, dimA, 1)) {
        fail(r, "A backward: %s", vt_last_error());
        goto done;
    }
    compare_state(r, A, t, bufs);
    same(r, "d images", dimA, bufs[VT_REG_DIMAGES], vt_trace_region_bytes(t, VT_REG_DIMAGES));
    uint64_t abytes = 0;
    const uint8_t *abase = vt_model_region(A, VT_REG_ARENA, &abytes);
    const vt_scalars *asc = vt_model_region(A, VT_REG_SCALARS, NULL);
    if (loss) same(r, "the loss", &asc->loss, &((vt_scalars *)bufs[VT_REG_SCALARS])->loss, sizeof(float));
    for (int i = 0; i < nout; i++) {
        int64_t sh[4];
        int ndim = 0;
        const float *o = vt_output(A, i, sh, &ndim);
        size_t k = 1;
        for (int d = 0; d < ndim; d++) k *= (size_t)sh[d];
        char what[32];
        snprintf(what, sizeof what, "output %d", i);
        if (o == &asc->loss) continue; /* compared above */
        if ((const uint8_t *)o >= abase && (const uint8_t *)o < abase + abytes)
            same(r, what, o, (uint8_t *)bufs[VT_REG_ARENA] + ((const uint8_t *)o - abase), k * sizeof(float));
        else
            fail(r, "output %d is not in A's arena", i);
    }
done:
    vt_kernels_use_reference(0);
    free_bufs(bufs);
    vt_trace_free(t);
    for (int i = 0; i < 80; i++) free(douts[i]);
    vt_model_free(A), vt_model_free(B);
    free(img), free(dimA), free(keep), free(msk), free(bm), free(labels);
}

vt_status vt_replay_check(const vt_replay_case *c, vt_replay_result *r) {
    if (!c || !r) return vt_fail(VT_ERR_ARG, "vt_replay_check: NULL argument");
    memset(r, 0, sizeof *r);
    r->pass = 1;
    if (c->fn < 0)
        train_case(c, r);
    else
        call_case(c, r);
    return VT_OK;
}

/* ---- the cases every test runs (tests/test_replay.c natively, tests/node/trace.test.mjs through
 * every wasm build) ---- */

static const char *policies[] = {
    "none", "block", "every:2", "sqrt", "selective", "budget"
}; /* budget: see set_policy */
const char *vt_replay_policy(int i) {
    return i >= 0 && i < (int)(sizeof policies / sizeof *policies) ? policies[i] : NULL;
}


void vt_replay_small(vt_model_config *mc, vt_kind kind) {
    vt_model_config_default(mc, kind);
    mc->enc.img_size = 16;
    mc->enc.patch_size = 4;
    mc->enc.in_chans = 3;
    mc->enc.embed_dim = 24;
    mc->enc.depth = 3;
    mc->enc.num_heads = 2;
    mc->enc.mlp_ratio = 2.0;
    mc->decoder_dim = 16;
    mc->decoder_depth = 2;
    mc->decoder_heads = 2;
    mc->head_hidden_dim = 20;
    mc->head_blocks = 2;
}

typedef struct {
    const char *name;
    vt_replay_case c;
} named_case;

static int cases(named_case *out) {
    int n = 0;
    vt_replay_case c;
    /* training steps */
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_MAE);
    c.cfg.norm_pix_loss = 1;
    c.cfg.enc.qk_norm = 1;
    c.cfg.enc.init_values = 0.1f;
    c.fn = -1;
    c.batch = 3;
    c.warm_steps = 1;
    out[n++] = (named_case){ "mae step (qk_norm, LayerScale, norm_pix)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_MAE);
    c.fn = -1;
    c.batch = 2;
    c.clip_norm = 0.5f;
    out[n++] = (named_case){ "mae step (clipped)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_AIM);
    c.cfg.enc.init_values = 0.2f;
    c.fn = -1;
    c.batch = 3;
    c.warm_steps = 1;
    c.clip_norm = 1.0f;
    out[n++] = (named_case){ "aim step (LayerScale, clipped)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_TIMM);
    c.cfg.enc.num_classes = 3;
    c.cfg.enc.reg_tokens = 2;
    c.cfg.enc.global_pool = VT_POOL_AVG;
    c.fn = -1;
    c.batch = 4;
    c.warm_steps = 1;
    c.clip_norm = 1.0f;
    out[n++] = (named_case){ "classifier step (avg pool, registers)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_TIMM);
    c.cfg.enc.num_classes = 4;
    c.cfg.enc.qk_norm = 1;
    c.fn = -1;
    c.batch = 2;
    out[n++] = (named_case){ "classifier step (token pool, qk_norm)", c };
    /* lightly's encoder calls */
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_LIGHTLY);
    c.cfg.enc.qk_norm = 1;
    c.cfg.enc.init_values = 0.1f;
    c.cfg.enc.reg_tokens = 2;
    c.fn = VT_FN_ENCODE;
    c.batch = 2;
    c.idx_keep = 9;
    c.idx_mask = 4;
    out[n++] = (named_case){ "encode (idx_keep repeated, idx_mask, registers)", c };
    c.fn = VT_FN_INTERMEDIATES;
    c.idx_mask = 0;
    c.bool_mask = 1;
    out[n++] = (named_case){ "forward_intermediates (token mask)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_LIGHTLY);
    c.cfg.enc.no_embed_class = 1;
    c.cfg.enc.global_pool = VT_POOL_AVG;
    c.fn = VT_FN_FORWARD;
    c.batch = 2;
    c.idx_keep = 7;
    out[n++] = (named_case){ "forward (avg pool, no_embed_class, idx_keep)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_LIGHTLY);
    c.fn = VT_FN_INTERMEDIATES_NORM;
    c.batch = 2;
    c.idx_mask = 3;
    out[n++] = (named_case){ "forward_intermediates(norm) (idx_mask)", c };
    /* causal: the prefix mask with is_causal on and off */
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_CAUSAL);
    c.cfg.enc.init_values = 0.3f;
    c.fn = VT_FN_ENCODE;
    c.batch = 3;
    c.bool_mask = 1;
    c.is_causal = 1;
    out[n++] = (named_case){ "causal encode (is_causal)", c };
    c.is_causal = 0;
    c.fn = VT_FN_FORWARD;
    out[n++] = (named_case){ "causal forward (is_causal off)", c };
    /* timm's forward through its head */
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_TIMM);
    c.cfg.enc.num_classes = 3;
    c.cfg.enc.reg_tokens = 1;
    c.cfg.enc.global_pool = VT_POOL_AVGMAX;
    c.fn = VT_FN_TIMM_FORWARD;
    c.batch = 2;
    out[n++] = (named_case){ "timm forward (avgmax pool)", c };
    /* the rest of timm's ViT: CLIP's and SigLIP's training steps, DeiT's heads, prr, dynamic size */
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_TIMM);
    c.cfg.enc.num_classes = 3;
    c.cfg.enc.pre_norm = 1;
    c.cfg.enc.norm_eps = 1e-5;
    c.cfg.enc.act_layer = VT_ACT_QUICK_GELU;
    c.fn = -1;
    c.batch = 2;
    c.warm_steps = 1;
    out[n++] = (named_case){ "classifier step (CLIP: pre_norm, quick_gelu, eps 1e-5)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_TIMM);
    c.cfg.enc.num_classes = 3;
    c.cfg.enc.class_token = 0;
    c.cfg.enc.global_pool = VT_POOL_MAP;
    c.cfg.enc.act_layer = VT_ACT_GELU_TANH;
    c.cfg.enc.norm_layer = VT_NORM_RMS;
    c.fn = -1;
    c.batch = 2;
    out[n++] = (named_case){ "classifier step (SigLIP map, gelu_tanh, rmsnorm)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_TIMM);
    c.cfg.enc.num_classes = 3;
    c.cfg.enc.distilled = 1;
    c.fn = VT_FN_TIMM_FORWARD;
    c.batch = 2;
    c.distilled_training = 1;
    out[n++] = (named_case){ "timm forward (DeiT distilled, both heads)", c };
    c.fn = -1;
    c.distilled_training = 0;
    out[n++] = (named_case){ "classifier step (DeiT distilled: both heads in the loss)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_TIMM);
    c.cfg.enc.num_classes = 3;
    c.cfg.enc.img_size = 18;
    c.cfg.enc.img_width = 14;
    c.cfg.enc.global_pool = VT_POOL_PRR;
    c.cfg.enc.scale_attn_norm = c.cfg.enc.scale_mlp_norm = 1;
    c.cfg.enc.embed_norm_layer = VT_NORM_LAYER;
    c.fn = VT_FN_TIMM_FORWARD;
    c.batch = 2;
    out[n++] = (named_case){ "timm forward (prr, scale norms, embed norm, 18x14 floored)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_TIMM);
    c.cfg.enc.dynamic_img_size = c.cfg.enc.dynamic_img_pad = 1;
    c.cfg.enc.reg_tokens = 1;
    c.fn = VT_FN_ENCODE;
    c.batch = 2;
    c.height = 22;
    c.width = 12;
    out[n++] = (named_case){ "timm forward_features (dynamic size, padded 22x12)", c };
    /* timm's forward_intermediates: NCHW's transposes, the prefix split, the norm, stop_early */
    c.fn = VT_FN_TIMM_INTERMEDIATES;
    c.inter = (vt_inter_opts){ 1, 1, 1, 1, 1, 0 };
    out[n++] = (named_case){ "timm forward_intermediates (NCHW, prefix, norm, stop_early, 22x12)", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_TIMM);
    c.cfg.enc.reg_tokens = 2;
    c.fn = VT_FN_TIMM_INTERMEDIATES;
    c.batch = 2;
    c.inter = (vt_inter_opts){ 0, 0, 1, 0, 0, 1 };
    out[n++] = (named_case){ "timm forward_intermediates (NLC, intermediates only, prefix)", c };
    /* the losses with image gradients */
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_MAE);
    c.cfg.norm_pix_loss = 1;
    c.fn = VT_FN_LOSS;
    c.batch = 2;
    c.idx_keep = 5;
    c.idx_mask = 12;
    out[n++] = (named_case){ "mae loss + d images", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_AIM);
    c.cfg.enc.qk_norm = 1;
    c.fn = VT_FN_LOSS;
    c.batch = 2;
    c.bool_mask = 1;
    c.is_causal = 1;
    out[n++] = (named_case){ "aim loss + d images", c };
    memset(&c, 0, sizeof c);
    vt_replay_small(&c.cfg, VT_KIND_TIMM);
    c.cfg.enc.num_classes = 3;
    c.cfg.enc.global_pool = VT_POOL_MAX;
    c.fn = VT_FN_LOSS;
    c.batch = 3;
    out[n++] = (named_case){ "classifier loss + d images (max pool)", c };
    return n;
}

int vt_replay_case_count(void) {
    named_case cs[40];
    return cases(cs);
}

const char *vt_replay_case_get(int i, int policy, int reference, vt_replay_case *out) {
    static named_case cs[40];
    int n = cases(cs);
    if (i < 0 || i >= n || !vt_replay_policy(policy)) return NULL;
    *out = cs[i].c;
    out->policy = policies[policy];
    out->reference = reference;
    return cs[i].name;
}
