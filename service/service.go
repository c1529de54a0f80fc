// Package service is edgeproc's process host (`edgeproc run`): it runs
// every configured market, each in its market shell (package market)
// around its source — an MQTT session and a local write-ahead log
// (package mqttsource), or this instance's share of a partitioned
// JetStream stream (package partition) — and serves them.
//
// What the host owns is what one process has once, whatever its markets:
// the NATS connections (markets on the same URL and credentials share
// one, which reconnects forever and retries its first connection, so the
// process starts, not ready, while NATS is down), the HTTP listeners
// (markets whose http.listen addresses are equal share one: /metrics,
// /healthz, /readyz, the fleet board and the web configuration's TLS and
// users), and the markets' lifecycle: Run starts them together and, when
// its context ends, waits until each has drained (Deps.DrainTimeout).
//
// Markets are independent: each has its own engine and watermark, source,
// stream, subjects and bucket, so a quiet market never holds back
// another. A market that cannot start or that fails is logged at once and
// stops alone; /healthz then fails, naming it, so that a supervisor
// restarts the process, and /readyz names every market that is not ready
// and why.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/natsconn"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/mqttsource"
	"github.com/km0/edgeproc/partition"
)

// DefaultDrainTimeout bounds the shutdown wait for outstanding JetStream
// acks (Deps.DrainTimeout).
const DefaultDrainTimeout = defaults.DrainTimeout

// Deps are what Run gets from its caller rather than from the
// configuration. Every field is optional.
type Deps struct {
	// Log receives the service's logs. Default: discarded.
	Log *slog.Logger
	// Registry, when set, also gets every market's metrics collector, so
	// the caller can gather them itself. Each HTTP listener serves its own
	// registry either way.
	Registry prometheus.Registerer
	// NATS is the connection for markets whose nats.url is "embedded". Run
	// does not close it. Other URLs get a connection of their own, one per
	// distinct URL and credentials, that reconnects forever.
	NATS *nats.Conn
	// MQTTURL is the broker for markets whose mqtt.url is "embedded", e.g.
	// "mqtt://127.0.0.1:18830" of the caller's in-process broker.
	MQTTURL string
	// Clock is the processing clock that stamps arrivals and drives the
	// idle rule. Default time.Now.
	Clock func() time.Time
	// Record, when set, is called by a market's driver goroutine with every
	// input just before it is pushed (live, and again when a recovery replays
	// the log), arrival and log index (Line) filled in
	// (for tests: a replay of the recorded inputs must give the same
	// results). It must not modify or retain in.Payload beyond the call
	// unless it copies it; it blocks the market while it runs.
	Record func(market string, in engine.Input)
	// Shards is the number of shard goroutines per market's engine.
	// Default (0) runtime.NumCPU().
	Shards int
	// DrainTimeout bounds the shutdown wait for acks. Default 10s.
	DrainTimeout time.Duration
	// Listening, when set, is called once per HTTP listener with its bound
	// address, before the markets start. Useful with a ":0" port.
	Listening func(addr net.Addr)
}

// Run runs every market of cfgs until ctx ends, then shuts down gracefully
// (intake stopped, engines drained, JetStream acks awaited up to
// Deps.DrainTimeout) and returns nil. It returns an error at once when the
// configurations clash (two markets sharing a name, an MQTT session, a
// stream, a state dir, or an HTTP port under different addresses), when an
// "embedded" URL has no server in deps, when an HTTP listener cannot bind,
// or when a NATS URL is unusable; and an error after shutdown if a market
// could not be drained cleanly.
func Run(ctx context.Context, cfgs []config.Config, deps Deps) error {
	if len(cfgs) == 0 {
		return errors.New("service: no market configured")
	}
	if err := config.CheckClashes(cfgs); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if err := CheckWebConfig(cfgs); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = time.Now
	}
	if deps.DrainTimeout <= 0 {
		deps.DrainTimeout = DefaultDrainTimeout
	}

	conns, err := connectNATS(cfgs, &deps)
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	if err != nil {
		return err
	}

	markets := make([]*market.Market, len(cfgs))
	for i, c := range cfgs {
		nc := deps.NATS
		if c.NATS.URL != Embedded {
			nc = conns[natsKey(c)]
		}
		src, err := newSource(c, nc, &deps)
		if err != nil {
			return fmt.Errorf("service: %w", err)
		}
		markets[i] = market.New(c, src, market.Deps{Log: deps.Log, Conn: nc, Drain: deps.DrainTimeout})
	}

	servers, err := startHTTP(markets, &deps)
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	errs := make([]error, len(markets))
	for i, m := range markets {
		wg.Go(func() { errs[i] = m.Run(ctx) })
	}
	wg.Wait()

	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		errs = append(errs, s.Shutdown(sctx))
	}
	return errors.Join(errs...)
}

// newSource is the source of a market: its MQTT session and write-ahead
// log, or this instance's share of its partitioned stream.
func newSource(c config.Config, nc *nats.Conn, deps *Deps) (market.Source, error) {
	if c.Source == "jetstream" {
		return partition.New(c, partition.Deps{Log: deps.Log, Conn: nc, Shards: deps.Shards, MQTTURL: deps.MQTTURL})
	}
	return mqttsource.New(c, deps.Log, mqttsource.Deps{MQTTURL: deps.MQTTURL, Clock: deps.Clock, Record: deps.Record, Shards: deps.Shards}), nil
}

func natsKey(c config.Config) string { return c.NATS.URL + "\x00" + c.NATS.CredsEnv }

// connectNATS opens one connection per distinct URL and credentials. They
// reconnect forever and also retry the first connection, so the service
// starts (not ready) while NATS is down.
func connectNATS(cfgs []config.Config, deps *Deps) (map[string]*nats.Conn, error) {
	conns := map[string]*nats.Conn{}
	for _, c := range cfgs {
		if c.NATS.URL == Embedded {
			if deps.NATS == nil {
				return conns, fmt.Errorf("service: market %s: nats.url is %q but no NATS connection was provided", c.Market, Embedded)
			}
			continue
		}
		k := natsKey(c)
		if conns[k] != nil {
			continue
		}
		nc, err := natsconn.Connect(c.NATS, "edgeproc", deps.Log)
		if err != nil {
			return conns, fmt.Errorf("service: market %s: %w", c.Market, err)
		}
		conns[k] = nc
	}
	for _, c := range cfgs {
		if c.MQTT.URL == Embedded && deps.MQTTURL == "" {
			return conns, fmt.Errorf("service: market %s: mqtt.url is %q but no broker URL was provided", c.Market, Embedded)
		}
	}
	return conns, nil
}

// startHTTP binds one listener per distinct http.listen address and serves
// /metrics, /healthz and /readyz for the markets on it.
func startHTTP(markets []*market.Market, deps *Deps) ([]*http.Server, error) {
	groups := map[string][]*market.Market{}
	var addrs []string
	for _, m := range markets {
		a := m.Config().HTTP.Listen
		if groups[a] == nil {
			addrs = append(addrs, a)
		}
		groups[a] = append(groups[a], m)
	}
	sort.Strings(addrs)
	var servers []*http.Server
	fail := func(err error) ([]*http.Server, error) {
		for _, s := range servers {
			_ = s.Close()
		}
		return nil, err
	}
	for _, addr := range addrs {
		ms := groups[addr]
		reg := prometheus.NewRegistry()
		var mm []metrics.Market
		for _, m := range ms {
			mm = append(mm, metrics.Market{Name: m.Config().Market, Snapshot: m.Snapshot})
		}
		col := metrics.NewCollector(deps.Clock, mm...)
		reg.MustRegister(col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		if deps.Registry != nil {
			if err := deps.Registry.Register(col); err != nil {
				return fail(fmt.Errorf("service: register metrics of %s: %w", addr, err))
			}
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fail(fmt.Errorf("service: http listen %s: %w", addr, err))
		}
		if deps.Listening != nil {
			deps.Listening(ln.Addr())
		}
		h, err := handler(reg, ms)
		if err != nil {
			_ = ln.Close()
			return fail(fmt.Errorf("service: %w", err))
		}
		// The server's own complaints (a TLS handshake a scanner broke
		// off) go to the log at debug, not to stderr.
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(deps.Log.Handler(), slog.LevelDebug)}
		ln = attachBoard(srv, ln, ms, deps)
		servers = append(servers, srv)
		webConfig := ms[0].Config().HTTP.WebConfig // the same for all (CheckWebConfig)
		go func() {
			if err := serveWeb(srv, ln, webConfig, deps.Log); err != nil && !errors.Is(err, http.ErrServerClosed) {
				deps.Log.Error("http server stopped", "addr", addr, "err", err)
			}
		}()
		deps.Log.Info("http listening", "addr", ln.Addr().String())
	}
	return servers, nil
}

// handler serves the operations endpoints of markets.
func handler(reg *prometheus.Registry, markets []*market.Market) (http.Handler, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for _, m := range markets {
		if err := m.Extend(mux, reg); err != nil {
			return nil, err
		}
	}
	// Markets sharing a listener share its profiler: any of them asks.
	if slices.ContainsFunc(markets, func(m *market.Market) bool { return m.Config().HTTP.Pprof }) {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	// /healthz fails while any market has died, so that a supervisor
	// restarts the process; /readyz also fails while a market cannot hear
	// its broker or deliver to its stream, and says why for each.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		var dead []string
		for _, m := range markets {
			if err := m.Dead(); err != nil {
				dead = append(dead, fmt.Sprintf("%s: %v", m.Config().Market, err))
			}
		}
		if len(dead) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "dead: %s\n", strings.Join(dead, "; "))
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		var notReady []string
		for _, m := range markets {
			if why := m.NotReady(); why != "" {
				notReady = append(notReady, m.Config().Market+": "+why)
			}
		}
		if len(notReady) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", strings.Join(notReady, "; "))
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux, nil
}
