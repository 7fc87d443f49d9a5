/* peak_module.c: peak_wasm.h's loop as a wasm reactor for JavaScript (build/wasm/peak-relaxed.wasm
 * and peak-simd.wasm, bench/bench.cmake): bench/step_bench.mjs times it between training steps,
 * so that a step's "% of the one-core peak" pairs each step with a peak measured beside it. */
#include "peak_wasm.h"

/* flops of peak_chains(iters) after running it */
__attribute__((export_name("peak"))) double peak(int iters) { return peak_chains(iters); }
