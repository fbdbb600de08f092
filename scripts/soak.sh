#!/usr/bin/env bash
# make soak DURATION=30m: bring up a dedicated local cluster and run the churn soak
# (e2e's TestSoak: random operations on 5 Deployments and a StatefulSet behind two
# webhook replicas, with an invariant checker at every quiescent point) for DURATION,
# then print its summary; the cluster is always torn down. Exit status 1 on any violation.
# Env: DURATION or SOAK_DURATION (default 10m), SOAK_SEED, SOAK_OPS (default all:
# scale,flap,restart,delete,annotate,block,kill), SOAK_SETTLE_TIMEOUT, SOAK_PENDING_MAX,
# SOAK_RSS_TOLERANCE, SOAK_API_LATENCY (e.g. 1s-3s: every Lease write of the webhook
# replicas held back that long by a proxy in front of the API server; see
# e2e/soak_test.go), SOAK_PORT_OFFSET (default 700),
# SOAK_CLUSTER_DIR (default <repo>/.localcluster/soak), SOAK_TIMEOUT (go test
# -timeout, default 3h), E2E_WEBHOOK_BIN.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export LOCALCLUSTER_DIR=${SOAK_CLUSTER_DIR:-$repo/.localcluster/soak}
export LOCALCLUSTER_PORT_OFFSET=${SOAK_PORT_OFFSET:-700}
export SOAK_DURATION=${DURATION:-${SOAK_DURATION:-10m}}
cd "$repo"
rc=0
bash scripts/localcluster/with-cluster.sh \
	go test -tags e2e -count=1 -v -timeout "${SOAK_TIMEOUT:-3h}" -run '^TestSoak$' ./e2e/ || rc=$?
[[ -n ${SOAK_CLUSTER_DIR:-} ]] || rmdir "$repo/.localcluster" 2>/dev/null || true
exit "$rc"
