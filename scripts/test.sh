#!/usr/bin/env bash
# Runs every test of edgeproc: vet, the race-enabled unit and integration
# tests (against a real Mosquitto and a real, embedded NATS server), the
# deployment files with their real tools (promtool for the alert rules,
# systemd-analyze for the unit), and a short run of every fuzz target.
# Installs what is missing from Debian; starts, stops and reconfigures none
# of the machine's services.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib.sh

need_mosquitto # integration tests need a real broker
# The chaos schedules' network faults are nftables rules on the tests' own
# ports (internal/testenv/netfault.go).
command -v nft >/dev/null || [ -x /usr/sbin/nft ] || apt_install nftables
command -v systemd-analyze >/dev/null || apt_install systemd
# The fleet board's tests drive a real headless browser.
command -v chromium >/dev/null || apt_install chromium
# The lake's test reads it with DuckDB's Node.js package, which the test
# installs into .cache/duckdb with npm (~4 s, 70 MB, once).
command -v npm >/dev/null || apt_install nodejs npm

# promtool comes from Debian's prometheus package, unpacked into .cache/
# rather than installed: installing it would also install a Prometheus
# server service on the machine.
PROMTOOL=$(command -v promtool || true)
if [ -z "$PROMTOOL" ]; then
	PROMTOOL=.cache/prometheus/usr/bin/promtool
	if [ ! -x "$PROMTOOL" ]; then
		echo "test.sh: unpacking promtool from Debian's prometheus package into .cache/" >&2
		[ -n "$apt_updated" ] || { $SUDO apt-get update -qq; apt_updated=1; }
		deb=$(mktemp -d)
		(cd "$deb" && chmod 777 . && apt-get download -qq prometheus)
		mkdir -p .cache/prometheus
		dpkg-deb -x "$deb"/prometheus_*.deb .cache/prometheus
		rm -rf "$deb"
	fi
fi

# Deployment files, with the real tools.
"$PROMTOOL" check rules deploy/prometheus/alerts.yml
unit=$(mktemp -d)
trap 'rm -rf "$unit"' EXIT
go build -o "$unit/edgeproc" ./cmd/edgeproc
# verify needs ExecStart's binary to exist: point it at the one just built.
# The daily timer is verified with its service beside it.
units="edgeproc.service edgeproc-daily.service edgeproc-daily.timer"
for u in $units; do
	sed "s#/usr/local/bin/edgeproc#$unit/edgeproc#g" "deploy/systemd/$u" >"$unit/$u"
done
(cd "$unit" && systemd-analyze verify $units)
"$unit/edgeproc" check-config examples/girona.yaml examples/valencia.yaml
# The tests start their own brokers on free loopback ports: the machine's
# own Mosquitto (if any) is left alone, never stopped or reconfigured.

go vet ./...
# The chaos test's 2-minute fault schedule (crashtest): a fixed seed here,
# so that a run is reproducible; `make chaos SEED=… DURATION=10m` explores.
export CHAOS_SEED=${CHAOS_SEED:-1} CHAOS_DURATION=${CHAOS_DURATION:-2m}
# A CI log may keep only its tail: on failure, end with what failed.
log="$unit/test.log"
# The longest packages first: go test starts packages in the order they
# are listed, two at a time on two cores, and partition's ~13 minutes are
# the run's critical path; listed last (./... is alphabetical) it started
# four minutes in, once the slots freed.
if ! go test -race -count=1 -timeout 20m ./partition ./crashtest ./... 2>&1 | tee "$log"; then
	echo "=== test.sh: what failed ==="
	grep -E -A8 -- '^ *--- FAIL|^panic:' "$log" | grep -v 'level=INFO' | tail -100
	grep -A40 '^testenv: the tests still run' "$log" | tail -60
	grep -E '^(FAIL|ok) ' "$log" | grep '^FAIL'
	exit 1
fi

# Fuzz targets, briefly (go test -fuzz takes one target and one package at a time).
# A count, not a duration: with a duration Go 1.26's fuzz coordinator can
# report its own deadline as a failure ("context deadline exceeded", no
# input written) when a worker on a loaded machine answers late
# (go.dev/issue/75804, fixed in Go 1.27); it did so once here.
fuzz() { go test -run '^$' -fuzz "^$2\$" -fuzztime "${FUZZTIME:-20000x}" "$1"; }
fuzz ./gpsnoise FuzzReadGPX
fuzz ./position FuzzDecode
fuzz ./position FuzzDecodeFields
fuzz ./position FuzzDecodeOwnTracks
fuzz ./position FuzzDecode_SameAsBefore
fuzz ./position FuzzDecodeFields_SameAsBefore
fuzz ./position FuzzDecodeOwnTracks_SameAsBefore
fuzz ./replay FuzzReplay
fuzz ./config FuzzParse
fuzz ./engine FuzzRestore
fuzz ./wal FuzzDecodeFrame
fuzz ./wal FuzzFrameRoundTrip
fuzz ./wal FuzzCountDropped
fuzz ./board FuzzEncodeDecode
fuzz ./mqtt FuzzDecodePublish
fuzz ./bridge FuzzCourierKey
fuzz ./bridge FuzzAppendCourierState
fuzz ./lake FuzzReadFile
fuzz ./lake FuzzDecodeSegment
fuzz ./partition FuzzEachBatchEntry
fuzz ./partition FuzzDecodePart
fuzz ./partition FuzzToken
fuzz ./result FuzzParse
# An execution fills a polygon with H3 (~2 ms): fewer of them.
FUZZTIME=${FUZZTIME:-3000x} fuzz ./geo FuzzParseArea
