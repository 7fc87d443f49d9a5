/* trace.c: recording a training step or a call as data (vitrine.h's vt_trace_*), and printing the
 * recorded list -- as JSON for a backend or a page (format vitrine-trace/1, docs/kernels.md), and
 * as a summary for people: calls and FLOPs per kernel, what the policy re-computes, the arena's
 * peak, and per block what is stored, re-computed and freed. Recording runs the real call
 * (vt_train_step, vt_forward / vt_backward) with the model's arena in recording mode (record.h):
 * nothing of the model changes (no kernel runs; the generator and step count are restored). */
#include "objective.h"
#include "record.h"
#include "vit_internal.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- recording ---- */

static vt_status begin(vt_model *m, vt_recorder **out) {
    if (!m) return vt_fail(VT_ERR_ARG, "trace: model is NULL");
    if (m->arena.rec) return vt_fail(VT_ERR_STATE, "trace: the model is already recording");
    vt_recorder *r = vt_rec_new();
    if (!r) return vt_fail(VT_ERR_NOMEM, "out of memory starting a recording");
    vt_rec_region(r, VT_REG_PARAMS, m->pt.data, (uint64_t)m->pt.total * sizeof(float), 0);
    vt_rec_region(r, VT_REG_GRADS, m->pt.grad, (uint64_t)m->pt.gtotal * sizeof(float), 0);
    vt_rec_region(r, VT_REG_ADAM_M, m->opt.m, (uint64_t)m->opt.n * sizeof(float), 0);
    vt_rec_region(r, VT_REG_ADAM_V, m->opt.v, (uint64_t)m->opt.n * sizeof(float), 0);
    vt_rec_region(r, VT_REG_SCALARS, &m->sc, sizeof m->sc, 0);
    m->arena.rec = r;
    *out = r;
    return VT_OK;
}

/* Where the list leaves the call's outputs (a device reads them back from there). */
static void record_outputs(vt_model *m, vt_recorder *r) {
    vt_trace *t = r->t;
    int n = vt_output_count(m);
    for (int i = 0; i < n && i <= VT_MAX_DEPTH; i++) {
        int64_t sh[4] = { 0, 0, 0, 0 };
        int nd = 0;
        const float *y = vt_output(m, i, sh, &nd);
        uint64_t bytes = sizeof(float);
        for (int d = 0; d < nd; d++) bytes *= (uint64_t)sh[d];
        if (!y || !vt_rec_locate(r, y, bytes, &t->out[i].region, &t->out[i].offset))
            return; /* listed up to here */
        t->out[i].bytes = bytes;
        t->out[i].ndim = nd;
        memcpy(t->out[i].shape, sh, sizeof sh);
        t->nout = i + 1;
    }
}

static vt_status end(vt_model *m, vt_recorder *r, vt_status rc, const char *what, vt_trace **out) {
    if (!rc && m->last.have_fwd) record_outputs(m, r);
    m->arena.rec = NULL;
    m->last.have_fwd = 0; /* nothing was computed */
    if (rc) {
        vt_rec_abort(r);
        return rc;
    }
    vt_trace *t = r->t;
    snprintf(t->what, sizeof t->what, "%s, batch %d, grad checkpointing %s, %d thread%s", what,
             m->last.in.batch, m->policy.text, m->last.enc_run.lay.threads,
             m->last.enc_run.lay.threads == 1 ? "" : "s");
    /* the chains the call ran and their layouts */
    const vt_chain *cs[VT_CHAINS] = { 0 };
    int T[VT_CHAINS] = { 0 };
    vt_call_objective(m, m->last.fn)->chains(m, m->last.fn, &m->last.in, cs, T);
    const vt_chain_run *runs[] = { &m->last.enc_run, &m->last.dec_run, &m->last.head_run };
    for (int k = 0; k < VT_CHAINS && cs[k]; k++)
        for (size_t j = 0; j < sizeof runs / sizeof *runs; j++)
            if (runs[j]->c == cs[k]) {
                t->lay[k] = runs[j]->lay;
                t->depth[k] = cs[k]->depth;
                snprintf(t->chain_name[k], sizeof t->chain_name[k], "%s", cs[k]->tag);
                t->nchains = k + 1;
            }
    *out = vt_rec_finish(r);
    return *out ? VT_OK : VT_ERR_STATE;
}

vt_status vt_trace_train_step(vt_model *m, const float *images, const int32_t *labels, int batch,
                              vt_trace **out) {
    if (!out) return vt_fail(VT_ERR_ARG, "vt_trace_train_step: out is NULL");
    *out = NULL;
    vt_recorder *r = NULL;
    vt_status rc = begin(m, &r);
    if (rc) return rc;
    vt_rng saved = m->train.rng; /* the masks it draws are the next step's: drawn again by it */
    rc =
        labels ? vt_train_step_labels(m, images, labels, batch, NULL) : vt_train_step(m, images, batch, NULL);
    m->train.rng = saved;
    return end(m, r, rc, "training step", out);
}

vt_status vt_trace_call(vt_model *m, vt_fn fn, const vt_inputs *in, int backward, const float *const *douts,
                        int n_douts, float *dimages, int param_grads, vt_trace **out) {
    if (!out) return vt_fail(VT_ERR_ARG, "vt_trace_call: out is NULL");
    *out = NULL;
    vt_recorder *r = NULL;
    vt_status rc = begin(m, &r);
    if (rc) return rc;
    rc = vt_forward(m, fn, in, backward);
    if (!rc && backward) rc = vt_backward(m, douts, n_douts, dimages, param_grads);
    static const char *names[] = {
        "encode", "forward", "forward_intermediates", "forward_intermediates(norm)", "loss", "timm forward"
    };
    char what[96];
    snprintf(what, sizeof what, "%s%s", (unsigned)fn < 6 ? names[fn] : "?", backward ? " + backward" : "");
    return end(m, r, rc, what, out);
}

int vt_trace_output_count(const vt_trace *t) { return t ? t->nout : 0; }
uint64_t vt_trace_output_bytes(const vt_trace *t, int i) {
    return t && i >= 0 && i < t->nout ? t->out[i].bytes : 0;
}

/* ---- text ---- */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;
static void put(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && (size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap - b->n <= (size_t)w) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
}
static vt_status finish(sbuf *b, char **out, size_t *len) {
    if (b->oom || !b->s) {
        free(b->s);
        return vt_fail(VT_ERR_NOMEM, "out of memory printing a trace");
    }
    *out = b->s;
    if (len) *len = b->n;
    return VT_OK;
}

static const char *access_name(int a) { return a == VT_ACC_R ? "r" : a == VT_ACC_W ? "w" : "rw"; }
static const char *dtype_name(int dt) {
    switch (dt) {
        case 0: return "f32";
        case 3: return "f64";
        case 4: return "i64";
        case 5: return "i32";
        case 7: return "u8";
        default: return "?";
    }
}
static const char *store_name(int st) {
    static const char *names[] = { "full", "selective", "input", "none" };
    return st >= 0 && st < 4 ? names[st] : "?";
}

vt_status vt_trace_json(const vt_trace *t, char **out, size_t *len) {
    if (!t || !out) return vt_fail(VT_ERR_ARG, "vt_trace_json: NULL argument");
    sbuf b = { 0 };
    put(&b, "{\"format\": \"vitrine-trace/1\", \"what\": \"%s\",\n \"kernels\": [", t->what);
    for (int k = 0; k < vt_kernel_count(); k++) put(&b, "%s\"%s\"", k ? ", " : "", vt_kernel_name(k));
    put(&b, "],\n \"regions\": {");
    for (int r = 1, first = 1; r < VT_REG_COUNT; r++)
        if (t->region_bytes[r]) {
            put(&b, "%s\"%s\": %llu", first ? "" : ", ", vt_region_name(r),
                (unsigned long long)t->region_bytes[r]);
            first = 0;
        }
    put(&b, "}, \"arena_planned\": %llu,\n \"outputs\": [", (unsigned long long)t->arena_planned);
    for (int i = 0; i < t->nout; i++) {
        put(&b, "%s[\"%s\", %llu, %llu, [", i ? ", " : "", vt_region_name(t->out[i].region),
            (unsigned long long)t->out[i].offset, (unsigned long long)t->out[i].bytes);
        for (int d = 0; d < t->out[i].ndim; d++)
            put(&b, "%s%lld", d ? ", " : "", (long long)t->out[i].shape[d]);
        put(&b, "]]");
    }
    put(&b, "],\n \"chains\": [");
    for (int k = 0; k < t->nchains; k++) {
        put(&b, "%s{\"name\": \"%s\", \"depth\": %d, \"segment\": %d, \"threads\": %d, \"store\": [",
            k ? ", " : "", t->chain_name[k], t->depth[k], t->lay[k].seg, t->lay[k].threads);
        for (int i = 0; i < t->depth[k]; i++)
            put(&b, "%s\"%s\"", i ? ", " : "", store_name(t->lay[k].store[i]));
        put(&b, "]}");
    }
    put(&b, "],\n \"entries\": [\n");
    for (int i = 0; i < t->n; i++) {
        const vt_trace_entry *e = &t->e[i];
        put(&b, "  {");
        if (e->kind == VT_TR_CALL) {
            put(&b,
                "\"call\": \"%s\", \"phase\": \"%s\", \"chain\": %d, \"block\": %d, \"flops\": %.17g, "
                "\"ints\": [",
                vt_kernel_name(e->kernel), vt_phase_name(e->phase), e->chain, e->block, e->flops);
            for (int k = 0; k < e->nints; k++) put(&b, "%s%lld", k ? ", " : "", (long long)e->ints[k]);
            put(&b, "], \"floats\": [");
            for (int k = 0; k < e->nfloats; k++) put(&b, "%s%.9g", k ? ", " : "", e->floats[k]);
            put(&b, "], \"ops\": [");
            for (int k = 0; k < e->nops; k++) {
                const vt_trace_operand *o = &e->op[k];
                if (!o->region)
                    put(&b, "%snull", k ? ", " : "");
                else
                    put(&b, "%s[\"%s\", %llu, %llu, \"%s\", \"%s\"]", k ? ", " : "",
                        vt_region_name(o->region), (unsigned long long)o->offset,
                        (unsigned long long)o->bytes, access_name(o->access), dtype_name(o->dtype));
            }
            put(&b, "]");
        } else if (e->kind == VT_TR_ALLOC) {
            put(&b,
                "\"alloc\": \"%s\", \"offset\": %llu, \"bytes\": %llu, \"phase\": \"%s\", \"chain\": %d, "
                "\"block\": %d",
                e->name, (unsigned long long)e->offset, (unsigned long long)e->bytes, vt_phase_name(e->phase),
                e->chain, e->block);
        } else if (e->kind == VT_TR_RESET) {
            put(&b, "\"reset\": %llu, \"phase\": \"%s\"", (unsigned long long)e->offset,
                vt_phase_name(e->phase));
        } else {
            put(&b, "\"release\": %llu, \"phase\": \"%s\", \"chain\": %d, \"block\": %d",
                (unsigned long long)e->bytes, vt_phase_name(e->phase), e->chain, e->block);
        }
        put(&b, "}%s\n", i + 1 < t->n ? "," : "");
    }
    put(&b, " ]}\n");
    return finish(&b, out, len);
}

/* ---- the summary ---- */

/* the live arena buffers while the list is walked (a stack: RESET pops) */
typedef struct {
    uint64_t off, bytes;
    const char *name;
} live_buf;

/* the last component of a block buffer's name: enc.slot.0.qkv -> qkv, enc.blocks.3.ln1.mean -> ln1.mean */
static const char *field_of(const char *name, const char *tag) {
    size_t n = strlen(tag);
    if (strncmp(name, tag, n) || name[n] != '.') return name;
    const char *s = name + n + 1;
    const char *dot = strchr(s, '.');
    if (!dot) return s;
    s = dot + 1; /* after blocks / slot / scratch */
    if (*s >= '0' && *s <= '9') {
        dot = strchr(s, '.');
        s = dot ? dot + 1 : s;
    }
    return s;
}

static void add_name(char *list, size_t cap, const char *name) {
    size_t n = strlen(name), L = strlen(list);
    for (const char *p = list; (p = strstr(p, name)); p++) /* already listed */
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return;
    if (L + n + 2 < cap) snprintf(list + L, cap - L, "%s%s", L ? " " : "", name);
}

static void fmt_bytes(char *buf, size_t len, double b) {
    if (b >= 1048576.0)
        snprintf(buf, len, "%.2f MiB", b / 1048576.0);
    else if (b >= 1024.0)
        snprintf(buf, len, "%.1f KiB", b / 1024.0);
    else
        snprintf(buf, len, "%.0f B", b);
}

vt_status vt_trace_summary(const vt_trace *t, char **out, size_t *len) {
    if (!t || !out) return vt_fail(VT_ERR_ARG, "vt_trace_summary: NULL argument");
    int nk = vt_kernel_count();
    double *kflops = calloc((size_t)nk, sizeof *kflops), phase_flops[4] = { 0 };
    long *kcalls = calloc((size_t)nk, sizeof *kcalls);
    live_buf *live = malloc(((size_t)t->n + 1) * sizeof *live);
    /* per chain and block: stored bytes and names, re-computed names and FLOPs, released bytes */
    typedef struct {
        char stored[512], recomputed[512];
        uint64_t stored_bytes, released;
        double reflops;
    } blockinfo;
    blockinfo *bi = calloc((size_t)VT_CHAINS * VT_MAX_DEPTH, sizeof *bi);
    if (!kflops || !kcalls || !live || !bi) {
        free(kflops), free(kcalls), free(live), free(bi);
        return vt_fail(VT_ERR_NOMEM, "out of memory summarising a trace");
    }
    int nlive = 0, ncalls = 0;
    uint64_t peak = 0;
    for (int i = 0; i < t->n; i++) {
        const vt_trace_entry *e = &t->e[i];
        int cb = e->chain >= 0 && e->chain < VT_CHAINS && e->block >= 0 && e->block < VT_MAX_DEPTH;
        blockinfo *B = cb ? &bi[e->chain * VT_MAX_DEPTH + e->block] : NULL;
        if (e->kind == VT_TR_ALLOC) {
            live[nlive++] = (live_buf){ e->offset, e->bytes, e->name };
            if (e->offset + e->bytes > peak) peak = e->offset + e->bytes;
            /* what a block keeps for its backward: its named buffers allocated in the forward */
            for (int k = 0; k < t->nchains; k++) {
                char pfx[32];
                int blk = -1, used = 0;
                snprintf(pfx, sizeof pfx, "%s.blocks.", t->chain_name[k]);
                if (e->phase == VT_PHASE_FORWARD && !strncmp(e->name, pfx, strlen(pfx)) &&
                    sscanf(e->name + strlen(pfx), "%d.%n", &blk, &used) == 1 && used && blk >= 0 &&
                    blk < VT_MAX_DEPTH) {
                    blockinfo *S = &bi[k * VT_MAX_DEPTH + blk];
                    S->stored_bytes += e->bytes;
                    add_name(S->stored, sizeof S->stored, e->name + strlen(pfx) + used);
                }
            }
        } else if (e->kind == VT_TR_RESET) {
            while (nlive && live[nlive - 1].off >= e->offset) nlive--;
        } else if (e->kind == VT_TR_RELEASE) {
            if (B) B->released += e->bytes;
        } else {
            ncalls++;
            kcalls[e->kernel]++;
            kflops[e->kernel] += e->flops;
            if (e->phase >= 0 && e->phase < 4) phase_flops[e->phase] += e->flops;
            if (e->phase == VT_PHASE_RECOMPUTE && B) {
                B->reflops += e->flops;
                for (int k = 0; k < e->nops; k++) { /* what the re-computation writes */
                    const vt_trace_operand *o = &e->op[k];
                    if (o->region != VT_REG_ARENA || o->access == VT_ACC_R) continue;
                    for (int j = nlive - 1; j >= 0; j--)
                        if (o->offset >= live[j].off && o->offset < live[j].off + live[j].bytes) {
                            const char *f = field_of(live[j].name, t->chain_name[e->chain]);
                            if (!strstr(f, "scratch"))
                                add_name(B->recomputed, sizeof B->recomputed, f); /* not kernel scratch */
                            break;
                        }
                }
            }
        }
    }
    sbuf b = { 0 };
    double total = phase_flops[0] + phase_flops[1] + phase_flops[2] + phase_flops[3];
    char pk[32], pl[32];
    fmt_bytes(pk, sizeof pk, (double)peak);
    fmt_bytes(pl, sizeof pl, (double)t->arena_planned);
    put(&b, "%s\n", t->what);
    put(&b,
        "  %d kernel calls, %.3f GFLOP: forward %.3f, re-computed %.3f (%.1f%% of the forward), backward "
        "%.3f, "
        "optimizer %.3f\n",
        ncalls, total / 1e9, phase_flops[0] / 1e9, phase_flops[1] / 1e9,
        phase_flops[0] > 0 ? 100.0 * phase_flops[1] / phase_flops[0] : 0.0, phase_flops[2] / 1e9,
        phase_flops[3] / 1e9);
    put(&b, "  activation arena: peak %s (%llu bytes), planned %s\n\n", pk, (unsigned long long)peak, pl);
    put(&b, "  %-24s %7s %12s %7s\n", "kernel", "calls", "MFLOP", "share");
    for (int k = 0; k < nk; k++)
        if (kcalls[k])
            put(&b, "  %-24s %7ld %12.3f %6.1f%%\n", vt_kernel_name(k), kcalls[k], kflops[k] / 1e6,
                total > 0 ? 100.0 * kflops[k] / total : 0.0);
    for (int k = 0; k < t->nchains; k++) {
        put(&b, "\n  chain %s: %d blocks, segment %d\n", t->chain_name[k], t->depth[k], t->lay[k].seg);
        put(&b, "  %5s %-9s %11s  %-40s %10s  %s\n", "block", "layout", "kept", "kept for the backward",
            "re-MFLOP", "re-computed in the backward");
        for (int i = 0; i < t->depth[k]; i++) {
            const blockinfo *B = &bi[k * VT_MAX_DEPTH + i];
            char kb[32];
            fmt_bytes(kb, sizeof kb, (double)B->stored_bytes);
            put(&b, "  %5d %-9s %11s  %-40s %10.3f  %s\n", i, store_name(t->lay[k].store[i]), kb,
                B->stored[0] ? B->stored : "-", B->reflops / 1e6, B->recomputed[0] ? B->recomputed : "-");
        }
        put(&b, "  freed as each block's backward ends:");
        for (int i = t->depth[k] - 1; i >= 0; i--) {
            char fb[32];
            fmt_bytes(fb, sizeof fb, (double)bi[k * VT_MAX_DEPTH + i].released);
            put(&b, " %d: %s%s", i, fb, i ? "," : "\n");
        }
    }
    free(kflops), free(kcalls), free(live), free(bi);
    return finish(&b, out, len);
}
