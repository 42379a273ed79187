#!/usr/bin/env bash
# N fresh clones of this checkout's HEAD in a row, each `CI=true bash .ci/run` with a new venv
# (services started by the fixtures), each run's log and time under .fresh/<time>/; a line per run.
#   scripts/fresh_runs.sh [N]    (default 5)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd); N="${1:-5}"
case "$N" in ''|*[!0-9]*|0) echo "fresh_runs: N must be a positive number, got '$N'" >&2; exit 2 ;; esac
OUT="$ROOT/.fresh/$(date -u +%Y%m%dT%H%M%SZ)"; mkdir -p "$OUT"
HEAD=$(git rev-parse --short HEAD); failed=0
for i in $(seq 1 "$N"); do
  dir=$(mktemp -d /tmp/mb-fresh-XXXXXX)
  git clone -q "$ROOT" "$dir/main" && git -C "$dir/main" checkout -q "$HEAD"
  began=$SECONDS
  (cd "$dir/main" && CI=true bash .ci/run) > "$OUT/run-$i.log" 2>&1
  rc=$?; took=$((SECONDS - began))
  summary=$(grep -E "^=+ .*(passed|failed).* in " "$OUT/run-$i.log" | tail -1 | tr -d '=')
  total=$(grep -E "^TOTAL " "$OUT/run-$i.log" | tail -1 | awk '{print $(NF-1)}')
  echo "run $i of $HEAD: exit $rc, ${took} s (clone, venv, suite, report);${summary}; coverage ${total:-?}" | tee -a "$OUT/summary.txt"
  [ "$rc" = 0 ] || failed=1
  rm -rf "$dir"
done
exit "$failed"
