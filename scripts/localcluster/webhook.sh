#!/usr/bin/env bash
# Run custom-kube-scheduler-webhook as a local background process against the
# local cluster, with the cluster PKI's serving cert for 127.0.0.1.
#   webhook.sh start   start `serve` (PID in pids/webhook.pid), wait until /readyz answers
#                      on its health port
#   webhook.sh stop    stop it by its recorded PID
# Env: WEBHOOK_BIN (default <repo>/bin/custom-kube-scheduler-webhook), LOG_LEVEL
# (default debug), BLOCKLISTED_NAMESPACE_LIST (default kube-system,kube-public),
# WEBHOOK_PORT (default 9443 + port offset; HTTPS), WEBHOOK_METRICS_PORT and
# WEBHOOK_HEALTH_PORT (default 8080 and 8081 + port offset; plain HTTP), WEBHOOK_KUBECONFIG (default the chart's
# ServiceAccount from webhook-rbac.sh: the webhook runs with the chart's RBAC, as
# deployed), SHUTDOWN_DRAIN (default 2s). Reviews are answered only at the path that
# carries the admission token kept in the Secret $ADMISSION_TOKEN_SECRET (lib.sh), which
# register-webhook.sh reads. Logs go to logs/webhook.log.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

WEBHOOK_BIN=${WEBHOOK_BIN:-$REPO_ROOT/bin/custom-kube-scheduler-webhook}

case ${1:-} in
start)
	[[ -s $KUBECONFIG_FILE ]] || lc_die "no cluster in $LOCALCLUSTER_DIR: run scripts/localcluster/up.sh"
	[[ -x $WEBHOOK_BIN ]] || lc_die "$WEBHOOK_BIN not built: run make build"
	if [[ -z ${WEBHOOK_KUBECONFIG:-} ]]; then
		WEBHOOK_KUBECONFIG=$LOCALCLUSTER_DIR/webhook-kubeconfig
		# A cluster started before webhook-rbac.sh existed, or a token that expired.
		if ! kubectl --kubeconfig "$WEBHOOK_KUBECONFIG" auth whoami >/dev/null 2>&1; then
			bash "$LC_SCRIPTS/webhook-rbac.sh"
		fi
	fi
	# The admission token's Secret, as the chart creates it (empty: the webhook fills
	# it in; it may only get and update it, by name).
	lc_kubectl create namespace "$WEBHOOK_NAMESPACE" --dry-run=client -o yaml |
		lc_kubectl apply --server-side --field-manager=localcluster -f - >/dev/null
	lc_kubectl -n "$WEBHOOK_NAMESPACE" create secret generic "$ADMISSION_TOKEN_SECRET" --dry-run=client -o yaml |
		lc_kubectl apply --server-side --field-manager=localcluster -f - >/dev/null
	if lc_pid_alive webhook; then
		lc_log "webhook already running (pid $(<"$PIDS/webhook.pid"))"
		exit 0
	fi
	lc_start webhook env \
		LOG_LEVEL="${LOG_LEVEL:-debug}" \
		BLOCKLISTED_NAMESPACE_LIST="${BLOCKLISTED_NAMESPACE_LIST:-kube-system,kube-public}" \
		LISTEN_ADDRESS="127.0.0.1:$WEBHOOK_PORT" \
		METRICS_ADDRESS="127.0.0.1:$WEBHOOK_METRICS_PORT" HEALTH_ADDRESS="127.0.0.1:$WEBHOOK_HEALTH_PORT" \
		TLS_CERT_FILE="$PKI/webhook.crt" TLS_KEY_FILE="$PKI/webhook.key" \
		KUBECONFIG="$WEBHOOK_KUBECONFIG" POD_NAMESPACE="$WEBHOOK_NAMESPACE" \
		SHUTDOWN_DRAIN="${SHUTDOWN_DRAIN:-2s}" ADMISSION_TOKEN_SECRET="$ADMISSION_TOKEN_SECRET" \
		"$WEBHOOK_BIN" serve
	# env execs the binary, so the recorded PID is the webhook's own.
	basename "$WEBHOOK_BIN" >"$PIDS/webhook.cmd"
	if ! lc_wait curl -sf "http://127.0.0.1:$WEBHOOK_HEALTH_PORT/readyz"; then
		tail -n 20 "$LOGS/webhook.log" >&2 || true
		curl -s "http://127.0.0.1:$WEBHOOK_HEALTH_PORT/readyz" >&2 || true
		lc_die "webhook not ready on http://127.0.0.1:$WEBHOOK_HEALTH_PORT/readyz; see $LOGS/webhook.log"
	fi
	lc_log "webhook serving on https://127.0.0.1:$WEBHOOK_PORT, metrics on http://127.0.0.1:$WEBHOOK_METRICS_PORT/metrics, probes on http://127.0.0.1:$WEBHOOK_HEALTH_PORT (pid $(<"$PIDS/webhook.pid"), log $LOGS/webhook.log)"
	;;
stop)
	lc_stop webhook
	;;
*)
	echo "usage: $0 start|stop" >&2
	exit 2
	;;
esac
