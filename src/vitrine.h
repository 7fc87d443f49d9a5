/* vitrine.h: the one public header of the vitrine engine.
 *
 * vitrine computes what timm's VisionTransformer, lightly's MaskedVisionTransformerTIMM and
 * MaskedCausalVisionTransformer (and lightly's MAE / AIM training models) compute, forward and
 * hand-written backward, in fp32, with exact (bitwise) gradient checkpointing.
 *
 * Conventions: every function that can fail returns a vt_status (0 OK, negative error) and leaves
 * a message for vt_last_error(). Nothing here prints, exits, aborts or does file I/O: weights move
 * in and out as byte buffers. Inputs passed to vt_forward (images, indices, masks) must stay valid
 * until the matching vt_backward. Tensors are row-major float32; images are NCHW. */
#ifndef VITRINE_H
#define VITRINE_H
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration ------------------------------------------------------------------------ */

#define VT_MAX_TOKENS 4096 /* tokens of a sequence (patches + prefix tokens) a config may have */

/* timm's global_pool: '' (none: every token), 'token' (the class token), 'avg', 'max', 'avgmax'
 * (= (max + avg) / 2) over the patch tokens (the prefix tokens too with pool_include_prefix), 'map'
 * (timm's AttentionPoolLatent: a latent query attends over the tokens, then its own MLP), 'prr'
 * (AttentionPoolPrr: parameter-free self-attention over every token, then the class token, or
 * the mean without one). */
typedef enum {
    VT_POOL_NONE = 0,
    VT_POOL_TOKEN,
    VT_POOL_AVG,
    VT_POOL_MAX,
    VT_POOL_AVGMAX,
    VT_POOL_MAP,
    VT_POOL_PRR
} vt_pool;
const char *vt_pool_name(vt_pool p); /* its name in JSON and in timm */
vt_status vt_pool_from_name(const char *name, vt_pool *out);

/* timm's act_layer of the MLPs: exact GELU (nn.GELU, the default), 'quick_gelu' (OpenAI CLIP:
 * x sigmoid(1.702 x)), 'gelu_tanh' (nn.GELU(approximate='tanh')) */
typedef enum { VT_ACT_GELU = 0, VT_ACT_QUICK_GELU, VT_ACT_GELU_TANH } vt_act;
/* timm's norm_layer: LayerNorm (weight and bias) or RmsNorm (weight only); NONE: absent (an
 * embed_norm_layer not given) */
typedef enum { VT_NORM_NONE = 0, VT_NORM_LAYER, VT_NORM_RMS } vt_norm;
/* timm VisionTransformer constructor arguments that vitrine implements (timm's defaults via
 * vt_vit_config_default), plus lightly's mask token. The fields' defaults, JSON reader, validator
 * and JSON writers come from one list (config.c). */
typedef struct {
    int img_size;  /* the image's height (its width too unless img_width) */
    int img_width; /* 0: square; else timm's img_size (H, W) is (img_size, img_width) */
    int patch_size, in_chans, embed_dim, depth, num_heads;
    double mlp_ratio;    /* hidden = vt_mlp_hidden(embed_dim, mlp_ratio), as Python computes it */
    int qkv_bias;        /* bias of the fused qkv Linear */
    int qk_norm;         /* LayerNorm over head_dim on q and k */
    int class_token;     /* prepend a [CLS] token */
    int reg_tokens;      /* number of register tokens after [CLS] */
    int no_embed_class;  /* pos_embed covers patches only, prefix tokens get none */
    int pos_embed;       /* 1: learned pos_embed parameter ('learn'); 0: none */
    float init_values;   /* LayerScale ls1/ls2 when > 0 */
    vt_pool global_pool; /* timm's global_pool ('', token, avg, max, avgmax; JSON: the names) */
    int mask_token;      /* lightly MaskedVisionTransformerTIMM's mask_token [1,1,D] */
    int num_classes;     /* timm classifier head.* (kept for load/save; lightly never applies it) */
    /* the rest of timm's kwargs (written into JSON only when not timm's default) */
    int pre_norm;            /* norm_pre after the positional embedding; no patch_embed bias (CLIP) */
    int final_norm;          /* 0: neither norm nor fc_norm */
    int fc_norm;             /* -1 timm's None (after avg / max / avgmax pooling), 0 or 1 */
    int proj_bias;           /* bias of attn.proj, mlp.fc1, mlp.fc2 */
    int scale_attn_norm;     /* attn.norm on the attention output before proj */
    int scale_mlp_norm;      /* mlp.norm on the activation's output before fc2 */
    int pool_include_prefix; /* pooling over the prefix tokens too */
    int dynamic_img_size;    /* images of other sizes: pos_embed resampled to their grid */
    int dynamic_img_pad;     /* images padded with zeros up to a multiple of the patch */
    vt_act act_layer;
    vt_norm norm_layer;       /* of every norm but the patch embedding's */
    double norm_eps;          /* its eps (timm's LayerNorm / RmsNorm: 1e-6; CLIP passes 1e-5) */
    vt_norm embed_norm_layer; /* patch_embed.norm (NONE: absent) */
    double embed_norm_eps;
    int distilled; /* DeiT's VisionTransformerDistilled: dist_token, head_dist */
} vt_vit_config;
/* the image width of a config (img_width, or img_size for a square image) */
static inline int vt_img_width(const vt_vit_config *c) { return c->img_width ? c->img_width : c->img_size; }
/* the tokens of a config's sequence at its image size: the grid's patches (timm floors it; the
 * ceiling with dynamic_img_pad) + the prefix tokens (class, registers, DeiT's distillation token) */
int64_t vt_config_tokens(const vt_vit_config *c);

typedef enum {
    VT_KIND_TIMM = 0, /* timm VisionTransformer: timm keys */
    VT_KIND_LIGHTLY,  /* lightly MaskedVisionTransformerTIMM: mask_token + vit.<timm keys> */
    VT_KIND_CAUSAL,   /* lightly MaskedCausalVisionTransformer: timm keys, AIM prefix-causal mask */
    VT_KIND_MAE,      /* lightly MAE example: backbone, decoder_embed, decoder, prediction_head */
    VT_KIND_AIM       /* lightly AIM example: backbone (causal), projection_head */
} vt_kind;

typedef struct {
    vt_kind kind;
    vt_vit_config enc;
    /* MAE (lightly MaskedVisionTransformerDecoderTIMM) */
    int decoder_dim, decoder_depth, decoder_heads;
    double decoder_mlp_ratio;
    int norm_pix_loss;
    /* AIM (lightly AIMPredictionHead) */
    int head_hidden_dim, head_blocks;
    double head_mlp_ratio;
} vt_model_config;

void vt_vit_config_default(vt_vit_config *c);
void vt_model_config_default(vt_model_config *c, vt_kind kind);
/* timm names (num_classes 0): vit_{tiny,small,base}_patch16_224, vit_base_patch32_224; CLIP
 * vit_base_patch{16,32}_clip_224 (OpenCLIP) and vit_base_patch{16,32}_clip_quickgelu_224 (OpenAI);
 * SigLIP vit_base_patch16_siglip_224; deit_{tiny,small,base}_patch16_224 and
 * deit_{tiny,small,base}_distilled_patch16_224; DINOv2 vit_{small,base}_patch14_reg4_dinov2. */
/* Threads (src/threads.h): every kernel that pays splits its work over this many threads, with
 * the same bits at any count. Native: starts n-1 worker threads; wasm: uses n-1 workers started
 * by the JavaScript pool (web/runtime/pool.js). Call between engine calls (per-thread scratch is planned
 * for the count in force). Returns n or a negative vt_status. */
int vt_set_threads(int n);
int vt_threads_max(void);

vt_status vt_preset(const char *name, vt_vit_config *c);
const char *vt_preset_name(int i); /* NULL past the end */
/* A preset's encoder into a model config of its kind (c made by vt_model_config_default): the
 * kind's own mask token kept, and for the masked-causal / AIM backbone its prefix-free pooling. */
void vt_preset_encoder(const vt_vit_config *p, vt_model_config *c);
/* A preset's encoder as timm kwargs JSON: its sizes, and what else differs from timm's defaults. */
vt_status vt_preset_kwargs_json(const vt_vit_config *c, char *buf, size_t len);
/* A whole model by preset name for a kind: the small training presets for 28x28 grey images
 * (fmnist, fmnist-p7, fmnist-p7-mlp2, fmnist-base; vt_model_preset_name) with their MAE decoder
 * and AIM head, or a timm preset's encoder in the kind's defaults. */
vt_status vt_model_preset(const char *name, vt_kind kind, vt_model_config *c);
const char *vt_model_preset_name(int i); /* the small ones; NULL past the end */
/* Reads a timm-kwargs JSON object into c (keys not named in vt_vit_config are an error unless
 * they hold timm's default value). */
vt_status vt_vit_config_from_json(const char *json, size_t len, vt_vit_config *c);
/* A model config from the parity-file `config` metadata for the given kind. */
vt_status vt_model_config_from_json(const char *json, size_t len, vt_kind kind, vt_model_config *c);
vt_status vt_config_validate(const vt_model_config *c);
/* An MLP's hidden size as timm and lightly compute it: Python's int(dim * ratio) in double
 * precision (dim 15, ratio 4.2 -> 63; in float it would be 62). -1 when the product is not a
 * finite number below 2^31 (the config is then refused). */
int64_t vt_mlp_hidden(int dim, double ratio);

/* ---- model and parameters ----------------------------------------------------------------- */

typedef struct vt_model vt_model;

vt_status vt_model_create(const vt_model_config *cfg, vt_model **out);
void vt_model_free(vt_model *m);
const vt_model_config *vt_model_get_config(const vt_model *m);
/* The kernel threads a model's plans are made for (the attention's per-thread scratch is part of
 * its activation memory; its kernels then use at most that many threads). n >= 1: that count,
 * whatever the pool has; 0 (the default): the pool's count (vt_threads_max) when a call is
 * planned. vt_model_threads: the count its next plan is made for. */
vt_status vt_model_set_threads(vt_model *m, int n);
int vt_model_threads(const vt_model *m);
/* Whole rows (on = 1): kernel calls over whole row ranges instead of the CPU's cache-sized chunks
 * (the MLP backward's 64-row chunks, the patch embedding's 32-row im2col / col2im chunks) -- the
 * calls a device that parallelises inside one call (WebGPU) wants recorded: fewer, larger calls,
 * for a larger activation plan (an (M, F) MLP gradient and image-sized patch buffers; plans and
 * recordings follow the setting, exactly). Off (0, the default) is the CPU's layout; run on the
 * CPU, whole rows give other bits than the chunks (the SIMD weight-gradient sums group rows by
 * call), so the backend that records with it sets it back (web/webgpu/backend.js). */
vt_status vt_model_set_whole_rows(vt_model *m, int on);
int vt_model_whole_rows(const vt_model *m);

/* The parameter table: state_dict names and order of the PyTorch module; one buffer. */
int vt_param_count(const vt_model *m);
const char *vt_param_name(const vt_model *m, int i);
int vt_param_ndim(const vt_model *m, int i);
const int64_t *vt_param_shape(const vt_model *m, int i);
size_t vt_param_numel(const vt_model *m, int i);
float *vt_param_data(vt_model *m, int i);
float *vt_param_grad(vt_model *m, int i);               /* NULL for a frozen parameter */
int vt_param_find(const vt_model *m, const char *name); /* index or -1 */
size_t vt_param_total(const vt_model *m);               /* floats in the parameter buffer */
size_t vt_grad_total(const vt_model *m);                /* floats in the gradient buffer */
/* requires_grad for every parameter whose name equals `name` or starts with `name` + '.'
 * ("" = all). Returns the number matched through *matched (may be NULL); no match is an error. */
vt_status vt_set_requires_grad(vt_model *m, const char *name, int requires_grad, int *matched);
int vt_param_requires_grad(const vt_model *m, int i);
void vt_zero_grad(vt_model *m);

/* ---- weights (safetensors bytes) ---------------------------------------------------------- */

/* Loads every parameter of m from tensors named file_prefix + <param name>, where only params
 * whose names start with model_prefix are taken (and model_prefix is stripped before adding
 * file_prefix). Missing, unexpected (under file_prefix) or mis-shaped tensors are an error that
 * names them, and so is a value that is not finite as a float (NaN, infinity, a float64 past float's
 * range); nothing is changed unless all are good. Accepts F32, F16, BF16, F64. */
vt_status vt_load_safetensors(vt_model *m, const uint8_t *bytes, size_t len, const char *model_prefix,
                              const char *file_prefix);
/* Writes the selected parameters as F32 (malloc'd buffer, free with vt_free). */
vt_status vt_save_safetensors(const vt_model *m, const char *model_prefix, const char *file_prefix,
                              uint8_t **out, size_t *out_len);

/* Starts a model from the weights of a timm VisionTransformer state_dict (head or not), a lightly
 * MaskedVisionTransformerTIMM (mask_token + vit.*), a lightly MAE / AIM model (backbone.vit.* /
 * backbone.*) or vitrine's own files (encoder with timm keys, full model, training checkpoint):
 * the layout is recognised by where "patch_embed.proj.weight" sits. The ViT's tensors go into the
 * model's encoder (whatever its kind), lightly's mask_token into the model's, and, when the file
 * has the model's own layout, everything else too. What cannot be used is skipped and named in
 * rep->notes (tensor, shape, why): a tensor of another shape, a classifier head of another size
 * or for a model without one, a tensor the model has no parameter for. strict: any skipped
 * tensor, or an encoder parameter the file lacks, is an error (nothing changes). pos_embed: a
 * frozen parameter (lightly's sin-cos) loaded with values that are not the sin-cos table is
 * learned (timm's): it becomes trainable (rep->pos_embed). A pos_embed of another grid and a
 * patch_embed of another patch size are resampled as timm resamples them on load (bicubic with
 * antialias; the FlexiViT pseudo-inverse), and noted. Call before vt_trainer_init. */
enum {
    VT_INIT_POS_NONE = 0,
    VT_INIT_POS_SINCOS_FROZEN,
    VT_INIT_POS_TRAINABLE,
    VT_INIT_POS_LEARNED_NOW_TRAINABLE
};
typedef struct {
    char source[64];      /* the layout recognised */
    char file_prefix[64]; /* the ViT's key prefix in the file ("", "vit.", "backbone.vit.", ...) */
    int loaded;           /* parameters loaded */
    int skipped;          /* tensors of the file not used */
    int missing;          /* encoder parameters the file lacks (kept as initialised) */
    int resampled;        /* of those loaded: pos_embed / patch_embed of another grid, resampled as
                           * timm does on load (src/resample.h) */
    int pos_embed;        /* VT_INIT_POS_* */
    char notes[4096];     /* one line per skipped / missing tensor */
} vt_init_report;
vt_status vt_init_from_safetensors(vt_model *m, const uint8_t *bytes, size_t len, int strict,
                                   vt_init_report *rep);
void vt_free(void *p);

/* ---- calls -------------------------------------------------------------------------------- */

/* The encoder calls run any model's ViT (an MAE / AIM model's backbone too); VT_FN_LOSS needs
 * an MAE or AIM model, or a classifier (VT_KIND_TIMM with num_classes > 0: timm's forward, then
 * cross-entropy with label smoothing on vt_inputs.labels; its output 0 is the logits [B, C]).
 * VT_FN_FORWARD is lightly's forward (pooled features, no fc_norm, no head);
 * VT_FN_TIMM_FORWARD is timm's (no idx_mask / idx_keep / token mask: timm's forward has none). */
typedef enum {
    VT_FN_ENCODE = 0,         /* lightly encode / timm forward_features: [B,T,D] */
    VT_FN_FORWARD,            /* lightly forward: pooled [B,D] (or [B,T,D] with global_pool "") */
    VT_FN_INTERMEDIATES,      /* forward_intermediates(norm=False): out + depth x [B,T,D] */
    VT_FN_INTERMEDIATES_NORM, /* forward_intermediates(norm=True) */
    VT_FN_LOSS,               /* MAE / AIM training loss: scalar */
    VT_FN_TIMM_FORWARD,       /* timm VisionTransformer.forward: forward_features, then
                               * forward_head = pool -> fc_norm -> head: [B, num_classes]
                               * ([B, D] with num_classes 0; [B, T, .] with global_pool "") */
    VT_FN_TIMM_INTERMEDIATES  /* timm VisionTransformer.forward_intermediates (vt_inputs.inter):
                               * [out] [B,T,D], then per block taken its spatial tokens ([B,D,Gh,Gw]
                               * or [B,N,D]), then with return_prefix_tokens its prefix [B,P,D] */
} vt_fn;

/* timm's forward_intermediates options (VT_FN_TIMM_INTERMEDIATES; its keyword arguments). take:
 * the blocks whose outputs are returned, bit i for block i (feature_take_indices' set; timm
 * returns them in block order, each once; 0 = every block, indices=None); vt_take_indices makes
 * it from timm's indices. norm: timm's final norm on each (Identity when the config has fc_norm or
 * final_norm off); return_prefix_tokens: the prefix tokens of each as outputs of their own;
 * stop_early: the blocks after the last one taken are not run (out is then the final norm of that
 * block's output); nchw: output_fmt 'NCHW' ([B, D, Gh, Gw]) rather than 'NLC' ([B, N, D]); the
 * prefix tokens are split off either way; intermediates_only: no out. */
typedef struct {
    uint64_t take;
    int norm, return_prefix_tokens, stop_early, nchw, intermediates_only;
} vt_inter_opts;
/* timm's feature_take_indices(depth, indices) as a take set: n < 0 and last_n 0: every block;
 * last_n > 0: the last last_n blocks (1 <= last_n <= depth); else the n indices (a negative one
 * counts from the end). An index out of range is an error naming it, in timm's words. */
vt_status vt_take_indices(int depth, const int *indices, int n, int last_n, uint64_t *take);

typedef struct {
    const float *images; /* [B, C, H, W] */
    int batch;
    const int64_t *idx_mask;
    int n_mask; /* [B, n_mask], indices over the full sequence */
    const int64_t *idx_keep;
    int n_keep; /* [B, n_keep] */
    /* lightly/timm encoders: bool [B, L] mask (True = replace by mask token).
     * causal / AIM: bool [B, L] prefix mask (True = causal part). L is the whole sequence,
     * prefix tokens included, in both cases (what harness/parity.c passes, what vit.c reads). */
    const uint8_t *mask;
    int is_causal; /* causal / AIM: apply the causal part of `mask` (lightly default 1) */
    /* VT_FN_LOSS of a classifier (VT_KIND_TIMM with num_classes > 0): labels [B] in 0..C-1 and
     * timm's label smoothing s in [0, 1) (LabelSmoothingCrossEntropy; 0 = cross-entropy) */
    const int32_t *labels;
    float label_smoothing;
    /* images of another size than the config's (timm's dynamic_img_size; 0 = img_size) */
    int height, width;
    /* DeiT distilled, VT_FN_TIMM_FORWARD: timm's training mode with distilled_training, two outputs
     * head(x[:,0]) and head_dist(x[:,1]) instead of their average */
    int distilled_training;
    vt_inter_opts inter; /* VT_FN_TIMM_INTERMEDIATES */
} vt_inputs;

/* Runs `fn`. With need_grad, keeps what vt_backward needs (per the checkpointing policy);
 * without, keeps nothing but the outputs. */
vt_status vt_forward(vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad);
/* outputs of the last call: 1; forward_intermediates 1 + depth; timm's forward of a distilled
 * model in distilled_training 2; timm's forward_intermediates as many as it returns */
int vt_output_count(const vt_model *m);
/* Output i (0 = out, 1.. = intermediates.(i-1), or timm's forward_intermediates' in the order it
 * returns them); shape written to shape[4], rank in *ndim. */
const float *vt_output(const vt_model *m, int i, int64_t shape[4], int *ndim);
float vt_loss_value(const vt_model *m); /* VT_FN_LOSS */

/* Backward of the last vt_forward(need_grad=1). douts[i] is the upstream gradient of output i
 * (NULL = zero, and douts NULL = all zero; for VT_FN_LOSS: d loss = 1). Parameter gradients are
 * accumulated (+=) when param_grads != 0, left untouched otherwise; dimages (may be NULL) is
 * accumulated too. */
vt_status vt_backward(vt_model *m, const float *const *douts, int n_douts, float *dimages, int param_grads);

/* ---- gradient checkpointing and memory ---------------------------------------------------- */

/* "none", "block", "every:K", "sqrt", "budget:BYTES" (suffixes k/m/g, KB/MB/GB, KiB/MiB/GiB),
 * "selective". Applies to every chain of blocks (encoder, MAE decoder, AIM head) from the next
 * vt_forward on; a forward whose backward has not run yet is dropped (its backward then returns
 * VT_ERR_STATE), since what it kept follows the old policy. */
vt_status vt_set_grad_checkpointing(vt_model *m, const char *policy);
const char *vt_get_grad_checkpointing(const vt_model *m);
/* The policies as vt_set_grad_checkpointing reads them: "none", "block", "every:K", "sqrt",
 * "budget:BYTES", "selective" (NULL past the end). */
const char *vt_policy_name(int i);
/* A byte count as budget:BYTES reads it (300000000, 300MB, 256MiB, ...). */
vt_status vt_parse_bytes(const char *text, uint64_t *bytes);

typedef struct {                       /* 64-bit: a plan may exceed what a 32-bit (wasm) build can address */
    uint64_t params, grads, optimizer; /* bytes */
    uint64_t activations;              /* bytes of the activation arena for the call */
    uint64_t total;
} vt_plan_bytes;

/* Bytes one call (and, with need_grad, its backward) needs, computed before allocating. Only
 * the sizes in `in` are read (pointers may be NULL; mask != NULL means "a mask is given").
 * The activation bytes are those of a backward that asks for parameter AND image gradients: the
 * arena's peak then equals them exactly; a backward without image gradients uses less. */
vt_status vt_plan(const vt_model *m, vt_fn fn, const vt_inputs *in, int need_grad, vt_plan_bytes *out);

/* The plan of one vt_train_step, and what fits a budget: no error text to parse, everything is
 * a field. */
#define VT_POLICY_TEXT_MAX 48
typedef struct {
    vt_plan_bytes bytes;            /* the step under the policy asked for */
    int policy_met;                 /* 0 only for budget:B that no layout meets (bytes are then the
                             * smallest plan's, least_policy's) */
    int tokens_kept, tokens_masked; /* per image: MAE n_keep and L - n_keep; AIM L and 0 */
    double recompute_flops;         /* forward flops the policy re-computes during the backward */
    /* the search against `budget` (bytes of the whole plan; budget 0: no search, all zero) */
    int fits;                            /* policy_met and bytes.total <= budget */
    char fit_policy[VT_POLICY_TEXT_MAX]; /* the least re-computation whose plan fits ("" = none
                             * does): a named policy when one is as cheap, else budget:BYTES */
    vt_plan_bytes fit_bytes;
    double fit_recompute_flops;
    char least_policy[VT_POLICY_TEXT_MAX]; /* the named policy with the smallest plan */
    vt_plan_bytes least_bytes;
    int max_batch; /* the largest batch in 1..batch that fits under some policy (0: none) */
} vt_step_plan;
/* Plans vt_train_step(m, images, batch) before anything is allocated, for an MAE or AIM model
 * (or vt_train_step_labels for a classifier: all tokens kept, none masked).
 * mask_ratio < 0: the trainer's (vt_trainer_init / vt_train_state_load), else the default of
 * vt_train_config_default. policy NULL: the model's. The model is not changed. */
vt_status vt_plan_train_step(const vt_model *m, int batch, float mask_ratio, const char *policy,
                             uint64_t budget, vt_step_plan *out);
/* The i-th named policy the budget search tries for m (block, selective, sqrt, every:2 .. every:D
 * for D the deepest chain) into text; returns 1, or 0 past the end. */
int vt_named_policy(const vt_model *m, int i, char text[VT_POLICY_TEXT_MAX]);
/* What the last call used: arena bytes at peak, arena capacity, planned bytes. */
typedef struct {
    size_t planned, peak, capacity;
} vt_arena_stats;
void vt_arena_get_stats(const vt_model *m, vt_arena_stats *out);
/* The activation memory of the last forward (+ backward) as it happened, one entry per arena
 * event (allocation, scoped release, a block's backward done), at most `max` (the first
 * VT_TIMELINE_MAX are kept):
 * bytes = the arena in use (its maximum is the measured peak); live = bytes minus what the
 * backward has finished with -- what an allocator that frees at once would hold: it rises
 * through the forward, falls through the backward, with the re-computation bumps. Either array
 * may be NULL. *backward_start: the event where the backward began (-1 if none). Returns the
 * number of events. */
#define VT_TIMELINE_MAX 4096
int vt_activation_timeline(const vt_model *m, size_t *bytes, size_t *live, int max, int *backward_start);
/* Frees the activation arena (it is re-allocated, and kept, at the next call that needs more). */
void vt_release_activations(vt_model *m);

/* ---- training pieces ---------------------------------------------------------------------------- */

/* lightly's 2-D sin-cos positional table: out [(P + G*G), D], P zero rows first. */
vt_status vt_sincos_table(float *out, int D, int G, int P);

/* A seeded generator of our own (xoshiro128**): the same seed gives the same bits everywhere.
 * Its state is plain data, to be saved with a training checkpoint. */
typedef struct {
    uint32_t s[4];
} vt_rng;
void vt_rng_seed(vt_rng *r, uint64_t seed);
uint32_t vt_rng_u32(vt_rng *r);
float vt_rng_uniform(vt_rng *r); /* [0, 1) */
float vt_rng_normal(vt_rng *r);
/* The initialisation timm / lightly apply for the model's kind: lightly (MAE style): xavier-uniform
 * Linears and patch embedding, cls normal(.02), frozen sin-cos pos_embed, mask token 0, decoder
 * mask token normal(.02); timm: trunc-normal(.02) Linears and pos_embed, cls/reg normal(1e-6);
 * AIM: timm backbone with sin-cos pos_embed, PyTorch-default head; LayerNorm 1/0 everywhere. */
vt_status vt_init_weights(vt_model *m, uint64_t seed);
/* lightly random_token_mask: idx_keep [B, n_keep] (the class token first unless mask_class_token),
 * idx_mask [B, L - n_keep]; n_keep = vt_mask_keep_count. Buffers hold B*L indices. */
vt_status vt_random_token_mask(vt_rng *r, int B, int L, float mask_ratio, int mask_class_token,
                               int64_t *idx_keep, int64_t *idx_mask, int *n_keep);
/* its n_keep: int((float)(L - 1) * (1 - ratio)) + 1 in float32 arithmetic, at most L (with
 * mask_class_token: int(L * (1 - ratio))) */
int vt_mask_keep_count(int L, float mask_ratio, int mask_class_token);
/* lightly random_prefix_mask: mask[b, j] = j >= r_b, r_b uniform in [0, max_prefix_length). */
vt_status vt_random_prefix_mask(vt_rng *r, int B, int N, int max_prefix_length, uint8_t *mask);

/* AdamW (torch.optim.AdamW semantics) over the trainable parameters; no weight decay on norms,
 * biases, tokens and positional embeddings (lightly's parameter groups). */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} vt_adamw_config;
vt_status vt_optimizer_init(vt_model *m, const vt_adamw_config *cfg);
vt_status vt_optimizer_step(vt_model *m, float lr); /* refuses non-finite gradients, changing nothing */
vt_status vt_clip_grad_norm(vt_model *m, float max_norm, double *norm_before);
/* lightly CosineWarmupScheduler's learning-rate multiplier at `step` */
float vt_cosine_warmup(long step, double warmup_steps, double total_steps);
/* One AdamW update of a flat tensor p[n] (gradient g, moments m, v; t = the 1-based step), the
 * loop vt_optimizer_step runs per parameter with its weight decay; for checking it alone. */
int vt_adamw_update(float *p, const float *g, float *m, float *v, size_t n, long t, float lr, float b1,
                    float b2, float eps, float wd);

/* ---- training (trainer.c) --------------------------------------------------------------------- */

typedef struct {
    float lr; /* peak learning rate */
    float beta1, beta2, eps, weight_decay;
    long warmup_steps, total_steps; /* lightly's cosine-warmup schedule; total 0 = constant lr */
    float clip_norm;                /* global gradient-norm clipping, 0 = off */
    float mask_ratio;               /* MAE: random_token_mask ratio */
    uint64_t seed;                  /* masks are drawn from a generator seeded with this */
    float label_smoothing;          /* classifier: timm's label smoothing (0 = cross-entropy) */
    float min_lr;                   /* the cosine ends at min_lr + (lr - min_lr) * 0.001 (timm's lr_min) */
    int grad_accum;                 /* K >= 1: a step of batch images runs K micro-batches of batch / K,
                                     * each loss scaled by 1/K (timm's --grad-accum-steps), then one
                                     * clip + AdamW: one big batch up to fp32 summation order */
} vt_train_config;

void vt_train_config_default(vt_train_config *t, vt_kind kind);
/* Makes an MAE or AIM model, or a classifier (VT_KIND_TIMM with num_classes > 0), trainable:
 * AdamW state, the mask generator, step 0. */
vt_status vt_trainer_init(vt_model *m, const vt_train_config *t);
/* One step: masks (seeded), loss, backward, clipping, AdamW at the scheduled lr. On a NaN/Inf
 * loss or gradient it returns VT_ERR_NUMERIC and changes nothing (the last good state is kept).
 * An update that makes a parameter or moment NaN or infinite (AdamW's fused finite check: from
 * finite values too, e.g. g^2 past float's range) returns VT_ERR_NUMERIC having written it: the
 * state is then not good -- vt_train_state_save and vt_save_safetensors refuse it, no step runs --
 * until a state is loaded (vt_train_state_load, which checks every value) or vt_trainer_init.
 * *loss (may be NULL) receives the step's loss (with grad_accum K: the mean of the K micro-batch
 * losses; batch must be a multiple of K, the masks are drawn for the whole batch). Works under any
 * checkpointing policy, switchable between steps, with the same bits. */
vt_status vt_train_step(vt_model *m, const float *images, int batch, float *loss);
/* The same step for a classifier: cross-entropy (label smoothing from the train config) on
 * labels [batch] in 0..num_classes-1; no masks. */
vt_status vt_train_step_labels(vt_model *m, const float *images, const int32_t *labels, int batch,
                               float *loss);
long vt_train_step_count(const vt_model *m);
float vt_train_lr(const vt_model *m, long step);
/* Everything a resumed run needs (parameters, AdamW m/v, step, generator, configs) as
 * safetensors bytes (free with vt_free), and back (all-or-nothing; the model's config must be
 * the saved one). Resuming continues bit for bit. */
vt_status vt_train_state_save(const vt_model *m, uint8_t **out, size_t *out_len);
vt_status vt_train_state_load(vt_model *m, const uint8_t *bytes, size_t len);
/* The checks of a training state's metadata alone (format, kind, model_config, train_config, step,
 * rng, the CRC-32 of every tensor), with no model: what vt_train_state_load checks first, for a
 * caller that reads a checkpoint before it makes anything from it. Errors name the field. */
vt_status vt_train_state_check(const uint8_t *bytes, size_t len);
/* After a VT_FN_LOSS forward: images [B,C,H,W] for teaching -- masked: MAE's masked patches set
 * to 0 (the mean colour after normalisation), the original elsewhere (AIM: the original);
 * recon: the predicted patches (de-normalised per patch when the target was) over the masked
 * ones (AIM: every patch is predicted). */
vt_status vt_loss_visualize(const vt_model *m, float *masked, float *recon);

/* ---- the step as data (exec.c, record.c, trace.c; docs/kernels.md) ------------------------------ */

/* A training step -- or a call and its backward -- is a closed list of kernel calls (the kernel
 * list, docs/kernels.md) over planned buffers. Recording runs the engine's own orchestration
 * (checks, plan, masks, arena) without running a kernel and keeps each call: the kernel, its
 * integer and float arguments, and each buffer operand as (region, byte offset, bytes, access).
 * What varies from step to step is an input of the list, never baked into it: the images,
 * indices, masks and labels, and the learning rate and AdamW step count (scalars region); the
 * non-finite check is a kernel whose flag makes AdamW skip, so a device needs no read-back in the
 * middle of a step. The list replays through this engine's kernels bit for bit
 * (vt_trace_replay), at any step whose shapes and policy are the recorded ones. */
typedef enum {
    VT_REG_NONE = 0, /* an absent (NULL) operand */
    VT_REG_PARAMS,   /* the parameter buffer (vt_param_total floats) */
    VT_REG_GRADS,    /* the gradient buffer (vt_grad_total floats) */
    VT_REG_ADAM_M,
    VT_REG_ADAM_V, /* AdamW's moments, in the gradient layout */
    VT_REG_ARENA,  /* the activation arena (the call's planned bytes) */
    VT_REG_IMAGES, /* input: images [B, C, H, W] f32 */
    VT_REG_IDX_KEEP,
    VT_REG_IDX_MASK, /* input: [B, n] int64 */
    VT_REG_MASK,     /* input: [B, L] bytes */
    VT_REG_LABELS,   /* input: [B] int32 */
    VT_REG_DOUTS,    /* input: upstream gradients of the outputs, one after the other */
    VT_REG_DIMAGES,  /* output: d images [B, C, H, W] f32 (accumulated) */
    VT_REG_SCALARS,  /* vt_scalars */
    VT_REG_COUNT
} vt_region;
typedef enum { VT_ACC_R = 1, VT_ACC_W = 2, VT_ACC_RW = 3 } vt_access; /* W: every element written */
typedef enum { VT_PHASE_FORWARD, VT_PHASE_RECOMPUTE, VT_PHASE_BACKWARD, VT_PHASE_OPTIMIZER } vt_phase;
typedef enum {
    VT_TR_CALL,   /* a kernel call */
    VT_TR_ALLOC,  /* an arena buffer: name, offset, bytes (the arena's top is offset + bytes) */
    VT_TR_RESET,  /* the arena's top goes back to offset (a scope ends) */
    VT_TR_RELEASE /* bytes the backward is done with (still allocated: for the timeline) */
} vt_trace_kind;

/* The scalars region of a model, byte for byte: what a step reads and writes besides tensors. */
typedef struct {
    float loss;             /* out: the loss of a VT_FN_LOSS forward */
    float dloss;            /* in: its upstream gradient (1 in a training step) */
    float lr;               /* in: AdamW's learning rate of the step */
    float step;             /* in: AdamW's 1-based step count t, as (float)t */
    float nonfinite;        /* out: 1 when the loss or a gradient is NaN or infinite (AdamW skipped) */
    float update_nonfinite; /* out: 1 when AdamW's update made a parameter or moment NaN or infinite */
    double grad_norm;       /* out: the global gradient norm (clipping) */
} vt_scalars;

#define VT_TRACE_MAX_OPS    10
#define VT_TRACE_MAX_INTS   10
#define VT_TRACE_MAX_FLOATS 4
typedef struct {
    uint8_t region, access, dtype; /* vt_region, vt_access; dtype 0 f32, 3 f64, 4 i64, 5 i32, 7 u8 */
    uint64_t offset, bytes;        /* in the region (bytes == 0 for an absent operand) */
} vt_trace_operand;
typedef struct {
    vt_trace_kind kind;
    int phase;        /* vt_phase */
    int chain, block; /* chain 0 the encoder, 1 the MAE decoder / AIM head, -1 none; its block or -1 */
    int kernel;       /* VT_TR_CALL: vt_kernel_name(kernel) */
    int nops, nints, nfloats;
    vt_trace_operand op[VT_TRACE_MAX_OPS];
    int64_t ints[VT_TRACE_MAX_INTS];
    float floats[VT_TRACE_MAX_FLOATS];
    double flops;           /* multiply + add = 2 */
    uint64_t offset, bytes; /* ALLOC: the buffer; RESET: the new top (offset); RELEASE: bytes */
    char name[40];          /* ALLOC: the buffer's name, e.g. enc.blocks.3.att */
} vt_trace_entry;
typedef struct vt_trace vt_trace;

/* Records one vt_train_step (labels NULL) or vt_train_step_labels of `batch` images, without
 * running anything: the model, its optimizer and its generator are left as they were. */
vt_status vt_trace_train_step(vt_model *m, const float *images, const int32_t *labels, int batch,
                              vt_trace **out);
/* Records vt_forward(fn, in, backward) and, with backward, vt_backward(douts, n_douts, dimages,
 * param_grads). */
vt_status vt_trace_call(vt_model *m, vt_fn fn, const vt_inputs *in, int backward, const float *const *douts,
                        int n_douts, float *dimages, int param_grads, vt_trace **out);
void vt_trace_free(vt_trace *t);
int vt_trace_count(const vt_trace *t);
const vt_trace_entry *vt_trace_get(const vt_trace *t, int i);
/* Bytes of a region the list addresses (0: unused); the input regions' bytes as recorded (images,
 * indices, masks, labels, douts, and the scalars with the step's lr, step and dloss), NULL when
 * unused: what a replay of the recorded step starts from. */
uint64_t vt_trace_region_bytes(const vt_trace *t, vt_region r);
/* Where a recorded call leaves its outputs (vt_output's order; a training step: its loss in the
 * scalars region): how many, and output i's bytes (0 past the end). The JSON lists them in full. */
int vt_trace_output_count(const vt_trace *t);
uint64_t vt_trace_output_bytes(const vt_trace *t, int i);
const void *vt_trace_input(const vt_trace *t, vt_region r);
/* Runs the list's calls through this build's kernels (vt_kernels_use_reference(1): the scalar
 * references) over bufs[region], each of at least vt_trace_region_bytes bytes (NULL where unused). */
vt_status vt_trace_replay(const vt_trace *t, void *const bufs[VT_REG_COUNT]);
/* Routes every kernel to its scalar reference (1) or back to this build's fastest (0); tests. */
void vt_kernels_use_reference(int on);
/* A training step run elsewhere -- a replay of its recorded list, by another backend or over other
 * buffers: vt_train_step_begin gives the step's inputs as vt_train_step would draw them (in: the
 * images, the masks / indices, in the model's buffers until the next step, or the labels; sc: the
 * scalars region's inputs lr, step, dloss) and vt_train_step_end, with the replay's scalars,
 * commits it as vt_train_step does: the step counts when the loss and gradients were finite
 * (nonfinite 0), else VT_ERR_NUMERIC and the generator goes back (the next step draws the same
 * masks). labels: NULL for MAE / AIM. The model's own buffers are not touched: the state lives
 * where the replay ran. */
vt_status vt_train_step_begin(vt_model *m, const float *images, const int32_t *labels, int batch,
                              vt_inputs *in, vt_scalars *sc);
vt_status vt_train_step_end(vt_model *m, const vt_scalars *sc);
/* A model's own regions (params, grads, adam_m, adam_v, arena, scalars): base and bytes (NULL and
 * 0 for the others, or one it does not have yet), to hand a step's state to another backend. */
void *vt_model_region(vt_model *m, vt_region r, uint64_t *bytes);
/* The list as JSON (format vitrine-trace/1, docs/kernels.md), or as a summary for people: calls and
 * FLOPs per kernel, FLOPs re-computed, the arena's peak, what each block stores, frees and re-computes.
 * malloc'd text (free with vt_free). */
vt_status vt_trace_json(const vt_trace *t, char **out, size_t *len);
vt_status vt_trace_summary(const vt_trace *t, char **out, size_t *len);
/* The kernel list (kernel_list.h): names, and each kernel's signature as the docs print it */
int vt_kernel_count(void);
const char *vt_kernel_name(int k);
vt_status vt_kernel_contract(char **out, size_t *len);      /* markdown table of every kernel */
vt_status vt_kernel_contract_json(char **out, size_t *len); /* the same as JSON, for a backend */
const char *vt_region_name(int r);
const char *vt_phase_name(int phase);

const char *vt_kind_name(vt_kind k);
vt_status vt_kind_from_name(const char *name, vt_kind *k);
vt_status vt_model_config_to_json(const vt_model_config *c, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
