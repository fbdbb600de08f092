#!/usr/bin/env bash
# Print the spread of one Deployment's pods over its strategy's terms:
# per term the target (from `custom-kube-scheduler-webhook plan`), the live pods,
# how many are Running on a node whose labels satisfy the pod's nodeSelector,
# and the nodes with their Karpenter NodePool and capacity type.
#   spread-report.sh NAMESPACE DEPLOYMENT
# Exits 1 when a term is off its target or a pod is not Running on a matching node.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

NS=${1:?usage: spread-report.sh NAMESPACE DEPLOYMENT}
DEPLOY=${2:?usage: spread-report.sh NAMESPACE DEPLOYMENT}
WEBHOOK_BIN=${WEBHOOK_BIN:-$REPO_ROOT/bin/custom-kube-scheduler-webhook}

dep=$(lc_kubectl -n "$NS" get deployment "$DEPLOY" -o json)
# The strategy may sit on the pod template or on the Deployment (alias spelling too).
strategy=$(jq -r '[.spec.template.metadata.annotations // {}, .metadata.annotations // {}]
	| map(.CustomPodScheduleStrategy // .["custom-pod-schedule-strategy"]) | map(select(. != null)) | .[0] // empty' <<<"$dep")
[[ -n $strategy ]] || lc_die "deployment $NS/$DEPLOY has no CustomPodScheduleStrategy annotation"
replicas=$(jq -r '.spec.replicas' <<<"$dep")
selector=$(jq -r '.spec.selector.matchLabels | to_entries | map("\(.key)=\(.value)") | join(",")' <<<"$dep")

# Large lists go through files: too big for command-line arguments.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$WEBHOOK_BIN" plan --strategy "$strategy" --replicas "$replicas" --output json >"$tmp/plan.json"
lc_kubectl -n "$NS" get pods -l "$selector" -o json >"$tmp/pods.json"
lc_kubectl get nodes -o json >"$tmp/nodes.json"

echo "Deployment $NS/$DEPLOY: $replicas replicas"
echo "Strategy:  $strategy"
echo
report=$(jq -n --slurpfile plan "$tmp/plan.json" --slurpfile pods "$tmp/pods.json" --slurpfile nodes "$tmp/nodes.json" '
	$plan[0] as $plan | $pods[0] as $pods | $nodes[0] as $nodes
	| ($nodes.items | map({key: .metadata.name, value: .metadata.labels}) | from_entries) as $nl
	| [$pods.items[] | select(.metadata.deletionTimestamp == null)] as $live
	# A pod is on a matching node when every nodeSelector pair is a label of its node.
	| def placed: .spec.nodeName as $n | .status.phase == "Running" and $n != null and $nl[$n] != null
		and ((.spec.nodeSelector // {}) | to_entries | all(. as $e | $nl[$n][$e.key] == $e.value));
	def termof: (.metadata.annotations // {})["custom-kube-scheduler-webhook.io/term"] // "none";
	[ $plan.terms | to_entries[] | (.key + 1 | tostring) as $t | .value as $term
		| [$live[] | select(termof == $t)] as $tp
		| { term: $t,
			labels: ($term.labels | to_entries | map("\(.key)=\(.value)") | join(",")),
			base: $term.base, weight: $term.weight, target: $term.count,
			pods: ($tp | length), ok: ([$tp[] | select(placed)] | length),
			nodes: ($tp | map(.spec.nodeName // "<unscheduled>") | group_by(.)
				| map("\(.[0]) [\($nl[.[0]]["karpenter.sh/nodepool"] // "-")/\($nl[.[0]]["karpenter.sh/capacity-type"] // "-")] x\(length)")
				| join(", ")) } ]
	+ [ [$live[] | select(termof == "none")] as $tp | select(($tp | length) > 0)
		| { term: "-", labels: "(not mutated: no term annotation)", base: "-", weight: "-", target: 0,
			pods: ($tp | length), ok: ([$tp[] | select(placed)] | length),
			nodes: ($tp | map(.spec.nodeName // "<unscheduled>") | unique | join(", ")) } ]')

# align: tab-separated columns padded to their widest cell (no dependency on column(1)).
align() {
	awk -F '\t' '
		{ for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } nf[NR] = NF }
		END { for (r = 1; r <= NR; r++) { line = ""
			for (i = 1; i <= nf[r]; i++) line = line (i < nf[r] ? sprintf("%-" w[i] "s  ", cell[r, i]) : cell[r, i])
			print line } }'
}

{
	printf 'TERM\tLABELS\tBASE\tWEIGHT\tTARGET\tPODS\tRUNNING-ON-MATCHING-NODE\tNODES [nodepool/capacity-type] x pods\n'
	jq -r '.[] | [.term, .labels, .base, .weight, .target, .pods, .ok, .nodes] | @tsv' <<<"$report"
} | align
echo

# Every pod, by seat, when there are few enough to read.
if (($(jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length' "$tmp/pods.json") <= ${SPREAD_REPORT_MAX_PODS:-30})); then
	{
		printf 'SEAT\tTERM\tPOD\tPHASE\tNODE\tNODEPOOL\tCAPACITY-TYPE\n'
		jq -r --slurpfile nodes "$tmp/nodes.json" '
			($nodes[0].items | map({key: .metadata.name, value: .metadata.labels}) | from_entries) as $nl
			| [.items[] | select(.metadata.deletionTimestamp == null)]
			| sort_by((.metadata.annotations // {})["custom-kube-scheduler-webhook.io/seat"] // "0" | tonumber)[]
			| (.metadata.annotations // {}) as $a | ($nl[.spec.nodeName // ""] // {}) as $l
			| [$a["custom-kube-scheduler-webhook.io/seat"] // "-", $a["custom-kube-scheduler-webhook.io/term"] // "-",
				.metadata.name, .status.phase, .spec.nodeName // "<unscheduled>",
				$l["karpenter.sh/nodepool"] // "-", $l["karpenter.sh/capacity-type"] // "-"] | @tsv' "$tmp/pods.json"
	} | align
	echo
fi
if jq -e 'all(.[]; .pods == .target and .ok == .pods)' <<<"$report" >/dev/null; then
	echo "OK: every term holds exactly its target ($(jq -r 'map(.target) | join(" / ")' <<<"$report")), all pods Running on matching nodes"
else
	echo "MISMATCH: targets $(jq -r 'map(.target) | join(" / ")' <<<"$report"), pods $(jq -r 'map(.pods) | join(" / ")' <<<"$report")"
	exit 1
fi
