#!/usr/bin/env bash
# Runs a real single Kubernetes node on this machine for the tests — containerd with runc and the CNI
# bridge plugin, the kubelet, kube-scheduler and kube-controller-manager — against a kube-apiserver the
# caller runs (internal/testutil starts etcd and kube-apiserver), until it is told to stop. Nothing comes
# from a registry: the Pod sandbox (pause) image is made here from the cached pause binary, and every
# image tarball in DIR/images is imported into the node's containerd.
#
# Usage: scripts/kube-node.sh run DIR
#   DIR holds what the caller made: kubelet.kubeconfig, scheduler.kubeconfig,
#   controller-manager.kubeconfig (each with its own identity), ca.crt (the CA the kube-apiserver's
#   client certificate for the kubelet is signed by), images/*.tar (docker-archive images). The script
#   writes DIR/node.env (NODE_NAME, NODE_IP, POD_CIDR, BRIDGE) and then DIR/ready once the kubelet is
#   healthy, and runs in the foreground; on SIGTERM, SIGINT or its own exit it kills every Pod's
#   processes and removes what it made: mounts, cgroups, the bridge, DIR's state. A run killed without
#   that (SIGKILL) is cleaned up by the next run that takes the same slot.
#
# Several nodes may run at once (one per test package): each takes a free slot i (flock), which gives
# it its bridge sgkube<i>, Pod network 10.244.<i>.0/24 with the node at 10.244.<i>.1 (so the kubelet
# listens on a bridge only this host and its Pods reach), the kubelet's ports and its cgroup root.
#
# The binaries are built once per machine and version by scripts/kube-test-bins.sh; containerd 1.6,
# runc and the CNI plugins are Debian's (scripts/install-deps.sh). The kubelet runs with
# failCgroupV1: false, as this machine's kind boots with cgroup v1 (the kubelet warns and works), and
# it sets the kernel tunables it wants (vm.overcommit_memory=1, kernel.panic_on_oops=1, ...) as a node
# does.
set -euo pipefail

[ "${1:-}" = run ] && [ -n "${2:-}" ] || { echo "usage: $0 run DIR" >&2; exit 2; }
dir=$(cd "$2" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$("$root/scripts/kube-test-bins.sh")
cni_bin=/usr/lib/cni
for f in containerd runc ctr; do command -v "$f" >/dev/null || { echo "kube-node: no $f (scripts/install-deps.sh)" >&2; exit 1; }; done
[ -x "$cni_bin/bridge" ] || { echo "kube-node: no CNI plugins in $cni_bin (scripts/install-deps.sh)" >&2; exit 1; }

slots=/run/sandgate-kube-node
mkdir -p "$slots"
slot=""
for i in $(seq 0 31); do
	exec 8>"$slots/slot-$i.lock"
	if flock -n 8; then slot=$i; break; fi
	exec 8>&-
done
[ -n "$slot" ] || { echo "kube-node: all 32 slots are taken" >&2; exit 1; }

node_name=sandgate-node
bridge=sgkube$slot
node_ip=10.244.$slot.1
pod_cidr=10.244.$slot.0/24
cgroup_root=/sgkube$slot
kubelet_port=$((20250 + slot))
healthz_port=$((20350 + slot))
sock=$dir/containerd/containerd.sock
pids=()

log() { echo "kube-node[$slot]: $*" >&2; }
forward_rule=(-i "$bridge" -o "$bridge" -m comment --comment "sandgate-kube-node-$slot" -j ACCEPT)

# teardown removes everything a node of this slot made, whichever run (this one, or one killed with
# SIGKILL before it could clean up, whose DIR the slot records) made it.
teardown() {
	set +e +o pipefail # remove all that can be removed
	local d=$1
	local s=$d/containerd/containerd.sock
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
	pkill -KILL -f -- "--root-dir $d/kubelet" 2>/dev/null || true
	# Every Pod's processes: each container's init in every cgroup hierarchy of the slot's root.
	local cg
	for cg in /sys/fs/cgroup/*/"${cgroup_root#/}"; do
		[ -d "$cg" ] || continue
		find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null
	done
	pkill -KILL -f -- "containerd --config $d/containerd.toml" 2>/dev/null || true
	pkill -KILL -f -- "-address $s" 2>/dev/null || true
	sleep 0.2
	findmnt -rno TARGET | grep -F "$d/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
	for cg in /sys/fs/cgroup/*/"${cgroup_root#/}"; do
		[ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	while iptables -D FORWARD "${forward_rule[@]}" 2>/dev/null; do :; done
	ip link del "$bridge" 2>/dev/null || true
	rm -rf "$d/containerd" "$d/kubelet" "$d/cni" "$d/pod-logs" "$d/ready" 2>/dev/null || true
}

if [ -f "$slots/slot-$slot.dir" ]; then
	old=$(cat "$slots/slot-$slot.dir")
	[ -d "$old" ] && { log "cleaning up after a killed run in $old"; teardown "$old"; }
fi
echo "$dir" >"$slots/slot-$slot.dir"
trap 'teardown "$dir"; rm -f "$slots/slot-$slot.dir"' EXIT
trap 'exit 0' TERM INT

# image_tar NAME FILE ENTRYPOINT OUT writes a docker-archive image holding FILE at / (the pause image).
image_tar() {
	local name=$1 file=$2 entry=$3 out=$4 tmp
	tmp=$(mktemp -d)
	mkdir "$tmp/rootfs"
	cp "$file" "$tmp/rootfs/"
	tar -C "$tmp/rootfs" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$tmp/layer.tar" .
	local diff cfg
	diff=$(sha256sum "$tmp/layer.tar" | cut -d' ' -f1)
	printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["%s"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$entry" "$diff" >"$tmp/config.json"
	cfg=$(sha256sum "$tmp/config.json" | cut -d' ' -f1)
	mv "$tmp/config.json" "$tmp/$cfg.json"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$cfg" "$name" >"$tmp/manifest.json"
	tar -C "$tmp" -cf "$out" manifest.json "$cfg.json" layer.tar
	rm -rf "$tmp"
}

mkdir -p "$dir/containerd" "$dir/cni/net.d" "$dir/cni/ipam" "$dir/kubelet" "$dir/pod-logs" "$dir/images"
printf 'NODE_NAME=%s\nNODE_IP=%s\nPOD_CIDR=%s\nBRIDGE=%s\n' "$node_name" "$node_ip" "$pod_cidr" "$bridge" >"$dir/node.env"

# The kubelet's cgroup root must exist in every hierarchy; a cgroup v1 cpuset starts with no CPUs and
# no memory nodes, so it gets its parent's.
for h in /sys/fs/cgroup/*/; do
	[ -d "$h" ] && mkdir -p "$h${cgroup_root#/}"
done
if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
	cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset${cgroup_root}/cpuset.cpus"
	cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset${cgroup_root}/cpuset.mems"
fi

# The bridge exists before the kubelet so that the node's address (where the kubelet listens, and the
# API server reaches it for logs) is on it; the CNI bridge plugin adopts it.
ip link add "$bridge" type bridge
ip addr add "$node_ip/24" dev "$bridge"
ip link set "$bridge" up
# Pod to Pod on this bridge (the in-cluster gateway reaching Redis and its sandboxes): Docker's FORWARD
# policy is DROP, and bridged frames pass it (br_netfilter). Only this bridge to itself: nothing leaves.
iptables -I FORWARD "${forward_rule[@]}"

pause_image=sandgate.local/pause:1
cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  netns_mounts_under_state_dir = true
  # This machine's root may not lower an oom_score_adj (the sandbox it runs in withholds that): the
  # Pod sandboxes' -998 becomes containerd's own.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$dir/cni/net.d"
EOF
cat >"$dir/cni/net.d/10-sandgate.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "$bridge", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam",
            "ranges": [[{"subnet": "$pod_cidr", "gateway": "$node_ip"}]]}}]}
EOF

# The node's processes must not hold the slot's lock (fd 8) after the script is gone.
containerd --config "$dir/containerd.toml" >"$dir/containerd.log" 2>&1 8>&- &
pids+=($!)
for _ in $(seq 100); do [ -S "$sock" ] && ctr --address "$sock" version >/dev/null 2>&1 && break; sleep 0.1; done
ctr --address "$sock" version >/dev/null || { log "containerd did not start:"; tail -n 20 "$dir/containerd.log" >&2; exit 1; }

image_tar "$pause_image" "$bin/pause" /pause "$dir/images/.pause.tar"
for img in "$dir/images/.pause.tar" "$dir/images"/*.tar; do
	[ -f "$img" ] || continue
	ctr --address "$sock" -n k8s.io images import "$img" >/dev/null
done

cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $dir/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
failCgroupV1: false
failSwapOn: false
podLogsDir: $dir/pod-logs
resolvConf: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
EOF

"$bin/kube-controller-manager" --kubeconfig "$dir/controller-manager.kubeconfig" --secure-port 0 \
	--leader-elect=false --use-service-account-credentials=false --root-ca-file "$dir/ca.crt" \
	>"$dir/controller-manager.log" 2>&1 8>&- &
pids+=($!)
"$bin/kube-scheduler" --kubeconfig "$dir/scheduler.kubeconfig" --secure-port 0 --leader-elect=false \
	>"$dir/scheduler.log" 2>&1 8>&- &
pids+=($!)
"$bin/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
	--root-dir "$dir/kubelet" --hostname-override "$node_name" --node-ip "$node_ip" \
	>"$dir/kubelet.log" 2>&1 8>&- &
pids+=($!)

for _ in $(seq 600); do
	if [ "$(curl -fsS "http://127.0.0.1:$healthz_port/healthz" 2>/dev/null)" = ok ]; then
		touch "$dir/ready"
		log "ready: node $node_name at $node_ip, Pods in $pod_cidr"
		break
	fi
	for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { log "a node process exited:"; tail -n 20 "$dir"/*.log >&2; exit 1; }; done
	sleep 0.1
done
[ -f "$dir/ready" ] || { log "kubelet not healthy after 60 s:"; tail -n 30 "$dir/kubelet.log" >&2; exit 1; }

# Until told to stop; a node process that dies ends the run (the trap cleans up).
while sleep 1; do
	for p in "${pids[@]}"; do
		kill -0 "$p" 2>/dev/null || { log "a node process exited:"; tail -n 20 "$dir"/*.log >&2; exit 1; }
	done
done
