package mqttsource

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/internal/ratelog"
	"github.com/km0/edgeproc/mqtt"
	"github.com/km0/edgeproc/wal"
)

// intake owns a market's MQTT session. It stamps each message with its
// arrival (the processing clock, never decreasing in log order) and appends
// it to the log; the driver acks it once the log says it is durable.
//
// It is the one part that knows whether the market can hear (contract §3,
// deaf is not silent): before the first message of every new connection,
// or once a new connection's subscription is granted, it logs a listen
// entry, so silence counts from there; and it appends an idle tick only
// while it is connected and subscribed. It also logs a listen when it
// finds that it could not look for a while: the process was paused
// (SIGSTOP, a suspended VM, a stalled runtime) or the wall clock stepped.
// It looks every tickEvery (watch) and at every message and tick, on the
// monotonic clock, so the first entry appended after such a gap is that
// listen, and the gap is never applied as silence.
type intake struct {
	cfg     mqtt.Config
	log     *slog.Logger
	clock   func() time.Time
	wal     *wal.Log
	durable func(durable) // called by the log's goroutine, in index order
	errLog  ratelog.Limiter

	src atomic.Pointer[mqtt.Source]

	mu      sync.Mutex // orders appends; guards the fields below
	now     int64      // ms, the latest arrival appended
	heard   int64      // ms, the latest message or listen appended
	conn    uint64     // the connection the latest listen was logged for
	looked  time.Time  // the clock's reading at the latest look (observeLocked)
	stopped bool       // nothing more is appended
}

// deafAfter is the longest gap between two looks at the clocks that is
// not deafness: the intake looks every tickEvery, so a gap ten times as
// long means the process did not run (a pause, a stall), and a wall clock
// that moved that much more or less than the monotonic one stepped.
const deafAfter = 10 * tickEvery

// observeLocked reads the clock and returns the arrival stamp of an entry
// appended now (the wall clock, never going back) and whether the intake
// was deaf since its previous look: the monotonic clock moved more than
// deafAfter (it could not look), or the wall clock moved more than
// deafAfter away from it (a step, forward or back).
func (in *intake) observeLocked() (now int64, deaf bool) {
	t := in.clock()
	if !in.looked.IsZero() {
		mono := t.Sub(in.looked) // monotonic when both readings carry it
		wall := time.Duration(t.UnixNano() - in.looked.UnixNano())
		deaf = mono > deafAfter || wall-mono > deafAfter || mono-wall > deafAfter
		if deaf {
			in.log.Warn("the intake could not look at its clock for a while (the process was paused or stalled) or the wall clock stepped; the gap is not counted as silence",
				"monotonic", mono.Round(time.Millisecond), "wall_clock", wall.Round(time.Millisecond))
		}
	}
	in.looked = t
	in.now = max(in.now, t.UnixMilli())
	return in.now, deaf
}

// listenLocked logs that the market hears from now on.
func (in *intake) listenLocked() {
	in.heard = in.now
	in.appendLocked(entry.Entry{Kind: entry.Listen, Arrival: in.now}, nil)
}

// resume says the log's entries, replayed at start, arrived up to
// lastArrival (ms): stamps never go back past it.
func (in *intake) resume(lastArrival int64) {
	in.mu.Lock()
	in.now = max(in.now, lastArrival)
	in.mu.Unlock()
}

// start connects to the broker. Messages may be handled before it returns.
func (in *intake) start(ctx context.Context) error {
	src, err := mqtt.Start(ctx, in.cfg, in.log, in.handle)
	if err != nil {
		return err
	}
	in.src.Store(src)
	return nil
}

// hearing is the source's connection state; nothing before start returns.
func (in *intake) hearing() (conn uint64, up, subscribed bool) {
	if src := in.src.Load(); src != nil {
		return src.Hearing()
	}
	return 0, false, false
}

// handle is the MQTT handler. Append blocks while the log has too much not
// yet durable: that is the backpressure path to the broker.
func (in *intake) handle(msg *mqtt.Message) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stopped {
		return // not acked: the broker redelivers it after the restart
	}
	_, deaf := in.observeLocked()
	if conn, up, _ := in.hearing(); !up || conn != in.conn || deaf {
		// The first message of a new connection (or of one whose up-call
		// has not run yet: then every message until it has gets a listen
		// of its own), or the first after a pause or a clock step.
		// Whatever silence came before was deafness.
		in.listenLocked()
		if up {
			in.conn = conn
		}
	}
	in.heard = in.now
	in.appendLocked(entry.Entry{Arrival: in.now, Topic: msg.Topic, Payload: msg.Payload}, msg)
}

// watch looks at the clocks and the connection every tickEvery until stop
// closes: it logs a listen entry for a new connection whose subscription
// is granted before any message arrives, and one after a pause or a clock
// step.
func (in *intake) watch(ctx context.Context) {
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			in.mu.Lock()
			_, deaf := in.observeLocked()
			if conn, up, sub := in.hearing(); up && sub && (conn != in.conn || deaf) && !in.stopped {
				in.conn = conn
				in.listenLocked()
			}
			in.mu.Unlock()
		}
	}
}

// tick appends an idle tick at the current time if the market has been
// listening on its current connection, and hearing nothing, for at least
// idle ms. It reports whether it did.
func (in *intake) tick(idle int64) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	conn, up, sub := in.hearing()
	if in.stopped || !up || !sub || conn != in.conn {
		return false
	}
	now, deaf := in.observeLocked()
	if deaf {
		in.listenLocked()
		return false
	}
	if now-in.heard < idle {
		return false
	}
	in.appendLocked(entry.Entry{Kind: entry.Tick, Arrival: now}, nil)
	return true
}

// appendLocked appends e; the log's goroutine hands it on once durable.
func (in *intake) appendLocked(e entry.Entry, msg *mqtt.Message) {
	_, err := in.wal.Append(e, func(i uint64, err error) {
		in.durable(durable{index: i, e: e, msg: msg, err: err})
	})
	if err != nil && !errors.Is(err, wal.ErrClosed) {
		if ok, n := in.errLog.Allow(); ok {
			in.log.Error("write-ahead log append failed; message not acknowledged", "err", err, "suppressed", n)
		}
	}
}

// stop ends intake: a handler blocked in Append finishes, later ones
// return without appending (the broker redelivers those messages).
func (in *intake) stop() {
	in.mu.Lock()
	in.stopped = true
	in.mu.Unlock()
}

// close disconnects from the broker, giving the acks made so far their
// last flush.
func (in *intake) close(ctx context.Context) error {
	if src := in.src.Load(); src != nil {
		return src.Close(ctx)
	}
	return nil
}

// ready says why the market cannot hear, or "" when it can.
func (in *intake) ready() string {
	switch _, up, sub := in.hearing(); {
	case in.src.Load() == nil:
		return "mqtt: not started"
	case !up:
		return "mqtt: not connected"
	case !sub:
		return "mqtt: not subscribed"
	}
	return ""
}
