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
	if !c.Begin() || c.Begin() {
		t.Fatal("want the first Begin admitted and the second skipped")
	}
	if err := c.Save(ctx, 9, [][]byte{{1}, {2}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !c.Begin() {
		t.Fatal("Begin refused after Save ended the previous checkpoint")
	}
	flushErr = errors.New("no ack")
	if err := c.Save(ctx, 12, nil, time.Now()); err == nil || len(saved) != 1 {
		t.Fatalf("Save with the results unacknowledged: err %v, saved %v; want an error and nothing stored", err, saved)
	}
	flushErr, saveErr = nil, fmt.Errorf("fenced: %w", ErrSuperseded)
	if err := c.Save(ctx, 13, nil, time.Now()); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("Save superseded: err %v", err)
	}
	st := c.Stats()
	if st.Written != 1 || st.Failed != 1 || st.Skipped != 1 || st.Bytes != 2 || st.Last.IsZero() || c.Tag() != 9 {
		t.Errorf("got %+v, tag %d; want 1 written (9, 2 bytes), 1 failed, 1 skipped", st, c.Tag())
	}
}
