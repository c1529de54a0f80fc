# edgeproc: multi-stage build. H3 is C (cgo), so the build stage needs a C
# toolchain and the runtime needs glibc: Debian slim, not scratch/alpine.
#
#   docker build -t edgeproc --build-arg VERSION=$(git describe --always) .
#   docker run -v /etc/edgeproc:/etc/edgeproc:ro -v edgeproc-state:/var/lib/edgeproc \
#     -p 9464:9464 edgeproc
#
# The configuration is mounted at /etc/edgeproc/edgeproc.yaml (one market;
# give more with your own command: run --config A --config B). Nothing
# listens beyond the container unless that configuration says so: to scrape
# /metrics from outside, set http.listen: 0.0.0.0:9464 there. state.dir
# should be under /var/lib/edgeproc (the volume), e.g.
# /var/lib/edgeproc/girona.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Without --build-arg VERSION the binary reports "dev": .git stays out of
# the build context, so the go command has no commit to stamp.
ARG VERSION=
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/edgeproc ./cmd/edgeproc

FROM debian:bookworm-slim
# ca-certificates: mqtts:// and tls:// without ca_file use the system pool.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /var/lib/edgeproc edgeproc \
 && mkdir -p /var/lib/edgeproc /etc/edgeproc && chown edgeproc /var/lib/edgeproc
COPY --from=build /out/edgeproc /usr/local/bin/edgeproc
USER edgeproc
WORKDIR /var/lib/edgeproc
# The write-ahead log and checkpoints: they must outlive the container.
VOLUME ["/var/lib/edgeproc"]
EXPOSE 9464
# The binary probes itself (no curl in the image), at the listener its
# configuration names (http.listen; a wildcard host on loopback). A
# command of your own with another --config needs its own HEALTHCHECK.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["edgeproc", "health", "--config", "/etc/edgeproc/edgeproc.yaml"]
ENTRYPOINT ["edgeproc"]
CMD ["run", "--config", "/etc/edgeproc/edgeproc.yaml", "--log-format", "json"]
