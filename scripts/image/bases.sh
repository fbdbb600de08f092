#!/usr/bin/env bash
# Stand-in base images for the Dockerfile, built offline from what this machine has, into
# the local containers-storage (buildah's image store):
#   builder: the machine's Go toolchain (go env GOROOT), busybox-static for RUN's /bin/sh,
#            CA certificates; for the build platform only (the Dockerfile cross-compiles).
#   runtime: the equivalent of gcr.io/distroless/static-debian12:nonroot for linux/amd64
#            and linux/arm64: /etc/passwd and /etc/group with nonroot (65532), CA
#            certificates, tzdata, /tmp, /home/nonroot; User 65532:65532; no shell.
# Prints the two references, one per line, as BUILDER_IMAGE=<ref> and RUNTIME_IMAGE=<ref>
# (the rest of the output goes to stderr). For tests and air-gapped builds only: the
# Dockerfile's defaults are the real golang and distroless images.
#
#   scripts/image/bases.sh          (make image-bases)
# Env: CONTAINERS_STORAGE_CONF (another image store, as for buildah), IMAGE_BASES_PREFIX
# (default localhost/custom-kube-scheduler-webhook).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/image/lib.sh
source "$here/lib.sh"

img_help "${BASH_SOURCE[0]}" "${1:-}"
img_ensure_tools
if ! img_static_busybox >/dev/null; then
	lc_ensure_packages busybox-static:busybox-static >&2
	[[ -n $(img_static_busybox) ]] || lc_die "no statically linked busybox (apt-get install busybox-static)"
fi
busybox=$(img_static_busybox)
goroot=$(go env GOROOT)
goversion=$(go env GOVERSION)
host_arch=$(go env GOARCH)
prefix=${IMAGE_BASES_PREFIX:-localhost/custom-kube-scheduler-webhook}
builder_ref=$prefix/builder:$goversion-standin
runtime_ref=$prefix/runtime:static-nonroot-standin
ca=/etc/ssl/certs/ca-certificates.crt
[[ -s $ca ]] || lc_ensure_packages update-ca-certificates:ca-certificates >&2
[[ -d /usr/share/zoneinfo/UTC || -e /usr/share/zoneinfo/UTC ]] || lc_ensure_packages tzselect:tzdata >&2

ctr=""
cleanup() {
	if [[ -n $ctr ]]; then buildah rm "$ctr" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# new_root: a scratch working container in $ctr, mounted at $root.
new_root() {
	ctr=$(buildah from scratch)
	root=$(buildah mount "$ctr")
}
# forget REF: drop an earlier image or manifest list of that name.
forget() {
	buildah manifest rm "$1" >/dev/null 2>&1 || true
	buildah rmi -f "$1" >/dev/null 2>&1 || true
}

img_log "builder: $goversion from $goroot, $busybox"
forget "$builder_ref"
new_root
mkdir -p "$root/bin" "$root/usr/local" "$root/etc/ssl/certs" "$root/tmp" "$root/root" "$root/go" "$root/src"
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
	[[ $applet == busybox ]] || ln -s busybox "$root/bin/$applet"
done
# The toolchain without its own tests and docs (the build needs src/, pkg/, bin/, lib/).
tar -C "$(dirname "$goroot")" --anchored --exclude="$(basename "$goroot")/test" --exclude="$(basename "$goroot")/doc" \
	-cf - "$(basename "$goroot")" | tar -C "$root/usr/local" -xf -
[[ $(basename "$goroot") == go ]] || mv "$root/usr/local/$(basename "$goroot")" "$root/usr/local/go"
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
buildah umount "$ctr" >/dev/null
buildah config --os linux --arch "$host_arch" \
	--env PATH=/usr/local/go/bin:/go/bin:/bin --env GOPATH=/go --env GOTOOLCHAIN=local \
	--env HOME=/root --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
	--workingdir /src --cmd '["/bin/sh"]' \
	--label org.opencontainers.image.description="Stand-in Go builder ($goversion, busybox) for tests and air-gapped builds" \
	"$ctr"
buildah commit -q "$ctr" "$builder_ref" >/dev/null
cleanup
ctr=""

img_log "runtime: distroless static nonroot stand-in for linux/amd64 and linux/arm64"
forget "$runtime_ref"
new_root
mkdir -p "$root/etc/ssl/certs" "$root/usr/share" "$root/tmp" "$root/home/nonroot" "$root/root"
chmod 1777 "$root/tmp"
chmod 700 "$root/root" "$root/home/nonroot"
chown 65532:65532 "$root/home/nonroot"
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
GROUP
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
cat >"$root/etc/os-release" <<'OSR'
PRETTY_NAME="custom-kube-scheduler-webhook stand-in runtime (distroless static nonroot equivalent)"
ID=standin
OSR
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
cp -a /usr/share/zoneinfo "$root/usr/share/zoneinfo"
buildah umount "$ctr" >/dev/null
buildah config --os linux --user 65532:65532 --workingdir /home/nonroot \
	--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	--env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
	--label org.opencontainers.image.description="Stand-in for distroless static nonroot, for tests and air-gapped builds" \
	"$ctr"
buildah manifest create "$runtime_ref" >/dev/null
for arch in amd64 arm64; do
	# One root filesystem (no binaries in it), committed once per architecture.
	buildah config --arch "$arch" "$ctr"
	forget "$runtime_ref-$arch"
	buildah commit -q "$ctr" "$runtime_ref-$arch" >/dev/null
	buildah manifest add --os linux --arch "$arch" "$runtime_ref" "$runtime_ref-$arch" >/dev/null
done

echo "BUILDER_IMAGE=$builder_ref"
echo "RUNTIME_IMAGE=$runtime_ref"
