#!/usr/bin/env bash
# Installs the real services the tests run against (Debian packages), only
# when missing, so the second `make test` on a machine does nothing here.
# Usage: scripts/install-deps.sh
set -euo pipefail
# nginx and docker-compose: test/deploy runs the compose stack's nginx config
# and validates compose.yaml with them.
want=(redis-server:redis-server busybox:busybox-static nginx:nginx docker-compose:docker-compose)
# wrk: make bench drives it, and bench/'s own tests (part of make test) run
# its Lua script in the real wrk, so the tests need it too.
want+=(wrk:wrk)
# chattr: test/e2e's permission-denied case sets the immutable attribute (the
# one permission that binds root); under CI=true it fails without it.
want+=(chattr:e2fsprogs)
# curl: the sandbox-secret e2e tests attack sandbox ports with it (as the
# host and as nobody); python3 and node: the sandbox's code/execute tests.
want+=(curl:curl python3:python3 node:nodejs)
# chromium: the status page is tested in a real browser (chromedp);
# docker-registry: the docker pull-progress test pushes to and pulls from a
# local registry, which this package runs without pulling any image.
want+=(chromium:chromium docker-registry:docker-registry)
# mkfs.xfs: internal/checkpoint's reflink test mounts an XFS image made
# with reflink=1 (as root); under CI=true it fails without it.
want+=(mkfs.xfs:xfsprogs)
# containerd, runc, the CNI plugins and iptables (Pod to Pod on its bridge): scripts/kube-node.sh runs a real Kubernetes node on them
# (Docker's own packages bring the first two on most machines).
want+=(containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins iptables:iptables)
# mmdebstrap: scripts/sandbox-image.sh (make sandbox-image, and the tests of
# the Python sandbox image) builds the Debian rootfs with it.
want+=(mmdebstrap:mmdebstrap)
# INSTALL_DEPS_WANT replaces the list (cmd:pkg ...): test/deploy's test of
# this script runs it on commands no machine has, with a fake apt-get.
if [ -n "${INSTALL_DEPS_WANT:-}" ]; then
  read -r -a want <<<"$INSTALL_DEPS_WANT"
fi
missing=()
for pair in "${want[@]}"; do
  cmd=${pair%%:*} pkg=${pair#*:}
  if ! command -v "$cmd" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$cmd" ] && ! [ -x "/bin/$cmd" ]; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
# Say what is about to happen, and as whom, before anything does: make test
# runs this first. On a terminal, ask; elsewhere (CI) go on.
echo "make deps: the tests need ${#missing[@]} Debian package(s) this machine lacks; installing with" \
  "'${sudo:+sudo }apt-get install --no-install-recommends':" >&2
printf '  %s\n' "${missing[@]}" >&2
if [ -t 0 ] && [ -z "${CI:-}" ]; then
  read -r -p "Install them? [Y/n] " answer
  case "$answer" in [nN]*) echo "not installed; the tests that need them will skip (or fail under CI=true)" >&2; exit 1 ;; esac
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
