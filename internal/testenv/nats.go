package testenv

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsReadyTimeout bounds how long a (re)start may take before the test
// fails. The embedded server is normally ready within milliseconds; on a
// loaded CI machine enabling JetStream on three stores at once has taken
// over 10 s.
const natsReadyTimeout = 30 * time.Second

// serverErrors keeps what an embedded server reports as an error or a
// fatal error (the server runs with NoLog, and a listener it cannot bind
// or a JetStream it cannot enable otherwise shows only as never being
// ready). Notices, debug and trace lines are dropped.
type serverErrors struct {
	mu   sync.Mutex
	msgs []string
}

func (e *serverErrors) keep(format string, v ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.msgs) < 10 {
		e.msgs = append(e.msgs, fmt.Sprintf(format, v...))
	}
}

func (e *serverErrors) Noticef(string, ...any)         {}
func (e *serverErrors) Debugf(string, ...any)          {}
func (e *serverErrors) Tracef(string, ...any)          {}
func (e *serverErrors) Warnf(format string, v ...any)  { e.keep(format, v...) }
func (e *serverErrors) Errorf(format string, v ...any) { e.keep(format, v...) }
func (e *serverErrors) Fatalf(format string, v ...any) { e.keep(format, v...) }

// String is the errors kept so far, or "no error reported".
func (e *serverErrors) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.msgs) == 0 {
		return "no error reported"
	}
	return strings.Join(e.msgs, "; ")
}

// startServer starts srv and waits up to d until it accepts clients; the
// error says what the server reported if it does not.
func startServer(srv *server.Server, d time.Duration) error {
	errs := &serverErrors{}
	srv.SetLogger(errs, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(d) {
		srv.Shutdown()
		return fmt.Errorf("not ready within %v (server: %s)", d, errs)
	}
	return nil
}

// NATS is an embedded nats-server with JetStream owned by one test. Its port
// and store directory stay the same across Restart, so streams, their
// messages and their duplicate windows survive a restart as in production.
type NATS struct {
	tb       testing.TB
	storeDir string

	mu   sync.Mutex
	port int // -1 until the first start has picked one
	srv  *server.Server
}

// StartNATS starts an embedded nats-server with JetStream on 127.0.0.1 and a
// random port, storing in tb.TempDir(), and returns once it accepts clients.
// It is shut down when the test ends.
func StartNATS(tb testing.TB) *NATS {
	tb.Helper()
	SkipShort(tb, "a NATS server")
	n := &NATS{tb: tb, storeDir: tb.TempDir(), port: -1}
	n.start()
	tb.Cleanup(n.Shutdown)
	return n
}

// URL is the client URL, nats://127.0.0.1:PORT; it stays valid across Restart.
func (n *NATS) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d", n.port)
}

// Shutdown stops the server and waits until it has released its port and
// store. Clients see a disconnection. Shutting down twice is harmless.
func (n *NATS) Shutdown() {
	n.mu.Lock()
	srv := n.srv
	n.srv = nil
	n.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart shuts the server down if it runs, and starts it again on the
// same port with the same store.
func (n *NATS) Restart() {
	n.tb.Helper()
	n.Shutdown()
	n.start()
}

func (n *NATS) start() {
	n.tb.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	// A fresh Options each time: the server keeps and may amend the one it
	// is given.
	srv, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      n.port,
		JetStream: true,
		StoreDir:  n.storeDir,
		NoSigs:    true,
		NoLog:     true,
	})
	if err != nil {
		n.tb.Fatalf("new nats server on port %d: %v", n.port, err)
	}
	if err := startServer(srv, natsReadyTimeout); err != nil {
		n.tb.Fatalf("nats server on port %d: %v", n.port, err)
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		n.tb.Fatalf("nats server address %v is not TCP", srv.Addr())
	}
	n.port = addr.Port
	n.srv = srv
}

// Connect opens a client connection to the server that reconnects forever
// (every 50 ms) and buffers publishes while disconnected, as edgeproc's
// connection does. It is closed when the test ends.
func (n *NATS) Connect(tb testing.TB, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	return connect(tb, n.URL(), opts)
}

// connect opens a connection to url that reconnects forever (every 50 ms)
// and is closed when the test ends; opts come after the defaults.
func connect(tb testing.TB, url string, opts []nats.Option) *nats.Conn {
	tb.Helper()
	opts = append([]nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
		nats.ReconnectJitter(0, 0),
		// nats.go's default prints async errors (broken pipes while the
		// server is down) to stderr; tests assert on outcomes instead.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
	}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		tb.Fatalf("connect to %s: %v", url, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// ReadStream returns every message stored in stream, in stream order, with
// subject, headers and data. It connects to url on its own, so it can be
// called after the code under test has closed its connection.
func ReadStream(tb testing.TB, url, stream string) []*nats.Msg {
	tb.Helper()
	stored := ReadStored(tb, url, stream)
	msgs := make([]*nats.Msg, len(stored))
	for i, m := range stored {
		msgs[i] = &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}
	}
	return msgs
}

// Stored is a message as a stream stored it.
type Stored struct {
	Subject string
	Header  nats.Header
	Data    []byte
	Seq     uint64    // stream sequence
	Time    time.Time // when the stream leader stored it
}

// ReadStored returns every message of stream (only those on subjects,
// when given) in stream order. It connects to url on its own. A fetch that
// fails (a cluster moving a leader after a node died) is retried from the
// sequence after the last one read, for up to 30 s.
func ReadStored(tb testing.TB, url, stream string, subjects ...string) []Stored {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatalf("read stream %s: connect to %s: %v", stream, url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("read stream %s: jetstream: %v", stream, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		tb.Fatalf("read stream %s: %v", stream, err)
	}
	want := 0
	if len(subjects) == 0 {
		info, err := s.Info(ctx)
		if err != nil {
			tb.Fatalf("read stream %s: info: %v", stream, err)
		}
		want = int(info.State.Msgs)
	} else {
		for _, subj := range subjects {
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
			if err != nil {
				tb.Fatalf("read stream %s: info: %v", stream, err)
			}
			for _, n := range info.State.Subjects {
				want += int(n)
			}
		}
	}
	msgs := make([]Stored, 0, want)
	var last error
	for len(msgs) < want {
		if ctx.Err() != nil {
			tb.Fatalf("read stream %s: %d of %d messages: %v", stream, len(msgs), want, last)
		}
		if last != nil {
			time.Sleep(200 * time.Millisecond)
		}
		occ := jetstream.OrderedConsumerConfig{FilterSubjects: subjects}
		if len(msgs) > 0 {
			occ.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			occ.OptStartSeq = msgs[len(msgs)-1].Seq + 1
		}
		cons, err := s.OrderedConsumer(ctx, occ)
		if err != nil {
			last = fmt.Errorf("ordered consumer: %w", err)
			continue
		}
		for len(msgs) < want {
			batch, err := cons.Fetch(min(want-len(msgs), 1000), jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				last = fmt.Errorf("fetch: %w", err)
				break
			}
			got := 0
			for m := range batch.Messages() {
				md, err := m.Metadata()
				if err != nil {
					tb.Fatalf("read stream %s: metadata: %v", stream, err)
				}
				msgs = append(msgs, Stored{m.Subject(), m.Headers(), m.Data(), md.Sequence.Stream, md.Timestamp})
				got++
			}
			if err := batch.Error(); err != nil {
				last = fmt.Errorf("fetch: %w", err)
				break
			}
			if got == 0 {
				last = fmt.Errorf("no message after %d of %d", len(msgs), want)
				break
			}
		}
	}
	return msgs
}
