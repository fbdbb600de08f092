#!/usr/bin/env bash
# Install the chart for real on the local cluster's real node (REAL_NODE=1), the way users
# install it: the image (this machine's platform) and the chart are built and pushed to a
# local registry (Debian's docker-registry on a free loopback port, kept running with the
# cluster and stopped by down.sh), then `helm upgrade --install` from
# oci://127.0.0.1:PORT/... with the chart's defaults (the pushed image, self-signed
# certificates) plus only what puts the pods on the real node: the toleration of its taint
# and its label as nodeSelector (kwok nodes would take any pod, and fake it). Waits until
# the webhook pods are Ready (their probes) on the real node.
#
# Env: CHART_RELEASE (default custom-kube-scheduler-webhook), CHART_NAMESPACE (default
# custom-kube-scheduler-webhook: then the release takes over the ServiceAccount and RBAC
# webhook-rbac.sh applied, and check-webhook-rbac.sh checks the pods' requests),
# CHART_VERSION (default: VERSION; the image tag and chart version), CHART_EXTRA_TAG (also
# push the image under this tag), CHART_INSTALL=0 (push only, install nothing). The
# registry's address is left in $LOCALCLUSTER_DIR/registry/address.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/image/lib.sh
source "$here/../image/lib.sh"
# shellcheck source=deploy/lib.sh
source "$REPO_ROOT/deploy/lib.sh"
cd "$REPO_ROOT"

[[ $REAL_NODE == 1 && -d $REAL_NODE_DIR ]] || lc_die "no real node in $LOCALCLUSTER_DIR: REAL_NODE=1 scripts/localcluster/up.sh"
export KUBECONFIG=$KUBECONFIG_FILE
release=${CHART_RELEASE:-$CHART_NAME}
ns=${CHART_NAMESPACE:-$WEBHOOK_NAMESPACE}
version=${CHART_VERSION:-$(<VERSION)}
img_ensure_tools
ensure_helm

# The registry, kept with the cluster (pods pull again when they restart).
reg_dir=$LOCALCLUSTER_DIR/registry
if PIDS=$reg_dir/pids lc_pid_alive registry && [[ -s $reg_dir/address ]]; then
	REGISTRY=$(<"$reg_dir/address")
else
	img_registry_start "$reg_dir"
	echo "$REGISTRY" >"$reg_dir/address"
fi
path=$REGISTRY/test
image=$path/$CHART_NAME

# A private image store, removed at the end; the Dockerfile's Go caches are this machine's,
# so the build compiles only what changed.
work=$(mktemp -d "${TMPDIR:-/tmp}/cksw-chart-install.XXXXXX")
trap 'buildah rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
img_private_store "$work"
img_share_go_caches "$TMPDIR"
lc_log "building the image (linux/$(go env GOARCH)) and the chart $version, pushing them to $path"
bases=$(bash "$REPO_ROOT/scripts/image/bases.sh")
builder_image=$(sed -n 's/^BUILDER_IMAGE=//p' <<<"$bases")
runtime_image=$(sed -n 's/^RUNTIME_IMAGE=//p' <<<"$bases")
if ! ./build_and_push.sh --engine buildah --registry "$path" --tls-verify=false --version "$version" \
	--platforms "linux/$(go env GOARCH)" --builder-image "$builder_image" --runtime-image "$runtime_image" \
	--chart >"$work/push.log" 2>&1; then
	cat "$work/push.log" >&2
	lc_die "build_and_push.sh failed (its output is above)"
fi
if [[ -n ${CHART_EXTRA_TAG:-} ]]; then
	skopeo copy -q --all --src-tls-verify=false --dest-tls-verify=false \
		"docker://$image:$version" "docker://$image:$CHART_EXTRA_TAG"
fi
bash "$LC_SCRIPTS/realnode.sh" hosts "$REGISTRY"
lc_log "pushed $image:$version${CHART_EXTRA_TAG:+ (and :$CHART_EXTRA_TAG)} and oci://$path/charts/$CHART_NAME"

cat >"$work/values.yaml" <<EOF
tolerations:
  - {key: $REAL_NODE_TAINT_KEY, operator: Exists, effect: NoSchedule}
nodeSelector:
  $REAL_NODE_TAINT_KEY: "true"
EOF
if [[ ${CHART_INSTALL:-1} == 0 ]]; then
	exit 0
fi

# webhook-rbac.sh applied the chart's policy CRDs too (cluster-wide, owned by no release):
# hand them to this release, as docs/upgrade.md tells users to, or Helm refuses them. A
# CRD another release owns is left to it.
for crd in placementpolicies.custom-kube-scheduler-webhook.io clusterplacementpolicies.custom-kube-scheduler-webhook.io; do
	kubectl get crd "$crd" >/dev/null 2>&1 || continue
	[[ -z $(kubectl get crd "$crd" -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name}') ]] || continue
	kubectl label crd "$crd" app.kubernetes.io/managed-by=Helm --overwrite >/dev/null
	kubectl annotate crd "$crd" meta.helm.sh/release-name="$release" meta.helm.sh/release-namespace="$ns" --overwrite >/dev/null
done
take=()
# webhook-rbac.sh applied the chart's identity in the webhook namespace: the release adopts it.
[[ $release == "$CHART_NAME" && $ns == "$WEBHOOK_NAMESPACE" ]] && take=(--take-ownership)
if ! "$HELM" upgrade --install "$release" "oci://$path/charts/$CHART_NAME" --version "$version" \
	--plain-http -n "$ns" --create-namespace "${take[@]}" -f "$work/values.yaml" >"$work/helm.log" 2>&1; then
	cat "$work/helm.log" >&2
	lc_die "helm upgrade --install $release failed"
fi
lc_log "helm install $release (namespace $ns) from oci://$path/charts/$CHART_NAME --version $version"
full=$release
[[ $release == *"$CHART_NAME"* ]] || full=$release-$CHART_NAME
if ! lc_kubectl -n "$ns" rollout status "deployment/$full" --timeout=300s >&2; then
	lc_kubectl -n "$ns" get pods -o wide >&2 || true
	lc_die "the webhook pods did not turn Ready"
fi
lc_log "webhook pods Ready on $REAL_NODE_NAME: $(lc_kubectl -n "$ns" get pods -l "app.kubernetes.io/instance=$release" -o jsonpath='{range .items[*]}{.metadata.name}@{.spec.nodeName} {end}')"
