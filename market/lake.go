package market

import (
	"context"
	"log/slog"
	"sync"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/lake"
	"github.com/km0/edgeproc/metrics"
)

// LakeOptions maps a market's configuration to its lake series' (the
// caller sets Prefix and Fence): lake.dir, timezone, the lake's roll and
// retention, and windows.restore_ttl as the time after which a date
// counts as closed.
func LakeOptions(c config.Config, log *slog.Logger) lake.Options {
	return lake.Options{
		Dir: c.Lake.Dir, Market: c.Market, Location: c.Location(),
		RollInterval: c.Lake.RollInterval, Retention: c.Lake.Retention,
		CompactAfter: c.Windows.RestoreTTL, Logger: log,
	}
}

// LakeRows is the engine's OnRows that feeds f: each accepted position,
// its log index the row's. It runs on the engine's merger goroutine,
// before the checkpoint barrier that follows the rows (Checkpoints cuts
// the feed there).
func LakeRows(f *lake.Feed) func([]engine.Row) {
	var r lake.Row
	return func(rows []engine.Row) {
		for i := range rows {
			e := &rows[i]
			r = lake.Row{
				Index: uint64(e.Line), Courier: append(r.Courier[:0], e.Courier...),
				TimestampMs: e.TS, ArrivalMs: e.Arrival, Lat: e.Lat, Lon: e.Lon,
				AccuracyM: max(e.Accuracy, 0), HasAccuracy: e.Accuracy >= 0,
				LateDistance: e.LateDistance, LateSession: e.LateSession,
			}
			f.Add(&r)
		}
	}
}

// lakes are a market's open lake feeds (the MQTT source's one, or one
// per partition this instance owns) and the counts of those closed.
type lakes struct {
	mu     sync.Mutex
	open   map[*lake.Feed]struct{}
	closed lake.FeedStats
}

// OpenLake opens the market's lake series prefix ("" for the MQTT
// source, "pN-" for partition N), fenced by fence when set, staging in
// spill while lake.dir cannot (lake.Options.SpillDir; "": none); nil
// without lake.dir. The source starts it (Feed.Start) once its engine is
// restored, and closes it with CloseLake.
func (m *Market) OpenLake(prefix string, fence func() error, spill string) (*lake.Feed, error) {
	if m.cfg.Lake.Dir == "" {
		return nil, nil
	}
	o := LakeOptions(m.cfg, m.log)
	o.Prefix, o.Fence, o.SpillDir = prefix, fence, spill
	f, err := lake.OpenFeed(o)
	if err != nil {
		return nil, err
	}
	m.lakes.mu.Lock()
	if m.lakes.open == nil {
		m.lakes.open = map[*lake.Feed]struct{}{}
	}
	m.lakes.open[f] = struct{}{}
	m.lakes.mu.Unlock()
	return f, nil
}

// CloseLake closes f (Feed.Close: its staged rows written within ctx,
// else left staged for the next start) and keeps its counts.
func (m *Market) CloseLake(ctx context.Context, f *lake.Feed) error {
	if f == nil {
		return nil
	}
	err := f.Close(ctx)
	s := f.Stats()
	s.RowsBuffered, s.StagedSegments, s.StagedBytes = 0, 0, 0 // the next start's
	m.lakes.mu.Lock()
	delete(m.lakes.open, f)
	m.lakes.closed.Add(s)
	m.lakes.mu.Unlock()
	return err
}

// behind says why a lake feed is not keeping up, or "".
func (l *lakes) behind() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for f := range l.open {
		if err := f.Behind(); err != nil {
			return err.Error()
		}
	}
	return ""
}

func (l *lakes) stats(s *metrics.Snapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.open) == 0 && l.closed == (lake.FeedStats{}) {
		return
	}
	s.Lake, s.HasLake = l.closed, true
	for f := range l.open {
		s.Lake.Add(f.Stats())
		s.LakeBehind = s.LakeBehind || f.Behind() != nil
	}
}
