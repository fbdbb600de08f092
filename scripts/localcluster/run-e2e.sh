#!/usr/bin/env bash
# Bring up a dedicated local cluster, run every test that needs a real cluster against
# it (the Go end-to-end tests of e2e/, then the check of every request the webhook made
# against the chart's RBAC (check-webhook-rbac.sh), the API-server tests of karpenter/, webhook/ and report/,
# the registry tests of imagearch/ (Debian's docker-registry, scripts/image/ecrlocal),
# and deploy/test/cluster.sh), and always tear it down, also on failure or interrupt.
# The e2e cluster has its own state dir and port offset, so it can run beside a
# demo cluster. On failure the tail of every component log is printed first.
# Env: E2E_CLUSTER_DIR (default <repo>/.localcluster/e2e), E2E_PORT_OFFSET (100),
# E2E_TIMEOUT (go test -timeout, default 45m), E2E_RUN (go test -run), E2E_WEBHOOK_BIN,
# E2E_KEEP=1 (keep test namespaces), E2E_KARPENTER_ONLY=1 (after the Go e2e tests, only
# the API-server tests of karpenter/: what depends on Karpenter's version, for
# test-karpenter-range).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export LOCALCLUSTER_DIR=${E2E_CLUSTER_DIR:-$repo/.localcluster/e2e}
export LOCALCLUSTER_PORT_OFFSET=${E2E_PORT_OFFSET:-100}

dump_logs() {
	local f
	for f in "$LOCALCLUSTER_DIR"/logs/*.log; do
		[[ -s $f ]] || continue
		echo "===== tail of $f"
		tail -n 30 "$f"
	done
}
# The suite's output, kept to name its failed tests last: after the component logs, where
# the tail of a CI log shows them.
e2e_out=$(mktemp)
teardown() {
	local rc=$?
	trap - EXIT INT TERM
	if ((rc != 0)); then
		dump_logs >&2 || true
	fi
	bash "$here/down.sh" || true
	if ((rc != 0)) && grep -qE '^[[:space:]]*--- FAIL|^panic:' "$e2e_out"; then
		echo "===== failed e2e tests" >&2
		# A timeout's panic is followed by the tests it interrupted.
		grep -E '^[[:space:]]*--- FAIL' "$e2e_out" >&2 || true
		grep -E -A2 '^panic:' "$e2e_out" >&2 || true
	fi
	rm -f "$e2e_out"
	# The default e2e dir is nested in .localcluster: drop the parent too once empty.
	[[ -n ${E2E_CLUSTER_DIR:-} ]] || rmdir "$repo/.localcluster" 2>/dev/null || true
	exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

bash "$here/build.sh"
# Debian's docker-registry and htpasswd: the registries of the image architecture tests.
# shellcheck disable=SC2016 # expanded by the inner bash
bash -c 'source "$1/lib.sh" && lc_ensure_packages docker-registry:docker-registry htpasswd:apache2-utils' _ "$here"
bash "$here/up.sh"

args=(-tags e2e -count=1 -v -timeout "${E2E_TIMEOUT:-45m}")
[[ -n ${E2E_RUN:-} ]] && args+=(-run "$E2E_RUN")
cd "$repo"
e2e_rc=0
go test "${args[@]}" ./e2e/ 2>&1 | tee "$e2e_out" || e2e_rc=$?
# Every request the webhook made during the suite, held against the chart's RBAC; also
# after a failed suite (a missing permission is often why it failed).
bash "$here/check-webhook-rbac.sh"
((e2e_rc == 0)) || exit "$e2e_rc"
# The packages' own API-server tests, and imagearch's registry tests (their unit tests
# already ran in test-unit).
if [[ -n ${E2E_KARPENTER_ONLY:-} ]]; then
	KUBECONFIG=$LOCALCLUSTER_DIR/kubeconfig go test "${args[@]}" -run 'TestE2E|OnAPIServer' ./karpenter/
	exit 0
fi
KUBECONFIG=$LOCALCLUSTER_DIR/kubeconfig go test "${args[@]}" -run 'TestE2E|OnAPIServer' ./karpenter/ ./ledger/ ./report/ ./imagearch/
KUBECONFIG=$LOCALCLUSTER_DIR/kubeconfig bash deploy/test/cluster.sh
