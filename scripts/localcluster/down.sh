#!/usr/bin/env bash
# Stop the local cluster started by up.sh (and a webhook started by webhook.sh):
# each daemon by its recorded PID only, newest first. Then remove the cluster's
# state (PKI, etcd data, logs, kubeconfig) unless LOCALCLUSTER_KEEP_STATE=1.
# Safe to run when nothing is running.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

[[ -d $LOCALCLUSTER_DIR ]] || exit 0

# Webhook processes first (webhook.sh's, and those the e2e tests record), so no
# admission is attempted against a half-stopped cluster.
for f in "$PIDS"/webhook*.pid; do
	[[ -e $f ]] || continue
	lc_stop "$(basename "$f" .pid)"
done
# The local AWS price endpoint (aws-prices.sh), if one runs.
lc_stop awslocal
# The real node (REAL_NODE=1) next, while the API server can still delete its pods.
if [[ -d $REAL_NODE_DIR ]]; then
	bash "$LC_SCRIPTS/realnode.sh" down
fi
# The registry of chart-install.sh (REAL_NODE=1).
if [[ -d $LOCALCLUSTER_DIR/registry ]]; then
	PIDS=$LOCALCLUSTER_DIR/registry/pids lc_stop registry
fi
for ((i = ${#LC_COMPONENTS[@]} - 1; i >= 0; i--)); do
	lc_stop "${LC_COMPONENTS[i]}"
done

if [[ ${LOCALCLUSTER_KEEP_STATE:-0} == 1 ]]; then
	echo "state kept in $LOCALCLUSTER_DIR"
	exit 0
fi
# Only what up.sh/webhook.sh write, so a nested state dir of another cluster
# (e.g. the e2e cluster in .localcluster/e2e) survives.
rm -rf "$PKI" "$PIDS" "$LOGS" "$LOCALCLUSTER_DIR/etcd" "$LOCALCLUSTER_DIR/apiserver-certs" "$LOCALCLUSTER_DIR/registry"
rm -f "$KUBECONFIG_FILE" "$LOCALCLUSTER_DIR/kwok-stages.yaml" "$LOCALCLUSTER_DIR/port-offset" "$LOCALCLUSTER_DIR/real-node" \
	"$LOCALCLUSTER_DIR/webhook-registration.yaml" "$LOCALCLUSTER_DIR/audit-policy.yaml" "$LOCALCLUSTER_DIR/aws.env" "$LOCALCLUSTER_DIR/awslocal" \
	"$LOCALCLUSTER_DIR/webhook-kubeconfig" "$LOCALCLUSTER_DIR/webhook-rbac.yaml" "$LOCALCLUSTER_DIR/instance-types.json"
rmdir "$LOCALCLUSTER_DIR" 2>/dev/null || true
