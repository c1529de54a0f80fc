package mqtt

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"
)

// Sizes of a bufConn's buffers.
const (
	connReadBuffer = 32 << 10
	// connWriteLimit bounds the bytes a bufConn holds for its flusher: a
	// writer waits beyond it (the socket is not keeping up), so memory stays
	// bounded and backpressure reaches the writer as it would on the bare
	// socket.
	connWriteLimit = 256 << 10
	// closeFlushTimeout bounds Close's last flush of what is still buffered
	// (the final PUBACKs and the DISCONNECT), and then again its wait for
	// the broker to close its side.
	closeFlushTimeout = time.Second
)

// bufConn is a client's socket, buffered both ways. Reads go through a
// bufio.Reader, so one read syscall takes many packets. Writes are
// coalesced: Write appends to a buffer that one flusher goroutine writes
// out, linger after the first byte of a batch, so the PUBACKs of a burst of
// acks (one packet each, from whichever goroutine acks) go out in one write.
// Each Write is one whole packet, so packets from different goroutines
// never interleave.
//
// A write error is not lost: it is returned by every later Write, and the
// connection is closed, so the reader fails too and the connection is
// dropped and re-established (the broker redelivers what was not acked).
//
// Close half-closes the socket after the last flush and waits for the
// broker to close its side (it does once it has read the DISCONNECT) before
// it returns. So when Close returns the broker has processed every PUBACK
// written before it: a new connection with the same client id (edgeproc
// restarted at once) can never take the session over while the old
// connection's last acks are still unread, which would make the broker
// redeliver those messages.
type bufConn struct {
	net.Conn
	r      *bufio.Reader
	linger time.Duration

	mu      sync.Mutex
	cond    *sync.Cond // signalled when buf is taken or an error or close happens
	buf     []byte     // written, not yet handed to the socket
	spare   []byte     // the flusher's drained buffer, for reuse
	err     error      // the first write error; sticky
	closing bool
	kick    chan struct{} // wakes the flusher; capacity 1
	closed  chan struct{} // closed by Close: the flusher lingers no more
	done    chan struct{} // closed when the flusher has exited

	readErr  chan struct{} // closed when a read fails (the broker closed its side)
	readOnce sync.Once

	closeOnce sync.Once
	closeErr  error
}

func newBufConn(c net.Conn, linger time.Duration) *bufConn {
	b := &bufConn{
		Conn:    c,
		r:       bufio.NewReaderSize(c, connReadBuffer),
		linger:  linger,
		kick:    make(chan struct{}, 1),
		closed:  make(chan struct{}),
		done:    make(chan struct{}),
		readErr: make(chan struct{}),
	}
	b.cond = sync.NewCond(&b.mu)
	go b.flusher()
	return b
}

func (b *bufConn) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.failed(err)
	return n, err
}

// readHeader reads a packet's fixed header from the buffer.
func (b *bufConn) readHeader() (typ, flags byte, n int, err error) {
	typ, flags, n, err = readHeader(b.r)
	b.failed(err)
	return typ, flags, n, err
}

// peek returns the next n buffered bytes without consuming them; n must not
// exceed the buffer's size.
func (b *bufConn) peek(n int) ([]byte, error) {
	p, err := b.r.Peek(n)
	b.failed(err)
	return p, err
}

// failed notes a read error: the broker has closed its side (or the socket
// failed), which Close waits for.
func (b *bufConn) failed(err error) {
	if err != nil {
		b.readOnce.Do(func() { close(b.readErr) })
	}
}

// Write queues p for the flusher. It waits while connWriteLimit bytes are
// queued; it fails with the first write error, or net.ErrClosed after Close.
func (b *bufConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.err == nil && !b.closing && len(b.buf) > 0 && len(b.buf)+len(p) > connWriteLimit {
		b.cond.Wait()
	}
	switch {
	case b.err != nil:
		return 0, b.err
	case b.closing:
		return 0, net.ErrClosed
	}
	first := len(b.buf) == 0
	b.buf = append(b.buf, p...)
	if first {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// flusher writes what Write queued, all of it at once, until Close.
func (b *bufConn) flusher() {
	defer close(b.done)
	linger := time.NewTimer(time.Hour) // one timer for the connection's life
	linger.Stop()
	defer linger.Stop()
	for {
		<-b.kick
		if b.linger > 0 {
			linger.Reset(b.linger)
			select {
			case <-linger.C:
			case <-b.closed:
				linger.Stop()
			}
		}
		b.mu.Lock()
		out, closing := b.buf, b.closing
		b.buf, b.spare = b.spare[:0], nil
		b.cond.Broadcast()
		b.mu.Unlock()
		if len(out) > 0 {
			if _, err := b.Conn.Write(out); err != nil {
				b.mu.Lock()
				if b.err == nil {
					b.err = fmt.Errorf("mqtt: write to broker: %w", err)
				}
				b.cond.Broadcast()
				b.mu.Unlock()
				// The reader learns of the loss.
				_ = b.Conn.Close()
				return
			}
		}
		b.mu.Lock()
		b.spare = out[:0]
		if closing && len(b.buf) == 0 {
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
	}
}

// Close writes out what is queued (bounded by closeFlushTimeout), then
// closes the socket.
func (b *bufConn) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closing = true
		b.cond.Broadcast()
		b.mu.Unlock()
		close(b.closed)
		_ = b.Conn.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
		select {
		case b.kick <- struct{}{}:
		default:
		}
		<-b.done
		if hc, ok := b.Conn.(interface{ CloseWrite() error }); ok && hc.CloseWrite() == nil {
			select {
			case <-b.readErr:
			case <-time.After(closeFlushTimeout):
			}
		}
		b.closeErr = b.Conn.Close()
		if errors.Is(b.closeErr, net.ErrClosed) {
			b.closeErr = nil // the flusher closed it after a write error
		}
	})
	return b.closeErr
}

// dialer returns a function that connects to the broker over TCP (or TLS,
// for mqtts) within timeout, buffered with the given linger.
func dialer(timeout, linger time.Duration, tc *tls.Config) func(context.Context, *url.URL) (*bufConn, error) {
	return func(ctx context.Context, u *url.URL) (*bufConn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var (
			c   net.Conn
			err error
		)
		if u.Scheme == "mqtts" {
			c, err = (&tls.Dialer{Config: tc}).DialContext(ctx, "tcp", u.Host)
		} else {
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
		}
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", u.Redacted(), err)
		}
		return newBufConn(c, linger), nil
	}
}
