package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/sim"
)

var simCommand = &command{
	name:    "sim",
	args:    "--market M [--mqtt URL] [--couriers N] [--rate R] [--duration D] [--count N] [--seed S] [--dup P] [--bad P]",
	summary: "publish a simulated courier fleet to an MQTT broker (load generator)",
	help: `Publishes a simulated fleet to km0/MARKET/positions/COURIER with QoS 1:
each courier sends a position every ~5 s with the measured delay profile,
times shifted to now. --rate R sends R messages a second whatever the
fleet's timing; keep --couriers at about 5 × R so that event time stays on
the clock (edgeproc rejects timestamps beyond max_future_skew). --duration
bounds the whole run, the connection included. Prints one summary line.`,
	example: "edgeproc sim --mqtt mqtt://127.0.0.1:1883 --market girona --couriers 50 --duration 1m",
	setup: func(fs *flag.FlagSet) runFunc {
		var o sim.Options
		fs.StringVar(&o.URL, "mqtt", defaults.MQTTURL, "broker `URL`")
		fs.StringVar(&o.Market, "market", "", "market `NAME` (required): topic km0/NAME/positions/COURIER")
		fs.StringVar(&o.TopicPrefix, "topic-prefix", "", "topic `PREFIX` before the courier id (default km0/MARKET/positions/)")
		fs.IntVar(&o.Couriers, "couriers", 140, "simulated couriers, each sending a position every ~5 s")
		fs.Float64Var(&o.Rate, "rate", 0, "messages per second across the fleet; 0 = real time")
		fs.DurationVar(&o.Duration, "duration", 0, "how long to run, connecting included; 0 = until Ctrl-C")
		fs.IntVar(&o.Count, "count", 0, "stop after this many messages; 0 = no limit")
		fs.Int64Var(&o.Seed, "seed", 1, "fleet seed; the same seed sends the same positions")
		fs.Float64Var(&o.DuplicateRate, "dup", 0, "probability that a position is sent twice")
		fs.Float64Var(&o.BadRate, "bad", 0, "probability that a position comes with a malformed payload")
		fs.StringVar(&o.ClientID, "client-id", "", "MQTT client id (default edgeproc-sim-MARKET-PID)")
		tunnels := fs.String("tunnels", "silent", "what a tunnel does to a courier's positions: `MODE` silent (none sent), buffered (queued on the phone, delivered on the way out, minutes late) or on-time")
		fs.Float64Var(&o.Fleet.TunnelFraction, "tunnel-fraction", fleet.DefaultTunnelFraction, "fraction of couriers that ride through tunnels")
		fs.DurationVar(&o.Fleet.TunnelMin, "tunnel-min", fleet.DefaultTunnelMin, "shortest tunnel")
		fs.DurationVar(&o.Fleet.TunnelMax, "tunnel-max", fleet.DefaultTunnelMax, "longest tunnel")
		verbose := fs.Bool("v", false, "log connection events")
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			if o.Market == "" || len(args) > 0 {
				return usageError{"sim takes --market M"}
			}
			mode, ok := fleet.ParseTunnelMode(*tunnels)
			if !ok {
				return usageError{fmt.Sprintf("--tunnels %q: want silent, buffered or on-time", *tunnels)}
			}
			o.Fleet.Tunnel = mode
			st, err := sim.Run(ctx, o, verboseLogger(stderr, *verbose))
			// A run that sent nothing has nothing to summarise: the error
			// says why.
			if err == nil || st.Sent > 0 {
				fmt.Fprintf(stdout, "sim %s: %s\n", o.Market, st)
			}
			return err
		}
	},
}
