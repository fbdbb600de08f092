#!/usr/bin/env bash
# Check every request the webhook made against the chart's RBAC. The API server's audit
# log (up.sh: Metadata level, the webhook ServiceAccount only) lists each request's verb,
# resource, subresource, namespace and name; this asks the API server, with one
# SubjectAccessReview per distinct request (the check `kubectl auth can-i --as` makes),
# whether the ServiceAccount may make it, and fails when
#   - any request was answered 403 Forbidden (other than for creating in a namespace being
#     deleted), or
#   - any request is not allowed by the RBAC now in the cluster (the chart's, applied by
#     webhook-rbac.sh), or
#   - the log holds no request at all (the webhook did not run as its ServiceAccount).
# Run it after the webhook has done its work (run-e2e.sh runs it after the e2e suite).
# Env: LOCALCLUSTER_DIR, AUDIT_LOG (default $LOCALCLUSTER_DIR/logs/audit.jsonl; not *.log, so
# run-e2e.sh does not print its tail among the component logs on failure).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

AUDIT_LOG=${AUDIT_LOG:-$LOGS/audit.jsonl}
[[ -s $AUDIT_LOG ]] || lc_die "no request of the webhook in $AUDIT_LOG: did it run with $LOCALCLUSTER_DIR/webhook-kubeconfig?"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

jq -c 'select(.stage == "ResponseComplete" or .stage == "Panic")' "$AUDIT_LOG" >"$tmp/events"
total=$(wc -l <"$tmp/events")
user=$(jq -r '.user.username' "$tmp/events" | sort -u)
[[ $(wc -l <<<"$user") == 1 ]] || lc_die "the audit log holds requests of several users: $user"

status=0
# A 403 for creating in a namespace being deleted (an Event of a test's last pods) is the
# namespace lifecycle's refusal, not RBAC's: the SubjectAccessReviews below still check
# that request's rights.
forbidden=$(jq -r 'select(.responseStatus.code == 403) |
	select((.responseStatus.message // "") | test("because it is being terminated$") | not) |
	"\(.verb) \(.requestURI) -> 403 \(.responseStatus.message // "" | .[0:160])"' "$tmp/events" | sort | uniq -c)
if [[ -n $forbidden ]]; then
	echo "FAIL requests of $user answered 403 Forbidden:" >&2
	echo "$forbidden" >&2
	status=1
fi

# sars KEY-FILTER: one SubjectAccessReview per distinct request, keyed without or with
# the object's name (a name-less grant covers every name; a rule with resourceNames
# needs the name).
sars() {
	jq -s --arg with_name "$1" '
		map({user: .user.username, groups: .user.groups,
			attrs: (if .objectRef then
				{resourceAttributes: ({verb, group: (.objectRef.apiGroup // ""), resource: .objectRef.resource,
					subresource: (.objectRef.subresource // ""), namespace: (.objectRef.namespace // "")}
					+ (if $with_name == "yes" then {name: (.objectRef.name // "")} else {} end))}
			else {nonResourceAttributes: {verb, path: (.requestURI | sub("\\?.*$"; ""))}} end)})
		| unique_by(.attrs)
		| {apiVersion: "v1", kind: "List", items: map({apiVersion: "authorization.k8s.io/v1",
			kind: "SubjectAccessReview", spec: ({user, groups} + .attrs)})}'
}
# review FILE: create the reviews; print the denied ones, one per line.
review() {
	lc_kubectl create -f "$1" -o json |
		jq -c '(if .kind == "List" then .items else [.] end)[] | select(.status.allowed != true) | .spec'
}

sars no <"$tmp/events" >"$tmp/sars.json"
distinct=$(jq '.items | length' "$tmp/sars.json")
review "$tmp/sars.json" >"$tmp/denied"
if [[ -s $tmp/denied ]]; then
	# Denied without a name: ask again with the names the requests used.
	jq -c --slurpfile d "$tmp/denied" '
		select(.objectRef) as $e
		| select(any($d[].resourceAttributes // empty; .verb == $e.verb and .resource == $e.objectRef.resource
			and (.group // "") == ($e.objectRef.apiGroup // "")
			and (.subresource // "") == ($e.objectRef.subresource // "")
			and (.namespace // "") == ($e.objectRef.namespace // "")))' "$tmp/events" >"$tmp/named-events"
	jq -c '.nonResourceAttributes // empty' "$tmp/denied" >"$tmp/denied-nonresource"
	: >"$tmp/denied-named"
	if [[ -s $tmp/named-events ]]; then
		sars yes <"$tmp/named-events" >"$tmp/named.json"
		review "$tmp/named.json" >"$tmp/denied-named"
	fi
	if [[ -s $tmp/denied-named || -s $tmp/denied-nonresource ]]; then
		echo "FAIL requests of $user that the chart's RBAC does not allow:" >&2
		jq -r '.resourceAttributes // empty | "\(.verb) \(if (.group // "") == "" then "" else .group + "/" end)\(.resource)\(if (.subresource // "") == "" then "" else "/" + .subresource end) namespace=\(.namespace // "(cluster)") name=\(.name // "")"' "$tmp/denied-named" | sort -u >&2
		jq -r '"\(.verb) \(.path) (non-resource)"' "$tmp/denied-nonresource" >&2
		status=1
	fi
fi
if ((status == 0)); then
	lc_log "RBAC check: $total requests of $user ($distinct distinct verb/resource/namespace) all allowed by the chart's RBAC; none Forbidden"
	jq -r '.items[].spec | (.resourceAttributes // empty | "  \(.verb) \(if .group == "" then "" else .group + "/" end)\(.resource)\(if .subresource == "" then "" else "/" + .subresource end) in \(if .namespace == "" then "(all namespaces or cluster)" else "a namespace" end)"), (.nonResourceAttributes // empty | "  \(.verb) \(.path)")' "$tmp/sars.json" | sort | uniq -c
fi
exit "$status"
