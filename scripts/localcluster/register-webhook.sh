#!/usr/bin/env bash
# Register a webhook that runs as a local process (webhook.sh) with the local cluster:
# a MutatingWebhookConfiguration for pods (and a ValidatingWebhookConfiguration for
# workloads) by URL https://127.0.0.1:$WEBHOOK_PORT, with the cluster CA as caBundle.
# The shape follows the Helm chart (deploy/chart/.../templates/webhooks.yaml):
# failurePolicy Ignore, sideEffects NoneOnDryRun, pod CREATE only, short timeout,
# reinvocationPolicy Never, own namespace and kube-system excluded.
#
# WEBHOOK_FILTERS=full (default) also adds the chart's call filters: blocklisted
# namespaces in the namespaceSelector, the managed-label objectSelector and the CEL
# matchConditions (both read from the chart's files). WEBHOOK_FILTERS=minimal leaves them out, so every pod CREATE
# outside kube-system and the webhook namespace reaches the webhook (the e2e tests
# use it to check the webhook's own skipping logic).
#
# WEBHOOK_SCOPE=opt-in (default) sends only the namespaces labelled
# custom-kube-scheduler-webhook.io/enabled=true or custom-kube-scheduler-webhook=enabled,
# with the chart's entries (one per label, and with full filters the validating
# not-enabled entry that warns about annotated workloads elsewhere); all sends every
# namespace but the excluded ones, as the chart's `scope: all` does.
#
# The API server picks up a new configuration through a watch, so this polls with a
# canary (a server-side dry-run pod create) until the response shows the webhook's patch,
# and with a second one until the validating webhook refuses an invalid strategy.
# `register-webhook.sh delete` removes the configurations.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

NAME=custom-kube-scheduler-webhook
[[ -s $KUBECONFIG_FILE ]] || lc_die "no cluster in $LOCALCLUSTER_DIR: run scripts/localcluster/up.sh"

if [[ ${1:-} == delete ]]; then
	lc_kubectl delete mutatingwebhookconfiguration "$NAME" --ignore-not-found >/dev/null
	lc_kubectl delete validatingwebhookconfiguration "$NAME" --ignore-not-found >/dev/null
	lc_log "webhook configurations deleted"
	exit 0
fi

FILTERS=${WEBHOOK_FILTERS:-full}
TIMEOUT_SECONDS=${WEBHOOK_TIMEOUT_SECONDS:-5}
CA_BUNDLE=$(base64 -w0 <"$PKI/ca.crt")
# The webhook answers reviews only at /<token>/mutate and /<token>/validate, the token
# kept in its Secret (webhook.sh starts it; it fills the Secret in before it is ready).
# Without a token yet, the plain paths: the webhook writes its token in once it starts.
token=$(lc_kubectl -n "$WEBHOOK_NAMESPACE" get secret "$ADMISSION_TOKEN_SECRET" -o jsonpath='{.data.token}' 2>/dev/null | base64 -d || true)
URL=https://127.0.0.1:$WEBHOOK_PORT${token:+/$token}

# Namespaces the API server never sends: kube-system, the webhook's own namespace
# and, with full filters, the blocklist the webhook is configured with.
excluded=(kube-system "$WEBHOOK_NAMESPACE")
if [[ $FILTERS == full ]]; then
	IFS=, read -ra bl <<<"${BLOCKLISTED_NAMESPACE_LIST:-kube-system,kube-public}"
	for ns in "${bl[@]}"; do
		ns=${ns// /}
		[[ -n $ns && " ${excluded[*]} " != *" $ns "* ]] && excluded+=("$ns")
	done
elif [[ $FILTERS != minimal ]]; then
	lc_die "WEBHOOK_FILTERS must be full or minimal (got '$FILTERS')"
fi
SCOPE=${WEBHOOK_SCOPE:-opt-in}
# Each scope entry: a webhook name prefix and the scope's namespaceSelector terms (as the
# chart's cksw.scopes: a namespaceSelector ANDs its terms, so either label takes two
# entries with disjoint selectors).
on_terms='        - {key: custom-kube-scheduler-webhook.io/enabled, operator: In, values: ["true"]}'
orig_terms='        - {key: custom-kube-scheduler-webhook, operator: In, values: [enabled]}
        - {key: custom-kube-scheduler-webhook.io/enabled, operator: NotIn, values: ["true"]}'
off_terms='        - {key: custom-kube-scheduler-webhook.io/enabled, operator: NotIn, values: ["true"]}
        - {key: custom-kube-scheduler-webhook, operator: NotIn, values: [enabled]}'
case $SCOPE in
all) scopes=("") ;;
opt-in) scopes=("" "original-label.") ;;
*) lc_die "WEBHOOK_SCOPE must be opt-in or all (got '$SCOPE')" ;;
esac
scope_terms() { # PREFIX
	case $SCOPE/$1 in
	opt-in/) echo "$on_terms" ;;
	opt-in/original-label.) echo "$orig_terms" ;;
	esac
}
excluded_json=$(printf '%s\n' "${excluded[@]}" | jq -R . | jq -sc .)

# The call filters are read from the chart, so they exist once: the pod webhook's
# objectSelector from values.yaml, each webhook's matchConditions from its template.
CHART_DIR=$REPO_ROOT/deploy/chart/custom-kube-scheduler-webhook
chart_object_selector() {
	echo "    objectSelector:"
	awk '/^objectSelector:/ {on = 1; next} on && /^  / {print "    " $0; next} on {exit}' "$CHART_DIR/values.yaml"
}
chart_match_conditions() { # N: 1 the pod webhook's, 2 the workload webhook's, 3 the not-enabled one's, 4 the policy webhook's
	awk -v n="$1" '/^    matchConditions:$/ {k++} k == n && /^ *\{\{-? *end/ {exit} k == n' "$CHART_DIR/templates/webhooks.yaml"
}
pod_filters=""
workload_filters=""
policy_filters=""
if [[ $FILTERS == full ]]; then
	pod_filters="$(chart_object_selector)
$(chart_match_conditions 1)"
	workload_filters=$(chart_match_conditions 2)
	policy_filters=$(chart_match_conditions 4)
	[[ $pod_filters == *"- name: may-have-strategy"* && $workload_filters == *"- name: has-strategy"* ]] ||
		lc_die "could not read the call filters from $CHART_DIR"
fi

POD_RULES='      - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"], scope: Namespaced}'
WORKLOAD_RULES='      - {apiGroups: ["apps"], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["deployments", "statefulsets", "replicasets"], scope: Namespaced}
      - {apiGroups: ["argoproj.io"], apiVersions: ["v1alpha1"], operations: ["CREATE", "UPDATE"], resources: ["rollouts"], scope: Namespaced}
      - {apiGroups: ["batch"], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["jobs", "cronjobs"], scope: Namespaced}'
# entry NAME PATH RULES TERMS FILTERS [reinvocation]: one webhook entry.
entry() {
	cat <<EOF
  - name: $1
    admissionReviewVersions: ["v1"]
    clientConfig: {url: "$URL$2", caBundle: "$CA_BUNDLE"}
    rules:
$3
    failurePolicy: Ignore
    matchPolicy: Equivalent
    sideEffects: NoneOnDryRun
    timeoutSeconds: $TIMEOUT_SECONDS
EOF
	if [[ ${6:-} == reinvocation ]]; then echo "    reinvocationPolicy: Never"; fi
	echo "    namespaceSelector:"
	echo "      matchExpressions:"
	echo "        - {key: kubernetes.io/metadata.name, operator: NotIn, values: $excluded_json}"
	if [[ -n $4 ]]; then echo "$4"; fi
	if [[ -n $5 ]]; then echo "$5"; fi
}

MANIFEST=$LOCALCLUSTER_DIR/webhook-registration.yaml
{
	cat <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: $NAME
  labels: {app.kubernetes.io/name: $NAME, app.kubernetes.io/managed-by: localcluster}
webhooks:
EOF
	for prefix in "${scopes[@]}"; do
		entry "${prefix}pods.custom-kube-scheduler-webhook.io" /mutate "$POD_RULES" "$(scope_terms "$prefix")" "$pod_filters" reinvocation
	done
	cat <<EOF
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: $NAME
  labels: {app.kubernetes.io/name: $NAME, app.kubernetes.io/managed-by: localcluster}
webhooks:
EOF
	for prefix in "${scopes[@]}"; do
		entry "${prefix}workloads.custom-kube-scheduler-webhook.io" /validate "$WORKLOAD_RULES" "$(scope_terms "$prefix")" "$workload_filters"
	done
	# As the chart: annotated workloads of namespaces that are not enabled get a warning,
	# served at /<token>/not-enabled (admissiontoken.Endpoint; /validate/not-enabled with
	# no token yet). Another path would answer 404 until the webhook rewrote it.
	if [[ $SCOPE == opt-in && -n $workload_filters ]]; then
		not_enabled_path=/validate/not-enabled
		[[ -z $token ]] || not_enabled_path=/not-enabled
		entry not-enabled.workloads.custom-kube-scheduler-webhook.io "$not_enabled_path" "$WORKLOAD_RULES" "$off_terms" "$workload_filters"
	fi
	# As the chart: policies and namespace defaults, in every namespace but the webhook's
	# own and kube-system, whatever the scope.
	cat <<EOF
  - name: policies.custom-kube-scheduler-webhook.io
    admissionReviewVersions: ["v1"]
    clientConfig: {url: "$URL/validate", caBundle: "$CA_BUNDLE"}
    rules:
      - {apiGroups: ["custom-kube-scheduler-webhook.io"], apiVersions: ["v1alpha1"], operations: ["CREATE", "UPDATE"], resources: ["placementpolicies", "clusterplacementpolicies"], scope: "*"}
      - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["namespaces"], scope: Cluster}
    failurePolicy: Ignore
    matchPolicy: Equivalent
    sideEffects: NoneOnDryRun
    timeoutSeconds: $TIMEOUT_SECONDS
    namespaceSelector:
      matchExpressions:
        - {key: kubernetes.io/metadata.name, operator: NotIn, values: ["$WEBHOOK_NAMESPACE", "kube-system"]}
$policy_filters
EOF
} >"$MANIFEST"
# Server-side apply with one field manager: switching filter sets drops the fields
# the other set had, without a window where no configuration exists.
lc_kubectl apply --server-side --force-conflicts --field-manager=localcluster -f "$MANIFEST" >/dev/null
lc_log "webhook registered: https://127.0.0.1:$WEBHOOK_PORT${token:+/<token>}/mutate and /validate (filters: $FILTERS, scope: $SCOPE, excluded namespaces: ${excluded[*]})"

# Canary: a server-side dry-run create of a pod owned by a ReplicaSet that carries a
# one-term strategy and has 0 replicas (a bare pod has no workload to count seats in,
# so the webhook leaves it alone). Registered and called <=> the returned pod has
# the term's label in its nodeSelector. A dry run reserves no seat.
CANARY_NS=${WEBHOOK_CANARY_NAMESPACE:-webhook-canary}
lc_kubectl apply --server-side --field-manager=localcluster -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $CANARY_NS
  # Sent in either scope (WEBHOOK_SCOPE=opt-in, the default, sends only labelled namespaces).
  labels: {custom-kube-scheduler-webhook.io/enabled: "true"}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: webhook-canary
  namespace: $CANARY_NS
  annotations:
    CustomPodScheduleStrategy: karpenter.sh/capacity-type=on-demand
spec:
  replicas: 0
  selector: {matchLabels: {app: webhook-canary}}
  template:
    metadata: {labels: {app: webhook-canary}}
    spec:
      containers: [{name: canary, image: registry.k8s.io/pause:3.10}]
EOF
CANARY_RS_UID=$(lc_kubectl -n "$CANARY_NS" get replicaset webhook-canary -o jsonpath='{.metadata.uid}')
canary() {
	lc_kubectl create --dry-run=server -o json -f - <<EOF | jq -e '.spec.nodeSelector["karpenter.sh/capacity-type"] == "on-demand"'
apiVersion: v1
kind: Pod
metadata:
  generateName: webhook-canary-
  namespace: $CANARY_NS
  labels: {app: webhook-canary}
  ownerReferences:
    - {apiVersion: apps/v1, kind: ReplicaSet, name: webhook-canary, uid: "$CANARY_RS_UID", controller: true}
spec:
  containers: [{name: canary, image: registry.k8s.io/pause:3.10}]
EOF
}
if ! LC_WAIT_SECONDS=${WEBHOOK_CANARY_SECONDS:-60} lc_wait canary; then
	lc_die "the canary pod was not mutated: is the webhook serving on https://127.0.0.1:$WEBHOOK_PORT? (see $LOGS/webhook.log)"
fi
lc_log "canary pod mutated: the API server calls the webhook"

# The validating configuration is an object of its own, which the API server picks up
# through its own watch, and a call that fails (to a path with an old token, say) fails
# open: a dry-run update of the canary ReplicaSet to an invalid strategy must be refused
# by the webhook before a test relies on its answers.
refused() {
	local out
	out=$(lc_kubectl -n "$CANARY_NS" annotate --dry-run=server --overwrite replicaset webhook-canary \
		'CustomPodScheduleStrategy=karpenter.sh/capacity-type=on-demand,weight=x' 2>&1 || true)
	[[ $out == *"denied the request"* ]]
}
if ! LC_WAIT_SECONDS=${WEBHOOK_CANARY_SECONDS:-60} lc_wait refused; then
	lc_die "the canary ReplicaSet with an invalid strategy was not refused: the API server does not call the webhook's validating path (see $LOGS/webhook.log)"
fi
lc_log "canary workload refused: the API server calls the validating webhook"
