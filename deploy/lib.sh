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
# `go install` of HELM_VERSION (a few minutes on a small machine), linked as Helm's
# releases are: without --kube-version, `helm template` assumes the Kubernetes version of
# its client-go (1.N for v0.N), not v1.20.0, so the chart renders as Argo CD and CI
# render it with a released helm.
ensure_helm() {
	if [[ -n ${HELM:-} ]]; then return 0; fi
	if command -v helm >/dev/null 2>&1; then
		HELM=$(command -v helm)
		return 0
	fi
	local dir=$TOOLS_BIN/helm-$HELM_VERSION minor gomod flags pkg
	if [[ ! -x $dir/helm ]]; then
		echo "installing helm $HELM_VERSION into $dir" >&2
		mkdir -p "$dir"
		gomod=$(cd "$dir" && GOFLAGS=-mod=mod go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | jq -r .GoMod)
		minor=$(awk '$1 == "k8s.io/client-go" { split($2, v, "."); print v[2]; exit }' "$gomod")
		flags=""
		for pkg in chartutil lint/rules; do
			flags+=" -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMinor=$minor"
		done
		(cd "$dir" && GOBIN=$dir go install -ldflags "$flags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
	fi
	HELM=$dir/helm
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
