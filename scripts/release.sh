#!/usr/bin/env bash
# Prepare a release in the working tree (make release VERSION=x.y.z): one procedure, one
# version everywhere.
#   1. CHANGELOG.md: [Unreleased] becomes "## [x.y.z] - <date>" under a new, empty
#      [Unreleased]; the compare links at the bottom follow.
#   2. VERSION, the chart's version and appVersion, the rendered deploy/manifests (and the
#      runbook links the alerts' tests expect), and the
#      install commands of README.md, docs/install-eks.md and deploy/README.md that name the
#      previous version.
#   3. Checks that they agree (VERSION = Chart.yaml version = appVersion = the newest dated
#      CHANGELOG section = what `make build` stamps; deploy/manifests not drifted; no install
#      command left on the previous version), then prints the release notes (the new section).
# It commits, tags and pushes nothing: review the diff, commit, tag vx.y.z, then run
# ./build_and_push.sh --chart (docs/release.md).
#
#   scripts/release.sh x.y.z [--date YYYY-MM-DD]
# Refuses: a version that is not x.y.z, not above VERSION, or already in CHANGELOG.md; an
# empty [Unreleased]; local changes to the files it edits.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() {
	echo "release.sh: $*" >&2
	exit 1
}

new="" date=""
while (($# > 0)); do
	case "$1" in
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	--date)
		date=${2:?--date needs YYYY-MM-DD}
		shift 2
		;;
	-*) die "unknown option $1 (see --help)" ;;
	*)
		[[ -z $new ]] || die "one version only (got $new and $1)"
		new=$1
		shift
		;;
	esac
done
[[ -n $new ]] || die "no version: make release VERSION=x.y.z"
new=${new#v}
[[ $new =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || die "$new is not a release version x.y.z"
[[ -n $date ]] || date=$(date -u +%F)
[[ $date =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}$ ]] || die "--date $date is not YYYY-MM-DD"

chart=deploy/chart/custom-kube-scheduler-webhook/Chart.yaml
docs=(README.md docs/install-eks.md deploy/README.md)
alerts_test=deploy/test/monitoring/alerts_test.yaml
old=$(<VERSION)
[[ $old =~ ^([0-9]+)\.([0-9]+)\.([0-9]+) ]] || die "VERSION ($old) is not x.y.z"
# version_key X.Y.Z prints a number that orders versions (each part below 10^6).
version_key() {
	local IFS=.
	# shellcheck disable=SC2086 # split on the dots
	set -- $1
	echo $(((10#$1 * 1000000 + 10#$2) * 1000000 + 10#$3))
}
(($(version_key "$new") > $(version_key "${old%%-*}"))) ||
	die "$new is not above the current version $old: make release VERSION=<the next version>"
grep -q "^## \[$new\]" CHANGELOG.md && die "CHANGELOG.md already has a section for $new"
grep -q '^## \[Unreleased\]$' CHANGELOG.md || die "CHANGELOG.md has no '## [Unreleased]' section"
# The [Unreleased] section's body: from its heading to the next "## [".
notes=$(awk '/^## \[Unreleased\]$/ { on = 1; next } on && /^## \[/ { exit } on' CHANGELOG.md)
grep -q '^- ' <<<"$notes" || die "[Unreleased] in CHANGELOG.md lists no change: nothing to release"
if git rev-parse --git-dir >/dev/null 2>&1 &&
	[[ -n $(git status --porcelain -- VERSION CHANGELOG.md "$chart" deploy/manifests "$alerts_test" "${docs[@]}") ]]; then
	die "local changes to the files a release edits (commit or stash them first):"$'\n'"$(git status --short -- VERSION CHANGELOG.md "$chart" deploy/manifests "$alerts_test" "${docs[@]}")"
fi

# 1. CHANGELOG.md: a dated section where [Unreleased] was, an empty [Unreleased] above it,
# and the links: [Unreleased] compares from the new tag, the new version from the old one.
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
awk -v new="$new" -v old="$old" -v date="$date" '
	/^## \[Unreleased\]$/ { print; print ""; print "## [" new "] - " date; next }
	/^\[Unreleased\]: / {
		link = $0
		sub(/v[^.]+\.[^.]+\.[^.]+\.\.\.HEAD$/, "v" new "...HEAD", link)
		print link
		prev = $0
		sub(/^\[Unreleased\]: /, "", prev)
		sub(/\.\.\.HEAD$/, "...v" new, prev)
		print "[" new "]: " prev
		next
	}
	{ print }
' CHANGELOG.md >"$tmp"
cat "$tmp" >CHANGELOG.md

# 2. The version everywhere it is written down.
echo "$new" >VERSION
sed -i -E -e "s/^version: .*/version: $new/" -e "s/^appVersion: .*/appVersion: \"$new\"/" "$chart"
re_old=${old//./\\.}
for f in "${docs[@]}"; do
	[[ -f $f ]] || continue
	sed -i -E \
		-e "s/(--version )$re_old\b/\1$new/g" \
		-e "s/(targetRevision: )$re_old\b/\1$new/g" \
		-e "s/(version: )$re_old([,}])/\1$new\2/g" \
		-e "s/(custom-kube-scheduler-webhook:)$re_old\b/\1$new/g" \
		-e "s/(charts\/custom-kube-scheduler-webhook )$re_old\b/\1$new/g" \
		-e "s/(version )$re_old(, whose)/\1$new\2/g" "$f"
done
deploy/render.sh >/dev/null
# The alerts' tests expect the runbook links the render writes, which name the version.
sed -i -E "s#(/blob/v)$re_old/#\1$new/#g" "$alerts_test"

# 3. They agree.
failed=0
agree() { # WHAT GOT
	if [[ $2 == "$new" ]]; then
		echo "ok   $1: $2"
	else
		echo "FAIL $1: ${2:-(none)}, not $new" >&2
		failed=1
	fi
}
agree VERSION "$(<VERSION)"
agree "Chart.yaml version" "$(sed -n 's/^version: //p' "$chart")"
agree "Chart.yaml appVersion" "$(sed -n 's/^appVersion: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart")"
agree "newest CHANGELOG.md section" "$(sed -n 's/^## \[\([0-9][^]]*\)\] - [0-9-]*$/\1/p' CHANGELOG.md | head -n 1)"
# A make started from `make release VERSION=...` would pass VERSION down: read the file's.
agree "make build stamps" "$(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -n build | sed -n 's/.*-X main\.version=\([^ ]*\) .*/\1/p' | head -n 1)"
if deploy/render.sh --check >/dev/null 2>&1; then
	echo "ok   deploy/manifests rendered at $new"
else
	echo "FAIL deploy/manifests differ from the chart's render" >&2
	failed=1
fi
for f in "${docs[@]}"; do
	if [[ -f $f ]] && grep -nE -e "--version $re_old\b|custom-kube-scheduler-webhook:$re_old\b|targetRevision: $re_old\b" "$f" >&2; then
		echo "FAIL $f still installs $old (above)" >&2
		failed=1
	fi
done
((failed == 0)) || die "the versions disagree (above): fix them before committing"

echo
echo "Release notes for $new ($date):"
# Without the blank lines around it.
printf '%s\n' "$notes" | awk 'NF { seen = 1 } seen' | tac | awk 'NF { seen = 1 } seen' | tac
echo
echo "Next: review git diff, commit \"Release $new\", tag v$new, then ./build_and_push.sh --chart."
