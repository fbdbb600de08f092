# custom-kube-scheduler-webhook
#
#   make demo         local cluster + webhook + sample Deployment + spread report
#   make demo-down    stop the demo: no process of ours left, no state in the repo
#   make test         go vet, unit tests, deploy checks, the image built, pushed to a local
#                     registry and checked, the ECR push path against a local ECR endpoint,
#                     then end-to-end tests (of that image's binary) on a local cluster
#   make bench        benchmark on a local cluster of its own; prints Markdown tables
#   make scale        many strategy Deployments (20,000 pods) on a local cluster of its own,
#                     measured per webhook replica; prints a Markdown table
#   make soak DURATION=30m   churn soak with an invariant checker on a local cluster of its own
#   make docs         regenerate docs/cli.md from the commands' --help
#
# The local cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kwok, Karpenter's kwok provider) is built once into
# ${XDG_CACHE_HOME:-~/.cache}/custom-kube-scheduler-webhook; see scripts/localcluster/README.md.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO ?= go
BIN_DIR := $(CURDIR)/bin
WEBHOOK_BIN := $(BIN_DIR)/custom-kube-scheduler-webhook
LC := scripts/localcluster

RELEASE_DATE ?=
.PHONY: release build generate docs vet test test-karpenter-range test-unit test-deploy test-image test-ecr test-install image-bases test-e2e bench scale soak demo demo-down cluster-up cluster-down lint-scripts

# One version source: VERSION names the binary (-ldflags -X), the image tag and the chart
# (deploy/test/static.sh fails when Chart.yaml disagrees).
VERSION := $(shell cat VERSION)
REVISION := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILD_DATE := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.revision=$(REVISION) -X main.buildDate=$(BUILD_DATE)

## build: the product binaries into ./bin, and bin/kubectl-spread (the kubectl plugin
## `kubectl spread`: a symlink to the binary)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN_DIR)/ ./cmd/...
	ln -sfn custom-kube-scheduler-webhook $(BIN_DIR)/kubectl-spread

## docs: regenerate docs/cli.md from the commands' --help (TestCLIReference fails while
## it differs; the same as go generate ./cmd/...)
docs:
	UPDATE_DOCS=1 $(GO) test -count=1 -run TestCLIReference ./cmd/custom-kube-scheduler-webhook

## vet: go vet, including the tests that need a cluster (build tag e2e)
vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./...
	$(GO) vet -tags bench ./bench/

## test-unit: unit tests under the race detector (the nested scripts/localcluster/kbin
## module is not part of ./...), again without it the memory measurements it would
## inflate, then bounded runs of the admission, image platform and streamed pod list
## fuzz tests (FUZZTIME; their seed corpora run in ./...)
FUZZTIME ?= 20s
test-unit:
	$(GO) test -race ./...
	$(GO) test -count=1 -run 'TestCachedPodHeap|TestMaxBodyLoadStaysUnderMemoryLimit|TestCostRefreshHeap' ./clusterview ./webhook ./report
	$(GO) test ./webhook/placement -run XXX -fuzz FuzzAdmit -fuzztime $(FUZZTIME)
	$(GO) test ./imagearch -run XXX -fuzz FuzzArchitectures -fuzztime $(FUZZTIME)
	$(GO) test ./clusterview -run XXX -fuzz FuzzDecodePodStream -fuzztime $(FUZZTIME)

## test-e2e: bring up a dedicated cluster, run e2e/ against it, always tear it down.
## It includes SOAK_TEST_DURATION of the churn soak with the operations SOAK_TEST_OPS
## (all: scale, flap, restart, delete, annotate, block, kill).
## E2E_WEBHOOK_BIN is the binary the tests run as the webhook: by default `make build`'s;
## `make test` gives it the one taken out of the image test-image pushed.
SOAK_TEST_DURATION ?= 1m
SOAK_TEST_OPS ?= all
E2E_WEBHOOK_BIN ?= $(WEBHOOK_BIN)
test-e2e: build
	SOAK_DURATION=$(SOAK_TEST_DURATION) SOAK_OPS=$(SOAK_TEST_OPS) E2E_WEBHOOK_BIN=$(E2E_WEBHOOK_BIN) bash $(LC)/run-e2e.sh

## test-karpenter-range: the Karpenter-dependent e2e tests (tolerations, fallback on limits
## and back, no NodePool fits, slow launches, a partly limited term) against each Karpenter
## of KARPENTER_RANGE other than go.mod's (test-e2e runs that one; of the other cluster
## tests only karpenter/'s, the rest does not depend on Karpenter), each built from its
## module into the cache like go.mod's (cold: v1.12.1 3.5 min, v1.0.8 23 min under load)
## on a cluster of its own (docs/upgrade.md#karpenter-versions). The supported range is
## v1.0 to v1.14: CI tests its oldest, v1.0.8 (one version: its budget); v1.15 needs Go
## 1.26.9 (the toolchain is 1.26.8), so the newest tested is go.mod's v1.14.1.
KARPENTER_RANGE ?= v1.0.8
KARPENTER_E2E_RUN ?= TestTaintedNodePoolGetsTolerations|TestStrandedFallbackAndReturn|TestKarpenterSaysNoNodePoolFits|TestSlowLaunchBurstIsNotUnavailable|TestPartlyLimitedTermKeepsItsRunningPods
test-karpenter-range: build
	for v in $(KARPENTER_RANGE); do \
		echo "== Karpenter $$v"; \
		KARPENTER_VERSION=$$v E2E_KARPENTER_ONLY=1 E2E_RUN='$(KARPENTER_E2E_RUN)' E2E_WEBHOOK_BIN=$(E2E_WEBHOOK_BIN) bash $(LC)/run-e2e.sh; \
	done

## image-bases: stand-in builder and runtime images built offline into buildah's image
## store (for tests and air-gapped builds); prints BUILDER_IMAGE=<ref> and RUNTIME_IMAGE=<ref>
image-bases:
	@bash scripts/image/bases.sh

## test-image: build the image from the stand-in bases, push it and the chart to a local
## registry of its own, signed with a test key (cosign, SBOM, provenance; the pinned
## cosign and cyclonedx-gomod built once into the cache), check and verify what was
## pushed and leave the image's binary in bin/image;
## then the ECR path (test-ecr) in the same image store, so the bases are built once
IMAGE_BIN := $(BIN_DIR)/image/custom-kube-scheduler-webhook
test-image:
	IMAGE_TEST_OUT=$(dir $(IMAGE_BIN)) bash scripts/image/test.sh

## test-ecr: build_and_push.sh's ECR path alone (test-image runs it too, in its own image
## store): the real AWS CLI against a local ECR API endpoint (scripts/image/ecrlocal) and a
## registry that requires the token's login
test-ecr:
	bash scripts/image/ecr-test.sh

## test-install: the chart installed for real on a local cluster with a real node (a kubelet
## with containerd, runc and the bridge CNI; needs root and cgroups): this tree's image and
## chart and the previous release's (0.2.0, built from its commit 2836be0, cached) pushed
## to a local registry; helm install of 0.2.0 / upgrade to this one mid-burst / a webhook
## pod deleted mid-burst / helm rollback mid-burst / a last burst / upgrade again / helm
## uninstall, exact placement checked through the chart's Service and the seat and
## unavailability records read across versions; then everything stopped by PID
## (deploy/test/install.sh; INSTALL_PORT_OFFSET, default 200; needs the full history)
test-install: build
	WEBHOOK_BIN=$(WEBHOOK_BIN) bash deploy/test/install.sh

## release: make release VERSION=x.y.z prepares a release in the working tree: CHANGELOG.md's
## [Unreleased] becomes a dated section, VERSION, the chart's version and appVersion, the
## rendered manifests and the install commands follow, checks they agree and prints the
## release notes (scripts/release.sh; it commits and tags nothing; docs/release.md)
release:
	bash scripts/release.sh $(VERSION) $(if $(RELEASE_DATE),--date $(RELEASE_DATE))

## test-deploy: chart lint and render, manifest drift, shellcheck, the alerts' promtool
## check and unit tests (deploy/test/monitoring), Dockerfile checks, build_and_push.sh
## --dry-run, the binary built with the Dockerfile's flags, and the GitOps diff tools' vet and
## unit tests (Argo CD's diff, deploy/test/argodiff)
test-deploy:
	deploy/test/static.sh
	bash scripts/release-test.sh
	deploy/test/build-binary.sh
	cd deploy/test/gitopsdiff && $(GO) vet ./...
	cd deploy/test/argodiff && $(GO) vet ./... && $(GO) test ./...

## bench: the benchmark harness (bench/) on a dedicated cluster, always torn down;
## BENCH_RUNS, BENCH_SIZES, ... tune it (scripts/bench.sh)
bench: build
	BENCH_WEBHOOK_BIN=$(WEBHOOK_BIN) bash scripts/bench.sh

## scale: SCALE_WORKLOADS x SCALE_REPLICAS pods (200 x 100) of strategy Deployments on a
## dedicated cluster, always torn down; memory, restart, steady CPU and API requests,
## admission latency and capacity-loss recovery of each webhook replica (scripts/scale.sh)
SCALE_WEBHOOK_BIN ?= $(WEBHOOK_BIN)
scale: build
	SCALE_WEBHOOK_BIN=$(SCALE_WEBHOOK_BIN) bash scripts/scale.sh

## soak: the churn soak (e2e's TestSoak) for DURATION on a dedicated cluster, always
## torn down; exit status 1 on any violation. SOAK_OPS, SOAK_SEED, ... (scripts/soak.sh)
DURATION ?= 10m
soak: build
	DURATION=$(DURATION) E2E_WEBHOOK_BIN=$(WEBHOOK_BIN) bash scripts/soak.sh

## test: everything CI runs; stops at the first failure, the e2e cluster is always torn down.
## The end-to-end tests run the webhook binary taken out of the image test-image pushed,
## the Karpenter-dependent ones also against the oldest Karpenter of the supported range.
test: vet test-unit test-deploy test-image
	$(MAKE) test-e2e E2E_WEBHOOK_BIN=$(IMAGE_BIN)
	$(MAKE) test-karpenter-range E2E_WEBHOOK_BIN=$(IMAGE_BIN)
	$(MAKE) test-install

## demo: one command from a fresh clone (first run builds Kubernetes: minutes).
## REAL_NODE=1: the chart installed for real on a real node instead (needs root)
REAL_NODE ?= 0
demo:
	REAL_NODE=$(REAL_NODE) WEBHOOK_BIN=$(WEBHOOK_BIN) bash scripts/demo.sh

## demo-down: stop the demo webhook and cluster by recorded PID, remove their state
demo-down:
	bash $(LC)/down.sh

## cluster-up / cluster-down: only the local cluster (LOCALCLUSTER_DIR, LOCALCLUSTER_PORT_OFFSET)
cluster-up:
	bash $(LC)/build.sh
	bash $(LC)/up.sh

cluster-down:
	bash $(LC)/down.sh

## lint-scripts: shellcheck the shell scripts (deploy/test/static.sh checks every one)
lint-scripts:
	shellcheck -x $(LC)/*.sh scripts/*.sh deploy/*.sh deploy/test/*.sh build_and_push.sh .ci/run

## generate: deepcopy of api/ and the policy CRDs into the chart's files/crds, with
## controller-gen pinned in scripts/tools/go.mod (deploy/test/static.sh fails while
## the chart's copy differs from what this generates)
CONTROLLER_GEN := $(GO) tool -modfile=scripts/tools/go.mod controller-gen
generate:
	$(CONTROLLER_GEN) object paths=./api/... crd:crdVersions=v1 output:crd:dir=deploy/chart/custom-kube-scheduler-webhook/files/crds
