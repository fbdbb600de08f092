#!/usr/bin/env bash
# Assertion helpers for deploy/test scripts; source it.
# shellcheck shell=bash

FAILURES=0
CHECKS=0

pass() {
	CHECKS=$((CHECKS + 1))
	echo "ok   $*"
}
fail() {
	CHECKS=$((CHECKS + 1))
	FAILURES=$((FAILURES + 1))
	echo "FAIL $*" >&2
}

# check DESCRIPTION COMMAND...: passes when the command succeeds.
check() {
	local what=$1
	shift
	if "$@" >/dev/null 2>&1; then pass "$what"; else fail "$what"; fi
}

# check_not DESCRIPTION COMMAND...: passes when the command fails.
check_not() {
	local what=$1
	shift
	if "$@" >/dev/null 2>&1; then fail "$what"; else pass "$what"; fi
}

# contains TEXT FIXED-STRING
contains() { grep -qF -- "$2" <<<"$1"; }
# matches TEXT EXTENDED-REGEX
matches() { grep -qE -- "$2" <<<"$1"; }

# docs KIND [NAME] < multi-document YAML: prints the documents of that top-level kind
# (and metadata name), separated by ---.
docs() {
	awk -v kind="$1" -v name="${2:-}" '
    function flush() {
      if (doc != "" && k == kind && (name == "" || n == name)) printf "---\n%s", doc
      doc = ""; k = ""; n = ""; inmeta = 0
    }
    /^---/ { flush(); next }
    {
      doc = doc $0 "\n"
      if ($0 ~ /^kind: /) { k = substr($0, 7) }
      if ($0 ~ /^metadata:/) { inmeta = 1; next }
      if (inmeta && $0 ~ /^  name: / && n == "") { n = substr($0, 9) }
      if ($0 ~ /^[^ #]/) { inmeta = 0 }
    }
    END { flush() }'
}

# without_groups REGEX < YAML: drops the documents whose apiVersion matches REGEX.
without_groups() {
	awk -v re="$1" '
    function flush() { if (doc != "" && !drop) printf "---\n%s", doc; doc = ""; drop = 0 }
    /^---/ { flush(); next }
    { doc = doc $0 "\n"; if ($0 ~ "^apiVersion: " && $0 ~ re) drop = 1 }
    END { flush() }'
}

# count_docs < YAML: number of non-empty documents.
count_docs() { grep -c '^kind: ' || true; }

# release_leftovers NAMESPACE FULLNAME prints what is left of a Helm release of the chart
# (KUBECONFIG's cluster): objects in its namespace but the ones every namespace has, and
# the cluster-wide objects named after it.
release_leftovers() {
	{
		kubectl -n "$1" get leases,secrets,configmaps,services,deployments,replicasets,pods,serviceaccounts,roles,rolebindings -o name |
			grep -v -e '^configmap/kube-root-ca.crt$' -e '^serviceaccount/default$' || true
		kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations,clusterroles,clusterrolebindings,priorityclasses -o name |
			grep -F "$2" || true
	} | sort
}
# release_gone NAMESPACE FULLNAME: nothing of the release is left.
release_gone() { [[ -z $(release_leftovers "$@") ]]; }

finish() {
	echo
	if ((FAILURES > 0)); then
		echo "$FAILURES of $CHECKS checks failed" >&2
		exit 1
	fi
	echo "all $CHECKS checks passed"
}

# wait_until SECONDS COMMAND...: run COMMAND once a second until it succeeds.
wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 1
	done
}
