/* optim.h: what optim.c shares inside the engine besides its public calls (vitrine.h: AdamW,
 * lightly's cosine-warmup schedule, gradient clipping). */
#ifndef VT_OPTIM_H
#define VT_OPTIM_H
#include "vitrine.h"

void vt_optimizer_free(vt_model *m);
/* vt_optimizer_step, refusing also a non-finite loss when check_loss (a training step's) */
vt_status vt_optimizer_apply(vt_model *m, float lr, int check_loss);

#endif
