#!/usr/bin/env bash
# Set-up on a fresh Debian (bookworm) machine: system packages, npm packages, the native and wasm
# builds; then the main job, `node web/cli.js train` (unless --no-main). Safe to run again. Each
# phase says what it does and, when it is done, how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
run_main=1
[ "${1:-}" = "--no-main" ] && run_main=0

start=$SECONDS
phase_start=$SECONDS
phase() { phase_start=$SECONDS; echo "== $*"; }
done_phase() { echo "   done in $((SECONDS - phase_start)) s"; }

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
PKGS="build-essential cmake clang-format emscripten clang-14 libclang-rt-14-dev lld-14 wasi-libc libclang-rt-14-dev-wasm32 clang-19 lld-19 libclang-rt-19-dev-wasm32 wabt dataset-fashion-mnist python3-torch python3-pil libopenblas0-pthread chromium libvulkan1"
# chromium also gives the WebGPU tests their adapter: its SwiftShader Vulkan ICD, loaded by the npm
# package webgpu (Dawn) through the Vulkan loader libvulkan1 (web/webgpu/device.js)
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
# Node.js 20+ may come from elsewhere than Debian (with its own npm): only ask apt when absent
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
  phase "apt-get install:$missing (a few minutes on a fresh machine; apt's own output is hidden)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  done_phase
else
  echo "== apt: every package is installed"
fi

if [ -f package-lock.json ]; then
  phase "npm ci: the npm packages of package-lock.json (the runtime's pngjs, jpeg-js; the tests' and benchmarks' playwright-core, vite, typescript, tfjs)"
  npm ci --no-audit --no-fund --loglevel=error
  # the runtime dependencies (pngjs, jpeg-js) with their registry data in the npm cache: tests/package
  # installs the packed tarball elsewhere from the cache (npm ci fetches only the lock's tarballs)
  npm cache add $(node -p "Object.entries(require('./package.json').dependencies || {}).map(([n, v]) => n + '@' + v).join(' ')") --loglevel=error
  done_phase
fi

phase "build: native engine, CLI and C tests, and every wasm build of wasm/builds.json (cmake, build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
done_phase

if [ "$run_main" = 1 ]; then
  # MAE on Fashion-MNIST through the default wasm build (relaxed SIMD, every core): progress, kNN
  # accuracy, weights, checkpoint and reconstructions in out/ (about 7-8 min on 2 cores; the run
  # measured: docs/experiments.md). Parity: node web/cli.js parity ../shared/fixtures/*.safetensors
  phase "main job: node web/cli.js train (MAE on Fashion-MNIST, 5000 steps, then kNN; about 7-8 min on 2 cores)"
  node web/cli.js train
  done_phase
fi
echo "== set-up done in $((SECONDS - start)) s"
