package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/km0/edgeproc/sim"
)

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o sim.Options
	fs.StringVar(&o.URL, "mqtt", "mqtt://127.0.0.1:1883", "broker `URL`")
	fs.StringVar(&o.Market, "market", "", "market `NAME` (required): topic km0/NAME/positions/COURIER")
	fs.StringVar(&o.TopicPrefix, "topic-prefix", "", "topic `PREFIX` before the courier id (default km0/MARKET/positions/)")
	fs.IntVar(&o.Couriers, "couriers", 140, "simulated couriers, each sending a position every ~5 s")
	fs.Float64Var(&o.Rate, "rate", 0, "messages per second across the fleet; 0 = real time")
	fs.DurationVar(&o.Duration, "duration", 0, "how long to send; 0 = until Ctrl-C")
	fs.IntVar(&o.Count, "count", 0, "stop after this many messages; 0 = no limit")
	fs.Int64Var(&o.Seed, "seed", 1, "fleet seed; the same seed sends the same positions")
	fs.Float64Var(&o.DuplicateRate, "dup", 0, "probability that a position is sent twice")
	fs.Float64Var(&o.BadRate, "bad", 0, "probability that a position comes with a malformed payload")
	fs.StringVar(&o.ClientID, "client-id", "", "MQTT client id (default edgeproc-sim-MARKET-PID)")
	verbose := fs.Bool("v", false, "log connection events")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if o.Market == "" || fs.NArg() > 0 {
		return usageError{"sim takes --market M [--mqtt URL] [--couriers N] [--rate R] [--duration D] [--seed S] [--dup P] [--bad P]"}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	st, err := sim.Run(ctx, o, log)
	fmt.Fprintf(stdout, "sim %s: %s\n", o.Market, st)
	return err
}
