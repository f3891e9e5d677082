# One static sluice binary; every process (decider, gateway, simengine, ctl) is a subcommand.
# (No `# syntax=` line: it makes BuildKit fetch a frontend image, which fails offline; the
# engine's built-in frontend handles RUN --mount=type=cache.)
#
# Stages:
#   build       compiles with CGO_ENABLED=0 and -trimpath into /out/sluice.
#   distroless  the smallest runtime: no shell and no HTTP client. Use it where the platform
#               probes /healthz and /readyz from outside the container (Kubernetes httpGet):
#               docker build --target distroless .
#   runtime     the default (last) stage, which docker-compose.yaml builds. Compose health checks
#               run inside the container, and sluice has no `healthcheck` subcommand, so the image
#               needs an HTTP client of its own. Alpine's base layer has busybox wget (about 8 MB,
#               no package install); debian:12-slim would need curl from apt (about 70 MB more).
#               Same binary, same non-root uid as distroless.
#   prebuilt    the runtime stage around a binary built on the host instead of in the golang
#               image: no Go image, no module download, no network inside the build. The build
#               context holds the binary (named by SLUICE_BINARY) and examples/sluice.yaml:
#                 CGO_ENABLED=0 go build -trimpath -o ctx/sluice ./services/sluice
#                 mkdir -p ctx/examples && cp examples/sluice.yaml ctx/examples/
#                 docker build -f Dockerfile --target prebuilt ctx
#               scripts/lib/compose.sh builds the test stack's image this way.
#
# The base images are build arguments with the upstream defaults, so a machine that reaches
# no image registry can substitute local ones (--build-arg RUNTIME_IMAGE=...).
ARG GO_IMAGE=golang:1.26
ARG DISTROLESS_IMAGE=gcr.io/distroless/static-debian12:nonroot
ARG RUNTIME_IMAGE=alpine:3.22

FROM ${GO_IMAGE} AS build
# go.mod pins a patch release; the image's GOTOOLCHAIN=local would refuse an older image.
ENV GOTOOLCHAIN=auto
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/sluice ./services/sluice
# The state directory (warm-restart snapshots, last-known configuration). It is owned by the
# runtime uid so that an empty named volume mounted on it takes that owner.
RUN mkdir -p /out/state && chown 65532:65532 /out/state

FROM ${DISTROLESS_IMAGE} AS distroless
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY --from=build --chown=65532:65532 /out/state /var/lib/sluice
COPY examples/sluice.yaml /etc/sluice/sluice.yaml
USER 65532:65532
# Relative defaults (the decider's last-known configuration file) land on the writable volume.
WORKDIR /var/lib/sluice
EXPOSE 7070 7080 8080 8000
ENTRYPOINT ["/usr/local/bin/sluice"]

FROM ${RUNTIME_IMAGE} AS prebuilt
ARG SLUICE_BINARY=sluice
COPY ${SLUICE_BINARY} /usr/local/bin/sluice
RUN mkdir -p /var/lib/sluice && chown 65532:65532 /var/lib/sluice
COPY examples/sluice.yaml /etc/sluice/sluice.yaml
USER 65532:65532
WORKDIR /var/lib/sluice
EXPOSE 7070 7080 8080 8000
ENTRYPOINT ["/usr/local/bin/sluice"]

FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY --from=build --chown=65532:65532 /out/state /var/lib/sluice
COPY examples/sluice.yaml /etc/sluice/sluice.yaml
USER 65532:65532
WORKDIR /var/lib/sluice
EXPOSE 7070 7080 8080 8000
ENTRYPOINT ["/usr/local/bin/sluice"]
