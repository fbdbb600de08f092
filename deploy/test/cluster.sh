#!/usr/bin/env bash
# Deploy checks against a real kube-apiserver (KUBECONFIG from the environment):
#  1. every rendered manifest (chart with default and non-default values, and the plain
#     copies in deploy/manifests) is accepted by `kubectl apply --server-side
#     --dry-run=server`. Without cert-manager's CRDs in the cluster, cert-manager.io
#     objects are left out of that apply and reported.
#  2. the chart's RBAC, applied for real under a test release, allows what the webhook
#     uses and denies the rest (`kubectl auth can-i --as` its ServiceAccount).
#  2b. scripts/localcluster/check-webhook-rbac.sh (every request the webhook made in the
#     e2e suite, checked against the chart's RBAC) passes on allowed requests and fails on
#     a request the chart does not allow or one answered 403 (synthetic audit logs).
#  3. the self-managed certificate mode runs against the API server as that
#     ServiceAccount (impersonated): Secret created, caBundle injected, serving cert
#     rotated without restart (go test -tags e2e ./webhook/selfcert). SKIP_SELFCERT_E2E=1
#     skips it.
#  4. the rendered webhook configurations' namespaceSelector, objectSelector and
#     matchConditions, registered against a recording endpoint: which pods and workloads
#     the API server calls the webhook for (go test -tags e2e ./deploy/test/).
#  5. deploy/test/lifecycle.sh: `helm upgrade` from the previous release's chart keeps
#     the Deployment's selector, the Secret, the webhook configurations and the Leases;
#     `helm uninstall` leaves nothing of the release (Leases included).
# Everything the test creates is removed at the end; namespaces that existed are kept.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
cd "$REPO_ROOT"

: "${KUBECONFIG:?set KUBECONFIG to the cluster to test against}"
export KUBECONFIG
kubectl version >/dev/null || {
	echo "cannot reach the cluster in $KUBECONFIG" >&2
	exit 1
}
ensure_helm

tmp=$(mktemp -d)
created_ns=()
cleanup_files=()
cleanup() {
	local f ns
	for f in "${cleanup_files[@]}"; do
		kubectl delete --ignore-not-found --wait=false -f "$f" >/dev/null 2>&1 || true
	done
	for ns in "${created_ns[@]}"; do
		kubectl delete namespace "$ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

# Fresh namespace names per run: a namespace of an earlier run may still be terminating.
run_id=$(printf '%04x%04x' "$RANDOM" "$RANDOM")

ensure_ns() {
	if ! kubectl get namespace "$1" >/dev/null 2>&1; then
		kubectl create namespace "$1" >/dev/null
		created_ns+=("$1")
	fi
}

have_cert_manager=false
if kubectl get crd certificates.cert-manager.io issuers.cert-manager.io >/dev/null 2>&1; then
	have_cert_manager=true
fi

# dry_run FILE DESCRIPTION: server-side dry-run apply of every object in FILE.
dry_run() {
	local file=$1 what=$2 n skipped=0 out
	if ! $have_cert_manager; then
		skipped=$(grep -cE '^apiVersion: cert-manager\.io/' "$file" || true)
		without_groups '^apiVersion: cert-manager\.io/' <"$file" >"$file.applied"
		file=$file.applied
	fi
	n=$(count_docs <"$file")
	if out=$(kubectl apply --server-side --dry-run=server --force-conflicts \
		--field-manager=cksw-deploy-test -f "$file" 2>&1); then
		local applied
		applied=$(grep -c 'serverside-applied (server dry run)' <<<"$out" || true)
		if [[ $applied == "$n" ]]; then
			pass "$what: $n objects accepted${skipped:+$( ((skipped > 0)) && echo ", $skipped cert-manager.io objects not sent (no CRDs)")}"
		else
			fail "$what: $applied of $n objects accepted"
			echo "$out" >&2
		fi
	else
		fail "$what"
		echo "$out" >&2
	fi
}

echo "== server-side dry-run of every rendered manifest"
$have_cert_manager || echo "note: cert-manager CRDs are not installed; cert-manager.io objects are checked by deploy/test/static.sh only"
ns=cksw-dryrun-$run_id
ensure_ns "$ns"
render_to() { # FILE RELEASE [helm args...]
	local file=$1 release=$2
	shift 2
	helm_template "$release" "$ns" "$@" >"$file"
}
render_to "$tmp/default.yaml" "$CHART_NAME"
dry_run "$tmp/default.yaml" "chart, default values"
for values in deploy/test/values/*.yaml; do
	name=$(basename "$values" .yaml)
	args=(-f "$values")
	# The Namespace object would be created by a real install only; here it exists.
	if grep -q '^  create: true' "$values"; then args+=(--set namespace.create=false); fi
	render_to "$tmp/$name.yaml" "$CHART_NAME" "${args[@]}"
	dry_run "$tmp/$name.yaml" "chart, $values"
done
# The plain copies install into their own namespace; dry-run needs it to exist.
ensure_ns "$CHART_NAME"
for f in deploy/manifests/*.yaml; do
	# alerts.yaml is a Prometheus rule file, not Kubernetes objects (promtool checks it).
	[[ $f == */alerts.yaml ]] && continue
	cp "$f" "$tmp/plain-$(basename "$f")"
	dry_run "$tmp/plain-$(basename "$f")" "plain $f"
done

echo "== RBAC of the chart (real apply, then kubectl auth can-i)"
rns=cksw-rbac-$run_id
release=cksw-rbac
full=$release-$CHART_NAME
sa=system:serviceaccount:$rns:$full
ensure_ns "$rns"
helm_template "$release" "$rns" | docs ServiceAccount >"$tmp/rbac.yaml"
for kind in ClusterRole ClusterRoleBinding Role RoleBinding; do
	helm_template "$release" "$rns" | docs "$kind" >>"$tmp/rbac.yaml"
done
cleanup_files+=("$tmp/rbac.yaml")
check "apply ServiceAccount + RBAC ($(count_docs <"$tmp/rbac.yaml") objects)" \
	kubectl apply --server-side --force-conflicts --field-manager=cksw-deploy-test -f "$tmp/rbac.yaml"

# can-i resolves resources through discovery: without Karpenter's NodePool CRD it would ask
# about the wrong group. Install the CRD from the module cache (the Karpenter version in
# go.mod) when the cluster lacks it, and remove it afterwards.
if ! kubectl get crd nodepools.karpenter.sh >/dev/null 2>&1; then
	kdir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter 2>/dev/null || true)
	if [[ -z $kdir ]]; then
		go mod download sigs.k8s.io/karpenter
		kdir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
	fi
	cp "$kdir/pkg/apis/crds/karpenter.sh_nodepools.yaml" "$tmp/nodepools-crd.yaml"
	kubectl apply --server-side -f "$tmp/nodepools-crd.yaml" >/dev/null
	cleanup_files+=("$tmp/nodepools-crd.yaml")
	kubectl wait --for=condition=Established crd/nodepools.karpenter.sh --timeout=60s >/dev/null
fi

can() { kubectl auth can-i --as="$sa" "$@" 2>/dev/null; }
allowed() { check "allowed: $*" can "$@"; }
denied() { check_not "denied:  $*" can "$@"; }

for verb in list watch; do
	allowed "$verb" pods --all-namespaces
	allowed "$verb" nodes
	allowed "$verb" nodepools.karpenter.sh
done
for res in deployments.apps replicasets.apps statefulsets.apps jobs.batch cronjobs.batch; do
	for verb in get list watch; do allowed "$verb" "$res" --all-namespaces; done
	denied update "$res" --all-namespaces
	denied delete "$res" --all-namespaces
done
# Argo Rollouts' metadata, where the cluster serves the CRD (can-i resolves the name
# through discovery; without the CRD it would ask about the wrong group).
if kubectl get crd rollouts.argoproj.io >/dev/null 2>&1; then
	for verb in get list watch; do allowed "$verb" rollouts.argoproj.io --all-namespaces; done
	denied update rollouts.argoproj.io --all-namespaces
fi
allowed create events --namespace default
allowed patch events --namespace default
secret=secret/$full-certs
for verb in get list watch update patch; do allowed "$verb" "$secret" --namespace "$rns"; done
allowed create secrets --namespace "$rns"
for verb in get list watch create update delete; do allowed "$verb" leases.coordination.k8s.io --namespace "$rns"; done
denied create leases.coordination.k8s.io --namespace kube-system
denied list leases.coordination.k8s.io --all-namespaces
for kind in mutatingwebhookconfigurations validatingwebhookconfigurations; do
	for verb in get list watch update patch; do allowed "$verb" "$kind.admissionregistration.k8s.io/$full"; done
	denied list "$kind.admissionregistration.k8s.io"
	denied update "$kind.admissionregistration.k8s.io/someone-elses-webhook"
	denied create "$kind.admissionregistration.k8s.io"
	denied delete "$kind.admissionregistration.k8s.io/$full"
done
denied get secrets --all-namespaces
denied list secrets --all-namespaces
denied get secrets --namespace default
denied list secrets --namespace "$rns"
denied get secret/another-secret --namespace "$rns"
denied delete "$secret" --namespace "$rns"
denied create secrets --namespace default
denied delete pods --all-namespaces
# The convergence loop (converge.enabled): evictions only, and Karpenter's Events.
allowed create pods --subresource=eviction --all-namespaces
allowed list events --all-namespaces
denied delete events --all-namespaces
denied create pods --namespace default
denied update pods --all-namespaces
denied patch pods --all-namespaces
denied get configmaps --all-namespaces
denied create clusterrolebindings.rbac.authorization.k8s.io
denied impersonate users
denied '*' '*' --all-namespaces

echo "== RBAC of the chart with certMode cert-manager: no certificate Secret; only its own webhook configurations (the admission token's path)"
cmrelease=cksw-rbac-cm
cmfull=$cmrelease-$CHART_NAME
for kind in ServiceAccount ClusterRole ClusterRoleBinding Role RoleBinding; do
	helm_template "$cmrelease" "$rns" --set certMode=cert-manager | docs "$kind"
done >"$tmp/rbac-cm.yaml"
cleanup_files+=("$tmp/rbac-cm.yaml")
check "apply ServiceAccount + RBAC, cert-manager mode ($(count_docs <"$tmp/rbac-cm.yaml") objects)" \
	kubectl apply --server-side --force-conflicts --field-manager=cksw-deploy-test -f "$tmp/rbac-cm.yaml"
self_sa=$sa
sa=system:serviceaccount:$rns:$cmfull
allowed list pods --all-namespaces
for verb in get update patch; do denied "$verb" "secret/$cmfull-certs" --namespace "$rns"; done
denied create secrets --namespace "$rns"
for kind in mutatingwebhookconfigurations validatingwebhookconfigurations; do
	for verb in get update; do allowed "$verb" "$kind.admissionregistration.k8s.io/$cmfull"; done
	denied update "$kind.admissionregistration.k8s.io/another-webhook"
done
allowed get "secret/$cmfull-admission-token" --namespace "$rns"
allowed create leases.coordination.k8s.io --namespace "$rns"
sa=$self_sa

echo "== the check of the webhook's requests against the chart's RBAC (scripts/localcluster/check-webhook-rbac.sh)"
# Synthetic audit logs of this test release's ServiceAccount: what the chart allows
# passes; a request it does not allow, or one answered 403, fails the check.
lcdir=$tmp/lc
mkdir -p "$lcdir/logs"
ln -s "$(cd "$(dirname "$KUBECONFIG")" && pwd)/$(basename "$KUBECONFIG")" "$lcdir/kubeconfig"
groups="[\"system:serviceaccounts\",\"system:serviceaccounts:$rns\",\"system:authenticated\"]"
event() { # VERB URI CODE [OBJECTREF-JSON]
	printf '{"stage":"ResponseComplete","verb":"%s","requestURI":"%s","user":{"username":"%s","groups":%s},%s"responseStatus":{"code":%s}}\n' \
		"$1" "$2" "$sa" "$groups" "${4:+\"objectRef\":$4,}" "$3"
}
allowed_log() {
	event list /api/v1/pods 200 '{"resource":"pods","apiVersion":"v1"}'
	event create "/apis/coordination.k8s.io/v1/namespaces/$rns/leases" 201 "{\"resource\":\"leases\",\"namespace\":\"$rns\",\"apiGroup\":\"coordination.k8s.io\"}"
	event get "/apis/coordination.k8s.io/v1/namespaces/$rns/leases/seat-1" 404 "{\"resource\":\"leases\",\"namespace\":\"$rns\",\"name\":\"seat-1\",\"apiGroup\":\"coordination.k8s.io\"}"
	event get /version 200
}
rbac_check() { LOCALCLUSTER_DIR=$lcdir AUDIT_LOG=$1 bash scripts/localcluster/check-webhook-rbac.sh; }
allowed_log >"$tmp/audit-ok.jsonl"
{
	allowed_log
	event get /api/v1/namespaces/default/pods/web-1 200 '{"resource":"pods","namespace":"default","name":"web-1","apiVersion":"v1"}'
} >"$tmp/audit-denied.jsonl"
{
	allowed_log
	event list /api/v1/nodes 403 '{"resource":"nodes","apiVersion":"v1"}'
} >"$tmp/audit-403.jsonl"
check "requests the chart allows pass" rbac_check "$tmp/audit-ok.jsonl"
check_not "a request the chart does not allow (get pods) fails" rbac_check "$tmp/audit-denied.jsonl"
check_not "a request answered 403 fails" rbac_check "$tmp/audit-403.jsonl"

if [[ ${SKIP_SELFCERT_E2E:-} == 1 ]]; then
	echo "skip: self-managed certificate e2e (SKIP_SELFCERT_E2E=1)"
else
	echo "== self-managed certificates as the chart's ServiceAccount"
	if SELFCERT_E2E_NAMESPACE=$rns SELFCERT_E2E_SECRET=$full-certs SELFCERT_E2E_SERVICE=$full \
		SELFCERT_E2E_WEBHOOK=$full SELFCERT_E2E_AS=$sa \
		go test -tags e2e -count=1 -run E2E ./webhook/selfcert/ >"$tmp/selfcert.log" 2>&1; then
		pass "selfcert e2e: Secret created, caBundle injected, rotation without restart (RBAC of the chart only)"
	else
		fail "selfcert e2e"
		grep -vE 'level=(info|debug)' "$tmp/selfcert.log" | tail -40 >&2
	fi
fi

echo "== upgrade from the previous release and uninstall (deploy/test/lifecycle.sh)"
if bash deploy/test/lifecycle.sh >"$tmp/lifecycle.log" 2>&1; then
	pass "helm upgrade from the previous chart changes nothing destructive; helm uninstall leaves nothing"
else
	fail "lifecycle (upgrade, uninstall)"
	grep -E '^(FAIL|==)' "$tmp/lifecycle.log" >&2 || true
	tail -20 "$tmp/lifecycle.log" >&2
fi

echo "== webhook selectors and matchConditions on the API server"
if go test -tags e2e -count=1 -run E2E ./deploy/test/ >"$tmp/selectors.log" 2>&1; then
	pass "pods and workloads the webhooks are called for (and not called for)"
else
	fail "webhook selectors"
	tail -40 "$tmp/selectors.log" >&2
fi

finish
