#!/usr/bin/env bash
# Build (or reuse) the test-only binaries of the local cluster:
#   kube-apiserver, kube-controller-manager, kube-scheduler  (scripts/localcluster/kbin)
#   kwok                                                      (sigs.k8s.io/kwok/cmd/kwok)
#   karpenter-kwok: Karpenter with its kwok cloud provider     (sigs.k8s.io/karpenter/kwok;
#                   for karpenterkwok/go.mod's version, that module: reservations)
#   kubelet, only with REAL_NODE=1 (the real node of realnode.sh)  (scripts/localcluster/kbin)
# They are cached outside the repo, one directory per version, and rebuilt only
# when a version changes. The first run compiles Kubernetes: minutes, not seconds.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

lc_need_tools go

# lc_build DIR LABEL ESTIMATE CMD...: run a Go build whose outputs go to DIR.tmp,
# showing a heartbeat with elapsed time and compiled packages; DIR appears only
# when the build succeeded, so an interrupted build is never mistaken for a cached one.
lc_build() {
	local dir=$1 label=$2 estimate=$3 total=$4 start pid n dl rc=0
	shift 4
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp"
	start=$(date +%s)
	lc_log "building $label (cold: $estimate on 2 cores; cached afterwards)"
	"$@" >"$dir.tmp/build.log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 5
		if (((($(date +%s) - start) % 30) < 5)) && kill -0 "$pid" 2>/dev/null; then
			dl=$(grep -c '^go: downloading' "$dir.tmp/build.log" || true)
			n=$(grep -cv '^go: downloading' "$dir.tmp/build.log" || true)
			lc_log "  ... $label: $(($(date +%s) - start))s, $dl modules downloaded, $n of ~$total packages compiled"
		fi
	done
	wait "$pid" || rc=$?
	if ((rc != 0)); then
		tail -n 40 "$dir.tmp/build.log" >&2
		lc_die "building $label failed (full log: $dir.tmp/build.log)"
	fi
	n=$(grep -cv '^go: downloading' "$dir.tmp/build.log" || true)
	rm -f "$dir.tmp/build.log"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
	lc_log "built $label in $(($(date +%s) - start))s ($n packages compiled, the rest from the Go build cache) -> $dir"
}

# Version stamping: without it the binaries report v0.0.0 and kubectl refuses them.
kube_ldflags() {
	local v=${KUBE_VERSION#v} major minor pkg flags="-s -w"
	major=${v%%.*}
	minor=${v#*.}
	minor=${minor%%.*}
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=2026-01-01T00:00:00Z"
	done
	echo "$flags"
}

# build_kube OUTDIR PACKAGE...: binaries of the kbin module (the control plane, or the kubelet).
build_kube() {
	local out=$1
	shift
	(cd "$LC_SCRIPTS/kbin" && go build -v -trimpath -ldflags "$(kube_ldflags)" -o "$out/" "$@")
}

# build_karpenter OUTDIR: both kwok and Karpenter's provider install as "kwok", so
# install into a directory of its own and rename.
# With KARPENTER_RESERVED=1, from karpenterkwok/ (the same Karpenter, with reservations).
build_karpenter() {
	if [[ $KARPENTER_RESERVED == 1 ]]; then
		(cd "$KARPENTER_RESERVED_MOD" && go build -v -trimpath -o "$1/karpenter-kwok" .)
		return
	fi
	GOBIN=$1 go install -v -trimpath "sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION" &&
		mv "$1/kwok" "$1/karpenter-kwok"
}

want=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$LC_SCRIPTS/kbin/go.mod")
[[ $want == "$KUBE_VERSION" ]] || lc_die "KUBE_VERSION=$KUBE_VERSION but kbin/go.mod requires k8s.io/kubernetes $want"

lc_log "binary cache: $LOCALCLUSTER_CACHE"
todo=0
[[ -x $KUBE_BIN_DIR/kube-scheduler ]] || todo=$((todo + 1))
[[ -x $KWOK_BIN ]] || todo=$((todo + 1))
[[ -x $KARPENTER_BIN ]] || todo=$((todo + 1))
if ((todo > 0)); then
	lc_log "$todo of 3 builds needed. A cold first run takes ~8-12 minutes on 2 cores"
	lc_log "(Kubernetes control plane ~4-7 min, kwok ~1-2 min, Karpenter ~1.5-2 min); later runs reuse the cache."
fi

step=0
lc_log "step $((step += 1))/3: Kubernetes $KUBE_VERSION control plane"
if [[ -x $KUBE_BIN_DIR/kube-apiserver && -x $KUBE_BIN_DIR/kube-controller-manager && -x $KUBE_BIN_DIR/kube-scheduler ]]; then
	lc_log "  cached: $KUBE_BIN_DIR"
else
	lc_build "$KUBE_BIN_DIR" "kube-apiserver, kube-controller-manager, kube-scheduler $KUBE_VERSION" "~4-7 min" 2300 \
		build_kube "$KUBE_BIN_DIR.tmp" ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler
fi

lc_log "step $((step += 1))/3: kwok $KWOK_VERSION (fake kubelets)"
if [[ -x $KWOK_BIN ]]; then
	lc_log "  cached: $KWOK_BIN"
else
	d=$(dirname "$KWOK_BIN")
	lc_build "$d" "kwok $KWOK_VERSION" "~1-2 min" 1000 \
		env GOBIN="$d.tmp" go install -v -trimpath "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
fi

lc_log "step $((step += 1))/3: Karpenter $KARPENTER_VERSION with its kwok cloud provider"
if [[ -x $KARPENTER_BIN ]]; then
	lc_log "  cached: $KARPENTER_BIN"
else
	d=$(dirname "$KARPENTER_BIN")
	lc_build "$d" "karpenter-kwok $KARPENTER_VERSION" "~1.5-2 min" 1000 \
		build_karpenter "$d.tmp"
fi
if [[ $REAL_NODE == 1 ]]; then
	lc_log "REAL_NODE=1: kubelet $KUBE_VERSION (the real node)"
	if [[ -x $KUBELET_BIN ]]; then
		lc_log "  cached: $KUBELET_BIN"
	else
		d=$(dirname "$KUBELET_BIN")
		lc_build "$d" "kubelet $KUBE_VERSION" "~1-3 min after the control plane" 1500 \
			build_kube "$d.tmp" ./cmd/kubelet
	fi
fi
lc_log "all local-cluster binaries ready"
