#!/usr/bin/env bash
# Runs every Go fuzz target in the module for a bounded time each.
# Usage: scripts/fuzz.sh [duration]   (default 10s per target)
set -euo pipefail
cd "$(dirname "$0")/.."
time_per=${1:-10s}
status=0
while IFS= read -r line; do
  file=${line%%:*}
  name=$(sed -E 's/^.*func (Fuzz[A-Za-z0-9_]+).*/\1/' <<<"$line")
  pkg=./$(dirname "$file")
  echo "== $pkg $name ($time_per)"
  go test -run='^$' -fuzz="^${name}\$" -fuzztime="$time_per" "$pkg" || status=1
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(' . | sed 's|^\./||')
exit $status
