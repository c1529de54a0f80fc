# The README's commands, for convenience.
.PHONY: build test test-short bench demo fuzz chaos
build:
	go build -o edgeproc ./cmd/edgeproc
test:
	./scripts/test.sh
# The fast loop: unit and property tests; every test that starts a server,
# a process, a browser or needs root skips under -short.
test-short:
	go test -short ./...
bench:
	./scripts/bench.sh
demo: build
	./edgeproc demo
# The seeded fault schedules, of the single-process source (crashtest) and
# of the partitioned one (partition): make chaos SEED=42 DURATION=10m;
# without SEED one is drawn and printed.
chaos:
	CHAOS_SEED=$(SEED) CHAOS_DURATION=$(DURATION) go test -count=1 -timeout 0 -run '^TestChaos_' -v ./crashtest ./partition
