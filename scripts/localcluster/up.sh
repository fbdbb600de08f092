#!/usr/bin/env bash
# Start the local cluster on 127.0.0.1, no container engine needed:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#   kwok (fake kubelets: nodes Ready, pods Running),
#   Karpenter with its kwok cloud provider (creates spot/on-demand nodes),
#   Karpenter CRDs, KWOKNodeClass "default" and the sample NodePools (nodepools.yaml),
#   Argo Rollouts' Rollout CRD (no controller).
# Every daemon runs in the background with its PID recorded in $LOCALCLUSTER_DIR/pids;
# down.sh stops them by those PIDs. Idempotent: a healthy running cluster is reused.
#
# Env: LOCALCLUSTER_DIR (default <repo>/.localcluster), LOCALCLUSTER_PORT_OFFSET
# (default 0, multiple of 10), LOCALCLUSTER_CACHE (binaries, see build.sh).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

# etcd comes from Debian's etcd-server package; it and the other tools the scripts
# use are installed with apt when missing.
lc_ensure_packages etcd:etcd-server jq:jq openssl:openssl curl:curl
lc_need_tools go kubectl etcd openssl curl jq

for b in "$KUBE_BIN_DIR/kube-apiserver" "$KUBE_BIN_DIR/kube-controller-manager" \
	"$KUBE_BIN_DIR/kube-scheduler" "$KWOK_BIN" "$KARPENTER_BIN"; do
	[[ -x $b ]] || lc_die "$b not built: run scripts/localcluster/build.sh first"
done

realnode_ok() { [[ $REAL_NODE != 1 ]] || lc_pid_alive realnode-kubelet; }
if lc_pid_alive kube-apiserver && lc_pid_alive karpenter && realnode_ok &&
	curl -sf --cacert "$PKI/ca.crt" "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null 2>&1; then
	lc_log "cluster already running in $LOCALCLUSTER_DIR (API https://127.0.0.1:$APISERVER_PORT)"
	exit 0
fi

# Start from a clean slate: stop leftovers of an earlier run (by PID) and drop its state.
bash "$LC_SCRIPTS/down.sh" >/dev/null

# On failure, stop whatever was started but keep the logs for a look.
on_exit() {
	local rc=$?
	if ((rc != 0)); then
		echo "up.sh failed: stopping what it started; logs kept in $LOGS (remove with down.sh)" >&2
		LOCALCLUSTER_KEEP_STATE=1 bash "$LC_SCRIPTS/down.sh" >&2 || true
	fi
}
trap on_exit EXIT

port_busy() { (echo >"/dev/tcp/127.0.0.1/$1") >/dev/null 2>&1; }
ports=("$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$SCHEDULER_PORT"
	"$KARPENTER_METRICS_PORT" "$KARPENTER_HEALTH_PORT")
[[ $REAL_NODE == 1 ]] && ports+=("$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT")
for p in "${ports[@]}"; do
	if port_busy "$p"; then
		lc_die "port $p on 127.0.0.1 is in use: another cluster? set LOCALCLUSTER_PORT_OFFSET (e.g. 100)"
	fi
done

mkdir -p "$PKI" "$PIDS" "$LOGS" "$LOCALCLUSTER_DIR/etcd"
echo "$LOCALCLUSTER_PORT_OFFSET" >"$LOCALCLUSTER_DIR/port-offset"
if [[ $REAL_NODE == 1 ]]; then
	[[ -x $KUBELET_BIN ]] || lc_die "$KUBELET_BIN not built: run REAL_NODE=1 scripts/localcluster/build.sh first"
	: >"$LOCALCLUSTER_DIR/real-node"
fi
lc_log "starting local cluster in $LOCALCLUSTER_DIR (port offset $LOCALCLUSTER_PORT_OFFSET)"

# --- PKI: one CA signs the apiserver and webhook serving certs and the admin client cert.
ossl() { openssl "$@" 2>>"$LOGS/openssl.log"; }
ossl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=localcluster-ca \
	-keyout "$PKI/ca.key" -out "$PKI/ca.crt"
# issue NAME SUBJECT EXTENSIONS
issue() {
	ossl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$PKI/$1.key" -out "$PKI/$1.csr"
	printf '%b' "$3" >"$PKI/$1.ext"
	ossl x509 -req -days 30 -in "$PKI/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
		-CAcreateserial -extfile "$PKI/$1.ext" -out "$PKI/$1.crt"
	rm -f "$PKI/$1.csr" "$PKI/$1.ext"
}
issue apiserver /CN=kube-apiserver \
	"subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n"
issue admin "/O=system:masters/CN=localcluster-admin" "extendedKeyUsage=clientAuth\n"
# The webhook runs as a local process and is registered by URL https://127.0.0.1:<port>.
issue webhook /CN=custom-kube-scheduler-webhook \
	"subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
ossl genrsa -out "$PKI/sa.key" 2048
ossl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
lc_kubeconfig "$KUBECONFIG_FILE" admin localcluster "" "client-certificate: $PKI/admin.crt" "client-key: $PKI/admin.key"
lc_log "PKI written to $PKI"

# --- etcd
lc_start etcd etcd --name default --data-dir "$LOCALCLUSTER_DIR/etcd" \
	--listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
	--advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
	--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync
lc_wait curl -sf "http://127.0.0.1:$ETCD_CLIENT_PORT/health" || lc_die "etcd not healthy; see $LOGS/etcd.log"
lc_log "etcd healthy (127.0.0.1:$ETCD_CLIENT_PORT)"

# --- kube-apiserver. ServiceAccount admission is off (no token controller races);
# TaintNodesByCondition is off so kwok nodes never carry the not-ready taint.
# The audit log records every request of the webhook's ServiceAccount (Metadata level:
# verb, resource, namespace, name, response code), so check-webhook-rbac.sh can hold
# each one against the chart's RBAC; its evictions with their body (the pod's UID in
# the preconditions), so the soak knows which pod of a reused name went.
AUDIT_POLICY=$LOCALCLUSTER_DIR/audit-policy.yaml
cat >"$AUDIT_POLICY" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Request
    users: ["system:serviceaccount:$WEBHOOK_NAMESPACE:custom-kube-scheduler-webhook"]
    resources: [{group: "", resources: [pods/eviction]}]
  - level: Metadata
    users: ["system:serviceaccount:$WEBHOOK_NAMESPACE:custom-kube-scheduler-webhook"]
  - level: None
EOF
# With the real node (REAL_NODE=1), pods run for real: the ServiceAccount admission gives
# them their API token; the API server calls webhook Services through their endpoints
# (no kube-proxy), and the kubelet at its address (no DNS) with the admin certificate
# (logs, exec).
disabled_admission=ServiceAccount,TaintNodesByCondition
realnode_flags=()
if [[ $REAL_NODE == 1 ]]; then
	disabled_admission=TaintNodesByCondition
	realnode_flags=(--enable-aggregator-routing=true
		--kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key"
		--kubelet-preferred-address-types=InternalIP)
fi
lc_start kube-apiserver "$KUBE_BIN_DIR/kube-apiserver" "${realnode_flags[@]}" \
	--etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
	--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
	--cert-dir="$LOCALCLUSTER_DIR/apiserver-certs" \
	--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
	--client-ca-file="$PKI/ca.crt" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
	--service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC --allow-privileged=true \
	--disable-admission-plugins="$disabled_admission" \
	--endpoint-reconciler-type=none --profiling=false \
	--audit-policy-file="$AUDIT_POLICY" --audit-log-path="$LOGS/audit.jsonl" --audit-log-format=json
lc_wait curl -sf --cacert "$PKI/ca.crt" "https://127.0.0.1:$APISERVER_PORT/readyz" ||
	lc_die "kube-apiserver not ready; see $LOGS/kube-apiserver.log"
lc_log "kube-apiserver ready (https://127.0.0.1:$APISERVER_PORT)"

# --- controllers (Deployments/ReplicaSets need them) and scheduler.
# Higher client QPS lets the ReplicaSet controller create hundreds of pods in real bursts.
K=$KUBECONFIG_FILE
lc_start kube-controller-manager "$KUBE_BIN_DIR/kube-controller-manager" \
	--kubeconfig="$K" --authentication-kubeconfig="$K" --authorization-kubeconfig="$K" \
	--bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
	--use-service-account-credentials=false --kube-api-qps=100 --kube-api-burst=200 \
	--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
	--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" --profiling=false
# Unschedulable pods are retried after 30 s rather than 5 min: when a node's taints
# change, queueing hints skip pods that still do not tolerate them, so without this a
# pod's Unschedulable message could name a taint the node no longer has for minutes.
lc_start kube-scheduler "$KUBE_BIN_DIR/kube-scheduler" \
	--kubeconfig="$K" --authentication-kubeconfig="$K" --authorization-kubeconfig="$K" \
	--bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --leader-elect=false --profiling=false \
	--pod-max-in-unschedulable-pods-duration=30s

# --- kwok: its stage files come from the kwok module (node init + lease heartbeat,
# pod ready/complete/delete), the same set as kwok's kustomize/stage/fast.
KWOK_MOD=$(lc_module_dir "sigs.k8s.io/kwok@$KWOK_VERSION") || lc_die "cannot locate sigs.k8s.io/kwok@$KWOK_VERSION"
STAGES=$LOCALCLUSTER_DIR/kwok-stages.yaml
: >"$STAGES"
heartbeat=node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
# Karpenter v1.0 looks for a claim's node only on the node's events, and its kwok provider
# creates the node before the claim records its provider ID: the node must be updated
# again (status heartbeats every 20-45 s, as a kubelet's every 5 min) to be registered.
[[ $KARPENTER_VERSION != v1.0.* ]] || heartbeat=node/heartbeat/node-heartbeat.yaml
for f in node/fast/node-initialize.yaml "$heartbeat" \
	pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
	{
		echo "---"
		cat "$KWOK_MOD/kustomize/stage/$f"
	} >>"$STAGES"
done
# kwok fakes every node but the real one.
kwok_nodes=--manage-all-nodes=true
[[ $REAL_NODE == 1 ]] && kwok_nodes=--manage-nodes-with-label-selector="!$REAL_NODE_TAINT_KEY"
lc_start kwok "$KWOK_BIN" --kubeconfig="$K" -c "$STAGES" "$kwok_nodes" \
	--cidr=10.244.0.0/16 --node-lease-duration-seconds=40
lc_wait curl -skf "https://127.0.0.1:$KCM_PORT/healthz" || lc_die "kube-controller-manager not healthy; see $LOGS/kube-controller-manager.log"
lc_wait curl -skf "https://127.0.0.1:$SCHEDULER_PORT/healthz" || lc_die "kube-scheduler not healthy; see $LOGS/kube-scheduler.log"
lc_pid_alive kwok || lc_die "kwok exited; see $LOGS/kwok.log"
lc_log "kube-controller-manager, kube-scheduler, kwok running"

# --- Karpenter: CRDs from the module cache (the kwok provider's NodePool/NodeClaim
# CRDs allow its instance labels), then the NodeClass and NodePools, then the controller.
KARP_MOD=$(lc_module_dir "sigs.k8s.io/karpenter@$KARPENTER_VERSION") || lc_die "cannot locate sigs.k8s.io/karpenter@$KARPENTER_VERSION"
# Karpenter v1.0 also serves v1beta1 through a conversion webhook of its own, which this
# cluster does not run: such CRDs are applied with v1 alone, the API the webhook reads.
lc_kubectl create --dry-run=client -o json -f "$KARP_MOD/kwok/charts/crds/" -f "$KARP_MOD/kwok/apis/crds/" |
	jq -s '{apiVersion: "v1", kind: "List", items: map(if .spec.conversion.strategy == "Webhook"
		then del(.spec.conversion) | .spec.versions |= map(select(.name == "v1")) else . end)}' |
	lc_kubectl apply --server-side -f - >/dev/null
lc_kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null
lc_kubectl apply --server-side -f "$LC_SCRIPTS/nodepools.yaml" >/dev/null
# The capacity reservation (KARPENTER_RESERVED=1, lib.sh): the provider's own instance
# types (its built-in file, which INSTANCE_TYPES_FILE_PATH replaces) plus one reserved
# offering, as the AWS provider builds it: the on-demand offering of one instance type
# and zone with capacity type "reserved", the reservation's ID as a requirement, its
# size in nodes, and a price far below on-demand; every other offering says it has no
# reservation ID (Karpenter's contract for ReservedCapacityLabels).
karpenter_env=()
if [[ $KARPENTER_RESERVED == 1 ]]; then
	INSTANCE_TYPES=$LOCALCLUSTER_DIR/instance-types.json
	jq --arg it "$RESERVATION_INSTANCE_TYPE" --arg zone "$RESERVATION_ZONE" --arg id "$RESERVATION_ID" \
		--argjson nodes "$RESERVATION_NODES" '
		def req(k): (.Requirements[] | select(.key == k) | .values[0]);
		map(.offerings |= map(.Requirements += [{key: "karpenter.k8s.aws/capacity-reservation-id", operator: "DoesNotExist"}])
			| if .name == $it then .offerings += [.offerings[]
				| select(req("karpenter.sh/capacity-type") == "on-demand" and req("topology.kubernetes.io/zone") == $zone)
				| .Price /= 10000000 | .ReservationCapacity = $nodes
				| .Requirements = [{key: "karpenter.sh/capacity-type", operator: "In", values: ["reserved"]},
					{key: "topology.kubernetes.io/zone", operator: "In", values: [$zone]},
					{key: "karpenter.k8s.aws/capacity-reservation-id", operator: "In", values: [$id]}]]
			else . end)' "$KARP_MOD/kwok/cloudprovider/instance_types.json" >"$INSTANCE_TYPES"
	[[ $(jq '[.[].offerings[] | select(.ReservationCapacity > 0)] | length' "$INSTANCE_TYPES") == 1 ]] ||
		lc_die "no reserved offering for $RESERVATION_INSTANCE_TYPE in $RESERVATION_ZONE in $INSTANCE_TYPES"
	karpenter_env=(INSTANCE_TYPES_FILE_PATH="$INSTANCE_TYPES")
	lc_kubectl apply --server-side -f "$LC_SCRIPTS/nodepool-reserved.yaml" >/dev/null
fi
lc_log "Karpenter CRDs, KWOKNodeClass and NodePools applied"
# Argo Rollouts' Rollout CRD, from its Go module (no controller): the webhook follows a
# ReplicaSet's Rollout when the API serves it, which it looks for when it starts.
ROLLOUTS_MOD=$(lc_module_dir "github.com/argoproj/argo-rollouts@$ARGO_ROLLOUTS_VERSION") ||
	lc_die "cannot locate github.com/argoproj/argo-rollouts@$ARGO_ROLLOUTS_VERSION"
lc_kubectl apply --server-side -f "$ROLLOUTS_MOD/manifests/crds/rollout-crd.yaml" >/dev/null
# Polled: kubectl wait fails at once on a CRD whose status has no conditions yet.
rollouts_established() {
	[[ $(lc_kubectl get crd rollouts.argoproj.io -o jsonpath='{.status.conditions[?(@.type=="Established")].status}') == True ]]
}
lc_wait rollouts_established || lc_die "the Rollout CRD is not Established"
lc_log "Argo Rollouts $ARGO_ROLLOUTS_VERSION Rollout CRD applied (no controller)"
# SYSTEM_NAMESPACE and DISABLE_WEBHOOK: Karpenter v1.0 needs a namespace and would serve
# its conversion webhook; later versions ignore both.
lc_start karpenter env KUBECONFIG="$K" DISABLE_LEADER_ELECTION=true \
	SYSTEM_NAMESPACE=kube-system DISABLE_WEBHOOK=true "${karpenter_env[@]}" \
	METRICS_PORT="$KARPENTER_METRICS_PORT" HEALTH_PROBE_PORT="$KARPENTER_HEALTH_PORT" \
	BATCH_MAX_DURATION=2s BATCH_IDLE_DURATION=500ms LOG_LEVEL=info "$KARPENTER_BIN"
# env execs the binary, so the recorded PID is Karpenter's own.
echo karpenter-kwok >"$PIDS/karpenter.cmd"
lc_wait curl -sf "http://127.0.0.1:$KARPENTER_HEALTH_PORT/readyz" || lc_die "Karpenter not ready; see $LOGS/karpenter.log"
nodepools_ready() {
	local total ready
	total=$(lc_kubectl get nodepools -o name | wc -l)
	ready=$(lc_kubectl get nodepools -o json |
		jq '[.items[] | select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))] | length')
	((total > 0 && ready == total))
}
lc_wait nodepools_ready || lc_die "NodePools not Ready; see $LOGS/karpenter.log"
lc_log "Karpenter ready; NodePools: $(lc_kubectl get nodepools -o name | sed 's#.*/##' | tr '\n' ' ')"
if [[ $REAL_NODE == 1 ]]; then
	bash "$LC_SCRIPTS/realnode.sh" up
fi
# The webhook's identity: the chart's ServiceAccount and RBAC, and a kubeconfig for it.
bash "$LC_SCRIPTS/webhook-rbac.sh"
lc_log "cluster up. export KUBECONFIG=$KUBECONFIG_FILE"
