# syntax=docker/dockerfile:1
#
# custom-kube-scheduler-webhook: static Go binary on distroless, multi-arch.
#
#   ./build_and_push.sh --registry HOST/PATH     (docker buildx, or buildah without docker)
#
# The build stage runs on the builder's own platform and cross-compiles for
# TARGETOS/TARGETARCH, so arm64 (Graviton) images build fast without QEMU.
#
# Go modules: build_and_push.sh hands the build a context with a vendor/ directory
# (`go mod vendor` on the host), so the build itself needs no network. A context without
# vendor/ (a plain `docker build .`) downloads the modules instead.
#
# Bases: the real golang and distroless images by default. BUILDER_IMAGE and
# RUNTIME_IMAGE replace them, e.g. with the stand-ins `make image-bases` builds offline
# (tests and air-gapped builds).

# Go toolchain: the version go.mod asks for, on Debian 12.
ARG BUILDER_IMAGE=docker.io/library/golang:1.26.8-bookworm
# Runtime: distroless static, nonroot (uid/gid 65532), Debian 12. Distroless publishes no
# versioned tags, so the multi-arch index is pinned by digest next to the tag it came from.
# Refresh it with `crane digest gcr.io/distroless/static-debian12:nonroot` (or let
# Renovate/Dependabot do it) and rebuild to pick up CA-certificate and tzdata updates.
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab

FROM --platform=$BUILDPLATFORM ${BUILDER_IMAGE} AS build
WORKDIR /src
ENV CGO_ENABLED=0 \
    GOTOOLCHAIN=local
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
ARG BUILD_DATE=unknown
# With vendor/ the module proxy is switched off: nothing is fetched during the build.
# Go's build and module caches are cache mounts: the second platform's build and every
# rebuild reuse them (/go is GOPATH in the golang images).
RUN --mount=type=cache,target=/root/.cache/go-build \
    --mount=type=cache,target=/go/pkg/mod \
    if [ -f vendor/modules.txt ]; then export GOFLAGS=-mod=vendor GOPROXY=off; else go mod download; fi && \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION} -X main.buildDate=${BUILD_DATE}" -o /out/custom-kube-scheduler-webhook ./cmd/custom-kube-scheduler-webhook

FROM ${RUNTIME_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
ARG BUILD_DATE=unknown
LABEL org.opencontainers.image.title="custom-kube-scheduler-webhook" \
      org.opencontainers.image.description="Splits Deployment replicas across Karpenter NodePools and EKS node groups by base + weight" \
      org.opencontainers.image.source="https://github.com/custom-kube-scheduler/custom-kube-scheduler-webhook" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${BUILD_DATE}"
COPY --from=build /out/custom-kube-scheduler-webhook /usr/local/bin/custom-kube-scheduler-webhook
USER 65532:65532
EXPOSE 9443
# The binary is the entrypoint and `serve` the default command, so the same image also
# runs `plan`, `spread` and `version` (docker run IMAGE spread ...). The chart passes `serve`.
ENTRYPOINT ["/usr/local/bin/custom-kube-scheduler-webhook"]
CMD ["serve"]
