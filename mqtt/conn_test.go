package mqtt

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// fakeConn records the writes bufConn makes to the socket. Its first Write
// can be held at a gate; fail makes every Write fail.
type fakeConn struct {
	net.Conn // nil: only what bufConn's writing side calls is implemented
	fail     error
	entered  chan struct{} // receives once per Write call
	gate     chan struct{} // the first Write waits for it to close

	mu     sync.Mutex
	writes [][]byte
	closed bool
}

func (f *fakeConn) Write(p []byte) (int, error) {
	f.entered <- struct{}{}
	f.mu.Lock()
	first := len(f.writes) == 0
	f.writes = append(f.writes, bytes.Clone(p))
	f.mu.Unlock()
	if first && f.gate != nil {
		<-f.gate
	}
	if f.fail != nil {
		return 0, f.fail
	}
	return len(p), nil
}

func (f *fakeConn) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return net.ErrClosed
	}
	f.closed = true
	return nil
}

func (f *fakeConn) SetWriteDeadline(time.Time) error { return nil }

func newFake() *fakeConn {
	return &fakeConn{entered: make(chan struct{}, 1000), gate: make(chan struct{})}
}

// closeAndCheck closes b and checks that the socket got want, in writes
// socket writes (why says which).
func closeAndCheck(t *testing.T, b *bufConn, f *fakeConn, want []byte, writes int, why string) {
	t.Helper()
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if len(f.writes) != writes {
		t.Errorf("got %d socket writes, want %d (%s)", len(f.writes), writes, why)
	}
	if got := bytes.Join(f.writes, nil); !bytes.Equal(got, want) {
		t.Errorf("socket got %q, want %q", got, want)
	}
}

func TestBufConn_CoalescesWritesWhileTheSocketIsBusy(t *testing.T) {
	f := newFake()
	b := newBufConn(f, 0)
	var want bytes.Buffer
	packet := func(i int) {
		p := []byte(fmt.Sprintf("puback %d;", i))
		want.Write(p)
		if _, err := b.Write(p); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	packet(0)
	<-f.entered // the flusher is in the socket write, held at the gate
	for i := 1; i <= 100; i++ {
		packet(i)
	}
	close(f.gate)
	closeAndCheck(t, b, f, want.Bytes(), 2, "the first packet, then the 100 queued behind it at once")
	if !f.closed {
		t.Error("socket not closed by Close")
	}
	if _, err := b.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after close: got %v, want net.ErrClosed", err)
	}
}

func TestBufConn_LingerGathersABurst(t *testing.T) {
	f := newFake()
	f.gate = nil
	b := newBufConn(f, 50*time.Millisecond)
	var want bytes.Buffer
	start := time.Now()
	for i := range 100 { // acks from whichever goroutine, within the linger
		p := []byte(fmt.Sprintf("puback %d;", i))
		want.Write(p)
		if _, err := b.Write(p); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	<-f.entered
	if d := time.Since(start); d < 50*time.Millisecond {
		// A lower bound, which no slow machine can break: the write must
		// not come before the linger.
		t.Errorf("first socket write %s after the burst, want after the 50ms linger", d)
	}
	closeAndCheck(t, b, f, want.Bytes(), 1, "the whole burst")
}

func TestBufConn_CloseDoesNotWaitForTheLinger(t *testing.T) {
	f := newFake()
	f.gate = nil
	b := newBufConn(f, time.Hour)
	if _, err := b.Write([]byte("last ack")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the hour's linger")
	}
	if got := bytes.Join(f.writes, nil); string(got) != "last ack" {
		t.Errorf("socket got %q, want the queued write flushed by Close", got)
	}
}

func TestBufConn_WriteErrorIsKeptAndClosesTheSocket(t *testing.T) {
	f := newFake()
	f.gate = nil
	f.fail = errors.New("connection reset")
	b := newBufConn(f, 0)
	if _, err := b.Write([]byte("a")); err != nil {
		t.Fatalf("first write is only queued: got %v", err)
	}
	<-b.done // the flusher stops at the failed write
	for i := range 2 {
		if _, err := b.Write([]byte("b")); err == nil || !errors.Is(err, f.fail) {
			t.Errorf("write %d after the failure: got %v, want it to wrap %v", i, err, f.fail)
		}
	}
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if !closed {
		t.Error("socket left open after a write error: the reader would not notice")
	}
	if err := b.Close(); err != nil {
		t.Errorf("close after a write error: %v", err)
	}
}

func TestBufConn_WriterWaitsAtTheLimit(t *testing.T) {
	f := newFake()
	b := newBufConn(f, 0)
	if _, err := b.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	<-f.entered // held at the gate
	big := make([]byte, connWriteLimit)
	if _, err := b.Write(big); err != nil { // an empty buffer takes any size
		t.Fatal(err)
	}
	wrote := make(chan error)
	go func() { _, err := b.Write([]byte("y")); wrote <- err }()
	select {
	case err := <-wrote:
		t.Fatalf("write over the limit returned (%v) while the socket was busy", err)
	case <-time.After(50 * time.Millisecond): // not a timing assertion: a wrong pass would only be missed
	}
	close(f.gate)
	if err := <-wrote; err != nil {
		t.Fatalf("write once the buffer was taken: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(bytes.Join(f.writes, nil)); got != 1+connWriteLimit+1 {
		t.Errorf("socket got %d bytes, want %d", got, connWriteLimit+2)
	}
}
