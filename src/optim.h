/* optim.h: what optim.c shares inside the engine besides its public calls (vitrine.h: AdamW,
 * lightly's cosine-warmup schedule, gradient clipping). */
#ifndef VT_OPTIM_H
#define VT_OPTIM_H
#include "vitrine.h"

void vt_optimizer_free(vt_model *m);
vt_status vt_grad_norm(const vt_model *m, double *norm);
#endif
