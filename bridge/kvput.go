package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/geo"
)

// The courier bucket's writes are the most frequent thing the bridge sends
// (a city fleet: one every few positions). A chunk of them shares one reply
// subscription, whose channel the writer reads itself, and one timer (see
// ack.go for why not nats.go's async publisher).

// kvAcks is the courier writer's reply inbox, its writes numbered in it.
// Owned by the KV writer.
type kvAcks struct {
	sub   *nats.Subscription
	ch    chan *nats.Msg
	inbox inbox
	next  uint64  // number of the next write
	state []uint8 // of the chunk in flight: ackWaiting, ackDone
	timer *time.Timer
	subj  []byte // scratch: a write's subject
	val   []byte // scratch: a write's value
}

const (
	ackWaiting uint8 = iota
	ackDone
)

// subscribeKVAcks opens the inbox. Its channel holds two chunks of replies:
// the one in flight and late replies to a chunk that timed out; a reply
// that finds it full is dropped by nats.go and its write retried.
func subscribeKVAcks(nc *nats.Conn) (*kvAcks, error) {
	a := &kvAcks{inbox: newInbox(nc), ch: make(chan *nats.Msg, 2*kvChunk)}
	sub, err := nc.ChanSubscribe(a.inbox.filter(), a.ch)
	if err != nil {
		return nil, fmt.Errorf("subscribe to the courier bucket's acks: %w", err)
	}
	a.sub = sub
	a.timer = time.NewTimer(time.Hour)
	a.timer.Stop()
	return a, nil
}

// writeChunk publishes ws and waits, up to Config.AckTimeout, for all their
// acks; a write that fails or gets no ack is put back (kvFailed).
func (c *Couriers) writeChunk(ctx context.Context, ws []kvWrite) error {
	a := c.kvAcks
	base := a.next
	a.next += uint64(len(ws))
	if cap(a.state) < len(ws) {
		a.state = make([]uint8, len(ws))
	}
	a.state = a.state[:len(ws)]
	clear(a.state)
	waiting := 0
	var first error
	fail := func(i int, err error) {
		a.state[i] = ackDone
		c.kvFailed(&ws[i], err)
		if first == nil {
			first = fmt.Errorf("write courier %s to %s: %w", ws[i].cs.Courier, c.cfg.KVBucket, err)
		}
	}
	// failWaiting puts back every write still waiting for its ack.
	failWaiting := func(err error) {
		for i, s := range a.state {
			if s == ackWaiting {
				fail(i, err)
			}
		}
	}
	for i := range ws {
		w := &ws[i]
		if w.cs.Cell == "" && c.cfg.ComputeCell {
			w.cs.Cell = geo.Cell(w.cs.Lat, w.cs.Lon, c.cfg.CellResolution).String()
			if w.e != nil && w.e.state.TS == w.cs.TS && w.e.state.Lat == w.cs.Lat && w.e.state.Lon == w.cs.Lon {
				w.e.state.Cell = w.cs.Cell
			}
		}
		var err error
		a.val, err = appendCourierState(a.val[:0], &w.cs)
		if err != nil {
			// NaN or Inf coordinates: retrying cannot help.
			a.state[i] = ackDone
			c.kvErrors.Add(1)
			c.logKV("bridge: encode courier state", w.cs.Courier, err)
			continue
		}
		a.subj = append(append(append(a.subj[:0], "$KV."...), c.cfg.KVBucket...), '.')
		a.subj = append(a.subj, CourierKey(w.cs.Courier)...)
		if err := c.nc.PublishRequest(string(a.subj), a.inbox.reply(base+uint64(i)), a.val); err != nil {
			fail(i, err)
			continue
		}
		waiting++
	}
	if waiting == 0 {
		return first
	}
	a.timer.Reset(c.cfg.AckTimeout)
	defer a.timer.Stop()
	for waiting > 0 {
		select {
		case m := <-a.ch:
			n, ok := a.inbox.attempt(m.Subject)
			if !ok || n < base || n >= base+uint64(len(ws)) || a.state[n-base] != ackWaiting {
				continue // a late reply to an earlier chunk
			}
			i := int(n - base)
			waiting--
			if err := pubAckError(m); err != nil {
				fail(i, err)
				continue
			}
			a.state[i] = ackDone
			c.kvWrites.Add(1)
		case <-a.timer.C:
			failWaiting(errAckTimeout)
			return first
		case <-ctx.Done():
			failWaiting(ctx.Err())
			return first
		}
	}
	return first
}

// appendCourierState appends cs as encoding/json would encode it, without
// reflection; a value only encoding/json gets right (a courier id that
// needs escaping, a float it prints with an exponent) goes through it.
func appendCourierState(dst []byte, cs *CourierState) ([]byte, error) {
	if !plainJSON(cs.Courier) || !plainJSON(cs.Cell) || !plainJSON(cs.Status) || !plainJSON(cs.Area) || !plainFloat(cs.Lat) || !plainFloat(cs.Lon) {
		v, err := json.Marshal(cs)
		return append(dst, v...), err
	}
	dst = append(dst, `{"courier":"`...)
	dst = append(dst, cs.Courier...)
	dst = append(dst, `","lat":`...)
	dst = strconv.AppendFloat(dst, cs.Lat, 'f', -1, 64)
	dst = append(dst, `,"lon":`...)
	dst = strconv.AppendFloat(dst, cs.Lon, 'f', -1, 64)
	dst = append(dst, `,"timestamp_ms":`...)
	dst = strconv.AppendInt(dst, cs.TS, 10)
	dst = append(dst, `,"cell":"`...)
	dst = append(dst, cs.Cell...)
	dst = append(dst, `","status":"`...)
	dst = append(dst, cs.Status...)
	if cs.Area != "" {
		dst = append(dst, `","area":"`...)
		dst = append(dst, cs.Area...)
	}
	return append(dst, `"}`...), nil
}

// plainJSON reports whether s is printable ASCII that encoding/json writes
// as it is (it escapes <, > and & for HTML).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// plainFloat reports whether encoding/json writes f in 'f' format (it
// switches to an exponent below 1e-6 and from 1e21, and fails on NaN and
// Inf).
func plainFloat(f float64) bool {
	a := math.Abs(f)
	return a == 0 || (a >= 1e-6 && a < 1e21)
}
