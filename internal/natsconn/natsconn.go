// Package natsconn opens edgeproc's NATS connections, the service's and
// the commands' that read its results (tail, deadzones), with one set of
// options built from a market's nats section: the client name, the
// credentials of nats.creds_env, TLS for tls:// URLs, reconnecting
// forever.
//
// It also says why a connection cannot be made. nats.go reports a refused
// first connection as "no servers available for connection", and a TLS
// or authorization failure while reconnecting through no callback at all;
// here every failed attempt's own cause (the dial error, the TLS error,
// the server's "authorization violation") is logged with the URL within
// the attempt, the first at once and then one per step of a doubling
// delay (1 s up to a minute) with the count of those held back
// (ratelog.Backoff), until the connection is up again.
package natsconn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/ratelog"
)

const (
	// ReconnectWait is the pause after every server of the URL was tried
	// in vain: a refused connection costs a server little, and edgeproc
	// is back within a quarter second of the server.
	ReconnectWait = 250 * time.Millisecond
	// DialTimeout bounds one TCP connection attempt (nats.go's default).
	DialTimeout = 2 * time.Second

	// logMin and logMax are the steps of the trouble log's backoff.
	logMin = time.Second
	logMax = time.Minute
)

// Connect opens n's connection for a process that runs until stopped:
// it returns at once even when no server answers (the connection then
// retries in the background, RetryOnFailedConnect), and reconnects
// forever. name is the client name the server shows (nats.Name). Trouble
// goes to log. An error is returned only for options nats.go refuses (a
// malformed URL, unreadable credentials).
func Connect(n config.NATS, name string, log *slog.Logger) (*nats.Conn, error) {
	r := newReporter(n.URL, log, true)
	nc, err := nats.Connect(n.URL, append(Options(n, name), r.options(true)...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", n.URL, err)
	}
	r.start(nc)
	reporters.Store(nc, r)
	go func() {
		<-r.closed
		reporters.Delete(nc)
	}()
	return nc, nil
}

// Dial opens n's connection for a command that reads and exits: when the
// first attempt at every server fails it returns that failure's cause
// (the dial error, where nats.go says only "no servers available"), and
// logs nothing itself until connected; once connected it reconnects
// forever, logging as Connect's does.
func Dial(n config.NATS, name string, log *slog.Logger) (*nats.Conn, error) {
	r := newReporter(n.URL, log, false)
	nc, err := nats.Connect(n.URL, append(Options(n, name), r.options(false)...)...)
	if err != nil {
		if errors.Is(err, nats.ErrNoServers) {
			if d := r.lastDialErr(); d != nil {
				err = d
			}
		}
		return nil, fmt.Errorf("connect to nats %s: %w", n.URL, err)
	}
	r.start(nc)
	return nc, nil
}

// Options are the connection options of n without the logging handlers:
// the client name, reconnecting forever, the credentials of creds_env
// (read now), TLS (1.2 or later, the system's roots) when a URL is
// tls://.
func Options(n config.NATS, name string) []nats.Option {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		// nats.go gives up after the same authorization error twice: the
		// credentials may be fixed on the server while edgeproc waits.
		nats.IgnoreAuthErrorAbort(),
	}
	if creds := n.Creds(); creds != "" {
		opts = append(opts, nats.UserCredentialBytes([]byte(creds)))
	}
	if usesTLS(n.URL) {
		opts = append(opts, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	return opts
}

// usesTLS reports whether any URL of a comma-separated list is tls://.
func usesTLS(urls string) bool {
	for _, u := range strings.Split(urls, ",") {
		if p, err := url.Parse(strings.TrimSpace(u)); err == nil && p.Scheme == "tls" {
			return true
		}
	}
	return false
}

// dialError is a failed TCP dial, already logged by the dialer.
type dialError struct{ err error }

func (e dialError) Error() string { return e.err.Error() }
func (e dialError) Unwrap() error { return e.err }

// reporter logs one connection's trouble. It is the connection's dialer,
// so it sees each attempt start and every dial error first hand.
type reporter struct {
	url   string
	log   *slog.Logger
	limit ratelog.Backoff

	// loud is set while trouble is logged: from the start for Connect,
	// from the first connection for Dial.
	loud     atomic.Bool
	troubled atomic.Bool // trouble logged since the connection was last up

	dialed chan struct{} // a dial succeeded: check the attempt's outcome
	closed chan struct{} // the connection is closed for good
	once   sync.Once

	mu      sync.Mutex
	lastErr error // the last dial error
	why     error // the last trouble of any kind, for Why
}

// reporters holds the reporter of every connection Connect opened, for
// Why: a market's readiness says why its connection is down.
var reporters sync.Map // *nats.Conn → *reporter

// Why says, for a connection Connect opened that is not connected now,
// the URL and the cause of the last failed attempt ("nats://h:4222:
// dial tcp 127.0.0.1:4222: connect: connection refused"); "" when it is
// connected, or when nothing failed yet.
func Why(nc *nats.Conn) string {
	if nc == nil || nc.IsConnected() {
		return ""
	}
	v, ok := reporters.Load(nc)
	if !ok {
		return ""
	}
	r := v.(*reporter)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.why == nil {
		return ""
	}
	return r.url + ": " + r.why.Error()
}

func newReporter(url string, log *slog.Logger, loud bool) *reporter {
	r := &reporter{url: url, log: log, limit: ratelog.Backoff{Min: logMin, Max: logMax},
		dialed: make(chan struct{}, 1), closed: make(chan struct{})}
	r.loud.Store(loud)
	return r
}

// options are the handlers that report: the dialer, the callbacks.
func (r *reporter) options(retry bool) []nats.Option {
	return []nats.Option{
		nats.RetryOnFailedConnect(retry),
		nats.SetCustomDialer(r),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			// Dial errors are the dialer's; "no servers" after a refused
			// first attempt says nothing the dialer did not.
			if _, ok := errors.AsType[dialError](err); ok || errors.Is(err, nats.ErrNoServers) {
				return
			}
			r.trouble("", err)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
				r.trouble("", err)
				return
			}
			if sub != nil {
				r.log.Warn("nats: asynchronous error", "url", r.url, "subject", sub.Subject, "err", err)
				return
			}
			r.log.Warn("nats: asynchronous error", "url", r.url, "err", err)
		}),
		nats.ConnectHandler(func(nc *nats.Conn) { r.up(nc, "nats connected") }),
		nats.ReconnectHandler(func(nc *nats.Conn) { r.up(nc, "nats reconnected") }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil { // our own Close
				r.log.Debug("nats connection closed", "url", r.url)
				return
			}
			r.log.Warn("nats disconnected", "url", r.url, "err", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { r.once.Do(func() { close(r.closed) }) }),
	}
}

// Dial is the connection's dialer (nats.CustomDialer).
func (r *reporter) Dial(network, address string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: DialTimeout}).Dial(network, address)
	if err != nil {
		r.mu.Lock()
		r.lastErr = err
		r.mu.Unlock()
		r.trouble(address, err)
		return nil, dialError{err}
	}
	select {
	case r.dialed <- struct{}{}:
	default:
	}
	return c, nil
}

func (r *reporter) lastDialErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// start watches the attempts that get past the dial: a TLS handshake or
// the server's answer to CONNECT may still fail, and nats.go reports that
// through no callback while it reconnects.
func (r *reporter) start(nc *nats.Conn) {
	if nc.IsConnected() {
		r.loud.Store(true)
	}
	go func() {
		for {
			select {
			case <-r.closed:
				return
			case <-r.dialed:
			}
			// nats.go holds the connection's lock from the dial to the
			// end of the handshake: Status waits for the attempt's outcome.
			if st := nc.Status(); st == nats.CONNECTED || st == nats.CLOSED {
				continue
			}
			if err := nc.LastError(); err != nil {
				if _, ok := errors.AsType[dialError](err); !ok {
					r.trouble("", err)
				}
			}
		}
	}()
}

// trouble logs a failed attempt, rate-limited.
func (r *reporter) trouble(server string, err error) {
	if !r.loud.Load() {
		return
	}
	r.mu.Lock()
	r.why = err
	r.mu.Unlock()
	ok, held := r.limit.Allow()
	r.troubled.Store(true)
	if !ok {
		return
	}
	attrs := []any{"url", r.url, "err", err}
	if server != "" {
		attrs = append(attrs, "server", server)
	}
	if held > 0 {
		attrs = append(attrs, "suppressed", held)
	}
	r.log.Warn("nats: cannot connect", attrs...)
}

// up ends a run of trouble.
func (r *reporter) up(nc *nats.Conn, msg string) {
	r.loud.Store(true)
	held := r.limit.Reset()
	attrs := []any{"url", r.url, "server", nc.ConnectedAddr()}
	if held > 0 {
		attrs = append(attrs, "suppressed", held)
	}
	if r.troubled.Swap(false) || msg == "nats reconnected" {
		r.log.Info(msg, attrs...)
	}
}
