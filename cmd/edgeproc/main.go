// Command edgeproc is an edge stream processor for courier GPS positions:
// MQTT in, event-time sliding distance and no-signal sessions, NATS out.
//
//	edgeproc run --config FILE [--config FILE...]
//	edgeproc replay --config FILE [--in FILE|-] [--out FILE|-]
//	edgeproc check-config FILE...
//	edgeproc sim --market M [--mqtt URL] [--rate R] ...
//	edgeproc demo [--couriers N] [--duration D] [--seed S]
//	edgeproc version
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// usageError is a command-line mistake: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"run":          runService,
	"replay":       runReplay,
	"check-config": runCheckConfig,
	"sim":          runSim,
	"demo":         runDemo,
	"version": func(_ context.Context, _ []string, stdout, _ io.Writer) error {
		_, err := fmt.Fprintln(stdout, "edgeproc", version)
		return err
	},
}

const usage = `usage: edgeproc COMMAND [ARGS]

commands:
  run --config FILE [--config FILE...]
                          run the live service, one market per FILE
  replay --config FILE [--in FILE|-] [--out FILE|-] [--shards N]
                          process a JSONL file of positions, write JSONL results
  check-config FILE...    validate market configuration files
  sim --market M [--mqtt URL] [--couriers N] [--rate R] [--duration D] [--seed S] [--dup P] [--bad P]
                          publish a simulated courier fleet to an MQTT broker
  demo [--couriers N] [--duration D] [--seed S]
                          broker, NATS, fleet and processor in one process; prints results
  version                 print the version
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "edgeproc: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err := cmd(ctx, args[1:], stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "edgeproc %s: %v\n", args[0], err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}
