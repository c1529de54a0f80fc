package mqtt

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

func TestWindow(t *testing.T) {
	a, b := &paho.Client{}, &paho.Client{} // identities only; never used
	ctx := context.Background()

	t.Run("blocks at max until a release", func(t *testing.T) {
		w := newWindow(2)
		for i := range 2 {
			if !w.acquire(ctx, a) {
				t.Fatalf("acquire %d: got false, want true", i)
			}
		}
		got := make(chan bool)
		go func() { got <- w.acquire(ctx, a) }()
		select {
		case <-got:
			t.Fatalf("third acquire returned with 2 of 2 slots taken, want it to wait")
		case <-time.After(50 * time.Millisecond):
		}
		if !w.release(a) {
			t.Fatalf("release of the live connection: got stale, want live")
		}
		select {
		case ok := <-got:
			if !ok {
				t.Fatalf("acquire after release: got false, want true")
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("acquire still waiting after a release")
		}
		if n := w.count(); n != 2 {
			t.Errorf("got count %d, want 2", n)
		}
	})

	t.Run("new connection starts a new count", func(t *testing.T) {
		w := newWindow(1)
		w.acquire(ctx, a)
		done := make(chan bool, 1)
		go func() { done <- w.acquire(ctx, b) }()
		select {
		case ok := <-done:
			if !ok {
				t.Fatalf("acquire on a new connection: got false, want true")
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("a new connection waited for the old connection's acks")
		}
		if w.release(a) {
			t.Errorf("release for the old connection: got live, want stale")
		}
		if n := w.count(); n != 1 {
			t.Errorf("stale release changed the count: got %d, want 1", n)
		}
	})

	t.Run("reset makes every release stale", func(t *testing.T) {
		w := newWindow(4)
		w.acquire(ctx, a)
		w.reset()
		if w.release(a) {
			t.Errorf("release after reset: got live, want stale")
		}
		if w.release(nil) {
			t.Errorf("release of a nil client: got live, want stale")
		}
		if n := w.count(); n != 0 {
			t.Errorf("got count %d after reset, want 0", n)
		}
	})

	t.Run("context ends the wait", func(t *testing.T) {
		w := newWindow(1)
		w.acquire(ctx, a)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if w.acquire(cctx, a) {
			t.Errorf("acquire with a full window and an ended context: got true, want false")
		}
	})
}
