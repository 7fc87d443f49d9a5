/* exports.c: the thin C ABI that JavaScript (web/runtime/engine.js, web/runtime/model.js) calls, over vitrine.h.
 *
 * The boundary is stated once, here:
 *   - VTW_API marks each function JavaScript may call. wasm/wasm.cmake exports exactly the
 *     functions so marked (it reads this file), and the shell finds them among the instance's
 *     exports; nothing else lists them.
 *   - Results made of several values are arrays of one element type whose fields are named once,
 *     in the VTW_LAYOUTS table below: the code here writes them by name (STEP_PLAN_fits, ...) and
 *     vtw_manifest() describes them to JavaScript (field -> index), which reads them by name too.
 *   - The names the shell offers (model kinds, calls, checkpointing policies, timm presets) and
 *     the limits it needs come from the engine through the same vtw_manifest().
 * Conventions: models are small integer handles (1..VTW_MAX_MODELS); a function returns 0 or a
 * non-negative count on success and a negative vt_status on failure, with the message in
 * vtw_last_error(). Pointers are wasm32 addresses (JS reads them with `>>> 0`). Sizes that can
 * exceed 2^31 are handed out as doubles. Nothing here keeps JS memory alive: inputs passed to
 * vtw_forward must stay allocated by the caller until the matching vtw_backward. */
#include "exec.h"
#include "parity.h"
#include "vitrine.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VTW_API /* exported to JavaScript (wasm/wasm.cmake reads this marker) */

#define VTW_MAX_MODELS 256
static vt_model *models[VTW_MAX_MODELS + 1];
/* parity jobs run on another backend (vtw_parity_open): their models are in models[] too */
static struct {
    vt_parity_job *job;
    vt_trace *fwd, *full;
} jobs[VTW_MAX_MODELS + 1];
void vtw_parity_close(int h);

static vt_model *get(int h) {
    if (h < 1 || h > VTW_MAX_MODELS || !models[h]) {
        vt_fail(VT_ERR_ARG, "invalid model handle %d (disposed?)", h);
        return NULL;
    }
    return models[h];
}
#define GET_OR_FAIL(m, h)                                                                                    \
    vt_model *m = get(h);                                                                                    \
    if (!m) return VT_ERR_ARG

/* ---- the layouts of results (and of the trainer's settings, which go both ways) ------------------ */

/* the layouts are tables of fields, kept as laid out by hand */
// clang-format off
#define MODEL_DIMS(F) F(kind) F(img_size) F(patch_size) F(in_chans) F(embed_dim) F(depth) F(num_heads) \
    F(prefix_tokens) F(img_width) F(dynamic_img_size) F(dynamic_img_pad) F(distilled)
#define PLAN_BYTES_AS(F, P) F(P##params) F(P##grads) F(P##optimizer) F(P##activations) F(P##total) /* vt_plan_bytes */
#define PLAN_BYTES(F) PLAN_BYTES_AS(F, )
#define STEP_PLAN(F) PLAN_BYTES(F) F(policy_met) F(tokens_kept) F(tokens_masked) F(recompute_flops) F(fits) \
    PLAN_BYTES_AS(F, fit_) F(fit_recompute_flops) PLAN_BYTES_AS(F, least_) F(max_batch)
#define STEP_PLAN_TEXT(F) F(fit_policy) F(least_policy) /* VT_POLICY_TEXT_MAX bytes each */
#define ARENA_STATS(F) F(planned) F(peak) F(capacity)
#define TRAIN_CONFIG(F) F(lr) F(beta1) F(beta2) F(eps) F(weight_decay) F(warmup_steps) F(total_steps) \
    F(clip_norm) F(mask_ratio) F(label_smoothing) F(min_lr) F(grad_accum)
#define BYTES_OUT(F) F(ptr) F(len) /* a malloc'd buffer handed to JS (it frees it with vtw_free) */
#define PARITY_OUT(F) F(json) F(json_len) F(dump) F(dump_len)
#define STEP_INPUTS(F) F(idx_keep) F(idx_mask) F(mask) F(n_keep) F(n_mask) /* vt_train_step_begin's in */
/* name, element type (as JS reads it), field list */
#define VTW_LAYOUTS(L)                                                                        \
    L(model_dims, i32, MODEL_DIMS) L(plan_bytes, f64, PLAN_BYTES) L(step_plan, f64, STEP_PLAN) \
    L(step_plan_text, text, STEP_PLAN_TEXT) L(arena_stats, f64, ARENA_STATS)                 \
    L(train_config, f64, TRAIN_CONFIG) L(bytes_out, u32, BYTES_OUT) L(parity_out, u32, PARITY_OUT) \
    L(step_inputs, u32, STEP_INPUTS)
// clang-format on

/* LAYOUT_field: the index of each field (MODEL_DIMS_img_size, ...), LAYOUT_SIZE: the count */
#define VTW_INDEX(layout, type, FIELDS) enum { FIELDS(VTW_INDEX_##layout) layout##_SIZE };
#define VTW_INDEX_model_dims(f)         model_dims_##f,
#define VTW_INDEX_plan_bytes(f)         plan_bytes_##f,
#define VTW_INDEX_step_plan(f)          step_plan_##f,
#define VTW_INDEX_step_plan_text(f)     step_plan_text_##f,
#define VTW_INDEX_arena_stats(f)        arena_stats_##f,
#define VTW_INDEX_train_config(f)       train_config_##f,
#define VTW_INDEX_bytes_out(f)          bytes_out_##f,
#define VTW_INDEX_parity_out(f)         parity_out_##f,
#define VTW_INDEX_step_inputs(f)        step_inputs_##f,
VTW_LAYOUTS(VTW_INDEX)

/* The calls of vt_fn by name (the enum's order is the engine's). */
static const char *const call_names[] = { [VT_FN_ENCODE] = "encode",
                                          [VT_FN_FORWARD] = "forward",
                                          [VT_FN_INTERMEDIATES] = "intermediates",
                                          [VT_FN_INTERMEDIATES_NORM] = "intermediates_norm",
                                          [VT_FN_LOSS] = "loss",
                                          [VT_FN_TIMM_FORWARD] = "timm_forward",
                                          [VT_FN_TIMM_INTERMEDIATES] = "timm_intermediates" };

/* Every layout by name: its element type and its fields in order (from VTW_LAYOUTS). */
#define VTW_NAME(f)                     #f,
#define VTW_NAMES(layout, type, FIELDS) static const char *const layout##_names[] = { FIELDS(VTW_NAME) };
VTW_LAYOUTS(VTW_NAMES)
#define VTW_ENTRY(layout, type, FIELDS) { #layout, #type, layout##_names, layout##_SIZE },
static const struct {
    const char *name, *type;
    const char *const *fields;
    int n;
} layouts[] = { VTW_LAYOUTS(VTW_ENTRY) };

/* What the shell needs to know of this engine, as JSON (a static string, built once):
 * {"layouts": {"step_plan": {"type": "f64", "size": 22, "fields": {"params": 0, ...}}, ...},
 *  "kinds": [...], "calls": [...], "policies": [...], "presets": [...],
 *  "preset_encoders": {"vit_tiny_patch16_224": {timm kwargs}, ...}, "regions": ["params", ...],
 *  "limits": {"policy_text_max": 48, "timeline_max": 4096, "max_models": 256},
 *  "kernels": {"matmul_forward": {"ops": [["out", "f32", "w", "M * N"], ...], "ints": [...],
 *  "floats": [...]}, ...}} (vt_kernel_contract_json) */
VTW_API const char *vtw_manifest(void) {
    static char json[1 << 16];
    if (json[0]) return json;
    size_t k = 0, cap = sizeof json;
#define PUT(...) (k += (size_t)snprintf(json + (k < cap ? k : cap), k < cap ? cap - k : 0, __VA_ARGS__))
    PUT("{\"layouts\": {");
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        PUT("%s\"%s\": {\"type\": \"%s\", \"size\": %d, \"fields\": {", l ? ", " : "", layouts[l].name,
            layouts[l].type, layouts[l].n);
        for (int i = 0; i < layouts[l].n; i++) PUT("%s\"%s\": %d", i ? ", " : "", layouts[l].fields[i], i);
        PUT("}}");
    }
    PUT("}, \"kinds\": [");
    for (int i = VT_KIND_TIMM; i <= VT_KIND_AIM; i++)
        PUT("%s\"%s\"", i ? ", " : "", vt_kind_name((vt_kind)i));
    PUT("], \"calls\": [");
    for (size_t i = 0; i < sizeof call_names / sizeof call_names[0]; i++)
        PUT("%s\"%s\"", i ? ", " : "", call_names[i]);
    PUT("], \"policies\": [");
    for (int i = 0; vt_policy_name(i); i++) PUT("%s\"%s\"", i ? ", " : "", vt_policy_name(i));
    PUT("], \"presets\": [");
    for (int i = 0; vt_preset_name(i); i++) PUT("%s\"%s\"", i ? ", " : "", vt_preset_name(i));
    /* each preset's encoder as timm kwargs (a preset is timm's defaults plus these): what a config
     * needs to put another MAE decoder or AIM head on a preset's encoder (Vitrine.createModel) */
    PUT("], \"preset_encoders\": {");
    for (int i = 0; vt_preset_name(i); i++) {
        vt_vit_config p;
        char kw[2048];
        if (vt_preset(vt_preset_name(i), &p) || vt_preset_kwargs_json(&p, kw, sizeof kw)) return NULL;
        PUT("%s\"%s\": %s", i ? ", " : "", vt_preset_name(i), kw);
    }
    PUT("}, \"regions\": [");
    for (int i = 0; i < VT_REG_COUNT; i++) PUT("%s\"%s\"", i ? ", " : "", vt_region_name(i));
    PUT("], \"limits\": {\"policy_text_max\": %d, \"timeline_max\": %d, \"max_models\": %d}",
        VT_POLICY_TEXT_MAX, VT_TIMELINE_MAX, VTW_MAX_MODELS);
    /* the kernel list's contract, what a backend that replays a recorded step implements */
    char *kernels = NULL;
    size_t klen = 0;
    if (vt_kernel_contract_json(&kernels, &klen)) return NULL;
    PUT(", \"kernels\": %s}", kernels);
    free(kernels);
#undef PUT
    if (k >= cap) {
        json[0] = 0;
        vt_fail(VT_ERR_NOMEM, "vtw_manifest: %zu bytes do not fit its buffer", k);
        return NULL;
    }
    return json;
}

VTW_API const char *vtw_last_error(void) { return vt_last_error(); }
int vt_kernels_simd(void); /* kernels.c: whether this build has the SIMD kernels */
VTW_API int vtw_kernels_simd(void) { return vt_kernels_simd(); }
VTW_API void *vtw_malloc(size_t n) { return malloc(n); }
VTW_API void vtw_free(void *p) { free(p); }

/* A buffer the engine made, handed to JS by address and length (JS copies it, then vtw_free). */
static void bytes_out(uint32_t out[bytes_out_SIZE], void *p, size_t n) {
    out[bytes_out_ptr] = (uint32_t)(uintptr_t)p;
    out[bytes_out_len] = (uint32_t)n;
}

/* ---- threads (web/runtime/pool.js) ------------------------------------------------------------------ */
void vt_worker_loop(int tid);
void vt_threads_shutdown(void);
void vt_threads_quit(void);
int vt_threads_lost(int n);
void vt_threads_caller_can_wait(int yes);
int vt_threads_ready(void);
/* A pool worker's body (its own instance of this module, its own stack): never returns until
 * vtw_threads_shutdown. Only kernels run there: no libc, no allocation. */
VTW_API void vtw_worker_run(int tid) { vt_worker_loop(tid); }
VTW_API int vtw_set_threads(int n, int caller_can_wait) {
    vt_threads_caller_can_wait(caller_can_wait);
    return vt_set_threads(n);
}
VTW_API int vtw_threads_max(void) { return vt_threads_max(); }
VTW_API int vtw_threads_ready(void) { return vt_threads_ready(); }
VTW_API void vtw_threads_shutdown(void) { vt_threads_shutdown(); }
VTW_API void vtw_threads_quit(void) { vt_threads_quit(); }
VTW_API int vtw_threads_lost(int n) { return vt_threads_lost(n); }
/* tests: split even tiny shapes (0), or restore the default (negative) */
void vt_threads_set_min_work(double flops);
VTW_API void vtw_threads_set_min_work(double flops) { vt_threads_set_min_work(flops < 0 ? 2.0e5 : flops); }
/* tests: chunks of pooled loops thread tid has run */
int vt_threads_chunks_run(int tid);
VTW_API int vtw_threads_chunks_run(int tid) { return vt_threads_chunks_run(tid); }

/* ---- models --------------------------------------------------------------------------------- */

/* kind: vt_kind. Either preset (a timm name; the kind's defaults for everything else, e.g. lightly's
 * mask token, lightly's MAE decoder / AIM head sizes), with json then the encoder's timm kwargs
 * over it (timm's create_model(name, **kwargs): num_classes, img_size, ...), or json alone
 * (vt_model_config_from_json): the config, read and checked, nothing allocated. */
static int config_of(int kind, const char *preset, const char *json, size_t json_len, vt_model_config *mc) {
    if (kind < VT_KIND_TIMM || kind > VT_KIND_AIM) return vt_fail(VT_ERR_ARG, "unknown model kind %d", kind);
    if (preset && preset[0]) {
        vt_vit_config p;
        vt_model_config_default(mc, (vt_kind)kind);
        int rc = vt_preset(preset, &p);
        if (rc) return rc;
        vt_preset_encoder(&p, mc);
        return json ? vt_vit_config_from_json(json, json_len, &mc->enc) : VT_OK;
    }
    if (!json) return vt_fail(VT_ERR_ARG, "a model needs a preset or a JSON config");
    return vt_model_config_from_json(json, json_len, (vt_kind)kind, mc);
}

static void dims_of(const vt_model_config *c, int32_t out[model_dims_SIZE]) {
    out[model_dims_kind] = c->kind;
    out[model_dims_img_size] = c->enc.img_size;
    out[model_dims_patch_size] = c->enc.patch_size;
    out[model_dims_in_chans] = c->enc.in_chans;
    out[model_dims_embed_dim] = c->enc.embed_dim;
    out[model_dims_depth] = c->enc.depth;
    out[model_dims_num_heads] = c->enc.num_heads;
    out[model_dims_prefix_tokens] = c->enc.class_token + c->enc.reg_tokens + c->enc.distilled;
    out[model_dims_img_width] = vt_img_width(&c->enc);
    out[model_dims_dynamic_img_size] = c->enc.dynamic_img_size;
    out[model_dims_dynamic_img_pad] = c->enc.dynamic_img_pad;
    out[model_dims_distilled] = c->enc.distilled;
}

VTW_API int vtw_model_create(int kind, const char *preset, const char *json, size_t json_len) {
    vt_model_config mc;
    int rc = config_of(kind, preset, json, json_len, &mc);
    if (rc) return rc;
    int h = 1;
    while (h <= VTW_MAX_MODELS && models[h]) h++;
    if (h > VTW_MAX_MODELS)
        return vt_fail(VT_ERR_STATE, "too many live models (%d); dispose some", VTW_MAX_MODELS);
    rc = vt_model_create(&mc, &models[h]);
    return rc ? rc : h;
}

/* The dims of the model vtw_model_create would make of the same arguments, from its config alone
 * (checked as vt_model_create checks it; nothing allocated): a spec read from a file is checked
 * before data are read at its size. */
VTW_API int vtw_model_check(int kind, const char *preset, const char *json, size_t json_len,
                            int32_t out[model_dims_SIZE]) {
    vt_model_config mc;
    int rc = config_of(kind, preset, json, json_len, &mc);
    if (!rc) rc = vt_config_validate(&mc);
    if (!rc) dims_of(&mc, out);
    return rc;
}

VTW_API int vtw_model_dims(int h, int32_t out[model_dims_SIZE]) {
    GET_OR_FAIL(m, h);
    dims_of(vt_model_get_config(m), out);
    return VT_OK;
}

VTW_API int vtw_model_free(int h) {
    GET_OR_FAIL(m, h);
    if (jobs[h].job) {
        vtw_parity_close(h);
        return VT_OK;
    } /* a parity job's model goes with its job */
    vt_model_free(m);
    models[h] = NULL;
    return VT_OK;
}

/* ---- parameters ----------------------------------------------------------------------------- */

VTW_API int vtw_param_count(int h) {
    GET_OR_FAIL(m, h);
    return vt_param_count(m);
}
static int check_param(vt_model *m, int i) {
    return (i >= 0 && i < vt_param_count(m)) ? VT_OK
                                             : vt_fail(VT_ERR_ARG, "parameter index %d out of range", i);
}
/* The model of handle h when i indexes one of its parameters, else NULL (the message says why). */
static vt_model *get_param(int h, int i) {
    vt_model *m = get(h);
    return m && !check_param(m, i) ? m : NULL;
}
VTW_API const char *vtw_param_name(int h, int i) {
    vt_model *m = get_param(h, i);
    return m ? vt_param_name(m, i) : NULL;
}
VTW_API int vtw_param_ndim(int h, int i) {
    vt_model *m = get_param(h, i);
    return m ? vt_param_ndim(m, i) : VT_ERR_ARG;
}
VTW_API int vtw_param_dim(int h, int i, int d) {
    vt_model *m = get_param(h, i);
    if (!m) return VT_ERR_ARG;
    if (d < 0 || d >= vt_param_ndim(m, i)) return vt_fail(VT_ERR_ARG, "dimension %d out of range", d);
    return (int)vt_param_shape(m, i)[d];
}
VTW_API double vtw_param_numel(int h, int i) {
    vt_model *m = get_param(h, i);
    return m ? (double)vt_param_numel(m, i) : -1;
}
VTW_API float *vtw_param_data(int h, int i) {
    vt_model *m = get_param(h, i);
    return m ? vt_param_data(m, i) : NULL;
}
VTW_API float *vtw_param_grad(int h, int i) {
    vt_model *m = get_param(h, i);
    return m ? vt_param_grad(m, i) : NULL;
}
VTW_API int vtw_param_requires_grad(int h, int i) {
    vt_model *m = get_param(h, i);
    return m ? vt_param_requires_grad(m, i) : VT_ERR_ARG;
}
/* Returns the number of parameters matched. */
VTW_API int vtw_set_requires_grad(int h, const char *name, int on) {
    GET_OR_FAIL(m, h);
    int matched = 0;
    int rc = vt_set_requires_grad(m, name ? name : "", on, &matched);
    return rc ? rc : matched;
}
VTW_API int vtw_zero_grad(int h) {
    GET_OR_FAIL(m, h);
    vt_zero_grad(m);
    return VT_OK;
}

/* The concrete named policies the budget search tries for this model (block, selective, sqrt,
 * every:K ...), i-th into text; returns 1, or 0 past the end. */
VTW_API int vtw_named_policy(int h, int i, char text[VT_POLICY_TEXT_MAX]) {
    GET_OR_FAIL(m, h);
    return vt_named_policy(m, i, text);
}

/* A byte count as budget:BYTES reads it ("300MB" -> 3e8), or a negative status. */
VTW_API double vtw_parse_bytes(const char *text) {
    uint64_t b = 0;
    int rc = vt_parse_bytes(text, &b);
    return rc ? rc : (double)b;
}

/* ---- weights -------------------------------------------------------------------------------- */

VTW_API int vtw_load_safetensors(int h, const uint8_t *bytes, size_t len, const char *model_prefix,
                                 const char *file_prefix) {
    GET_OR_FAIL(m, h);
    return vt_load_safetensors(m, bytes, len, model_prefix ? model_prefix : "",
                               file_prefix ? file_prefix : "");
}
/* JSON text of s (quotes, backslashes, control characters escaped) appended at b[*k] */
static void put_json_str(char *b, size_t cap, size_t *k, const char *s, size_t n) {
    if (*k < cap) b[(*k)++] = '"';
    for (size_t i = 0; i < n && *k + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            b[(*k)++] = '\\';
            b[(*k)++] = (char)c;
        } else if (c < 0x20)
            *k += (size_t)snprintf(b + *k, cap - *k, "\\u%04x", c);
        else
            b[(*k)++] = (char)c;
    }
    if (*k < cap) b[(*k)++] = '"';
}
/* vt_init_from_safetensors; out: the report as JSON (bytes_out):
 * {source, file_prefix, loaded, skipped, missing, resampled, pos_embed, notes: [lines]} */
VTW_API int vtw_init_from(int h, const uint8_t *bytes, size_t len, int strict, uint32_t out[bytes_out_SIZE]) {
    GET_OR_FAIL(m, h);
    bytes_out(out, NULL, 0);
    vt_init_report *r = malloc(sizeof *r);
    size_t cap = 2 * sizeof r->notes + 1024, k = 0;
    char *b = malloc(cap);
    if (!r || !b) {
        free(r);
        free(b);
        return vt_fail(VT_ERR_NOMEM, "out of memory");
    }
    int rc = vt_init_from_safetensors(m, bytes, len, strict, r);
    if (rc) {
        free(r);
        free(b);
        return rc;
    }
    static const char *pos[] = { "none", "sincos_frozen", "trainable", "learned_now_trainable" };
    k += (size_t)snprintf(b + k, cap - k, "{\"source\": ");
    put_json_str(b, cap, &k, r->source, strlen(r->source));
    k += (size_t)snprintf(b + k, cap - k, ", \"file_prefix\": ");
    put_json_str(b, cap, &k, r->file_prefix, strlen(r->file_prefix));
    k += (size_t)snprintf(b + k, cap - k,
                          ", \"loaded\": %d, \"skipped\": %d, \"missing\": %d, \"resampled\": %d, "
                          "\"pos_embed\": \"%s\", \"notes\": [",
                          r->loaded, r->skipped, r->missing, r->resampled, pos[r->pos_embed & 3]);
    int first = 1;
    for (const char *q = r->notes; *q;) {
        const char *e = strchr(q, '\n');
        size_t n = e ? (size_t)(e - q) : strlen(q);
        if (!first && k + 2 < cap) {
            b[k++] = ',';
            b[k++] = ' ';
        }
        put_json_str(b, cap, &k, q, n);
        first = 0;
        q += n + (e ? 1 : 0);
    }
    k += (size_t)snprintf(b + k, cap - k, "]}");
    free(r);
    bytes_out(out, b, k);
    return VT_OK;
}
VTW_API int vtw_save_safetensors(int h, const char *model_prefix, const char *file_prefix,
                                 uint32_t out[bytes_out_SIZE]) {
    GET_OR_FAIL(m, h);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc =
        vt_save_safetensors(m, model_prefix ? model_prefix : "", file_prefix ? file_prefix : "", &buf, &len);
    if (rc) return rc;
    bytes_out(out, buf, len);
    return VT_OK;
}

/* ---- calls ---------------------------------------------------------------------------------- */

static vt_inputs make_inputs(const float *images, int batch, const int64_t *idx_mask, int n_mask,
                             const int64_t *idx_keep, int n_keep, const uint8_t *mask, int is_causal) {
    vt_inputs in;
    memset(&in, 0, sizeof in);
    in.images = images;
    in.batch = batch;
    in.idx_mask = idx_mask;
    in.n_mask = idx_mask ? n_mask : 0;
    in.idx_keep = idx_keep;
    in.n_keep = idx_keep ? n_keep : 0;
    in.mask = mask;
    in.is_causal = is_causal;
    return in;
}

VTW_API int vtw_forward(int h, int fn, const float *images, int batch, const int64_t *idx_mask, int n_mask,
                        const int64_t *idx_keep, int n_keep, const uint8_t *mask, int is_causal,
                        int need_grad) {
    GET_OR_FAIL(m, h);
    if (!images) return vt_fail(VT_ERR_ARG, "forward: images are missing");
    vt_inputs in = make_inputs(images, batch, idx_mask, n_mask, idx_keep, n_keep, mask, is_causal);
    return vt_forward(m, (vt_fn)fn, &in, need_grad);
}

/* vtw_forward with images of height x width (timm's dynamic_img_size; 0 = the config's) and DeiT's
 * distilled_training (timm's forward of a distilled model: two outputs, head and head_dist). */
VTW_API int vtw_forward_sized(int h, int fn, const float *images, int batch, int height, int width,
                              int distilled_training, const int64_t *idx_mask, int n_mask,
                              const int64_t *idx_keep, int n_keep, const uint8_t *mask, int is_causal,
                              int need_grad) {
    GET_OR_FAIL(m, h);
    if (!images) return vt_fail(VT_ERR_ARG, "forward: images are missing");
    vt_inputs in = make_inputs(images, batch, idx_mask, n_mask, idx_keep, n_keep, mask, is_causal);
    in.height = height;
    in.width = width;
    in.distilled_training = distilled_training;
    return vt_forward(m, (vt_fn)fn, &in, need_grad);
}

/* timm's forward_intermediates arguments into in: the image size, the blocks taken (indices[n], or
 * the last last_n), flags 1 norm, 2 return_prefix_tokens, 4 stop_early, 8 NCHW, 16 intermediates_only */
static int inter_inputs(vt_model *m, int height, int width, const int32_t *indices, int n, int last_n,
                        int flags, vt_inputs *in) {
    in->height = height;
    in->width = width;
    in->inter.norm = !!(flags & 1);
    in->inter.return_prefix_tokens = !!(flags & 2);
    in->inter.stop_early = !!(flags & 4);
    in->inter.nchw = !!(flags & 8);
    in->inter.intermediates_only = !!(flags & 16);
    return vt_take_indices(vt_model_get_config(m)->enc.depth, (const int *)indices, n, last_n,
                           &in->inter.take);
}
/* timm's forward_intermediates (VT_FN_TIMM_INTERMEDIATES) of images of height x width (0: the
 * config's): indices[n] (n < 0: None, every block) or the last last_n blocks, as timm's
 * feature_take_indices reads them; flags: 1 norm, 2 return_prefix_tokens, 4 stop_early, 8 output_fmt
 * NCHW (else NLC), 16 intermediates_only. */
VTW_API int vtw_forward_timm_intermediates(int h, const float *images, int batch, int height, int width,
                                           const int32_t *indices, int n, int last_n, int flags,
                                           int need_grad) {
    GET_OR_FAIL(m, h);
    if (!images) return vt_fail(VT_ERR_ARG, "forward_intermediates: images are missing");
    vt_inputs in = make_inputs(images, batch, NULL, 0, NULL, 0, NULL, 1);
    int rc = inter_inputs(m, height, width, indices, n, last_n, flags, &in);
    return rc ? rc : vt_forward(m, VT_FN_TIMM_INTERMEDIATES, &in, need_grad);
}

VTW_API int vtw_output_count(int h) {
    GET_OR_FAIL(m, h);
    return vt_output_count(m);
}
/* Output i's data pointer (NULL on error); its shape goes to shape[4] (int32), rank to *ndim. */
VTW_API const float *vtw_output(int h, int i, int32_t shape[4], int *ndim) {
    vt_model *m = get(h);
    if (!m) return NULL;
    int64_t s[4] = { 0, 0, 0, 0 };
    const float *p = vt_output(m, i, s, ndim);
    for (int d = 0; d < 4; d++) shape[d] = (int32_t)s[d];
    return p;
}
VTW_API float vtw_loss_value(int h) {
    vt_model *m = get(h);
    return m ? vt_loss_value(m) : 0.0f;
}

/* douts: n_douts wasm pointers (0 = no upstream gradient for that output). */
VTW_API int vtw_backward(int h, const float *const *douts, int n_douts, float *dimages, int param_grads) {
    GET_OR_FAIL(m, h);
    return vt_backward(m, douts, n_douts, dimages, param_grads);
}

/* ---- checkpointing and memory ----------------------------------------------------------------- */

VTW_API int vtw_set_grad_checkpointing(int h, const char *policy) {
    GET_OR_FAIL(m, h);
    return vt_set_grad_checkpointing(m, policy);
}
VTW_API const char *vtw_get_grad_checkpointing(int h) {
    vt_model *m = get(h);
    return m ? vt_get_grad_checkpointing(m) : NULL;
}
/* out: plan_bytes. Only sizes are used: has_mask says whether a mask would be given. */
VTW_API int vtw_plan(int h, int fn, int batch, int n_mask, int n_keep, int has_mask, int need_grad,
                     double out[plan_bytes_SIZE]) {
    GET_OR_FAIL(m, h);
    static const int64_t dummy = 0;
    static const uint8_t dummy_mask = 0;
    vt_inputs in = make_inputs(NULL, batch, n_mask > 0 ? &dummy : NULL, n_mask, n_keep > 0 ? &dummy : NULL,
                               n_keep, has_mask ? &dummy_mask : NULL, 1);
    vt_plan_bytes p;
    int rc = vt_plan(m, (vt_fn)fn, &in, need_grad, &p);
    if (rc) return rc;
#define VTW_PLAN_OUT(f) out[plan_bytes_##f] = (double)p.f;
    PLAN_BYTES(VTW_PLAN_OUT)
#undef VTW_PLAN_OUT
    return VT_OK;
}
/* vtw_plan for images of height x width (0: the config's) and DeiT's distilled_training */
VTW_API int vtw_plan_sized(int h, int fn, int batch, int height, int width, int distilled_training,
                           int n_mask, int n_keep, int has_mask, int need_grad, double out[plan_bytes_SIZE]) {
    GET_OR_FAIL(m, h);
    static const int64_t dummy = 0;
    static const uint8_t dummy_mask = 0;
    vt_inputs in = make_inputs(NULL, batch, n_mask > 0 ? &dummy : NULL, n_mask, n_keep > 0 ? &dummy : NULL,
                               n_keep, has_mask ? &dummy_mask : NULL, 1);
    in.height = height;
    in.width = width;
    in.distilled_training = distilled_training;
    vt_plan_bytes p;
    int rc = vt_plan(m, (vt_fn)fn, &in, need_grad, &p);
    if (rc) return rc;
#define VTW_PLAN_OUT(f) out[plan_bytes_##f] = (double)p.f;
    PLAN_BYTES(VTW_PLAN_OUT)
#undef VTW_PLAN_OUT
    return VT_OK;
}
/* the plan of vtw_forward_timm_intermediates with the same arguments */
VTW_API int vtw_plan_timm_intermediates(int h, int batch, int height, int width, const int32_t *indices,
                                        int n, int last_n, int flags, int need_grad,
                                        double out[plan_bytes_SIZE]) {
    GET_OR_FAIL(m, h);
    vt_inputs in = make_inputs(NULL, batch, NULL, 0, NULL, 0, NULL, 1);
    int rc = inter_inputs(m, height, width, indices, n, last_n, flags, &in);
    if (rc) return rc;
    vt_plan_bytes p;
    rc = vt_plan(m, VT_FN_TIMM_INTERMEDIATES, &in, need_grad, &p);
    if (rc) return rc;
#define VTW_PLAN_OUT(f) out[plan_bytes_##f] = (double)p.f;
    PLAN_BYTES(VTW_PLAN_OUT)
#undef VTW_PLAN_OUT
    return VT_OK;
}
/* vt_plan_train_step. policy NULL = the model's; mask_ratio < 0 = the trainer's. out: step_plan
 * (the step's bytes, fit_*, least_*), text:
 * step_plan_text (fit_policy, least_policy; VT_POLICY_TEXT_MAX bytes each). */
VTW_API int vtw_plan_train_step(int h, int batch, double mask_ratio, const char *policy, double budget,
                                double out[step_plan_SIZE],
                                char text[step_plan_text_SIZE * VT_POLICY_TEXT_MAX]) {
    GET_OR_FAIL(m, h);
    if (!(budget >= 0 && budget < 18446744073709551616.0))
        return vt_fail(VT_ERR_ARG, "budget must be a byte count >= 0, got %g", budget);
    vt_step_plan p;
    int rc = vt_plan_train_step(m, batch, (float)mask_ratio, policy, (uint64_t)budget, &p);
    if (rc) return rc;
#define VTW_STEP_BYTES(f)                                                                                    \
    out[step_plan_##f] = (double)p.bytes.f;                                                                  \
    out[step_plan_fit_##f] = (double)p.fit_bytes.f;                                                          \
    out[step_plan_least_##f] = (double)p.least_bytes.f;
    PLAN_BYTES(VTW_STEP_BYTES)
#undef VTW_STEP_BYTES
    out[step_plan_policy_met] = p.policy_met;
    out[step_plan_tokens_kept] = p.tokens_kept;
    out[step_plan_tokens_masked] = p.tokens_masked;
    out[step_plan_recompute_flops] = p.recompute_flops;
    out[step_plan_fits] = p.fits;
    out[step_plan_fit_recompute_flops] = p.fit_recompute_flops;
    out[step_plan_max_batch] = p.max_batch;
    memcpy(text + step_plan_text_fit_policy * VT_POLICY_TEXT_MAX, p.fit_policy, VT_POLICY_TEXT_MAX);
    memcpy(text + step_plan_text_least_policy * VT_POLICY_TEXT_MAX, p.least_policy, VT_POLICY_TEXT_MAX);
    return VT_OK;
}
/* The activation timeline of the last call as doubles: out[0..n) arena bytes in use, out[max..max+n)
 * live bytes; returns the count and writes where the backward began to *bwd. */
VTW_API int vtw_activation_timeline(int h, double *out, int max, int *bwd) {
    GET_OR_FAIL(m, h);
    static size_t top[VT_TIMELINE_MAX], live[VT_TIMELINE_MAX];
    if (max > VT_TIMELINE_MAX) max = VT_TIMELINE_MAX;
    int n = vt_activation_timeline(m, top, live, max, bwd);
    for (int i = 0; i < n; i++) {
        out[i] = (double)top[i];
        out[max + i] = (double)live[i];
    }
    return n;
}

/* out: arena_stats (bytes) of the activation arena for the last call. */
VTW_API int vtw_arena_stats(int h, double out[arena_stats_SIZE]) {
    GET_OR_FAIL(m, h);
    vt_arena_stats s;
    vt_arena_get_stats(m, &s);
    out[arena_stats_planned] = (double)s.planned;
    out[arena_stats_peak] = (double)s.peak;
    out[arena_stats_capacity] = (double)s.capacity;
    return VT_OK;
}
VTW_API int vtw_release_activations(int h) {
    GET_OR_FAIL(m, h);
    vt_release_activations(m);
    return VT_OK;
}

/* ---- training ---------------------------------------------------------------------------------- */

/* 64-bit seeds come as two 32-bit halves (no BigInt needed on either wasm ABI). */
static uint64_t seed64(uint32_t lo, uint32_t hi) { return ((uint64_t)hi << 32) | lo; }

VTW_API int vtw_init_weights(int h, uint32_t seed_lo, uint32_t seed_hi) {
    GET_OR_FAIL(m, h);
    return vt_init_weights(m, seed64(seed_lo, seed_hi));
}

/* cfg: train_config, the kind's defaults */
VTW_API int vtw_train_config_default(int kind, double cfg[train_config_SIZE]) {
    if (kind < VT_KIND_TIMM || kind > VT_KIND_AIM) return vt_fail(VT_ERR_ARG, "unknown model kind %d", kind);
    vt_train_config t;
    vt_train_config_default(&t, (vt_kind)kind);
#define VTW_CFG_OUT(f) cfg[train_config_##f] = (double)t.f;
    TRAIN_CONFIG(VTW_CFG_OUT)
#undef VTW_CFG_OUT
    return VT_OK;
}

/* cfg: train_config; the mask seed as two halves. */
VTW_API int vtw_trainer_init(int h, const double cfg[train_config_SIZE], uint32_t seed_lo, uint32_t seed_hi) {
    GET_OR_FAIL(m, h);
    if (!cfg) return vt_fail(VT_ERR_ARG, "trainer init: config is missing");
    static const struct {
        int i;
        const char *name;
    } counts[] = { { train_config_warmup_steps, "warmup_steps" },
                   { train_config_total_steps, "total_steps" },
                   { train_config_grad_accum, "grad_accum" } };
    for (int c = 0; c < 3; c++) {
        double v = cfg[counts[c].i];
        if (!(v >= 0 && v <= 2147483647.0) || v != (double)(long)v)
            return vt_fail(VT_ERR_ARG, "trainer init: %s must be an integer in [0, 2^31), got %g",
                           counts[c].name, v);
    }
    vt_train_config t;
    memset(&t, 0, sizeof t);
    t.lr = (float)cfg[train_config_lr];
    t.beta1 = (float)cfg[train_config_beta1];
    t.beta2 = (float)cfg[train_config_beta2];
    t.eps = (float)cfg[train_config_eps];
    t.weight_decay = (float)cfg[train_config_weight_decay];
    t.warmup_steps = (long)cfg[train_config_warmup_steps];
    t.total_steps = (long)cfg[train_config_total_steps];
    t.clip_norm = (float)cfg[train_config_clip_norm];
    t.mask_ratio = (float)cfg[train_config_mask_ratio];
    t.seed = seed64(seed_lo, seed_hi);
    t.label_smoothing = (float)cfg[train_config_label_smoothing];
    t.min_lr = (float)cfg[train_config_min_lr];
    t.grad_accum =
        (int)cfg[train_config_grad_accum]; /* an integer in [0, 2^31): vt_trainer_init checks the range */
    return vt_trainer_init(m, &t);
}

/* The step's loss goes to *loss (also on VT_ERR_NUMERIC, when it is the non-finite value). */
VTW_API int vtw_train_step(int h, const float *images, int batch, float *loss) {
    GET_OR_FAIL(m, h);
    return vt_train_step(m, images, batch, loss);
}
/* A classifier's step: labels [batch] (int32). */
VTW_API int vtw_train_step_labels(int h, const float *images, const int32_t *labels, int batch, float *loss) {
    GET_OR_FAIL(m, h);
    return vt_train_step_labels(m, images, labels, batch, loss);
}
VTW_API double vtw_train_step_count(int h) {
    vt_model *m = get(h);
    return m ? (double)vt_train_step_count(m) : -1;
}
VTW_API float vtw_train_lr(int h, double step) {
    vt_model *m = get(h);
    return m && step >= 0 ? vt_train_lr(m, (long)step) : -1.0f;
}
VTW_API int vtw_train_state_save(int h, uint32_t out[bytes_out_SIZE]) {
    GET_OR_FAIL(m, h);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = vt_train_state_save(m, &buf, &len);
    if (rc) return rc;
    bytes_out(out, buf, len);
    return VT_OK;
}
VTW_API int vtw_train_state_load(int h, const uint8_t *bytes, size_t len) {
    GET_OR_FAIL(m, h);
    return vt_train_state_load(m, bytes, len);
}
/* A training state's metadata (and its CRC-32s) checked with no model: before a caller makes one. */
VTW_API int vtw_train_state_check(const uint8_t *bytes, size_t len) {
    return vt_train_state_check(bytes, len);
}
/* masked, recon: [B, C, H, W] each, B the batch of the last loss forward. */
VTW_API int vtw_loss_visualize(int h, float *masked, float *recon) {
    GET_OR_FAIL(m, h);
    return vt_loss_visualize(m, masked, recon);
}

/* ---- parity (the harness, harness/parity.h) ---------------------------------------------------- */

/* Runs a parity file. out: parity_out -- the harness's JSON result (malloc'd, NUL-terminated;
 * "file" in it when file is non-empty) and its length, the dump bytes (malloc'd, 0 when none) and
 * theirs; both freed by the caller with vtw_free. read_error non-empty: the file could not be read
 * (bytes are ignored) and the result says so with status VT_ERR_IO. Returns VT_OK when the file
 * ran (pass or fail inside the JSON), an error when it could not be run: the JSON is written
 * either way ({"pass": false, "error": ...}). */
VTW_API int vtw_parity_run(const uint8_t *bytes, size_t len, const char *policy, int want_dump,
                           const char *file, const char *read_error, uint32_t out[parity_out_SIZE]) {
    vt_parity_result r;
    int rc;
    if (read_error && read_error[0])
        vt_parity_fail(&r, rc = VT_ERR_IO, read_error);
    else
        rc = vt_parity_run(bytes, len, policy && policy[0] ? policy : NULL, want_dump, &r);
    char *text = NULL;
    size_t n = 0;
    int jrc = vt_parity_json(&r, file && file[0] ? file : NULL, &text, &n);
    out[parity_out_json] = (uint32_t)(uintptr_t)text;
    out[parity_out_json_len] = (uint32_t)n;
    out[parity_out_dump] = (uint32_t)(uintptr_t)r.dump;
    out[parity_out_dump_len] = (uint32_t)r.dump_len;
    r.dump = NULL; /* ownership passes to the caller */
    vt_parity_free(&r);
    return jrc ? jrc : rc;
}

/* ---- a parity file run on another backend (harness/parity.h: vt_parity_open ...) ---------------- */

/* The file's model joins the model table (its handle is for reading: params, regions; never
 * vtw_model_free: vtw_parity_close frees it with the job). bytes must stay until the close. */
VTW_API int vtw_parity_open(const uint8_t *bytes, size_t len, const char *policy) {
    int h = 1;
    while (h <= VTW_MAX_MODELS && models[h]) h++;
    if (h > VTW_MAX_MODELS) return vt_fail(VT_ERR_NOMEM, "more than %d models at once", VTW_MAX_MODELS);
    vt_parity_job *j = NULL;
    int rc = vt_parity_open(bytes, len, policy && policy[0] ? policy : NULL, &j);
    if (rc) return rc;
    jobs[h].job = j;
    models[h] = vt_parity_model(j);
    return h;
}
VTW_API void vtw_parity_close(int h) {
    if (h < 1 || h > VTW_MAX_MODELS || !jobs[h].job) return;
    vt_trace_free(jobs[h].fwd);
    vt_trace_free(jobs[h].full);
    vt_parity_close(jobs[h].job);
    memset(&jobs[h], 0, sizeof jobs[h]);
    models[h] = NULL;
}
/* Records the call forward only and forward + backward; their lists (JSON) in fwd and full. */
VTW_API int vtw_parity_record(int h, uint32_t fwd[bytes_out_SIZE], uint32_t full[bytes_out_SIZE]) {
    if (h < 1 || h > VTW_MAX_MODELS || !jobs[h].job) return vt_fail(VT_ERR_ARG, "no parity job %d", h);
    vt_trace_free(jobs[h].fwd);
    vt_trace_free(jobs[h].full);
    jobs[h].fwd = jobs[h].full = NULL;
    int rc = vt_parity_record(jobs[h].job, &jobs[h].fwd, &jobs[h].full);
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (!rc) rc = vt_trace_json(jobs[h].fwd, &a, &na);
    if (!rc) rc = vt_trace_json(jobs[h].full, &b, &nb);
    bytes_out(fwd, a, na);
    bytes_out(full, b, nb);
    return rc;
}
/* Output i's name in the parity file (vt_parity_output_name), valid until the next call; NULL if none. */
VTW_API const char *vtw_parity_output_name(int h, int i) {
    static char name[64];
    if (h < 1 || h > VTW_MAX_MODELS || !jobs[h].job) return NULL;
    return vt_parity_output_name(jobs[h].job, i, name, sizeof name) ? NULL : name;
}
/* The recorded bytes of input region r of list which (0 forward, 1 forward + backward); NULL if none. */
VTW_API const void *vtw_parity_input(int h, int which, int r) {
    if (h < 1 || h > VTW_MAX_MODELS || r <= VT_REG_NONE || r >= VT_REG_COUNT) return NULL;
    return vt_trace_input(which ? jobs[h].full : jobs[h].fwd, (vt_region)r);
}
/* Compares a dump of what another backend computed with the file; out: parity_out as vtw_parity_run's. */
VTW_API int vtw_parity_check(const uint8_t *bytes, size_t len, const uint8_t *dump, size_t dump_len,
                             const char *file, uint32_t out[parity_out_SIZE]) {
    vt_parity_result r;
    int rc = vt_parity_check(bytes, len, dump, dump_len, &r);
    char *text = NULL;
    size_t n = 0;
    int jrc = vt_parity_json(&r, file && file[0] ? file : NULL, &text, &n);
    out[parity_out_json] = (uint32_t)(uintptr_t)text;
    out[parity_out_json_len] = (uint32_t)n;
    out[parity_out_dump] = 0;
    out[parity_out_dump_len] = 0;
    vt_parity_free(&r);
    return jrc ? jrc : rc;
}

/* ---- the step as data (src/trace.c, docs/kernels.md; harness/replay.h) ------------------------- */
#include "replay.h"

/* Records one step of model h without running it and prints it: what -1 a training step (labels
 * for a classifier, else NULL: vt_trace_train_step), or VT_FN_ENCODE with its backward (an upstream
 * gradient of zeros: its values are an input of the list). json: the list (vitrine-trace/1), else
 * the summary; the malloc'd text in out (bytes_out). */
VTW_API int vtw_trace(int h, int what, const float *images, const int32_t *labels, int batch, int json,
                      uint32_t out[bytes_out_SIZE]) {
    GET_OR_FAIL(m, h);
    vt_trace *t = NULL;
    float *dout = NULL;
    int rc;
    if (what < 0) {
        rc = vt_trace_train_step(m, images, labels, batch, &t);
    } else if (what == VT_FN_ENCODE) {
        const vt_model_config *c = vt_model_get_config(m);
        uint64_t n = (uint64_t)(batch > 0 ? batch : 0) * (uint64_t)vt_config_tokens(&c->enc) *
                     (uint64_t)c->enc.embed_dim;
        if (n > SIZE_MAX / sizeof(float) - 1 || !(dout = calloc((size_t)n + 1, sizeof *dout)))
            return vt_fail(VT_ERR_NOMEM, "out of memory: %llu floats of upstream gradient",
                           (unsigned long long)n);
        vt_inputs in;
        memset(&in, 0, sizeof in);
        in.images = images;
        in.batch = batch;
        const float *d[1] = { dout };
        rc = vt_trace_call(m, VT_FN_ENCODE, &in, 1, d, 1, NULL, 1, &t);
    } else {
        return vt_fail(VT_ERR_ARG, "trace: %d is not -1 (a training step) or %d (encode)", what,
                       VT_FN_ENCODE);
    }
    char *text = NULL;
    size_t len = 0;
    if (!rc) rc = json ? vt_trace_json(t, &text, &len) : vt_trace_summary(t, &text, &len);
    out[bytes_out_ptr] = (uint32_t)(uintptr_t)text;
    out[bytes_out_len] = (uint32_t)len;
    vt_trace_free(t);
    free(dout);
    return rc;
}

/* The kernel list as docs/kernels.md prints it (a markdown table in out, bytes_out). */
VTW_API int vtw_kernel_contract(uint32_t out[bytes_out_SIZE]) {
    char *text = NULL;
    size_t len = 0;
    int rc = vt_kernel_contract(&text, &len);
    out[bytes_out_ptr] = (uint32_t)(uintptr_t)text;
    out[bytes_out_len] = (uint32_t)len;
    return rc;
}

/* A step replayed elsewhere (docs/kernels.md, "Running a step elsewhere"; web/webgpu/backend.js).
 * Region r's base in wasm memory (0 when the model has none yet) and its bytes in *bytes. */
VTW_API void *vtw_model_region(int h, int r, double *bytes) {
    vt_model *m = get(h);
    uint64_t n = 0;
    void *p = m && r > VT_REG_NONE && r < VT_REG_COUNT ? vt_model_region(m, (vt_region)r, &n) : NULL;
    if (bytes) *bytes = (double)n;
    return p;
}
/* The inputs of the next step (vt_train_step_begin): where its indices and mask are (out:
 * step_inputs; 0 when unused) and the scalars region's inputs in sc (32 bytes, vt_scalars). */
VTW_API int vtw_train_step_begin(int h, const float *images, const int32_t *labels, int batch,
                                 uint32_t out[step_inputs_SIZE], vt_scalars *sc) {
    GET_OR_FAIL(m, h);
    if (!out || !sc) return vt_fail(VT_ERR_ARG, "train step begin: NULL argument");
    vt_inputs in;
    int rc = vt_train_step_begin(m, images, labels, batch, &in, sc);
    if (rc) return rc;
    out[step_inputs_idx_keep] = (uint32_t)(uintptr_t)in.idx_keep;
    out[step_inputs_idx_mask] = (uint32_t)(uintptr_t)in.idx_mask;
    out[step_inputs_mask] = (uint32_t)(uintptr_t)in.mask;
    out[step_inputs_n_keep] = (uint32_t)in.n_keep;
    out[step_inputs_n_mask] = (uint32_t)in.n_mask;
    return VT_OK;
}
/* Recordings for a device that parallelises inside one call (vt_model_set_whole_rows): 1 on, 0 off. */
VTW_API int vtw_model_set_whole_rows(int h, int on) {
    GET_OR_FAIL(m, h);
    return vt_model_set_whole_rows(m, on);
}
/* Commits the step with the replay's scalars (32 bytes, vt_scalars): VT_ERR_NUMERIC when it was refused. */
VTW_API int vtw_train_step_end(int h, const vt_scalars *sc) {
    GET_OR_FAIL(m, h);
    return vt_train_step_end(m, sc);
}

/* Tests: the replay oracle's case i under policy p (reference 0/1): 1 pass, 0 fail (err says why),
 * -1 past the end. */
VTW_API int vtw_replay_case_count(void) { return vt_replay_case_count(); }
VTW_API int vtw_replay_run(int i, int policy, int reference, char *err, int errlen) {
    vt_replay_case c;
    const char *name = vt_replay_case_get(i, policy, reference, &c);
    if (!name) return -1;
    vt_replay_result r;
    vt_replay_check(&c, &r);
    if (err && errlen > 0)
        snprintf(err, (size_t)errlen, "%s, %s: %s", name, c.policy, r.pass ? "pass" : r.error);
    return r.pass;
}

/* Tests (another backend's kernels against these, tests/node/webgpu-*.test.mjs): kernel `name` of the
 * list run directly, as a recorded call of it runs, on operand pointers (NULL: absent) and its
 * integer (as doubles) and float arguments in the table's order. 0, or VT_ERR_ARG. */
VTW_API int vtw_kernel_run(const char *name, void *const *ops, const double *ints, int n_ints,
                           const float *floats) {
    int k = 0, n = vt_kernel_count();
    while (k < n && (!name || strcmp(vt_kernel_name(k), name))) k++;
    if (k == n) return vt_fail(VT_ERR_ARG, "kernel_run: no kernel '%s'", name ? name : "(null)");
    int64_t ia[16];
    if (n_ints < 0 || n_ints > 16) return vt_fail(VT_ERR_ARG, "kernel_run: %d integer arguments", n_ints);
    for (int i = 0; i < n_ints; i++) ia[i] = (int64_t)ints[i];
    vt_kernel_run(k, ops, ia, floats);
    return VT_OK;
}
