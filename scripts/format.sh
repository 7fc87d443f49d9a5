#!/usr/bin/env bash
# The formatters: prettier for the JavaScript / TypeScript (.prettierrc.json), clang-format 14 for
# the C (.clang-format). `bash scripts/format.sh` rewrites the files; `--check` lists the files that
# differ and exits 1 (scripts/test.sh runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=write
[ "${1:-}" = "--check" ] && mode=check
mapfile -t js < <(git ls-files '*.js' '*.mjs' '*.cjs' '*.ts')
mapfile -t c < <(git ls-files '*.c' '*.h')
status=0
if [ "$mode" = check ]; then
  npx --no-install prettier --check --log-level warn "${js[@]}" || status=1
  bad=$(for f in "${c[@]}"; do clang-format --dry-run "$f" 2>&1 | grep -q . && echo "$f"; done || true)
  if [ -n "$bad" ]; then
    echo "clang-format: these files differ from .clang-format (bash scripts/format.sh):" >&2
    echo "$bad" >&2
    status=1
  fi
else
  npx --no-install prettier --write --log-level warn "${js[@]}"
  clang-format -i "${c[@]}"
fi
exit $status
