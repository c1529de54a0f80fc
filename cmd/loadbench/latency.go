package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// histMaxMs is the largest latency the histogram resolves; slower results
// land in the last bucket (and still count in max).
const histMaxMs = 30_000

// maxCrossings bounds the per-crossing table of one step.
const maxCrossings = 10_000

// latencies is one step's record of result latencies, in whole
// milliseconds (emitted_at_ms has ms resolution). Memory is fixed: a
// histogram, and a capped table of watermark crossings.
type latencies struct {
	mu        sync.Mutex
	hist      []uint64
	n         uint64
	max       int64
	crossings map[int64]*crossing // distance results by emitted_at_ms
	dropped   uint64              // crossings not tracked: table full
	bad       uint64              // results without a readable emitted_at_ms
}

// crossing is one watermark crossing: every distance result it fired
// carries the same emitted_at_ms.
type crossing struct {
	n        int
	min, max int64 // ms
}

func newLatencies() *latencies {
	return &latencies{hist: make([]uint64, histMaxMs+1), crossings: map[int64]*crossing{}}
}

func (l *latencies) add(emittedAt int64, isDistance bool, now time.Time) {
	ms := now.UnixMilli() - emittedAt
	if ms < 0 {
		ms = 0 // clock granularity: both stamps come from the same clock
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hist[min(ms, histMaxMs)]++
	l.n++
	l.max = max(l.max, ms)
	if !isDistance {
		return
	}
	c := l.crossings[emittedAt]
	if c == nil {
		if len(l.crossings) >= maxCrossings {
			l.dropped++
			return
		}
		c = &crossing{min: ms, max: ms}
		l.crossings[emittedAt] = c
	}
	c.n++
	c.min, c.max = min(c.min, ms), max(c.max, ms)
}

// latencySummary is what the report prints for one step.
type latencySummary struct {
	N             uint64
	P50, P99, Max int64 // ms, over every delivered result
	// Crossings is the number of watermark crossings that fired distance
	// results; FirstP50/FirstP99 are over each crossing's fastest result
	// (the pipeline's latency without the queueing of its own burst),
	// BurstMax the largest burst (results of one crossing).
	Crossings          int
	FirstP50, FirstP99 int64
	BurstMax           int
}

func (l *latencies) summary() latencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := latencySummary{N: l.n, Max: l.max, P50: -1, P99: -1, FirstP50: -1, FirstP99: -1}
	if l.n > 0 {
		s.P50, s.P99 = histQuantile(l.hist, l.n, 0.50), histQuantile(l.hist, l.n, 0.99)
	}
	firsts := make([]int64, 0, len(l.crossings))
	for _, c := range l.crossings {
		firsts = append(firsts, c.min)
		s.BurstMax = max(s.BurstMax, c.n)
	}
	s.Crossings = len(firsts)
	if len(firsts) > 0 {
		sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
		s.FirstP50 = sliceQuantile(firsts, 0.50)
		s.FirstP99 = sliceQuantile(firsts, 0.99)
	}
	return s
}

// histQuantile is the smallest bucket b with at least q·n samples ≤ b.
func histQuantile(h []uint64, n uint64, q float64) int64 {
	rank := uint64(q*float64(n) + 0.5)
	rank = max(rank, 1)
	var acc uint64
	for b, c := range h {
		acc += c
		if acc >= rank {
			return int64(b)
		}
	}
	return int64(len(h) - 1)
}

// sliceQuantile is the nearest-rank quantile of sorted v.
func sliceQuantile(v []int64, q float64) int64 {
	i := int(q*float64(len(v))+0.5) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// stepLatencies are one step's latencies as seen by the two readers.
type stepLatencies struct {
	// JS is read back from the stream by an ordered consumer: crossing →
	// stored in JetStream → delivered, the figure the report judges.
	JS *latencies
	// Stored is the same results timed by the stream's own stamp of when
	// it stored each one (its metadata): crossing → stored in JetStream,
	// the "acknowledged by JetStream" without the delivery to a
	// reader (the ack leaves the server right after the store).
	Stored *latencies
	// Core is a plain NATS subscription on the same subjects: it gets a
	// result when the server routes the publish, before the stream has
	// stored it — a reference that shows what the stream's round trip
	// adds.
	Core *latencies
}

// resultTap reads the market's dashboard results and records each one's
// latency in the current step's latencies.
type resultTap struct {
	nc      *nats.Conn
	cc      jetstream.ConsumeContext
	sub     *nats.Subscription
	current atomic.Pointer[stepLatencies]
	once    sync.Once
}

// startTap subscribes to delivery.dashboard.bench.>: an ordered consumer
// of the stream edgeproc created (only results stored from now on) and,
// with core, a core subscription too (the server then delivers every
// result twice, on the cores edgeproc shares).
func startTap(ctx context.Context, natsURL string, core bool) (*resultTap, error) {
	nc, err := nats.Connect(natsURL, nats.Name("loadbench-tap"))
	if err != nil {
		return nil, fmt.Errorf("tap: connect to %s: %w", natsURL, err)
	}
	t := &resultTap{nc: nc}
	t.begin()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, stream, err := resultsConsumer(sctx, nc, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("tap: %w", err)
	}
	t.cc, err = cons.Consume(func(m jetstream.Msg) {
		l := t.current.Load()
		record(l.JS, m.Data(), time.Now())
		if md, err := m.Metadata(); err == nil {
			record(l.Stored, m.Data(), md.Timestamp)
		}
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("tap: consume %s: %w", stream, err)
	}
	if !core {
		return t, nil
	}
	// The client's default pending limits bound this subscription's
	// buffer; a slow reader loses messages there, counted in Dropped.
	t.sub, err = nc.Subscribe(resultsSubject, func(m *nats.Msg) { record(t.current.Load().Core, m.Data, time.Now()) })
	if err != nil {
		t.cc.Stop()
		nc.Close()
		return nil, fmt.Errorf("tap: subscribe %s: %w", resultsSubject, err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.close()
		return nil, fmt.Errorf("tap: flush subscription: %w", err)
	}
	return t, nil
}

var (
	emittedKey  = []byte(`"emitted_at_ms":`)
	distanceKey = []byte(`"type":"distance"`)
)

// record adds the latency of the result in data, at now.
func record(l *latencies, data []byte, now time.Time) {
	at, ok := emittedAt(data)
	if !ok {
		l.mu.Lock()
		l.bad++
		l.mu.Unlock()
		return
	}
	l.add(at, bytes.Contains(data, distanceKey), now)
}

// emittedAt extracts emitted_at_ms without decoding the whole result.
func emittedAt(data []byte) (int64, bool) {
	i := bytes.Index(data, emittedKey)
	if i < 0 {
		return 0, false
	}
	rest := data[i+len(emittedKey):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	v, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return v, err == nil
}

// begin starts a new step: results delivered from now on count for it.
func (t *resultTap) begin() *stepLatencies {
	l := &stepLatencies{JS: newLatencies(), Stored: newLatencies(), Core: newLatencies()}
	t.current.Store(l)
	return l
}

// resultsSubject is every dashboard result of the benchmark's market.
const resultsSubject = "delivery.dashboard." + market + ".>"

// resultsConsumer opens an ordered consumer of the market's results on the
// stream edgeproc created, delivering from where cfg says, and names the
// stream.
func resultsConsumer(ctx context.Context, nc *nats.Conn, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, "", fmt.Errorf("jetstream: %w", err)
	}
	stream, err := js.StreamNameBySubject(ctx, "delivery.dashboard."+market+".distance")
	if err != nil {
		return nil, "", fmt.Errorf("find the stream of %s: %w", resultsSubject, err)
	}
	cfg.FilterSubjects = []string{resultsSubject}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("ordered consumer on %s: %w", stream, err)
	}
	return cons, stream, nil
}

// readBackStored reads the market's results stored since from, once a
// step is over, and records each one's crossing → stored latency (the
// stream's stamp) in l. Nothing reads while the step runs, so no reader
// takes the cores that edgeproc and the server share during a burst.
func readBackStored(ctx context.Context, natsURL string, from time.Time, l *latencies) error {
	nc, err := nats.Connect(natsURL, nats.Name("loadbench-readback"))
	if err != nil {
		return fmt.Errorf("read back: connect to %s: %w", natsURL, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cons, stream, err := resultsConsumer(ctx, nc, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime:  &from,
	})
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	for ctx.Err() == nil {
		batch, err := cons.Fetch(1024, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return fmt.Errorf("read back: fetch from %s: %w", stream, err)
		}
		n, last := 0, false
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("read back: %w", err)
			}
			record(l, m.Data(), md.Timestamp)
			n++
			last = md.NumPending == 0
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("read back: fetch from %s: %w", stream, err)
		}
		if n == 0 || last {
			return nil
		}
	}
	return ctx.Err()
}

// dropped is the number of results the core subscription lost to its
// pending limit.
func (t *resultTap) dropped() int {
	if t.sub == nil {
		return 0
	}
	n, _ := t.sub.Dropped()
	return n
}

// close stops both readers; calling it again does nothing.
func (t *resultTap) close() {
	t.once.Do(func() {
		if t.cc != nil {
			t.cc.Stop()
		}
		if t.sub != nil {
			_ = t.sub.Unsubscribe()
		}
		if t.nc != nil {
			t.nc.Close()
		}
	})
}
