# The README's commands, for convenience.
.PHONY: build test bench demo fuzz
build:
	go build -o edgeproc ./cmd/edgeproc
test:
	./scripts/test.sh
bench:
	./scripts/bench.sh
demo: build
	./edgeproc demo
