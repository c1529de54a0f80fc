// Package resultstream reads a market's published results back from NATS,
// as edgeproc tail and edgeproc deadzones do: its results stream through
// ordered consumers (ephemeral, flow-controlled, restarted by the library
// at the right sequence after a disconnection; nothing is acknowledged and
// the stream is not changed) and its couriers' states from the key-value
// bucket. Markets are named by their resolved bridge.Config (stream,
// subjects, bucket).
package resultstream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
)

// Stream returns the market's results stream, or an error that says the
// service may not be running for it.
func Stream(ctx context.Context, js jetstream.JetStream, bc bridge.Config) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, bc.Stream)
	if err != nil {
		return nil, fmt.Errorf("market %s: stream %s: %w (is edgeproc run up for this market?)", bc.Market, bc.Stream, err)
	}
	return s, nil
}

// Ordered returns an ordered consumer of the market's stream s from start
// (zero: from now) over at least subjects (see ServerFilter: the caller
// drops the other subjects).
func Ordered(ctx context.Context, s jetstream.Stream, bc bridge.Config, subjects []string, start time.Time) (jetstream.Consumer, error) {
	occ := jetstream.OrderedConsumerConfig{FilterSubjects: ServerFilter(bc, subjects), DeliverPolicy: jetstream.DeliverNewPolicy}
	if !start.IsZero() {
		occ.DeliverPolicy, occ.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	cons, err := s.OrderedConsumer(ctx, occ)
	if err != nil {
		return nil, fmt.Errorf("market %s: consumer on %s: %w", bc.Market, bc.Stream, err)
	}
	return cons, nil
}

// ServerFilter is the consumer filter for subjects that every NATS server
// with JetStream accepts: one subject at most (several came with 2.10;
// Debian ships 2.9). All of a market's subjects need none, the three
// dashboard types are one wildcard, other sets are read whole and filtered
// by the reader.
func ServerFilter(bc bridge.Config, subjects []string) []string {
	dashboard := []string{bc.Subject(bridge.KindDistance), bc.Subject(bridge.KindNoSignal), bc.Subject(bridge.KindSignalRestored)}
	switch {
	case len(subjects) == 1:
		return subjects
	case len(subjects) == len(dashboard) && !slices.ContainsFunc(subjects, func(s string) bool { return !slices.Contains(dashboard, s) }):
		return []string{bc.SubjectPrefix + ".dashboard." + bc.Market + ".>"}
	}
	return nil
}

// Follow calls fn with each of the market's results on subjects (and no
// other), in stream order, from start (zero: from now) until stop is
// called. fn runs on the consumer's goroutine.
func Follow(ctx context.Context, js jetstream.JetStream, bc bridge.Config, subjects []string, start time.Time, fn func(subject string, data []byte)) (stop func(), err error) {
	s, err := Stream(ctx, js, bc)
	if err != nil {
		return nil, err
	}
	cons, err := Ordered(ctx, s, bc, subjects, start)
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if slices.Contains(subjects, m.Subject()) { // the server-side filter may be wider
			fn(m.Subject(), m.Data())
		}
	})
	if err != nil {
		return nil, fmt.Errorf("market %s: consume %s: %w", bc.Market, bc.Stream, err)
	}
	return cc.Stop, nil
}

// ReadToNow calls fn with each of the market's results on subject stored
// from start on, up to the stream's last one when it is called: it
// returns once caught up, not waiting for new ones. fn's error stops the
// read and is returned.
func ReadToNow(ctx context.Context, js jetstream.JetStream, bc bridge.Config, subject string, start time.Time, fn func(seq uint64, data []byte) error) error {
	s, err := Stream(ctx, js, bc)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("market %s: stream %s: %w", bc.Market, bc.Stream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := Ordered(ctx, s, bc, []string{subject}, start)
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("market %s: read %s: %w", bc.Market, bc.Stream, err)
	}
	defer it.Stop()
	if ci := cons.CachedInfo(); ci != nil && ci.NumPending == 0 {
		return nil // nothing since start
	}
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("market %s: read %s: %w", bc.Market, bc.Stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("market %s: read %s: %w", bc.Market, bc.Stream, err)
		}
		seq := meta.Sequence.Stream
		if seq > last {
			return nil // stored after the start: the next read's
		}
		if m.Subject() == subject {
			if err := fn(seq, m.Data()); err != nil {
				return fmt.Errorf("market %s: stream %s sequence %d: %w", bc.Market, bc.Stream, seq, err)
			}
		}
		// Nothing pending: nothing on subject up to the stream's end,
		// which is at or past last.
		if seq == last || meta.NumPending == 0 {
			return nil
		}
	}
}

// WatchCouriers calls fn with each courier state written to the market's
// bucket, until stop is called (which waits for fn to return): with a
// start time, first the current state of every courier updated since
// then, else only updates from now. A value that does not decode comes
// with its error. fn runs on one goroutine of the watch.
func WatchCouriers(ctx context.Context, js jetstream.JetStream, bc bridge.Config, start time.Time, fn func(key string, c bridge.CourierState, err error)) (stop func(), err error) {
	kv, err := js.KeyValue(ctx, bc.KVBucket)
	if err != nil {
		return nil, fmt.Errorf("market %s: courier bucket %s: %w (is edgeproc run up for this market?)", bc.Market, bc.KVBucket, err)
	}
	var opts []jetstream.WatchOpt
	if start.IsZero() {
		opts = append(opts, jetstream.UpdatesOnly())
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := kv.WatchAll(ctx, opts...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("market %s: watch %s: %w", bc.Market, bc.KVBucket, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
				return
			case e, ok = <-w.Updates():
				if !ok {
					return
				}
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut || (!start.IsZero() && e.Created().Before(start)) {
				continue // nil: the current values are all delivered
			}
			var c bridge.CourierState
			err := json.Unmarshal(e.Value(), &c)
			fn(e.Key(), c, err)
		}
	})
	return func() {
		cancel()
		_ = w.Stop()
		wg.Wait()
	}, nil
}
