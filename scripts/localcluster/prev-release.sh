#!/usr/bin/env bash
# The previous release, for make test-install's upgrade and rollback: its image and its
# chart, built from its commit with that commit's own build_and_push.sh (buildah, the
# stand-in bases of scripts/image/bases.sh, this machine's platform), pushed to a local
# registry as `build_and_push.sh --chart` pushes a release: the image under its version
# and commit tags, the chart at its version naming that image.
#
# The image is kept in the binary cache (an OCI archive per commit, platform and Go
# version), so only the first run builds it (a few minutes); later runs copy it to the
# registry and package the chart from the commit again (seconds).
#
# Usage: prev-release.sh COMMIT VERSION REGISTRY_PATH
#        prev-release.sh --check COMMIT VERSION   (only the checks of COMMIT, at once)
#   COMMIT         the previous release's commit (must be in this clone: not shallow)
#   VERSION        the version its VERSION file must say (checked)
#   REGISTRY_PATH  HOST:PORT/PATH of a plain-HTTP registry (the image goes to
#                  REGISTRY_PATH/custom-kube-scheduler-webhook, the chart to
#                  oci://REGISTRY_PATH/charts)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/image/lib.sh
source "$here/../image/lib.sh"
# shellcheck source=deploy/lib.sh
source "$REPO_ROOT/deploy/lib.sh"
cd "$REPO_ROOT"

check_only=false
if [[ ${1:-} == --check ]]; then
	check_only=true
	shift
	set -- "$@" ""
fi
(($# == 3)) || lc_die "usage: $0 [--check] COMMIT VERSION REGISTRY_PATH"
commit=$1 version=$2 path=$3
image=$path/$CHART_NAME

# The commit must be in this clone. A shallow clone (CI checkouts fetch one commit by
# default) lacks it: say so, and how to fetch it, rather than fail somewhere later.
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
	if [[ $(git rev-parse --is-shallow-repository 2>/dev/null) == true ]]; then
		lc_die "the previous release's commit $commit ($version) is not in this clone, which is shallow: fetch the history (git fetch --unshallow, or actions/checkout with fetch-depth: 0) to test the upgrade from it"
	fi
	lc_die "the previous release's commit $commit ($version) is not in this clone (git cat-file -e $commit failed): fetch it (git fetch origin $commit)"
fi
commit=$(git rev-parse "$commit^{commit}")
have=$(git show "$commit:VERSION" 2>/dev/null | tr -d '[:space:]') || true
[[ $have == "$version" ]] || lc_die "commit $commit says VERSION ${have:-(none)}, not $version: the pinned previous release is wrong"
if $check_only; then
	exit 0
fi

img_ensure_tools
ensure_helm
export HELM # the release's build_and_push.sh runs ${HELM:-helm}
arch=$(go env GOARCH)
cache=$LOCALCLUSTER_CACHE/prev-release/${commit:0:12}-linux-$arch-$(go env GOVERSION)
work=$(mktemp -d "${TMPDIR:-/tmp}/cksw-prev-release.XXXXXX")
trap 'buildah rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

if [[ ! -s $cache/image.tar ]]; then
	lc_log "building $version from $commit with its own build_and_push.sh (cached afterwards in $cache)"
	# A clone of this repository's objects (no copy of them), checked out at the commit:
	# its build_and_push.sh needs a git checkout, and this tree stays untouched.
	git clone -q --shared --no-checkout "$REPO_ROOT" "$work/src"
	git -C "$work/src" -c advice.detachedHead=false checkout -q "$commit"
	img_private_store "$work"
	img_share_go_caches "$TMPDIR"
	bases=$(bash "$REPO_ROOT/scripts/image/bases.sh")
	if ! (cd "$work/src" && ./build_and_push.sh --engine buildah --registry "$path" --tls-verify=false \
		--version "$version" --platforms "linux/$arch" \
		--builder-image "$(sed -n 's/^BUILDER_IMAGE=//p' <<<"$bases")" \
		--runtime-image "$(sed -n 's/^RUNTIME_IMAGE=//p' <<<"$bases")" \
		--chart) >"$work/push.log" 2>&1; then
		cat "$work/push.log" >&2
		lc_die "$commit's build_and_push.sh failed (its output is above)"
	fi
	mkdir -p "$cache.tmp"
	skopeo copy -q --all --src-tls-verify=false "docker://$image:$version" "oci-archive:$cache.tmp/image.tar"
	rm -rf "$cache" && mv "$cache.tmp" "$cache"
	lc_log "pushed $image:$version and oci://$path/charts/$CHART_NAME:$version (built)"
	exit 0
fi

# From the cache: the image, under the tags the release's build_and_push.sh gives it, and
# the chart packaged from the commit as that script packages it (image.repository set
# to the pushed image).
for tag in "$version" "${commit:0:12}"; do
	skopeo copy -q --all --dest-tls-verify=false "oci-archive:$cache/image.tar" "docker://$image:$tag"
done
mkdir -p "$work/chart"
git archive "$commit" "deploy/chart/$CHART_NAME" | tar -x -C "$work/chart"
chart_dir=$work/chart/deploy/chart/$CHART_NAME
sed -i -E "s|^(  repository:) \"\"$|\1 \"$image\"|" "$chart_dir/values.yaml"
grep -qF "repository: \"$image\"" "$chart_dir/values.yaml" || lc_die "could not set image.repository in $commit's chart"
"$HELM" package "$chart_dir" --version "$version" --app-version "$version" --destination "$work" >/dev/null
"$HELM" push "$work/$CHART_NAME-$version.tgz" "oci://$path/charts" --plain-http >/dev/null 2>&1 ||
	lc_die "helm push of $commit's chart to oci://$path/charts failed"
lc_log "pushed $image:$version and oci://$path/charts/$CHART_NAME:$version (image from $cache)"
