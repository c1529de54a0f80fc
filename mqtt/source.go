// Package mqtt is edgeproc's live position source: one MQTT v5 persistent
// session per market, QoS 1, manual acks.
//
// # Delivery
//
// A Source keeps one connection (github.com/eclipse/paho.golang/autopaho) to
// the broker with a persistent session: Clean Start is never set and the
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
// called from any goroutine and in any order; paho releases acks to the
// broker in receive order only — an acked message waits until every earlier
// message of the same connection is acked too — and flushes them every
// Config.AckInterval. So one message that is never acked stalls the release
// of every later ack on that connection, and with it, once ReceiveMaximum
// messages are outstanding, delivery.
//
// Acks are tied to the connection that delivered the message. After a
// reconnection an Ack for a message of the old connection is dropped (counted
// in Stats.StaleAcks) rather than sent: its packet identifier means nothing,
// or something else, on the new connection, and the broker redelivers the
// message anyway. paho also hands the handler the messages it had buffered
// when a connection drops (it gives no earlier sign of the drop); their acks
// cannot reach the broker either, so a drop costs up to about twice
// ReceiveMaximum duplicates.
//
// # Backpressure
//
// At most Config.ReceiveMaximum messages of a connection are handed to the
// handler and not yet acked (Stats.Outstanding): the broker should stop
// there (MQTT v5 Receive Maximum), and where it does not — Mosquitto 2.0.11
// overshoots once acks flow — the Source holds the next message back until an
// ack frees a slot. paho buffers at most ReceiveMaximum more between the
// socket and the handler, then stops reading the socket (should that outlast
// the keep-alive, paho drops the connection and the broker redelivers what
// was unacked). A handler that blocks (for
// example on a full write-ahead-log queue) therefore stops the flow without
// growing memory; the rest waits in the broker's session queue, which must be
// unbounded or large: Mosquitto's max_queued_messages defaults to 1000 and
// silently drops the excess.
package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/eclipse/paho.golang/paho/session/state"
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
	// Connects counts successful connections (CONNACK received), the first
	// included; Reconnects those after the first.
	Connects, Reconnects uint64
	// SessionsLost counts reconnections on which the broker had no session
	// for us any more (expired or broker state lost): messages published
	// while we were away may be lost.
	SessionsLost uint64
	// Outstanding is the number of messages of the current connection handed
	// to the handler and not yet acked; never more than ReceiveMaximum.
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
	log    *slog.Logger
	handle func(*Message)
	cm     *autopaho.ConnectionManager
	cancel context.CancelFunc
	// ctx ends when Close is called or the context given to Start ends.
	ctx context.Context

	subs sync.WaitGroup // subscribe goroutines, one per connection
	// gen is bumped when a connection comes up and when it goes down; subGen
	// is the gen whose subscription was granted. Subscribed is their
	// equality, so a late SUBACK can never mark a newer connection.
	gen, subGen atomic.Uint64

	// win bounds unacked messages and knows the live connection: a message
	// remembers the client that delivered it, and only that client's acks
	// are sent.
	win *window

	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error

	// listenMu serialises the listening/deaf transitions and their
	// callbacks; listenGen is the connection gen heard on (0: deaf).
	listenMu    sync.Mutex
	listenGen   uint64
	listenSince time.Time

	// unsent counts the acks handed to paho on the current connection
	// whose PUBACK its session state has not written yet, so that Close
	// waits for them instead of guessing how long paho's ack timer takes.
	// A connection that drops takes its unsent acks with it.
	unsent atomic.Int64

	received, redelivered, acked, staleAcks atomic.Uint64
	connects, sessionsLost                  atomic.Uint64
	connected                               atomic.Bool
}

// Start validates cfg, applies defaults and starts connecting. It returns as
// soon as the first connection attempt is under way; it does not wait for the
// broker, which may be down (Connected and Stats tell when it is up). The
// connection is retried with capped backoff until Close is called or ctx
// ends.
//
// handle is called for every message, sequentially, in receive order, from a
// paho goroutine. It owns the *Message it is given (Payload included: it is
// not reused by paho and may be retained). Blocking in handle is the
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
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	log = log.With("broker", u.String(), "client_id", cfg.ClientID)

	s := &Source{cfg: cfg, log: log, handle: handle, win: newWindow(cfg.ReceiveMaximum)}
	ac, err := s.clientConfig(u)
	if err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	cm, err := autopaho.NewConnection(s.ctx, ac)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("mqtt: connect %s: %w", u, err)
	}
	s.cm = cm
	return s, nil
}

// clientConfig maps Config onto autopaho's configuration.
func (s *Source) clientConfig(u *url.URL) (autopaho.ClientConfig, error) {
	cfg := s.cfg
	ac := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     keepAliveSeconds(cfg.KeepAlive),
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         expirySeconds(cfg.SessionExpiry),
		ReconnectBackoff:              backoff(cfg.ReconnectMin, cfg.ReconnectMax),
		ConnectTimeout:                cfg.ConnectTimeout,
		ConnectUsername:               cfg.Username,
		OnConnectionUp:                s.onConnectionUp,
		OnConnectionDown:              s.onConnectionDown,
		OnConnectError:                s.onConnectError,
		Errors:                        pahoLogger{s.log, "autopaho"},
		PahoErrors:                    pahoLogger{s.log, "paho"},
		// Receive Maximum and Maximum Packet Size are not autopaho settings:
		// they go into the CONNECT properties. paho also sizes its inbound
		// buffer from Receive Maximum, which is what bounds memory.
		ConnectPacketBuilder: func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if cp.Properties == nil {
				cp.Properties = &paho.ConnectProperties{}
			}
			rm, mps := cfg.ReceiveMaximum, uint32(cfg.MaxPayload+PacketOverhead)
			cp.Properties.ReceiveMaximum = &rm
			cp.Properties.MaximumPacketSize = &mps
			return cp, nil
		},
		ClientConfig: paho.ClientConfig{
			Session:                    &ackCounter{SessionManager: state.NewInMemory(), unsent: &s.unsent},
			ClientID:                   cfg.ClientID,
			EnableManualAcknowledgment: true,
			SendAcksInterval:           cfg.AckInterval,
			OnPublishReceived:          []func(paho.PublishReceived) (bool, error){s.onPublish},
		},
	}
	if cfg.Password != "" {
		ac.ConnectPassword = []byte(cfg.Password)
	}
	var tc *tls.Config
	if u.Scheme == "mqtts" {
		var err error
		if tc, err = tlsConfig(cfg.CAFile); err != nil {
			return ac, err
		}
		ac.TlsCfg = tc
	}
	// Our own dial, for the buffered connection (see bufConn).
	dial := dialer(cfg.ConnectTimeout, tc)
	ac.AttemptConnection = func(ctx context.Context, _ autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
		return dial(ctx, u)
	}
	return ac, nil
}

// onPublish runs on paho's router goroutine, once per PUBLISH, in order.
func (s *Source) onPublish(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	// QoS 0 messages are never acked, so they take no slot in the window.
	if p.QoS > 0 && !s.win.acquire(s.ctx, pr.Client) {
		return true, nil // closing
	}
	if s.closing.Load() {
		// Unacked, so the broker redelivers it on the next start; handing it
		// to a consumer that is shutting down would only make a duplicate.
		return true, nil
	}
	m := &Message{
		Topic:     p.Topic,
		Payload:   p.Payload,
		Arrival:   time.Now(),
		Duplicate: p.Duplicate(),
		src:       s,
		client:    pr.Client,
		packetID:  p.PacketID,
		qos:       p.QoS,
	}
	s.received.Add(1)
	if m.Duplicate {
		s.redelivered.Add(1)
	}
	s.handle(m)
	return true, nil
}

// onConnectionUp is called by autopaho's connection goroutine; it must not
// block, so the subscription is made on its own goroutine.
func (s *Source) onConnectionUp(cm *autopaho.ConnectionManager, ca *paho.Connack) {
	n := s.connects.Add(1)
	gen := s.gen.Add(1)
	s.connected.Store(true)
	switch {
	case n == 1 && ca.SessionPresent:
		s.log.Info("mqtt connected, resuming session")
	case n == 1:
		s.log.Info("mqtt connected, new session")
	case ca.SessionPresent:
		s.log.Info("mqtt reconnected, session resumed", "reconnects", n-1)
	default:
		s.sessionsLost.Add(1)
		s.log.Warn("mqtt reconnected but the broker had no session: messages published while disconnected may be lost", "reconnects", n-1)
	}
	s.subs.Add(1)
	go func() {
		defer s.subs.Done()
		s.subscribe(cm, gen)
	}()
}

// subscribe (re)subscribes on connection gen, retrying with backoff while
// that connection lasts: a refused subscription (ACL, bad filter) may be fixed
// on the broker side without restarting edgeproc.
func (s *Source) subscribe(cm *autopaho.ConnectionManager, gen uint64) {
	delay := s.cfg.ReconnectMin
	for {
		err := s.subscribeOnce(cm)
		if s.gen.Load() != gen || s.ctx.Err() != nil {
			return
		}
		if err == nil {
			if s.listen(gen) {
				s.log.Info("mqtt subscribed", "topic", s.cfg.Topic, "qos", 1)
			}
			return
		}
		if errors.Is(err, autopaho.ConnectionDownError) || errors.Is(err, paho.ErrConnectionLost) {
			return // the next connection subscribes again
		}
		s.log.Error("mqtt subscribe failed, retrying", "topic", s.cfg.Topic, "retry_in", delay, "err", err)
		select {
		case <-time.After(delay):
		case <-s.ctx.Done():
			return
		}
		delay = min(2*delay, s.cfg.ReconnectMax)
		if s.gen.Load() != gen {
			return
		}
	}
}

func (s *Source) subscribeOnce(cm *autopaho.ConnectionManager) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ConnectTimeout)
	defer cancel()
	sa, err := cm.Subscribe(ctx, &paho.Subscribe{
		Subscriptions: []paho.SubscribeOptions{{
			Topic: s.cfg.Topic,
			QoS:   1,
			// 2 = never send retained messages: a retained position is an
			// old one, and a new session must not ingest it as if it had
			// just arrived.
			RetainHandling: 2,
		}},
	})
	if err != nil {
		return fmt.Errorf("subscribe %q: %w", s.cfg.Topic, err)
	}
	if len(sa.Reasons) != 1 || sa.Reasons[0] < 1 {
		// Reason 0 is "granted QoS 0": messages would arrive without acks or
		// redelivery, which breaks the durability contract.
		return fmt.Errorf("subscribe %q: broker granted %v, want QoS 1", s.cfg.Topic, sa.Reasons)
	}
	return nil
}

// onConnectionDown is called after the connection that onConnectionUp
// reported has fully shut down; returning true keeps reconnecting.
func (s *Source) onConnectionDown() bool {
	s.deaf() // bumps gen: stops the subscribe goroutine of the old connection
	s.win.reset()
	s.unsent.Store(0)
	s.connected.Store(false)
	s.log.Warn("mqtt connection lost, reconnecting")
	return true
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

func (s *Source) onConnectError(err error) {
	if s.ctx.Err() != nil {
		return
	}
	s.log.Warn("mqtt connect failed", "err", err)
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
	return s.connects.Load(), s.connected.Load(), s.isSubscribed()
}

// Connected reports whether a broker connection is up.
func (s *Source) Connected() bool { return s.connected.Load() }

// Stats returns a snapshot of the counters.
func (s *Source) Stats() Stats {
	c := s.connects.Load()
	return Stats{
		Received:     s.received.Load(),
		Redelivered:  s.redelivered.Load(),
		Acked:        s.acked.Load(),
		StaleAcks:    s.staleAcks.Load(),
		Connects:     c,
		Reconnects:   max(c, 1) - 1,
		SessionsLost: s.sessionsLost.Load(),
		Outstanding:  s.win.count(),
		Connected:    s.connected.Load(),
		Subscribed:   s.isSubscribed(),
	}
}

// Close stops delivering messages, gives acks already made one more flush,
// disconnects cleanly (the session stays on the broker) and waits for the
// Source's goroutines, including a handler call in progress. It returns
// ctx.Err() if that takes longer than ctx allows. Messages buffered but not
// yet handed to the handler are dropped unacked: the broker redelivers them.
// Close may be called more than once; later calls return the first result.
func (s *Source) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		// paho sends PUBACKs on a timer; the acks made so far must go out
		// before the DISCONNECT, or they come back as duplicates on the
		// next start.
		if s.connected.Load() {
			s.waitAcksSent(ctx)
		}
		s.cancel()
		err := s.cm.Disconnect(ctx)
		s.deaf()
		s.connected.Store(false)
		s.win.reset()
		if err != nil {
			s.closeErr = fmt.Errorf("mqtt: disconnect: %w", err)
			return
		}
		s.subs.Wait()
	})
	return s.closeErr
}

// waitAcksSent waits until paho has written a PUBACK for every ack handed
// to it on the current connection, at most closeAckTimeout (a connection
// that drops meanwhile never sends them).
func (s *Source) waitAcksSent(ctx context.Context) {
	deadline := time.Now().Add(closeAckTimeout)
	for s.unsent.Load() > 0 {
		if time.Now().After(deadline) || ctx.Err() != nil || !s.connected.Load() {
			return
		}
		time.Sleep(max(s.cfg.AckInterval/2, time.Millisecond))
	}
}

// closeAckTimeout bounds how long Close waits for paho's ack timer.
const closeAckTimeout = 2 * time.Second

// ackCounter is paho's in-memory session state, counting down
// Source.unsent as it writes PUBACKs.
type ackCounter struct {
	session.SessionManager
	unsent *atomic.Int64
}

func (a *ackCounter) Ack(pb *packets.Publish) error {
	if pb.QoS == 1 {
		a.unsent.Add(-1)
	}
	return a.SessionManager.Ack(pb)
}

// pahoLogger routes paho's error logs into slog at warning level.
type pahoLogger struct {
	log    *slog.Logger
	source string
}

func (l pahoLogger) Println(v ...any) {
	l.log.Warn(fmt.Sprint(v...), "component", l.source)
}

func (l pahoLogger) Printf(format string, v ...any) {
	l.log.Warn(fmt.Sprintf(format, v...), "component", l.source)
}
