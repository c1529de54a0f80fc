// Command intakefloor is edgeproc's intake and nothing else: the same MQTT
// v5 session (package mqtt), optionally the same write-ahead log (package
// wal, group commit), and each message acked once durable — no engine, no
// NATS, no checkpoints. It stands in for `edgeproc run` under loadbench
// (`loadbench --edgeproc intakefloor --results=false`) to measure the CPU
// that receiving and logging positions costs by itself: the floor under
// edgeproc's CPU per position, for its ratio to Mosquitto's.
//
//	intakefloor run --config FILE
//
// It reads the market's configuration like `edgeproc run` (mqtt, state.dir,
// state.wal_batch_interval, state.wal_batch_max, http.listen) and serves
// /readyz and, on /metrics, edgeproc_positions_received_total for the
// market. INTAKEFLOOR=ack in its environment acks each message at once,
// without the log (the MQTT client alone); the default, wal, acks after
// the group commit. /debug/pprof/profile serves a CPU profile. The log's front is cut every 10 s, as checkpoints
// would let the service cut it.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/mqtt"
	"github.com/km0/edgeproc/wal"
)

func main() {
	if len(os.Args) != 4 || os.Args[1] != "run" || os.Args[2] != "--config" {
		fmt.Fprintln(os.Stderr, "usage: intakefloor run --config FILE")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Args[3], os.Getenv("INTAKEFLOOR"), log); err != nil {
		log.Error("intakefloor", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path, mode string, log *slog.Logger) error {
	cfg, err := config.LoadLive(path)
	if err != nil {
		return err
	}
	var w *wal.Log
	switch mode {
	case "", "wal":
		dir := filepath.Join(cfg.State.Dir, "wal")
		w, _, err = wal.Open(dir, wal.Options{Interval: cfg.State.WALBatchInterval, MaxBatch: cfg.State.WALBatchMax}, log)
		if err != nil {
			return fmt.Errorf("open wal %s: %w", dir, err)
		}
		defer w.Close()
	case "ack":
	default:
		return fmt.Errorf("INTAKEFLOOR=%q: want wal or ack", mode)
	}

	var received atomic.Int64
	handle := func(msg *mqtt.Message) {
		received.Add(1)
		if w == nil {
			msg.Ack()
			return
		}
		e := entry.Entry{Arrival: msg.Arrival.UnixMilli(), Topic: msg.Topic, Payload: msg.Payload}
		if _, err := w.Append(e, func(_ uint64, err error) {
			if err == nil {
				msg.Ack()
			}
		}); err != nil && !errors.Is(err, wal.ErrClosed) {
			log.Error("append", "err", err)
		}
	}
	src, err := mqtt.Start(ctx, market.MQTTConfig(cfg.MQTT), log, handle)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if _, up, sub := src.Hearing(); !up || !sub {
			http.Error(rw, "mqtt: not subscribed", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("/metrics", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(rw, "edgeproc_positions_received_total{market=%q} %d\n", cfg.Market, received.Load())
	})
	// The profile is what this stand-in is for: loopback only, as
	// http.listen always is here.
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTP.Listen, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()

	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// Everything logged is acked before the session closes, as the
			// service drains: the close gives those acks their last flush.
			if w != nil {
				if err := w.Sync(); err != nil {
					return fmt.Errorf("sync wal: %w", err)
				}
			}
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return src.Close(cctx)
		case <-tick.C:
			if w != nil {
				if last := w.LastIndex(); last > w.FirstIndex() {
					if err := w.TruncateFront(last); err != nil {
						return fmt.Errorf("truncate wal: %w", err)
					}
				}
			}
		}
	}
}
