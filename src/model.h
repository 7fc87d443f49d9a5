/* model.h: internal structures of the engine (not part of the public API).
 * A model is one parameter table (one buffer) plus chains of transformer blocks and the glue
 * around them (patch embedding, prefix tokens, masking, positional embedding, heads). All
 * activation memory comes from one arena whose size a plan computes before the call. */
#ifndef VT_MODEL_H
#define VT_MODEL_H
#include "vitrine.h"

/* ---- parameter table (params.c) ------------------------------------------------------------ */
#define VT_NAME_MAX 96
/* Limits checked before anything is allocated (config.c, params.c). Sizes are computed in 64 bits:
 * size_t and long are 32-bit in wasm. VT_MAX_DIM bounds every config integer and every row the
 * kernels index with int; the parameter buffer must be addressable (VT_MAX_FLOATS). */
#define VT_MAX_DIM    1000000
#define VT_MAX_FLOATS ((uint64_t)(SIZE_MAX / sizeof(float)))
/* training: step counts fit wasm's 32-bit long (AdamW's t + 1 included); seeds survive JSON
 * (doubles); a learning rate beyond this is no learning rate */
#define VT_MAX_STEPS 2000000000L
#define VT_MAX_SEED  (1ULL << 53)
#define VT_MAX_LR    1e3
#define VT_MAX_ACCUM 65536 /* micro-batches of one training step */
typedef struct {
    char name[VT_NAME_MAX];
    int ndim;
    int64_t shape[4];
    size_t numel;
    size_t off; /* offset in floats into the parameter buffer */
    long goff;  /* offset into the gradient buffer, -1 when frozen */
    int requires_grad;
} vt_param;

typedef struct {
    vt_param *p;
    int n, cap;
    size_t total;  /* floats of parameters */
    size_t gtotal; /* floats of gradients (trainable parameters only) */
    float *data, *grad;
} vt_ptable;

vt_status vt_ptable_add(vt_ptable *t, const char *name, int ndim, const int64_t *shape, int requires_grad);
vt_status vt_ptable_alloc(vt_ptable *t);          /* allocate data (zeroed) and grads after all adds */
vt_status vt_ptable_relayout_grads(vt_ptable *t); /* after requires_grad changes */
void vt_ptable_free(vt_ptable *t);
struct vt_model;
/* Adds parameter pfx + name of shape (d0, d1, d2, d3)[:ndim] to the model's table; *idx = its
 * index. The one way the builders (vit.c, block.c, objectives.c) add parameters. */
/* config.c: the encoder's timm VisionTransformer kwargs as JSON (a saved encoder's timm_kwargs) */
vt_status vt_timm_kwargs_json(const vt_vit_config *c, char *buf, size_t len);
vt_status vt_param_add(struct vt_model *m, int *idx, const char *pfx, const char *name, int ndim, int64_t d0,
                       int64_t d1, int64_t d2, int64_t d3, int trainable);

/* ---- activation arena (arena.c) -------------------------------------------------------------- */
/* A stack (bump) allocator over one buffer. Sizes are rounded to VT_ALIGN_FLOATS so that every
 * buffer is 64-byte aligned. mark/reset give scoped scratch; the peak is what the plan predicts. */
#define VT_ALIGN_FLOATS      16
#define VT_ARENA_SPARE_BYTES 128 /* beyond the plan: the 64-byte alignment and the raw pointer */
typedef struct {
    float *base;
    size_t cap;  /* floats */
    size_t top;  /* floats in use */
    size_t peak; /* max top since the last begin */
    int overflow;
    /* the timeline of one call (for teaching), fixed capacity: after every alloc / reset / release,
     * top and live = top - what the backward has finished with (the arena frees that only at the
     * end of the call; live is what a freeing allocator would hold) */
    size_t released;
    size_t tl[VT_TIMELINE_MAX], tl_live[VT_TIMELINE_MAX];
    int tl_n, tl_backward;   /* events recorded; index where the backward began (-1: none) */
    struct vt_recorder *rec; /* recording mode (record.h): its events go to the recorded list too */
} vt_arena;

/* 64-bit so that plans larger than a 32-bit (wasm) address space are still counted right */
static inline uint64_t vt_round(uint64_t n) {
    return (n + VT_ALIGN_FLOATS - 1) / VT_ALIGN_FLOATS * VT_ALIGN_FLOATS;
}
/* NULL (and the overflow flag) past capacity. name: printf-style, what the buffer holds (e.g.
 * "enc.blocks.%d.att"): formatted only when the arena is recorded (the trace's ALLOC events). */
float *vt_arena_alloc(vt_arena *a, size_t nfloats, const char *name, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline size_t vt_arena_mark(const vt_arena *a) { return a->top; }
static inline void vt_arena_event(vt_arena *a) {
    if (a->tl_n < VT_TIMELINE_MAX) {
        a->tl_live[a->tl_n] = a->top - (a->released < a->top ? a->released : a->top);
        a->tl[a->tl_n++] = a->top;
    }
}
/* Marks nfloats below the top as no longer needed (timeline only; the space stays allocated). */
void vt_arena_release(vt_arena *a, uint64_t nfloats);
void vt_arena_reset(vt_arena *a, size_t mark);
vt_status vt_arena_reserve(vt_arena *a, size_t nfloats); /* (re)allocate to at least nfloats */
/* A call ran past its plan: a bug in the plan (never the caller's fault), reported, not a crash. */
vt_status vt_arena_overflow(const vt_arena *a);

/* A call's arena use as a step table (llm.c's size tables, with time): its allocations in the
 * order the code makes them, KEEP = held until the call's scope ends, PEAK = on top for a while
 * and then released (a callee's scratch, a scoped buffer); count repeats a row (per block). The
 * code allocates its own rows' n (st[ROW].n) and the plan is the table's peak, so the two come
 * from one description. Rows a call does not use have n = 0. */
typedef enum { VT_STEP_KEEP, VT_STEP_PEAK } vt_step_op;
typedef struct {
    vt_step_op op;
    uint64_t n;     /* floats per allocation (rounded by the arena) */
    uint64_t count; /* allocations of n */
} vt_step;
static inline vt_step vt_keep(uint64_t n) { return (vt_step){ VT_STEP_KEEP, n, 1 }; }
static inline vt_step vt_peak(uint64_t n) { return (vt_step){ VT_STEP_PEAK, n, 1 }; }
/* the floats the arena holds at its peak when a call runs the table */
static inline uint64_t vt_steps_peak(const vt_step *s, int n) {
    uint64_t top = 0, peak = 0;
    for (int i = 0; i < n; i++) {
        uint64_t sz = s[i].count * vt_round(s[i].n);
        if (s[i].op == VT_STEP_KEEP) top += sz;
        if (top + (s[i].op == VT_STEP_PEAK ? sz : 0) > peak) peak = top + (s[i].op == VT_STEP_PEAK ? sz : 0);
    }
    return peak;
}
void vt_arena_begin(vt_arena *a); /* top = 0, peak = 0 */
void vt_arena_free(vt_arena *a);

/* ---- chains of blocks (block.c) --------------------------------------------------------------- */
/* One residual block: x + ls1*attn(norm1(x)) then + ls2*mlp(norm2(x)). A chain without attention
 * is the AIM prediction head's residual MLP blocks. Indices are into the parameter table (-1 =
 * absent). */
typedef struct {
    int n1w, n1b, qkvw, qkvb, qnw, qnb, knw, knb, anw, anb, projw, projb, ls1;
    int n2w, n2b, fc1w, fc1b, mnw, mnb, fc2w, fc2b, ls2;
} vt_block_params;

/* What a chain's blocks are (timm Block's options): biases (qkv; attn.proj; mlp.fc1 / fc2), q/k
 * norm, LayerScale, the scale norms (attn.norm on the attention output, mlp.norm on the
 * activation's), the activation (vt_act), the norm layer (vt_norm: LAYER or RMS) and its eps. */
typedef struct {
    int has_attn, qkv_bias, proj_bias, mlp_bias, qk_norm, layerscale, attn_norm, mlp_norm;
    int act, norm;
    float eps;
} vt_block_opts;

typedef struct {
    int depth, D, H, hd, F;
    int has_attn, qkv_bias, proj_bias, mlp_bias, qk_norm, layerscale, attn_norm, mlp_norm, act, norm;
    float eps;
    int id;          /* in a call: 0 the encoder, 1 the MAE decoder / AIM head (recorded marks) */
    const char *tag; /* "enc", "dec", "head": the names of its arena buffers */
    vt_block_params *blk;
} vt_chain;

/* Storage of one block's activations between forward and backward. */
enum { VT_STORE_FULL = 0, VT_STORE_SELECTIVE, VT_STORE_INPUT, VT_STORE_NONE };

/* Checkpointing policy of all chains. kind: none, block, every (K), sqrt, budget, selective. */
typedef enum {
    VT_POL_NONE,
    VT_POL_BLOCK,
    VT_POL_EVERY,
    VT_POL_SQRT,
    VT_POL_BUDGET,
    VT_POL_SELECTIVE
} vt_policy_kind;
typedef struct {
    vt_policy_kind kind;
    int every;       /* K for every:K */
    uint64_t budget; /* bytes for budget: */
    char text[VT_POLICY_TEXT_MAX];
} vt_policy;

/* The concrete layout of one chain for one call: a segment length (blocks re-computed together
 * from one stored input) and per-block storage. Derived from the policy by vt_resolve_layouts
 * (policy.c). A call runs at most VT_CHAINS chains: the encoder, then the MAE decoder or the AIM
 * head. */
#define VT_MAX_DEPTH 64
#define VT_CHAINS    2
typedef struct {
    int seg;        /* segment length for checkpointed blocks (>= 1) */
    int threads;    /* kernel threads the plan is made for (attention scratch) */
    int whole_rows; /* the MLP backward over all rows in one call (vt_model_set_whole_rows) */
    unsigned char store[VT_MAX_DEPTH];
} vt_chain_layout;

/* Activations of one block (pointers into the arena). Shapes per token row; B*T rows. */
typedef struct {
    float *x;                 /* (B,T,D) block input */
    float *ln1, *ln1m, *ln1r; /* (B,T,D), (B,T), (B,T) */
    float *qkv;               /* (B,T,3D) */
    float *qkn, *qkm, *qkr;   /* qk_norm: (B,T,2D) normalised q|k, (B,T,2H) mean/rstd */
    float *att;               /* (B,H,T,T) probabilities */
    float *ao;                /* (B,T,D) attention output before proj */
    float *an, *anm, *anr;    /* scale_attn_norm: (B,T,D) attn.norm(ao), (B,T), (B,T) */
    float *po;                /* (B,T,D) proj output (LayerScale only) */
    float *xm;                /* (B,T,D) x + ls1*po */
    float *ln2, *ln2m, *ln2r;
    float *h;              /* (B,T,F) fc1 output, GELU input */
    float *hg;             /* (B,T,F) activation output */
    float *hn, *hnm, *hnr; /* scale_mlp_norm: (B,T,F) mlp.norm(hg), (B,T), (B,T) */
    float *fo;             /* (B,T,D) fc2 output (LayerScale only) */
} vt_block_acts;

struct vt_model;
/* Called during the chain's backward with the gradient of block i's output in dres (B,T,D) so
 * that gradients of intermediates can be added; may be NULL. */
typedef void (*vt_inject_fn)(struct vt_model *m, void *ctx, int block, float *dres);

typedef struct {
    const vt_chain *c;
    vt_chain_layout lay;
    int B, T;
    const uint8_t *causal_mask; /* [B,T] or NULL */
    float **xs;                 /* xs[i] = input of block i (NULL when not stored); xs[depth] = out */
    vt_block_acts *acts;        /* per block, for stored internals */
    /* checkpointing block by block: the forward's scratch for the last block is kept and becomes
     * the backward's re-computation slot, already holding that block's internals */
    int handover;
    vt_block_acts handover_acts;
} vt_chain_run;

/* ---- the model ---------------------------------------------------------------------------------- */
/* timm's AttentionPoolLatent (global_pool 'map'): parameter indices; F its MLP's hidden size */
typedef struct {
    int latent, qw, qb, kvw, kvb, pw, pb, nw, nb, f1w, f1b, f2w, f2b;
    int F;
} vt_attn_pool;

typedef struct {
    int pe_w, pe_b, cls, reg, dist, pos, mask_token, en_w, en_b, pn_w, pn_b, norm_w, norm_b, fcn_w, fcn_b;
    int head_w, head_b, hdist_w, hdist_b;
    vt_attn_pool ap;     /* global_pool 'map' (indices -1 otherwise) */
    int P, N, G, T_full; /* prefix tokens, patches of the config's grid, its side (square), L = N + P */
    int Gh, Gw;          /* the config's grid (timm floors it): pos_embed's */
    int use_fc_norm;     /* fc_norm after pooling (timm's rule); then norm is Identity */
    vt_chain chain;
    /* its first k + 1 blocks as a chain of their own (the same blocks): what timm's
     * forward_intermediates runs with stop_early */
    vt_chain upto[VT_MAX_DEPTH];
} vt_encoder;

/* timm forward_head on the encoder's features (vit.c; reference-models.md 1.4): pool -> fc_norm
 * -> head (DeiT distilled: head(x[:,0]) and head_dist(x[:,1]), averaged). What its forward keeps
 * for its backward (arena pointers). */
typedef struct {
    int B, T, rows, D, C; /* rows: B, or B*T with global_pool ''; C: num_classes (0: no head) */
    int threads;          /* the attention pools' plan */
    int lightly;          /* lightly's forward: an attention pool over every token, no head */
    int two;              /* distilled_training: two outputs (head, head_dist) */
    const float *x;       /* [B,T,D] the features (the caller keeps them until the backward) */
    /* 'map': the tokens it sees [B,Tk,D] (x, or a copy of x[:, P:]), its latent query [D], kv
     * [B*Tk, 2D], probabilities [B,H,Tk], attention output, proj output, norm (+ stats), MLP */
    int Tk;
    float *xin, *q, *kv, *att, *ao, *y, *yn, *ynm, *ynr, *h, *hg, *f;
    /* 'prr': probabilities [B,H,T,T], attention output [B,T,D], the attention's scratch */
    float *patt, *pout, *pscr;
    float *pooled;               /* [rows,D] pool output (aliases x with global_pool '') */
    float *px1;                  /* distilled: x[:,1] [B,D] (pooled holds x[:,0]) */
    float *normed, *mean, *rstd; /* fc_norm output and stats; NULL when fc_norm is Identity */
    float *lc, *ld;              /* distilled: head(x[:,0]), head_dist(x[:,1]) [B,C] */
    float *out, *out2;           /* [rows, C or D]: what forward_head returns (out2: head_dist's) */
} vt_head_run;

/* The grid a call's images give (timm's PatchEmbed.dynamic_feat_size): H x W pixels, Gh x Gw
 * patches (floored; ceiling with dynamic_img_pad), N = Gh*Gw, L = N + prefix tokens; resample: the
 * pos_embed is resampled to this grid (dynamic_img_size, timm's resample_abs_pos_embed). */
typedef struct {
    int H, W, Gh, Gw, N, L, resample, square; /* square: the im2col of square images that fill the grid */
} vt_geom;

/* AdamW (optim.c): the moments, in the gradient layout they were made for */
typedef struct {
    float *m, *v;
    size_t n; /* floats of m and of v (= the gradient buffer's then) */
    long t;   /* steps taken */
    long bad; /* 0, or the step whose update made a value NaN or infinite: the parameters and
                          * moments are no longer a good state (nothing saves them, no step runs) */
    vt_adamw_config cfg;
} vt_optim_state;

/* trainer.c: what vt_train_step needs besides the optimizer */
typedef struct {
    int on; /* set up by vt_trainer_init or vt_train_state_load */
    vt_train_config cfg;
    vt_rng rng;             /* the mask generator */
    int64_t *keep, *masked; /* MAE idx_keep / idx_mask of a step */
    uint8_t *prefix;        /* AIM prefix mask of a step */
    size_t cap;             /* tokens the three buffers hold (batch x sequence of the largest step) */
    int begun;              /* vt_train_step_begin, not ended yet */
    vt_rng begun_rng;       /* the generator before that step's masks */
} vt_trainer_state;

/* What the MAE / AIM loss forward keeps for its backward (objectives.c); arena pointers. */
typedef struct {
    float *feat;                      /* the encoder's output (after its norm) */
    float *dec_ln, *dec_m, *dec_r;    /* MAE: the decoder's norm output, mean, rstd */
    float *sel;                       /* MAE: its rows at idx_mask */
    float *f2;                        /* AIM: features + pos_embed (the head's input) */
    float *head_ln, *head_m, *head_r; /* AIM: the head's norm output, mean, rstd */
    float *pred, *tgt, *trs;          /* prediction, target, the target's 1/std per patch */
} vt_loss_acts;

/* The last vt_forward: what its backward and the output getters read. */
typedef struct {
    int have_fwd, need_grad; /* a forward ran (and kept what its backward needs) */
    vt_fn fn;
    vt_inputs in;
    size_t planned_floats; /* the arena plan it ran under */
    vt_chain_run enc_run, dec_run, head_run;
    float *enc_xs[VT_MAX_DEPTH + 1], *dec_xs[VT_MAX_DEPTH + 1], *head_xs[VT_MAX_DEPTH + 1];
    vt_block_acts enc_acts[VT_MAX_DEPTH], dec_acts[VT_MAX_DEPTH], head_acts[VT_MAX_DEPTH];
    float *out;       /* main output */
    float *out2;      /* DeiT distilled_training: head_dist's output (output 1) */
    vt_head_run head; /* VT_FN_TIMM_FORWARD: timm's forward_head */
    int64_t out_shape[4];
    int out_ndim;
    float *fin_ln, *fin_m, *fin_r; /* final norm output + stats (the encoder's `norm`) */
    float *pre_in, *pre_m, *pre_r; /* pre_norm: norm_pre's input and stats */
    float *inter[VT_MAX_DEPTH];    /* intermediates (aliases xs when not normed) */
    float *inter_m[VT_MAX_DEPTH], *inter_r[VT_MAX_DEPTH];
    /* timm's forward_intermediates: its outputs in the order it returns them ([out], the spatial
     * tokens of each block taken, their prefix tokens), and per block taken (ti_block) the norm's
     * statistics (norm) */
    int n_outs, n_taken, ti_block[VT_MAX_DEPTH];
    const float *outs[2 * VT_MAX_DEPTH + 1];
    int64_t outs_shape[2 * VT_MAX_DEPTH + 1][4];
    int outs_ndim[2 * VT_MAX_DEPTH + 1];
    vt_loss_acts ls;
    float *cls_logp;  /* classifier loss: log-softmax of the logits [B, C] */
    float *cls_logp2; /* DeiT's distilled classifier: head_dist's */
} vt_call_state;

typedef struct vt_objective vt_objective; /* objective.h */
struct vt_model {
    vt_model_config cfg;
    const vt_objective *obj; /* what it computes: its parameters and its loss */
    vt_ptable pt;
    vt_encoder enc;
    /* MAE */
    int de_w, de_b, d_mask_token, d_pos, dn_w, dn_b, pred_w, pred_b;
    vt_chain dec;
    /* AIM */
    int h_in_w, hn_w, hn_b, h_out_w;
    vt_chain head;

    vt_scalars sc; /* the scalars region (vitrine.h): loss, step inputs, flags */
    vt_policy policy;
    int threads;    /* kernel threads its plans are made for; 0: the pool's (vt_threads_max) */
    int whole_rows; /* kernel calls over whole row ranges, not cache-sized chunks (a GPU's recording) */
    vt_arena arena;
    vt_optim_state opt;
    vt_trainer_state train;
    vt_call_state last;
    /* re-computation slots of the chain backward (here, not on the stack: wasm stacks are small) */
    vt_block_acts slot[VT_MAX_DEPTH];
    float *slot_x[VT_MAX_DEPTH];
};

/* helpers shared between files */
static inline float *vt_P(struct vt_model *m, int idx) {
    return idx < 0 ? NULL : m->pt.data + m->pt.p[idx].off;
}
static inline float *vt_G(struct vt_model *m, int idx, int want) {
    if (!want || idx < 0 || m->pt.p[idx].goff < 0 || !m->pt.grad) return NULL;
    return m->pt.grad + m->pt.p[idx].goff;
}

vt_status vt_chain_build(struct vt_model *m, vt_chain *c, const char *prefix, int depth, int D, int H, int F,
                         const vt_block_opts *o, int trainable, int id, const char *tag);
/* A norm layer (vt_norm LAYER: layernorm_*, RMS: rmsnorm_*, mean unused) over M rows of D, and
 * its backward (b, db, mean absent for RMS) -- the one place a norm's kind is chosen */
void vt_norm_forward(struct vt_model *m, int kind, float *out, float *mean, float *rstd, const float *inp,
                     const float *w, const float *b, int64_t M, int64_t D, float eps);
void vt_norm_backward(struct vt_model *m, int kind, float *dinp, float *dw, float *db, const float *dout,
                      const float *inp, const float *w, const float *mean, const float *rstd, int64_t M,
                      int64_t D);
/* the FLOPs of that norm's forward (the kernel list's) */
double vt_norm_flops(int kind, double M, double D);
void vt_chain_free(vt_chain *c);
/* Sets up r (chain, layout, sizes, mask, storage, input x0) and runs vt_chain_forward. */
vt_status vt_chain_run_start(struct vt_model *m, vt_chain_run *r, const vt_chain *c,
                             const vt_chain_layout *lay, int B, int T, const uint8_t *causal_mask, float **xs,
                             vt_block_acts *acts, float *x0, int need_grad, uint64_t keep);
/* Forward of a chain from xs[0]; allocates what the layout keeps, and the output of every block i
 * whose bit is set in keep (VT_KEEP_ALL: every block's; the last block's always). */
#define VT_KEEP_ALL (~(uint64_t)0)
vt_status vt_chain_forward(struct vt_model *m, vt_chain_run *r, int need_grad, uint64_t keep);
/* Backward: dres (B,T,D) holds d(out) on entry and d(input) on return. */
vt_status vt_chain_backward(struct vt_model *m, vt_chain_run *r, float *dres, int param_grads,
                            vt_inject_fn inject, void *ctx);
/* Closed-form plan of the chain, mirroring vt_chain_forward/backward (in floats):
 * kept = stored during forward, fwd_peak = extra transient on top during the forward,
 * bwd_peak = extra on top of kept during the backward (excluding dres). */
void vt_chain_plan(const vt_chain *c, const vt_chain_layout *lay, int B, int T, int need_grad, uint64_t keep,
                   uint64_t *kept, uint64_t *fwd_extra, uint64_t *bwd_extra);
/* The forward FLOPs the chain's backward re-computes under the layout (what a recorded step's
 * re-computation phase counts). */
double vt_chain_recompute_flops(const vt_chain *c, const vt_chain_layout *lay, int B, int T, int need_grad);

#endif
