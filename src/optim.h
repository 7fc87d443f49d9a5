/* optim.h: what optim.c shares inside the engine besides its public calls (vitrine.h: AdamW,
 * lightly's cosine-warmup schedule, gradient clipping). */
#ifndef VT_OPTIM_H
#define VT_OPTIM_H
#include "vitrine.h"

void vt_optimizer_free(vt_model *m);
/* vt_optimizer_step, refusing also a non-finite loss when check_loss (a training step's) */
vt_status vt_optimizer_apply(vt_model *m, float lr, int check_loss);
/* After an update (vt_optimizer_apply, a replayed step): when its fused finite check found a NaN or
 * infinity, the state is marked bad (m->opt.bad) and VT_ERR_NUMERIC names where. */
vt_status vt_optimizer_after_update(vt_model *m);
/* The first value of a state that is not good -- a parameter or moment NaN or infinite, a second
 * moment below 0 -- described in buf ("adam_v/blocks.0.norm1.weight negative ... (-1 at element
 * 3)", the names of a checkpoint's tensors); 0 when every value is good. p: the parameter buffer,
 * mm / vv: the moments in the gradient layout (NULL: not looked at). */
int vt_state_bad_value(const vt_model *m, const float *p, const float *mm, const float *vv, char *buf,
                       size_t len);

#endif
