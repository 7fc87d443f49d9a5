#!/usr/bin/env bash
# Every test: the native suite (ctest) and the WebAssembly / JS suite (node --test).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d build ] || { echo "no build/: run scripts/setup.sh first" >&2; exit 2; }
cmake --build build -j "$(nproc)" >/dev/null
status=0
(cd build && ctest --output-on-failure -j 2) || status=1
if [ -d tests/node ]; then
  node --test tests/node/ || status=1
fi
exit $status
