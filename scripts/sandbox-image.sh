#!/usr/bin/env bash
# Builds the Python sandbox image: a Debian rootfs (python3, pip, venv, node,
# npm, git, curl, build tools) made offline from the Debian mirror with
# mmdebstrap (no container registry), plus Sandgate's sandbox server at
# /sandgate-sandbox so the docker backend can run it too. Prints the image's
# tag and the path of its `docker save` archive (for process_image).
#
# The rootfs is cached outside the clone, in
# ${SANDGATE_CACHE:-$HOME/.cache/sandgate}/sandbox-image-<key>/, where key
# hashes the release and the package list below, so only a change of those
# rebuilds it; a second run re-adds the server binary and takes seconds.
# Usage: scripts/sandbox-image.sh
set -euo pipefail

release=bookworm
mirror=http://deb.debian.org/debian
packages=(python3 python3-pip python3-venv nodejs npm git curl ca-certificates build-essential)

key=$(printf '%s\n' "$release" "${packages[@]}" | sha256sum | cut -c1-16)
cache=${SANDGATE_CACHE:-$HOME/.cache/sandgate}/sandbox-image-$key
tag=sandgate-sandbox-python:$key
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$cache"

# One build per cache dir: parallel runs (test processes) wait for it.
exec 9>"$cache/lock"
flock 9

for cmd in mmdebstrap docker go; do
  command -v "$cmd" >/dev/null || { echo "sandbox-image: $cmd not found (scripts/install-deps.sh installs mmdebstrap)" >&2; exit 1; }
done

if [ ! -s "$cache/rootfs.tar" ]; then
  # /usr/share/sandgate/image names the image inside it, so a sandbox can
  # tell the image's /usr from the host's. The /mnt/user-data mount points
  # match the small image's.
  mmdebstrap --variant=apt --format=tar \
    --aptopt='APT::Install-Recommends "false"' \
    --include="$(IFS=,; echo "${packages[*]}")" \
    --customize-hook='mkdir -p "$1/usr/share/sandgate" "$1/mnt/user-data/workspace" "$1/mnt/user-data/uploads" "$1/mnt/user-data/outputs" "$1/mnt/skills"' \
    --customize-hook="echo $tag > \"\$1/usr/share/sandgate/image\"" \
    "$release" "$cache/rootfs.tar.tmp" \
    "deb $mirror $release main" \
    "deb $mirror $release-updates main" \
    "deb http://deb.debian.org/debian-security $release-security main" >&2
  mv "$cache/rootfs.tar.tmp" "$cache/rootfs.tar"
fi

# The server binary is rebuilt on every run (Go's cache makes that quick);
# the image and its archive only change when the binary does.
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
(cd "$root" && CGO_ENABLED=0 go build -o "$ctx/sandgate-sandbox" ./cmd/sandgate-sandbox)
base=sandgate-sandbox-python-rootfs:$key
docker image inspect "$base" >/dev/null 2>&1 || docker import "$cache/rootfs.tar" "$base" >/dev/null
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $base
COPY sandgate-sandbox /sandgate-sandbox
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL io.sandgate.sandbox-server="/sandgate-sandbox"
EXPOSE 8080
ENTRYPOINT ["/sandgate-sandbox", "sandbox"]
CMD ["--listen", "0.0.0.0:8080", "--home", "/mnt/user-data/workspace"]
DOCKERFILE
# The legacy builder: BuildKit needs the buildx plugin, which not every
# engine has, and this build only copies a file.
DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$ctx" >/dev/null 2>"$ctx/build.log" || { cat "$ctx/build.log" >&2; exit 1; }
id=$(docker image inspect -f '{{.Id}}' "$tag")
if [ ! -s "$cache/image.tar" ] || [ "$(cat "$cache/image.id" 2>/dev/null)" != "$id" ]; then
  docker save -o "$cache/image.tar.tmp" "$tag"
  chmod 0644 "$cache/image.tar.tmp"
  mv "$cache/image.tar.tmp" "$cache/image.tar"
  echo "$id" >"$cache/image.id"
fi
echo "$tag"
echo "$cache/image.tar"
