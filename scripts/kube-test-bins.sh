#!/usr/bin/env bash
# Builds the binaries the Kubernetes integration tests run against — kube-apiserver v1.37.2, etcd v3.7.3,
# kubectl v1.37.2 (test/deploy renders and dry-runs the manifests with it), and the node that
# scripts/kube-node.sh runs: kubelet, kube-scheduler and kube-controller-manager v1.37.2 and a pause
# binary for the Pod sandbox image — from the Go module proxy
# into a cache outside the clone, keyed by the versions: $SANDGATE_CACHE (default ~/.cache/sandgate)
# /kube-<kube>-etcd-<etcd>/bin. Each is built once per machine, so a fresh clone (CI's) finds them; a
# rebuild happens only when a binary is missing or the versions change. An flock keeps two test packages from building at once,
# and the builds run under nice so they do not starve other work on the machine.
#
# Usage: scripts/kube-test-bins.sh [CACHE_DIR]
# Prints the bin directory on success.
set -euo pipefail

KUBE_VERSION=v1.37.2
STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.7.3

cache=${1:-${SANDGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandgate}/kube-$KUBE_VERSION-etcd-$ETCD_VERSION}
bin=$cache/bin
src=$cache/src
mkdir -p "$bin" "$src"

exec 9>"$cache/build.lock"
flock 9

# A scratch module's builds must not inherit the caller's module settings.
export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
unset GOOS GOARCH

# build_main NAME [MODULE@VERSION] builds the program whose main.go is on stdin into $bin/NAME, in a
# scratch module of its own (requiring MODULE@VERSION).
build_main() {
	local name=$1 dir=$src/$1
	mkdir -p "$dir"
	cd "$dir"
	[ -f go.mod ] || go mod init "sandgate.local/$name" >/dev/null 2>&1
	cat >main.go
	[ -z "${2:-}" ] || nice -n 19 go get "$2"
	nice -n 19 go build -trimpath -ldflags "-s -w" -o "$bin/$name.tmp" .
	mv "$bin/$name.tmp" "$bin/$name"
}

build_etcd() {
	build_main etcd "go.etcd.io/etcd/server/v3@$ETCD_VERSION" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
}

# kube_module prepares the scratch module both Kubernetes commands build in: k8s.io/kubernetes replaces
# its staging modules with ./staging/...; each is pointed at the tagged release instead.
kube_module() {
	local dir=$src/kube-apiserver
	mkdir -p "$dir"
	cd "$dir"
	[ -f go.mod ] || go mod init sandgate.local/kube >/dev/null 2>&1
	grep -q '^replace k8s.io/api ' go.mod && return 0
	local kgomod
	kgomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
	[ -n "$kgomod" ] || { echo "kube-test-bins: no go.mod for k8s.io/kubernetes@$KUBE_VERSION" >&2; exit 1; }
	local mods
	mods=$(grep -E '^\s*(replace\s+)?k8s\.io/[^ ]+ => \./staging/' "$kgomod" | sed -E 's/^\s*(replace\s+)?(k8s\.io\/[^ ]+) => .*/\2/')
	[ -n "$mods" ] || { echo "kube-test-bins: no staging replaces found in $kgomod" >&2; exit 1; }
	local m args=()
	for m in $mods; do args+=("-replace=$m=$m@$STAGING_VERSION"); done
	go mod edit "${args[@]}"
}

# build_kube CMD... builds k8s.io/kubernetes/cmd/CMD for each CMD with the release's version stamped
# in; one go build for all, so they share its compile work.
build_kube() {
	kube_module
	local cmd pkgs=()
	for cmd in "$@"; do
		nice -n 19 go get -tool "k8s.io/kubernetes/cmd/$cmd@$KUBE_VERSION"
		pkgs+=("k8s.io/kubernetes/cmd/$cmd")
	done
	rm -rf "$bin/.tmp" && mkdir -p "$bin/.tmp"
	nice -n 19 go build -trimpath -ldflags "-s -w \
		-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
		-X k8s.io/component-base/version.gitMajor=1 \
		-X k8s.io/component-base/version.gitMinor=37" \
		-o "$bin/.tmp/" "${pkgs[@]}"
	for cmd in "$@"; do mv "$bin/.tmp/$cmd" "$bin/$cmd"; done
}

# build_pause builds the Pod sandbox's process: it holds the Pod's namespaces and exits on SIGTERM or
# SIGINT. kube-node.sh wraps it in an image, as no registry.k8s.io/pause can be pulled here.
build_pause() {
	build_main pause <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
EOF
}

[ -x "$bin/etcd" ] || (build_etcd) >&2
[ -x "$bin/kube-apiserver" ] || (build_kube kube-apiserver) >&2
[ -x "$bin/kubectl" ] || (build_kube kubectl) >&2
node=()
for cmd in kubelet kube-scheduler kube-controller-manager; do [ -x "$bin/$cmd" ] || node+=("$cmd"); done
[ ${#node[@]} -eq 0 ] || (build_kube "${node[@]}") >&2
[ -x "$bin/pause" ] || (build_pause) >&2
echo "$bin"
