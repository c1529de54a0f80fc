// Package tail keeps the end of a child process's output: a chatty broker
// or service cannot grow the parent's memory, and the last lines are there
// to show when something fails.
package tail

import "sync"

// Buffer is an io.Writer that keeps the last Max bytes written to it. It is
// safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// New returns a Buffer keeping the last max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns what is kept.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
