// Command fleetgen writes a replay file of a simulated courier fleet: one
// JSON position per line, with arrival_ms, in arrival order (see package
// fleet). The replay benchmark and integration tests use it:
//
//	fleetgen -couriers 500 -duration 2h -seed 1 -out replay.jsonl
//
// With -lake DIR it writes the fleet's valid, non-duplicate positions to a
// lake instead (package lake: the files the service writes, rolled every
// -lake-roll of arrival time), for `edgeproc daily` and `replay --in`:
//
//	fleetgen -couriers 25000 -duration 24h -lake lake -lake-market bench
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/km0/edgeproc/fleet"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "fleetgen:", err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleetgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg fleet.Config
	var start, out string
	fs.IntVar(&cfg.Couriers, "couriers", fleet.DefaultCouriers, "number of couriers")
	fs.DurationVar(&cfg.Duration, "duration", time.Hour, "event-time span to generate (must be > 0)")
	fs.DurationVar(&cfg.Interval, "interval", fleet.DefaultInterval, "mean time between two positions of a courier")
	fs.Int64Var(&cfg.Seed, "seed", 1, "random seed (same seed, same file)")
	fs.StringVar(&start, "start", "", "event time of the first positions: ms since the epoch or RFC 3339 (default 2026-01-05T12:00:00Z)")
	fs.StringVar(&cfg.Market, "market", "", "optional prefix of courier ids")
	fs.Float64Var(&cfg.TunnelRate, "tunnel-rate", fleet.DefaultTunnelRate, "tunnels per hour of driving of a tunnel-prone courier (negative: none)")
	fs.Float64Var(&cfg.DuplicateRate, "dup", 0, "probability that a position is delivered twice")
	fs.Float64Var(&cfg.LateRate, "late", 0, "probability that a position is delivered 1-4 min late")
	fs.Float64Var(&cfg.BadRate, "bad", 0, "probability of an extra malformed payload per position")
	fs.StringVar(&out, "out", "-", "output file, - for stdout")
	var lk lakeFlags
	fs.StringVar(&lk.dir, "lake", "", "write a lake under this `DIR` instead of JSONL")
	fs.StringVar(&lk.market, "lake-market", "bench", "the lake's market")
	fs.StringVar(&lk.zone, "lake-timezone", "UTC", "the lake's time zone (its dates)")
	fs.DurationVar(&lk.roll, "lake-roll", 10*time.Minute, "the lake's roll interval, in arrival time")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if cfg.Duration <= 0 {
		return fmt.Errorf("-duration %v: must be > 0 (a replay file must end)", cfg.Duration)
	}
	if start != "" {
		ms, err := parseStart(start)
		if err != nil {
			return err
		}
		cfg.Start = ms
	}

	if lk.dir != "" {
		return writeLake(lk, fleet.New(cfg), stdout)
	}
	w := stdout
	var f *os.File
	if out != "-" {
		var err error
		if f, err = os.Create(out); err != nil {
			return fmt.Errorf("create %s: %w", out, err)
		}
		defer f.Close() // second close after the explicit one is harmless
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	if err := write(bw, fleet.New(cfg)); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return fmt.Errorf("close %s: %w", out, err)
		}
	}
	return nil
}

func write(w *bufio.Writer, fl *fleet.Fleet) error {
	buf := make([]byte, 0, 256)
	for {
		e, ok := fl.Next()
		if !ok {
			return nil
		}
		buf = fleet.AppendJSON(buf[:0], e, true)
		buf = append(buf, '\n')
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
}

func parseStart(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms <= 0 {
			return 0, fmt.Errorf("-start %s: must be > 0", s)
		}
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0, fmt.Errorf("-start %q: want ms since the epoch or RFC 3339", s)
	}
	if t.UnixMilli() <= 0 {
		return 0, fmt.Errorf("-start %s: must be after 1970", s)
	}
	return t.UnixMilli(), nil
}
