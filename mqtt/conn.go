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
	// bounded and backpressure reaches paho as it would on the bare socket.
	connWriteLimit = 256 << 10
	// closeFlushTimeout bounds Close's last flush of what is still buffered
	// (the final PUBACKs and the DISCONNECT), and then again its wait for
	// the broker to close its side.
	closeFlushTimeout = time.Second
)

// bufConn is the connection under paho. paho reads a packet in pieces (the
// fixed header, each length byte, the body) and writes every packet, each
// PUBACK too, with its own write; on a bare socket that is one syscall per
// piece. bufConn reads through a bufio.Reader, so one read syscall takes
// many packets, and coalesces writes: Write appends to a buffer that one
// flusher goroutine writes out, so a burst of PUBACKs (paho flushes acks
// every AckInterval, one packet each) becomes one write. A write costs no
// more latency than the hand-off to the flusher, which writes whatever has
// gathered as soon as it runs.
//
// A write error is not lost: it is returned by every later Write, and the
// connection is closed, so paho's reader fails too and the connection is
// dropped and re-established (the broker redelivers what was not acked).
//
// Close half-closes the socket after the last flush and waits for the
// broker to close its side (it does once it has read the DISCONNECT) before
// it returns. So when Close returns the broker has processed every PUBACK
// written before it: a new connection with the same client id (edgeproc
// restarted at once) can never take the session over while the old
// connection's last acks are still unread, which would make the broker
// redeliver those messages.
//
// It implements sync.Locker, which paho takes around the buffers of one
// packet, so packets from paho's goroutines (acks, pings, subscribes) never
// interleave.
type bufConn struct {
	net.Conn
	r *bufio.Reader

	pkt sync.Mutex // sync.Locker for paho: one packet at a time

	mu      sync.Mutex
	cond    *sync.Cond // signalled when buf is taken or an error or close happens
	buf     []byte     // written, not yet handed to the socket
	spare   []byte     // the flusher's drained buffer, for reuse
	err     error      // the first write error; sticky
	closing bool
	kick    chan struct{} // wakes the flusher; capacity 1
	done    chan struct{} // closed when the flusher has exited

	readErr  chan struct{} // closed when a read fails (the broker closed its side)
	readOnce sync.Once

	closeOnce sync.Once
	closeErr  error
}

func newBufConn(c net.Conn) *bufConn {
	b := &bufConn{
		Conn:    c,
		r:       bufio.NewReaderSize(c, connReadBuffer),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		readErr: make(chan struct{}),
	}
	b.cond = sync.NewCond(&b.mu)
	go b.flusher()
	return b
}

// Lock and Unlock make paho write each packet as a unit.
func (b *bufConn) Lock()   { b.pkt.Lock() }
func (b *bufConn) Unlock() { b.pkt.Unlock() }

func (b *bufConn) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil {
		b.readOnce.Do(func() { close(b.readErr) })
	}
	return n, err
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
	for {
		<-b.kick
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
				// paho learns of the loss from its reader.
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

// dialer returns autopaho's AttemptConnection: a TCP (or TLS, for mqtts)
// connection within timeout, wrapped in a bufConn.
func dialer(timeout time.Duration, tc *tls.Config) func(context.Context, *url.URL) (net.Conn, error) {
	return func(ctx context.Context, u *url.URL) (net.Conn, error) {
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
		return newBufConn(c), nil
	}
}
