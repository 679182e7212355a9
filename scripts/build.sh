#!/usr/bin/env bash
# Builds the gateway and, beside it, the sandbox server alone (which the
# process backend runs when it finds it there: it starts sandboxes sooner),
# into $BINDIR: the one way to get the binary. make build, make run and the
# gateway image (deployments/gateway-image/build.sh, the root Dockerfile)
# all use what this builds, so every path ships the same flags: static
# (CGO_ENABLED=0), -trimpath (no build host paths in stack traces), symbols
# stripped, version and revision stamped (gateway --version).
#
# A first build on empty Go caches takes minutes (about 750 packages; what
# dominates: docs/DEPLOYMENT.md, "Building it, two ways"), so it
# says so before anything else and shows progress: the modules downloaded,
# then the packages compiled out of the total. On a terminal the progress
# is one updating line; otherwise a line for the first and every 20th
# module resolved, 10th downloaded, 50th package compiled.
#
# Usage: scripts/build.sh
# Env:   GO (go), BINDIR (bin), VERSION and REVISION (default: git describe /
#        git rev-parse of the checkout), GOOS, GOARCH (cross builds)
set -euo pipefail

echo "building Sandgate (first time: a few minutes)…" >&2

go=${GO:-go}
bindir=${BINDIR:-bin}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pkgs=(./cmd/gateway ./cmd/sandgate-sandbox)
tty=0
[ -t 2 ] && tty=1
export CGO_ENABLED=0

# progress reads go's stderr: "# get ....mod: 200 OK" (go list -x) counts
# a module of the graph resolved, "go: downloading M V" a module
# downloaded, a line that is one word (go build -v's package path) a
# package compiled out of $1; anything else (a compile error) passes
# through as it is. Bash, not awk: mawk holds piped input back in blocks,
# which kept the counters silent for minutes.
progress() {
	local total=${1:-0} graph=0 mods=0 pkgs=0 shown=0 l
	show() { # message, count, every
		if [ "$tty" = 1 ]; then
			printf '\r\033[K  %s' "$1" >&2
			shown=1
		elif [ "$2" = 1 ] || [ $(($2 % $3)) = 0 ]; then
			printf '  %s\n' "$1" >&2
		fi
		return 0
	}
	unshow() { if [ "$shown" = 1 ]; then printf '\r\033[K' >&2; shown=0; fi; }
	while IFS= read -r l; do
		case $l in
		"# get "*".mod: "*) graph=$((graph + 1)) && show "resolving modules: $graph" "$graph" 20 ;;
		"# get "*) ;;
		"go: downloading "*)
			mods=$((mods + 1)) && l=${l#go: downloading } && show "downloading modules: $mods (${l% *})" "$mods" 10 ;;
		*" "* | *:* | "#"* | "") unshow && printf '%s\n' "$l" >&2 ;;
		*) pkgs=$((pkgs + 1)) && show "compiling $pkgs/$total: $l" "$pkgs" 50 ;;
		esac
	done
	unshow
}

list=$(mktemp)
trap 'rm -f "$list"' EXIT
echo "  resolving modules and packages" >&2
# go list downloads what the build needs and names every package it
# compiles, which is the total the counter goes to.
"$go" list -x -deps "${pkgs[@]}" 2>&1 >"$list" | progress
total=$(wc -l <"$list" | tr -d ' ')

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
revision=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
# On linux/amd64 both start at package earlydrop's entry point, where a
# sandbox init drops its privileges before the Go runtime starts its
# threads (each such drop is a signal round trip to every thread after);
# only where they link it (a module without it has no such symbol).
entry=
if [ "$("$go" env GOOS)/$("$go" env GOARCH)" = linux/amd64 ] &&
	grep -qx 'github.com/sandgate/sandgate/internal/jail/earlydrop' "$list"; then
	entry=" -E github.com/sandgate/sandgate/internal/jail/earlydrop.entry"
fi
mkdir -p "$bindir"
"$go" build -v -trimpath -ldflags "-s -w -X main.version=$version -X main.revision=$revision$entry" \
	-o "$bindir/" "${pkgs[@]}" 2>&1 | progress "$total"
echo "built $bindir/gateway and $bindir/sandgate-sandbox ($version) in ${SECONDS}s" >&2
