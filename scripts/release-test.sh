#!/usr/bin/env bash
# Test scripts/release.sh on a throwaway copy of the working tree (a git repository of its
# own under a temporary directory, removed at the end): it releases the next minor version
# and checks CHANGELOG.md, VERSION, Chart.yaml, deploy/manifests, the install commands and
# the printed release notes; then that it refuses an empty [Unreleased], local changes, a
# version not above the current one, and a malformed version. The repository is never touched.
#
#   scripts/release-test.sh        (make test-deploy runs it)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=deploy/test/testlib.sh
source "$repo/deploy/test/testlib.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/cksw-release-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
copy=$work/repo
mkdir -p "$copy"
# The working tree as it is (tracked and new files), committed in a repository of its own.
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
	tar --null -T - -cf -) | tar -xf - -C "$copy"
git -C "$copy" init -q
git -C "$copy" -c user.name=test -c user.email=test@example.invalid add -A
git -C "$copy" -c user.name=test -c user.email=test@example.invalid commit -qm copy

old=$(<"$copy/VERSION")
IFS=. read -r major minor _ <<<"$old"
new=$major.$((minor + 1)).0
unreleased=$(awk '/^## \[Unreleased\]$/ { on = 1; next } on && /^## \[/ { exit } on' "$copy/CHANGELOG.md")
if ! grep -q '^- ' <<<"$unreleased"; then
	# Right after a release [Unreleased] is empty: give the copy a change to release.
	sed -i 's/^## \[Unreleased\]$/&\n\n### Added\n\n- A change of the copy (release-test.sh)./' "$copy/CHANGELOG.md"
	git -C "$copy" -c user.name=test -c user.email=test@example.invalid commit -qam 'a change to release'
	unreleased=$(awk '/^## \[Unreleased\]$/ { on = 1; next } on && /^## \[/ { exit } on' "$copy/CHANGELOG.md")
fi
first_change=$(grep -m1 '^- ' <<<"$unreleased")
chart=$copy/deploy/chart/custom-kube-scheduler-webhook/Chart.yaml

echo "== make release VERSION=$new (from $old) on a copy"
if ! (cd "$copy" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s release VERSION="$new" RELEASE_DATE=2030-01-02) >"$work/out" 2>&1; then
	cat "$work/out" >&2
	fail "make release VERSION=$new exited non-zero (its output is above)"
fi
out=$(<"$work/out")
cl=$(<"$copy/CHANGELOG.md")
check "VERSION is $new" test "$(<"$copy/VERSION")" = "$new"
check "the alerts' tests expect the runbook links at v$new" grep -q "/blob/v$new/" "$copy/deploy/test/monitoring/alerts_test.yaml"
check "Chart.yaml version $new" matches "$(<"$chart")" "^version: $new$"
check "Chart.yaml appVersion $new" matches "$(<"$chart")" "^appVersion: \"$new\"$"
check "CHANGELOG.md: a dated section for $new" matches "$cl" "^## \[$new\] - 2030-01-02$"
check "CHANGELOG.md: [Unreleased] is empty, right above it" test "$(grep -A2 '^## \[Unreleased\]$' <<<"$cl" | paste -sd'|')" = "## [Unreleased]||## [$new] - 2030-01-02"
check "CHANGELOG.md: the old [Unreleased] entries are under $new" test "$(awk -v h="## [$new] - 2030-01-02" '$0 == h { on = 1; next } on && /^## \[/ { exit } on' <<<"$cl")" = "$unreleased"
check "CHANGELOG.md: $old keeps its section" matches "$cl" "^## \[$old\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$"
check "CHANGELOG.md: [Unreleased] compares from v$new" matches "$cl" "^\[Unreleased\]: .*/compare/v$new\.\.\.HEAD$"
check "CHANGELOG.md: a link for $new, from v$old" matches "$cl" "^\[$new\]: .*/compare/v$old\.\.\.v$new$"
check "deploy/manifests rendered at $new" contains "$(<"$copy/deploy/manifests/custom-kube-scheduler-webhook.yaml")" "helm.sh/chart: custom-kube-scheduler-webhook-$new"
check "the install commands name $new" contains "$(<"$copy/docs/install-eks.md")" "--version $new"
check_not "no install command left on $old" grep -qE -- "--version ${old//./\\.}\b" "$copy/README.md" "$copy/docs/install-eks.md" "$copy/deploy/README.md"
check "docs/upgrade.md (history) untouched" test "$(<"$copy/docs/upgrade.md")" = "$(<"$repo/docs/upgrade.md")"
check "says the versions agree" contains "$out" "ok   make build stamps: $new"
check "prints the release notes" contains "$out" "Release notes for $new (2030-01-02):"
check "the notes carry the [Unreleased] entries" contains "$out" "$first_change"
check "deploy/test/static.sh's version checks would pass" matches "$cl" "^## \[$(<"$copy/VERSION")\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$"
git -C "$copy" -c user.name=test -c user.email=test@example.invalid commit -qam "Release $new"

echo "== what it refuses"
refuses() { # WHAT PATTERN ARGS...: scripts/release.sh ARGS fails, saying PATTERN
	local what=$1 pattern=$2 said
	shift 2
	if said=$(cd "$copy" && scripts/release.sh "$@" 2>&1); then
		fail "$what: accepted"
	else
		check "$what" contains "$said" "$pattern"
	fi
}
refuses "an empty [Unreleased] (right after the release)" "lists no change" "$major.$((minor + 2)).0"
printf -- '- a change\n' >"$work/line"
sed -i "/^## \[Unreleased\]$/r $work/line" "$copy/CHANGELOG.md"
refuses "local changes to CHANGELOG.md" "local changes" "$major.$((minor + 2)).0"
git -C "$copy" -c user.name=test -c user.email=test@example.invalid commit -qam "a change"
refuses "the version just released" "is not above the current version" "$new"
refuses "a version below the current one" "is not above the current version" "$old"
refuses "not x.y.z" "is not a release version" "1.2"
refuses "no version" "no version" ""
check "the repository itself is untouched" test "$(<"$repo/VERSION")" = "$old"
finish
