package partition

import "github.com/nats-io/nats.go/jetstream"

// kvWatch is a KV watch that is started again when it cannot be kept: a
// watch resumes by itself after a reconnect, but one that never started
// (NATS away) or that the server closed is retried at the owner's next
// turn. The owner's loop selects on updates(); a nil channel, while
// there is no watch, leaves the loop to its timers.
type kvWatch struct {
	start func() (jetstream.KeyWatcher, error)
	w     jetstream.KeyWatcher
}

// updates starts the watch if it is not running and returns its
// channel; started is true when it has just been started (its first
// entries are the current values, then a nil marker).
func (k *kvWatch) updates() (ch <-chan jetstream.KeyValueEntry, started bool) {
	if k.w == nil {
		if w, err := k.start(); err == nil {
			k.w, started = w, true
		}
	}
	if k.w == nil {
		return nil, false
	}
	return k.w.Updates(), started
}

// stop ends the watch; the next updates starts another. Called when its
// channel closes and when the owner is done.
func (k *kvWatch) stop() {
	if k.w != nil {
		_ = k.w.Stop()
		k.w = nil
	}
}
