/* replay.h: the replay oracle, a test beside the engine (not part of it), over the public API.
 *
 * One case = a model config, a checkpointing policy and what to record: a training step of the
 * model's objective (MAE, AIM, classifier), or an encoder call (encode, forward,
 * forward_intermediates, timm forward; or the loss with image gradients) with its backward. Two
 * identical models A and B; B records the step (vt_trace_*), the list is replayed over fresh
 * buffers (a NaN-filled arena, B's parameters and optimizer state, the recorded inputs); A runs the
 * step for real. Pass: parameters, gradients, AdamW moments, the loss (and, for a call, its
 * outputs and d images) equal bit for bit, and B, which only recorded, then steps as A did; a
 * training step's list then replays the next two steps too, fed their inputs
 * (vt_train_step_begin / _end).
 * Shared by tests/test_replay.c (ctest) and wasm/exports.c (node --test through every build). */
#ifndef VT_REPLAY_H
#define VT_REPLAY_H
#include "vitrine.h"

typedef struct {
    vt_model_config cfg;
    const char *policy; /* a policy, or "budget": half way between none's and block's activation plans */
    int fn;             /* -1: a training step; else the vt_fn recorded with its backward */
    int batch;
    /* inputs of a recorded call (a training step draws its own) */
    int idx_keep;  /* n_keep indices per image; the first repeated (lightly takes repeats) */
    int idx_mask;  /* n_mask indices per image (patches) */
    int bool_mask; /* a [B, L] mask: lightly's token mask, or the causal prefix mask */
    int is_causal;
    int reference;     /* through vt_kernels_use_reference(1) */
    int height, width; /* a call's images of another size (dynamic_img_size; 0: the config's) */
    int distilled_training;
    vt_inter_opts inter; /* timm's forward_intermediates */
    int warm_steps;      /* training: real steps taken by both before the recorded one */
    float clip_norm;     /* training: gradient clipping (0: off) */
} vt_replay_case;

typedef struct {
    int pass;
    int calls, entries; /* of the recorded list */
    char error[600];
} vt_replay_result;

vt_status vt_replay_check(const vt_replay_case *c, vt_replay_result *r);

/* The cases: every objective's training step and the encoder calls over the configs that matter
 * (tests/test_replay.c lists them); case i under policy p (vt_replay_policy: none, block, every:2,
 * sqrt, selective, budget half way), through the references or not. Returns its name (NULL past the end). */
int vt_replay_case_count(void);
const char *vt_replay_policy(int p);
const char *vt_replay_case_get(int i, int policy, int reference, vt_replay_case *out);
/* the small model the cases use, of a kind */
void vt_replay_small(vt_model_config *mc, vt_kind kind);
#endif
