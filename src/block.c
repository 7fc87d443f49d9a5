/* block.c: chains of transformer blocks, forward and backward, with exact checkpointing.
 *
 * A block (timm Block, lightly MaskedCausalBlock, or the AIM head's residual MLP block):
 *   xm = x  + ls1 * proj(attention(qkv(norm1(x))))      (absent in MLP-only blocks: xm = x)
 *   xo = xm + ls2 * fc2(gelu(fc1(norm2(xm))))
 * Checkpointing never changes a bit: a re-computation calls the very same block_forward (same
 * kernels, same order, same inputs) that the first forward ran. Which activations are kept is a
 * per-block storage mode (VT_STORE_*), derived from the policy in policy.c. The memory plan
 * for all of this is vt_chain_plan at the bottom, written to mirror the allocations here. */
#include "exec.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters ------------------------------------------------------------------------------ */

vt_status vt_chain_build(vt_model *m, vt_chain *c, const char *prefix, int depth, int D, int H, int F,
                         const vt_block_opts *o, int trainable, int id, const char *tag) {
    memset(c, 0, sizeof *c);
    if (depth > VT_MAX_DEPTH) return vt_fail(VT_ERR_ARG, "depth %d exceeds %d", depth, VT_MAX_DEPTH);
    c->depth = depth;
    c->D = D;
    c->H = H;
    c->hd = H ? D / H : 0;
    c->F = F;
    c->has_attn = o->has_attn;
    c->qkv_bias = o->qkv_bias;
    c->proj_bias = o->proj_bias;
    c->mlp_bias = o->mlp_bias;
    c->qk_norm = o->qk_norm;
    c->layerscale = o->layerscale;
    c->attn_norm = o->has_attn && o->attn_norm;
    c->mlp_norm = o->mlp_norm;
    c->act = o->act;
    c->norm = o->norm == VT_NORM_RMS ? VT_NORM_RMS : VT_NORM_LAYER;
    c->eps = o->eps;
    c->id = id;
    c->tag = tag;
    c->blk = calloc((size_t)(depth ? depth : 1), sizeof *c->blk);
    if (!c->blk) return vt_fail(VT_ERR_NOMEM, "out of memory: %zu bytes", depth * sizeof *c->blk);
    int rc = 0, t = trainable, hd = c->hd, ln = c->norm == VT_NORM_LAYER; /* RmsNorm: weight only */
    for (int i = 0; i < depth && !rc; i++) {
        vt_block_params *b = &c->blk[i];
        memset(b, 0xff, sizeof *b); /* every index -1 = absent */
        char bp[VT_NAME_MAX + 16];  /* blocks.<i>. (the AIM head's MLP blocks are blocks.<1+i>.) */
        snprintf(bp, sizeof bp, "%s%d.", prefix, c->has_attn ? i : i + 1);
        if (c->has_attn) { /* timm's registration order: norm1, attn (qkv, q_norm, k_norm, norm, proj) */
            rc |= vt_param_add(m, &b->n1w, bp, "norm1.weight", 1, D, 0, 0, 0, t);
            if (ln) rc |= vt_param_add(m, &b->n1b, bp, "norm1.bias", 1, D, 0, 0, 0, t);
            rc |= vt_param_add(m, &b->qkvw, bp, "attn.qkv.weight", 2, 3 * D, D, 0, 0, t);
            if (c->qkv_bias) rc |= vt_param_add(m, &b->qkvb, bp, "attn.qkv.bias", 1, 3 * D, 0, 0, 0, t);
            if (c->qk_norm) {
                rc |= vt_param_add(m, &b->qnw, bp, "attn.q_norm.weight", 1, hd, 0, 0, 0, t);
                if (ln) rc |= vt_param_add(m, &b->qnb, bp, "attn.q_norm.bias", 1, hd, 0, 0, 0, t);
                rc |= vt_param_add(m, &b->knw, bp, "attn.k_norm.weight", 1, hd, 0, 0, 0, t);
                if (ln) rc |= vt_param_add(m, &b->knb, bp, "attn.k_norm.bias", 1, hd, 0, 0, 0, t);
            }
            if (c->attn_norm) {
                rc |= vt_param_add(m, &b->anw, bp, "attn.norm.weight", 1, D, 0, 0, 0, t);
                if (ln) rc |= vt_param_add(m, &b->anb, bp, "attn.norm.bias", 1, D, 0, 0, 0, t);
            }
            rc |= vt_param_add(m, &b->projw, bp, "attn.proj.weight", 2, D, D, 0, 0, t);
            if (c->proj_bias) rc |= vt_param_add(m, &b->projb, bp, "attn.proj.bias", 1, D, 0, 0, 0, t);
            if (c->layerscale) rc |= vt_param_add(m, &b->ls1, bp, "ls1.gamma", 1, D, 0, 0, 0, t);
            rc |= vt_param_add(m, &b->n2w, bp, "norm2.weight", 1, D, 0, 0, 0, t);
            if (ln) rc |= vt_param_add(m, &b->n2b, bp, "norm2.bias", 1, D, 0, 0, 0, t);
        } else { /* AIMPredictionHeadBlock: blocks.<1+i>.norm / .mlp */
            rc |= vt_param_add(m, &b->n2w, bp, "norm.weight", 1, D, 0, 0, 0, t);
            if (ln) rc |= vt_param_add(m, &b->n2b, bp, "norm.bias", 1, D, 0, 0, 0, t);
        }
        /* Mlp: fc1, act, norm, fc2 */
        rc |= vt_param_add(m, &b->fc1w, bp, "mlp.fc1.weight", 2, F, D, 0, 0, t);
        if (c->mlp_bias) rc |= vt_param_add(m, &b->fc1b, bp, "mlp.fc1.bias", 1, F, 0, 0, 0, t);
        if (c->mlp_norm) {
            rc |= vt_param_add(m, &b->mnw, bp, "mlp.norm.weight", 1, F, 0, 0, 0, t);
            if (ln) rc |= vt_param_add(m, &b->mnb, bp, "mlp.norm.bias", 1, F, 0, 0, 0, t);
        }
        rc |= vt_param_add(m, &b->fc2w, bp, "mlp.fc2.weight", 2, D, F, 0, 0, t);
        if (c->mlp_bias) rc |= vt_param_add(m, &b->fc2b, bp, "mlp.fc2.bias", 1, D, 0, 0, 0, t);
        if (c->layerscale && c->has_attn) rc |= vt_param_add(m, &b->ls2, bp, "ls2.gamma", 1, D, 0, 0, 0, t);
    }
    return rc ? (rc < 0 ? rc : VT_ERR_ARG) : VT_OK;
}

/* ---- norms and activations: the kind chosen here ----------------------------------------------- */

void vt_norm_forward(vt_model *m, int kind, float *out, float *mean, float *rstd, const float *inp,
                     const float *w, const float *b, int64_t M, int64_t D, float eps) {
    if (kind == VT_NORM_RMS)
        vt_k_rmsnorm_forward(m, out, rstd, inp, w, M, D, eps);
    else
        vt_k_layernorm_forward(m, out, mean, rstd, inp, w, b, M, D, eps);
}
void vt_norm_backward(vt_model *m, int kind, float *dinp, float *dw, float *db, const float *dout,
                      const float *inp, const float *w, const float *mean, const float *rstd, int64_t M,
                      int64_t D) {
    if (kind == VT_NORM_RMS)
        vt_k_rmsnorm_backward(m, dinp, dw, dout, inp, w, rstd, M, D);
    else
        vt_k_layernorm_backward(m, dinp, dw, db, dout, inp, w, mean, rstd, M, D);
}
double vt_norm_flops(int kind, double M, double D) { return (kind == VT_NORM_RMS ? 6.0 : 8.0) * M * D; }

static void act_forward(vt_model *m, int act, float *out, const float *inp, int64_t n) {
    if (act == VT_ACT_QUICK_GELU)
        vt_k_quick_gelu_forward(m, out, inp, n);
    else if (act == VT_ACT_GELU_TANH)
        vt_k_gelu_tanh_forward(m, out, inp, n);
    else
        vt_k_gelu_forward(m, out, inp, n);
}
static void act_backward(vt_model *m, int act, float *dinp, const float *inp, const float *dout, int64_t n) {
    if (act == VT_ACT_QUICK_GELU)
        vt_k_quick_gelu_backward(m, dinp, inp, dout, n);
    else if (act == VT_ACT_GELU_TANH)
        vt_k_gelu_tanh_backward(m, dinp, inp, dout, n);
    else
        vt_k_gelu_backward(m, dinp, inp, dout, n);
}
static double act_flops(int act) { return act == VT_ACT_QUICK_GELU ? 20.0 : 30.0; }

void vt_chain_free(vt_chain *c) {
    free(c->blk);
    c->blk = NULL;
}

/* ---- activation fields ------------------------------------------------------------------------- */

enum {
    F_LN1 = 1 << 0,
    F_QKV = 1 << 1,
    F_QKN = 1 << 2,
    F_ATT = 1 << 3,
    F_AO = 1 << 4,
    F_PO = 1 << 5,
    F_XM = 1 << 6,
    F_LN2 = 1 << 7,
    F_H = 1 << 8,
    F_HG = 1 << 9,
    F_FO = 1 << 10,
    F_AN = 1 << 11,
    F_MN = 1 << 12,
};
/* selective keeps the matmul outputs that are costly to redo (qkv, fc1) and LayerScale's
 * branch outputs; everything else (norms, attention probabilities and output, the residual
 * sum, GELU output) is re-computed from them. */
static int fields_all(const vt_chain *c) {
    int f = F_LN2 | F_H | F_HG;
    if (c->has_attn) f |= F_LN1 | F_QKV | F_ATT | F_AO | F_XM;
    if (c->has_attn && c->qk_norm) f |= F_QKN;
    if (c->layerscale) f |= F_FO | (c->has_attn ? F_PO : 0);
    if (c->attn_norm) f |= F_AN;
    if (c->mlp_norm) f |= F_MN;
    return f;
}
static int fields_selective(const vt_chain *c) { return fields_all(c) & (F_QKV | F_H | F_PO | F_FO); }

/* Floats of each field (one allocation each, rounded like the arena rounds). */
static uint64_t fields_floats(const vt_chain *c, int B, int T, int f) {
    uint64_t M = (uint64_t)B * T, D = c->D, H = c->H, F = c->F, n = 0;
    if (f & F_LN1) n += vt_round(M * D) + 2 * vt_round(M);
    if (f & F_QKV) n += vt_round(3 * M * D);
    if (f & F_QKN) n += vt_round(2 * M * D) + 2 * vt_round(2 * M * H);
    if (f & F_ATT) n += vt_round((uint64_t)B * H * T * T);
    if (f & F_AO) n += vt_round(M * D);
    if (f & F_AN) n += vt_round(M * D) + 2 * vt_round(M);
    if (f & F_PO) n += vt_round(M * D);
    if (f & F_XM) n += vt_round(M * D);
    if (f & F_LN2) n += vt_round(M * D) + 2 * vt_round(M);
    if (f & F_H) n += vt_round(M * F);
    if (f & F_HG) n += vt_round(M * F);
    if (f & F_MN) n += vt_round(M * F) + 2 * vt_round(M);
    if (f & F_FO) n += vt_round(M * D);
    return n;
}

/* One buffer of a block's activations, named <tag>.<what>[.<idx>].<field> (idx < 0: none) for
 * the recorded list: enc.blocks.3.att, enc.scratch.h, dec.slot.0.qkv */
static float *falloc(vt_arena *a, size_t n, const vt_chain *c, const char *what, int idx, const char *field) {
    return idx >= 0 ? vt_arena_alloc(a, n, "%s.%s.%d.%s", c->tag, what, idx, field)
                    : vt_arena_alloc(a, n, "%s.%s.%s", c->tag, what, field);
}

/* Allocates the fields in f (same order and sizes as fields_floats). */
static int fields_alloc(vt_arena *a, const vt_chain *c, int B, int T, int f, vt_block_acts *x,
                        const char *what, int idx) {
    size_t M = (size_t)B * T, D = c->D, H = c->H, F = c->F;
#define A(n, field) falloc(a, (n), c, what, idx, field)
    if (f & F_LN1) {
        x->ln1 = A(M * D, "ln1");
        x->ln1m = A(M, "ln1.mean");
        x->ln1r = A(M, "ln1.rstd");
    }
    if (f & F_QKV) x->qkv = A(3 * M * D, "qkv");
    if (f & F_QKN) {
        x->qkn = A(2 * M * D, "qk_norm");
        x->qkm = A(2 * M * H, "qk_norm.mean");
        x->qkr = A(2 * M * H, "qk_norm.rstd");
    }
    if (f & F_ATT) x->att = A((size_t)B * H * T * T, "att");
    if (f & F_AO) x->ao = A(M * D, "attn_out");
    if (f & F_AN) {
        x->an = A(M * D, "attn_norm");
        x->anm = A(M, "attn_norm.mean");
        x->anr = A(M, "attn_norm.rstd");
    }
    if (f & F_PO) x->po = A(M * D, "proj_out");
    if (f & F_XM) x->xm = A(M * D, "mid");
    if (f & F_LN2) {
        x->ln2 = A(M * D, "ln2");
        x->ln2m = A(M, "ln2.mean");
        x->ln2r = A(M, "ln2.rstd");
    }
    if (f & F_H) x->h = A(M * F, "fc1_out");
    if (f & F_HG) x->hg = A(M * F, "gelu_out");
    if (f & F_MN) {
        x->hn = A(M * F, "mlp_norm");
        x->hnm = A(M, "mlp_norm.mean");
        x->hnr = A(M, "mlp_norm.rstd");
    }
    if (f & F_FO) x->fo = A(M * D, "fc2_out");
#undef A
    return a->overflow ? vt_arena_overflow(a) : VT_OK;
}

/* Copies into dst the fields of src selected by f (pointers only). */
static void fields_take(vt_block_acts *dst, const vt_block_acts *src, int f) {
    if (f & F_LN1) {
        dst->ln1 = src->ln1;
        dst->ln1m = src->ln1m;
        dst->ln1r = src->ln1r;
    }
    if (f & F_QKV) dst->qkv = src->qkv;
    if (f & F_QKN) {
        dst->qkn = src->qkn;
        dst->qkm = src->qkm;
        dst->qkr = src->qkr;
    }
    if (f & F_ATT) dst->att = src->att;
    if (f & F_AO) dst->ao = src->ao;
    if (f & F_AN) {
        dst->an = src->an;
        dst->anm = src->anm;
        dst->anr = src->anr;
    }
    if (f & F_PO) dst->po = src->po;
    if (f & F_XM) dst->xm = src->xm;
    if (f & F_LN2) {
        dst->ln2 = src->ln2;
        dst->ln2m = src->ln2m;
        dst->ln2r = src->ln2r;
    }
    if (f & F_H) dst->h = src->h;
    if (f & F_HG) dst->hg = src->hg;
    if (f & F_MN) {
        dst->hn = src->hn;
        dst->hnm = src->hnm;
        dst->hnr = src->hnr;
    }
    if (f & F_FO) dst->fo = src->fo;
}

/* ---- one block ----------------------------------------------------------------------------------- */

/* Forward of block i. `have` = fields already computed (kept by selective checkpointing): their
 * producing steps are skipped. xo may be NULL (re-computation that needs only the internals).
 * ascr: the attention kernel's scratch (attn_scratch_floats). */
static void block_forward(vt_model *m, const vt_chain *c, int i, const vt_block_acts *a, const float *x,
                          float *xo, float *ascr, int B, int T, int nt, const uint8_t *cmask, int have) {
    const vt_block_params *p = &c->blk[i];
    int M = B * T, D = c->D, F = c->F, H = c->H, hd = c->hd;
    const float *xm = x;
    if (c->has_attn) {
        vt_norm_forward(m, c->norm, a->ln1, a->ln1m, a->ln1r, x, vt_P(m, p->n1w), vt_P(m, p->n1b), M, D,
                        c->eps);
        if (!(have & F_QKV))
            vt_k_matmul_forward(m, a->qkv, a->ln1, vt_P(m, p->qkvw), vt_P(m, p->qkvb), M, D, 3 * D);
        const float *q = a->qkv, *k = a->qkv + D;
        int qk_rs = 3 * D;
        if (c->qk_norm) { /* a norm over head_dim of each (token, head) of q and of k */
            float *qn = a->qkn, *kn = a->qkn + (size_t)M * D;
            vt_k_copy2d(m, qn, a->qkv, M, D, D, 3 * D);     /* q of every head out of the fused rows */
            vt_k_copy2d(m, kn, a->qkv + D, M, D, D, 3 * D); /* k */
            vt_norm_forward(m, c->norm, qn, a->qkm, a->qkr, qn, vt_P(m, p->qnw), vt_P(m, p->qnb),
                            (int64_t)M * H, hd, c->eps);
            vt_norm_forward(m, c->norm, kn, a->qkm + (size_t)M * H, a->qkr + (size_t)M * H, kn,
                            vt_P(m, p->knw), vt_P(m, p->knb), (int64_t)M * H, hd, c->eps);
            q = qn;
            k = kn;
            qk_rs = D;
        }
        vt_k_attention_forward(m, a->ao, a->att, ascr, q, k, a->qkv + 2 * D, cmask, qk_rs, 3 * D, B, T, H, hd,
                               nt, 1.0f / sqrtf((float)hd));
        const float *pin = a->ao; /* proj's input: attn.norm(ao) with scale_attn_norm */
        if (c->attn_norm) {
            vt_norm_forward(m, c->norm, a->an, a->anm, a->anr, a->ao, vt_P(m, p->anw), vt_P(m, p->anb), M, D,
                            c->eps);
            pin = a->an;
        }
        if (c->layerscale) { /* xm = x + ls1 * proj(pin) */
            if (!(have & F_PO))
                vt_k_matmul_forward(m, a->po, pin, vt_P(m, p->projw), vt_P(m, p->projb), M, D, D);
            vt_k_layerscale_forward(m, a->xm, x, vt_P(m, p->ls1), a->po, M, D);
        } else { /* xm = x + proj(pin) */
            vt_k_matmul_forward(m, a->xm, pin, vt_P(m, p->projw), vt_P(m, p->projb), M, D, D);
            vt_k_add2d(m, a->xm, x, 1, (int64_t)M * D, 0, 0);
        }
        xm = a->xm;
    }
    vt_norm_forward(m, c->norm, a->ln2, a->ln2m, a->ln2r, xm, vt_P(m, p->n2w), vt_P(m, p->n2b), M, D, c->eps);
    if (!(have & F_H)) vt_k_matmul_forward(m, a->h, a->ln2, vt_P(m, p->fc1w), vt_P(m, p->fc1b), M, D, F);
    act_forward(m, c->act, a->hg, a->h, (int64_t)M * F);
    const float *fin = a->hg; /* fc2's input: mlp.norm(hg) with scale_mlp_norm */
    if (c->mlp_norm) {
        vt_norm_forward(m, c->norm, a->hn, a->hnm, a->hnr, a->hg, vt_P(m, p->mnw), vt_P(m, p->mnb), M, F,
                        c->eps);
        fin = a->hn;
    }
    if (c->layerscale && c->has_attn) { /* fo is needed by the backward (d ls2) even without xo */
        if (!(have & F_FO)) vt_k_matmul_forward(m, a->fo, fin, vt_P(m, p->fc2w), vt_P(m, p->fc2b), M, F, D);
        if (!xo) return;
        vt_k_layerscale_forward(m, xo, xm, vt_P(m, p->ls2), a->fo, M, D);
    } else {
        if (!xo) return;
        vt_k_matmul_forward(m, xo, fin, vt_P(m, p->fc2w), vt_P(m, p->fc2b), M, F, D);
        vt_k_add2d(m, xo, xm, 1, (int64_t)M * D, 0, 0);
    }
}

/* Backward scratch of one block (allocated once per chain backward). */
typedef struct {
    float *A;         /* (M, max(F, 3D)): d hidden, then d qkv */
    float *A2;        /* scale_mlp_norm: (rows, F) d of the activation's output */
    float *Bb;        /* (M, D): d norm2 out, then d attention out, then d norm1 out */
    float *C;         /* (M, D): LayerScale branch gradients */
    float *N;         /* scale_attn_norm: (M, D) d attention out (through attn.norm) */
    float *E, *R, *Z; /* qk_norm: d normalised q|k, raw q|k, d raw q|k (M, 2D each) */
    float *attn;      /* attention kernel scratch (attn_scratch_floats), also serves the
                     * re-computing forwards */
    size_t rows;      /* token rows per call of the MLP backward (mlp_rows) */
} bwd_scratch;

/* The attention kernels' scratch (0 for MLP-only chains). */
static uint64_t attn_scratch_floats(const vt_chain *c, int T, int nt) {
    return c->has_attn ? vt_attention_scratch_floats(T, c->hd, nt) : 0;
}

/* The MLP's backward runs VT_MLP_ROWS token rows at a time, so that its (rows, F) hidden-layer
 * gradient never needs a (M, F) buffer (and stays in a CPU's cache); A holds that, then the
 * attention's (M, 3D) d qkv. A layout of whole rows (vt_model_set_whole_rows: a device that
 * parallelises inside one call) runs all M rows in one call and holds (M, F). */
#define VT_MLP_ROWS 64
static uint64_t mlp_rows(const vt_chain_layout *l, uint64_t M) {
    return l->whole_rows || M < VT_MLP_ROWS ? M : VT_MLP_ROWS;
}
static uint64_t scratch_A(const vt_chain *c, const vt_chain_layout *l, uint64_t M) {
    uint64_t mlp = mlp_rows(l, M) * (uint64_t)c->F, qkv = c->has_attn ? 3 * M * (uint64_t)c->D : 0;
    return mlp > qkv ? mlp : qkv;
}

static uint64_t scratch_floats(const vt_chain *c, const vt_chain_layout *l, int B, int T) {
    uint64_t M = (uint64_t)B * T, D = c->D;
    uint64_t n = vt_round(scratch_A(c, l, M)) + vt_round(M * D);
    if (c->mlp_norm) n += vt_round(mlp_rows(l, M) * (uint64_t)c->F);
    if (c->layerscale) n += vt_round(M * D);
    if (c->attn_norm) n += vt_round(M * D);
    if (c->has_attn && c->qk_norm) n += 3 * vt_round(2 * M * D);
    if (c->has_attn) n += vt_round(attn_scratch_floats(c, T, l->threads));
    return n;
}

static void scratch_alloc(vt_arena *a, const vt_chain *c, const vt_chain_layout *l, int B, int T,
                          bwd_scratch *s) {
    size_t M = (size_t)B * T, D = c->D;
    int nt = l->threads;
    memset(s, 0, sizeof *s);
    s->rows = (size_t)mlp_rows(l, M);
    s->A = vt_arena_alloc(a, (size_t)scratch_A(c, l, M), "%s.grad.A", c->tag);
    if (c->mlp_norm) s->A2 = vt_arena_alloc(a, s->rows * (size_t)c->F, "%s.grad.mlp_norm", c->tag);
    s->Bb = vt_arena_alloc(a, M * D, "%s.grad.B", c->tag);
    if (c->layerscale) s->C = vt_arena_alloc(a, M * D, "%s.grad.layerscale", c->tag);
    if (c->attn_norm) s->N = vt_arena_alloc(a, M * D, "%s.grad.attn_norm", c->tag);
    if (c->has_attn && c->qk_norm) {
        s->E = vt_arena_alloc(a, 2 * M * D, "%s.grad.qk_norm_out", c->tag);
        s->R = vt_arena_alloc(a, 2 * M * D, "%s.grad.qk", c->tag);
        s->Z = vt_arena_alloc(a, 2 * M * D, "%s.grad.qk_norm_in", c->tag);
    }
    if (c->has_attn)
        s->attn = vt_arena_alloc(a, attn_scratch_floats(c, T, nt), "%s.grad.attn_scratch", c->tag);
}

/* dres: on entry d(xo), on return d(x). pg: accumulate parameter gradients. */
static void block_backward(vt_model *m, const vt_chain *c, int i, const vt_block_acts *a, const float *x,
                           float *dres, const bwd_scratch *s, int B, int T, int nt, int pg) {
    const vt_block_params *p = &c->blk[i];
    size_t M = (size_t)B * T;
    int D = c->D, F = c->F, H = c->H, hd = c->hd;
    const float *xm = c->has_attn ? a->xm : x;
    const float *fin = c->mlp_norm ? a->hn : a->hg; /* fc2's input */

    /* xo = xm + ls2 * fo  =>  d fo = ls2 * dres, d ls2 += sum dres * fo, d xm = dres */
    const float *dfo = dres;
    if (c->layerscale && c->has_attn) {
        vt_k_layerscale_backward(m, s->C, vt_G(m, p->ls2, pg), vt_P(m, p->ls2), dres, a->fo, M, D);
        dfo = s->C;
    }
    /* fo = fin @ fc2^T + b;  fin = mlp.norm(hg) or hg;  hg = act(h);  h = ln2 @ fc1^T + b;  ln2 = norm2(xm) */
    /* fc2's weight and bias gradients over all rows; the rest row chunk by row chunk (the matmul
     * kernels treat rows independently and add weight-gradient terms in row order) */
    vt_k_matmul_backward(m, NULL, vt_G(m, p->fc2w, pg), vt_G(m, p->fc2b, pg), dfo, fin, vt_P(m, p->fc2w), M,
                         F, D);
    vt_k_fill(m, s->Bb, (int64_t)(M * D), 0.0f);
    for (size_t r0 = 0; r0 < M; r0 += s->rows) {
        size_t n = M - r0 < s->rows ? M - r0 : s->rows;
        vt_k_fill(m, s->A, (int64_t)(n * F), 0.0f);
        vt_k_matmul_backward(m, s->A, NULL, NULL, dfo + r0 * D, fin + r0 * F, vt_P(m, p->fc2w), n, F, D);
        float *dh = s->A; /* d hg, then d h in place */
        if (c->mlp_norm) {
            vt_k_fill(m, s->A2, (int64_t)(n * F), 0.0f);
            vt_norm_backward(m, c->norm, s->A2, vt_G(m, p->mnw, pg), vt_G(m, p->mnb, pg), s->A,
                             a->hg + r0 * F, vt_P(m, p->mnw), a->hnm + r0, a->hnr + r0, (int64_t)n, F);
            dh = s->A2;
        }
        act_backward(m, c->act, dh, a->h + r0 * F, dh, (int64_t)(n * F));
        vt_k_matmul_backward(m, s->Bb + r0 * D, vt_G(m, p->fc1w, pg), vt_G(m, p->fc1b, pg), dh,
                             a->ln2 + r0 * D, vt_P(m, p->fc1w), n, D, F);
    }
    vt_norm_backward(m, c->norm, dres, vt_G(m, p->n2w, pg), vt_G(m, p->n2b, pg), s->Bb, xm, vt_P(m, p->n2w),
                     a->ln2m, a->ln2r, M, D);
    if (!c->has_attn) return;

    /* xm = x + ls1 * po  =>  d po = ls1 * dres (dres is now d xm) */
    const float *dpo = dres;
    if (c->layerscale) {
        vt_k_layerscale_backward(m, s->C, vt_G(m, p->ls1, pg), vt_P(m, p->ls1), dres, a->po, M, D);
        dpo = s->C;
    }
    /* po = pin @ proj^T + b, pin = attn.norm(ao) or ao */
    vt_k_fill(m, s->Bb, (int64_t)(M * D), 0.0f);
    vt_k_matmul_backward(m, s->Bb, vt_G(m, p->projw, pg), vt_G(m, p->projb, pg), dpo,
                         c->attn_norm ? a->an : a->ao, vt_P(m, p->projw), M, D, D);
    const float *dao = s->Bb;
    if (c->attn_norm) {
        vt_k_fill(m, s->N, (int64_t)(M * D), 0.0f);
        vt_norm_backward(m, c->norm, s->N, vt_G(m, p->anw, pg), vt_G(m, p->anb, pg), s->Bb, a->ao,
                         vt_P(m, p->anw), a->anm, a->anr, M, D);
        dao = s->N;
    }
    /* ao = attention(q, k, v) */
    vt_k_fill(m, s->A, (int64_t)(M * 3 * D), 0.0f);
    float scale = 1.0f / sqrtf((float)hd);
    if (c->qk_norm) {
        vt_k_fill(m, s->E, (int64_t)(2 * M * D), 0.0f);
        vt_k_attention_backward(m, s->E, s->E + M * D, s->A + 2 * D, s->attn, dao, a->att, a->qkn,
                                a->qkn + M * D, a->qkv + 2 * D, D, 3 * D, B, T, H, hd, nt, scale);
        /* q_norm / k_norm over hd rows; inputs re-gathered from qkv */
        vt_k_copy2d(m, s->R, a->qkv, M, D, D, 3 * D);
        vt_k_copy2d(m, s->R + M * D, a->qkv + D, M, D, D, 3 * D);
        vt_k_fill(m, s->Z, (int64_t)(2 * M * D), 0.0f);
        vt_norm_backward(m, c->norm, s->Z, vt_G(m, p->qnw, pg), vt_G(m, p->qnb, pg), s->E, s->R,
                         vt_P(m, p->qnw), a->qkm, a->qkr, (int64_t)M * H, hd);
        vt_norm_backward(m, c->norm, s->Z + M * D, vt_G(m, p->knw, pg), vt_G(m, p->knb, pg), s->E + M * D,
                         s->R + M * D, vt_P(m, p->knw), a->qkm + M * H, a->qkr + M * H, (int64_t)M * H, hd);
        /* d q, d k back into the fused d qkv rows */
        vt_k_add2d(m, s->A, s->Z, M, D, 3 * D, D);
        vt_k_add2d(m, s->A + D, s->Z + M * D, M, D, 3 * D, D);
    } else {
        vt_k_attention_backward(m, s->A, s->A + D, s->A + 2 * D, s->attn, dao, a->att, a->qkv, a->qkv + D,
                                a->qkv + 2 * D, 3 * D, 3 * D, B, T, H, hd, nt, scale);
    }
    /* qkv = ln1 @ qkv^T + b;  ln1 = norm1(x);  dres (d xm) flows to x directly as well */
    vt_k_fill(m, s->Bb, (int64_t)(M * D), 0.0f);
    vt_k_matmul_backward(m, s->Bb, vt_G(m, p->qkvw, pg), vt_G(m, p->qkvb, pg), s->A, a->ln1, vt_P(m, p->qkvw),
                         M, D, 3 * D);
    vt_norm_backward(m, c->norm, dres, vt_G(m, p->n1w, pg), vt_G(m, p->n1b, pg), s->Bb, x, vt_P(m, p->n1w),
                     a->ln1m, a->ln1r, M, D);
}

/* ---- the chain ------------------------------------------------------------------------------------- */

static int is_segment_start(const vt_chain_layout *l, int i) { return l->store[i] == VT_STORE_INPUT; }

/* Block-by-block checkpointing with the last block checkpointed: the forward's scratch, which
 * holds the last block's internals when the forward ends, is kept as the backward's one slot, so
 * the last block is not re-computed (same memory: the slot would be allocated anyway). */
static int has_handover(const vt_chain *c, const vt_chain_layout *l, int need_grad) {
    return need_grad && c->depth > 0 && l->seg == 1 && l->store[c->depth - 1] == VT_STORE_INPUT;
}

/* Whether block i's output (= xs[i+1]) is kept after the forward. */
static int output_kept(const vt_chain *c, const vt_chain_layout *l, int i, int need_grad, uint64_t keep) {
    if (i == c->depth - 1 || (keep >> i & 1)) return 1;
    return need_grad && l->store[i + 1] != VT_STORE_NONE;
}

vt_status vt_chain_run_start(vt_model *m, vt_chain_run *r, const vt_chain *c, const vt_chain_layout *lay,
                             int B, int T, const uint8_t *causal_mask, float **xs, vt_block_acts *acts,
                             float *x0, int need_grad, uint64_t keep) {
    r->c = c;
    r->lay = *lay;
    r->B = B;
    r->T = T;
    r->causal_mask = causal_mask;
    r->xs = xs;
    r->acts = acts;
    r->xs[0] = x0;
    return vt_chain_forward(m, r, need_grad, keep);
}

vt_status vt_chain_forward(vt_model *m, vt_chain_run *r, int need_grad, uint64_t keep) {
    const vt_chain *c = r->c;
    const vt_chain_layout *l = &r->lay;
    vt_arena *ar = &m->arena;
    int B = r->B, T = r->T, D = c->D;
    size_t MD = (size_t)B * T * D;
    int all = fields_all(c), sel = fields_selective(c);
    /* 1. what is kept, allocated up front, in block order */
    for (int i = 0; i < c->depth; i++) {
        vt_exec_mark(m, VT_PHASE_FORWARD, c->id, i);
        memset(&r->acts[i], 0, sizeof r->acts[i]);
        if (need_grad && l->store[i] == VT_STORE_FULL)
            fields_alloc(ar, c, B, T, all, &r->acts[i], "blocks", i);
        if (need_grad && l->store[i] == VT_STORE_SELECTIVE)
            fields_alloc(ar, c, B, T, sel, &r->acts[i], "blocks", i);
        r->xs[i + 1] = output_kept(c, l, i, need_grad, keep) ? falloc(ar, MD, c, "blocks", i, "out") : NULL;
    }
    /* 2. transient: one block's internals (kept when handed over to the backward), the
     * attention scratch and two ping-pong inputs for blocks not kept */
    vt_exec_mark(m, VT_PHASE_FORWARD, c->id, -1);
    vt_block_acts tmp;
    memset(&tmp, 0, sizeof tmp);
    int need_tmp = 0, need_pp = 0;
    for (int i = 0; i < c->depth; i++) {
        if (!need_grad || l->store[i] != VT_STORE_FULL) need_tmp = 1;
        if (!r->xs[i + 1]) need_pp = 1;
    }
    r->handover = has_handover(c, l, need_grad);
    if (r->handover) fields_alloc(ar, c, B, T, all, &tmp, "scratch", -1);
    size_t mark = vt_arena_mark(ar);
    if (need_tmp && !r->handover) fields_alloc(ar, c, B, T, all, &tmp, "scratch", -1);
    r->handover_acts = tmp;
    float *ascr = c->has_attn
                      ? falloc(ar, attn_scratch_floats(c, T, l->threads), c, "scratch", -1, "attn_scratch")
                      : NULL;
    float *pp[2] = { NULL, NULL };
    if (need_pp) {
        pp[0] = falloc(ar, MD, c, "scratch", -1, "out0");
        pp[1] = falloc(ar, MD, c, "scratch", -1, "out1");
    }
    if (ar->overflow) return vt_arena_overflow(ar);
    /* 3. run */
    const float *x = r->xs[0];
    for (int i = 0; i < c->depth; i++) {
        vt_block_acts a = tmp;
        if (need_grad && l->store[i] == VT_STORE_FULL) a = r->acts[i];
        if (need_grad && l->store[i] == VT_STORE_SELECTIVE) fields_take(&a, &r->acts[i], sel);
        float *xo = r->xs[i + 1] ? r->xs[i + 1] : pp[i & 1];
        vt_exec_mark(m, VT_PHASE_FORWARD, c->id, i);
        block_forward(m, c, i, &a, x, xo, ascr, B, T, l->threads, r->causal_mask, 0);
        x = xo;
    }
    vt_exec_mark(m, VT_PHASE_FORWARD, -1, -1);
    vt_arena_reset(ar, mark);
    return VT_OK;
}

vt_status vt_chain_backward(vt_model *m, vt_chain_run *r, float *dres, int pg, vt_inject_fn inject,
                            void *ctx) {
    const vt_chain *c = r->c;
    const vt_chain_layout *l = &r->lay;
    vt_arena *ar = &m->arena;
    int B = r->B, T = r->T, D = c->D;
    size_t MD = (size_t)B * T * D;
    int all = fields_all(c), sel = fields_selective(c);
    size_t mark = vt_arena_mark(ar);
    vt_exec_mark(m, VT_PHASE_BACKWARD, c->id, -1);
    bwd_scratch s;
    scratch_alloc(ar, c, l, B, T, &s);
    /* re-computation slots: a whole segment (seg blocks) when any block is checkpointed,
     * else one block for selective re-computation */
    int any_ckpt = 0, any_sel = 0;
    for (int i = 0; i < c->depth; i++) {
        any_ckpt |= l->store[i] == VT_STORE_INPUT || l->store[i] == VT_STORE_NONE;
        any_sel |= l->store[i] == VT_STORE_SELECTIVE;
    }
    int nslots = any_ckpt ? l->seg : any_sel ? 1 : 0;
    int slot_fields = any_ckpt ? all : all & ~sel; /* selective only re-computes what it dropped */
    vt_block_acts *slot = m->slot;
    float **slot_x = m->slot_x;
    for (int j = 0; j < nslots; j++) {
        memset(&slot[j], 0, sizeof slot[j]);
        if (j == 0 && r->handover)
            slot[0] = r->handover_acts;
        else
            fields_alloc(ar, c, B, T, slot_fields, &slot[j], "slot", j);
        slot_x[j] = j > 0 ? falloc(ar, MD, c, "slot", j, "in") : NULL;
    }
    if (ar->overflow) return vt_arena_overflow(ar);

    /* first block of the segment whose internals sit in the slots: with a handover, the last
     * block's, left there by the forward */
    int seg_lo = r->handover ? c->depth - 1 : -1;
    for (int i = c->depth - 1; i >= 0; i--) {
        vt_exec_mark(m, VT_PHASE_BACKWARD, c->id, i);
        if (inject) inject(m, ctx, i, dres);
        vt_block_acts a;
        const float *x;
        int st = l->store[i];
        if (st == VT_STORE_FULL) {
            a = r->acts[i];
            x = r->xs[i];
        } else if (st == VT_STORE_SELECTIVE) {
            a = slot[0];
            fields_take(&a, &r->acts[i], sel);
            x = r->xs[i];
            vt_exec_mark(m, VT_PHASE_RECOMPUTE, c->id, i);
            block_forward(m, c, i, &a, x, NULL, s.attn, B, T, l->threads, r->causal_mask, sel);
        } else {
            if (seg_lo < 0 || i < seg_lo) { /* re-run the segment that ends at block i */
                int s0 = i;
                while (!is_segment_start(l, s0)) s0--;
                for (int j = s0; j <= i; j++) {
                    const float *xin = j == s0 ? r->xs[s0] : slot_x[j - s0];
                    float *xo = j < i ? slot_x[j + 1 - s0] : NULL;
                    vt_exec_mark(m, VT_PHASE_RECOMPUTE, c->id, j);
                    block_forward(m, c, j, &slot[j - s0], xin, xo, s.attn, B, T, l->threads, r->causal_mask,
                                  0);
                }
                seg_lo = s0;
            }
            a = slot[i - seg_lo];
            x = i == seg_lo ? r->xs[i] : slot_x[i - seg_lo];
        }
        vt_exec_mark(m, VT_PHASE_BACKWARD, c->id, i);
        block_backward(m, c, i, &a, x, dres, &s, B, T, l->threads, pg);
        /* for the timeline: block i's kept internals and its output are no longer needed (and,
         * after block 0, the chain input) */
        uint64_t done = st == VT_STORE_FULL        ? fields_floats(c, B, T, all)
                        : st == VT_STORE_SELECTIVE ? fields_floats(c, B, T, sel)
                                                   : 0;
        if (r->xs[i + 1]) done += vt_round(MD);
        if (i == 0) done += vt_round(MD);
        vt_arena_release(ar, done);
        if (st != VT_STORE_INPUT && st != VT_STORE_NONE)
            seg_lo = -1;
        else if (i == seg_lo)
            seg_lo = -1;
    }
    vt_exec_mark(m, VT_PHASE_BACKWARD, -1, -1);
    vt_arena_reset(ar, mark);
    return VT_OK;
}

/* ---- the plan (mirror of the two functions above; tests check it against the arena's peak) ---- */

void vt_chain_plan(const vt_chain *c, const vt_chain_layout *l, int B, int T, int need_grad, uint64_t keep,
                   uint64_t *kept, uint64_t *fwd_extra, uint64_t *bwd_extra) {
    uint64_t MD = (uint64_t)B * T * c->D;
    int all = fields_all(c), sel = fields_selective(c);
    uint64_t k = 0;
    int need_tmp = 0, need_pp = 0, any_ckpt = 0, any_sel = 0;
    for (int i = 0; i < c->depth; i++) {
        if (need_grad && l->store[i] == VT_STORE_FULL) k += fields_floats(c, B, T, all);
        if (need_grad && l->store[i] == VT_STORE_SELECTIVE) k += fields_floats(c, B, T, sel);
        if (output_kept(c, l, i, need_grad, keep))
            k += vt_round(MD);
        else
            need_pp = 1;
        if (!need_grad || l->store[i] != VT_STORE_FULL) need_tmp = 1;
        any_ckpt |= l->store[i] == VT_STORE_INPUT || l->store[i] == VT_STORE_NONE;
        any_sel |= l->store[i] == VT_STORE_SELECTIVE;
    }
    int handover = has_handover(c, l, need_grad);
    if (handover) k += fields_floats(c, B, T, all); /* the forward's scratch, kept as slot 0 */
    *kept = k;
    *fwd_extra = (need_tmp && !handover ? fields_floats(c, B, T, all) : 0) +
                 (c->has_attn ? vt_round(attn_scratch_floats(c, T, l->threads)) : 0) +
                 (need_pp ? 2 * vt_round(MD) : 0);
    int nslots = any_ckpt ? l->seg : any_sel ? 1 : 0;
    int slot_fields = any_ckpt ? all : all & ~sel;
    *bwd_extra = need_grad ? scratch_floats(c, l, B, T) +
                                 (uint64_t)(nslots - handover) * fields_floats(c, B, T, slot_fields) +
                                 (nslots > 1 ? (uint64_t)(nslots - 1) * vt_round(MD) : 0)
                           : 0;
}

/* FLOPs of block_forward(have, xo != NULL): the kernel list's formulas (kernel_list.h) for the
 * calls it makes, so that the plan's re-computation equals what a recorded step counts. */
static double block_forward_flops(const vt_chain *c, int B, int T, int have, int with_output) {
    double M = (double)B * T, D = c->D, F = c->F, H = c->H, hd = c->hd, f = 0;
    if (c->has_attn) {
        f += vt_norm_flops(c->norm, M, D); /* norm1 */
        if (!(have & F_QKV)) f += 2.0 * M * D * (3 * D);
        if (c->qk_norm) f += 2 * vt_norm_flops(c->norm, M * H, hd); /* (copies: 0) */
        f += 4.0 * B * H * T * T * hd + 5.0 * B * H * T * T;
        if (c->attn_norm) f += vt_norm_flops(c->norm, M, D);
        if (c->layerscale)
            f += (have & F_PO ? 0 : 2.0 * M * D * D) + 2.0 * M * D;
        else
            f += 2.0 * M * D * D + 1.0 * M * D;
    }
    /* norm2, fc1, the activation, mlp.norm */
    f += vt_norm_flops(c->norm, M, D) + (have & F_H ? 0 : 2.0 * M * D * F) + act_flops(c->act) * M * F;
    if (c->mlp_norm) f += vt_norm_flops(c->norm, M, F);
    if (c->layerscale && c->has_attn)
        f += (have & F_FO ? 0 : 2.0 * M * F * D) + (with_output ? 2.0 * M * D : 0);
    else if (with_output)
        f += 2.0 * M * F * D + 1.0 * M * D;
    return f;
}

/* The forward FLOPs the chain's backward re-computes: the mirror of vt_chain_backward's re-runs
 * (a selective block its dropped part; a checkpointed segment once, every block but the last with
 * its output; with a handover, not the last block). All terms are integers below 2^53: exact. */
double vt_chain_recompute_flops(const vt_chain *c, const vt_chain_layout *l, int B, int T, int need_grad) {
    if (!need_grad) return 0;
    int sel = fields_selective(c), seg_lo = has_handover(c, l, need_grad) ? c->depth - 1 : -1;
    double f = 0;
    for (int i = c->depth - 1; i >= 0; i--) {
        int st = l->store[i];
        if (st == VT_STORE_SELECTIVE)
            f += block_forward_flops(c, B, T, sel, 0);
        else if (st != VT_STORE_FULL && (seg_lo < 0 || i < seg_lo)) {
            int s0 = i;
            while (!is_segment_start(l, s0)) s0--;
            for (int j = s0; j <= i; j++) f += block_forward_flops(c, B, T, 0, j < i);
            seg_lo = s0;
        }
        if (st != VT_STORE_INPUT && st != VT_STORE_NONE)
            seg_lo = -1;
        else if (i == seg_lo)
            seg_lo = -1;
    }
    return f;
}
