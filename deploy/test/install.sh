#!/usr/bin/env bash
# make test-install: the chart installed for real, as users install it, on a local cluster
# with a real node (scripts/localcluster, REAL_NODE=1: a kubelet with containerd, runc and
# the bridge CNI, tainted so that only pods that tolerate it run there), upgraded from the
# previous release and rolled back to it under load:
#  1. this tree's image (host platform) and chart built and pushed to a local registry, as
#     make test-image does (scripts/localcluster/chart-install.sh), and the PREVIOUS
#     release's, built from its pinned commit (prev_commit below) with that commit's own
#     build_and_push.sh (scripts/localcluster/prev-release.sh; the image cached by commit);
#  2. `helm install` of the previous release from oci://127.0.0.1:PORT/... with its chart's
#     defaults (its pushed image, self-signed certificates) plus only what puts the pods on
#     the real node (the toleration of its taint, its label as nodeSelector) and a long
#     fallback cool-down; the webhook pods Ready on the real node through their probes, the
#     Service's endpoints are those pods, the caBundle filled in;
#  3. strategy Deployments (on kwok/Karpenter nodes) placed exactly through the real
#     Service path (the API server calls the pods); the oracle is this tree's `spread -o
#     json` (exact, nothing unplaced, every term at its target) and the seats 1..n held
#     once; a workload whose first term only a NodePool without room serves gets an
#     unavailability record from the previous release's convergence loop;
#  4. `helm upgrade` to this tree's chart (--reset-then-reuse-values, as docs/upgrade.md
#     says) in the middle of a paced 200-pod burst (pods admitted before, during and after
#     the rollout): 0 unplaced (the API server's metrics: exactly one answered admission per
#     pod, none failed, rejected or failed open, and no pod evicted as unplaced), the spread
#     exact, the webhook pods on this tree's image, and the burst's seat record passed from
#     a previous-release replica to one of this tree's (which read what the other wrote);
#     this version reads the previous one's unavailability record (kept, and a scale-up
#     placed on the fallback) and writes one of its own;
#  5. a webhook pod deleted in the middle of a paced 200-pod burst (pods created before,
#     while it drains and after it is gone): the same checks;
#  6. `helm rollback` to the previous release in the middle of a paced 200-pod burst: the
#     same checks the other way round (the seat record passed back, the previous release
#     reads this one's unavailability record), then a last 200-pod burst on it;
#  7. `helm upgrade` to this tree's chart again; the first workloads still exact; `helm
#     uninstall` leaves nothing of the release (webhook configurations, Leases, Secrets,
#     RBAC, PriorityClass);
#  GitOps drift: after the upgrade, after a certificate rotation (which rotates the
#     admission token) and after the upgrade again, `helm template` of this tree's chart
#     with the release's values is compared with the live objects by Flux's drift
#     detection (fluxcd/pkg/ssa, deploy/test/gitopsdiff) and by Argo CD's default diff
#     (gitops-engine's diff.Diff, deploy/test/argodiff), each the tool's own code:
#     nothing may differ, and the
#     same check of a rendering that sets the webhooks' path must fail;
#  8. the cluster and the real node are stopped by PID, and checked gone: no process, no
#     mount under the state dir, no bridge.
# Env: INSTALL_CLUSTER_DIR (default <repo>/.localcluster/install), INSTALL_PORT_OFFSET
# (default 200), WEBHOOK_BIN (the binary whose `spread` is the oracle; default bin/),
# INSTALL_KEEP=1 (leave the cluster running and the temporary directory, for a look).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export LOCALCLUSTER_DIR=${INSTALL_CLUSTER_DIR:-$repo/.localcluster/install}
export LOCALCLUSTER_PORT_OFFSET=${INSTALL_PORT_OFFSET:-200}
export REAL_NODE=1
# shellcheck source=scripts/image/lib.sh
source "$repo/scripts/image/lib.sh"
# shellcheck source=deploy/lib.sh
source "$repo/deploy/lib.sh"
# shellcheck source=deploy/test/testlib.sh
source "$here/testlib.sh"
cd "$repo"

WEBHOOK_BIN=${WEBHOOK_BIN:-$repo/bin/custom-kube-scheduler-webhook}
[[ -x $WEBHOOK_BIN ]] || lc_die "$WEBHOOK_BIN not built: make build"
img_ensure_tools
ensure_helm
start=$(date +%s)
ns=cksw-install
release=cksw
full=$release-$CHART_NAME
apps=install-apps
version=$(<VERSION)-install
# The previous release: 0.2.0. Its commit must be in the clone (not a shallow one);
# prev-release.sh says so when it is not.
prev_commit=2836be0
prev_version=0.2.0

work=$(mktemp -d "${TMPDIR:-/tmp}/cksw-install-test.XXXXXX")
# dump_logs: on a failed check, what the API server said about its webhook calls, and the
# tail of the real node's and the webhook pods' logs.
dump_logs() {
	local f
	echo "===== the API server's failed webhook calls (first 10 of $(grep -c 'failed calling webhook' "$LOGS/kube-apiserver.log" || true))" >&2
	grep 'failed calling webhook' "$LOGS/kube-apiserver.log" | head -n 10 | cut -c1-600 >&2 || true
	for f in "$LOGS"/realnode-*.log; do
		[[ -s $f ]] || continue
		echo "===== tail of $f" >&2
		tail -n 20 "$f" >&2
	done
}
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if ((rc != 0)) && [[ -s $KUBECONFIG_FILE ]]; then
		dump_logs || true
		lc_kubectl -n "$ns" get pods -o wide >&2 || true
		lc_kubectl -n "$ns" logs -l "app.kubernetes.io/instance=$release" --tail=20 --prefix >&2 || true
	fi
	if [[ ${INSTALL_KEEP:-0} == 1 ]]; then
		img_log "INSTALL_KEEP=1: the cluster runs on (KUBECONFIG=$KUBECONFIG_FILE; stop it with LOCALCLUSTER_DIR=$LOCALCLUSTER_DIR scripts/localcluster/down.sh); kept $work"
	else
		bash "$LC_SCRIPTS/down.sh" >&2 || true
	fi
	[[ ${INSTALL_KEEP:-0} == 1 ]] || rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export KUBECONFIG=$KUBECONFIG_FILE

# The previous release's commit first: a shallow clone lacks it, and says so at once.
bash "$LC_SCRIPTS/prev-release.sh" --check "$prev_commit" "$prev_version"

echo "== the GitOps diff tools (deploy/test/gitopsdiff for Flux, deploy/test/argodiff for Argo CD; modules of their own)"
for tool in gitopsdiff argodiff; do
	(cd "$here/$tool" && go build -o "$work/$tool" .) || lc_die "building deploy/test/$tool failed"
done
tool_built=$(date +%s)

echo "== the local cluster with a real node"
bash "$LC_SCRIPTS/build.sh"
bash "$LC_SCRIPTS/up.sh"
cluster_up=$(date +%s)

echo "== this tree's image and chart, and the previous release's ($prev_version, $prev_commit), pushed to a local registry"
if CHART_RELEASE=$release CHART_NAMESPACE=$ns CHART_VERSION=$version CHART_INSTALL=0 \
	bash "$LC_SCRIPTS/chart-install.sh"; then
	pass "this tree's image and chart pushed at $version (chart-install.sh)"
else
	fail "chart-install.sh (the image and the chart built and pushed)"
	finish
fi
REGISTRY=$(<"$LOCALCLUSTER_DIR/registry/address")
path=$REGISTRY/test
image=$path/$CHART_NAME
pushed=$(date +%s)
if bash "$LC_SCRIPTS/prev-release.sh" "$prev_commit" "$prev_version" "$path"; then
	pass "the previous release $prev_version built from $prev_commit with its own build_and_push.sh, pushed"
else
	fail "the previous release $prev_version (commit $prev_commit) was not built and pushed (why: above)"
	finish
fi
prev_pushed=$(date +%s)

# What puts the webhook pods on the real node, and a fallback cool-down that outlasts the
# test (the unavailability records below stay active across the upgrade and the rollback).
# Both versions' charts know these keys.
cat >"$work/values.yaml" <<VALUES
tolerations:
  - {key: $REAL_NODE_TAINT_KEY, operator: Exists, effect: NoSchedule}
nodeSelector:
  $REAL_NODE_TAINT_KEY: "true"
converge:
  fallbackCooldown: 20m
VALUES

echo "== helm install of the previous release $prev_version"
# webhook-rbac.sh applied the policy CRDs; $prev_version's chart creates them, which it
# cannot while they exist outside the release.
lc_kubectl delete crd placementpolicies.custom-kube-scheduler-webhook.io clusterplacementpolicies.custom-kube-scheduler-webhook.io \
	--ignore-not-found >/dev/null
if "$HELM" install "$release" "oci://$path/charts/$CHART_NAME" --version "$prev_version" --plain-http \
	-n "$ns" --create-namespace -f "$work/values.yaml" >"$work/helm.log" 2>&1; then
	pass "helm install $release oci://127.0.0.1:PORT/test/charts/$CHART_NAME --version $prev_version"
else
	cat "$work/helm.log" >&2
	fail "helm install of $prev_version"
	finish
fi

# webhook_pods prints name, node, image and readiness of the release's live pods.
webhook_pods() {
	lc_kubectl -n "$ns" get pods -l "app.kubernetes.io/instance=$release" -o json |
		jq -r '.items[] | select(.metadata.deletionTimestamp == null) |
			[.metadata.name, .spec.nodeName, .spec.containers[0].image,
			 ([.status.conditions[]? | select(.type == "Ready")][0].status // "False"), .status.podIP // ""] | @tsv'
}
# pods_ready IMAGE: the Deployment's replicas all Ready, all on the real node, all running
# IMAGE (repository:tag), pinned by a digest or not (the chart --chart pushes names it
# repository:tag@sha256:...).
pods_ready() {
	local want rows
	want=$(lc_kubectl -n "$ns" get deployment "$full" -o jsonpath='{.spec.replicas}')
	rows=$(webhook_pods)
	[[ -n $rows ]] && (($(wc -l <<<"$rows") == want)) &&
		! awk -F'\t' -v node="$REAL_NODE_NAME" -v img="$1" '$2 != node || ($3 != img && index($3, img "@sha256:") != 1) || $4 != "True"' <<<"$rows" | grep -q .
}
if wait_until 240 pods_ready "$image:$prev_version"; then
	pass "the webhook pods are Ready (probes) on the real node, running $image:$prev_version"
else
	fail "webhook pods not Ready on $REAL_NODE_NAME: $(webhook_pods | tr '\t\n' ' ;')"
	finish
fi
# The Service selects the pods: its endpoints are their addresses.
endpoints_match() {
	local want got
	want=$(webhook_pods | cut -f5 | sort | tr '\n' ' ')
	got=$(lc_kubectl -n "$ns" get endpointslices -l "kubernetes.io/service-name=$full" -o json |
		jq -r '[.items[].endpoints[]? | select(.conditions.ready == true) | .addresses[]] | sort | .[]' | tr '\n' ' ')
	[[ -n $want && $want == "$got" ]]
}
if wait_until 30 endpoints_match; then
	pass "the Service's ready endpoints are the webhook pods"
else
	fail "Service endpoints $(lc_kubectl -n "$ns" get endpointslices -o wide 2>&1 | tr '\n' ' ') are not the pods $(webhook_pods | cut -f5 | tr '\n' ' ')"
fi
check "the self-signed caBundle is in the MutatingWebhookConfiguration" \
	test -n "$(lc_kubectl get mutatingwebhookconfiguration "$full" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')"

lc_kubectl create namespace "$apps" >/dev/null
# Opted in: the chart's default scope sends only labelled namespaces.
lc_kubectl label namespace "$apps" custom-kube-scheduler-webhook.io/enabled=true >/dev/null
# deploy NAME REPLICAS STRATEGY: a Deployment of small pods (kwok runs them on Karpenter nodes).
deploy() {
	lc_kubectl apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, namespace: $apps}
spec:
  replicas: $2
  selector: {matchLabels: {app: $1}}
  template:
    metadata:
      labels: {app: $1}
      annotations: {CustomPodScheduleStrategy: "$3"}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
        - name: app
          image: registry.k8s.io/pause:3.10
          resources: {requests: {cpu: 10m, memory: 16Mi}}
EOF
}
# all_running NAME REPLICAS: the Deployment's live pods are REPLICAS, all Running.
all_running() {
	[[ $(lc_kubectl -n "$apps" get pods -l "app=$1" -o json |
		jq '[.items[] | select(.metadata.deletionTimestamp == null and .status.phase == "Running")] | length') == "$2" ]] &&
		[[ $(lc_kubectl -n "$apps" get pods -l "app=$1" -o json | jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length') == "$2" ]]
}
# exact NAME REPLICAS: the e2e oracle. `spread` (the binary's report): exact, nothing
# unplaced, every term at its target, REPLICAS Running; and the seats are 1..REPLICAS,
# each held once, each pod's term annotation the term its nodeSelector selects.
exact() {
	local name=$1 n=$2 report problems
	if ! LC_WAIT_SECONDS=300 lc_wait all_running "$name" "$n"; then
		fail "$name: not $n pods Running: $(lc_kubectl -n "$apps" get pods -l "app=$name" --no-headers | awk '{print $3}' | sort | uniq -c | tr '\n' ' ')"
		return
	fi
	# spread exits non-zero when the workload is not exact: the report says why.
	report=$("$WEBHOOK_BIN" spread --kubeconfig "$KUBECONFIG_FILE" -n "$apps" "deployment/$name" -o json 2>"$work/spread.err") || true
	if ! jq -e '.workloads[0]' >/dev/null 2>&1 <<<"$report"; then
		fail "$name: no spread report: $(cat "$work/spread.err")"
		return
	fi
	problems=$(jq -r --argjson n "$n" '.workloads[0] |
		(if .exact != true then "not exact" else empty end),
		(if .unplaced != 0 then "\(.unplaced) unplaced" else empty end),
		(if .otherRevisions != 0 then "\(.otherRevisions) pods of other revisions" else empty end),
		(.terms[] | select(.placed != .target or .running != .target) |
			"term \(.term): target \(.target), placed \(.placed), running \(.running)"),
		(if ([.terms[].target] | add) != $n then "targets sum to \([.terms[].target] | add), not \($n)" else empty end)' <<<"$report")
	problems+=$(lc_kubectl -n "$apps" get pods -l "app=$name" -o json | jq -r --argjson n "$n" --argjson r "$report" '
		[.items[] | select(.metadata.deletionTimestamp == null)] as $pods |
		($r.workloads[0].terms | map({term, labels})) as $terms |
		([$pods[].metadata.annotations["custom-kube-scheduler-webhook.io/seat"] // "none"] | sort) as $seats |
		(if ($seats | map(tonumber? // 0) | sort) != [range(1; $n + 1)] then
			" seats are not 1..\($n) once each: \($seats | group_by(.) | map(select(length > 1 or .[0] == "none") | .[0]) | join(","))" else empty end),
		($pods[] | . as $p |
			([$terms[] | select(.labels as $l | all($l | keys[]; $p.spec.nodeSelector[.] == $l[.]))][0].term // 0) as $t |
			select(($p.metadata.annotations["custom-kube-scheduler-webhook.io/term"] // "") != ($t | tostring) or $t == 0) |
			" pod \($p.metadata.name): term annotation \($p.metadata.annotations["custom-kube-scheduler-webhook.io/term"] // "none"), nodeSelector selects term \($t)")')
	if [[ -z $problems ]]; then
		pass "$name: $n pods placed exactly ($(jq -r '[.workloads[0].terms[] | "\(.placed)"] | join("/")' <<<"$report") over the terms)"
	else
		fail "$name: $(tr '\n' ';' <<<"$problems")"
	fi
}

echo "== strategy Deployments, placed through the Service on the real node"
deploy mixed 10 "nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1"
deploy split 12 "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=2"
exact mixed 10
exact split 12

# pod_admissions prints the API server's count of the pod webhook's calls that returned
# 200, and of those that failed, were rejected or failed open (failurePolicy Ignore: the
# pod created without a seat).
pod_admissions() {
	lc_kubectl get --raw /metrics | awk '
		/^apiserver_admission_webhook_(request_total|fail_open_count|rejection_count)\{/ && /name="pods\./ {
			if ($1 ~ /^apiserver_admission_webhook_request_total/ && $1 ~ /code="200"/) ok += $2; else bad += $2
		}
		END { printf "%d %d\n", ok, bad }'
}
# recreated NAME: how many pods of the Deployment NAME were created beyond its replicas for a
# reason other than being unplaced, from the Events: the ReplicaSet controller's deletes
# of excess pods and failed creates (a create that timed out at the controller after the
# API server admitted it makes one pod too many, which it then deletes) and the
# convergence loop's evictions of placed pods (a replacement is admitted for each).
# NAME "" counts every workload of the namespace: the API server's count of admissions is
# the namespace's, and the loop may move another workload's pod meanwhile (the stranded
# workload's canary, once its cool-down ends).
recreated() {
	lc_kubectl -n "$apps" get events -o json | jq --arg name "$1" '[.items[] |
		select((.involvedObject.kind == "ReplicaSet" and ($name == "" or (.involvedObject.name | startswith($name + "-"))) and
			(.reason == "SuccessfulDelete" or .reason == "FailedCreate")) or
			(.reason == "Converge" and (.message | test("^evicted pod " + (if $name == "" then "" else $name + "-" end))) and (.message | test("[(]unplaced[)]") | not))) |
		(.count // 1)] | add // 0'
}
# evicted_unplaced NAME: the convergence loop's evictions of NAME's pods admitted unplaced.
evicted_unplaced() {
	lc_kubectl -n "$apps" get events -o json | jq --arg name "$1" '[.items[] |
		select(.reason == "Converge" and (.message | test("^evicted pod " + $name + "-.* [(]unplaced[)]"))) | (.count // 1)] | add // 0'
}
# admitted_once NAME N BEFORE: since BEFORE (pod_admissions' output, then recreated ""),
# no call failed or failed open, the convergence loop evicted no pod of NAME for coming
# unplaced, and the webhook answered every pod of the burst: at least N admissions; more
# than N plus the pods of the namespace created again meanwhile for another reason
# (recreated: the API server's count is the namespace's) is said, not failed.
admitted_once() {
	local name=$1 n=$2 ok0 bad0 again0 ok bad again unplaced
	read -r ok0 bad0 again0 <<<"$3"
	read -r ok bad <<<"$(pod_admissions)"
	again=$(($(recreated "") - again0))
	unplaced=$(evicted_unplaced "$name")
	check "$name: no admission failed, was rejected or failed open ($((bad - bad0)))" test "$((bad - bad0))" -eq 0
	check "$name: no pod admitted unplaced (evicted as unplaced: $unplaced)" test "$unplaced" -eq 0
	check "$name: $((ok - ok0)) pod admissions answered for $n pods and $again created again (excess deleted, failed creates, evictions of placed pods): none skipped the webhook" \
		test "$((ok - ok0))" -ge "$n"
	# More answers than pods is not a fault: every pod's seat is checked (placed exactly),
	# and the ledger keeps one seat per admission UID. During a rolling update of the
	# webhook the API server has counted one answer more than the pods and re-creations
	# (1 in 200, in 3 of about 8 runs; the cause is not found): said, not failed.
	if (($((ok - ok0)) > n + again)); then
		echo "note $name: $((ok - ok0 - n - again)) admission(s) answered beyond the pods and their re-creations"
	fi
}
pod_count() { lc_kubectl -n "$apps" get pods -l "app=$1" -o name | wc -l; }
pods_at_least() { (($(pod_count "$1") >= $2)); }

# rs_uid NAME: the UID of the Deployment NAME's (only) ReplicaSet: its seat record is
# seats-<UID>, its unavailability record cksw-unavailable-<UID>.
rs_uid() { lc_kubectl -n "$apps" get rs -l "app=$1" -o jsonpath='{.items[0].metadata.uid}'; }
# seat_watch_start / seat_watch_stop: the holders of the seat records, as a watch sees
# them change (name and holder identity, which starts with the holder's pod name).
seat_watch_start() {
	lc_kubectl -n "$ns" get leases -l custom-kube-scheduler-webhook.io/record=seats --watch \
		-o jsonpath='{.metadata.name}{" "}{.spec.holderIdentity}{"\n"}' >"$work/seats.watch" 2>/dev/null &
	seat_watch=$!
}
seat_watch_stop() {
	kill "$seat_watch" 2>/dev/null || true
	wait "$seat_watch" 2>/dev/null || true
}
# handed NAME FROM_PODS TO_PODS FROM_VERSION TO_VERSION: the seat record of NAME's burst
# was held by one of FROM_PODS, then by one of TO_PODS: the second took over the record
# the first wrote (its reservations and seat mark), across the two versions.
handed() {
	local rec holders
	rec=seats-$(rs_uid "$1")
	holders=$(awk -v rec="$rec" '$1 == rec && $2 != "" { sub(/_.*/, "", $2); print $2 }' "$work/seats.watch" | uniq | tr '\n' ' ')
	if awk -v from=" $2 " -v to=" $3 " '{ for (i = 1; i <= NF; i++) { if (index(from, " " $i " ")) old = 1; else if (old && index(to, " " $i " ")) ok = 1 } } END { exit !ok }' <<<"$holders"; then
		pass "$1: the burst's seat record passed from a $4 replica to a $5 one (holders: $holders)"
	else
		fail "$1: the burst's seat record was not held by a $4 replica ($2) and then by a $5 one ($3); holders seen: ${holders:-none}"
	fi
}
# unavailable NAME: the state of the first term in the unavailability record of NAME's
# revision ("since<TAB>reason"; nothing when there is none).
unavailable() {
	lc_kubectl -n "$ns" get lease "cksw-unavailable-$(rs_uid "$1")" -o json 2>/dev/null |
		jq -r '.metadata.annotations["custom-kube-scheduler-webhook.io/unavailable-terms"] // "{}" | fromjson | .["1"] // empty | "\(.since)\t\(.reason)"'
}
has_record() { [[ -n $(unavailable "$1") ]]; }
# on_fallback NAME N: NAME's N live pods all Running on its second term (on-demand).
on_fallback() {
	[[ $(lc_kubectl -n "$apps" get pods -l "app=$1" -o json | jq --argjson n "$2" '[.items[] | select(.metadata.deletionTimestamp == null)] |
		length == $n and all(.[]; .status.phase == "Running" and .spec.nodeSelector["karpenter.sh/capacity-type"] == "on-demand")') == true ]]
}
# strand NAME: a 4-replica Deployment whose first term only a NodePool without room serves:
# the convergence loop marks that term unavailable (an unavailability record) and its
# pods go to the second term. Waits until it has settled, so that no admission of it
# falls into a burst's count.
strand() {
	deploy "$1" 4 "nodesize=blocked,weight=1:karpenter.sh/capacity-type=on-demand,weight=1"
	if wait_until 180 has_record "$1" && wait_until 120 on_fallback "$1" 4; then
		pass "$1: the first term marked unavailable, the 4 pods on the fallback: $(unavailable "$1" | cut -f2 | cut -c1-160)"
	else
		fail "$1: no unavailability record and 4 pods on the fallback: record '$(unavailable "$1")', pods $(lc_kubectl -n "$apps" get pods -l "app=$1" --no-headers | tr '\n' ';')"
	fi
}
# record_read NAME STATE VERSION: NAME's record is still STATE (VERSION, now running, read
# it as active, so its loop did not mark the term again), and a scale-up to 6 is placed
# on the fallback by VERSION's admission, which reads the record.
record_read() {
	local now
	now=$(unavailable "$1")
	if [[ $now == "$2" ]]; then
		pass "$1: $3 keeps the record the other version wrote"
	else
		fail "$1: the record changed under $3: was '$2', now '$now'"
	fi
	lc_kubectl -n "$apps" scale deployment "$1" --replicas=6 >/dev/null
	if wait_until 120 on_fallback "$1" 6; then
		pass "$1: $3 placed the 2 new pods on the fallback, as the record says"
	else
		fail "$1: after a scale-up to 6 under $3, pods $(lc_kubectl -n "$apps" get pods -l "app=$1" -o json |
			jq -r '[.items[] | "\(.metadata.name):\(.status.phase):\(.spec.nodeSelector["karpenter.sh/capacity-type"] // .spec.nodeSelector.nodesize)"] | join(" ")')"
	fi
}
# rolled IMAGE: every webhook pod runs IMAGE and is Ready, and no other is left, not
# even draining (a draining replica still holds its seat records and answers claims).
rolled() {
	pods_ready "$1" && [[ $(lc_kubectl -n "$ns" get pods -l "app.kubernetes.io/instance=$release" -o json |
		jq '[.items[] | select(.metadata.deletionTimestamp != null)] | length') == 0 ]]
}
# paced NAME STRATEGY IMAGE COMMAND...: a 200-pod burst of the Deployment NAME around
# COMMAND (a helm upgrade or rollback that rolls the webhook to IMAGE): 40 pods first,
# then COMMAND, then 10 more pods every 3 s while the webhook rolls, up to 190, and the
# rest once only replicas running IMAGE are left (rolled). So the burst's pods are
# admitted by the old replicas, by old and new side by side, and by the new ones alone,
# which must take over the seat record the old ones wrote.
paced() {
	local name=$1 strat=$2 to=$3 r what
	shift 3
	what="$(basename "$1") $2"
	deploy "$name" 0 "$strat"
	for r in 10 20 30 40; do
		lc_kubectl -n "$apps" scale deployment "$name" --replicas="$r" >/dev/null
		sleep 0.5
	done
	# 0.2.0's chart renders the webhooks' paths (/mutate), this one none: helm's three-way
	# patch between the two resets or removes the token path once, until a replica writes
	# it back (within 2 s). Reviews sent meanwhile are 404 and fail open (docs/upgrade.md).
	# So no pod is created across that moment: the first 40 exist before COMMAND, the
	# next once the paths carry a token again.
	wait_until 120 pods_at_least "$name" 40 || fail "$name: 40 pods not created before $what"
	if "$@" >"$work/helm.log" 2>&1; then
		pass "$what at $(pod_count "$name") of 200 pods"
	else
		cat "$work/helm.log" >&2
		fail "$what"
	fi
	if wait_until 60 token_paths; then
		pass "after $what every webhook entry's path carries a token again"
	else
		fail "after $what, paths without a token: $(entry_paths | tr '\n' ' ')"
	fi
	while ((r < 190)) && ! rolled "$to"; do
		r=$((r + 10))
		lc_kubectl -n "$apps" scale deployment "$name" --replicas="$r" >/dev/null
		sleep 3
	done
	if wait_until 300 rolled "$to"; then
		pass "the rollout finished at $r of 200 pods: every webhook pod Ready on the real node, running $to, no other left"
	else
		fail "webhook pods after $what: $(webhook_pods | tr '\t\n' ' ;')"
	fi
	lc_kubectl -n "$apps" scale deployment "$name" --replicas=200 >/dev/null
}
# entry_paths: the clientConfig path of every entry of both webhook configurations.
entry_paths() {
	lc_kubectl get mutatingwebhookconfiguration,validatingwebhookconfiguration "$full" -o json |
		jq -r '.items[].webhooks[] | "\(.name) \(.clientConfig.service.path // "none")"'
}
# token_paths: every entry's path is /<token>/<endpoint> (no plain or missing path).
token_paths() { ! entry_paths | grep -vqE ' /[a-z0-9]{20,}/(mutate|validate|not-enabled)$'; }
# gitops_diff WHEN: helm template of this tree's chart with the release's values, compared
# with the live objects as Flux and Argo CD compare them: nothing differs. Then the same
# rendering with a path set on the first entry of each webhook configuration (what the
# chart rendered up to 0.2.0) must be found out of sync by both: the check can fail.
# both_diffs RENDERED OUT: Flux's diff, then Argo CD's, of RENDERED into OUT; fails when
# either finds drift or cannot compare.
both_diffs() {
	local rc=0
	"$work/gitopsdiff" -n "$ns" -f "$1" >"$2" 2>&1 || rc=1
	"$work/argodiff" -n "$ns" -f "$1" >>"$2" 2>&1 || rc=1
	return "$rc"
}
gitops_diff() {
	"$HELM" template "$release" "oci://$path/charts/$CHART_NAME" --version "$version" --plain-http -n "$ns" \
		-f "$work/values.yaml" >"$work/rendered.yaml" 2>"$work/template.err" || {
		fail "$1: helm template: $(cat "$work/template.err")"
		return
	}
	if both_diffs "$work/rendered.yaml" "$work/gitopsdiff.out"; then
		pass "$1: Flux's and Argo CD's diffs find the $(grep -c '^flux ' "$work/gitopsdiff.out") rendered objects in sync with the live ones"
	else
		fail "$1: drift: $(grep -v 'in sync' "$work/gitopsdiff.out" | cut -c1-400 | tr '\n' ';')"
	fi
	awk '/^---/ { kind = "" } /^kind: (Mutating|Validating)WebhookConfiguration$/ { kind = $2 }
		kind != "" && /^ +service:$/ && !done[kind]++ { print; sub(/service:.*/, "  path: /mutate"); print; next } { print }' \
		"$work/rendered.yaml" >"$work/rendered-path.yaml"
	both_diffs "$work/rendered-path.yaml" "$work/gitopsdiff-path.out" || true
	check "$1: a rendered path would be drift to Flux" grep -q '^flux  DRIFT    MutatingWebhookConfiguration' "$work/gitopsdiff-path.out"
	check "$1: a rendered path would be drift to Argo CD" grep -q '^argo  DRIFT    MutatingWebhookConfiguration' "$work/gitopsdiff-path.out"
}
crds_present() { lc_kubectl get crd placementpolicies.custom-kube-scheduler-webhook.io clusterplacementpolicies.custom-kube-scheduler-webhook.io >/dev/null 2>&1; }

echo "== a workload the previous release finds no room for: its unavailability record"
# A NodePool with no room at all (limits cpu 0): Karpenter launches nothing for its term.
lc_kubectl apply -f - >/dev/null <<NODEPOOL
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: install-blocked}
spec:
  limits: {cpu: "0"}
  template:
    metadata:
      labels: {nodesize: blocked}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [s-4x-amd64-linux]}
NODEPOOL
strand strand-prev
rec_prev=$(unavailable strand-prev)

burst="karpenter.sh/capacity-type=on-demand,base=5,weight=1:karpenter.sh/capacity-type=spot,weight=3"
echo "== helm upgrade from $prev_version to this tree's chart ($version) in the middle of a 200-pod burst"
upgrade_start=$(date +%s)
from=$(webhook_pods | cut -f1 | tr '\n' ' ')
before="$(pod_admissions) $(recreated "")"
seat_watch_start
# --reset-then-reuse-values: the new chart's defaults, with the values given at install
# (--reuse-values would keep the old chart's defaults too: its image among them).
paced up "$burst" "$image:$version" "$HELM" upgrade "$release" "oci://$path/charts/$CHART_NAME" --version "$version" \
	--plain-http -n "$ns" --reset-then-reuse-values
exact up 200
admitted_once up 200 "$before"
seat_watch_stop
handed up "$from" "$(webhook_pods | cut -f1 | tr '\n' ' ')" "$prev_version" "$version"
check "the upgrade kept the policy CRDs" crds_present
gitops_diff "after the upgrade"

echo "== this version reads the previous one's unavailability record, and writes its own"
record_read strand-prev "$rec_prev" "$version"
strand strand-cur
rec_cur=$(unavailable strand-cur)
check "strand-cur: this version's record says what decided (the NodePool's limits)" contains "$rec_cur" "Karpenter: NodePool install-blocked limits exhausted (cpu: 0 left)"

echo "== a webhook pod deleted in the middle of a 200-pod burst"
# (This scenario once failed often: pods admitted unplaced after a webhook pod was deleted.
# The cause was the test's bridge, whose MAC address changed as pods' veths came and
# went, which stalled traffic between the host and the remaining pods; the bridge now has
# a fixed address, see realnode.sh.)
before="$(pod_admissions) $(recreated "")"
# A paced burst (10 more pods every half second), so that its pods are created before the
# delete, while the deleted replica drains (SHUTDOWN_DRAIN: it still answers, /readyz
# fails), and after it is gone: the last 10 only once the pod object is gone.
deploy kill 0 "karpenter.sh/capacity-type=on-demand,weight=1:karpenter.sh/capacity-type=spot,weight=1"
victim=""
gone() { ! lc_kubectl -n "$ns" get pod "$1" >/dev/null 2>&1; }
for ((r = 10; r <= 200; r += 10)); do
	if ((r == 200)); then
		check "the deleted webhook pod $victim is gone before the burst's last pods" wait_until 90 gone "$victim"
	fi
	lc_kubectl -n "$apps" scale deployment kill --replicas="$r" >/dev/null
	if ((r == 40)); then
		victim=$(webhook_pods | head -n 1 | cut -f1)
		check "deleted webhook pod $victim at $(pod_count kill) of 200 pods" lc_kubectl -n "$ns" delete pod "$victim" --wait=false
	fi
	sleep 0.5
done
exact kill 200
admitted_once kill 200 "$before"
if ((FAILURES > 0)); then
	echo "===== the webhook pods' warnings and errors" >&2
	lc_kubectl -n "$ns" logs -l "app.kubernetes.io/instance=$release" --prefix --tail=-1 2>/dev/null |
		grep -v '"level":"info"' | tail -n 20 | cut -c1-400 >&2 || true
fi
if wait_until 120 pods_ready "$image:$version"; then
	pass "the Deployment replaced the deleted pod: every webhook pod Ready on the real node"
else
	fail "webhook pods after the delete: $(webhook_pods | tr '\t\n' ' ;')"
fi

echo "== the certificate rotated, and with it the admission token: still no drift"
certs=$full-certs
ca_of() { lc_kubectl -n "$ns" get secret "$certs" -o jsonpath='{.data.ca\.crt}'; }
old_ca=$(ca_of)
old_token=$(lc_kubectl -n "$ns" get secret "$full-admission-token" -o jsonpath='{.data.token}' | base64 -d)
# Without its data the Secret is invalid: the webhook issues a new CA and serving
# certificate, writes the caBundle, and rotates the token with the certificate.
lc_kubectl -n "$ns" patch secret "$certs" --type=json -p '[{"op": "remove", "path": "/data"}]' >/dev/null
rotated() {
	local ca tok
	ca=$(ca_of)
	tok=$(lc_kubectl -n "$ns" get secret "$full-admission-token" -o jsonpath='{.data.token}' | base64 -d)
	[[ -n $ca && $ca != "$old_ca" && -n $tok && $tok != "$old_token" ]] &&
		[[ $(lc_kubectl get mutatingwebhookconfiguration "$full" -o jsonpath='{.webhooks[0].clientConfig.caBundle}') == "$ca" ]] &&
		! entry_paths | grep -vqF " /$tok/"
}
if wait_until 180 rotated; then
	pass "a new CA in the Secret and every caBundle, a new token in every path"
else
	fail "no rotation seen: paths $(entry_paths | tr '\n' ' ')"
fi
gitops_diff "after the certificate and token rotation"
upgraded=$(date +%s)

echo "== helm rollback to $prev_version in the middle of a 200-pod burst"
from=$(webhook_pods | cut -f1 | tr '\n' ' ')
before="$(pod_admissions) $(recreated "")"
seat_watch_start
paced back "$burst" "$image:$prev_version" "$HELM" rollback "$release" 1 -n "$ns"
exact back 200
admitted_once back 200 "$before"
seat_watch_stop
handed back "$from" "$(webhook_pods | cut -f1 | tr '\n' ' ')" "$version" "$prev_version"
check "the rollback keeps the policy CRDs" crds_present

echo "== the previous release reads this version's unavailability record"
record_read strand-cur "$rec_cur" "$prev_version"

echo "== a last 200-pod burst on $prev_version"
before="$(pod_admissions) $(recreated "")"
deploy last 200 "$burst"
exact last 200
admitted_once last 200 "$before"
rolled_back=$(date +%s)

echo "== helm upgrade to this tree's chart again, after the rollback"
if "$HELM" upgrade "$release" "oci://$path/charts/$CHART_NAME" --version "$version" --plain-http -n "$ns" \
	--reset-then-reuse-values >"$work/helm.log" 2>&1 && wait_until 300 pods_ready "$image:$version"; then
	pass "helm upgrade to $version again: every webhook pod Ready on the real node, running $image:$version"
else
	cat "$work/helm.log" >&2
	fail "helm upgrade to $version after the rollback: $(webhook_pods | tr '\t\n' ' ;')"
fi
check "the upgrade kept the policy CRDs again" crds_present
check "after the upgrade again every webhook entry's path carries a token" wait_until 60 token_paths
gitops_diff "after the upgrade again"
# Placed by $prev_version before the upgrade, kept through both rollouts.
exact mixed 10
exact split 12
upgraded_again=$(date +%s)

echo "== helm uninstall leaves nothing of the release"
lc_kubectl delete namespace "$apps" --wait=false >/dev/null
check "helm uninstall --wait" "$HELM" uninstall "$release" -n "$ns" --wait --timeout 120s
if wait_until 90 release_gone "$ns" "$full"; then
	pass "nothing of the release is left (Leases, Secrets, webhook configurations, RBAC, PriorityClass)"
else
	fail "left after helm uninstall: $(release_leftovers "$ns" "$full" | tr '\n' ' ')"
fi
installed=$(date +%s)

if ((FAILURES > 0)); then
	dump_logs
fi
if [[ ${INSTALL_KEEP:-0} == 1 ]]; then
	finish
	exit 0
fi

echo "== the cluster and the real node stopped, nothing left"
pids=()
for f in "$PIDS"/*.pid; do
	pids+=("$(<"$f")")
done
bash "$LC_SCRIPTS/down.sh" >/dev/null
alive=()
for p in "${pids[@]}"; do
	if [[ -r /proc/$p/stat ]] && [[ $(awk '{print $3}' "/proc/$p/stat") != Z ]]; then
		alive+=("$p")
	fi
done
check "every process of the cluster and the real node stopped (${#pids[@]} PIDs)" test "${#alive[@]}" -eq 0
check_not "bridge $REAL_NODE_BRIDGE deleted" ip link show "$REAL_NODE_BRIDGE"
check "nothing mounted under $REAL_NODE_DIR" test -z "$(findmnt -rn -o TARGET | grep -F "$REAL_NODE_DIR/" || true)"
check_not "the real node's state removed" test -e "$REAL_NODE_DIR"

echo "the diff tool $((tool_built - start))s, cluster $((cluster_up - tool_built))s, this tree's image and chart $((pushed - cluster_up))s, the previous release's $((prev_pushed - pushed))s," \
	"its install and the first checks $((upgrade_start - prev_pushed))s, the upgrade (burst, records, deleted pod) $((upgraded - upgrade_start))s," \
	"the rollback and the last burst $((rolled_back - upgraded))s, the upgrade again $((upgraded_again - rolled_back))s," \
	"uninstall $((installed - upgraded_again))s, total $(($(date +%s) - start))s"
finish
