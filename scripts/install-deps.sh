#!/usr/bin/env bash
# Installs the real services the tests run against (Debian packages), only
# when missing, so the second `make test` on a machine does nothing here.
# Usage: scripts/install-deps.sh [test|bench]
set -euo pipefail
want=(redis-server:redis-server busybox:busybox-static)
if [ "${1:-test}" = bench ]; then
  want+=(nginx:nginx wrk:wrk)
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
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
