#!/usr/bin/env bash
# Give the local webhook process the permissions the Helm chart gives it, and nothing more:
# apply the chart's own ServiceAccount, ClusterRoles, Role and bindings (and its policy CRDs) (helm template,
# rendered for the webhook namespace with values matching the local cluster: certificate
# files instead of self-managed ones, everything else the chart's defaults), mint a token
# for that ServiceAccount with the TokenRequest API, and write a kubeconfig with it to
# $LOCALCLUSTER_DIR/webhook-kubeconfig. webhook.sh, the e2e tests and the soak run
# `serve` with that kubeconfig; cluster-admin stays with the test driver.
# Idempotent: re-applies the RBAC and writes a fresh token.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=../../deploy/lib.sh
source "$REPO_ROOT/deploy/lib.sh"

[[ -s $KUBECONFIG_FILE ]] || lc_die "no cluster in $LOCALCLUSTER_DIR: run scripts/localcluster/up.sh"
ensure_helm

# The release name gives the chart's objects (and the ServiceAccount) the name
# custom-kube-scheduler-webhook, as a default install does.
RELEASE=$CHART_NAME
SA=$CHART_NAME
WEBHOOK_KUBECONFIG=$LOCALCLUSTER_DIR/webhook-kubeconfig
rbac=$LOCALCLUSTER_DIR/webhook-rbac.yaml

lc_kubectl create namespace "$WEBHOOK_NAMESPACE" --dry-run=client -o yaml |
	lc_kubectl apply --server-side --field-manager=localcluster -f - >/dev/null
# The local webhook reads its serving certificate from files (cert-manager mode renders
# no Secret or webhook-configuration rights, which file mode does not use either).
helm_template "$RELEASE" "$WEBHOOK_NAMESPACE" --set certMode=cert-manager >"$rbac.all"
# Only the identity, its rights and the policy CRDs (the webhook looks for their API when
# it starts): the Deployment, Service, webhook configurations and
# cert-manager objects of the chart are the local scripts' business.
awk '
	function flush() { if (doc != "" && keep) printf "---\n%s", doc; doc = ""; keep = 0 }
	/^---/ { flush(); next }
	{ doc = doc $0 "\n" }
	/^kind: (ServiceAccount|ClusterRole|ClusterRoleBinding|Role|RoleBinding|CustomResourceDefinition)$/ { keep = 1 }
	END { flush() }' "$rbac.all" >"$rbac"
rm -f "$rbac.all"
grep -q '^kind: ServiceAccount$' "$rbac" || lc_die "the chart rendered no ServiceAccount"
lc_kubectl apply --server-side --force-conflicts --field-manager=localcluster -f "$rbac" >/dev/null
lc_kubectl wait --for condition=established --timeout=60s \
	crd/placementpolicies.custom-kube-scheduler-webhook.io crd/clusterplacementpolicies.custom-kube-scheduler-webhook.io >/dev/null

# A long-lived bound token (TokenRequest), enough for a demo left running for days.
token=$(lc_kubectl -n "$WEBHOOK_NAMESPACE" create token "$SA" --duration="${WEBHOOK_TOKEN_DURATION:-168h}")
umask 077
lc_kubeconfig "$WEBHOOK_KUBECONFIG" "$SA" webhook "$WEBHOOK_NAMESPACE" "token: $token"
who=$(kubectl --kubeconfig "$WEBHOOK_KUBECONFIG" auth whoami -o jsonpath='{.status.userInfo.username}')
[[ $who == "system:serviceaccount:$WEBHOOK_NAMESPACE:$SA" ]] || lc_die "the webhook kubeconfig authenticates as '$who'"
lc_log "webhook identity: $who with the chart's RBAC ($(grep -c '^kind: ' "$rbac") objects); kubeconfig $WEBHOOK_KUBECONFIG"
