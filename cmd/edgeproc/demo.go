package main

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/km0/edgeproc/demo"
)

var demoCommand = &command{
	name:    "demo",
	args:    "[--couriers N] [--duration D] [--seed S] [--mqtt-port P] [-v]",
	summary: "broker, NATS, fleet and processor in one process, with a live status board",
	help: `Starts, in one process on 127.0.0.1, an embedded MQTT broker, an embedded
NATS server with JetStream, a simulated fleet (with tunnels, duplicates and
bad payloads) and the processor with short windows (20 s sliding every
10 s, 15 s gap), so that every result type shows up within a minute. It
prints the ports, then a status board every 10 s: who is silent and for
how long, who is stopped, how many are moving, late and rejected rates.
Ctrl-C stops it cleanly. Nothing to install.`,
	example: "edgeproc demo --couriers 50 --duration 2m",
	setup: func(fs *flag.FlagSet) runFunc {
		var o demo.Options
		fs.IntVar(&o.Couriers, "couriers", demo.DefaultCouriers, "simulated couriers, each sending a position every ~5 s")
		fs.DurationVar(&o.Duration, "duration", 0, "stop after this long; 0 = until Ctrl-C")
		fs.Int64Var(&o.Seed, "seed", demo.DefaultSeed, "fleet seed")
		fs.IntVar(&o.MQTTPort, "mqtt-port", 0, "embedded MQTT broker port on 127.0.0.1; 0 = a free one")
		verbose := fs.Bool("v", false, "show the processor's and the fleet's info logs")
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			if len(args) > 0 {
				return usageError{"demo takes no arguments"}
			}
			o.Log = verboseLogger(stderr, *verbose)
			o.Out = stdout
			o.Color = isTerminal(stdout)
			o.Command = selfCommand(os.Args[0])
			_, err := demo.Run(ctx, o)
			return err
		}
	},
}

// selfCommand is how to run this edgeproc again, for the demo's banner:
// as it was started (arg0: "./edgeproc", or "edgeproc" from the PATH), or
// "go run ./cmd/edgeproc" for the temporary binary go run builds.
func selfCommand(arg0 string) string {
	if strings.Contains(filepath.ToSlash(arg0), "/go-build") {
		return "go run ./cmd/edgeproc"
	}
	if arg0 == "" {
		return "edgeproc"
	}
	return arg0
}
