#!/usr/bin/env bash
# Line coverage of the engine (src/) by the native C tests: a separate build (build-cov/, gcc
# --coverage, no wasm, no FMA twin), ctest there, then gcov's per-file line figures -- no gcovr or
# lcov needed. `bash scripts/coverage.sh [CTEST_ARGS...]` (e.g. -R 'errors|api' for a subset);
# FILES="trainer api exec" narrows the report; REPORT_ONLY=1 reports the last run again. Prints one line per file: lines run / lines, %.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-cov
if [ "${REPORT_ONLY:-}" != 1 ]; then
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DVT_WASM=OFF -DVT_NATIVE_FMA=OFF \
  -DCMAKE_C_FLAGS="--coverage -O1" -DCMAKE_EXE_LINKER_FLAGS=--coverage >/dev/null
cmake --build "$dir" -j "$(nproc)" >/dev/null
# counters from an earlier run would add up: start from zero
find "$dir" -name '*.gcda' -delete
(cd "$dir" && ctest -j "$(nproc)" --timeout 900 "$@" >/dev/null) || echo "coverage.sh: some tests failed (a test killed by its TIMEOUT leaves no counters)" >&2
fi
obj="$dir/CMakeFiles/vitrine.dir/src"
files=${FILES:-$(cd src && ls *.c | sed 's/\.c$//')}
printf '%-14s %7s %7s %6s\n' file run lines '%'
total_run=0 total=0
for f in $files; do
  [ -f "$obj/$f.c.gcda" ] || {
    printf '%-14s %7s %7s %6s\n' "$f.c" - - 'not run'
    continue
  }
  # gcov -n: the summary only (no .gcov files); its first "Lines executed" is the file itself
  line=$(gcov -n -o "$obj/$f.c.o" "src/$f.c" 2>/dev/null | awk -v f="src/$f.c" '
    !done && $0 ~ "^File .*"f"'"'"'" { hit = 1; next }
    hit && !done && /^Lines executed:/ { print; done = 1 }')
  pct=$(sed -E 's/Lines executed:([0-9.]+)% of ([0-9]+)/\1/' <<<"$line")
  n=$(sed -E 's/Lines executed:([0-9.]+)% of ([0-9]+)/\2/' <<<"$line")
  run=$(awk -v p="$pct" -v n="$n" 'BEGIN { printf "%d", p * n / 100 + 0.5 }')
  total_run=$((total_run + run)) total=$((total + n))
  printf '%-14s %7d %7d %6.1f\n' "$f.c" "$run" "$n" "$pct"
done
awk -v r=$total_run -v n=$total 'BEGIN { printf "%-14s %7d %7d %6.1f\n", "total", r, n, n ? 100 * r / n : 0 }'
