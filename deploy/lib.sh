#!/usr/bin/env bash
# Shared helpers for deploy/ scripts; source it, do not run it.
# shellcheck shell=bash

# Pinned helm version; installed from the Go module proxy into the user cache when it is
# not on PATH (never into the repo).
HELM_VERSION=${HELM_VERSION:-v3.22.0}
# Kubernetes version the chart is rendered for (helm's own default depends on how helm was
# built; pinning it keeps the rendered manifests reproducible).
RENDER_KUBE_VERSION=${RENDER_KUBE_VERSION:-1.33.0}
# shellcheck disable=SC2034 # used by the scripts that source this file
CHART_NAME=custom-kube-scheduler-webhook
DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034
REPO_ROOT=$(cd "$DEPLOY_DIR/.." && pwd)
CHART_DIR=$DEPLOY_DIR/chart/$CHART_NAME
TOOLS_BIN=${TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/custom-kube-scheduler-webhook/bin}

# ensure_helm sets HELM to a helm binary: $HELM, helm on PATH, the cached one, or a fresh
# `go install` of HELM_VERSION (a few minutes on a small machine).
ensure_helm() {
	if [[ -n ${HELM:-} ]]; then return 0; fi
	if command -v helm >/dev/null 2>&1; then
		HELM=$(command -v helm)
		return 0
	fi
	if [[ ! -x $TOOLS_BIN/helm ]]; then
		echo "installing helm $HELM_VERSION into $TOOLS_BIN" >&2
		mkdir -p "$TOOLS_BIN"
		(cd "$TOOLS_BIN" && GOBIN=$TOOLS_BIN go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
	fi
	HELM=$TOOLS_BIN/helm
}

# The chart requires image.repository (no public image is published). Renders that are not
# an install (the plain manifests, the deploy tests) use this placeholder: an invalid
# reference on purpose, so a manifest applied without replacing it fails visibly
# (InvalidImageName) instead of pulling someone else's image.
RENDER_IMAGE_REPOSITORY=${RENDER_IMAGE_REPOSITORY:-REGISTRY/custom-kube-scheduler-webhook}

# helm_template RELEASE NAMESPACE [helm args...] renders the chart to stdout, with
# image.repository=$RENDER_IMAGE_REPOSITORY unless the args set another (it comes first as
# a values file, so both a later -f and a --set win over it).
helm_template() {
	local release=$1 namespace=$2
	shift 2
	"$HELM" template "$release" "$CHART_DIR" --namespace "$namespace" \
		--kube-version "$RENDER_KUBE_VERSION" \
		--values <(printf 'image:\n  repository: %s\n' "$RENDER_IMAGE_REPOSITORY") "$@"
}

# helm_lint [helm args...] runs helm lint --strict on the chart with the same placeholder
# image.repository as helm_template.
helm_lint() {
	"$HELM" lint --strict --kube-version "$RENDER_KUBE_VERSION" \
		--values <(printf 'image:\n  repository: %s\n' "$RENDER_IMAGE_REPOSITORY") "$@" "$CHART_DIR"
}
