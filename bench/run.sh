#!/usr/bin/env bash
# bench/run.sh: the one benchmark command. Builds the benchmark programs (native + wasm, target
# vitrine_bench) and runs bench/run.mjs, which measures every table of bench/results.md (peaks, GEMM
# and attention as % of the one-core peak, the ViT-Ti/16 step against PyTorch, TF.js and jax-js on
# one core and PyTorch on two, thread scaling, the main job's images/s, policies, builds, the demo's
# decoders) and writes bench/results.md and bench/results.json. Prints its own duration at the end: 10-15 min with
# --before on the 2-core machine (614 s on 2026-12-02 at load 1.1-2.5, building the older tree
# included; 32 min once under load 4-10); less without --before;
# `--quick` is a ~3 min smoke run whose figures mean nothing.
#
#   bash bench/run.sh [--quick] [--before REF]
#
# --before REF: the same harness against an older engine, interleaved with this one: REF (a commit
# or branch) is checked out in build-before/src, this tree's bench/ copied over its own (so the
# same programs measure both), built there, and every vitrine figure gets a "before" twin.
# Run it on a quiet machine: other processes on the cores distort every figure, the paired ratios
# least. Needs what scripts/setup.sh installs (python3-torch, libopenblas0-pthread, npm ci for
# TF.js and jax-js, clang-19 for the relaxed build).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
args=()
before=""
while [ $# -gt 0 ]; do
  case "$1" in
    --before) before="${2:?--before needs a commit or branch}"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target vitrine_bench vitrine_wasm >/dev/null
if [ -n "$before" ]; then
  src=build-before/src
  rev=$(git rev-parse --verify "$before^{commit}")
  if [ -d "$src" ]; then git -C "$src" checkout --quiet --detach --force "$rev"; else git worktree add --quiet --detach "$src" "$rev"; fi
  rm -rf "$src/bench" && cp -r bench "$src/bench"
  cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$src/build" -j "$(nproc)" --target vitrine_bench vitrine_wasm >/dev/null
  args+=(--before-root "$src" --before-ref "$(git rev-parse --short "$rev")")
fi
node bench/run.mjs ${args[@]+"${args[@]}"}
echo "bench/run.sh: $(( $(date +%s) - start )) s in all, builds included"
