// Package service is edgeproc's live deployment (`edgeproc run`): for each
// configured market, an MQTT persistent session feeds the event-time engine,
// whose results go to the market's JetStream stream and courier bucket.
//
// Per market the data path is four parts (market.go), each owning its
// state, data flowing one way:
//
//	intake (MQTT handler) ─Append─▶ log (write-ahead, group commit) ─done, in index order─▶
//	    bounded channel (1024) ─▶ driver (owns the engine) ─sink─▶ bridge ─▶ JetStream, KV
//
// The intake stamps each message's arrival (wall clock, never decreasing)
// and appends it to the market's write-ahead log (state.dir/wal). Only once
// its batch is fsynced (state.wal_sync) does the log hand it, in index
// order, to the driver, which applies it to the engine with Line = its log
// index (the rejected record's key, the same after a recovery) and only
// then acks it to the broker (contract §8). The engine never sees an input
// that a recovery could not see again with the same arrival: every log
// entry, live or replayed, goes through one driver.apply.
//
// Entries are of three kinds (wal.Kind): a position (an MQTT message as
// received), a tick (the idle rule applied at its arrival), and a listen
// (contract §3, deaf is not silent): the intake logs one before the first
// message of every new MQTT connection, or as soon as its subscription is
// granted, so the idle rule counts silence only from there, and it
// appends ticks only while connected and subscribed. An outage of the
// broker or of edgeproc therefore never advances event time by itself:
// the messages the persistent session kept arrive first. A silent market
// logs nothing: the driver asks for a tick (windows.idle_timeout > 0) only
// when the idle rule would reach the earliest timer of a shard
// (engine.TickDue), and writes no checkpoint while only listens were
// applied.
//
// Every state.checkpoint_interval the driver sends a barrier
// through the engine (engine.Checkpoint, tagged with the last log index
// applied); the snapshot is handed, without blocking, to a checkpointer
// goroutine (a checkpoint due while one is in progress is skipped). The
// log after a checkpoint is the outbox of the results emitted since: the
// checkpointer first waits until JetStream has acked every result emitted
// up to the barrier (bridge.Flush), then writes the checkpoint atomically
// (state.dir/checkpoints, package checkpoint) and truncates the log up to
// the previous checkpoint, which is kept as a fallback. A NATS outage
// therefore only delays checkpoints; a crash between emission and ack
// loses nothing: at start the newest good checkpoint is restored, the log
// after it is replayed through the engine, and the re-derived results are
// re-published with the same keys, which JetStream's duplicate window
// drops. Results re-published by a recovery were emitted at most about
// two checkpoint intervals (one if the newest checkpoint is intact), plus
// any NATS outage, plus the downtime and replay, before; so
// nats.duplicate_window must exceed 2 × state.checkpoint_interval +
// DuplicateWindowMargin, and Run warns at start when it does not. The
// worst recovery time is the replay of that much log (over 1 M entries/s).
//
// Shutdown stops intake, syncs the log and applies every durable entry,
// takes a final snapshot, stops the engine, waits (bounded) for the acks,
// writes the final checkpoint if every result was acked, and closes the
// log. Nothing is unbounded: when NATS is slow or away the bridge's
// in-flight bound blocks the sink, the engine blocks Push, the channel
// fills, the log's own bound blocks Append in the handler, and the broker
// keeps the rest in the session queue (contract §7).
//
// Markets are independent: each has its own engine and watermark, MQTT
// session, stream, subjects and bucket, so a quiet market never holds back
// another. Markets on the same NATS URL share one connection. Markets
// whose http.listen addresses are equal share one HTTP listener, which
// serves the metrics of those markets and their readiness; markets on
// different addresses get one listener each. A market that cannot start or
// that fails (its log, its MQTT source) is logged at once and stops alone;
// /healthz then fails, naming it, so that a supervisor restarts the
// process, and /readyz names every market that is not ready and why.
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
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/internal/natsconn"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/partition"
)

// DefaultDrainTimeout bounds the shutdown wait for outstanding JetStream
// acks (Deps.DrainTimeout).
const DefaultDrainTimeout = config.DefaultDrainTimeout

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

	markets := make([]unit, len(cfgs))
	for i, c := range cfgs {
		nc := deps.NATS
		if c.NATS.URL != Embedded {
			nc = conns[natsKey(c)]
		}
		if c.Source != "jetstream" {
			markets[i] = newMarket(c, nc, &deps)
			continue
		}
		p, err := newPartitioned(c, partition.Deps{Log: deps.Log, Conn: nc, Shards: deps.Shards, MQTTURL: deps.MQTTURL})
		if err != nil {
			return fmt.Errorf("service: %w", err)
		}
		markets[i] = p
	}

	servers, err := startHTTP(markets, &deps)
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	errs := make([]error, len(markets))
	for i, m := range markets {
		wg.Go(func() { errs[i] = m.run(ctx, deps.DrainTimeout) })
	}
	wg.Wait()

	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		errs = append(errs, s.Shutdown(sctx))
	}
	return errors.Join(errs...)
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
func startHTTP(markets []unit, deps *Deps) ([]*http.Server, error) {
	groups := map[string][]unit{}
	var addrs []string
	for _, m := range markets {
		a := m.conf().HTTP.Listen
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
			mm = append(mm, metrics.Market{Name: m.conf().Market, Snapshot: m.snapshot})
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
		webConfig := ms[0].conf().HTTP.WebConfig // the same for all (CheckWebConfig)
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
func handler(reg *prometheus.Registry, markets []unit) (http.Handler, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for _, m := range markets {
		if err := m.extend(mux, reg); err != nil {
			return nil, err
		}
	}
	// Markets sharing a listener share its profiler: any of them asks.
	if slices.ContainsFunc(markets, func(m unit) bool { return m.conf().HTTP.Pprof }) {
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
			if err := m.deadErr(); err != nil {
				dead = append(dead, fmt.Sprintf("%s: %v", m.conf().Market, err))
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
			if why := m.notReady(); why != "" {
				notReady = append(notReady, m.conf().Market+": "+why)
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
