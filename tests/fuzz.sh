#!/usr/bin/env bash
# tests/fuzz.sh [SECONDS]: every libFuzzer harness (tests/fuzz/) under ASan + UBSan, and the JS image
# and metadata fuzz loops, for SECONDS in all (default 600), split evenly. The corpus grows in
# build-asan/fuzz-long/<harness> across runs (seeds: build-asan/fuzz-corpus, written by fuzz_seeds).
# Prints per harness: runs, crashes, and the edges covered per source file (libFuzzer -print_coverage).
# Exit status: non-zero when any harness found a crash (its input: build-asan/fuzz-crash-*).
set -uo pipefail
cd "$(dirname "$0")/.."
total=${1:-600}
harnesses="safetensors config weights checkpoint parity train meta api"
n=10 # eight C harnesses + the JS image and metadata loops
per=$(( total / n )); [ "$per" -lt 5 ] && per=5
B=build-asan
cmake -S . -B $B -DCMAKE_C_COMPILER=clang-14 -DVT_SANITIZE=ON -DVT_WASM=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 2
cmake --build $B -j2 >/dev/null || exit 2
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
$B/fuzz_seeds $B/fuzz-corpus ../shared/fixtures || exit 2
status=0
for h in $harnesses; do
  mkdir -p $B/fuzz-long/$h
  log=$B/fuzz-$h.log
  dict=; case $h in checkpoint|train|meta) dict=-dict=tests/fuzz/state.dict ;; esac
  $B/fuzz_$h $dict -max_total_time=$per -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 -print_coverage=1 \
    -artifact_prefix=$B/fuzz-crash-$h- $B/fuzz-long/$h $B/fuzz-corpus/$h >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  crashes=$(ls $B/fuzz-crash-$h-* 2>/dev/null | wc -l)
  echo "== fuzz_$h: ${runs:-?} runs in ${per}s, exit $rc, crash files $crashes"
  [ "$rc" -ne 0 ] && status=1
  # edges covered / total per source file of the engine (src/, harness/)
  awk '/^(COVERED|UNCOVERED)_FUNC:/ { split($5, e, "/"); f = $NF; sub(/:[0-9]+$/, "", f);
         n = split(f, p, "/"); if (p[n-1] != "src" && p[n-1] != "harness" && p[n-1] != "kernels") next;
         k = p[n-1] "/" p[n]; c[k] += e[1]; t[k] += e[2] }
       END { for (k in c) if (c[k]) printf "   %-26s %5d / %5d edges (%3.0f%%)\n", k, c[k], t[k], 100 * c[k] / t[k] }' "$log" | sort
done
# every harness together: per function the most edges any harness covered (a lower bound of the
# union: two harnesses may cover different edges of one function), summed per file
echo "== all C harnesses (per function: the best harness)"
for h in $harnesses; do cat $B/fuzz-$h.log; done | awk '/^(COVERED|UNCOVERED)_FUNC:/ { split($5, e, "/"); f = $NF; sub(/:[0-9]+$/, "", f);
       n = split(f, p, "/"); if (p[n-1] != "src" && p[n-1] != "harness" && p[n-1] != "kernels") next;
       k = p[n-1] "/" p[n]; fn = k " " $6; if (!(fn in t)) { t[fn] = e[2]; file[fn] = k } if (e[1] > c[fn]) c[fn] = e[1] }
     END { for (fn in t) { C[file[fn]] += c[fn]; T[file[fn]] += t[fn] }
           for (k in C) if (C[k]) printf "   %-26s %5d / %5d edges (%3.0f%%)\n", k, C[k], T[k], 100 * C[k] / T[k] }' | sort
echo "== images (JS loop, web/train/node-data.js decodeImage)"
node tests/fuzz/fuzz_images.mjs --seconds "$per" || status=1
echo "== metadata (JS loop, web/formats/metadata.js validators + the engine's check of the specs they accept)"
node tests/fuzz/fuzz_metadata.mjs --seconds "$per" --coverage || status=1
exit $status
