#!/usr/bin/env bash
# CPU per position, edgeproc vs Mosquitto in the same run: for
# each fleet, `edgeproc run` (WAL group commit, results to JetStream, the
# courier KV) fed through Mosquitto at a fixed rate; loadbench reads
# utime+stime of both processes from /proc/PID/stat over the same interval
# (start of sending → edgeproc has received everything) and prints a CPU:
# line per step: seconds, µs per position and the ratio edgeproc/Mosquitto.
#   hot:  50 couriers at 10 000/s (200 positions/s each), 20 s
#   city: 25 000 couriers, 1 fix / 5 s, timestamps on the clock, 5 000/s, 60 s
# and, for the window close → JetStream latency (loadbench's RESULT line:
# now − emitted_at_ms of every result read back from the stream):
#   c1250: 1 250 couriers, 1 fix / 5 s (250/s), 30 s
#   c50k:  50 000 couriers, 1 fix / 5 s (10 000/s), 30 s
# RUNS (default 2) runs of each; FLEETS (default "hot city c1250 c50k").
# Further arguments go to loadbench: --window-size 5m --window-slide 1m for
# the product's windows, --gomaxprocs 1 for edgeproc as deploy/systemd's
# unit runs it.
# PROC=floor measures cmd/intakefloor in edgeproc's place: the intake
# alone (the same MQTT session and write-ahead log group commit, each
# message acked once durable; INTAKEFLOOR=ack acks at once, without the
# log), no engine, no NATS: the floor under edgeproc's figure. No results,
# so only the hot and city fleets mean anything then.
# The machine is small and shared: the load average is printed with every
# figure.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-bench/out}
runs=${RUNS:-2}
fleets=${FLEETS:-hot city c1250 c50k}
mkdir -p "$out"
. scripts/lib.sh
# loadbench starts its own broker on a free port: the Debian package's
# system broker (if any) is neither needed nor touched.
need_mosquitto
go build -o "$out/loadbench" ./cmd/loadbench
case ${PROC:-edgeproc} in
edgeproc) go build -o "$out/edgeproc" ./cmd/edgeproc; proc=("$out/edgeproc") ;;
floor) go build -o "$out/intakefloor" ./cmd/intakefloor; proc=("$out/intakefloor" --results=false) ;;
*) echo "cpubench: unknown PROC ${PROC} (edgeproc, floor)" >&2; exit 2 ;;
esac
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(go version | cut -d' ' -f3)"
for fleet in $fleets; do
	case $fleet in
	hot) args=(--rates 10000 --interval 5ms --step "${HOT_STEP:-20s}") ;;
	city) args=(--rates 5000 --interval 5s --step "${CITY_STEP:-60s}") ;;
	c1250) args=(--rates 250 --interval 5s --step 30s) ;;
	c50k) args=(--rates 10000 --interval 5s --step 30s) ;;
	*) echo "cpubench: unknown fleet $fleet (hot, city, c1250, c50k)" >&2; exit 2 ;;
	esac
	for i in $(seq "$runs"); do
		echo "# $fleet, run $i: loadbench ${args[*]}"
		"$out/loadbench" --edgeproc "${proc[@]}" --baseline 3s --probe-rate 0 "${args[@]}" "$@" |
			grep -E '^(CPU:|MEMORY:|RESULT|# load|# machine)|sustained'
	done
done
