// Package demo is `edgeproc demo`: the whole pipeline in one process, on
// loopback, with nothing to set up.
//
// Run starts an embedded MQTT broker (mochi-mqtt), an embedded NATS server
// with JetStream, the processor (service.Run) with a demo configuration whose
// windows are short enough for every result type to appear within the first
// minute, and a simulated fleet (package sim) publishing in real time. It
// prints the fleet board's URL (a live page of the fleet, package board),
// then what a dispatcher acts on from the results that reach NATS
// (couriers going silent or coming back, rejected inputs) as they come,
// and a status board every 10 s (who is silent and for how long, who is
// stopped, how many move, late and rejected rates), until ctx ends or the
// duration passes; then it stops everything in order (fleet, processor,
// servers), prints the totals and removes its temporary directory.
//
// Everything binds 127.0.0.1. The broker accepts any client (auth.AllowHook),
// which is why it never listens elsewhere.
package demo

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/service"
	"github.com/km0/edgeproc/sim"
)

// gironaArea is the demo's service area, Girona's built-up area drawn by
// hand (README.md): most of the fleet's couriers work inside it, and a few
// drive out of it across its western and southern edges and back.
//
//go:embed girona-area.geojson
var gironaArea []byte

// Market is the demo's market name.
const Market = "demo"

// Timezone is the demo market's time zone (Girona's): the console and the
// fleet board show its clock.
const Timezone = "Europe/Madrid"

// demoMaxBytes bounds the demo's result stream: an hour of the demo's
// fleet (140 couriers, a window every 10 s) is about 25 MB.
const demoMaxBytes = 64 << 20

// Defaults applied by Run to zero Options fields.
const (
	DefaultCouriers      = 140
	DefaultSeed          = 1
	DefaultDuplicateRate = 0.02
	DefaultBadRate       = 0.01
	DefaultTallyEvery    = 10 * time.Second
)

// Timeouts of the start-up and shut-down steps.
const (
	// subscribeTimeout bounds the wait for the processor to subscribe to
	// the broker before the fleet starts (positions sent earlier would
	// reach nobody).
	subscribeTimeout = 30 * time.Second
	// stopTimeout bounds the processor's graceful shutdown.
	stopTimeout = 20 * time.Second
)

// Options configures a demo run. The zero value is the standard demo,
// printing to nowhere: set Out.
type Options struct {
	// Couriers is the simulated fleet size; each sends a position every
	// ~5 s. Default 140.
	Couriers int
	// Duration stops the demo after this long; 0 = until ctx ends.
	Duration time.Duration
	// Seed selects the simulated fleet. Default 1.
	Seed int64
	// MQTTPort is the embedded broker's port on 127.0.0.1; 0 = a free one.
	MQTTPort int
	// DuplicateRate and BadRate are the fleet's share of redelivered and
	// malformed messages (see sim.Options). Defaults 0.02 and 0.01;
	// negative = none.
	DuplicateRate, BadRate float64
	// Out receives the banner, the events, the status boards and the totals.
	// Default io.Discard.
	Out io.Writer
	// Color turns on ANSI colours in the feed (for a terminal).
	Color bool
	// Log receives the processor's, the fleet's and the broker's logs.
	// Default: discarded.
	Log *slog.Logger
	// TallyEvery is the period of the status board. Default 10s.
	TallyEvery time.Duration
	// Ready, when set, is called once every server listens and the fleet
	// is about to start, with their addresses.
	Ready func(Addrs)
	// Command is how the banner's commands run edgeproc (e.g.
	// "./edgeproc", or "go run ./cmd/edgeproc" for a binary go run
	// built). Default "edgeproc".
	Command string
}

// Addrs are the demo's loopback endpoints.
type Addrs struct {
	// MQTT is the broker's host:port.
	MQTT string
	// NATS is the NATS client URL, nats://127.0.0.1:PORT.
	NATS string
	// HTTP is the processor's host:port: the fleet board at /board/,
	// /metrics, /healthz and /readyz.
	HTTP string
}

// Totals summarises a run.
type Totals struct {
	// Results counts the records seen on NATS by type: distance,
	// no_signal, signal_restored, late, rejected.
	Results map[string]uint64
	// Sim is the simulated fleet's report.
	Sim sim.Stats
	// InflightDropped and MessagesDropped are the broker's silent losses
	// (mochi's counters); both should be 0.
	InflightDropped, MessagesDropped int64
}

func (o Options) withDefaults() Options {
	if o.Couriers <= 0 {
		o.Couriers = DefaultCouriers
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	if o.DuplicateRate == 0 {
		o.DuplicateRate = DefaultDuplicateRate
	}
	if o.BadRate == 0 {
		o.BadRate = DefaultBadRate
	}
	o.DuplicateRate, o.BadRate = max(o.DuplicateRate, 0), max(o.BadRate, 0)
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.TallyEvery <= 0 {
		o.TallyEvery = DefaultTallyEvery
	}
	if o.Command == "" {
		o.Command = "edgeproc"
	}
	return o
}

// marketConfig is the processor's configuration for the demo: short windows
// so that distance (20 s windows every 10 s), no_signal (15 s of silence),
// signal_restored, late records (past 20 s of allowed lateness) and dead
// zones (30 s windows) all show up within a minute, Girona's service area,
// which a few couriers leave and enter, and Girona's time zone.
func marketConfig(mqttAddr, httpAddr, stateDir string) (config.Config, error) {
	c := config.Default()
	c.Market = Market
	c.MQTT.URL = "mqtt://" + mqttAddr
	c.MQTT.Topic = "km0/" + Market + "/positions/+"
	c.MQTT.ClientID = "edgeproc-" + Market
	c.NATS.URL = "embedded"
	c.NATS.Stream = "EDGEPROC_DEMO"
	c.Windows.Size = 20 * time.Second
	c.Windows.Slide = 10 * time.Second
	c.Windows.Gap = 15 * time.Second
	c.Windows.ToleratedDelay = 3 * time.Second
	// The delay profile's tail revises windows now and then, and its
	// longest delays are late within the first minute (TestFleet_LateInTheFirstMinute).
	c.Windows.AllowedLateness = 20 * time.Second
	c.Windows.IdleTimeout = 5 * time.Second
	c.Windows.MaxFutureSkew = time.Minute
	c.DeadZones.Window = 30 * time.Second
	c.Timezone = Timezone
	area, err := geo.ParseArea("girona-area.geojson", gironaArea, geo.AreaResolution)
	if err != nil {
		return c, fmt.Errorf("demo service area: %w", err)
	}
	c.Geo.ServiceArea, c.Geo.Area = "girona-area.geojson (embedded)", area
	c.NATS.MaxAge = time.Hour
	c.NATS.MaxBytes = demoMaxBytes
	c.State.Dir = stateDir
	c.HTTP.Listen = httpAddr
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("demo config: %w", err)
	}
	return c, nil
}

// fleetTweaks makes the fleet's tunnels fit the demo's 15 s gap: shorter
// (20–40 s instead of 3.5–6 min) and more frequent, so that no_signal and
// signal_restored appear every few seconds.
func fleetTweaks() fleet.Config {
	return fleet.Config{
		TunnelRate:     20,
		TunnelFraction: 0.25,
		TunnelMin:      20 * time.Second,
		TunnelMax:      40 * time.Second,
		// Round Girona's centre, mostly inside the service area, and a
		// tenth of the fleet round its south-western edge, so that most
		// couriers work inside and a few leave it and come back
		// (TestFleet_MovesAcrossTheServiceArea).
		CenterLat: 41.9794, CenterLon: 2.8214, Radius: 2200,
		RoamFraction: 0.1, RoamLat: 41.955, RoamLon: 2.81, RoamRadius: 2500,
	}
}

// Run runs the demo until ctx ends or Options.Duration passes, then shuts
// down and returns the totals. A clean stop returns a nil error; an error
// means a part failed to start or failed while running.
func Run(ctx context.Context, opts Options) (tot Totals, err error) {
	o := opts.withDefaults()
	log := o.Log
	// The console's clock is the market's, as on the fleet board.
	out := newFeed(o.Out, o.Color, config.Config{Timezone: Timezone}.Location())
	tot.Results = map[string]uint64{}

	srv, err := startServers(o, log)
	if err != nil {
		return tot, err
	}
	defer func() {
		tot.InflightDropped, tot.MessagesDropped = srv.brk.dropped()
		err = errors.Join(err, srv.close())
	}()
	dir, brk, natsURL, svcNC, feedNC := srv.dir, srv.brk, srv.natsURL, srv.svcNC, srv.feedNC
	// Port 0: the service binds a free port and reports it via Listening.
	cfg, err := marketConfig(brk.addr, "127.0.0.1:0", filepath.Join(dir, "state"))
	if err != nil {
		return tot, err
	}
	sub, err := feedNC.Subscribe(cfg.NATS.SubjectPrefix+".>", func(m *nats.Msg) { out.handle(m.Data) })
	if err != nil {
		return tot, fmt.Errorf("demo: subscribe to results: %w", err)
	}
	defer func() {
		for i, n := range out.totals() {
			tot.Results[types[i]] = n
		}
	}()

	// The processor.
	svcDone, httpAddr, stopService := startProcessor(ctx, cfg, svcNC, log)
	defer stopService()

	// Wait for the processor's subscription: the broker keeps nothing for
	// a subscriber that does not exist yet.
	if err := waitSubscribed(ctx, brk, svcDone); err != nil {
		if ctx.Err() != nil {
			return tot, errors.Join(stopService(), drain(sub))
		}
		return tot, errors.Join(fmt.Errorf("demo: %w", err), stopService())
	}

	addrs := Addrs{MQTT: brk.addr, NATS: natsURL}
	addrs.HTTP, _ = httpAddr.Load().(string)
	printBanner(out, o, addrs)
	if o.Ready != nil {
		o.Ready(addrs)
	}

	// The fleet.
	simDone, stopSim := startFleet(ctx, o, brk.addr, log)
	defer stopSim()

	runErr, simRes, simFinished := waitEnd(ctx, o, out, brk, svcDone, simDone)

	// Stop in pipeline order: no new positions, then the processor
	// flushes what it holds, then the feed takes the last results.
	stopSim()
	if !simFinished {
		simRes = <-simDone
		if simRes.err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("demo: %w", simRes.err))
		}
	}
	tot.Sim = simRes.st
	runErr = errors.Join(runErr, stopService())
	runErr = errors.Join(runErr, drain(sub))
	out.board(time.Now(), brokerNote(brk))
	inflight, msgs := brk.dropped()
	out.println(fmt.Sprintf("totals: %s; fleet %s; broker dropped %d in-flight, %d messages",
		totalsLine(out.totals()), simRes.st, inflight, msgs))
	return tot, runErr
}

// servers are what the demo runs beside the processor, on loopback: a
// temporary directory, the MQTT broker, the NATS server, and two NATS
// connections: the processor's, which reconnects forever as the bridge
// wants, and the feed's, as any dashboard would have its own.
type servers struct {
	dir           string
	brk           *broker
	ns            *server.Server
	natsURL       string
	svcNC, feedNC *nats.Conn
}

// startServers starts them; on error it closes what it started.
func startServers(o Options, log *slog.Logger) (s *servers, err error) {
	s = &servers{}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.close())
			s = nil
		}
	}()
	if s.dir, err = os.MkdirTemp("", "edgeproc-demo-"); err != nil {
		return s, fmt.Errorf("demo: create temp dir: %w", err)
	}
	if s.brk, err = startBroker(o.MQTTPort, log.With("component", "mqtt-broker")); err != nil {
		return s, fmt.Errorf("demo: %w", err)
	}
	if s.ns, err = startNATS(s.dir); err != nil {
		return s, fmt.Errorf("demo: %w", err)
	}
	s.natsURL = s.ns.ClientURL()
	if s.svcNC, err = nats.Connect(s.natsURL, nats.Name("edgeproc-demo"), nats.MaxReconnects(-1)); err != nil {
		return s, fmt.Errorf("demo: connect to NATS %s: %w", s.natsURL, err)
	}
	if s.feedNC, err = nats.Connect(s.natsURL, nats.Name("edgeproc-demo-feed")); err != nil {
		return s, fmt.Errorf("demo: connect to NATS %s: %w", s.natsURL, err)
	}
	return s, nil
}

// close closes what started, the last started first.
func (s *servers) close() error {
	var err error
	if s.feedNC != nil {
		s.feedNC.Close()
	}
	if s.svcNC != nil {
		s.svcNC.Close()
	}
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	}
	if s.brk != nil {
		err = s.brk.close()
	}
	if s.dir != "" {
		if rmErr := os.RemoveAll(s.dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("demo: remove %s: %w", s.dir, rmErr))
		}
	}
	return err
}

// waitEnd shows the status board every o.TallyEvery until ctx ends,
// o.Duration passes, the processor stops (an error: it should not) or the
// fleet is done, and says which.
func waitEnd(ctx context.Context, o Options, out *feed, brk *broker, svcDone chan error, simDone chan simResult) (runErr error, simRes simResult, simFinished bool) {
	var deadline <-chan time.Time
	if o.Duration > 0 {
		t := time.NewTimer(o.Duration)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(o.TallyEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, simRes, false
		case <-deadline:
			return nil, simRes, false
		case now := <-tick.C:
			out.board(now, brokerNote(brk))
		case err := <-svcDone:
			runErr = fmt.Errorf("demo: processor stopped: %w", err)
			if err == nil {
				runErr = errors.New("demo: processor stopped unexpectedly")
			}
			svcDone <- err // for stopService
			return runErr, simRes, false
		case simRes = <-simDone:
			if simRes.err != nil {
				runErr = fmt.Errorf("demo: %w", simRes.err)
			}
			return runErr, simRes, true
		}
	}
}

// startProcessor runs the service on cfg in a goroutine of its own, its
// results to svcNC, until stop is called (ctx's values, not its end: the
// demo stops it in pipeline order). done has Run's error; httpAddr the
// listener's address once bound. stop waits at most stopTimeout.
func startProcessor(ctx context.Context, cfg config.Config, svcNC *nats.Conn, log *slog.Logger) (done chan error, httpAddr *atomic.Value, stop func() error) {
	svcCtx, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
	done = make(chan error, 1)
	httpAddr = &atomic.Value{} // string, set by Deps.Listening
	go func() {
		done <- service.Run(svcCtx, []config.Config{cfg}, service.Deps{
			Log:      log.With("component", "service"),
			Registry: prometheus.NewRegistry(),
			NATS:     svcNC,
			Clock:    time.Now,
			Listening: func(a net.Addr) {
				httpAddr.Store(a.String())
			},
		})
	}()
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() {
			stopSvc()
			select {
			case stopErr = <-done:
			case <-time.After(stopTimeout):
				stopErr = fmt.Errorf("processor did not stop within %s", stopTimeout)
			}
		})
		return stopErr
	}
	return done, httpAddr, stop
}

// simResult is how the simulated fleet ended.
type simResult struct {
	st  sim.Stats
	err error
}

// startFleet runs the simulated fleet against the broker at addr until it
// is done or stop is called; done gets how it ended.
func startFleet(ctx context.Context, o Options, addr string, log *slog.Logger) (done chan simResult, stop context.CancelFunc) {
	simCtx, stop := context.WithCancel(ctx)
	done = make(chan simResult, 1)
	go func() {
		st, err := sim.Run(simCtx, sim.Options{
			URL:           "mqtt://" + addr,
			Market:        Market,
			Couriers:      o.Couriers,
			Seed:          o.Seed,
			DuplicateRate: o.DuplicateRate,
			BadRate:       o.BadRate,
			ClientID:      "edgeproc-demo-fleet",
			Fleet:         fleetTweaks(),
			DrainTimeout:  5 * time.Second,
		}, log.With("component", "sim"))
		done <- simResult{st, err}
	}()
	return done, stop
}

// waitSubscribed waits until the broker has a subscription (the processor's)
// or the processor exits, ctx ends or subscribeTimeout passes.
func waitSubscribed(ctx context.Context, brk *broker, svcDone chan error) error {
	deadline := time.NewTimer(subscribeTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for brk.subscriptions() == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-svcDone:
			svcDone <- err // for stopService
			if err == nil {
				return errors.New("processor exited before subscribing")
			}
			return fmt.Errorf("processor: %w", err)
		case <-deadline.C:
			return fmt.Errorf("processor did not subscribe to the broker within %s", subscribeTimeout)
		case <-tick.C:
		}
	}
	return nil
}

// drain delivers the results already received to the feed, then
// unsubscribes.
func drain(sub *nats.Subscription) error {
	if err := sub.Drain(); err != nil {
		return fmt.Errorf("demo: drain result subscription: %w", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for sub.IsValid() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func brokerNote(b *broker) string {
	inflight, msgs := b.dropped()
	if inflight == 0 && msgs == 0 {
		return ""
	}
	return fmt.Sprintf("broker dropped %d in-flight, %d messages", inflight, msgs)
}

func totalsLine(t [len(types)]uint64) string {
	s := ""
	for i, name := range types {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", name, t[i])
	}
	return s
}

// printBanner says what runs where, with commands to watch it from outside.
func printBanner(f *feed, o Options, a Addrs) {
	until := "Ctrl-C"
	if o.Duration > 0 {
		until = o.Duration.String()
	}
	f.println(fmt.Sprintf(`edgeproc demo: %d simulated couriers (seed %d) -> MQTT -> edgeproc -> NATS JetStream, until %s
  windows: distance 20s sliding every 10s, no-signal gap 15s, tolerated delay 3s
  fleet board:          http://%s/board/
  watch the positions:  mosquitto_sub -h 127.0.0.1 -p %s -t 'km0/%s/positions/#' -v
  follow the results:   %s tail --nats %s --market %s   (or: nats sub -s %s 'delivery.dashboard.>')
  metrics:              http://%s/metrics
`, o.Couriers, o.Seed, until, a.HTTP, port(a.MQTT), Market, o.Command, a.NATS, Market, a.NATS, a.HTTP))
}

// port returns the port of a host:port.
func port(hostport string) string {
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	return p
}
