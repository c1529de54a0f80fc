// Package mqtt is edgeproc's live position source: one MQTT v5 persistent
// session per market, QoS 1, manual acks.
//
// # Delivery
//
// A Source keeps one connection to the broker with a persistent session
// (its own MQTT v5 client: see client for why not paho's autopaho; paho's
// packets package still encodes the rare packets): Clean Start is never set and the
// session outlives disconnections for Config.SessionExpiry, so QoS 1 messages
// published while edgeproc is down or reconnecting are queued by the broker
// and delivered afterwards. The subscription is renewed on every connection.
//
// Each PUBLISH is passed to the handler given to Start, one at a time, in
// receive order. A message is acknowledged to the broker only when the caller
// calls Message.Ack — for edgeproc, once the position is in the write-ahead
// log. A message that is never acked is redelivered by the broker after the
// next reconnection, so the consumer must tolerate duplicates (QoS 1 is
// at-least-once; Stats.Redelivered counts those the broker flagged).
//
// # Ack order
//
// MQTT requires PUBACKs in the order the PUBLISHes were received. Ack may be
// called from any goroutine and in any order; the Source releases acks to
// the broker in receive order only — an acked message waits until every
// earlier message of the same connection is acked too — and writes them out
// within Config.AckInterval. So one message that is never acked stalls the
// release of every later ack on that connection, and with it, once
// ReceiveMaximum messages are outstanding, delivery.
//
// Acks are tied to the connection that delivered the message. After a
// reconnection an Ack for a message of the old connection is dropped (counted
// in Stats.StaleAcks) rather than sent: its packet identifier means nothing,
// or something else, on the new connection, and the broker redelivers the
// message anyway. The messages already read from a connection that then
// drops still reach the handler; their acks cannot reach the broker either.
// The broker resends those messages on the next connection; the ones acked
// by then (too late for the old connection) are acked at once and not
// handed on again (Stats.Resent), and the others come again as duplicates:
// a drop costs at most ReceiveMaximum of them.
//
// # Backpressure
//
// At most Config.ReceiveMaximum messages of a connection are handed to the
// handler and not yet acknowledged to the broker (Stats.Outstanding): the
// broker should stop there (MQTT v5 Receive Maximum), and where it does not
// — Mosquitto 2.0.11 overshoots once acks flow — the Source holds the next
// message back until an ack frees a slot. The handler is called from the
// goroutine that reads the socket, so while it, or that wait, blocks,
// nothing more is read (should that outlast the keep-alive, the ping goes
// unanswered, the connection is dropped and the broker redelivers what was
// unacked). A handler that blocks (for example on a full write-ahead-log
// queue) therefore stops the flow without growing memory; the rest waits in
// the socket and the broker's session queue, which must be unbounded or
// large: Mosquitto's max_queued_messages defaults to 1000 and silently drops
// the excess.
package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/km0/edgeproc/internal/backoff"
	"github.com/km0/edgeproc/internal/ratelog"
)

// Stats is a snapshot of a Source's counters. Counters only grow.
type Stats struct {
	// Received counts PUBLISH packets passed to the handler, redeliveries
	// included.
	Received uint64
	// Redelivered counts received messages with the DUP flag: the broker sent
	// them before, on an earlier connection, and got no ack.
	Redelivered uint64
	// Acked counts Message.Ack calls accepted for release to the broker; the
	// PUBACK goes out within AckInterval once all earlier messages are acked,
	// unless the connection drops first (then the message comes again).
	Acked uint64
	// StaleAcks counts Message.Ack calls for messages of a connection that
	// has gone; the broker redelivers those messages.
	StaleAcks uint64
	// Resent counts redeliveries of messages acked after their connection
	// had gone (StaleAcks): acked at once and not passed to the handler,
	// which has them already.
	Resent uint64
	// Connects counts successful connections (CONNACK received), the first
	// included; Reconnects those after the first.
	Connects, Reconnects uint64
	// SessionsLost counts reconnections on which the broker had no session
	// for us any more (expired or broker state lost): messages published
	// while we were away may be lost.
	SessionsLost uint64
	// Outstanding is the number of messages of the current connection handed
	// to the handler and not yet acknowledged to the broker (acked, in
	// receive order); never more than ReceiveMaximum.
	Outstanding int
	// Connected reports whether a connection is up now.
	Connected bool
	// Subscribed reports whether the subscription was granted with QoS 1 or
	// more on the current connection.
	Subscribed bool
}

// Source is a running MQTT subscription. Create it with Start, stop it with
// Close. Its methods are safe for concurrent use.
type Source struct {
	cfg    Config
	url    *url.URL
	log    *slog.Logger
	handle func(*Message)
	dialer func(context.Context, *url.URL) (*bufConn, error)
	cancel context.CancelFunc
	// ctx ends when Close is called or the context given to Start ends.
	ctx  context.Context
	done chan struct{} // closed when run returns

	// connLog rate-limits the warnings of a broker that cannot be
	// reached: the first at once, then one per doubling step with the
	// count held back, until a connection is up again.
	connLog ratelog.Backoff

	subs sync.WaitGroup // subscribe goroutines, one per connection
	// gen is bumped when a connection comes up and when it goes down; subGen
	// is the gen whose subscription was granted. Subscribed is their
	// equality, so a late SUBACK can never mark a newer connection.
	gen, subGen atomic.Uint64

	mu      sync.Mutex             // orders setting cur against Close
	cur     atomic.Pointer[client] // the live connection, nil while there is none
	closing atomic.Bool
	// handling is held around each handler call, so that Close can wait
	// for the one in progress (and the ack it makes) before its DISCONNECT.
	handling chan struct{}

	closeOnce sync.Once
	closeErr  error

	// listenMu serialises the listening/deaf transitions and their
	// callbacks; listenGen is the connection gen heard on (0: deaf).
	listenMu    sync.Mutex
	listenGen   uint64
	listenSince time.Time

	// resent is what the broker will send again although it was acked.
	resent resent

	received, redelivered, acked, staleAcks, resentAcked atomic.Uint64
	connects, sessionsLost                               atomic.Uint64
}

// Start validates cfg, applies defaults and starts connecting. It returns as
// soon as the first connection attempt is under way; it does not wait for the
// broker, which may be down (Connected and Stats tell when it is up). The
// connection is retried with capped backoff until Close is called or ctx
// ends.
//
// handle is called for every message, sequentially, in receive order, from
// the goroutine that reads the connection. It owns the *Message it is given
// (Payload included: it may be retained). Blocking in handle is the
// backpressure path (see the package doc); a handle that blocks must return
// when the caller shuts down, because Close waits for it. log receives
// connection events; nil discards them.
func Start(ctx context.Context, cfg Config, log *slog.Logger, handle func(*Message)) (*Source, error) {
	if handle == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalidConfig)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	u, tc, err := cfg.check()
	if err != nil {
		return nil, err
	}
	log = log.With("broker", u.String(), "client_id", cfg.ClientID)
	s := &Source{
		cfg: cfg, url: u, log: log, handle: handle,
		dialer:   dialer(cfg.ConnectTimeout, cfg.AckInterval, tc),
		done:     make(chan struct{}),
		handling: make(chan struct{}, 1),
		connLog:  ratelog.Backoff{Min: time.Second, Max: time.Minute},
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	go s.run()
	return s, nil
}

// Check tells whether Start would refuse cfg, as Start itself does: a
// malformed URL or setting, or a ca_file it cannot read. A caller that
// starts its source later (a partitioned market's relay, once it holds
// the lease) finds such an error at once.
func Check(cfg Config) error {
	_, _, err := cfg.withDefaults().check()
	return err
}

// check validates a defaulted Config: the broker URL and, for mqtts://,
// the TLS configuration.
func (c Config) check() (*url.URL, *tls.Config, error) {
	u, err := c.validate()
	if err != nil {
		return nil, nil, err
	}
	var tc *tls.Config
	if u.Scheme == "mqtts" {
		if tc, err = tlsConfig(c.CAFile); err != nil {
			return nil, nil, err
		}
	}
	return u, tc, nil
}

// run connects, serves the connection until it drops, and reconnects with
// backoff until ctx ends. After a connection that lasted, the first attempt
// is at once; one that ends within minLife (the broker refuses what we
// send, or another client with our id takes the session over, again and
// again) counts as a failed attempt, so such a loop backs off instead of
// hammering the broker.
func (s *Source) run() {
	defer close(s.done)
	for attempt := 0; ; attempt++ {
		if d := backoff.Delay(attempt, s.cfg.ReconnectMin, s.cfg.ReconnectMax); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		var c *client
		var err error
		if s.cfg.MayConnect != nil {
			err = s.cfg.MayConnect()
		}
		if err == nil {
			c, err = s.dial(s.ctx)
		}
		if err != nil {
			if s.ctx.Err() == nil {
				if ok, held := s.connLog.Allow(); ok {
					attrs := []any{"err", err}
					if held > 0 {
						attrs = append(attrs, "suppressed", held)
					}
					s.log.Warn("mqtt: cannot connect to the broker", attrs...)
				}
			}
			continue
		}
		if !s.up(c) {
			c.close()
			return
		}
		since := time.Now()
		err = c.serve(s.ctx)
		s.down(c, err)
		if time.Since(since) >= minLife {
			attempt = -1
		}
	}
}

// minLife is how long a connection must last for the next attempt after it
// to go at once.
const minLife = time.Second

// up makes c the live connection and starts its subscription; it reports
// false if the Source is closing.
func (s *Source) up(c *client) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.cur.Store(c)
	if held := s.connLog.Reset(); held > 0 {
		s.log.Info("mqtt connected after failed attempts", "suppressed", held)
	}
	n := s.connects.Add(1)
	gen := s.gen.Add(1)
	switch {
	case n == 1 && c.sessionPresent:
		s.log.Info("mqtt connected, resuming session")
	case n == 1:
		s.log.Info("mqtt connected, new session")
	case c.sessionPresent:
		s.log.Info("mqtt reconnected, session resumed", "reconnects", n-1)
	default:
		s.sessionsLost.Add(1)
		s.log.Warn("mqtt reconnected but the broker had no session: messages published while disconnected may be lost", "reconnects", n-1)
	}
	s.subs.Add(1)
	go func() {
		defer s.subs.Done()
		s.subscribe(c, gen)
	}()
	return true
}

// down retires c once its reader has returned with err.
func (s *Source) down(c *client, err error) {
	s.deaf() // bumps gen: stops the subscribe goroutine of the old connection
	s.cur.Store(nil)
	_ = c.bc.Close()
	if !s.closing.Load() {
		s.log.Warn("mqtt connection lost, reconnecting", "err", err)
	}
}

// deliver hands a PUBLISH read from c to the handler. A QoS 1 message
// first takes its slot in c's inflight; it returns an error only when the
// connection is to be dropped.
func (s *Source) deliver(ctx context.Context, c *client, p publish, topic string) error {
	m := &Message{Topic: topic, Payload: p.payload, Duplicate: p.dup, c: c, id: p.id, qos: p.qos}
	if p.qos > 0 {
		seq, ok := c.in.add(ctx, p.id)
		if !ok {
			// Closing, or the connection is gone; unacked, the broker
			// redelivers it.
			return errors.Join(ctx.Err(), errConnectionDown)
		}
		m.seq = seq
		if s.resent.resends(c, &p, topic) {
			s.resentAcked.Add(1)
			c.in.ack(seq)
			return nil
		}
	}
	s.handling <- struct{}{}
	defer func() { <-s.handling }()
	if s.closing.Load() {
		// Unacked, so the broker redelivers it on the next start; handing it
		// to a consumer that is shutting down would only make a duplicate.
		return nil
	}
	m.Arrival = time.Now()
	s.received.Add(1)
	if m.Duplicate {
		s.redelivered.Add(1)
	}
	s.handle(m)
	return nil
}

// subscribe (re)subscribes on connection gen, retrying with backoff while
// that connection lasts: a refused subscription (ACL, bad filter) may be fixed
// on the broker side without restarting edgeproc.
func (s *Source) subscribe(c *client, gen uint64) {
	for attempt := 1; ; attempt++ {
		err := c.subscribe(s.ctx)
		if s.gen.Load() != gen || s.ctx.Err() != nil {
			return
		}
		if err == nil {
			if s.listen(gen) {
				s.log.Info("mqtt subscribed", "topic", s.cfg.Topic, "qos", 1)
			}
			return
		}
		if errors.Is(err, errConnectionDown) {
			return // the next connection subscribes again
		}
		delay := backoff.Delay(attempt, s.cfg.ReconnectMin, s.cfg.ReconnectMax)
		s.log.Error("mqtt subscribe failed, retrying", "topic", s.cfg.Topic, "retry_in", delay, "err", err)
		select {
		case <-time.After(delay):
		case <-s.ctx.Done():
			return
		case <-c.done:
			return
		}
		if s.gen.Load() != gen {
			return
		}
	}
}

// listen marks connection gen as heard on, unless it is already gone, and
// calls OnListening. It reports whether it did.
func (s *Source) listen(gen uint64) bool {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	if s.gen.Load() != gen || s.closing.Load() {
		return false
	}
	s.subGen.Store(gen)
	s.listenGen, s.listenSince = gen, time.Now()
	if s.cfg.OnListening != nil {
		s.cfg.OnListening(s.listenSince)
	}
	return true
}

// deaf ends the current connection's gen and, if it was heard on, calls
// OnDeaf.
func (s *Source) deaf() {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	s.gen.Add(1)
	if s.listenGen == 0 {
		return
	}
	s.listenGen, s.listenSince = 0, time.Time{}
	if s.cfg.OnDeaf != nil {
		s.cfg.OnDeaf(time.Now())
	}
}

// Listening reports whether the subscription is in place on the live
// connection, and since when (the SUBACK); see Config.OnListening.
func (s *Source) Listening() (bool, time.Time) {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	return s.listenGen != 0, s.listenSince
}

func (s *Source) isSubscribed() bool {
	g := s.gen.Load()
	return g != 0 && s.subGen.Load() == g
}

// Hearing reports what the service needs to tell hearing from deafness
// (contract §3, deaf is not silent): the current connection's number
// (Stats.Connects; every new connection has a new one), whether it is up,
// and whether its subscription was granted. A persistent session may
// deliver messages before the SUBACK, so a message is heard as soon as up
// is true; silence counts only once subscribed is true too.
func (s *Source) Hearing() (conn uint64, up, subscribed bool) {
	return s.connects.Load(), s.Connected(), s.isSubscribed()
}

// Connected reports whether a broker connection is up.
func (s *Source) Connected() bool { return s.cur.Load() != nil }

// Stats returns a snapshot of the counters.
func (s *Source) Stats() Stats {
	c := s.connects.Load()
	st := Stats{
		Received:     s.received.Load(),
		Redelivered:  s.redelivered.Load(),
		Acked:        s.acked.Load(),
		StaleAcks:    s.staleAcks.Load(),
		Resent:       s.resentAcked.Load(),
		Connects:     c,
		Reconnects:   max(c, 1) - 1,
		SessionsLost: s.sessionsLost.Load(),
		Connected:    s.Connected(),
		Subscribed:   s.isSubscribed(),
	}
	if c := s.cur.Load(); c != nil {
		st.Outstanding = c.in.count()
	}
	return st
}

// Close stops delivering messages, lets a handler call in progress finish,
// disconnects cleanly after the acks made so far (the session stays on the
// broker) and waits for the Source's goroutines. It returns ctx.Err() if
// that takes longer than ctx allows. Messages read but not yet handed to the
// handler are dropped unacked: the broker redelivers them. Close may be
// called more than once; later calls return the first result.
func (s *Source) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing.Store(true)
		c := s.cur.Load()
		s.mu.Unlock()
		// A handler call in progress finishes first: the ack it makes goes
		// out before the DISCONNECT. Later messages see closing.
		select {
		case s.handling <- struct{}{}:
			<-s.handling
		case <-ctx.Done():
		}
		s.cancel()
		if c != nil {
			// An Ack writes its PUBACK into the connection's buffer at once,
			// so every ack made so far goes out before the DISCONNECT.
			c.close()
		}
		select {
		case <-s.done:
		case <-ctx.Done():
			s.closeErr = fmt.Errorf("mqtt: disconnect: %w", ctx.Err())
			return
		}
		s.deaf()
		s.subs.Wait()
	})
	return s.closeErr
}
