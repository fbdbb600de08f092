#!/usr/bin/env bash
# make scale: bring up a dedicated local cluster, create many strategy Deployments on it
# (SCALE_WORKLOADS x SCALE_REPLICAS pods, default 200 x 100 = 20,000; nodes from
# Karpenter's kwok provider), measure each of the two serve replicas (bench/scale_test.go,
# TestScale) and print a Markdown table; the cluster is always torn down.
# Env: SCALE_PORT_OFFSET (default 800), SCALE_CLUSTER_DIR (default
# <repo>/.localcluster/scale), SCALE_OUT (default <repo>/bin/scale.md), SCALE_TIMEOUT
# (go test's timeout, default 120m), SCALE_WEBHOOK_BIN (default: built by the test),
# SCALE_WORKLOADS, SCALE_REPLICAS, SCALE_SERVE_ENV and the test's other settings
# (see bench/scale_test.go).
# SCALE_MODE=placed measures the replicas with SCALE_PLACED_PODS (default 100,000) pods
# created placed, bound to kwok nodes, without Deployments, Karpenter or admissions
# (bench/scale_placed_test.go, TestScalePlaced): kube-controller-manager, Karpenter, the
# scheduler and kwok are stopped first (their controllers would act on pods they did not
# create; kwok would write each pod's status), so the pods stay Pending.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export LOCALCLUSTER_DIR=${SCALE_CLUSTER_DIR:-$repo/.localcluster/scale}
export LOCALCLUSTER_PORT_OFFSET=${SCALE_PORT_OFFSET:-800}
export SCALE_OUT=${SCALE_OUT:-$repo/bin/scale.md}
export SCALE_WORKLOADS=${SCALE_WORKLOADS:-200}
export SCALE_REPLICAS=${SCALE_REPLICAS:-100}
mode=${SCALE_MODE:-deployments}
case $mode in
deployments) test=TestScale ;;
placed)
	test=TestScalePlaced
	export SCALE_PLACED_PODS=${SCALE_PLACED_PODS:-100000}
	;;
*)
	echo "SCALE_MODE must be deployments or placed (got '$mode')" >&2
	exit 2
	;;
esac
mkdir -p "$(dirname "$SCALE_OUT")"
rm -f "$SCALE_OUT"
cd "$repo"
if [[ $mode == placed ]]; then
	echo "make scale: $SCALE_PLACED_PODS placed pods, $SCALE_REPLICAS per ReplicaSet, on a cluster in $LOCALCLUSTER_DIR (port offset $LOCALCLUSTER_PORT_OFFSET), $(nproc) CPUs"
else
	echo "make scale: $SCALE_WORKLOADS Deployments x $SCALE_REPLICAS pods on a cluster in $LOCALCLUSTER_DIR (port offset $LOCALCLUSTER_PORT_OFFSET), $(nproc) CPUs"
fi
start=$SECONDS
rc=0
run=(go test -tags bench -count=1 -v -timeout "${SCALE_TIMEOUT:-120m}" -run "^$test\$" ./bench/)
if [[ $mode == placed ]]; then
	# shellcheck disable=SC2016 # expanded by the inner shell, inside the cluster's environment
	run=(bash -c 'source scripts/localcluster/lib.sh && for c in kube-controller-manager karpenter kube-scheduler kwok; do lc_stop "$c"; done && exec "$@"' _ "${run[@]}")
fi
bash scripts/localcluster/with-cluster.sh "${run[@]}" || rc=$?
[[ -n ${SCALE_CLUSTER_DIR:-} ]] || rmdir "$repo/.localcluster" 2>/dev/null || true
if [[ -s $SCALE_OUT ]]; then
	echo
	echo "===== $SCALE_OUT"
	cat "$SCALE_OUT"
fi
echo "make scale: $((SECONDS - start)) s, exit status $rc"
exit "$rc"
