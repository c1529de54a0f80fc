// Package sim publishes a simulated courier fleet (package fleet) to an MQTT
// broker: a load generator for edgeproc and the fleet of `edgeproc demo`.
//
// Every fleet event is published with QoS 1 to TopicPrefix+courier, in the
// fleet's arrival order, over one MQTT v5 connection (autopaho). Event and
// arrival times are shifted so that the fleet's timeline starts at the moment
// Run starts: the positions look current to the processor's future-skew check.
//
// Pacing: with Options.Rate 0 the fleet runs in real time (a message is sent
// when its shifted arrival time comes); with Rate > 0 messages go out at that
// many per second, whatever their arrival times. Event time then advances
// Rate / (Couriers / Interval) times faster than the clock, so a rate far
// above the fleet's natural one (140 couriers every 5 s: 28/s) sends
// timestamps into the future, which edgeproc rejects beyond max_future_skew:
// for a load test, scale Couriers with Rate (Couriers = Rate × 5 s keeps
// event time on the clock).
//
// Malformed payloads (Options.BadRate) go out as the fleet made them, with
// unshifted times inside: edgeproc rejects each for its own reason before any
// time check.
//
// At most Options.MaxInflight messages wait for their PUBACK at once; the
// sender blocks beyond that, so a slow broker slows the simulator down instead
// of growing its memory.
package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/eclipse/paho.golang/paho/session/state"

	"github.com/km0/edgeproc/fleet"
)

// Defaults applied by Run to zero Options fields.
const (
	// DefaultMaxInflight is how many messages may await their PUBACK.
	DefaultMaxInflight = 256
	// DefaultConnectTimeout bounds the wait for the first connection.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultDrainTimeout bounds the wait for outstanding PUBACKs at the end.
	DefaultDrainTimeout = 10 * time.Second
)

// Options configures one simulator run.
type Options struct {
	// URL is the broker, mqtt://HOST:PORT (or tls://, mqtts://). Required.
	URL string
	// Market names the market: it prefixes courier ids ("demo-c0001", see
	// fleet.Config.Market) and the default topic. Required.
	Market string
	// TopicPrefix is prepended to the courier id to form the topic.
	// Default "km0/MARKET/positions/".
	TopicPrefix string
	// Couriers is the fleet size. Default 140 (fleet.DefaultCouriers).
	Couriers int
	// Rate is the number of messages per second across the fleet; 0 = real
	// time (each message when its arrival time comes). Default 0.
	Rate float64
	// Duration is how long to send, wall clock; 0 = until ctx ends (or
	// Count is reached).
	Duration time.Duration
	// Count stops the run after this many messages (duplicates and bad
	// payloads included); 0 = no limit.
	Count int
	// Seed selects the fleet; the same Seed gives the same messages apart
	// from the time shift.
	Seed int64
	// DuplicateRate is the probability that a position is sent twice, as a
	// QoS 1 redelivery would (fleet.Config.DuplicateRate). Default 0.
	DuplicateRate float64
	// BadRate is the probability that a position is accompanied by a
	// malformed payload (fleet.Config.BadRate). Default 0.
	BadRate float64
	// ClientID is the MQTT client id. Default "edgeproc-sim-MARKET-PID".
	ClientID string
	// Fleet holds further fleet settings (Interval, tunnels, centre,
	// radius). Its Market, Couriers, Seed, DuplicateRate and BadRate are
	// replaced by the fields above; Start and Duration are ignored.
	Fleet fleet.Config
	// MaxInflight bounds the messages awaiting their PUBACK. Default 256.
	MaxInflight int
	// ConnectTimeout bounds the wait for the first connection. Default 10s.
	ConnectTimeout time.Duration
	// DrainTimeout bounds the wait for outstanding PUBACKs once sending has
	// stopped (also after ctx ends). Default 10s.
	DrainTimeout time.Duration
}

// Stats reports a run.
type Stats struct {
	// Sent counts messages handed to the MQTT client, Duplicates and Bad
	// included.
	Sent uint64
	// Acked counts messages acknowledged by the broker (PUBACK success).
	Acked uint64
	// Errors counts messages refused by the broker (PUBACK reason code ≥
	// 0x80), dropped from the session, or never queued.
	Errors uint64
	// Duplicates counts redelivered copies among Sent.
	Duplicates uint64
	// Bad counts malformed payloads among Sent.
	Bad uint64
	// Shift is what was added to every fleet time (timestamp_ms and
	// arrival), ms: the run's start minus the fleet's start.
	Shift int64
	// Sending is the time from the first message to the last one sent.
	Sending time.Duration
	// Elapsed is the whole run, connection and drain included.
	Elapsed time.Duration
}

// Rate is the achieved sending rate, messages per second (0 for a run of
// fewer than two messages).
func (s Stats) Rate() float64 {
	if s.Sending <= 0 || s.Sent < 2 {
		return 0
	}
	return float64(s.Sent-1) / s.Sending.Seconds()
}

// String is the one-line summary printed by `edgeproc sim`.
func (s Stats) String() string {
	return fmt.Sprintf("sent %d (%d duplicates, %d bad), acked %d, errors %d, %.1f msg/s over %s",
		s.Sent, s.Duplicates, s.Bad, s.Acked, s.Errors, s.Rate(), s.Sending.Round(time.Millisecond))
}

// withDefaults returns a copy of o with defaults filled in, or an error for
// an option that has no sensible default.
func (o Options) withDefaults() (Options, error) {
	if o.URL == "" {
		return o, errors.New("broker URL is required")
	}
	if o.Market == "" {
		return o, errors.New("market is required")
	}
	if o.Rate < 0 || o.Duration < 0 || o.Count < 0 || o.MaxInflight < 0 {
		return o, fmt.Errorf("rate %g, duration %s, count %d, max in-flight %d: must not be negative",
			o.Rate, o.Duration, o.Count, o.MaxInflight)
	}
	if o.TopicPrefix == "" {
		o.TopicPrefix = "km0/" + o.Market + "/positions/"
	}
	if strings.ContainsAny(o.TopicPrefix, "+#") {
		return o, fmt.Errorf("topic prefix %q: wildcards are not allowed in a topic", o.TopicPrefix)
	}
	if o.ClientID == "" {
		o.ClientID = fmt.Sprintf("edgeproc-sim-%s-%d", o.Market, os.Getpid())
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	return o, nil
}

// fleetConfig is the fleet the options describe, unshifted.
func (o Options) fleetConfig() fleet.Config {
	fc := o.Fleet
	fc.Market = o.Market
	fc.Couriers = o.Couriers
	fc.Seed = o.Seed
	fc.DuplicateRate = o.DuplicateRate
	fc.BadRate = o.BadRate
	fc.Start = 0 // the default, so that a Seed means the same fleet in every run
	fc.Duration = 0
	return fc
}

// Run publishes the fleet until Duration has passed, Count messages were
// sent or ctx ends, then waits (at most DrainTimeout) for the outstanding
// PUBACKs and disconnects. Stopping because ctx ended is not an error. The
// error reports a bad option, a broker that could not be reached within
// ConnectTimeout, or messages still unacknowledged after the drain; Stats
// are valid in every case. A nil log discards logs.
func Run(ctx context.Context, opts Options, log *slog.Logger) (Stats, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return Stats{}, err
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return Stats{}, fmt.Errorf("parse broker URL %q: %w", o.URL, err)
	}
	if u.Scheme == "mqtts" {
		u.Scheme = "tls" // autopaho's name for it
	}

	start := time.Now()
	f := fleet.New(o.fleetConfig())
	shift := start.UnixMilli() - f.Config().Start
	stats := Stats{Shift: shift}

	p := newPublisher(o.MaxInflight)
	// The connection outlives ctx: after ctx ends, outstanding PUBACKs are
	// still awaited (bounded by DrainTimeout) before a clean DISCONNECT.
	connCtx, cancelConn := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelConn()
	cm, err := p.connect(connCtx, u, o, log)
	if err != nil {
		return stats, err
	}
	// Connecting counts towards Duration: a run of 2s against a broker
	// that is down ends after 2s, not after ConnectTimeout.
	wait := o.ConnectTimeout
	if o.Duration > 0 {
		wait = min(wait, o.Duration)
	}
	waitCtx, cancelWait := context.WithTimeout(ctx, wait)
	err = cm.AwaitConnection(waitCtx)
	cancelWait()
	if err != nil {
		p.disconnect(cm)
		if ctx.Err() != nil {
			stats.Elapsed = time.Since(start)
			return stats, nil
		}
		return stats, fmt.Errorf("connect to %s within %s: %w", o.URL, wait, p.lastConnectError(err))
	}
	log.Info("sim: connected", "url", o.URL, "client_id", o.ClientID, "shift_ms", shift)

	sendErr := p.send(ctx, cm, f, o, start, &stats)
	stats.Sending = p.sending()

	drainCtx, cancelDrain := context.WithTimeout(context.WithoutCancel(ctx), o.DrainTimeout)
	drainErr := p.drain(drainCtx)
	cancelDrain()
	p.disconnect(cm)

	stats.Acked, stats.Errors = p.acked.Load(), p.errors.Load()
	stats.Elapsed = time.Since(start)
	if sendErr != nil {
		return stats, sendErr
	}
	if drainErr != nil {
		return stats, drainErr
	}
	return stats, nil
}

// publisher owns the connection and the in-flight accounting.
type publisher struct {
	slots  chan struct{} // one token per message awaiting its PUBACK
	acked  atomic.Uint64
	errors atomic.Uint64

	mu         sync.Mutex
	connErr    error
	first, end time.Time // first and last message sent
}

func newPublisher(maxInflight int) *publisher {
	return &publisher{slots: make(chan struct{}, maxInflight)}
}

func (p *publisher) connect(ctx context.Context, u *url.URL, o Options, log *slog.Logger) (*autopaho.ConnectionManager, error) {
	cfg := autopaho.ClientConfig{
		ServerUrls: []*url.URL{u},
		KeepAlive:  20,
		// A fresh session per run, kept across reconnections so that
		// in-flight messages are resent after a dropped connection.
		CleanStartOnInitialConnection: true,
		SessionExpiryInterval:         60,
		ConnectTimeout:                5 * time.Second,
		ReconnectBackoff:              autopaho.NewConstantBackoff(time.Second),
		OnConnectError: func(err error) {
			p.mu.Lock()
			p.connErr = err
			p.mu.Unlock()
			log.Debug("sim: connect attempt failed", "err", err)
		},
		OnConnectionDown: func() bool {
			log.Warn("sim: connection lost; reconnecting")
			return true
		},
		ClientConfig: paho.ClientConfig{
			ClientID: o.ClientID,
			Session:  &ackSession{SessionManager: state.NewInMemory(), done: p.done},
		},
	}
	cm, err := autopaho.NewConnection(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", o.URL, err)
	}
	return cm, nil
}

func (p *publisher) lastConnectError(fallback error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.connErr != nil {
		return p.connErr
	}
	return fallback
}

// done is called once per message when its PUBACK (or its removal from the
// session) arrives; it frees the message's in-flight slot.
func (p *publisher) done(resp packets.ControlPacket) {
	if ack, ok := resp.Content.(*packets.Puback); ok && resp.Type == packets.PUBACK && ack.ReasonCode < 0x80 {
		p.acked.Add(1)
	} else {
		p.errors.Add(1)
	}
	<-p.slots
}

// send publishes events until a stop condition; it returns an error only
// for a failure that makes going on pointless.
func (p *publisher) send(ctx context.Context, cm *autopaho.ConnectionManager, f *fleet.Fleet, o Options, start time.Time, st *Stats) error {
	var deadline <-chan time.Time
	if o.Duration > 0 {
		t := time.NewTimer(o.Duration - time.Since(start))
		defer t.Stop()
		deadline = t.C
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	fleetStart := f.Config().Start
	paceFrom := time.Now()
	var payload []byte
	for n := 0; o.Count == 0 || n < o.Count; n++ {
		e, ok := f.Next()
		if !ok {
			return nil
		}
		// When this message is due: real time follows the fleet's arrival
		// times; a fixed rate ignores them. Messages already due go out
		// back to back, so a late sleep is made up in a burst.
		var due time.Time
		if o.Rate > 0 {
			due = paceFrom.Add(time.Duration(float64(n) / o.Rate * float64(time.Second)))
		} else {
			due = start.Add(time.Duration(e.Arrival-fleetStart) * time.Millisecond)
		}
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return nil
			case <-deadline:
				return nil
			}
		}
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		case <-deadline:
			return nil
		}

		e.TS += st.Shift
		e.Arrival += st.Shift
		payload = fleet.AppendJSON(payload[:0], e, false)
		pub := &paho.Publish{
			QoS:     1,
			Topic:   o.TopicPrefix + e.Courier,
			Payload: append([]byte(nil), payload...), // the queue keeps a reference until sent
		}
		if err := cm.PublishViaQueue(ctx, &autopaho.QueuePublish{Publish: pub}); err != nil {
			<-p.slots
			p.errors.Add(1)
			return fmt.Errorf("queue message %d: %w", n+1, err)
		}
		now := time.Now()
		p.mu.Lock()
		if p.first.IsZero() {
			p.first = now
		}
		p.end = now
		p.mu.Unlock()
		st.Sent++
		if e.Duplicate {
			st.Duplicates++
		}
		if e.Raw != nil {
			st.Bad++
		}
	}
	return nil
}

func (p *publisher) sending() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.end.Sub(p.first)
}

// drain waits until every sent message has its PUBACK, or ctx ends.
func (p *publisher) drain(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for len(p.slots) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d messages still unacknowledged: %w", len(p.slots), ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

func (p *publisher) disconnect(cm *autopaho.ConnectionManager) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = cm.Disconnect(ctx) // best effort: the run's outcome is already decided
}

// ackSession is the client's session state with a tap on PUBLISH
// completions: autopaho's queue sends asynchronously and reports no outcome,
// so the session, which learns of every PUBACK, tells the publisher.
type ackSession struct {
	session.SessionManager
	done func(packets.ControlPacket)
}

func (s *ackSession) AddToSession(ctx context.Context, pk session.Packet, resp chan<- packets.ControlPacket) error {
	if pk.Type() != packets.PUBLISH {
		return s.SessionManager.AddToSession(ctx, pk, resp)
	}
	mine := make(chan packets.ControlPacket, 1)
	if err := s.SessionManager.AddToSession(ctx, pk, mine); err != nil {
		return err
	}
	// One goroutine per in-flight message, bounded by the broker's receive
	// maximum (the session blocks beyond it) and by MaxInflight.
	go func() {
		r := <-mine
		s.done(r)
		resp <- r // paho's channel holds one response, so this never blocks
	}()
	return nil
}
