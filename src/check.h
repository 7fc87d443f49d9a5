/* check.h: the input checks the objectives share (check.c). */
#ifndef VT_CHECK_H
#define VT_CHECK_H
#include "model.h"

/* 1 when v is among row[0..n) */
int vt_row_has(const int64_t *row, int n, int64_t v);
/* every index of each of B rows of K in [0, L); seen: L bytes of scratch */
vt_status vt_check_index(const int64_t *idx, int B, int K, int L, const char *what, int allow_repeat,
                         uint8_t *seen);
/* the size of a call's images (vt_inputs height / width) */
vt_status vt_check_image_size(const vt_model *m, const vt_inputs *in);
/* a call's encoder inputs; check_values: also the index values (a plan reads only sizes) */
vt_status vt_check_encoder_inputs(const vt_model *m, const vt_inputs *in, int causal, int check_values);

#endif
