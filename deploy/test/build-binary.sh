#!/usr/bin/env bash
# Build the binary exactly as the Dockerfile does (its `go build` flags and package, with
# CGO_ENABLED=0, for each image platform), since no Docker engine runs here, and check
# the result: static, trimmed paths, stripped, the right architecture, runnable, and no
# package of it left out of the build context by .dockerignore.
#
#   deploy/test/build-binary.sh            # linux/amd64 and linux/arm64
#   ARCHES=amd64 deploy/test/build-binary.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=testlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
cd "$REPO_ROOT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The Dockerfile's build line: go build FLAGS -o OUTPUT PACKAGE
line=$(grep -E '^\s*go build ' Dockerfile | head -n1 | sed -E 's/^\s+//')
[[ -n $line ]] || {
	echo "no 'go build' line in Dockerfile" >&2
	exit 1
}
flags_text=$(sed -E 's/^go build (.*) -o [^ ]+ [^ ]+$/\1/' <<<"$line")
# The build args build_and_push.sh passes: the VERSION file, the commit and its date.
version=$(<VERSION)
revision=$(git rev-parse HEAD)
build_date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
# shellcheck disable=SC2016 # the Dockerfile's literal ${...}
flags_text=${flags_text//'${VERSION}'/$version}
# shellcheck disable=SC2016
flags_text=${flags_text//'${REVISION}'/$revision}
# shellcheck disable=SC2016
flags_text=${flags_text//'${BUILD_DATE}'/$build_date}
pkg=$(awk '{print $NF}' <<<"$line")
# xargs splits on blanks and honours the Dockerfile's double quotes, without eval.
mapfile -t flags < <(xargs -n1 <<<"$flags_text")
printf 'Dockerfile: go build'
printf ' %q' "${flags[@]}" "$pkg"
echo
if [[ ! -d $pkg ]]; then
	echo "skip: $pkg does not exist yet" >&2
	exit 0
fi

for arch in ${ARCHES:-amd64 arm64}; do
	out=$tmp/custom-kube-scheduler-webhook-linux-$arch
	if CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build "${flags[@]}" -o "$out" "$pkg"; then
		pass "go build linux/$arch"
	else
		fail "go build linux/$arch"
		continue
	fi
	info=$(go version -m "$out")
	check "linux/$arch: CGO_ENABLED=0 (static)" contains "$info" "CGO_ENABLED=0"
	check "linux/$arch: -trimpath" contains "$info" "-trimpath=true"
	# -trimpath keeps -ldflags out of the build info, so check their effect instead:
	# -s drops the symbol table, -w the DWARF sections.
	check_not "linux/$arch: stripped (-s)" go tool nm "$out"
	if command -v readelf >/dev/null 2>&1; then
		check_not "linux/$arch: no DWARF (-w)" grep -q '\.debug_' <<<"$(readelf -S -W "$out")"
	fi
	check "linux/$arch: GOARCH=$arch" contains "$info" "GOARCH=$arch"
	check_not "linux/$arch: no build-machine paths inside" grep -qF "$REPO_ROOT" "$out"
	size=$(wc -c <"$out")
	echo "     linux/$arch size: $((size / 1024 / 1024)) MiB"
	if [[ $(go env GOARCH) == "$arch" ]]; then
		check "linux/$arch: runs (--help)" "$out" --help
		check "linux/$arch: has serve" "$out" serve --help
		v=$("$out" --version 2>&1 || true)
		check "linux/$arch: --version says $version, the commit and its date" matches "$v" "$version.*${revision:0:12}.*$build_date"
	fi
done

# Every package the binary is built from must survive .dockerignore (a deny-list of
# top-level entries here).
mapfile -t ignored < <(grep -vE '^\s*(#|$)' .dockerignore | grep -vE '[*]' | sed 's:/$::')
module=$(go list -m)
mapfile -t dirs < <(go list -deps -f '{{if .Module}}{{if eq .Module.Path "'"$module"'"}}{{.ImportPath}}{{end}}{{end}}' "$pkg" | sed "s|^$module/\{0,1\}||" | sort -u)
lost=()
for d in "${dirs[@]}"; do
	top=${d%%/*}
	for ig in "${ignored[@]}"; do
		if [[ $top == "$ig" ]]; then lost+=("$d"); fi
	done
done
check ".dockerignore keeps all ${#dirs[@]} packages of the binary${lost:+ (lost: ${lost[*]})}" test ${#lost[@]} -eq 0

finish
