#!/usr/bin/env bash
# Build (or reuse) the release tools, pinned by version, from their Go modules, into the
# same cache as the local cluster's binaries (one directory per version, never in the repo):
#   cosign           github.com/sigstore/cosign/v2/cmd/cosign        (COSIGN_VERSION)
#   cyclonedx-gomod  github.com/CycloneDX/cyclonedx-gomod/cmd/...    (CYCLONEDX_GOMOD_VERSION)
# Prints COSIGN=<path> and CYCLONEDX_GOMOD=<path> on stdout; progress goes to stderr.
# A directory appears only when its build succeeded, so an interrupted build is never taken
# for a cached one. Cold, cosign is the long one (minutes on 2 cores; see docs/signing.md).
#
#   scripts/image/tools.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/image/lib.sh
source "$here/lib.sh"
img_help "${BASH_SOURCE[0]}" "${1:-}"
lc_need_tools go

# tools_build NAME VERSION MODULE_PATH: go install MODULE_PATH@VERSION into
# $LOCALCLUSTER_CACHE/NAME-VERSION/, unless it is there already.
tools_build() {
	local name=$1 version=$2 pkg=$3 dir start
	dir=$LOCALCLUSTER_CACHE/$name-$version
	if [[ -x $dir/$name ]]; then
		img_log "cached: $dir/$name"
	else
		rm -rf "$dir.tmp"
		mkdir -p "$dir.tmp"
		start=$(date +%s)
		img_log "building $name $version from $pkg (cached afterwards)"
		if ! GOBIN=$dir.tmp go install -trimpath -ldflags "-s -w" "$pkg@$version" >"$dir.tmp/build.log" 2>&1; then
			tail -n 40 "$dir.tmp/build.log" >&2
			lc_die "building $name $version failed (full log: $dir.tmp/build.log)"
		fi
		rm -f "$dir.tmp/build.log"
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
		img_log "built $name $version in $(($(date +%s) - start))s -> $dir/$name"
	fi
	printf '%s=%s\n' "$4" "$dir/$name"
}

tools_build cosign "$COSIGN_VERSION" github.com/sigstore/cosign/v2/cmd/cosign COSIGN
tools_build cyclonedx-gomod "$CYCLONEDX_GOMOD_VERSION" github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod CYCLONEDX_GOMOD
