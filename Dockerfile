# edgeproc: multi-stage build. H3 is C (cgo), so the build stage needs a C
# toolchain and the runtime needs glibc: Debian slim, not scratch/alpine.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/edgeproc ./cmd/edgeproc

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home /var/lib/edgeproc edgeproc \
 && mkdir -p /var/lib/edgeproc /etc/edgeproc && chown edgeproc /var/lib/edgeproc
COPY --from=build /out/edgeproc /usr/local/bin/edgeproc
COPY examples/ /etc/edgeproc/
USER edgeproc
WORKDIR /var/lib/edgeproc
# Metrics, /healthz and /readyz listen on 127.0.0.1 by default: set
# http.listen to 0.0.0.0:9464 in the config to scrape from outside.
EXPOSE 9464
ENTRYPOINT ["edgeproc"]
CMD ["run", "--config", "/etc/edgeproc/girona.yaml"]
