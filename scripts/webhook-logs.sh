#!/usr/bin/env bash
# Follow the logs of every webhook replica at once (JSON lines, prefixed with the pod).
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: scripts/webhook-logs.sh [options] [-- extra kubectl logs arguments]

  -n, --namespace NS   webhook namespace (default: custom-kube-scheduler-webhook)
  -l, --selector SEL   pod label selector
                       (default: app.kubernetes.io/name=custom-kube-scheduler-webhook)
      --since DURATION only newer lines, e.g. 10m (default: the last 100 lines per pod)
      --no-follow      print and exit instead of following
      --dry-run        print the kubectl command only
  -h, --help           this help

Pods that start later (a rollout) are not picked up by a running follow; run it again.
USAGE
}

namespace=custom-kube-scheduler-webhook
selector=app.kubernetes.io/name=custom-kube-scheduler-webhook
since=""
follow=true
dry_run=false
extra=()
while (($# > 0)); do
	case "$1" in
	-n | --namespace)
		namespace=${2:?$1 needs a value}
		shift 2
		;;
	-l | --selector)
		selector=${2:?$1 needs a value}
		shift 2
		;;
	--since)
		since=${2:?--since needs a value}
		shift 2
		;;
	--no-follow)
		follow=false
		shift
		;;
	--dry-run)
		dry_run=true
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	--)
		shift
		extra=("$@")
		break
		;;
	*)
		usage >&2
		exit 2
		;;
	esac
done

cmd=(kubectl logs --namespace "$namespace" --selector "$selector"
	--all-containers --prefix --timestamps --ignore-errors --max-log-requests 20)
if [[ -n $since ]]; then cmd+=(--since "$since"); else cmd+=(--tail 100); fi
if $follow; then cmd+=(--follow); fi
cmd+=("${extra[@]}")

if $dry_run; then
	echo "${cmd[*]}"
	exit 0
fi
exec "${cmd[@]}"
