#!/usr/bin/env bash
# Runs every Go fuzz target in the module for a bounded time each.
# Usage: scripts/fuzz.sh [duration] [save]
#   duration  per target (default 10s)
#   save      copy up to 40 of the inputs the fuzzer found interesting into
#             the package's testdata/fuzz/<target>/, the committed corpus that
#             plain `go test` replays as regression inputs
set -euo pipefail
cd "$(dirname "$0")/.."
time_per=${1:-10s}
save=${2:-}
cache=$(go env GOCACHE)/fuzz/$(go list -m)
status=0
while IFS= read -r line; do
  file=${line%%:*}
  name=$(sed -E 's/^.*func (Fuzz[A-Za-z0-9_]+).*/\1/' <<<"$line")
  dir=$(dirname "$file")
  echo "== ./$dir $name ($time_per)"
  # Go's fuzzing engine sometimes ends a run with only "context deadline
  # exceeded" when the fuzz time runs out while a worker is busy (a loaded
  # machine): no input failed, so nothing was found. Such a run is retried
  # once and then reported, not failed; a real finding ("Failing input
  # written to ...") always fails.
  for attempt in 1 2; do
    out=$(go test -run='^$' -fuzz="^${name}\$" -fuzztime="$time_per" "./$dir" 2>&1) && { echo "$out"; break; }
    echo "$out"
    if grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written to' <<<"$out"; then
      [[ $attempt == 2 ]] && echo "fuzz: $name: the engine's deadline flake twice, no failing input: not a finding"
      continue
    fi
    status=1
    break
  done
  if [[ $save == save && -d $cache/$dir/$name ]]; then
    mkdir -p "$dir/testdata/fuzz/$name"
    # The smallest inputs first: they are the readable ones.
    ls -S -r "$cache/$dir/$name" | head -n 40 | while read -r f; do
      cp "$cache/$dir/$name/$f" "$dir/testdata/fuzz/$name/"
    done
  fi
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(' . | sed 's|^\./||')
exit $status
