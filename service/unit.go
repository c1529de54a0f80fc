package service

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/partition"
)

// A unit is one configured market as the process runs and serves it,
// whatever its source: a market (source mqtt: an MQTT session and a local
// write-ahead log) or a partitioned market (source jetstream: this
// instance's share of a partitioned stream, package partition). Both
// report the same metrics, readiness and board, so an operator's alerts,
// dashboard and page work for either.
type unit interface {
	conf() *config.Config
	// run runs the unit until ctx ends or it fails; drain bounds the
	// shutdown's wait for acks.
	run(ctx context.Context, drain time.Duration) error
	snapshot() metrics.Snapshot
	// notReady says why the unit cannot do its job now, "" when it can.
	notReady() string
	// deadErr is the error that ended the unit, nil while it runs.
	deadErr() error
	// setBoard gives the unit its board feed; called before run.
	setBoard(*board.Feed)
	// extend adds the unit's own endpoints and collectors to its
	// listener's.
	extend(mux *http.ServeMux, reg *prometheus.Registry) error
}

var (
	_ unit = (*market)(nil)
	_ unit = (*partitioned)(nil)
)

func (m *market) conf() *config.Config   { return &m.cfg }
func (m *market) setBoard(f *board.Feed) { m.snk.board = f }
func (m *market) deadErr() error {
	if err := m.dead.Load(); err != nil {
		return *err
	}
	return nil
}
func (m *market) extend(*http.ServeMux, *prometheus.Registry) error { return nil }

// partitioned is a market of source jetstream.
type partitioned struct {
	cfg config.Config
	r   *partition.Runner
}

func newPartitioned(cfg config.Config, deps partition.Deps) (*partitioned, error) {
	r, err := partition.New(cfg, deps)
	if err != nil {
		return nil, err
	}
	return &partitioned{cfg: cfg, r: r}, nil
}

func (p *partitioned) conf() *config.Config       { return &p.cfg }
func (p *partitioned) snapshot() metrics.Snapshot { return p.r.Snapshot() }
func (p *partitioned) notReady() string           { return p.r.NotReady() }
func (p *partitioned) deadErr() error             { return p.r.Dead() }
func (p *partitioned) setBoard(f *board.Feed)     { p.r.SetBoard(f) }

// run runs the partitions; the shutdown's drain is the runner's own
// (config.DefaultDrainTimeout), per partition.
func (p *partitioned) run(ctx context.Context, _ time.Duration) error {
	if err := p.r.Run(ctx); err != nil {
		return fmt.Errorf("market %s: %w", p.cfg.Market, err)
	}
	return nil
}

// extend serves the partitions' ownership at /partitions/MARKET and adds
// their per-partition metrics.
func (p *partitioned) extend(mux *http.ServeMux, reg *prometheus.Registry) error {
	mux.Handle("GET /partitions/"+p.cfg.Market, p.r.StatusHandler())
	if err := reg.Register(p.r.Collector()); err != nil {
		return fmt.Errorf("register partition metrics of %s: %w", p.cfg.Market, err)
	}
	return nil
}
