# syntax=docker/dockerfile:1
#
# Sink container image: a static Go binary on a distroless, non-root base
# (CA certificates and tzdata included, no shell).
#
#   docker build -t sink .
#   docker run --rm -p 8080:8080 -p 8081:8081 sink                 # server (memory storage)
#   docker run --rm -e SINK_MODE=worker -e SINK_KAFKA_BROKERS=… sink
#
# SINK_MODE selects the role (server by default); every setting is a SINK_*
# environment variable (see the README). The last stage's layout is checked
# by integration/deploy_image_test.go, which builds a FROM scratch copy of it.

ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/sink ./cmd/sink

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sink /usr/local/bin/sink
USER 65532:65532
ENV SINK_MODE=server SINK_GRPC_ADDRESS=:8080 SINK_HTTP_ADDRESS=:8081 SINK_LOG_FORMAT=json
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/sink"]
