#!/usr/bin/env bash
# Set-up on a fresh Debian (bookworm) machine: system packages, npm packages, the native and wasm
# builds; then the main job, `node web/cli.js train` (unless --no-main). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
run_main=1
[ "${1:-}" = "--no-main" ] && run_main=0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
PKGS="build-essential cmake emscripten clang-14 libclang-rt-14-dev lld-14 wasi-libc libclang-rt-14-dev-wasm32 clang-19 lld-19 libclang-rt-19-dev-wasm32 wabt dataset-fashion-mnist python3-torch libopenblas0-pthread chromium libvulkan1"
# chromium also gives the WebGPU tests their adapter: its SwiftShader Vulkan ICD, loaded by the npm
# package webgpu (Dawn) through the Vulkan loader libvulkan1 (web/webgpu/device.js)
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
# Node.js 20+ may come from elsewhere than Debian (with its own npm): only ask apt when absent
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
  echo "== installing:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

if [ -f package-lock.json ]; then
  echo "== npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  # the runtime dependencies (pngjs, jpeg-js) with their registry data in the npm cache: tests/package
  # installs the packed tarball elsewhere from the cache (npm ci fetches only the lock's tarballs)
  npm cache add $(node -p "Object.entries(require('./package.json').dependencies || {}).map(([n, v]) => n + '@' + v).join(' ')") --loglevel=error
fi

echo "== build (native + wasm)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"

if [ "$run_main" = 1 ]; then
  # MAE on Fashion-MNIST through the wasm SIMD build: progress, kNN accuracy, weights, checkpoint
  # and reconstructions in out/ (~3-4 min on 2 cores). Parity: node web/cli.js parity ../shared/fixtures/*.safetensors
  echo "== main job: node web/cli.js train"
  node web/cli.js train
fi
