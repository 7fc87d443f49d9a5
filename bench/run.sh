#!/usr/bin/env bash
# bench/run.sh: the one benchmark command. Builds the benchmark programs (native + WASI, target
# vitrine_bench) and runs bench/run.mjs: peak, GEMM, training steps (vitrine wasm SIMD and native,
# every checkpointing policy), PyTorch and TF.js side by side, threads (bench/threads_bench.mjs:
# vitrine and PyTorch at 1, 2, every core; the main job's images/s); writes bench/results.md and
# bench/results.json. About 5-10 minutes on 2 cores. `bash bench/run.sh --quick` is a smoke run.
# Needs what scripts/setup.sh installs (python3-torch, libopenblas0-pthread, npm ci for TF.js).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target vitrine_bench vitrine_wasm >/dev/null
node bench/run.mjs "$@"
