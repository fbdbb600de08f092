# shellcheck shell=bash
# Settings and helpers shared by scripts/localcluster/*.sh and scripts/demo.sh.
# Sourced, never run. Every setting can be overridden from the environment.
# shellcheck disable=SC2034 # the variables are used by the scripts that source this

LC_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$LC_SCRIPTS/../.." && pwd)

# Versions of the test-only binaries. Each is cached under its own versioned
# directory, so changing a version rebuilds only that piece.
KUBE_VERSION=${KUBE_VERSION:-v1.33.13}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
KARPENTER_VERSION=${KARPENTER_VERSION:-v1.14.1}
# Argo Rollouts: only its Rollout CRD is installed (up.sh, from the module cache), no
# controller: the e2e tests make the ReplicaSets a Rollout controller would.
ARGO_ROLLOUTS_VERSION=${ARGO_ROLLOUTS_VERSION:-v1.8.3}

# Binaries live outside the repo; cluster state lives in the (gitignored) repo dir.
LOCALCLUSTER_CACHE=${LOCALCLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/custom-kube-scheduler-webhook}
LOCALCLUSTER_DIR=${LOCALCLUSTER_DIR:-$REPO_ROOT/.localcluster}
# Port offset, so that two clusters can run side by side (e.g. demo + e2e).
# Must be a multiple of 10: the base ports below are less than 10 apart.
# A running cluster's offset is remembered in its state dir, so later commands
# (webhook.sh, register-webhook.sh, down.sh) need only LOCALCLUSTER_DIR.
if [[ -z ${LOCALCLUSTER_PORT_OFFSET:-} && -s $LOCALCLUSTER_DIR/port-offset ]]; then
	LOCALCLUSTER_PORT_OFFSET=$(<"$LOCALCLUSTER_DIR/port-offset")
fi
LOCALCLUSTER_PORT_OFFSET=${LOCALCLUSTER_PORT_OFFSET:-0}

KUBE_BIN_DIR=$LOCALCLUSTER_CACHE/kube-$KUBE_VERSION
KWOK_BIN=$LOCALCLUSTER_CACHE/kwok-$KWOK_VERSION/kwok
KARPENTER_BIN=$LOCALCLUSTER_CACHE/karpenter-kwok-$KARPENTER_VERSION/karpenter-kwok
# For the Karpenter version of karpenterkwok/go.mod, Karpenter is built from that module:
# its kwok provider then serves a capacity reservation (README: reserved capacity).
# Cached by the module's content, so an edit rebuilds it. Other versions (v1.0 has no
# reserved capacity type) run the plain provider and offer no reservation.
KARPENTER_RESERVED_MOD=$LC_SCRIPTS/karpenterkwok
KARPENTER_RESERVED=0
if [[ $KARPENTER_VERSION == "$(awk '$1 == "sigs.k8s.io/karpenter" { print $2; exit }' "$KARPENTER_RESERVED_MOD/go.mod")" ]]; then
	KARPENTER_RESERVED=1
	KARPENTER_BIN=$LOCALCLUSTER_CACHE/karpenter-kwok-reserved-$KARPENTER_VERSION-$(cat "$KARPENTER_RESERVED_MOD"/go.mod "$KARPENTER_RESERVED_MOD"/go.sum "$KARPENTER_RESERVED_MOD"/main.go | sha256sum | cut -c1-12)/karpenter-kwok
fi
# The reservation (KARPENTER_RESERVED=1): one instance type, zone and ID, and how many
# nodes it holds. Only the NodePool "reserved" (nodepool-reserved.yaml) launches into it.
RESERVATION_INSTANCE_TYPE=s-4x-amd64-linux
RESERVATION_ZONE=test-zone-a
RESERVATION_ID=cr-kwok-e2e
RESERVATION_NODES=${RESERVATION_NODES:-2}
# The real node's kubelet (REAL_NODE=1), same Kubernetes version as the control plane.
KUBELET_BIN=$LOCALCLUSTER_CACHE/kubelet-$KUBE_VERSION/kubelet

# Namespace the webhook would be installed in; always excluded from mutation.
WEBHOOK_NAMESPACE=${WEBHOOK_NAMESPACE:-custom-kube-scheduler-webhook}
# Secret holding the admission token, named as the chart names it (ADMISSION_TOKEN_SECRET).
ADMISSION_TOKEN_SECRET=${ADMISSION_TOKEN_SECRET:-custom-kube-scheduler-webhook-admission-token}

lc_die() {
	echo "error: $*" >&2
	exit 1
}

if ! [[ $LOCALCLUSTER_PORT_OFFSET =~ ^[0-9]+$ ]] || ((LOCALCLUSTER_PORT_OFFSET % 10 != 0)); then
	lc_die "LOCALCLUSTER_PORT_OFFSET must be a non-negative multiple of 10 (got '$LOCALCLUSTER_PORT_OFFSET')"
fi
ETCD_CLIENT_PORT=$((2379 + LOCALCLUSTER_PORT_OFFSET))
ETCD_PEER_PORT=$((2380 + LOCALCLUSTER_PORT_OFFSET))
APISERVER_PORT=$((6443 + LOCALCLUSTER_PORT_OFFSET))
WEBHOOK_PORT=${WEBHOOK_PORT:-$((9443 + LOCALCLUSTER_PORT_OFFSET))}
# The webhook.sh webhook's plain-HTTP ports: /metrics, and the probes /healthz and /readyz
# (serve's METRICS_ADDRESS and HEALTH_ADDRESS: 8080 and 8081 plus the offset).
WEBHOOK_METRICS_PORT=${WEBHOOK_METRICS_PORT:-$((8080 + LOCALCLUSTER_PORT_OFFSET))}
WEBHOOK_HEALTH_PORT=${WEBHOOK_HEALTH_PORT:-$((8081 + LOCALCLUSTER_PORT_OFFSET))}
KCM_PORT=$((10257 + LOCALCLUSTER_PORT_OFFSET))
SCHEDULER_PORT=$((10259 + LOCALCLUSTER_PORT_OFFSET))
KARPENTER_METRICS_PORT=$((18080 + LOCALCLUSTER_PORT_OFFSET))
KARPENTER_HEALTH_PORT=$((18081 + LOCALCLUSTER_PORT_OFFSET))

# REAL_NODE=1: besides the kwok nodes, one real node (realnode.sh): a kubelet with
# containerd, runc and the bridge CNI, tainted so that only pods that tolerate it run there.
# A running cluster's choice is remembered in its state dir, as the port offset is.
if [[ -z ${REAL_NODE:-} && -e $LOCALCLUSTER_DIR/real-node ]]; then
	REAL_NODE=1
fi
REAL_NODE=${REAL_NODE:-0}
REAL_NODE_NAME=${REAL_NODE_NAME:-cksw-real-node}
# The taint and label of the real node; a pod tolerates the taint to run there.
REAL_NODE_TAINT_KEY=custom-kube-scheduler-webhook.io/real-node
# The pods' bridge and subnet (the host takes the subnet's first address on the bridge),
# outside kwok's fake pod addresses (10.244.0.0/16). Nothing is routed beyond them: pods
# reach only the host, and each other on the bridge.
REAL_NODE_BRIDGE=${REAL_NODE_BRIDGE:-cksw-rn$((LOCALCLUSTER_PORT_OFFSET / 10))}
REAL_NODE_POD_SUBNET=${REAL_NODE_POD_SUBNET:-10.247.$((LOCALCLUSTER_PORT_OFFSET / 10 % 256)).0/24}
REAL_NODE_DIR=$LOCALCLUSTER_DIR/realnode
KUBELET_PORT=$((10250 + LOCALCLUSTER_PORT_OFFSET))
KUBELET_HEALTHZ_PORT=$((10248 + LOCALCLUSTER_PORT_OFFSET))

PKI=$LOCALCLUSTER_DIR/pki
PIDS=$LOCALCLUSTER_DIR/pids
LOGS=$LOCALCLUSTER_DIR/logs
KUBECONFIG_FILE=$LOCALCLUSTER_DIR/kubeconfig

# Daemons in start order; stopped in reverse.
LC_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok karpenter)

LC_T0=${LC_T0:-$(date +%s)}
export LC_T0
# lc_log prints a progress line with the seconds since the script started.
lc_log() { printf '[%4ss] %s\n' "$(($(date +%s) - LC_T0))" "$*"; }

# lc_wait CMD... retries CMD (silenced) every 0.2 s until it succeeds or
# LC_WAIT_SECONDS (default 60) pass.
lc_wait() {
	local deadline=$(($(date +%s) + ${LC_WAIT_SECONDS:-60}))
	until "$@" >/dev/null 2>&1; do
		if (($(date +%s) >= deadline)); then
			echo "timed out waiting for: $*" >&2
			return 1
		fi
		sleep 0.2
	done
}

# lc_pid_alive NAME: true when the recorded PID of NAME is a live process that
# still runs the binary we started (guards against a recycled PID).
lc_pid_alive() {
	local f=$PIDS/$1.pid pid
	[[ -s $f ]] || return 1
	pid=$(<"$f")
	[[ -r /proc/$pid/cmdline ]] || return 1
	# A process exiting meanwhile makes the read fail (ESRCH): that is "not alive".
	local cmdline
	cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
	[[ $cmdline == *"$(<"$PIDS/$1.cmd")"* ]]
}

# lc_start NAME BINARY ARGS...: start a daemon in the background, detached from
# this shell's stdin/stdout and in a session of its own (a Ctrl-C in the terminal
# reaches the scripts, which stop daemons by PID, not the daemons directly);
# log to logs/NAME.log, record its PID (setsid and nohup exec, so it is the daemon's).
lc_start() {
	local name=$1
	shift
	mkdir -p "$PIDS" "$LOGS"
	nohup setsid "$@" </dev/null >"$LOGS/$name.log" 2>&1 &
	echo $! >"$PIDS/$name.pid"
	basename "$1" >"$PIDS/$name.cmd"
}

# lc_stop NAME: stop a daemon by its recorded PID only; TERM, then KILL after 10 s.
lc_stop() {
	local name=$1 pid i
	if lc_pid_alive "$name"; then
		pid=$(<"$PIDS/$name.pid")
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			lc_pid_alive "$name" || break
			sleep 0.2
		done
		if lc_pid_alive "$name"; then
			echo "$name (pid $pid) ignored SIGTERM; sending SIGKILL" >&2
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.2
		fi
		echo "stopped $name (pid $pid)"
	fi
	rm -f "$PIDS/$name.pid" "$PIDS/$name.cmd"
}

# lc_kubectl runs the machine's kubectl against this cluster.
# lc_kubeconfig FILE USER CONTEXT NAMESPACE CREDENTIAL...: a kubeconfig for the local
# API server (its CA) as USER, whose credentials are the given "key: value" lines of a
# kubeconfig user (client-certificate and client-key, or token); NAMESPACE may be "".
lc_kubeconfig() {
	local file=$1 user=$2 context=$3 namespace=$4 line
	shift 4
	{
		echo "apiVersion: v1"
		echo "kind: Config"
		echo "clusters:"
		echo "- name: localcluster"
		echo "  cluster:"
		echo "    server: https://127.0.0.1:$APISERVER_PORT"
		echo "    certificate-authority: $PKI/ca.crt"
		echo "users:"
		echo "- name: $user"
		echo "  user:"
		for line in "$@"; do
			echo "    $line"
		done
		echo "contexts:"
		echo "- name: $context"
		echo "  context: {cluster: localcluster, user: $user${namespace:+, namespace: $namespace}}"
		echo "current-context: $context"
	} >"$file"
}

lc_kubectl() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# lc_need_tools fails early with a clear message when a required tool is missing.
lc_need_tools() {
	local t missing=()
	for t in "$@"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
	((${#missing[@]} == 0)) || lc_die "missing tools: ${missing[*]} (run .ci/run's install step, or apt-get install them)"
}

# lc_ensure_packages CMD:PACKAGE...: apt-get install the Debian packages whose
# command is missing (as root, or through sudo).
lc_ensure_packages() {
	local pair missing=() sudo=()
	for pair in "$@"; do
		command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
	done
	((${#missing[@]} > 0)) || return 0
	command -v apt-get >/dev/null 2>&1 || lc_die "missing packages ${missing[*]}: install them"
	if (($(id -u) != 0)); then
		command -v sudo >/dev/null 2>&1 || lc_die "missing packages ${missing[*]}: apt-get install them as root"
		sudo=(sudo)
	fi
	lc_log "installing Debian packages: ${missing[*]}"
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	# Only etcd's binary is wanted: a system etcd service would hold port 2379.
	if [[ " ${missing[*]} " == *" etcd-server "* ]] && command -v systemctl >/dev/null 2>&1 &&
		systemctl is-active --quiet etcd 2>/dev/null; then
		"${sudo[@]}" systemctl disable --now etcd >/dev/null 2>&1 || true
	fi
}

# lc_module_dir MODULE@VERSION prints the module's directory in the Go module
# cache, downloading it through the module proxy if needed.
lc_module_dir() {
	(cd "$LC_SCRIPTS" && go mod download -json "$1") | jq -er .Dir
}
