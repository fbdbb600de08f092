# syntax=docker/dockerfile:1
#
# custom-kube-scheduler-webhook: static Go binary on distroless, multi-arch.
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t IMAGE --push .
#
# (build_and_push.sh does this for ECR.) The build stage runs on the builder's own
# platform and cross-compiles for TARGETOS/TARGETARCH, so arm64 (Graviton) images build
# fast without QEMU.

# Go toolchain: the version go.mod asks for.
ARG GO_VERSION=1.26.8
# Runtime: distroless static, nonroot (uid/gid 65532), Debian 12. Distroless publishes no
# versioned tags, so the multi-arch index is pinned by digest next to the tag it came from.
# Refresh it with `crane digest gcr.io/distroless/static-debian12:nonroot` (or let
# Renovate/Dependabot do it) and rebuild to pick up CA-certificate and tzdata updates.
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 \
    GOFLAGS=-mod=readonly \
    GOTOOLCHAIN=local
# Dependencies first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
# deploy/test/build-binary.sh runs this exact go build line (flags and package) locally.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/custom-kube-scheduler-webhook ./cmd/custom-kube-scheduler-webhook

FROM ${RUNTIME_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="custom-kube-scheduler-webhook" \
      org.opencontainers.image.description="Splits Deployment replicas across Karpenter NodePools and EKS node groups by base + weight" \
      org.opencontainers.image.source="https://github.com/custom-kube-scheduler/custom-kube-scheduler-webhook" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/custom-kube-scheduler-webhook /usr/local/bin/custom-kube-scheduler-webhook
USER 65532:65532
EXPOSE 9443
# The binary is the entrypoint and `serve` the default command, so the same image also
# runs `plan` and `spread` (docker run IMAGE spread ...). The Helm chart passes `serve`.
ENTRYPOINT ["/usr/local/bin/custom-kube-scheduler-webhook"]
CMD ["serve"]
