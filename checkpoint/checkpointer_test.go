package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// saverFunc is a Saver made of a function.
type saverFunc func(ctx context.Context, tag uint64, parts [][]byte) (int64, error)

func (f saverFunc) Save(ctx context.Context, tag uint64, parts [][]byte) (int64, error) {
	return f(ctx, tag, parts)
}

// TestCheckpointer_Protocol: a snapshot is stored only after the results'
// flush succeeds; one checkpoint at a time (a second Begin is skipped);
// a failed flush or store is counted and leaves the recovery point where
// it was; a superseded one is not a failure.
func TestCheckpointer_Protocol(t *testing.T) {
	var flushErr, saveErr error
	var saved []uint64
	flush := func(context.Context) error { return flushErr }
	save := saverFunc(func(_ context.Context, tag uint64, parts [][]byte) (int64, error) {
		if saveErr != nil {
			return 0, saveErr
		}
		saved = append(saved, tag)
		return int64(len(parts)), nil
	})
	c := NewCheckpointer(flush, save, 5)
	ctx := context.Background()
	if c.Tag() != 5 {
		t.Fatalf("Tag %d, want the restored 5", c.Tag())
	}
	begin := func() bool { _, ok := c.Begin(); return ok }
	if !begin() || begin() {
		t.Fatal("want the first Begin admitted and the second skipped")
	}
	if err := c.Save(ctx, Plan{}, 9, [][]byte{{1}, {2}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !begin() {
		t.Fatal("Begin refused after Save ended the previous checkpoint")
	}
	flushErr = errors.New("no ack")
	if err := c.Save(ctx, Plan{}, 12, nil, time.Now()); err == nil || len(saved) != 1 {
		t.Fatalf("Save with the results unacknowledged: err %v, saved %v; want an error and nothing stored", err, saved)
	}
	flushErr, saveErr = nil, fmt.Errorf("fenced: %w", ErrSuperseded)
	if err := c.Save(ctx, Plan{}, 13, nil, time.Now()); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("Save superseded: err %v", err)
	}
	st := c.Stats()
	if st.Written != 1 || st.Failed != 1 || st.Skipped != 1 || st.Bytes != 2 || st.Last.IsZero() || c.Tag() != 9 {
		t.Errorf("got %+v, tag %d; want 1 written (9, 2 bytes), 1 failed, 1 skipped", st, c.Tag())
	}
}

// deltaSaver keeps whole snapshots and deltas, recording which it got.
type deltaSaver struct {
	got  []string
	fail bool
}

func (d *deltaSaver) Save(_ context.Context, tag uint64, parts [][]byte) (int64, error) {
	if d.fail {
		return 0, errors.New("disk full")
	}
	d.got = append(d.got, fmt.Sprintf("whole %d", tag))
	return int64(len(parts[0])), nil
}

func (d *deltaSaver) SaveDelta(_ context.Context, base, tag uint64, parts [][]byte) (int64, error) {
	if d.fail {
		return 0, errors.New("disk full")
	}
	d.got = append(d.got, fmt.Sprintf("delta %d on %d", tag, base))
	return int64(len(parts[0])), nil
}

// TestCheckpointer_DeltaPlan: the first checkpoint of a process is whole,
// then deltas on the point before, each building on the previous one,
// until they add up to DeltaRatio times the whole one; after a failure
// the next one is whole; a saver without deltas always gets whole ones.
func TestCheckpointer_DeltaPlan(t *testing.T) {
	ds := &deltaSaver{}
	c := NewCheckpointer(func(context.Context) error { return nil }, ds, 3)
	ctx := context.Background()
	tag := uint64(3)
	step := func(size int) Plan {
		t.Helper()
		p, ok := c.Begin()
		if !ok {
			t.Fatal("Begin refused")
		}
		tag += 10
		err := c.Save(ctx, p, tag, [][]byte{make([]byte, size)}, time.Now())
		if err != nil && !ds.fail {
			t.Fatal(err)
		}
		return p
	}
	if p := step(100); p.Delta {
		t.Fatalf("first checkpoint %+v, want whole", p)
	}
	// Deltas of 30 bytes on a whole one of 100: up to 200 bytes of them.
	for i := range 7 {
		if p := step(30); !p.Delta || p.Base != tag-10 {
			t.Fatalf("checkpoint %d after the whole one: %+v, want a delta on %d", i+1, p, tag-10)
		}
	}
	if p := step(100); p.Delta {
		t.Fatalf("after 210 bytes of deltas on 100: %+v, want whole", p)
	}
	if p := step(30); !p.Delta {
		t.Fatalf("after a whole one: %+v, want a delta", p)
	}
	ds.fail = true
	step(30)
	ds.fail = false
	if p := step(100); p.Delta {
		t.Fatalf("after a failure: %+v, want whole", p)
	}
	want := []string{"whole 13", "delta 23 on 13", "delta 33 on 23", "delta 43 on 33", "delta 53 on 43", "delta 63 on 53", "delta 73 on 63", "delta 83 on 73", "whole 93", "delta 103 on 93", "whole 123"}
	if fmt.Sprint(ds.got) != fmt.Sprint(want) {
		t.Errorf("saved\n%v\nwant\n%v", ds.got, want)
	}
	if st := c.Stats(); st.Deltas != 8 || st.Failed != 1 {
		t.Errorf("stats %+v, want 8 deltas, 1 failed", st)
	}
	plain := NewCheckpointer(func(context.Context) error { return nil }, saverFunc(func(context.Context, uint64, [][]byte) (int64, error) { return 1, nil }), 0)
	for range 3 {
		p, _ := plain.Begin()
		if p.Delta {
			t.Fatal("a delta for a saver that keeps none")
		}
		_ = plain.Save(ctx, p, 1, nil, time.Now())
	}
}
