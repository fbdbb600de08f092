#!/usr/bin/env bash
# Test what ships: build the image from the stand-in bases, push it and the chart to a real
# local registry (Debian's docker-registry, started here on a free loopback port and
# stopped by PID), and check what was pushed:
#   the manifest list has linux/amd64 and linux/arm64; each config runs as 65532:65532 with
#   the binary as entrypoint, `serve` as command and the version and revision as labels;
#   no /bin/sh (no shell at all) in the root filesystem; the amd64 binary taken out of the
#   image prints the version it was given; the arm64 one is an AArch64 ELF; the chart
#   pulled back names the pushed image by the pushed index's digest (tag kept).
# Signed with a cosign key pair made here (no Rekor, no Fulcio: --no-tlog): cosign verify of
#   the image and the chart, verify-attestation of the CycloneDX SBOM (the modules of the
#   binary) and of the SLSA provenance (this commit), a wrong key refused, and a tampered
#   tag (another image pushed under the version tag) failing verification.
# Then build_and_push.sh's ECR path (scripts/image/ecr-test.sh) against a local ECR API
# endpoint and a registry that requires its login, in the same image store.
# The binary of the host's platform is left in IMAGE_TEST_OUT (default bin/image) so the
# end-to-end tests can run the artefact users run (make test does).
# Everything else lives in one temporary directory (image store, registry storage, build
# cache) removed at the end; nothing is left in the machine's own image store.
#
#   scripts/image/test.sh           (make test-image)
# Env: IMAGE_TEST_OUT, IMAGE_TEST_KEEP=1 (keep the temporary directory), IMAGE_TEST_VERSION
# (default: VERSION with a "-test" suffix, so a test image never looks like a release),
# IMAGE_TEST_ECR=0 (skip the ECR path).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=scripts/image/lib.sh
source "$here/lib.sh"
# shellcheck source=deploy/lib.sh
source "$repo/deploy/lib.sh"
# shellcheck source=deploy/test/testlib.sh
source "$repo/deploy/test/testlib.sh"
cd "$repo"

img_help "${BASH_SOURCE[0]}" "${1:-}"
img_ensure_tools
ensure_helm
# cosign and cyclonedx-gomod, pinned, built once into the cache (scripts/image/tools.sh).
tools=$(bash "$here/tools.sh")
COSIGN=$(sed -n 's/^COSIGN=//p' <<<"$tools")
CYCLONEDX_GOMOD=$(sed -n 's/^CYCLONEDX_GOMOD=//p' <<<"$tools")
export COSIGN CYCLONEDX_GOMOD
out_dir=${IMAGE_TEST_OUT:-$repo/bin/image}
version=${IMAGE_TEST_VERSION:-$(<VERSION)-test}
host_arch=$(go env GOARCH)
start=$(date +%s)

work=$(mktemp -d "${TMPDIR:-/tmp}/cksw-image-test.XXXXXX")
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	img_registry_stop "$work/registry" || true
	# The test's own image store: containers first, then the store itself. vfs keeps
	# layers as plain directories, so nothing stays mounted.
	buildah rm --all >/dev/null 2>&1 || true
	if [[ ${IMAGE_TEST_KEEP:-0} == 1 ]]; then
		img_log "kept $work"
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

img_private_store "$work"
img_share_go_caches "$TMPDIR"

img_registry_start "$work/registry"
# The commit being built, read before the build (a commit made meanwhile is not in it).
revision=$(git rev-parse HEAD)
sha_tag=${revision:0:12}

# A signing key of the test's own, and another one that must not verify.
mkdir -p "$work/key" "$work/otherkey"
export COSIGN_PASSWORD=image-test TUF_ROOT=$work/sigstore
(cd "$work/key" && "$COSIGN" generate-key-pair >/dev/null 2>&1) || lc_die "cosign generate-key-pair failed"
(cd "$work/otherkey" && "$COSIGN" generate-key-pair >/dev/null 2>&1) || lc_die "cosign generate-key-pair failed"

echo "== make image-bases"
bases=$(bash "$here/bases.sh")
builder_image=$(sed -n 's/^BUILDER_IMAGE=//p' <<<"$bases")
runtime_image=$(sed -n 's/^RUNTIME_IMAGE=//p' <<<"$bases")
check "bases print BUILDER_IMAGE=<ref> and RUNTIME_IMAGE=<ref>, two lines" test "$(wc -l <<<"$bases")" -eq 2 -a -n "$builder_image" -a -n "$runtime_image"
bases_done=$(date +%s)

echo "== build_and_push.sh --registry $REGISTRY/test (both platforms, and the chart)"
path=$REGISTRY/test
if ! ./build_and_push.sh --engine buildah --registry "$path" --tls-verify=false --version "$version" \
	--builder-image "$builder_image" --runtime-image "$runtime_image" --chart \
	--sign-key "$work/key/cosign.key" --no-tlog >"$work/push.log" 2>&1; then
	cat "$work/push.log" >&2
	lc_die "build_and_push.sh failed (its output is above)"
fi
built=$(date +%s)
tail -n 10 "$work/push.log"
image=$path/custom-kube-scheduler-webhook
digest=$(sed -n 's/^Image digest: //p' "$work/push.log")
check "prints the pushed digest" matches "$digest" '^sha256:[0-9a-f]{64}$'

echo "== what was pushed (skopeo)"
sk=(skopeo --override-os linux)
"${sk[@]}" inspect --tls-verify=false --raw "docker://$image:$version" >"$work/index.json"
raw=$(<"$work/index.json")
check "a manifest list (OCI index)" matches "$(jq -r .mediaType <<<"$raw")" 'manifest\.list|image\.index'
check "linux/amd64 and linux/arm64" test "$(jq -r '[.manifests[].platform | .os + "/" + .architecture] | sort | join(",")' <<<"$raw")" = linux/amd64,linux/arm64
check "the digest printed is the list's" test "$(sha256sum <"$work/index.json" | cut -d' ' -f1)" = "${digest#sha256:}"
tags=$("${sk[@]}" list-tags --tls-verify=false "docker://$image" | jq -r '.Tags | join(" ")')
check "tagged with the version and the commit ($tags)" test "$(tr ' ' '\n' <<<"$tags" | grep -cE "^($version|$sha_tag(-dirty)?)$")" -eq 2
for arch in amd64 arm64; do
	cfg=$("${sk[@]}" inspect --tls-verify=false --override-arch "$arch" --config "docker://$image:$version")
	check "$arch: architecture $arch" test "$(jq -r .architecture <<<"$cfg")" = "$arch"
	check "$arch: User 65532:65532" test "$(jq -r .config.User <<<"$cfg")" = 65532:65532
	check "$arch: entrypoint is the binary" test "$(jq -c .config.Entrypoint <<<"$cfg")" = '["/usr/local/bin/custom-kube-scheduler-webhook"]'
	check "$arch: command serve" test "$(jq -c .config.Cmd <<<"$cfg")" = '["serve"]'
	check "$arch: label version $version" test "$(jq -r '.config.Labels["org.opencontainers.image.version"]' <<<"$cfg")" = "$version"
	check "$arch: label revision" test "$(jq -r '.config.Labels["org.opencontainers.image.revision"]' <<<"$cfg")" = "$revision"
	check "$arch: label licenses Apache-2.0" test "$(jq -r '.config.Labels["org.opencontainers.image.licenses"]' <<<"$cfg")" = Apache-2.0

	# The root filesystem as a runtime would unpack it.
	"${sk[@]}" copy -q --src-tls-verify=false --override-arch "$arch" "docker://$image:$version" "oci:$work/oci:$arch"
	rootfs=$work/rootfs-$arch
	umoci raw unpack --rootless --image "$work/oci:$arch" "$rootfs" 2>/dev/null
	bin=$rootfs/usr/local/bin/custom-kube-scheduler-webhook
	check "$arch: the binary is at /usr/local/bin" test -x "$bin"
	check_not "$arch: no /bin/sh" test -e "$rootfs/bin/sh" -o -L "$rootfs/bin/sh"
	check "$arch: no shell anywhere" test -z "$(find "$rootfs" \( -name sh -o -name bash -o -name busybox -o -name dash \) -print -quit)"
	check "$arch: CA certificates" test -s "$rootfs/etc/ssl/certs/ca-certificates.crt"
	check "$arch: nonroot in /etc/passwd" grep -q '^nonroot:x:65532:65532:' "$rootfs/etc/passwd"
	manifest=$(jq -r --arg arch "$arch" '.manifests[] | select(.platform.architecture == $arch) | .digest' "$work/index.json")
	size=$(jq '[.layers[].size] | add' <<<"$("${sk[@]}" inspect --tls-verify=false --raw "docker://$image@$manifest")")
	echo "     linux/$arch: compressed layers $((size / 1024 / 1024)) MiB, unpacked $(du -sm "$rootfs" | cut -f1) MiB"
	machine=$(readelf -h "$bin" | sed -n 's/^ *Machine: *//p')
	case $arch in
	amd64) check "$arch: x86-64 ELF ($machine)" test "$machine" = "Advanced Micro Devices X86-64" ;;
	arm64) check "$arch: AArch64 ELF ($machine)" test "$machine" = AArch64 ;;
	esac
	if [[ $arch == "$host_arch" ]]; then
		v=$("$bin" --version 2>&1 || true)
		echo "     $v"
		check "$arch: --version prints the version it was given and the commit" matches "$v" "^custom-kube-scheduler-webhook $version \(revision $revision, "
		mkdir -p "$out_dir"
		cp "$bin" "$out_dir/custom-kube-scheduler-webhook"
	fi
done

echo "== the chart, pulled back"
mkdir -p "$work/pulled"
if ! "$HELM" pull "oci://$path/charts/custom-kube-scheduler-webhook" --version "$version" --plain-http -d "$work/pulled" >"$work/pull.log" 2>&1; then
	cat "$work/pull.log" >&2
	fail "helm pull oci://$path/charts/custom-kube-scheduler-webhook --version $version"
fi
tgz=$work/pulled/custom-kube-scheduler-webhook-$version.tgz
check "helm pull brings back custom-kube-scheduler-webhook-$version.tgz" test -s "$tgz"
if [[ -s $tgz ]]; then
	meta=$("$HELM" show chart "$tgz")
	check "chart version $version" matches "$meta" "^version: $version$"
	check "chart appVersion $version" matches "$meta" "^appVersion: \"?$version\"?$"
	rendered=$("$HELM" template cksw "$tgz" --namespace cksw --kube-version "$RENDER_KUBE_VERSION")
	values=$("$HELM" show values "$tgz")
	check "its values name the pushed repository" matches "$values" "^  repository: \"?$image\"?$"
	check "its values carry the pushed index's digest ($digest)" matches "$values" "^  digest: \"?$digest\"?$"
	check "its values keep the version tag for people" matches "$values" "^  tag: \"?$version\"?$"
	check "renders with no --set, the pushed image pinned by digest" contains "$rendered" "image: \"$image:$version@$digest\""
fi

echo "== signatures and attestations (cosign $("$COSIGN" version 2>/dev/null | sed -n 's/^GitVersion: *//p'), the test's key)"
# No Rekor here: the signatures were not logged, so verification skips the log.
cv=("$COSIGN" --allow-insecure-registry --allow-http-registry --insecure-ignore-tlog=true --key "$work/key/cosign.pub")
# cosign_ok WHAT CMD...: CMD succeeds; its output kept in $work/cosign.out.
cosign_ok() {
	local what=$1
	shift
	if "$@" >"$work/cosign.out" 2>"$work/cosign.err"; then
		pass "$what"
	else
		sed 's/^/     /' "$work/cosign.err" >&2
		fail "$what"
	fi
}
cv_run() { # SUBCOMMAND ARGS...: cosign SUBCOMMAND with the verification flags above
	local sub=$1
	shift
	"$COSIGN" "$sub" "${cv[@]:1}" "$@"
}
cosign_ok "cosign verify $image@$digest" cv_run verify "$image@$digest"
cosign_ok "cosign verify $image:$version (the tag, still on the signed digest)" cv_run verify "$image:$version"
chart_digest=$(sed -n 's/^Chart digest: //p' "$work/push.log")
check "prints the chart's digest" matches "$chart_digest" '^sha256:[0-9a-f]{64}$'
cosign_ok "cosign verify the chart $path/charts/custom-kube-scheduler-webhook:$version" cv_run verify "$path/charts/custom-kube-scheduler-webhook:$version"
check "the chart's signature is on the chart's digest" contains "$(<"$work/cosign.out")" "\"docker-manifest-digest\":\"$chart_digest\""
if "$COSIGN" verify --allow-insecure-registry --allow-http-registry --insecure-ignore-tlog=true \
	--key "$work/otherkey/cosign.pub" "$image@$digest" >/dev/null 2>"$work/cosign.err"; then
	fail "another key does not verify the image: it did"
else
	check "another key does not verify the image" contains "$(<"$work/cosign.err")" "no matching signatures"
fi

cosign_ok "cosign verify-attestation --type cyclonedx" cv_run verify-attestation --type cyclonedx "$image@$digest"
sbom=$(jq -r '.payload' <"$work/cosign.out" | head -n 1 | base64 -d | jq '.predicate')
modules=$(jq '[.components[]? | select(.type == "library" and (.purl // "" | startswith("pkg:golang/")))] | length' <<<"$sbom")
check "the SBOM is CycloneDX for the binary's main module" test "$(jq -r '.bomFormat + " " + .metadata.component.name' <<<"$sbom")" = "CycloneDX github.com/custom-kube-scheduler/custom-kube-scheduler-webhook"
check "the SBOM lists the Go modules compiled in ($modules)" test "$modules" -gt 20
check "the SBOM lists client-go" contains "$(jq -r '.components[].name' <<<"$sbom")" "k8s.io/client-go"
check "the SBOM lists the runtime base image" test "$(jq -r --arg b "${runtime_image%%[@:]*}" '[.components[] | select(.type == "container" and .name == $b)] | length' <<<"$sbom")" -eq 1
echo "     SBOM: $modules Go modules, $(jq '.components | length' <<<"$sbom") components in all"
cosign_ok "cosign verify-attestation --type slsaprovenance" cv_run verify-attestation --type slsaprovenance "$image@$digest"
prov=$(jq -r '.payload' <"$work/cosign.out" | head -n 1 | base64 -d)
check "the provenance is SLSA's" test "$(jq -r .predicateType <<<"$prov")" = "https://slsa.dev/provenance/v0.2"
check "the provenance's subject is the pushed digest" test "$(jq -r '.subject[0].digest.sha256' <<<"$prov")" = "${digest#sha256:}"
check "the provenance names this commit" test "$(jq -r '.predicate.invocation.configSource.digest.sha1' <<<"$prov")" = "$revision"
check "the provenance names the bases" test "$(jq -r '.predicate.invocation.parameters | .BUILDER_IMAGE + " " + .RUNTIME_IMAGE' <<<"$prov")" = "$builder_image $runtime_image"

# Tamper: another image (the amd64 one alone) pushed under the version tag. The tag now
# names a digest nobody signed: verification of the tag fails; the digest the chart pins
# still verifies.
amd64=$(jq -r '.manifests[] | select(.platform.architecture == "amd64") | .digest' "$work/index.json")
"${sk[@]}" copy -q --src-tls-verify=false --dest-tls-verify=false "docker://$image@$amd64" "docker://$image:$version"
check "tampered: the tag now names another digest" test "$("${sk[@]}" inspect --tls-verify=false --format '{{.Digest}}' "docker://$image:$version")" = "$amd64"
if cv_run verify "$image:$version" >/dev/null 2>"$work/cosign.err"; then
	fail "tampered tag: cosign verify $image:$version passed"
else
	check "tampered tag: cosign verify $image:$version fails (no signature)" contains "$(<"$work/cosign.err")" "no signatures found"
fi
check_not "tampered tag: no SBOM attestation either" cv_run verify-attestation --type cyclonedx "$image:$version"
cosign_ok "the pinned digest still verifies" cv_run verify "$image@$digest"

checked=$(date +%s)
# The ECR path, in this image store and with this build cache (the Go build cache of the
# Dockerfile's RUN is in TMPDIR): the bases are not built again and the Go packages are
# compiled once.
ecr_s=""
if [[ ${IMAGE_TEST_ECR:-1} == 1 ]]; then
	echo "== the ECR path (scripts/image/ecr-test.sh)"
	if ECR_TEST_BASES="$builder_image $runtime_image" bash "$here/ecr-test.sh"; then
		pass "the ECR path (scripts/image/ecr-test.sh)"
	else
		fail "the ECR path (scripts/image/ecr-test.sh; see above)"
	fi
	ecr_s=", ECR path $(($(date +%s) - checked))s"
fi

if ((FAILURES == 0)); then
	echo "image for linux/$host_arch: $out_dir/custom-kube-scheduler-webhook"
fi
echo "bases $((bases_done - start))s, build and push $((built - bases_done))s$ecr_s, total $(($(date +%s) - start))s"
finish
