package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/metrics"
	"github.com/km0/edgeproc/mqtt"
	"github.com/km0/edgeproc/result"
)

const (
	// queueCap bounds the messages received and not yet pushed. When it is
	// full the MQTT handler blocks, paho stops reading, and the broker keeps
	// the rest in the session queue (it stops at Receive Maximum).
	queueCap = 1024
	// tickEvery is how often the idle-source rule is applied on the wall
	// clock.
	tickEvery = 100 * time.Millisecond
	// openRetryMax caps the delay between two attempts to open the stream
	// while NATS is unreachable at start.
	openRetryMax = 5 * time.Second
	// setupTimeout bounds one attempt to create the stream and bucket.
	setupTimeout = 10 * time.Second
)

// arrived is a received message stamped with its arrival time.
type arrived struct {
	msg     *mqtt.Message
	arrival int64 // ms, wall clock at receipt
}

// market runs one configured market: MQTT source → bounded queue → one
// ingest goroutine owning the engine → sink → bridge.
type market struct {
	cfg  config.Config
	log  *slog.Logger
	deps *Deps
	nc   *nats.Conn

	in         chan arrived
	stopIntake chan struct{} // closed at shutdown: the handler stops queueing

	br  atomic.Pointer[bridge.Bridge]
	src atomic.Pointer[mqtt.Source]
	eng atomic.Pointer[engine.Engine]

	// Owned by the ingest goroutine.
	clock int64 // the processing clock handed to the engine, never decreasing
	line  int64 // inputs pushed by this process

	// Owned by the engine's merger goroutine (the sink).
	buf      []byte
	subjects [len(result.Types)]string
	pubCtx   context.Context // ends when the shutdown drain deadline passes
	lost     atomic.Int64    // results the sink could not hand to the bridge
	errLog   rateLog
}

func newMarket(cfg config.Config, nc *nats.Conn, deps *Deps) *market {
	return &market{
		cfg:        cfg,
		log:        deps.Log.With("market", cfg.Market),
		deps:       deps,
		nc:         nc,
		in:         make(chan arrived, queueCap),
		stopIntake: make(chan struct{}),
		errLog:     rateLog{every: 5 * time.Second},
	}
}

// snapshot is the market's state for metrics and readiness.
func (m *market) snapshot() metrics.Snapshot {
	s := metrics.Snapshot{QueueDepth: len(m.in), QueueCapacity: cap(m.in)}
	if e := m.eng.Load(); e != nil {
		s.Engine, s.HasEngine = e.Stats(), true
	}
	if b := m.br.Load(); b != nil {
		s.Bridge, s.HasBridge, s.StreamReady = b.Stats(), true, true
	}
	if src := m.src.Load(); src != nil {
		s.MQTT, s.HasMQTT = src.Stats(), true
	}
	return s
}

// ready reports whether the market can do its job: MQTT and NATS connected
// and its stream created.
func (m *market) ready() bool {
	b, src := m.br.Load(), m.src.Load()
	return b != nil && src != nil && b.Connected() && src.Connected()
}

// run starts the market and keeps it running until ctx ends, then shuts it
// down: intake stops, the engine hands over what it has, and the bridge
// waits (at most drain) for the acks of every result.
func (m *market) run(ctx context.Context, drain time.Duration) error {
	br, err := m.openBridge(ctx)
	if err != nil || br == nil {
		return err // nil error: ctx ended before NATS was ever reachable
	}
	m.br.Store(br)

	pubCtx, cancelPub := context.WithCancel(context.Background())
	defer cancelPub()
	m.pubCtx = pubCtx
	for _, t := range result.Types {
		m.subjects[t] = br.Config().Subject(t.String())
	}
	ecfg := EngineConfig(m.cfg)
	ecfg.Topic = m.cfg.MQTT.Topic
	ecfg.Shards = m.deps.Shards
	// The bridge coalesces positions per courier and computes the cell
	// when it writes, so this stays a map lookup per position.
	ecfg.OnPosition = br.UpdatePosition
	eng := engine.New(ecfg, m.sink)
	m.eng.Store(eng)

	ingestDone := make(chan struct{})
	go func() {
		defer close(ingestDone)
		m.ingest(eng)
	}()

	url := m.cfg.MQTT.URL
	if url == Embedded {
		url = m.deps.MQTTURL
	}
	src, err := mqtt.Start(ctx, mqtt.Config{
		URL: url, Topic: m.cfg.MQTT.Topic, ClientID: m.cfg.MQTT.ClientID,
		Username: m.cfg.MQTT.Username, Password: m.cfg.MQTT.Password(),
		CAFile: m.cfg.MQTT.CAFile, SessionExpiry: m.cfg.MQTT.SessionExpiry,
	}, m.log, m.handle)
	if err != nil {
		close(m.stopIntake)
		<-ingestDone
		closeCtx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		_ = br.Close(closeCtx)
		return fmt.Errorf("market %s: start mqtt: %w", m.cfg.Market, err)
	}
	m.src.Store(src)
	m.log.Info("market running", "mqtt", url, "topic", m.cfg.MQTT.Topic, "stream", br.Config().Stream)

	<-ctx.Done()
	start := time.Now()
	// Past the drain deadline a result that cannot be published is given up
	// (counted and logged): shutdown must end even if NATS never returns.
	stopPub := time.AfterFunc(drain, cancelPub)
	defer stopPub.Stop()

	close(m.stopIntake)
	<-ingestDone // engine stopped: every result it had is with the bridge
	closeCtx, cancel := context.WithDeadline(context.Background(), start.Add(drain))
	defer cancel()
	// Acks given so far get their last flush here; queued messages that
	// were never pushed stay unacked and are redelivered next time.
	srcErr := src.Close(closeCtx)
	brErr := br.Close(closeCtx)
	if n := m.lost.Load(); n > 0 {
		m.log.Error("results not handed to NATS before the shutdown deadline", "lost", n)
	}
	m.log.Info("market stopped", "took", time.Since(start).Round(time.Millisecond))
	if srcErr != nil || brErr != nil {
		return fmt.Errorf("market %s: shutdown: mqtt: %v; nats: %w", m.cfg.Market, srcErr, brErr)
	}
	return nil
}

// openBridge creates the stream and bucket, retrying while NATS is
// unreachable. It returns nil, nil if ctx ends first.
func (m *market) openBridge(ctx context.Context) (*bridge.Bridge, error) {
	cfg := bridge.Config{
		Market: m.cfg.Market, SubjectPrefix: m.cfg.NATS.SubjectPrefix, Stream: m.cfg.NATS.Stream,
		DuplicateWindow: m.cfg.NATS.DuplicateWindow,
		ComputeCell:     true, CellResolution: m.cfg.Geo.H3Resolution,
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("market %s: %w", m.cfg.Market, err)
	}
	delay := 250 * time.Millisecond
	for {
		octx, cancel := context.WithTimeout(ctx, setupTimeout)
		br, err := bridge.Open(octx, m.nc, cfg, m.log)
		cancel()
		if err == nil {
			return br, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		m.log.Warn("cannot open the JetStream stream yet, retrying", "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(delay):
		}
		delay = min(2*delay, openRetryMax)
	}
}

// handle is the MQTT handler: it stamps the arrival and queues the
// message, blocking while the queue is full (backpressure).
func (m *market) handle(msg *mqtt.Message) {
	a := arrived{msg: msg, arrival: m.deps.Clock().UnixMilli()}
	select {
	case m.in <- a:
	case <-m.stopIntake:
		// Not acked: the broker redelivers it after the restart.
	}
}

// ingest owns the engine: it pushes queued messages in arrival order,
// flushes whenever the queue is momentarily empty (latency over batching),
// and applies the idle rule on a ticker. At shutdown it stops the engine,
// which hands every pending result to the sink.
func (m *market) ingest(eng *engine.Engine) {
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	defer eng.Stop()
	for {
		select {
		case <-m.stopIntake:
			return
		case a := <-m.in:
			m.push(eng, a)
		drain:
			for {
				select {
				case <-m.stopIntake:
					return
				case a := <-m.in:
					m.push(eng, a)
				default:
					break drain
				}
			}
			eng.Flush()
		case <-t.C:
			eng.Tick(m.advance(m.deps.Clock().UnixMilli()))
		}
	}
}

// advance moves the processing clock to now unless it is already later
// (the wall clock may step back; a message may wait in the queue across a
// tick), and returns it.
func (m *market) advance(now int64) int64 {
	m.clock = max(m.clock, now)
	return m.clock
}

func (m *market) push(eng *engine.Engine, a arrived) {
	m.line++
	in := engine.Input{
		Payload: a.msg.Payload, Topic: a.msg.Topic,
		Arrival: m.advance(a.arrival), HasArrival: true, Line: m.line,
	}
	if m.deps.Record != nil {
		m.deps.Record(m.cfg.Market, in)
	}
	// Write-ahead-log seam: the input (with its arrival) is to be appended
	// to the WAL here, and the ack given only once it is durable (contract
	// §8). Until then the ack follows the push.
	eng.Push(&in)
	a.msg.Ack()
}

// sink publishes the engine's results, in order, from the merger
// goroutine. Blocking in Publish (too many results awaiting their ack) is
// the backpressure path back to the engine and to MQTT.
func (m *market) sink(rs []result.Record) {
	br := m.br.Load()
	for i := range rs {
		r := &rs[i]
		m.buf = r.AppendJSON(m.buf[:0])
		if err := br.Publish(m.pubCtx, m.subjects[r.Type], r.Key(), m.buf); err != nil {
			m.lost.Add(1)
			if ok, n := m.errLog.allow(); ok {
				m.log.Error("result not published", "key", r.Key(), "err", err, "suppressed", n)
			}
		}
		switch r.Type {
		case result.NoSignal:
			br.MarkNoSignal(r.Courier, r.End, r.Lat, r.Lon)
		case result.SignalRestored:
			br.MarkOnline(r.Courier)
		}
	}
}

// rateLog lets one line through per period and counts the rest.
type rateLog struct {
	every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (l *rateLog) allow() (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}
