package market_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/checkpoint"
	"github.com/km0/edgeproc/engine"
	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
)

func recoverConfig() engine.Config {
	return engine.Config{
		Market: "girona", Size: 300_000, Slide: 60_000, Gap: 180_000, ToleratedDelay: 45_000,
		IdleTimeout: 30_000, MaxFutureSkew: 60_000, RestoreTTL: 24 * 3600_000,
		Filter: geo.Filter{MinMoveM: 15, MaxSpeedKmh: 150}, StoppedBelowM: 50, H3Resolution: 9, Shards: 2,
	}
}

// snapshotOf is the whole snapshot, at tag 7, of an engine that took a
// small fleet's first 2000 inputs.
func snapshotOf(t *testing.T, cfg engine.Config) []byte {
	t.Helper()
	f := fleet.New(fleet.Config{Couriers: 25, Duration: 20 * time.Minute, Seed: 9})
	e := engine.New(cfg, func([]result.Record) {})
	for ev, ok := f.Next(); ok && e.Stats().Received < 2000; ev, ok = f.Next() {
		in := engine.Input{Payload: fleet.AppendJSON(nil, ev, false), Arrival: ev.Arrival, HasArrival: true}
		e.Push(&in)
	}
	var snap []byte
	e.Checkpoint(7, func(s [][]byte) { snap = bytes.Join(s, nil) })
	e.Stop()
	return snap
}

type pointStore struct {
	p   checkpoint.Point
	ok  bool
	err error
}

func (s pointStore) Load(context.Context) (checkpoint.Point, bool, error) { return s.p, s.ok, s.err }
func (s pointStore) Save(context.Context, uint64, [][]byte) (int64, error) {
	return 0, errors.New("read-only")
}

// TestRecover: both sources recover through Recover, so its cases are
// theirs: no recovery point starts empty at tag 0, a point restores at its
// tag, a store's error is returned as it is, a point whose tag is not its
// snapshot's is corrupt (and not Refused: it is the store's fault, not the
// configuration's), and a snapshot of another configuration is Refused.
func TestRecover(t *testing.T) {
	cfg := recoverConfig()
	snap := snapshotOf(t, cfg) // tag 7
	other := cfg
	other.Gap++
	loadErr := errors.New("bucket unreachable")
	cases := []struct {
		name    string
		cfg     engine.Config
		store   pointStore
		tag     uint64
		wantErr error
		refused bool
	}{
		{"none", cfg, pointStore{}, 0, nil, false},
		{"a point", cfg, pointStore{p: checkpoint.Point{Tag: 7, Snapshot: snap, Name: "p7"}, ok: true}, 7, nil, false},
		{"load fails", cfg, pointStore{err: loadErr}, 0, loadErr, false},
		{"tag disagrees", cfg, pointStore{p: checkpoint.Point{Tag: 8, Snapshot: snap, Name: "p8"}, ok: true}, 0, checkpoint.ErrCorrupt, false},
		{"another configuration", other, pointStore{p: checkpoint.Point{Tag: 7, Snapshot: snap, Name: "p7"}, ok: true}, 0, engine.ErrSnapshotConfig, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, tag, err := market.Recover(context.Background(), c.cfg, func([]result.Record) {}, c.store)
			if e != nil {
				defer e.Stop()
			}
			if !errors.Is(err, c.wantErr) || (err == nil) != (c.wantErr == nil) {
				t.Fatalf("err %v, want %v", err, c.wantErr)
			}
			if err != nil {
				if e != nil {
					t.Errorf("an engine with the error %v", err)
				}
				if engine.Refused(err) != c.refused {
					t.Errorf("Refused(%v) = %v, want %v", err, !c.refused, c.refused)
				}
				if c.store.ok && !strings.Contains(err.Error(), c.store.p.Name) {
					t.Errorf("error %q does not name the point %s", err, c.store.p.Name)
				}
				return
			}
			if tag != c.tag {
				t.Errorf("tag %d, want %d", tag, c.tag)
			}
			if got := e.Stats().Couriers; c.store.ok && got == 0 {
				t.Errorf("restored no couriers")
			}
		})
	}
}
