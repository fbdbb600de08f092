#!/usr/bin/env bash
# with-cluster.sh CMD [ARGS...]: bring up a dedicated local cluster, run CMD against
# it (LOCALCLUSTER_DIR and KUBECONFIG exported), and always tear the cluster down,
# also on failure or interrupt; on failure the tail of every component log is
# printed first. CMD's exit status is the script's.
# Env: LOCALCLUSTER_DIR (required: the cluster's own state dir),
# LOCALCLUSTER_PORT_OFFSET (a multiple of 10 not used by another cluster).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[[ -n ${LOCALCLUSTER_DIR:-} ]] || {
	echo "error: LOCALCLUSTER_DIR must be set" >&2
	exit 2
}
(($# > 0)) || {
	echo "usage: $0 CMD [ARGS...]" >&2
	exit 2
}
export LOCALCLUSTER_DIR
export KUBECONFIG=$LOCALCLUSTER_DIR/kubeconfig

teardown() {
	local rc=$? f
	trap - EXIT INT TERM
	if ((rc != 0)); then
		for f in "$LOCALCLUSTER_DIR"/logs/*.log; do
			[[ -s $f ]] || continue
			echo "===== tail of $f" >&2
			tail -n 30 "$f" >&2
		done
	fi
	bash "$here/down.sh" || true
	exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

bash "$here/build.sh"
bash "$here/up.sh"
"$@"
