#!/usr/bin/env bash
# Runs every test of edgeproc: vet, the race-enabled unit and integration
# tests (against a real Mosquitto and a real, embedded NATS server), and a
# short run of every fuzz target. Installs Mosquitto from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mosquitto >/dev/null && [ ! -x /usr/sbin/mosquitto ]; then
	echo "test.sh: installing mosquitto (integration tests need a real broker)" >&2
	SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
	$SUDO apt-get update -qq
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto mosquitto-clients >/dev/null
fi
# The tests start their own brokers on free loopback ports; the packaged
# service is not needed.
command -v systemctl >/dev/null && systemctl stop mosquitto 2>/dev/null || true

go vet ./...
go test -race -count=1 -timeout 20m ./...

# Fuzz targets, briefly (go test -fuzz takes one target and one package at a time).
fuzz() { go test -run '^$' -fuzz "^$2\$" -fuzztime "${FUZZTIME:-10s}" "$1"; }
fuzz ./gpsnoise FuzzReadGPX
fuzz ./position FuzzDecode
fuzz ./position FuzzDecodeFields
fuzz ./replay FuzzReplay
fuzz ./config FuzzParse
fuzz ./engine FuzzRestore
fuzz ./wal FuzzDecodeFrame
fuzz ./wal FuzzFrameRoundTrip
