#!/usr/bin/env bash
# The local cluster's real node (REAL_NODE=1): up.sh runs `realnode.sh up` once the
# control plane is ready, down.sh runs `realnode.sh down` before it stops the control plane.
#
#   up    containerd (Debian's, with runc and the CNI plugins of containernetworking-plugins)
#         with its own config, root, state and socket under $LOCALCLUSTER_DIR/realnode;
#         a pause image built offline (busybox-static, buildah) as its sandbox image; the
#         bridge CNI on REAL_NODE_POD_SUBNET (bridge REAL_NODE_BRIDGE, created here); a
#         kubelet of the control plane's Kubernetes version, registered as REAL_NODE_NAME
#         with the taint custom-kube-scheduler-webhook.io/real-node=true:NoSchedule; and a
#         socat that forwards the `kubernetes` Service address (10.0.0.1:443, which pods use
#         for the in-cluster configuration; the host holds it on the bridge) to the API
#         server on 127.0.0.1. No kube-proxy: the API server calls webhook Services through
#         their endpoints (--enable-aggregator-routing), and pods need only the API server.
#   down  cordon the node and delete its pods (the kubelet stops their sandboxes and tears
#         their network down), stop the kubelet, kill and delete what containerd still
#         runs, stop containerd and socat by PID, unmount everything under the state dir,
#         delete the bridge, restore the kernel settings the kubelet changed, remove the state.
#   hosts REGISTRY  let containerd pull from REGISTRY (127.0.0.1:PORT) over plain HTTP;
#         only that host.
#
# Needs root, cgroups (v1 or v2), overlayfs, and the Debian packages containerd, runc,
# containernetworking-plugins, socat, buildah and busybox-static (installed when missing).
# Nothing leaves the machine: pods get addresses on the bridge only, with a route to the
# host's 10.0.0.1 and no default route; no iptables rule is written.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

RN=$REAL_NODE_DIR
CTRD=$RN/containerd
CTRD_SOCK=$CTRD/containerd.sock
CNI_DIR=$RN/cni
KUBELET_DIR=$RN/kubelet
# The API server's `kubernetes` Service: the first address of up.sh's service range.
KUBERNETES_SERVICE_IP=10.0.0.1
# Kernel settings the kubelet sets at start (vm.overcommit_memory=1, kernel.panic=10,
# kernel.panic_on_oops=1, ...); saved before it starts and restored by `down`.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
	kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

subnet_prefix=${REAL_NODE_POD_SUBNET%.*}
GATEWAY=$subnet_prefix.1
PAUSE_IMAGE=localhost/cksw-pause:1

ctr_() { ctr --address "$CTRD_SOCK" --namespace k8s.io "$@"; }

# pause_image_tar prints the cached pause image (a docker-archive), building it first when
# missing: busybox-static's `sleep` in an empty image, keyed by the busybox package version.
pause_image_tar() {
	local bb ver dir tar work c
	bb=$(command -v busybox)
	ldd "$bb" >/dev/null 2>&1 && lc_die "$bb is not statically linked: install busybox-static"
	ver=$(dpkg-query -W -f '${Version}' busybox-static 2>/dev/null || sha256sum "$bb" | cut -c1-12)
	dir=$LOCALCLUSTER_CACHE/pause-busybox-${ver//[^A-Za-z0-9.+-]/_}
	tar=$dir/pause.tar
	if [[ ! -s $tar ]]; then
		work=$(mktemp -d "${TMPDIR:-/tmp}/cksw-pause.XXXXXX")
		(
			trap 'buildah rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
			mkdir -p "$work/tmp"
			printf '[storage]\ndriver = "vfs"\ngraphroot = "%s"\nrunroot = "%s"\n' "$work/storage" "$work/run" >"$work/storage.conf"
			export CONTAINERS_STORAGE_CONF=$work/storage.conf TMPDIR=$work/tmp
			c=$(buildah from scratch)
			buildah copy "$c" "$bb" /busybox >/dev/null
			# A sandbox only holds its namespaces: sleep for ever (the runtime SIGKILLs it).
			buildah config --entrypoint '["/busybox","sleep","2147483647"]' --cmd '' \
				"$c"
			buildah commit -q "$c" "$PAUSE_IMAGE" >/dev/null
			mkdir -p "$dir"
			buildah push -q "$PAUSE_IMAGE" "docker-archive:$tar.tmp:$PAUSE_IMAGE" >/dev/null
			mv "$tar.tmp" "$tar"
		)
		lc_log "pause image built from $bb -> $tar" >&2
	fi
	echo "$tar"
}

# issue_kubelet_cert: the kubelet's client certificate (system:node:NAME in system:nodes,
# as the Node authorizer wants) signed by the cluster CA, and its kubeconfig.
issue_kubelet_cert() {
	local o=$RN/pki
	mkdir -p "$o"
	openssl req -newkey rsa:2048 -nodes -subj "/O=system:nodes/CN=system:node:$REAL_NODE_NAME" \
		-keyout "$o/kubelet.key" -out "$o/kubelet.csr" 2>/dev/null
	printf 'extendedKeyUsage=clientAuth\n' >"$o/kubelet.ext"
	openssl x509 -req -days 30 -in "$o/kubelet.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
		-CAcreateserial -extfile "$o/kubelet.ext" -out "$o/kubelet.crt" 2>/dev/null
	rm -f "$o/kubelet.csr" "$o/kubelet.ext"
	lc_kubeconfig "$RN/kubelet.kubeconfig" kubelet localcluster "" "client-certificate: $o/kubelet.crt" "client-key: $o/kubelet.key"
}

write_configs() {
	mkdir -p "$CTRD/certs.d" "$CNI_DIR/net.d" "$CNI_DIR/ipam" "$KUBELET_DIR" "$RN/pod-logs" "$RN/volume-plugins"
	cat >"$CTRD/config.toml" <<EOF
version = 2
root = "$CTRD/root"
state = "$CTRD/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$CTRD_SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$CTRD/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Never below containerd's own OOM score adjustment: lowering it needs CAP_SYS_RESOURCE,
  # which a root without it (a container, some VMs) lacks; runc then fails to create the
  # sandbox ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$CTRD/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CNI_DIR/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$CTRD/certs.d"
EOF
	# The bridge exists already (up creates it with the gateway address); host-local keeps
	# its leases in the state dir. The only route a pod gets is to the kubernetes Service
	# address, through the host.
	cat >"$CNI_DIR/net.d/10-cksw-realnode.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "cksw-realnode",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$REAL_NODE_BRIDGE",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CNI_DIR/ipam",
        "ranges": [[{"subnet": "$REAL_NODE_POD_SUBNET", "gateway": "$GATEWAY"}]],
        "routes": [{"dst": "$KUBERNETES_SERVICE_IP/32"}]
      }
    }
  ]
}
EOF
	cat >"$RN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $GATEWAY
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
containerRuntimeEndpoint: unix://$CTRD_SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
makeIPTablesUtilChains: false
resolvConf: ""
podLogsDir: $RN/pod-logs
volumePluginDir: $RN/volume-plugins
staticPodPath: ""
registerWithTaints:
  - {key: $REAL_NODE_TAINT_KEY, value: "true", effect: NoSchedule}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The node shares the host's disk: the default thresholds (imagefs under 15 % free)
# evicted the webhook's pods on a 252 GB disk with 37 GB free.
evictionHard: {nodefs.available: 1Gi, imagefs.available: 1Gi, memory.available: 100Mi}
EOF
}

cmd_up() {
	(($(id -u) == 0)) || lc_die "REAL_NODE=1 needs root (containerd, runc, the bridge, mounts)"
	[[ -d /sys/fs/cgroup ]] || lc_die "REAL_NODE=1 needs cgroups mounted at /sys/fs/cgroup"
	lc_ensure_packages containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
		/usr/lib/cni/host-local:containernetworking-plugins socat:socat buildah:buildah busybox:busybox-static
	lc_need_tools containerd ctr runc socat buildah busybox ip findmnt openssl
	[[ -x $KUBELET_BIN ]] || lc_die "$KUBELET_BIN not built: run REAL_NODE=1 scripts/localcluster/build.sh"
	[[ -s $KUBECONFIG_FILE ]] || lc_die "no cluster in $LOCALCLUSTER_DIR: run scripts/localcluster/up.sh"
	if ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then
		lc_die "a link $REAL_NODE_BRIDGE exists already (another cluster's real node? set REAL_NODE_BRIDGE)"
	fi
	if ip -4 addr show | grep -qF " $KUBERNETES_SERVICE_IP/"; then
		lc_die "$KUBERNETES_SERVICE_IP is taken on this machine (another cluster's real node?): one real node per machine"
	fi
	mkdir -p "$RN"
	local k
	for k in "${SYSCTLS[@]}"; do
		echo "$k=$(<"/proc/sys/$k")"
	done >"$RN/sysctl.saved"

	# The bridge, with the gateway address and the kubernetes Service address.
	# Its MAC address is set, so the kernel keeps it: a bridge without one takes the lowest
	# of its ports' and changes it as pods come and go, and the pods' ARP entry for the
	# gateway goes stale (traffic between them and the host stalls for seconds).
	ip link add "$REAL_NODE_BRIDGE" type bridge
	ip link set "$REAL_NODE_BRIDGE" address "$(printf '02:63:6b:73:%02x:%02x' $((LOCALCLUSTER_PORT_OFFSET / 256 % 256)) $((LOCALCLUSTER_PORT_OFFSET % 256)))"
	ip addr add "$GATEWAY/${REAL_NODE_POD_SUBNET#*/}" dev "$REAL_NODE_BRIDGE"
	ip addr add "$KUBERNETES_SERVICE_IP/32" dev "$REAL_NODE_BRIDGE"
	ip link set "$REAL_NODE_BRIDGE" up
	lc_log "bridge $REAL_NODE_BRIDGE: $GATEWAY on $REAL_NODE_POD_SUBNET, and $KUBERNETES_SERVICE_IP"

	write_configs
	issue_kubelet_cert
	local tar
	tar=$(pause_image_tar)

	lc_start realnode-containerd containerd --config "$CTRD/config.toml"
	lc_wait ctr_ version || lc_die "containerd did not start; see $LOGS/realnode-containerd.log"
	ctr_ images import "$tar" >/dev/null
	lc_log "containerd running (socket $CTRD_SOCK), sandbox image $PAUSE_IMAGE imported"

	lc_start realnode-apiproxy socat "TCP-LISTEN:443,bind=$KUBERNETES_SERVICE_IP,reuseaddr,fork" \
		"TCP:127.0.0.1:$APISERVER_PORT"
	lc_wait curl -sf --cacert "$PKI/ca.crt" "https://$KUBERNETES_SERVICE_IP/readyz" ||
		lc_die "socat did not forward $KUBERNETES_SERVICE_IP:443; see $LOGS/realnode-apiproxy.log"

	lc_start realnode-kubelet "$KUBELET_BIN" --config="$RN/kubelet.yaml" \
		--kubeconfig="$RN/kubelet.kubeconfig" --root-dir="$KUBELET_DIR" --cert-dir="$RN/pki" \
		--hostname-override="$REAL_NODE_NAME" --node-ip="$GATEWAY" \
		--node-labels="$REAL_NODE_TAINT_KEY=true"
	LC_WAIT_SECONDS=120 lc_wait lc_kubectl wait --for=condition=Ready "node/$REAL_NODE_NAME" --timeout=2s ||
		lc_die "node $REAL_NODE_NAME not Ready; see $LOGS/realnode-kubelet.log"
	lc_log "real node $REAL_NODE_NAME Ready (kubelet $KUBE_VERSION, taint $REAL_NODE_TAINT_KEY=true:NoSchedule)"
}

# kill_pid PID: TERM, then KILL after 10 s; for processes that are not lc_start's.
kill_pid() {
	local pid=$1 i
	kill "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	kill -KILL "$pid" 2>/dev/null || true
}

# drain: no new pods on the node, its pods deleted; the kubelet stops their sandboxes,
# which tears their network down (the CNI DEL), before the API server forgets them.
drain() {
	lc_kubectl get node "$REAL_NODE_NAME" >/dev/null 2>&1 || return 0
	lc_kubectl cordon "$REAL_NODE_NAME" >/dev/null 2>&1 || true
	lc_kubectl delete pods --all-namespaces --field-selector "spec.nodeName=$REAL_NODE_NAME" \
		--grace-period=5 --timeout=60s >/dev/null 2>&1 || true
	lc_kubectl delete node "$REAL_NODE_NAME" --timeout=30s >/dev/null 2>&1 || true
}

# remove_containers: what containerd still runs (pods the drain could not delete): kill
# every task, delete tasks and containers, wait for their shims, and remove the network
# namespaces of their sandboxes.
remove_containers() {
	lc_pid_alive realnode-containerd || return 0
	local ids id pid shims=() netns=() ns
	ids=$(ctr_ containers ls -q 2>/dev/null) || return 0
	for id in $ids; do
		pid=$(ctr_ tasks ls 2>/dev/null | awk -v id="$id" '$1 == id { print $2 }')
		if [[ -n $pid && -r /proc/$pid/stat ]]; then
			shims+=("$(awk '{ print $4 }' "/proc/$pid/stat")")
		fi
		ns=$(ctr_ containers info "$id" 2>/dev/null |
			jq -r '.Spec.linux.namespaces[]? | select(.type == "network") | .path // empty') || true
		[[ -n $ns ]] && netns+=("$ns")
		ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
	done
	for id in $ids; do
		ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
		ctr_ containers delete "$id" >/dev/null 2>&1 || true
	done
	for pid in "${shims[@]}"; do
		[[ $pid =~ ^[0-9]+$ ]] && ((pid > 1)) && kill_pid "$pid"
	done
	for ns in "${netns[@]}"; do
		[[ $ns == /var/run/netns/cni-* || $ns == /run/netns/cni-* ]] || continue
		umount "$ns" 2>/dev/null || true
		rm -f "$ns"
	done
}

cmd_down() {
	[[ -d $RN ]] || exit 0
	if [[ -s $KUBECONFIG_FILE ]] && lc_pid_alive kube-apiserver && lc_pid_alive realnode-kubelet; then
		drain
	fi
	lc_stop realnode-kubelet
	remove_containers
	lc_stop realnode-containerd
	# socat forks a child per connection: stop them with their parent.
	local pid
	if lc_pid_alive realnode-apiproxy; then
		for pid in $(pgrep -P "$(<"$PIDS/realnode-apiproxy.pid")" || true); do
			kill_pid "$pid"
		done
	fi
	lc_stop realnode-apiproxy
	# Whatever is still mounted under the state dir (the kubelet's volumes, containerd's
	# root filesystems and shm), deepest first.
	findmnt -rn -o TARGET | awk -v d="$RN/" 'index($0, d) == 1' | sort -r | while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" || true
	done
	if ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then
		ip link delete "$REAL_NODE_BRIDGE" type bridge
		echo "deleted bridge $REAL_NODE_BRIDGE"
	fi
	if [[ -s $RN/sysctl.saved ]]; then
		local line
		while IFS= read -r line; do
			echo "${line#*=}" >"/proc/sys/${line%%=*}" 2>/dev/null || true
		done <"$RN/sysctl.saved"
	fi
	# containerd's shims keep their sockets in /run/containerd/s whatever the config says:
	# the directories go when nothing else is in them.
	rmdir /run/containerd/s /run/containerd 2>/dev/null || true
	# The kubelet links every container log into /var/log/containers.
	if [[ -d /var/log/containers ]]; then
		find /var/log/containers -maxdepth 1 -type l -lname "$RN/*" -delete
	fi
	if [[ ${LOCALCLUSTER_KEEP_STATE:-0} != 1 ]]; then
		rm -rf "$RN"
	else
		# Keep the logs and configs for a look, but never a mount or a socket in use.
		rm -rf "$CTRD/root" "$CTRD/state" "$KUBELET_DIR"
	fi
}

# cmd_hosts REGISTRY: containerd pulls REGISTRY over plain HTTP (a registry host of its own;
# every other registry keeps containerd's defaults).
cmd_hosts() {
	local reg=${1:?usage: realnode.sh hosts 127.0.0.1:PORT}
	[[ $reg =~ ^127\.0\.0\.1:[0-9]+$ ]] || lc_die "only a loopback registry (127.0.0.1:PORT), got $reg"
	mkdir -p "$CTRD/certs.d/$reg"
	cat >"$CTRD/certs.d/$reg/hosts.toml" <<EOF
server = "http://$reg"

[host."http://$reg"]
  capabilities = ["pull", "resolve"]
EOF
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
hosts) cmd_hosts "${2:-}" ;;
*) lc_die "usage: realnode.sh up|down|hosts 127.0.0.1:PORT" ;;
esac
