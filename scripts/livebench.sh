#!/usr/bin/env bash
# Live-service benchmark (issue #3, performance): on loopback, Mosquitto's
# own QoS 1 pub→sub rate for fleet payloads, then `edgeproc run` fed by the
# simulated fleet at increasing rates (sustained positions/s with no growing
# lag), and the latency from a window's close to its delivery from
# JetStream (p50/p99). Takes about 2–3 minutes; figures go to stdout with
# the machine and its load average, since these machines are small and
# shared. Extra arguments go to loadbench (see: go run ./cmd/loadbench -h),
# e.g. scripts/livebench.sh --rates 5000,10000 --step 20s
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-bench/out}
mkdir -p "$out"

. scripts/lib.sh
# loadbench starts its own broker on a free port: the Debian package's
# system broker (if any) is neither needed nor touched.
need_mosquitto

go build -o "$out/edgeproc" ./cmd/edgeproc
go build -o "$out/loadbench" ./cmd/loadbench
exec "$out/loadbench" --edgeproc "$out/edgeproc" \
	--baseline "${BASELINE:-10s}" --step "${STEP:-10s}" "$@"
