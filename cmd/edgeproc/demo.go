package main

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"github.com/km0/edgeproc/demo"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o demo.Options
	fs.IntVar(&o.Couriers, "couriers", demo.DefaultCouriers, "simulated couriers, each sending a position every ~5 s")
	fs.DurationVar(&o.Duration, "duration", 0, "stop after this long; 0 = until Ctrl-C")
	fs.Int64Var(&o.Seed, "seed", demo.DefaultSeed, "fleet seed")
	fs.IntVar(&o.MQTTPort, "mqtt-port", 0, "embedded MQTT broker port on 127.0.0.1; 0 = a free one")
	verbose := fs.Bool("v", false, "show the processor's and the fleet's info logs")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{"demo takes [--couriers N] [--duration D] [--seed S] [--mqtt-port P]"}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	o.Out = stdout
	o.Color = isTerminal(stdout)
	_, err := demo.Run(ctx, o)
	return err
}
