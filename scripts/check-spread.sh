#!/usr/bin/env bash
# Show how workloads with a CustomPodScheduleStrategy are spread over their terms
# (per workload: term, target, actual, pending), using the binary's `spread` subcommand.
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: scripts/check-spread.sh [--watch SECONDS] [spread arguments...]

Runs `custom-kube-scheduler-webhook spread` with the given arguments (e.g. -n NAMESPACE;
see `custom-kube-scheduler-webhook spread --help`). The kubeconfig is kubectl's
(KUBECONFIG or ~/.kube/config).

The binary is taken from $CUSTOM_KUBE_SCHEDULER_WEBHOOK_BIN, else ./bin/ of this
checkout (make build), else PATH, else `go run ./cmd/custom-kube-scheduler-webhook`.

  --watch SECONDS  repeat every SECONDS until interrupted
  -h, --help       this help
USAGE
}

watch_every=""
args=()
while (($# > 0)); do
	case "$1" in
	--watch)
		watch_every=${2:?--watch needs seconds}
		shift 2
		;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		args+=("$1")
		shift
		;;
	esac
done
if [[ -n $watch_every && ! $watch_every =~ ^[1-9][0-9]*$ ]]; then
	echo "check-spread.sh: --watch wants a whole number of seconds" >&2
	exit 2
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n ${CUSTOM_KUBE_SCHEDULER_WEBHOOK_BIN:-} ]]; then
	cmd=("$CUSTOM_KUBE_SCHEDULER_WEBHOOK_BIN")
elif [[ -x $repo/bin/custom-kube-scheduler-webhook ]]; then
	cmd=("$repo/bin/custom-kube-scheduler-webhook")
elif command -v custom-kube-scheduler-webhook >/dev/null 2>&1; then
	cmd=(custom-kube-scheduler-webhook)
else
	cmd=(go run "$repo/cmd/custom-kube-scheduler-webhook")
fi

if [[ -z $watch_every ]]; then
	exec "${cmd[@]}" spread "${args[@]}"
fi
while true; do
	printf '\n%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	"${cmd[@]}" spread "${args[@]}" || true
	sleep "$watch_every"
done
