#!/usr/bin/env bash
# Replay and engine benchmarks: a 500-courier, 2-hour simulated
# fleet (one position every ~5 s, fleet/delay.go's delay profile) replayed end to
# end, then the engine alone, allocations per position and retained state per
# courier. Figures go to stdout; the machine is noted because these
# machines are small and noisy: compare runs with benchstat, not by eye.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-bench/out}
runs=${RUNS:-3}
mkdir -p "$out"

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(go version | cut -d' ' -f3)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
go build -o "$out/edgeproc" ./cmd/edgeproc
if [ ! -s "$out/fleet500.jsonl" ]; then
	go run ./fleet/cmd/fleetgen -couriers 500 -duration 2h -seed 1 -out "$out/fleet500.jsonl"
fi
printf 'market: bench\n' >"$out/bench.yaml"
echo "# replay, file -> results file, $(wc -l <"$out/fleet500.jsonl") positions, $(du -h "$out/fleet500.jsonl" | cut -f1)"
TIMEFORMAT="  wall %Rs  cpu %Us user + %Ss sys"
for i in $(seq "$runs"); do
	time "$out/edgeproc" replay --config "$out/bench.yaml" --in "$out/fleet500.jsonl" --out "$out/results.jsonl"
done
# The same fleet as the lake's Parquet files (fleetgen -lake: one series,
# rolled every 10 min of arrival time), replayed: replay --in a lake folder.
if [ ! -d "$out/lake500" ]; then
	go run ./fleet/cmd/fleetgen -couriers 500 -duration 2h -seed 1 -lake "$out/lake500" -lake-market bench
fi
echo "# replay, lake (Parquet) -> results file, $(du -sh "$out/lake500/positions" | cut -f1)"
for i in $(seq "$runs"); do
	time "$out/edgeproc" replay --config "$out/bench.yaml" --in "$out/lake500/positions/market=bench" --out "$out/results-lake.jsonl"
done
cmp "$out/results.jsonl" "$out/results-lake.jsonl" && echo "  the same results as from JSONL"
echo "# engine alone (decode + watermark + shards + windows + ordering), per position"
go test -run '^$' -bench 'BenchmarkEngine' -benchtime 3x -count "$runs" ./engine | tee "$out/engine.txt" | grep -E 'Benchmark|ns/position'
echo "# retained state per active courier (20 000 couriers, steady state)"
go test -run '^$' -bench 'BenchmarkStatePerCourier' -benchtime 1x ./engine | grep Benchmark
echo "# decoder"
go test -run '^$' -bench 'BenchmarkDecode' -benchmem ./position | grep Benchmark
