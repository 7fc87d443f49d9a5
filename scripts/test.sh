#!/usr/bin/env bash
# Every test: the native suite (ctest), the WebAssembly / JS suite, the browser demo and the npm package (node --test).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d build ] || { echo "no build/: run scripts/setup.sh first" >&2; exit 2; }
cmake --build build -j "$(nproc)" >/dev/null
status=0
(cd build && ctest --output-on-failure -j 2) || status=1
if [ -d tests/node ]; then
  node --test tests/node/ || status=1
fi
# the browser demo in headless Debian Chromium (skips itself, saying so, when /usr/bin/chromium is absent)
if [ -d tests/browser ]; then
  node --test tests/browser/ || status=1
fi
# the npm package: npm pack, then installed in temporary directories: Node, npx CLI, Vite + Chromium, tsc
if [ -d tests/package ]; then
  node --test tests/package/ || status=1
fi
exit $status
