#!/usr/bin/env bash
# Upgrade and uninstall of the chart against a real kube-apiserver whose
# kube-controller-manager runs the garbage collector (KUBECONFIG from the environment;
# deploy/test/cluster.sh runs it, and so does `make test` through run-e2e.sh):
#  1. upgrade: the chart of the previous release (UPGRADE_FROM, a git revision; default:
#     the commit that added the newest release heading of CHANGELOG.md) is installed with
#     `helm install`, and the state its webhook writes at runtime is added (the
#     certificate in the Secret; a seat record, an unavailability record and the leader
#     Lease, without owner references, as that version wrote them). `helm upgrade
#     --dry-run=server` to this chart passes, then `helm upgrade` keeps the Deployment's
#     selector, the Secret (same UID, same data), the webhook configurations (same UIDs)
#     and the Leases.
#  2. this version's `serve` runs on this machine as the release's ServiceAccount, with
#     the chart's settings: it adopts the earlier version's Leases and creates its leader
#     Lease, all owned by the release's Deployment.
#  3. uninstall: after `helm uninstall`, nothing of the release is left: no Lease, Secret,
#     webhook configuration or other object labelled with the release (the garbage
#     collector deletes the Leases with the Deployment).
# The release's webhooks select no namespace (an unused label), so the API server never
# calls the pods that cannot run here. Everything is removed at the end.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
cd "$REPO_ROOT"

: "${KUBECONFIG:?set KUBECONFIG to the cluster to test against}"
export KUBECONFIG
ensure_helm

tmp=$(mktemp -d)
ns=cksw-lifecycle-$(printf '%04x%04x' "$RANDOM" "$RANDOM")
release=cksw-life
full=$release-$CHART_NAME
serve_pid=""
cleanup() {
	if [[ -n $serve_pid ]]; then
		kill "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
	fi
	"$HELM" uninstall "$release" -n "$ns" >/dev/null 2>&1 || true
	kubectl delete namespace "$ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

from=${UPGRADE_FROM:-}
if [[ -z $from ]]; then
	release_heading=$(grep -m1 -E '^## \[[0-9]+\.[0-9]+\.[0-9]+' CHANGELOG.md || true)
	[[ -n $release_heading ]] || {
		echo "CHANGELOG.md names no release; set UPGRADE_FROM" >&2
		exit 1
	}
	from=$(git log --format=%H -S"$release_heading" -- CHANGELOG.md | tail -n 1)
	[[ -n $from ]] || {
		echo "no commit adds '$release_heading' to CHANGELOG.md (a shallow clone?); set UPGRADE_FROM" >&2
		exit 1
	}
fi
mkdir -p "$tmp/previous"
git archive "$from" deploy/chart | tar -x -C "$tmp/previous"
previous_chart=$tmp/previous/deploy/chart/$CHART_NAME
previous_version=$(awk '/^version:/ {print $2}' "$previous_chart/Chart.yaml")

cat >"$tmp/values.yaml" <<EOF
image:
  repository: $RENDER_IMAGE_REPOSITORY
# No namespace carries this label: the API server never calls this release's webhooks.
namespaceSelector:
  matchLabels:
    cksw-lifecycle-test: never
EOF
kubectl create namespace "$ns" >/dev/null

echo "== upgrade from the chart of $previous_version (${from:0:12}) to this one"
# must DESCRIPTION COMMAND...: a step the rest depends on; its output is shown on failure.
must() {
	local what=$1
	shift
	if "$@" >"$tmp/out" 2>&1; then
		pass "$what"
	else
		fail "$what"
		cat "$tmp/out" >&2
		finish
	fi
}
# The policy CRDs are cluster-wide: where they exist already (the e2e run applies the
# chart's copy), they are handed to this release first, as docs/upgrade.md says: before
# the previous chart's install, which has them too from 0.2.0 on.
crds=(placementpolicies.custom-kube-scheduler-webhook.io clusterplacementpolicies.custom-kube-scheduler-webhook.io)
for crd in "${crds[@]}"; do
	if kubectl get crd "$crd" >/dev/null 2>&1; then
		kubectl label crd "$crd" app.kubernetes.io/managed-by=Helm --overwrite >/dev/null
		kubectl annotate crd "$crd" meta.helm.sh/release-name="$release" meta.helm.sh/release-namespace="$ns" --overwrite >/dev/null
	fi
done
must "helm install of the previous chart ($previous_version)" \
	"$HELM" install "$release" "$previous_chart" -n "$ns" -f "$tmp/values.yaml"
# What the previous version's webhook writes at runtime (no owner references then).
kubectl -n "$ns" patch secret "$full-certs" --type merge -p '{"data":{"ca.crt":"Y2E=","tls.crt":"Y2VydA==","tls.key":"a2V5"}}' >/dev/null
kubectl -n "$ns" create -f - >/dev/null <<EOF
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: seats-lifecycle
  labels: {custom-kube-scheduler-webhook.io/record: seats}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: unavailable-lifecycle
  labels: {custom-kube-scheduler-webhook.io/unavailability: "true"}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: custom-kube-scheduler-webhook-converge
EOF
uid() { kubectl get "$@" -o jsonpath='{.metadata.uid}'; }
before_selector=$(kubectl -n "$ns" get deployment "$full" -o jsonpath='{.spec.selector}')
before_secret=$(uid -n "$ns" secret "$full-certs")
before_mwc=$(uid mutatingwebhookconfiguration "$full")
before_vwc=$(uid validatingwebhookconfiguration "$full")

must "helm upgrade --dry-run=server to this chart" \
	"$HELM" upgrade "$release" "$CHART_DIR" -n "$ns" -f "$tmp/values.yaml" --dry-run=server
must "helm upgrade to this chart" "$HELM" upgrade "$release" "$CHART_DIR" -n "$ns" -f "$tmp/values.yaml"
check "upgrade: the Deployment's selector is unchanged" \
	test "$(kubectl -n "$ns" get deployment "$full" -o jsonpath='{.spec.selector}')" = "$before_selector"
check "upgrade: the Secret is the same object" test "$(uid -n "$ns" secret "$full-certs")" = "$before_secret"
check "upgrade: the Secret keeps the certificate" \
	test "$(kubectl -n "$ns" get secret "$full-certs" -o jsonpath='{.data.tls\.crt}')" = "Y2VydA=="
check "upgrade: the MutatingWebhookConfiguration is the same object" test "$(uid mutatingwebhookconfiguration "$full")" = "$before_mwc"
check "upgrade: the ValidatingWebhookConfiguration is the same object" test "$(uid validatingwebhookconfiguration "$full")" = "$before_vwc"
check "upgrade: the 3 Leases are kept" test "$(kubectl -n "$ns" get leases -o name | wc -l)" -eq 3

echo "== serve as the release's ServiceAccount adopts and owns its Leases"
go build -o "$tmp/custom-kube-scheduler-webhook" ./cmd/custom-kube-scheduler-webhook
server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
kubectl config view --minify --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$tmp/ca.crt"
token=$(kubectl -n "$ns" create token "$full" --duration=1h)
cat >"$tmp/webhook-kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$server", certificate-authority: "$tmp/ca.crt"}}]
users: [{name: u, user: {token: "$token"}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: "$ns"}}]
current-context: c
EOF
port=0
for _ in $(seq 50); do
	p=$((20000 + RANDOM % 20000))
	if ! (: </dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
		port=$p
		break
	fi
done
((port > 0)) || {
	echo "no free port found" >&2
	exit 1
}
mkdir -p "$tmp/certs"
# The chart's settings (templates/deployment.yaml), with paths and a port of this machine.
env KUBECONFIG="$tmp/webhook-kubeconfig" POD_NAMESPACE="$ns" OWNER_DEPLOYMENT="$full" \
	LISTEN_ADDRESS="127.0.0.1:$port" TLS_CERT_FILE="$tmp/certs/tls.crt" TLS_KEY_FILE="$tmp/certs/tls.key" \
	CERT_MODE=self CERT_SECRET_NAME="$full-certs" SERVICE_NAME="$full" \
	MUTATING_WEBHOOK_CONFIGURATION="$full" VALIDATING_WEBHOOK_CONFIGURATION="$full" \
	CONVERGE=on SHUTDOWN_DRAIN=0s LOG_LEVEL=info \
	"$tmp/custom-kube-scheduler-webhook" serve >"$tmp/serve.log" 2>&1 &
serve_pid=$!
deployment_uid=$(uid -n "$ns" deployment "$full")
all_owned() { # every Lease of the namespace is owned by the Deployment, the leader Lease among them
	local unowned leader
	unowned=$(kubectl -n "$ns" get leases -o json |
		jq -r --arg uid "$deployment_uid" '.items[] | select([.metadata.ownerReferences[]? | select(.kind == "Deployment" and .uid == $uid)] | length == 0) | .metadata.name')
	leader=$(kubectl -n "$ns" get lease custom-kube-scheduler-webhook-converge -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
	[[ -z $unowned && -n $leader ]]
}
serving_and_owned() { # stops waiting once serve has exited
	kill -0 "$serve_pid" 2>/dev/null || return 0
	all_owned
}
if wait_until 90 serving_and_owned && all_owned; then
	pass "every Lease is owned by the Deployment; serve holds the leader Lease"
else
	fail "Leases not owned by the Deployment (or no leader): $(kubectl -n "$ns" get leases -o json | jq -c '[.items[] | {name: .metadata.name, owners: .metadata.ownerReferences, holder: .spec.holderIdentity}]')"
	grep -vE '"level":"(debug|info)"' "$tmp/serve.log" | tail -20 >&2 || true
fi
check "serve filled the Secret and the caBundle (self mode)" \
	test -n "$(kubectl get mutatingwebhookconfiguration "$full" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')"
kill -TERM "$serve_pid" 2>/dev/null || true
wait "$serve_pid" || true
serve_pid=""

echo "== helm uninstall leaves nothing but the policies"
check "helm uninstall" "$HELM" uninstall "$release" -n "$ns" --wait
crds_gone() { ! kubectl get crd "${crds[@]}" -o name 2>/dev/null | grep -q .; }
check "helm uninstall keeps the policy CRDs (crds.keep, the default)" test "$(kubectl get crd "${crds[@]}" -o name | wc -l)" -eq 2
# Removing them, and every policy, is the explicit step docs/upgrade.md gives.
check "kubectl delete crd removes them" kubectl delete crd "${crds[@]}" --wait
check "the policy CRDs are gone" wait_until 60 crds_gone
if wait_until 90 release_gone "$ns" "$full"; then
	pass "nothing of the release is left (Leases, Secrets, webhook configurations, RBAC, PriorityClass)"
else
	fail "left after helm uninstall: $(release_leftovers "$ns" "$full" | tr '\n' ' ')"
fi

finish
