/* exports.c: the thin C ABI that JavaScript (web/vitrine.js) calls, over vitrine.h.
 *
 * Conventions: models are small integer handles (1..VTW_MAX_MODELS); a function returns 0 or a
 * non-negative count on success and a negative vt_status on failure, with the message in
 * vtw_last_error(). Pointers are wasm32 addresses (JS reads them with `>>> 0`). Sizes that can
 * exceed 2^31 are handed out as doubles. Results made of several values are written to a small
 * out-array the caller allocates. Nothing here keeps JS memory alive: inputs passed to
 * vtw_forward must stay allocated by the caller until the matching vtw_backward.
 * The exported names are listed once, in wasm/wasm.cmake (VT_WASM_EXPORTS). */
#include "parity.h"
#include "vitrine.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VTW_MAX_MODELS 256
static vt_model *models[VTW_MAX_MODELS + 1];

static vt_model *get(int h) {
    if (h < 1 || h > VTW_MAX_MODELS || !models[h]) {
        vt_fail(VT_ERR_ARG, "invalid model handle %d (disposed?)", h);
        return NULL;
    }
    return models[h];
}
#define GET_OR_FAIL(m, h) vt_model *m = get(h); if (!m) return VT_ERR_ARG

const char *vtw_last_error(void) { return vt_last_error(); }
int vtw_kernels_simd(void);
const char *vtw_preset_name(int i) { return vt_preset_name(i); }

/* ---- threads (web/pool.js) ------------------------------------------------------------------ */
void vt_worker_loop(int tid);
void vt_threads_shutdown(void);
void vt_threads_caller_can_wait(int yes);
int vt_threads_ready(void);
/* A pool worker's body (its own instance of this module, its own stack): never returns until
 * vtw_threads_shutdown. Only kernels run there: no libc, no allocation. */
void vtw_worker_run(int tid) { vt_worker_loop(tid); }
int vtw_set_threads(int n, int caller_can_wait) {
    vt_threads_caller_can_wait(caller_can_wait);
    return vt_set_threads(n);
}
int vtw_threads_max(void) { return vt_threads_max(); }
int vtw_threads_ready(void) { return vt_threads_ready(); }
void vtw_threads_shutdown(void) { vt_threads_shutdown(); }
/* tests: split even tiny shapes (0), or restore the default (negative) */
void vt_threads_set_min_work(double flops);
void vtw_threads_set_min_work(double flops) { vt_threads_set_min_work(flops < 0 ? 2.0e5 : flops); }
/* tests: chunks of pooled loops thread tid has run */
int vt_threads_chunks_run(int tid);
int vtw_threads_chunks_run(int tid) { return vt_threads_chunks_run(tid); }

/* ---- models --------------------------------------------------------------------------------- */

/* kind: vt_kind. Either preset (a timm name; the kind's defaults for everything else, e.g. lightly's
 * mask token, lightly's MAE decoder / AIM head sizes) or json (vt_model_config_from_json). */
int vtw_model_create(int kind, const char *preset, const char *json, size_t json_len) {
    if (kind < VT_KIND_TIMM || kind > VT_KIND_AIM) return vt_fail(VT_ERR_ARG, "unknown model kind %d", kind);
    vt_model_config mc;
    int rc;
    if (preset && preset[0]) {
        vt_vit_config p;
        vt_model_config_default(&mc, (vt_kind)kind);
        rc = vt_preset(preset, &p);
        if (rc) return rc;
        mc.enc.img_size = p.img_size; mc.enc.patch_size = p.patch_size; mc.enc.embed_dim = p.embed_dim;
        mc.enc.depth = p.depth; mc.enc.num_heads = p.num_heads; mc.enc.mlp_ratio = p.mlp_ratio;
    } else {
        if (!json) return vt_fail(VT_ERR_ARG, "a model needs a preset or a JSON config");
        rc = vt_model_config_from_json(json, json_len, (vt_kind)kind, &mc);
        if (rc) return rc;
    }
    int h = 1;
    while (h <= VTW_MAX_MODELS && models[h]) h++;
    if (h > VTW_MAX_MODELS) return vt_fail(VT_ERR_STATE, "too many live models (%d); dispose some", VTW_MAX_MODELS);
    rc = vt_model_create(&mc, &models[h]);
    return rc ? rc : h;
}

/* out[8] = kind, img_size, patch_size, in_chans, embed_dim, depth, num_heads, prefix tokens */
int vtw_model_dims(int h, int32_t out[8]) {
    GET_OR_FAIL(m, h);
    const vt_model_config *c = vt_model_get_config(m);
    out[0] = c->kind; out[1] = c->enc.img_size; out[2] = c->enc.patch_size; out[3] = c->enc.in_chans;
    out[4] = c->enc.embed_dim; out[5] = c->enc.depth; out[6] = c->enc.num_heads;
    out[7] = c->enc.class_token + c->enc.reg_tokens;
    return VT_OK;
}

int vtw_model_free(int h) {
    GET_OR_FAIL(m, h);
    vt_model_free(m);
    models[h] = NULL;
    return VT_OK;
}

/* ---- parameters ----------------------------------------------------------------------------- */

int vtw_param_count(int h) { GET_OR_FAIL(m, h); return vt_param_count(m); }
static int check_param(vt_model *m, int i) {
    return (i >= 0 && i < vt_param_count(m)) ? VT_OK
                                             : vt_fail(VT_ERR_ARG, "parameter index %d out of range", i);
}
/* The model of handle h when i indexes one of its parameters, else NULL (the message says why). */
static vt_model *get_param(int h, int i) {
    vt_model *m = get(h);
    return m && !check_param(m, i) ? m : NULL;
}
const char *vtw_param_name(int h, int i) { vt_model *m = get_param(h, i); return m ? vt_param_name(m, i) : NULL; }
int vtw_param_ndim(int h, int i) { vt_model *m = get_param(h, i); return m ? vt_param_ndim(m, i) : VT_ERR_ARG; }
int vtw_param_dim(int h, int i, int d) {
    vt_model *m = get_param(h, i);
    if (!m) return VT_ERR_ARG;
    if (d < 0 || d >= vt_param_ndim(m, i)) return vt_fail(VT_ERR_ARG, "dimension %d out of range", d);
    return (int)vt_param_shape(m, i)[d];
}
double vtw_param_numel(int h, int i) { vt_model *m = get_param(h, i); return m ? (double)vt_param_numel(m, i) : -1; }
float *vtw_param_data(int h, int i) { vt_model *m = get_param(h, i); return m ? vt_param_data(m, i) : NULL; }
float *vtw_param_grad(int h, int i) { vt_model *m = get_param(h, i); return m ? vt_param_grad(m, i) : NULL; }
int vtw_param_requires_grad(int h, int i) {
    vt_model *m = get_param(h, i);
    return m ? vt_param_requires_grad(m, i) : VT_ERR_ARG;
}
/* Returns the number of parameters matched. */
int vtw_set_requires_grad(int h, const char *name, int on) {
    GET_OR_FAIL(m, h);
    int matched = 0;
    int rc = vt_set_requires_grad(m, name ? name : "", on, &matched);
    return rc ? rc : matched;
}
int vtw_zero_grad(int h) { GET_OR_FAIL(m, h); vt_zero_grad(m); return VT_OK; }

/* ---- weights -------------------------------------------------------------------------------- */

int vtw_load_safetensors(int h, const uint8_t *bytes, size_t len, const char *model_prefix,
                         const char *file_prefix) {
    GET_OR_FAIL(m, h);
    return vt_load_safetensors(m, bytes, len, model_prefix ? model_prefix : "", file_prefix ? file_prefix : "");
}
/* JSON text of s (quotes, backslashes, control characters escaped) appended at b[*k] */
static void put_json_str(char *b, size_t cap, size_t *k, const char *s, size_t n) {
    if (*k < cap) b[(*k)++] = '"';
    for (size_t i = 0; i < n && *k + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { b[(*k)++] = '\\'; b[(*k)++] = (char)c; }
        else if (c < 0x20) *k += (size_t)snprintf(b + *k, cap - *k, "\\u%04x", c);
        else b[(*k)++] = (char)c;
    }
    if (*k < cap) b[(*k)++] = '"';
}
/* vt_init_from_safetensors; out[0] = the report as JSON (malloc'd; free with free), out[1] = its
 * length: {source, file_prefix, loaded, skipped, missing, pos_embed, notes: [lines]} */
int vtw_init_from(int h, const uint8_t *bytes, size_t len, int strict, uint32_t out[2]) {
    GET_OR_FAIL(m, h);
    out[0] = out[1] = 0;
    vt_init_report *r = malloc(sizeof *r);
    size_t cap = 2 * sizeof r->notes + 1024, k = 0;
    char *b = malloc(cap);
    if (!r || !b) { free(r); free(b); return vt_fail(VT_ERR_NOMEM, "out of memory"); }
    int rc = vt_init_from_safetensors(m, bytes, len, strict, r);
    if (rc) { free(r); free(b); return rc; }
    static const char *pos[] = {"none", "sincos_frozen", "trainable", "learned_now_trainable"};
    k += (size_t)snprintf(b + k, cap - k, "{\"source\": ");
    put_json_str(b, cap, &k, r->source, strlen(r->source));
    k += (size_t)snprintf(b + k, cap - k, ", \"file_prefix\": ");
    put_json_str(b, cap, &k, r->file_prefix, strlen(r->file_prefix));
    k += (size_t)snprintf(b + k, cap - k, ", \"loaded\": %d, \"skipped\": %d, \"missing\": %d, \"pos_embed\": \"%s\", \"notes\": [",
                          r->loaded, r->skipped, r->missing, pos[r->pos_embed & 3]);
    int first = 1;
    for (const char *q = r->notes; *q;) {
        const char *e = strchr(q, '\n');
        size_t n = e ? (size_t)(e - q) : strlen(q);
        if (!first && k + 2 < cap) { b[k++] = ','; b[k++] = ' '; }
        put_json_str(b, cap, &k, q, n);
        first = 0;
        q += n + (e ? 1 : 0);
    }
    k += (size_t)snprintf(b + k, cap - k, "]}");
    free(r);
    out[0] = (uint32_t)(uintptr_t)b;
    out[1] = (uint32_t)k;
    return VT_OK;
}
/* out[0] = malloc'd bytes (free with free), out[1] = length. */
int vtw_save_safetensors(int h, const char *model_prefix, const char *file_prefix, uint32_t out[2]) {
    GET_OR_FAIL(m, h);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = vt_save_safetensors(m, model_prefix ? model_prefix : "", file_prefix ? file_prefix : "", &buf, &len);
    if (rc) return rc;
    out[0] = (uint32_t)(uintptr_t)buf;
    out[1] = (uint32_t)len;
    return VT_OK;
}

/* ---- calls ---------------------------------------------------------------------------------- */

static vt_inputs make_inputs(const float *images, int batch, const int64_t *idx_mask, int n_mask,
                             const int64_t *idx_keep, int n_keep, const uint8_t *mask, int is_causal) {
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = images; in.batch = batch;
    in.idx_mask = idx_mask; in.n_mask = idx_mask ? n_mask : 0;
    in.idx_keep = idx_keep; in.n_keep = idx_keep ? n_keep : 0;
    in.mask = mask; in.is_causal = is_causal;
    return in;
}

int vtw_forward(int h, int fn, const float *images, int batch, const int64_t *idx_mask, int n_mask,
                const int64_t *idx_keep, int n_keep, const uint8_t *mask, int is_causal, int need_grad) {
    GET_OR_FAIL(m, h);
    if (!images) return vt_fail(VT_ERR_ARG, "forward: images are missing");
    vt_inputs in = make_inputs(images, batch, idx_mask, n_mask, idx_keep, n_keep, mask, is_causal);
    return vt_forward(m, (vt_fn)fn, &in, need_grad);
}

int vtw_output_count(int h) { GET_OR_FAIL(m, h); return vt_output_count(m); }
/* Output i's data pointer (NULL on error); its shape goes to shape[4] (int32), rank to *ndim. */
const float *vtw_output(int h, int i, int32_t shape[4], int *ndim) {
    vt_model *m = get(h);
    if (!m) return NULL;
    int64_t s[4] = {0, 0, 0, 0};
    const float *p = vt_output(m, i, s, ndim);
    for (int d = 0; d < 4; d++) shape[d] = (int32_t)s[d];
    return p;
}
float vtw_loss_value(int h) { vt_model *m = get(h); return m ? vt_loss_value(m) : 0.0f; }

/* douts: n_douts wasm pointers (0 = no upstream gradient for that output). */
int vtw_backward(int h, const float *const *douts, int n_douts, float *dimages, int param_grads) {
    GET_OR_FAIL(m, h);
    return vt_backward(m, douts, n_douts, dimages, param_grads);
}

/* ---- checkpointing and memory ----------------------------------------------------------------- */

int vtw_set_grad_checkpointing(int h, const char *policy) {
    GET_OR_FAIL(m, h);
    return vt_set_grad_checkpointing(m, policy);
}
const char *vtw_get_grad_checkpointing(int h) {
    vt_model *m = get(h);
    return m ? vt_get_grad_checkpointing(m) : NULL;
}
static void plan_out(const vt_plan_bytes *p, double *out) {
    out[0] = (double)p->params; out[1] = (double)p->grads; out[2] = (double)p->optimizer;
    out[3] = (double)p->activations; out[4] = (double)p->total;
}
/* out[5] = params, grads, optimizer, activations, total (bytes). Only sizes are used: has_mask
 * says whether a mask would be given. */
int vtw_plan(int h, int fn, int batch, int n_mask, int n_keep, int has_mask, int need_grad, double out[5]) {
    GET_OR_FAIL(m, h);
    static const int64_t dummy = 0;
    static const uint8_t dummy_mask = 0;
    vt_inputs in = make_inputs(NULL, batch, n_mask > 0 ? &dummy : NULL, n_mask, n_keep > 0 ? &dummy : NULL,
                               n_keep, has_mask ? &dummy_mask : NULL, 1);
    vt_plan_bytes p;
    int rc = vt_plan(m, (vt_fn)fn, &in, need_grad, &p);
    if (rc) return rc;
    plan_out(&p, out);
    return VT_OK;
}
/* vt_plan_train_step. policy NULL = the model's; mask_ratio < 0 = the trainer's. out[22] =
 * bytes[5] (params, grads, optimizer, activations, total), policy_met, tokens_kept,
 * tokens_masked, recompute_flops, fits, fit_bytes[5], fit_recompute_flops, least_bytes[5],
 * max_batch; names[2 * VT_POLICY_TEXT_MAX] = fit_policy, least_policy. */
int vtw_plan_train_step(int h, int batch, double mask_ratio, const char *policy, double budget,
                        double out[22], char names[2 * VT_POLICY_TEXT_MAX]) {
    GET_OR_FAIL(m, h);
    if (!(budget >= 0 && budget < 18446744073709551616.0))
        return vt_fail(VT_ERR_ARG, "budget must be a byte count >= 0, got %g", budget);
    vt_step_plan p;
    int rc = vt_plan_train_step(m, batch, (float)mask_ratio, policy, (uint64_t)budget, &p);
    if (rc) return rc;
    plan_out(&p.bytes, out);
    out[5] = p.policy_met; out[6] = p.tokens_kept; out[7] = p.tokens_masked;
    out[8] = p.recompute_flops; out[9] = p.fits;
    plan_out(&p.fit_bytes, out + 10);
    out[15] = p.fit_recompute_flops;
    plan_out(&p.least_bytes, out + 16);
    out[21] = p.max_batch;
    memcpy(names, p.fit_policy, VT_POLICY_TEXT_MAX);
    memcpy(names + VT_POLICY_TEXT_MAX, p.least_policy, VT_POLICY_TEXT_MAX);
    return VT_OK;
}
/* The activation timeline of the last call as doubles: out[0..n) arena bytes in use, out[max..max+n)
 * live bytes; returns the count and writes where the backward began to *bwd. */
int vtw_activation_timeline(int h, double *out, int max, int *bwd) {
    GET_OR_FAIL(m, h);
    static size_t top[VT_TIMELINE_MAX], live[VT_TIMELINE_MAX];
    if (max > VT_TIMELINE_MAX) max = VT_TIMELINE_MAX;
    int n = vt_activation_timeline(m, top, live, max, bwd);
    for (int i = 0; i < n; i++) { out[i] = (double)top[i]; out[max + i] = (double)live[i]; }
    return n;
}

/* out[3] = planned, peak, capacity (bytes) of the activation arena for the last call. */
/* out[3] = planned, peak, capacity (bytes) of the activation arena for the last call. */
int vtw_arena_stats(int h, double out[3]) {
    GET_OR_FAIL(m, h);
    vt_arena_stats s;
    vt_arena_get_stats(m, &s);
    out[0] = (double)s.planned; out[1] = (double)s.peak; out[2] = (double)s.capacity;
    return VT_OK;
}
int vtw_release_activations(int h) { GET_OR_FAIL(m, h); vt_release_activations(m); return VT_OK; }

/* ---- training ---------------------------------------------------------------------------------- */

/* 64-bit seeds come as two 32-bit halves (no BigInt needed on either wasm ABI). */
static uint64_t seed64(uint32_t lo, uint32_t hi) { return ((uint64_t)hi << 32) | lo; }

int vtw_init_weights(int h, uint32_t seed_lo, uint32_t seed_hi) {
    GET_OR_FAIL(m, h);
    return vt_init_weights(m, seed64(seed_lo, seed_hi));
}

/* cfg[10] = lr, beta1, beta2, eps, weight_decay, warmup_steps, total_steps, clip_norm, mask_ratio,
 * label_smoothing */
int vtw_train_config_default(int kind, double cfg[10]) {
    if (kind < VT_KIND_TIMM || kind > VT_KIND_AIM) return vt_fail(VT_ERR_ARG, "unknown model kind %d", kind);
    vt_train_config t;
    vt_train_config_default(&t, (vt_kind)kind);
    cfg[0] = t.lr; cfg[1] = t.beta1; cfg[2] = t.beta2; cfg[3] = t.eps; cfg[4] = t.weight_decay;
    cfg[5] = (double)t.warmup_steps; cfg[6] = (double)t.total_steps; cfg[7] = t.clip_norm; cfg[8] = t.mask_ratio;
    cfg[9] = t.label_smoothing;
    return VT_OK;
}

/* cfg[10] as vtw_train_config_default; the mask seed as two halves. */
int vtw_trainer_init(int h, const double cfg[10], uint32_t seed_lo, uint32_t seed_hi) {
    GET_OR_FAIL(m, h);
    if (!cfg) return vt_fail(VT_ERR_ARG, "trainer init: config is missing");
    for (int i = 5; i < 7; i++)
        if (!(cfg[i] >= 0 && cfg[i] <= 2147483647.0) || cfg[i] != (double)(long)cfg[i])
            return vt_fail(VT_ERR_ARG, "trainer init: %s must be an integer in [0, 2^31), got %g",
                           i == 5 ? "warmup_steps" : "total_steps", cfg[i]);
    vt_train_config t;
    memset(&t, 0, sizeof t);
    t.lr = (float)cfg[0]; t.beta1 = (float)cfg[1]; t.beta2 = (float)cfg[2]; t.eps = (float)cfg[3];
    t.weight_decay = (float)cfg[4]; t.warmup_steps = (long)cfg[5]; t.total_steps = (long)cfg[6];
    t.clip_norm = (float)cfg[7]; t.mask_ratio = (float)cfg[8]; t.seed = seed64(seed_lo, seed_hi);
    t.label_smoothing = (float)cfg[9];
    return vt_trainer_init(m, &t);
}

/* The step's loss goes to *loss (also on VT_ERR_NUMERIC, when it is the non-finite value). */
int vtw_train_step(int h, const float *images, int batch, float *loss) {
    GET_OR_FAIL(m, h);
    return vt_train_step(m, images, batch, loss);
}
/* A classifier's step: labels [batch] (int32). */
int vtw_train_step_labels(int h, const float *images, const int32_t *labels, int batch, float *loss) {
    GET_OR_FAIL(m, h);
    return vt_train_step_labels(m, images, labels, batch, loss);
}
double vtw_train_step_count(int h) { vt_model *m = get(h); return m ? (double)vt_train_step_count(m) : -1; }
float vtw_train_lr(int h, double step) {
    vt_model *m = get(h);
    return m && step >= 0 ? vt_train_lr(m, (long)step) : -1.0f;
}
/* out[0] = malloc'd bytes (free with free), out[1] = length. */
int vtw_train_state_save(int h, uint32_t out[2]) {
    GET_OR_FAIL(m, h);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = vt_train_state_save(m, &buf, &len);
    if (rc) return rc;
    out[0] = (uint32_t)(uintptr_t)buf;
    out[1] = (uint32_t)len;
    return VT_OK;
}
int vtw_train_state_load(int h, const uint8_t *bytes, size_t len) {
    GET_OR_FAIL(m, h);
    return vt_train_state_load(m, bytes, len);
}
/* masked, recon: [B, C, H, W] each, B the batch of the last loss forward. */
int vtw_loss_visualize(int h, float *masked, float *recon) {
    GET_OR_FAIL(m, h);
    return vt_loss_visualize(m, masked, recon);
}

/* ---- parity (the harness, harness/parity.h) ---------------------------------------------------- */

/* Runs a parity file. out[0..1] = the harness's JSON result (malloc'd, NUL-terminated; "file"
 * in it when file is non-empty) and its length, out[2..3] = dump bytes (malloc'd, 0 when none).
 * Both are freed by the caller with free(). read_error non-empty: the file could not be read
 * (bytes are ignored) and the result says so with status VT_ERR_IO. Returns VT_OK when the file
 * ran (pass or fail inside the JSON), an error when it could not be run: the JSON is written
 * either way ({"pass": false, "error": ...}). */
int vtw_parity_run(const uint8_t *bytes, size_t len, const char *policy, int want_dump, const char *file,
                   const char *read_error, uint32_t out[4]) {
    vt_parity_result r;
    int rc;
    if (read_error && read_error[0]) vt_parity_fail(&r, rc = VT_ERR_IO, read_error);
    else rc = vt_parity_run(bytes, len, policy && policy[0] ? policy : NULL, want_dump, &r);
    char *text = NULL;
    size_t n = 0;
    int jrc = vt_parity_json(&r, file && file[0] ? file : NULL, &text, &n);
    out[0] = (uint32_t)(uintptr_t)text;
    out[1] = (uint32_t)n;
    out[2] = (uint32_t)(uintptr_t)r.dump;
    out[3] = (uint32_t)r.dump_len;
    r.dump = NULL; /* ownership passes to the caller */
    vt_parity_free(&r);
    return jrc ? jrc : rc;
}

/* kernels.c's vt_kernels_simd is internal; expose whether this build has SIMD kernels. */
int vt_kernels_simd(void);
int vtw_kernels_simd(void) { return vt_kernels_simd(); }

/* ---- the step as data (src/trace.c, docs/kernels.md; harness/replay.h) ------------------------- */
#include "replay.h"

/* Records one step of model h without running it and prints it: what -1 a training step (labels
 * for a classifier, else NULL: vt_trace_train_step), or VT_FN_ENCODE with its backward (an upstream
 * gradient of zeros: its values are an input of the list). json: the list (vitrine-trace/1), else
 * the summary. out[0..1] = the malloc'd text and its length (free() it). */
int vtw_trace(int h, int what, const float *images, const int32_t *labels, int batch, int json, uint32_t out[2]) {
    GET_OR_FAIL(m, h);
    vt_trace *t = NULL;
    float *dout = NULL;
    int rc;
    if (what < 0) {
        rc = vt_trace_train_step(m, images, labels, batch, &t);
    } else if (what == VT_FN_ENCODE) {
        const vt_model_config *c = vt_model_get_config(m);
        int G = c->enc.img_size / c->enc.patch_size;
        uint64_t n = (uint64_t)(batch > 0 ? batch : 0) * (uint64_t)(G * G + c->enc.class_token + c->enc.reg_tokens) *
                     (uint64_t)c->enc.embed_dim;
        if (n > SIZE_MAX / sizeof(float) - 1 || !(dout = calloc((size_t)n + 1, sizeof *dout)))
            return vt_fail(VT_ERR_NOMEM, "out of memory: %llu floats of upstream gradient", (unsigned long long)n);
        vt_inputs in;
        memset(&in, 0, sizeof in);
        in.images = images;
        in.batch = batch;
        const float *d[1] = {dout};
        rc = vt_trace_call(m, VT_FN_ENCODE, &in, 1, d, 1, NULL, 1, &t);
    } else {
        return vt_fail(VT_ERR_ARG, "trace: %d is not -1 (a training step) or VT_FN_ENCODE", what);
    }
    char *text = NULL;
    size_t len = 0;
    if (!rc) rc = json ? vt_trace_json(t, &text, &len) : vt_trace_summary(t, &text, &len);
    out[0] = (uint32_t)(uintptr_t)text;
    out[1] = (uint32_t)len;
    vt_trace_free(t);
    free(dout);
    return rc;
}

/* The kernel list as docs/kernels.md prints it (out[0..1]: malloc'd text, length). */
int vtw_kernel_contract(uint32_t out[2]) {
    char *text = NULL;
    size_t len = 0;
    int rc = vt_kernel_contract(&text, &len);
    out[0] = (uint32_t)(uintptr_t)text;
    out[1] = (uint32_t)len;
    return rc;
}

/* Tests: the replay oracle's case i under policy p (reference 0/1): 1 pass, 0 fail (err says why),
 * -1 past the end. */
int vtw_replay_case_count(void) { return vt_replay_case_count(); }
int vtw_replay_run(int i, int policy, int reference, char *err, int errlen) {
    vt_replay_case c;
    const char *name = vt_replay_case_get(i, policy, reference, &c);
    if (!name) return -1;
    vt_replay_result r;
    vt_replay_check(&c, &r);
    if (err && errlen > 0) snprintf(err, (size_t)errlen, "%s, %s: %s", name, c.policy, r.pass ? "pass" : r.error);
    return r.pass;
}
