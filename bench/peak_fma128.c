/* peak_fma128.c: the portable peak loop (peak_loop.h) on 4 lanes built with -mfma
 * -ffp-contract=fast: 128-bit FMA, the native FMA build's peak (what the relaxed wasm build's
 * f32x4.relaxed_madd is on an FMA host). Linked into build/kernel_bench_fma only. */
#define PEAK_FN    peak_fma128
#define PEAK_LANES 4
#define PEAK_VEC   peak_fma128_vec
#include "peak_loop.h"
