/* optim.h: AdamW (PyTorch semantics), lightly's cosine-warmup schedule, gradient clipping. */
#ifndef VT_OPTIM_H
#define VT_OPTIM_H
#include <stddef.h>

#include "vitrine.h"

float vt_cosine_warmup(long step, double warmup, double total);
int vt_optimizer_init(vt_model *m, const vt_adamw_config *cfg);
void vt_optimizer_free(vt_model *m);
/* One update of every trainable parameter with learning rate lr (the schedule is the caller's). */
int vt_optimizer_step(vt_model *m, float lr);
int vt_grad_norm(const vt_model *m, double *norm);
int vt_clip_grad_norm(vt_model *m, float max_norm, double *norm_out);
#endif
