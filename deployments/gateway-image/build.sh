#!/usr/bin/env bash
# Builds the gateway image without a registry: the binary is make build's
# bin/gateway (scripts/build.sh, the one way to get it; rebuilt only if the
# sources changed), the one the root Dockerfile copies too; the CA bundle is
# this host's, and Dockerfile.prebuilt assembles the same final stage as the
# root Dockerfile.
#
# Usage: deployments/gateway-image/build.sh [TAG]   (default sandgate-gateway:latest)
# Env:   VERSION, REVISION   default: git describe / git rev-parse of the checkout
#        BINDIR              make build's output directory (default: the checkout's bin)
#        CA_BUNDLE           default: /etc/ssl/certs/ca-certificates.crt (Debian's ca-certificates)
#        GOARCH              target architecture (default: this host's)
#        LABELS              extra labels, one KEY=VALUE per word (the tests mark their images)
set -euo pipefail

tag=${1:-sandgate-gateway:latest}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
version=${VERSION:-$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)}
revision=${REVISION:-$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)}
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[ -s "$ca" ] || { echo "build.sh: no CA bundle at $ca (Debian: apt-get install ca-certificates)" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/rootfs
mkdir -p "$root/etc/ssl/certs" "$root/data" "$root/tmp"
bindir=${BINDIR:-$repo/bin}
GOOS=linux make -C "$repo" --no-print-directory build BINDIR="$bindir" VERSION="$version" REVISION="$revision" >&2
cp "$bindir/gateway" "$root/gateway"
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
cp "$here/rootfs/etc/passwd" "$here/rootfs/etc/group" "$root/etc/"
cp "$here/Dockerfile.prebuilt" "$ctx/Dockerfile"

args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision" -t "$tag")
for l in ${LABELS:-}; do args+=(--label "$l"); done
# Without the buildx plugin the docker CLI falls back to the classic builder
# (with a notice); both build this file.
docker build -q "${args[@]}" "$ctx" >/dev/null
# The classic builder leaves the context stage behind, untagged (BuildKit
# does not); nothing refers to it once the build is done.
docker image prune -f --filter label=io.sandgate.gateway-image.stage=context >/dev/null
echo "$tag"
