# shellcheck shell=bash
# Helpers shared by scripts/image/*.sh: tools, and a local OCI registry (Debian's
# docker-registry) run as a process of the caller's, on loopback, stopped by PID.
# Sourced, never run.

# shellcheck source=scripts/localcluster/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../localcluster" && pwd)/lib.sh"

# The release tools, pinned (scripts/image/tools.sh builds them into LOCALCLUSTER_CACHE).
COSIGN_VERSION=${COSIGN_VERSION:-v2.6.5}
CYCLONEDX_GOMOD_VERSION=${CYCLONEDX_GOMOD_VERSION:-v1.10.0}

# img_log: progress on stderr (stdout carries the scripts' results).
img_log() { lc_log "$@" >&2; }

# img_ensure_tools installs the image tools that are missing (Debian packages).
img_ensure_tools() {
	lc_ensure_packages buildah:buildah skopeo:skopeo umoci:umoci docker-registry:docker-registry \
		htpasswd:apache2-utils jq:jq readelf:binutils >&2
}

# img_static_busybox prints the path of a statically linked busybox, if the machine has one.
img_static_busybox() {
	local b
	for b in /bin/busybox /usr/bin/busybox; do
		if [[ -x $b ]] && ! ldd "$b" >/dev/null 2>&1; then
			echo "$b"
			return 0
		fi
	done
	return 1
}

# img_free_port prints a TCP port on 127.0.0.1 that nothing listens on.
img_free_port() {
	local port i
	for ((i = 0; i < 100; i++)); do
		port=$((20000 + RANDOM % 10000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	lc_die "no free port found on 127.0.0.1"
}

# img_registry_start DIR [HTPASSWD [CERT KEY]]: Debian's docker-registry on a free loopback
# port, storing in DIR/storage, logging to DIR/logs/registry.log, its PID in DIR/pids; with
# an htpasswd file, only its users may pull or push; with a certificate and key (PEM), it
# serves HTTPS. Sets REGISTRY (127.0.0.1:PORT) and REGISTRY_URL (http(s)://REGISTRY).
# IMG_REGISTRY_LOG_LEVEL (default warn) sets its log level (info logs every request).
img_registry_start() {
	local dir=$1 htpasswd=${2:-} cert=${3:-} key=${4:-} port scheme=http curl_tls=()
	port=$(img_free_port)
	mkdir -p "$dir/storage"
	{
		echo "version: 0.1"
		echo "log: {level: ${IMG_REGISTRY_LOG_LEVEL:-warn}}"
		echo "storage:"
		echo "  filesystem: {rootdirectory: $dir/storage}"
		echo "  delete: {enabled: true}"
		echo "http:"
		echo "  addr: 127.0.0.1:$port"
		echo "  secret: $(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
		if [[ -n $cert ]]; then
			echo "  tls: {certificate: $cert, key: $key}"
		fi
		if [[ -n $htpasswd ]]; then
			echo "auth:"
			echo "  htpasswd: {realm: registry, path: $htpasswd}"
		fi
	} >"$dir/registry.yml"
	if [[ -n $cert ]]; then
		scheme=https
		curl_tls=(--cacert "$cert")
	fi
	# The registry reads REGISTRY_* variables as configuration: containers' REGISTRY_AUTH_FILE
	# would be taken for its auth section.
	(
		unset REGISTRY_AUTH_FILE
		PIDS=$dir/pids LOGS=$dir/logs lc_start registry docker-registry serve "$dir/registry.yml"
	)
	REGISTRY=127.0.0.1:$port
	REGISTRY_URL=$scheme://$REGISTRY
	# /v2/ answers 200, or 401 behind auth, once the registry listens.
	LC_WAIT_SECONDS=30 lc_wait curl -s "${curl_tls[@]}" -o /dev/null "$REGISTRY_URL/v2/" ||
		lc_die "the registry did not start: $(tail -n 5 "$dir/logs/registry.log")"
	img_log "registry on $REGISTRY_URL (pid $(<"$dir/pids/registry.pid"), storage $dir/storage)"
}

# img_registry_stop DIR stops the registry that img_registry_start DIR started.
img_registry_stop() {
	PIDS=$1/pids LOGS=$1/logs lc_stop registry >&2
}

# img_help SCRIPT ARG: with -h or --help as ARG, print SCRIPT's header comment (up to its
# `set -euo pipefail`) and exit 0.
img_help() {
	if [[ ${2:-} == -h || ${2:-} == --help ]]; then
		sed -n '2,/^set -euo/p' "$1" | sed '$d; s/^# \{0,1\}//'
		exit 0
	fi
}

# img_private_store DIR: an image store of the caller's own under DIR (vfs: layers are
# plain directories, so nothing stays mounted), and a TMPDIR under it, where buildah
# keeps RUN --mount=type=cache directories; exported for buildah and skopeo.
img_private_store() {
	mkdir -p "$1/tmp"
	printf '[storage]\ndriver = "vfs"\ngraphroot = "%s"\nrunroot = "%s"\n' "$1/storage" "$1/run" >"$1/storage.conf"
	export CONTAINERS_STORAGE_CONF=$1/storage.conf TMPDIR=$1/tmp
}

# img_share_go_caches TMPDIR: the Dockerfile's Go cache mounts (build cache, module cache)
# become this machine's own Go caches. buildah keeps a cache mount at
# TMPDIR/buildah-cache/<target> (1.28, Debian 12's) or TMPDIR/buildah-cache-<uid>/<target>
# (newer); a symlink there is mounted as its target. The image build then compiles only
# what this machine has not compiled with the Dockerfile's flags (make test-deploy builds
# them for both platforms), and downloads no module twice. Both caches are content
# addressed, so nothing stale is used; removing TMPDIR removes only the links.
img_share_go_caches() {
	local gocache gomodcache parent
	gocache=$(go env GOCACHE)
	gomodcache=$(go env GOMODCACHE)
	mkdir -p "$gocache" "$gomodcache"
	for parent in "$1/buildah-cache" "$1/buildah-cache-$(id -u)"; do
		mkdir -p "$parent/root/.cache" "$parent/go/pkg"
		ln -sfn "$gocache" "$parent/root/.cache/go-build"
		ln -sfn "$gomodcache" "$parent/go/pkg/mod"
	done
}
