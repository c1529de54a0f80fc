#!/usr/bin/env bash
# Runs every test of edgeproc: vet, the race-enabled unit and integration
# tests (against a real Mosquitto and a real, embedded NATS server), and a
# short run of every fuzz target. Installs Mosquitto, and Chromium for the
# fleet board's browser tests, from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# apt_install PACKAGE...: installs Debian packages the tests need.
apt_install() {
	echo "test.sh: installing $*" >&2
	local sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
	$sudo apt-get update -qq
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
# Integration tests need a real broker.
if ! command -v mosquitto >/dev/null && [ ! -x /usr/sbin/mosquitto ]; then
	apt_install mosquitto mosquitto-clients
fi
# The fleet board's tests drive a real headless browser.
command -v chromium >/dev/null || apt_install chromium
# The tests start their own brokers on free loopback ports; the packaged
# service is not needed.
command -v systemctl >/dev/null && systemctl stop mosquitto 2>/dev/null || true

go vet ./...
go test -race -count=1 -timeout 20m ./...

# Fuzz targets, briefly (go test -fuzz takes one target and one package at a time).
fuzz() { go test -run '^$' -fuzz "^$2\$" -fuzztime "${FUZZTIME:-10s}" "$1"; }
fuzz ./position FuzzDecode
fuzz ./position FuzzDecodeFields
fuzz ./replay FuzzReplay
fuzz ./config FuzzParse
fuzz ./engine FuzzRestore
fuzz ./wal FuzzDecodeFrame
fuzz ./wal FuzzFrameRoundTrip
fuzz ./board FuzzEncodeDecode
