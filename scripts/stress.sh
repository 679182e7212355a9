#!/usr/bin/env bash
# Runs tests many times in a row on a loaded machine, to show a flake is gone (or to catch one): each
# PACKAGE:REGEXP is built once as a race-enabled test binary, then run -count RUNS with -failfast from its
# package directory, all of them at once, beside two CPU hogs started first. CI=true, so a missing
# service fails instead of skipping. One line per package: passes, failures, seconds, load average.
#
# Usage: scripts/stress.sh [-n RUNS] PACKAGE:REGEXP...
#   scripts/stress.sh -n 200 ./internal/sandbox:'^TestBashSessionsAndPolling$' ./test/e2e:'^TestBusySandboxIsNotFrozen$'
# Logs go to $STRESS_OUT (default /tmp/sandgate-stress), one <name>.log per package.
set -euo pipefail

runs=200
if [ "${1:-}" = -n ]; then
	runs=$2
	shift 2
fi
[ $# -gt 0 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
out=${STRESS_OUT:-/tmp/sandgate-stress}
mkdir -p "$out"

names=()
for spec in "$@"; do
	pkg=${spec%%:*}
	name=$(echo "${pkg#./}" | tr / -)
	(cd "$root" && go test -c -race -o "$out/$name.test" "$pkg")
	names+=("$name")
done

hogs=()
trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
for _ in 1 2; do
	(while :; do :; done) &
	hogs+=($!)
done
echo "stress: $runs runs each, two CPU hogs, load $(cut -d' ' -f1-3 /proc/loadavg)"

status=0
i=0
for spec in "$@"; do
	pkg=${spec%%:*} re=${spec#*:} name=${names[$i]}
	i=$((i + 1))
	(
		start=$SECONDS
		rc=0
		(cd "$root/$pkg" && CI=true "$out/$name.test" -test.run "$re" -test.count "$runs" -test.failfast -test.v \
			>"$out/$name.log" 2>&1) || rc=$?
		pass=$(grep -c -E '^--- PASS: [^/ ]+ ' "$out/$name.log" || true)
		fail=$(grep -c -E '^--- FAIL: [^/ ]+ ' "$out/$name.log" || true)
		echo "stress: $pkg $re: $pass passed, $fail failed (exit $rc) in $((SECONDS - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
		[ "$rc" -eq 0 ]
	) &
done
for job in $(jobs -p); do
	case " ${hogs[*]} " in *" $job "*) continue ;; esac
	wait "$job" || status=1
done
exit $status
