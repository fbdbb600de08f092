#!/usr/bin/env bash
# make bench: bring up a dedicated local cluster, run the benchmark of bench/ against
# it (two serve replicas behind a round-robin proxy against no webhook, an HTTPS
# load generator, memory, API calls per placed pod) and print its Markdown tables;
# the cluster is always torn down. Takes about 25 minutes on 2 cores.
# Env: BENCH_PORT_OFFSET (default 600), BENCH_CLUSTER_DIR (default
# <repo>/.localcluster/bench), BENCH_OUT (default <repo>/bin/bench.md), BENCH_TIMEOUT
# (default 60m), BENCH_WEBHOOK_BIN, and the benchmark's own settings: BENCH_RUNS,
# BENCH_SIZES, BENCH_LOAD_REQUESTS, BENCH_MEMORY_PODS, BENCH_SERVE_ENV, BENCH_SKIP, BENCH_POLICIES,
# BENCH_PROFILE_DIR
# (see bench/bench_test.go).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export LOCALCLUSTER_DIR=${BENCH_CLUSTER_DIR:-$repo/.localcluster/bench}
export LOCALCLUSTER_PORT_OFFSET=${BENCH_PORT_OFFSET:-600}
export BENCH_OUT=${BENCH_OUT:-$repo/bin/bench.md}
mkdir -p "$(dirname "$BENCH_OUT")"
rm -f "$BENCH_OUT"
cd "$repo"
rc=0
bash scripts/localcluster/with-cluster.sh \
	go test -tags bench -count=1 -v -timeout "${BENCH_TIMEOUT:-60m}" -run TestBench ./bench/ || rc=$?
[[ -n ${BENCH_CLUSTER_DIR:-} ]] || rmdir "$repo/.localcluster" 2>/dev/null || true
if [[ -s $BENCH_OUT ]]; then
	echo
	echo "===== $BENCH_OUT"
	cat "$BENCH_OUT"
fi
exit "$rc"
