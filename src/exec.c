/* exec.c: the kernel list (kernels/kernel_list.h) made code -- the typed entry points vt_k_*, the
 * one dispatch point they share (run the kernel, or record the call while the model records), the
 * dispatcher that runs a call from its operand pointers (direct calls and replays alike, so a
 * replay runs exactly what a step runs), each call's operand lengths and FLOPs, the replay of a
 * recorded list, and the names and signatures the trace and docs print. */
#include "exec.h"
#include "record.h"
#include "safetensors.h" /* vt_dtype: the element types of operands */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- what the list says of each kernel ---- */

typedef struct {
    const char *name;
    int dtype, access;
    const char *len; /* the length expression, for the docs */
} kop;
typedef struct {
    const char *name, *doc, *flops;
    const kop *ops;
    int nops, nints, nfloats;
    const char *ints[VT_TRACE_MAX_INTS + 1], *floats[VT_TRACE_MAX_FLOATS + 1];
} kinfo;

#define VT_KERNEL_OPS(name, ints, floats, ops, flops, call, doc)                                             \
    static const kop ops_##name[] = { VT_EACH(VT_OP_ROW, ops){ 0, 0, 0, 0 } };
VT_KERNEL_LIST(VT_KERNEL_OPS)
#undef VT_KERNEL_OPS

#define VT_KERNEL_INFO(name, ints, floats, ops, flops, call, doc)                                            \
    { #name,                                                                                                 \
      doc,                                                                                                   \
      #flops,                                                                                                \
      ops_##name,                                                                                            \
      VT_COUNT(ops),                                                                                         \
      VT_COUNT(ints),                                                                                        \
      VT_COUNT(floats),                                                                                      \
      { VT_EACH(VT_NAME_STR, ints) 0 },                                                                      \
      { VT_EACH(VT_NAME_STR, floats) 0 } },
static const kinfo kernels[VT_KERNEL_COUNT] = { VT_KERNEL_LIST(VT_KERNEL_INFO) };
#undef VT_KERNEL_INFO

/* every entry within the record's fixed arrays */
#define VT_KERNEL_FITS(name, ints, floats, ops, flops, call, doc)                                            \
    _Static_assert(VT_COUNT(ops) <= VT_TRACE_MAX_OPS && VT_COUNT(ints) <= VT_TRACE_MAX_INTS &&               \
                       VT_COUNT(floats) <= VT_TRACE_MAX_FLOATS,                                              \
                   #name ": too many arguments for a record");
VT_KERNEL_LIST(VT_KERNEL_FITS)
#undef VT_KERNEL_FITS

/* the scalars region's layout is part of the contract (docs/kernels.md) */
_Static_assert(offsetof(vt_scalars, loss) == 0 && offsetof(vt_scalars, dloss) == 4 &&
                   offsetof(vt_scalars, lr) == 8 && offsetof(vt_scalars, step) == 12 &&
                   offsetof(vt_scalars, nonfinite) == 16 && offsetof(vt_scalars, grad_norm) == 24 &&
                   sizeof(vt_scalars) == 32,
               "vt_scalars as docs/kernels.md describes it");

int vt_kernel_count(void) { return VT_KERNEL_COUNT; }
const char *vt_kernel_name(int k) { return k >= 0 && k < VT_KERNEL_COUNT ? kernels[k].name : "?"; }

/* ---- running a call, measuring a call ---- */

#define VT_KERNEL_RUN(name, ints, floats, ops, flops, call, doc)                                             \
    static void run_##name(void *const *op_, const int64_t *ia_, const float *fa_) {                         \
        VT_EACH(VT_INT_BIND, ints) VT_EACH(VT_FLT_BIND, floats) VT_EACH(VT_OP_BIND, ops) call;               \
    }
VT_KERNEL_LIST(VT_KERNEL_RUN)
#undef VT_KERNEL_RUN

#define VT_KERNEL_MEASURE(name, ints, floats, ops, flops, call, doc)                                         \
    static void measure_##name(void *const *op_, const int64_t *ia_, const float *fa_, uint64_t *len_,       \
                               double *flops_) {                                                             \
        VT_EACH(VT_INT_BIND, ints)                                                                           \
        VT_EACH(VT_FLT_BIND, floats)                                                                         \
        VT_EACH(VT_OP_BIND, ops) VT_EACH(VT_OP_LEN, ops) *flops_ = (double)(flops);                          \
    }
VT_KERNEL_LIST(VT_KERNEL_MEASURE)
#undef VT_KERNEL_MEASURE

typedef void (*run_fn)(void *const *, const int64_t *, const float *);
typedef void (*measure_fn)(void *const *, const int64_t *, const float *, uint64_t *, double *);
#define VT_KERNEL_RUN_PTR(name, ...) run_##name,
static const run_fn runs[VT_KERNEL_COUNT] = { VT_KERNEL_LIST(VT_KERNEL_RUN_PTR) };
#undef VT_KERNEL_RUN_PTR
#define VT_KERNEL_MEASURE_PTR(name, ...) measure_##name,
static const measure_fn measures[VT_KERNEL_COUNT] = { VT_KERNEL_LIST(VT_KERNEL_MEASURE_PTR) };
#undef VT_KERNEL_MEASURE_PTR

void vt_kernel_run(int k, void *const *op, const int64_t *ia, const float *fa) { runs[k](op, ia, fa); }

static size_t dtype_size(int dt) {
    switch (dt) {
        case VT_DT_F64:
        case VT_DT_I64: return 8;
        case VT_DT_U8: return 1;
        default: return 4;
    }
}

/* The dispatch point: run, or record (region, offset, bytes, access of every operand). */
static void exec_call(vt_model *m, int k, void *const *op, const int64_t *ia, const float *fa) {
    vt_recorder *r = m->arena.rec;
    if (!r) {
        runs[k](op, ia, fa);
        return;
    }
    const kinfo *K = &kernels[k];
    uint64_t len[VT_TRACE_MAX_OPS], bytes[VT_TRACE_MAX_OPS];
    uint8_t acc[VT_TRACE_MAX_OPS], dt[VT_TRACE_MAX_OPS];
    double flops = 0;
    measures[k](op, ia, fa, len, &flops);
    for (int i = 0; i < K->nops; i++) {
        bytes[i] = len[i] * dtype_size(K->ops[i].dtype);
        acc[i] = (uint8_t)K->ops[i].access;
        dt[i] = (uint8_t)K->ops[i].dtype;
    }
    int bad = vt_rec_call(r, k, op, bytes, acc, dt, K->nops, ia, K->nints, fa, K->nfloats, flops);
    if (bad >= 0)
        vt_rec_fail(r,
                    "recording: %s's operand %s (%llu bytes) lies in no region of the model, its arena or "
                    "the call's inputs",
                    K->name, K->ops[bad].name, (unsigned long long)bytes[bad]);
}

#define VT_KERNEL_ENTRY(name, ints, floats, ops, flops, call, doc)                                           \
    void vt_k_##name(vt_model *m_ VT_EACH(VT_OP_PARAM, ops) VT_EACH(VT_INT_PARAM, ints)                      \
                         VT_EACH(VT_FLT_PARAM, floats)) {                                                    \
        void *op_[VT_TRACE_MAX_OPS + 1] = { VT_EACH(VT_OP_PTR, ops) 0 };                                     \
        int64_t ia_[VT_TRACE_MAX_INTS + 1] = { VT_EACH(VT_ARG_VALUE, ints) 0 };                              \
        float fa_[VT_TRACE_MAX_FLOATS + 1] = { VT_EACH(VT_ARG_VALUE, floats) 0 };                            \
        exec_call(m_, VT_K_##name, op_, ia_, fa_);                                                           \
    }
VT_KERNEL_LIST(VT_KERNEL_ENTRY)
#undef VT_KERNEL_ENTRY

float *vt_zalloc(vt_model *m, size_t nfloats, const char *name, ...) {
    char text[64] = "";
    if (m->arena.rec) {
        va_list ap;
        va_start(ap, name);
        vsnprintf(text, sizeof text, name, ap);
        va_end(ap);
    }
    float *p = vt_arena_alloc(&m->arena, nfloats, "%s", text);
    if (p) vt_k_fill(m, p, (int64_t)nfloats, 0.0f);
    return p;
}

void vt_exec_mark(vt_model *m, int phase, int chain, int block) {
    vt_recorder *r = m->arena.rec;
    if (!r) return;
    r->phase = phase;
    r->chain = chain;
    r->block = block;
}

/* ---- replay ---- */

vt_status vt_trace_replay(const vt_trace *t, void *const bufs[VT_REG_COUNT]) {
    if (!t || !bufs) return vt_fail(VT_ERR_ARG, "vt_trace_replay: NULL argument");
    for (int r = 1; r < VT_REG_COUNT; r++)
        if (t->region_bytes[r] && !bufs[r])
            return vt_fail(VT_ERR_ARG,
                           "vt_trace_replay: the list addresses region %s (%llu bytes), no buffer given",
                           vt_region_name(r), (unsigned long long)t->region_bytes[r]);
    for (int i = 0; i < t->n; i++) {
        const vt_trace_entry *e = &t->e[i];
        if (e->kind != VT_TR_CALL) continue;
        if (e->kernel < 0 || e->kernel >= VT_KERNEL_COUNT)
            return vt_fail(VT_ERR_ARG, "vt_trace_replay: kernel %d", e->kernel);
        void *op[VT_TRACE_MAX_OPS + 1] = { 0 };
        for (int k = 0; k < e->nops; k++)
            op[k] = e->op[k].region ? (uint8_t *)bufs[e->op[k].region] + e->op[k].offset : NULL;
        runs[e->kernel](op, e->ints, e->floats);
    }
    return VT_OK;
}

/* ---- names ---- */

const char *vt_region_name(int r) {
    static const char *names[VT_REG_COUNT] = { "none",   "params", "grads",    "adam_m",   "adam_v",
                                               "arena",  "images", "idx_keep", "idx_mask", "mask",
                                               "labels", "douts",  "dimages",  "scalars" };
    return r >= 0 && r < VT_REG_COUNT ? names[r] : "?";
}
const char *vt_phase_name(int p) {
    static const char *names[] = { "forward", "recompute", "backward", "optimizer" };
    return p >= 0 && p < 4 ? names[p] : "?";
}
static const char *dtype_name(int dt) {
    switch (dt) {
        case VT_DT_F32: return "f32";
        case VT_DT_F64: return "f64";
        case VT_DT_I64: return "i64";
        case VT_DT_I32: return "i32";
        case VT_DT_U8: return "u8";
        default: return "?";
    }
}
static const char *access_name(int a) { return a == VT_ACC_R ? "r" : a == VT_ACC_W ? "w" : "rw"; }

/* Appends printf text to the buffer s (n of cap bytes used) of the function it is used in; text past
 * cap frees s and fails the function, naming put_what. */
#define PUT(...)                                                                                             \
    do {                                                                                                     \
        int w_ = snprintf(s + n, cap - n, __VA_ARGS__);                                                      \
        if (w_ < 0 || (size_t)w_ >= cap - n) {                                                               \
            free(s);                                                                                         \
            return vt_fail(VT_ERR_NOMEM, "%s too long", put_what);                                           \
        }                                                                                                    \
        n += (size_t)w_;                                                                                     \
    } while (0)

/* What the docs print of each kernel: a markdown row per kernel (name, operands with type,
 * access and length, integer and float arguments, semantics). docs/kernels.md holds this table
 * (tests/node/trace.test.mjs checks it is the engine's). */
vt_status vt_kernel_contract(char **out, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    if (!s) return vt_fail(VT_ERR_NOMEM, "out of memory");
    const char *put_what = "contract table";
    PUT("| kernel | operands (type access [length]) | ints | floats | FLOPs | semantics "
        "|\n|---|---|---|---|---|---|\n");
    for (int k = 0; k < VT_KERNEL_COUNT; k++) {
        const kinfo *K = &kernels[k];
        PUT("| `%s` | ", K->name);
        for (int i = 0; i < K->nops; i++)
            PUT("%s`%s` %s %s [%s]", i ? ", " : "", K->ops[i].name, dtype_name(K->ops[i].dtype),
                access_name(K->ops[i].access), K->ops[i].len);
        PUT(" | ");
        for (int i = 0; i < K->nints; i++) PUT("%s%s", i ? ", " : "", K->ints[i]);
        PUT(" | ");
        for (int i = 0; i < K->nfloats; i++) PUT("%s%s", i ? ", " : "", K->floats[i]);
        PUT(" | %s | %s |\n", K->flops, K->doc);
    }
    *out = s;
    *len = n;
    return VT_OK;
}

/* The same contract as data, for a backend that implements the list (web/webgpu/ replays a recorded
 * step): {"matmul_forward": {"ops": [["out", "f32", "w", "M * N"], ...], "ints": ["M", "K", "N"],
 * "floats": []}, ...} in list order (vtw_manifest carries it as "kernels"). The names, types and
 * lengths are identifiers and C expressions of kernel_list.h: nothing in them needs escaping. */
vt_status vt_kernel_contract_json(char **out, size_t *len) {
    size_t cap = 1 << 15, n = 0;
    char *s = malloc(cap);
    if (!s) return vt_fail(VT_ERR_NOMEM, "out of memory");
    const char *put_what = "contract JSON";
    PUT("{");
    for (int k = 0; k < VT_KERNEL_COUNT; k++) {
        const kinfo *K = &kernels[k];
        PUT("%s\"%s\": {\"ops\": [", k ? ", " : "", K->name);
        for (int i = 0; i < K->nops; i++)
            PUT("%s[\"%s\", \"%s\", \"%s\", \"%s\"]", i ? ", " : "", K->ops[i].name,
                dtype_name(K->ops[i].dtype), access_name(K->ops[i].access), K->ops[i].len);
        PUT("], \"ints\": [");
        for (int i = 0; i < K->nints; i++) PUT("%s\"%s\"", i ? ", " : "", K->ints[i]);
        PUT("], \"floats\": [");
        for (int i = 0; i < K->nfloats; i++) PUT("%s\"%s\"", i ? ", " : "", K->floats[i]);
        PUT("]}");
    }
    PUT("}");
    *out = s;
    *len = n;
    return VT_OK;
}
#undef PUT
