/* peak_avx2.c: the portable peak loop (peak_loop.h, GNU C vectors) built with -mavx2 -mfma -ffp-contract=fast
 * (8 lanes, fused multiply-add), to show what an AVX2/FMA build of the same C would reach on this
 * CPU. Linked into the native kernel_bench only; vitrine's native build does NOT use these flags. */
#define PEAK_FN    peak_avx2
#define PEAK_LANES 8
#define PEAK_VEC   peak_avx2_vec
#include "peak_loop.h"
