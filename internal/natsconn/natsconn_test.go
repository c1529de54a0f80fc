package natsconn

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/testenv"
)

// troubleWithin is how soon a failed attempt's cause must be in the log.
const troubleWithin = 2 * time.Second

func logger(buf *testenv.LogBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// mustCreds sets env to a user's credentials (a JWT signed by a fresh
// account, and the user's seed), in the .creds format.
func mustCreds(t *testing.T, env string) {
	t.Helper()
	akp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	ukp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	upub, err := ukp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := ukp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(env, string(creds))
}

func TestOptions(t *testing.T) {
	mustCreds(t, "NATSCONN_TEST_CREDS")
	cases := []struct {
		url, credsEnv string
		secure, creds bool
	}{
		{"nats://127.0.0.1:4222", "", false, false},
		{"tls://nats.example:4222", "", true, false},
		{"nats://a:4222, tls://b:4222", "NATSCONN_TEST_CREDS", true, true},
		{"nats://a:4222", "NATSCONN_TEST_CREDS", false, true},
	}
	for _, c := range cases {
		o := nats.GetDefaultOptions()
		for _, opt := range Options(config.NATS{URL: c.url, CredsEnv: c.credsEnv}, "edgeproc-x") {
			if err := opt(&o); err != nil {
				t.Fatal(err)
			}
		}
		if o.Name != "edgeproc-x" || o.MaxReconnect != -1 || o.ReconnectWait != ReconnectWait || !o.IgnoreAuthErrorAbort {
			t.Errorf("%s: name %q, max reconnects %d, wait %v, ignore auth abort %v", c.url, o.Name, o.MaxReconnect, o.ReconnectWait, o.IgnoreAuthErrorAbort)
		}
		if o.Secure != c.secure || (c.secure && o.TLSConfig.MinVersion != tls.VersionTLS12) {
			t.Errorf("%s: secure %v, want %v", c.url, o.Secure, c.secure)
		}
		if (o.UserJWT != nil) != c.creds {
			t.Errorf("%s: credentials set %v, want %v", c.url, o.UserJWT != nil, c.creds)
		}
	}
}

// startServer starts an embedded nats-server with opts on a free loopback
// port and returns its host:port.
func startServer(t *testing.T, opts *server.Options) string {
	t.Helper()
	testenv.SkipShort(t, "a NATS server")
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(srv.Shutdown)
	return srv.Addr().String()
}

// lines returns the log lines containing every one of want.
func lines(buf *testenv.LogBuffer, want ...string) []string {
	var got []string
	for _, l := range strings.Split(buf.String(), "\n") {
		ok := l != ""
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			got = append(got, l)
		}
	}
	return got
}

// A server that is down: the refusal is logged at once with the URL,
// then once per backoff step with what was held back, and the connection
// comes up when the server does.
func TestConnect_RefusedIsLoggedThenConnects(t *testing.T) {
	n := testenv.StartNATS(t)
	url := n.URL()
	n.Shutdown()
	var buf testenv.LogBuffer
	nc, err := Connect(config.NATS{URL: url}, "edgeproc-test", logger(&buf))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testenv.WaitFor(t, troubleWithin, "the refusal in the log", func() bool {
		return len(lines(&buf, `msg="nats: cannot connect"`, "url="+url, "connection refused")) > 0
	})
	// Attempts every quarter second; lines at 0 and 1 s, the second
	// saying how many it held back.
	testenv.WaitFor(t, 10*time.Second, "a second line with the attempts held back", func() bool {
		return len(lines(&buf, `msg="nats: cannot connect"`, "suppressed=")) > 0
	})
	if got := lines(&buf, `msg="nats: cannot connect"`); len(got) > 3 {
		t.Errorf("%d lines of trouble so soon, want the rate limited to one per step:\n%s", len(got), strings.Join(got, "\n"))
	}
	n.Restart()
	testenv.WaitFor(t, 10*time.Second, "connected", nc.IsConnected)
	testenv.WaitFor(t, 2*time.Second, "the connection in the log", func() bool {
		return len(lines(&buf, `msg="nats connected"`, "url="+url)) > 0
	})
}

// A refused Dial fails at once with the dial's cause, and logs nothing.
func TestDial_RefusedSaysWhy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var buf testenv.LogBuffer
	start := time.Now()
	nc, err := Dial(config.NATS{URL: "nats://" + addr}, "edgeproc-test", logger(&buf))
	if err == nil {
		nc.Close()
		t.Fatal("connected to a closed port")
	}
	if !strings.Contains(err.Error(), "connect to nats nats://"+addr+": dial tcp "+addr+": connect: connection refused") {
		t.Errorf("got %q, want the dial's cause", err)
	}
	if d := time.Since(start); d > troubleWithin {
		t.Errorf("failed after %v, want at once", d)
	}
	if buf.String() != "" {
		t.Errorf("logged %q, want nothing: the error says it", buf.String())
	}
}

// Credentials the server refuses: its "authorization violation" is
// logged (Connect) or returned (Dial), not "no servers available".
func TestConnect_AuthorizationFailureIsLogged(t *testing.T) {
	addr := startServer(t, &server.Options{Username: "u", Password: "p"})
	mustCreds(t, "NATSCONN_TEST_CREDS")
	n := config.NATS{URL: "nats://" + addr, CredsEnv: "NATSCONN_TEST_CREDS"}
	var buf testenv.LogBuffer
	nc, err := Connect(n, "edgeproc-test", logger(&buf))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testenv.WaitFor(t, troubleWithin, "the authorization failure in the log", func() bool {
		return len(lines(&buf, `msg="nats: cannot connect"`, "url=nats://"+addr, "uthorization")) > 0
	})
	// It keeps trying (the credentials may be fixed on the server): a
	// second line a second later, the connection not closed (nats.go
	// closes it after the same authorization error twice by default).
	testenv.WaitFor(t, 10*time.Second, "a second line with the attempts held back", func() bool {
		return len(lines(&buf, `msg="nats: cannot connect"`, "uthorization", "suppressed=")) > 0
	})
	if st := nc.Status(); st == nats.CLOSED {
		t.Errorf("status %v: gave up", st)
	}
	if _, err := Dial(n, "edgeproc-test", logger(&buf)); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Errorf("Dial: got %v, want the authorization violation", err)
	}
}

// A tls:// URL speaks TLS, with the system's roots: a server whose
// certificate they do not hold is refused, and the log says so.
func TestConnect_TLSFailureIsLogged(t *testing.T) {
	dir := t.TempDir()
	testenv.ServerCert(t, dir)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, &server.Options{TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	url := fmt.Sprintf("tls://%s", addr)
	var buf testenv.LogBuffer
	nc, err := Connect(config.NATS{URL: url}, "edgeproc-test", logger(&buf))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testenv.WaitFor(t, troubleWithin, "the TLS failure in the log", func() bool {
		return len(lines(&buf, `msg="nats: cannot connect"`, "url="+url, "x509: certificate signed by unknown authority")) > 0
	})
	if _, err := Dial(config.NATS{URL: url}, "edgeproc-test", logger(&buf)); err == nil || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") {
		t.Errorf("Dial: got %v, want the certificate error", err)
	}
}
