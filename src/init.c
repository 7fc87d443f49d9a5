/* init.c: the fixed 2-D sin-cos positional table (lightly / MAE recipe). Random initialisation
 * lives beside it once the trainer needs it. */
#include "vitrine.h"
#include <math.h>
#include <string.h>

/* out [(P + G*G), D]: P zero rows, then for token t = row*G + col:
 * [sin(col w), cos(col w), sin(row w), cos(row w)], each D/4 wide, w_k = 1 / 10000^(k / (D/4)).
 * (meshgrid(w, h) puts the column index in the first half, as lightly's table does.) */
int vt_sincos_table(float *out, int D, int G, int P) {
    if (!out || D <= 0 || D % 4 || G <= 0 || P < 0)
        return vt_fail(VT_ERR_ARG, "sin-cos table: embed_dim %d must be a positive multiple of 4, grid %d >= 1, prefix %d >= 0", D, G, P);
    int q = D / 4;
    memset(out, 0, (size_t)P * D * sizeof(float));
    for (int r = 0; r < G; r++)
        for (int c = 0; c < G; c++) {
            float *o = out + ((size_t)P + (size_t)r * G + c) * D;
            for (int k = 0; k < q; k++) {
                /* float32 like numpy's float32 recipe: omega, then the products */
                float omega = 1.0f / powf(10000.0f, (float)k / (float)q);
                float ac = (float)c * omega, ar = (float)r * omega;
                o[k] = sinf(ac);
                o[q + k] = cosf(ac);
                o[2 * q + k] = sinf(ar);
                o[3 * q + k] = cosf(ar);
            }
        }
    return VT_OK;
}
