package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/lake"
)

type lakeFlags struct {
	dir, market, zone string
	roll              time.Duration
}

// writeLake writes the fleet's valid, non-duplicate positions to a lake,
// one series, the i-th position at log index i, rolling every lk.roll of
// arrival time. Late flags are false: only the engine can judge them.
func writeLake(lk lakeFlags, fl *fleet.Fleet, stdout io.Writer) error {
	loc, err := time.LoadLocation(lk.zone)
	if err != nil {
		return err
	}
	w, err := lake.Open(lake.Options{Dir: lk.dir, Market: lk.market, Location: loc, RollInterval: lk.roll})
	if err != nil {
		return err
	}
	var r lake.Row
	var n uint64
	var next int64
	for {
		e, ok := fl.Next()
		if !ok {
			break
		}
		if e.Raw != nil || e.Duplicate {
			continue
		}
		if e.Arrival >= next {
			w.Tick(time.UnixMilli(e.Arrival))
			next = e.Arrival + 10_000
		}
		n++
		r = lake.Row{Index: n, Courier: append(r.Courier[:0], e.Courier...), TimestampMs: e.TS, ArrivalMs: e.Arrival,
			Lat: e.Lat, Lon: e.Lon, AccuracyM: e.Accuracy, HasAccuracy: true}
		for {
			err := w.Append(&r)
			if err == nil {
				break
			}
			if err != lake.ErrBehind {
				return err
			}
			time.Sleep(10 * time.Millisecond) // the disk is behind: wait for it
		}
	}
	if err := w.Close(context.Background()); err != nil {
		return err
	}
	s := w.Stats()
	fmt.Fprintf(stdout, "fleetgen: %d positions in %d files, %d bytes, under %s\n", s.RowsWritten, s.FilesWritten, s.BytesWritten, lk.dir)
	return nil
}
