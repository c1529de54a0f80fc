package mqttsource

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/entry"
	"github.com/km0/edgeproc/mqtt"
)

// durable is a log entry that is on disk, on its way to the driver, with
// the message to ack once it is applied (nil for ticks, listens and
// replayed entries).
type durable struct {
	index uint64
	e     entry.Entry
	msg   *mqtt.Message
	err   error // the log could not make the entry durable
}

// driver owns a market's engine. Every log entry reaches the engine through
// apply, in log order: live entries from the log's goroutine, and at start
// the entries a recovery replays after the checkpoint. It acks a live
// message once applied, sends a checkpoint barrier every
// state.checkpoint_interval, and decides when an idle tick is due.
type driver struct {
	cfg    config.Config
	log    *slog.Logger
	record func(market string, in engine.Input) // Deps.Record
	shards int                                  // Deps.Shards
	eng    *engine.Engine

	// in carries durable entries, a group commit's at a time, in log index
	// order, from the log's goroutine (handoff). Closed at shutdown once the
	// log has nothing more to hand over.
	in chan []durable
	h  *handoff

	applied uint64 // the last log index applied
	// changed is set when a position or a tick has been applied since the
	// last checkpoint started: listens alone change nothing worth a
	// checkpoint, so a silent market writes none.
	changed     bool
	tickPending bool  // a tick was appended and has not come back yet
	fatal       error // the log failed: nothing more can be acked

	// What the driver asks of its neighbours, set by the market: the
	// processing clock, an idle tick of the intake (it reports whether it
	// appended one), and the checkpointer's barriers (periodic, and the
	// final one at shutdown).
	clock      func() time.Time
	tick       func(idle int64) bool
	checkpoint func(*driver)
	final      func(*driver)
}

// restore makes eng, restored from the checkpoint at log index tag, the
// driver's engine, before the log after tag is replayed through apply.
func (d *driver) restore(eng *engine.Engine, tag uint64) {
	d.eng, d.applied = eng, tag
}

// replayed ends a recovery's replay: what follows is live.
func (d *driver) replayed() {
	d.eng.Flush()
	d.tickPending = false
}

// apply hands one log entry to the engine (engine.Apply): every kind,
// live and at recovery alike, goes through here, so a recovery decides
// what the live run decided: a position's log index is the line of a
// rejected record's key, a tick applies the idle rule at its arrival, a
// listen says the source (re)started listening then, so the silence
// before it was deafness, not evidence (contract §3).
func (d *driver) apply(index uint64, e entry.Entry) {
	if d.record != nil && e.Kind == entry.Position {
		d.record(d.cfg.Market, engine.EntryInput(index, e))
	}
	d.eng.Apply(index, e)
	switch e.Kind {
	case entry.Position:
		d.changed = true
	case entry.Tick:
		d.tickPending = false
		d.changed = true
	}
	d.applied = index
}

// take applies a live durable entry and acks its message. It reports false
// when the log failed: the message stays unacked and the market must stop.
func (d *driver) take(x durable) bool {
	if x.err != nil {
		if d.fatal == nil {
			d.fatal = fmt.Errorf("write-ahead log: %w", x.err)
			d.log.Error("write-ahead log failed; stopping the market", "index", x.index, "err", x.err)
		}
		return false
	}
	if d.fatal != nil {
		return false
	}
	d.apply(x.index, x.e)
	if x.msg != nil {
		x.msg.Ack()
	}
	return true
}

// run applies live entries until d.in is closed, flushing to the shards
// whenever none is waiting (latency over batching). Every tickEvery it asks
// the intake for an idle tick if one would fire something; every
// checkpoint interval it starts a checkpoint. When d.in is closed it takes
// the final snapshot and stops the engine, which hands every pending result
// to the sink. fail is called once if the log fails.
func (d *driver) run(fail func()) {
	defer d.eng.Stop()
	ckpt := time.NewTicker(d.cfg.State.CheckpointInterval)
	defer ckpt.Stop()
	var idleC <-chan time.Time
	idle := d.cfg.Windows.IdleTimeout.Milliseconds()
	if idle > 0 {
		t := time.NewTicker(tickEvery)
		defer t.Stop()
		idleC = t.C
	}
	for {
		select {
		case b, open := <-d.in:
			// Take everything already waiting, then hand it to the shards.
			for waiting := open; waiting; {
				for _, x := range b {
					if !d.take(x) {
						fail()
					}
				}
				d.h.recycle(b)
				select {
				case b, open = <-d.in:
					waiting = open
				default:
					waiting = false
				}
			}
			if !open {
				d.final(d)
				return
			}
			d.eng.Flush()
		case <-idleC:
			// A silent market logs nothing until a tick would fire
			// something: the engine knows its timers, the intake knows
			// whether it can hear.
			if !d.tickPending && d.fatal == nil && d.eng.TickDue(d.clock().UnixMilli()) {
				d.tickPending = d.tick(idle)
			}
		case <-ckpt.C:
			d.checkpoint(d)
		}
	}
}

// handoff carries durable entries from the log's goroutine to the driver:
// add (the log's done callback, per entry) gathers them, flush (the log's
// OnCommitted, once per group commit) sends them in one go, so the driver
// wakes once per batch rather than once per message. Only the log's
// goroutine calls add and flush.
type handoff struct {
	batch []durable
	out   chan<- []durable
	free  chan []durable // drained batches back from the driver, for reuse
	// queued counts entries sent and not yet taken by the driver (the
	// ingest queue depth).
	queued atomic.Int64
}

// queueBatches bounds the batches waiting for the driver; each holds at
// most what the log keeps in flight (4 × its MaxBatch). When it is full
// the log's goroutine waits, Append soon blocks in the MQTT handler, paho
// stops reading, and the broker keeps the rest (it stops at Receive
// Maximum).
const queueBatches = 4

func newHandoff(out chan<- []durable) *handoff {
	return &handoff{out: out, free: make(chan []durable, queueBatches+2)}
}

func (h *handoff) add(x durable) { h.batch = append(h.batch, x) }

func (h *handoff) flush() {
	if len(h.batch) == 0 {
		return
	}
	h.queued.Add(int64(len(h.batch)))
	h.out <- h.batch
	select {
	case b := <-h.free:
		h.batch = b
	default:
		h.batch = nil
	}
}

// recycle is the driver's: b has been applied.
func (h *handoff) recycle(b []durable) {
	h.queued.Add(-int64(len(b)))
	clear(b) // drop the messages
	select {
	case h.free <- b[:0]:
	default:
	}
}
