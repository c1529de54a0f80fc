package resultstream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/show"
)

// Courier is the type Tail follows the courier bucket under, besides the
// result types.
const Courier = "courier"

// Tail prints what it follows, one line each, from several goroutines (a
// consumer and a watcher per market): results as published (JSON) or as
// show renders them, courier states with "type":"courier" and "market"
// added.
type Tail struct {
	Out     io.Writer
	JSON    bool
	Printer show.Printer
	// Max ends Run after this many lines; 0: only ctx ends it.
	Max int

	mu      sync.Mutex
	n       int
	stopped bool          // Run has returned: late callbacks print nothing
	done    chan struct{} // closed when Max lines are printed
	close   sync.Once
}

// Run follows types (result types and Courier) of markets from since ago
// (0: from now) until ctx is done or Max lines are printed.
func (t *Tail) Run(ctx context.Context, js jetstream.JetStream, markets []bridge.Config, types []string, since time.Duration) error {
	t.done = make(chan struct{})
	var start time.Time
	if since > 0 {
		start = time.Now().Add(-since)
	}
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
		t.mu.Lock()
		t.stopped = true
		t.mu.Unlock()
	}()
	for _, bc := range markets {
		var subjects []string
		for _, typ := range types {
			if typ != Courier {
				subjects = append(subjects, bc.Subject(typ))
			}
		}
		if len(subjects) > 0 {
			stop, err := Follow(ctx, js, bc, subjects, start, t.result)
			if err != nil {
				return err
			}
			stops = append(stops, stop)
		}
		if slices.Contains(types, Courier) {
			market, bucket := bc.Market, bc.KVBucket
			stop, err := WatchCouriers(ctx, js, bc, start, func(key string, c bridge.CourierState, err error) {
				t.courier(market, bucket, key, c, err)
			})
			if err != nil {
				return err
			}
			stops = append(stops, stop)
		}
	}
	select {
	case <-ctx.Done():
	case <-t.done:
	}
	return nil
}

func (t *Tail) result(subject string, data []byte) {
	if t.JSON {
		t.print(string(data))
		return
	}
	r, err := show.Decode(data)
	if err != nil {
		t.print(fmt.Sprintf("%s: %v: %q", subject, err, data))
		return
	}
	t.print(t.Printer.Line(r))
}

func (t *Tail) courier(market, bucket, key string, c bridge.CourierState, err error) {
	switch {
	case err != nil:
		t.print(fmt.Sprintf("%s: %s: %v", bucket, key, err))
	case t.JSON:
		line, _ := json.Marshal(struct {
			Type   string `json:"type"`
			Market string `json:"market"`
			bridge.CourierState
		}{Courier, market, c})
		t.print(string(line))
	default:
		t.print(t.Printer.CourierLine(market, c))
	}
}

func (t *Tail) print(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || (t.Max > 0 && t.n >= t.Max) {
		return
	}
	fmt.Fprintln(t.Out, line)
	t.n++
	if t.Max > 0 && t.n == t.Max {
		t.close.Do(func() { close(t.done) })
	}
}
