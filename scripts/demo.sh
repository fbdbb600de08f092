#!/usr/bin/env bash
# One-command demo (make demo): a local Kubernetes + Karpenter (kwok) cluster, the
# webhook as a local process registered by URL, the sample Deployment
# (10 replicas, 1 on-demand + spot split 4 / 5), and its `spread --cost` report with
# prices from a local AWS endpoint (aws-prices.sh).
# With REAL_NODE=1 (make demo REAL_NODE=1; needs root) the cluster gets a real node and
# the webhook is the chart installed for real instead: the image and chart pushed to a
# local registry, `helm install` from it, the pods running on the real node behind the
# chart's Service (scripts/localcluster/chart-install.sh).
# The cluster keeps running afterwards; `make demo-down` stops everything.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=localcluster/lib.sh
source "$(dirname "$0")/localcluster/lib.sh"

NS=demo
DEPLOY=alpine
WEBHOOK_BIN=${WEBHOOK_BIN:-$REPO_ROOT/bin/custom-kube-scheduler-webhook}
export WEBHOOK_BIN

trap 'echo; echo "demo failed. Logs: $LOGS/  Stop everything: make demo-down" >&2' ERR

lc_log "== 1/6 local-cluster binaries (Kubernetes, kwok, Karpenter): cached after the first run"
bash "$LC_SCRIPTS/build.sh"

lc_log "== 2/6 building custom-kube-scheduler-webhook"
# make build stamps the version and revision (build_info, --version) as releases have them.
make -s -C "$REPO_ROOT" build BIN_DIR="$(dirname "$WEBHOOK_BIN")"

lc_log "== 3/6 starting the cluster (etcd, apiserver, controllers, scheduler, kwok, Karpenter)"
bash "$LC_SCRIPTS/up.sh"

if [[ $REAL_NODE == 1 ]]; then
	lc_log "== 4/6 REAL_NODE=1: the image and chart pushed to a local registry, helm install on the real node"
	bash "$LC_SCRIPTS/chart-install.sh"
	lc_log "== 5/6 the chart's webhook configurations call its Service (self-signed certificate)"
else
	lc_log "== 4/6 starting the webhook as a local process, as the chart's ServiceAccount with the chart's RBAC"
	# Restart, so a re-run serves the binary just built.
	bash "$LC_SCRIPTS/webhook.sh" stop >/dev/null
	bash "$LC_SCRIPTS/webhook.sh" start

	lc_log "== 5/6 registering it (MutatingWebhookConfiguration by URL, CA from the cluster PKI)"
	bash "$LC_SCRIPTS/register-webhook.sh"
fi

lc_log "== 6/6 applying the sample Deployment $NS/$DEPLOY and waiting for Karpenter nodes"
lc_kubectl apply -f "$LC_SCRIPTS/sample-deployment.yaml" >/dev/null
lc_kubectl -n "$NS" rollout status "deployment/$DEPLOY" --timeout=300s >/dev/null
all_running() {
	local want
	want=$(lc_kubectl -n "$NS" get deployment "$DEPLOY" -o jsonpath='{.spec.replicas}')
	[[ $(lc_kubectl -n "$NS" get pods -l app=alpine -o json |
		jq '[.items[] | select(.metadata.deletionTimestamp == null and .status.phase == "Running")] | length') == "$want" ]]
}
LC_WAIT_SECONDS=300 lc_wait all_running
lc_log "all pods Running"
# Prices of the kwok instance types from a local stand-in for the AWS price APIs, read
# through the AWS SDK as on EKS: the report adds each term's cost and the saving.
bash "$LC_SCRIPTS/aws-prices.sh" start
echo
(
	# shellcheck source=/dev/null
	source "$LOCALCLUSTER_DIR/aws.env"
	"$WEBHOOK_BIN" spread --kubeconfig "$KUBECONFIG_FILE" -n "$NS" "deployment/$DEPLOY" --cost --no-price-cache
)
echo
# The webhook ran as the chart's ServiceAccount: was every request it made allowed?
bash "$LC_SCRIPTS/check-webhook-rbac.sh" >/dev/null
lc_log "every request of the webhook was allowed by the chart's RBAC (scripts/localcluster/check-webhook-rbac.sh)"
echo
if [[ $REAL_NODE == 1 ]]; then
	cat <<EOF
The cluster is still running, with the chart installed for real on node $REAL_NODE_NAME. To use it:
  export KUBECONFIG=$KUBECONFIG_FILE
  kubectl -n $WEBHOOK_NAMESPACE get pods -o wide
  kubectl -n $WEBHOOK_NAMESPACE logs deployment/$WEBHOOK_NAMESPACE
  kubectl -n $NS scale deployment $DEPLOY --replicas=30 && bin/custom-kube-scheduler-webhook spread -n $NS
Stop everything (processes, the real node, state): make demo-down
EOF
	exit 0
fi
cat <<EOF
The cluster is still running. To use it:
  export KUBECONFIG=$KUBECONFIG_FILE
  kubectl get nodes -L karpenter.sh/nodepool,karpenter.sh/capacity-type,nodesize
  kubectl -n $NS scale deployment $DEPLOY --replicas=30 && bin/custom-kube-scheduler-webhook spread -n $NS
  bin/custom-kube-scheduler-webhook plan --cluster -f $LC_SCRIPTS/sample-deployment.yaml --max-replicas 40
  source $LOCALCLUSTER_DIR/aws.env && bin/custom-kube-scheduler-webhook spread -n $NS --cost
  curl -s http://127.0.0.1:$WEBHOOK_METRICS_PORT/metrics | grep ^custom_kube_scheduler_webhook_placements_total
  curl -s http://127.0.0.1:$WEBHOOK_HEALTH_PORT/readyz
Webhook log: $LOGS/webhook.log
Stop everything (processes and state): make demo-down
EOF
