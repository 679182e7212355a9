#!/usr/bin/env bash
# Mutation testing of the boundary packages with gremlins (github.com/go-gremlins/gremlins): each mutant
# (a flipped condition, a shifted boundary, a changed operator in the Go code) is built into a copy of the
# module and the package's own tests run against it; a mutant the tests do not fail "lived" and is
# triaged in docs/TESTING.md. gremlins is built once per machine from the Go module proxy into a cache
# outside the clone, keyed by its version: $SANDGATE_CACHE (default ~/.cache/sandgate)/gremlins-<v>/bin.
#
# Usage: scripts/mutate.sh [PACKAGE_DIR...]   (default: the boundary packages below, one at a time)
# MUTATE_OUT (default /tmp/sandgate-mutate) receives one <pkg>.log and <pkg>.json per package;
# MUTATE_WORKERS (default 1) mutants run at once; MUTATE_EXCLUDE, a regexp, skips matching files.
set -euo pipefail

GREMLINS_VERSION=v0.6.0

cache=${SANDGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandgate}/gremlins-$GREMLINS_VERSION
gremlins=$cache/bin/gremlins
if ! [ -x "$gremlins" ]; then
	mkdir -p "$cache/bin"
	# A tool install must not inherit the caller's module settings.
	(cd "$cache" && GOBIN=$cache/bin GOFLAGS=-mod=mod GOWORK=off \
		go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION")
fi

# The Redis store's scripts (its Lua lives in Go strings, which gremlins does not mutate), the pool,
# the jail, the egress proxy, the sandbox secret's check and the checkpoint journal/swap.
packages=("$@")
[ ${#packages[@]} -gt 0 ] || packages=(./internal/statedb ./internal/egress ./internal/checkpoint
	./internal/pool ./internal/jail ./internal/sandbox)

out=${MUTATE_OUT:-/tmp/sandgate-mutate}
mkdir -p "$out"
exclude=()
[ -z "${MUTATE_EXCLUDE:-}" ] || exclude=(-E "$MUTATE_EXCLUDE")
# gremlins times a mutant out at the coverage run's duration times the coefficient; that run is often
# a test-cache hit of about a second, while a mutant's run rebuilds the package and starts real
# redis-server instances on a loaded 2-core machine, so the coefficient is large: a timeout only has
# to catch a mutant that hangs.
status=0
for pkg in "${packages[@]}"; do
	name=$(basename "$pkg")
	echo "== $pkg"
	start=$SECONDS
	nice "$gremlins" unleash --workers "${MUTATE_WORKERS:-1}" --timeout-coefficient 60 "${exclude[@]}" \
		-o "$out/$name.json" "$pkg" 2>&1 | tee "$out/$name.log" | grep -v 'NOT COVERED' || status=1
	echo "== $pkg: $((SECONDS - start)) s"
done
exit $status
