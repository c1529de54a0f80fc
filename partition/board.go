package partition

import (
	"context"
	"fmt"
	"time"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/resultstream"
	"github.com/km0/edgeproc/result"
)

// boardLookback is how far back the fleet board reads the dead zones of
// the results stream when it starts: its dead-zone layer's 24 hours.
const boardLookback = 24 * time.Hour

// boardLinger is how long the board goes on following the other
// partitions after its last page closed: a reload or a page's
// reconnection does not read them all again.
const boardLinger = time.Minute

// feedBoard feeds this instance's fleet board f with the whole market,
// not only the partitions it owns, while a page shows it (and
// boardLinger after): every partition's results from the results stream,
// and where each courier is from the courier bucket, which every owner
// writes. Following them costs every instance a delivery of each
// courier's update and result, whatever it owns, so nobody looking
// means nobody pays; a page that opens sees the others' couriers once
// the feed has read the bucket's current entries. The partitions it owns feed the board directly, at once, always;
// the board keeps the newest of a courier's positions and results, so
// what arrives twice changes nothing. It runs until ctx ends, starting
// the feeds again when they cannot start.
func (r *Runner) feedBoard(ctx context.Context, f *board.Feed) {
	for {
		select {
		case <-f.Watched():
		case <-ctx.Done():
			return
		}
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.followWhile(fctx, f)
		}()
		waitUnwatched(ctx, f)
		cancel()
		<-done
	}
}

// waitUnwatched returns once no page has shown f's market for
// boardLinger, or ctx ends.
func waitUnwatched(ctx context.Context, f *board.Feed) {
	for {
		select {
		case <-f.Unwatched():
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(boardLinger)
		select {
		case <-f.Watched():
			t.Stop()
		case <-t.C:
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// followWhile follows the other partitions into f until ctx ends.
func (r *Runner) followWhile(ctx context.Context, f *board.Feed) {
	for ctx.Err() == nil {
		stop, err := r.followBoard(ctx, f)
		if err == nil {
			<-ctx.Done()
			stop()
			return
		}
		if ok, n := r.readersLog.Allow(); ok {
			r.log.Warn("fleet board: the other partitions' couriers not followed yet", "err", err, "suppressed", n)
		}
		sleepCtx(ctx, fetchWait(r.cfg.JetStream))
	}
}

// followBoard starts the board's three feeds: the results of the last
// window size and slide (the latest distance of each courier moving),
// the dead zones of the last 24 hours, and the courier bucket's entries
// written within restore_ttl (a courier silent longer is forgotten).
func (r *Runner) followBoard(ctx context.Context, f *board.Feed) (func(), error) {
	bc := r.br.Config()
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	results := func(_ string, data []byte) {
		if rec, err := result.Parse(data); err == nil {
			f.Result(&rec)
		}
	}
	now := time.Now()
	for _, follow := range []struct {
		kinds []string
		since time.Duration
	}{
		{[]string{bridge.KindDistance, bridge.KindNoSignal, bridge.KindSignalRestored, bridge.KindLeftArea, bridge.KindEnteredArea}, r.cfg.Windows.Size + r.cfg.Windows.Slide},
		{[]string{bridge.KindDeadZone}, boardLookback},
	} {
		subjects := make([]string, len(follow.kinds))
		for i, k := range follow.kinds {
			subjects[i] = bc.Subject(k)
		}
		s, err := resultstream.Follow(ctx, r.js, bc, subjects, now.Add(-follow.since), results)
		if err != nil {
			stop()
			return nil, fmt.Errorf("follow %v: %w", follow.kinds, err)
		}
		stops = append(stops, s)
	}
	watch, err := resultstream.WatchCouriers(ctx, r.js, bc, now.Add(-min(r.cfg.Windows.RestoreTTL, boardLookback)), func(_ string, c bridge.CourierState, err error) {
		if err != nil || c.Courier == "" {
			return
		}
		f.Position([]byte(c.Courier), c.TS, c.Lat, c.Lon)
		if c.Area != "" {
			f.Side(c.Courier, c.TS, c.Area == bridge.AreaOutside)
		}
		if c.Status == bridge.StatusNoSignal {
			// The bucket says it went silent; its no_signal may be older
			// than the results read.
			f.Result(&result.Record{Type: result.NoSignal, Market: r.cfg.Market, Courier: c.Courier, Start: c.TS, End: c.TS, Lat: c.Lat, Lon: c.Lon})
		}
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("watch the courier bucket: %w", err)
	}
	return func() {
		stop()
		watch()
	}, nil
}
