#!/usr/bin/env bash
# Every test: the native suite (ctest), the WebAssembly / JS suite, the browser demo and the npm package (node --test).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d build ] || { echo "no build/: run scripts/setup.sh first" >&2; exit 2; }
cmake --build build -j "$(nproc)" >/dev/null
status=0
# the formatters' check (prettier, clang-format): scripts/format.sh rewrites what it lists
bash scripts/format.sh --check || status=1
(cd build && ctest --output-on-failure -j 2) || status=1
# the native C tests once more under ASan + UBSan, and each libFuzzer harness (tests/fuzz/) for a
# fixed 20000 runs from seeds the tests write (clang-14 with libFuzzer: scripts/setup.sh); ~3 min
if command -v clang-14 >/dev/null 2>&1; then
  cmake -S . -B build-asan -DCMAKE_C_COMPILER=clang-14 -DVT_SANITIZE=ON -DVT_WASM=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build build-asan -j "$(nproc)" >/dev/null &&
    (cd build-asan && ctest --output-on-failure -j 2) || status=1
else
  echo "scripts/test.sh: clang-14 missing: the ASan/UBSan and fuzz runs are skipped (bash scripts/setup.sh)" >&2
  status=1
fi
# a test file that hangs fails after 30 minutes (the WebGPU matrix takes ~10), and one whose tests
# are over exits even if a failure left a handle open (a SwiftShader device mid-dispatch)
NODE_TEST="node --test --test-timeout=1800000 --test-force-exit"
if [ -d tests/node ]; then
  $NODE_TEST tests/node/ || status=1
fi
# the browser demo in headless Debian Chromium (skips itself, saying so, when /usr/bin/chromium is absent)
if [ -d tests/browser ]; then
  $NODE_TEST tests/browser/ || status=1
fi
# the npm package: npm pack, then installed in temporary directories: Node, npx CLI, Vite + Chromium, tsc
if [ -d tests/package ]; then
  $NODE_TEST tests/package/ || status=1
fi
exit $status
