package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/testenv"
)

// jwtServer starts an embedded nats-server with JetStream that admits only
// users of one account (decentralised JWT authentication), and returns
// its URL and a user's credentials in the .creds format.
func jwtServer(t *testing.T) (url string, creds []byte) {
	t.Helper()
	testenv.SkipShort(t, "a NATS server with JWT authentication")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, err := okp.PublicKey()
	must(err)
	akp, err := nkeys.CreateAccount()
	must(err)
	apub, err := akp.PublicKey()
	must(err)
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit, Streams: jwt.NoLimit, Consumer: jwt.NoLimit}
	ajwt, err := ac.Encode(okp)
	must(err)
	ukp, err := nkeys.CreateUser()
	must(err)
	upub, err := ukp.PublicKey()
	must(err)
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	must(err)
	seed, err := ukp.Seed()
	must(err)
	creds, err = jwt.FormatUserConfig(ujwt, seed)
	must(err)

	// The server needs a system account of the operator's too.
	skp, err := nkeys.CreateAccount()
	must(err)
	spub, err := skp.PublicKey()
	must(err)
	sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
	must(err)
	resolver := &server.MemAccResolver{}
	must(resolver.Store(apub, ajwt))
	must(resolver.Store(spub, sjwt))
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(),
		TrustedKeys: []string{opub}, AccountResolver: resolver, SystemAccount: spub,
	})
	must(err)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(srv.Shutdown)
	return srv.ClientURL(), creds
}

// tail and deadzones connect as run does: with the credentials of the
// file's nats.creds_env (the server admits no one without them).
func TestTail_UsesTheConfiguredCredentials(t *testing.T) {
	url, creds := jwtServer(t)
	t.Setenv("EDGEPROC_TEST_NATS_CREDS", string(creds))
	nc, err := nats.Connect(url, nats.UserCredentialBytes(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := bridge.Open(ctx, nc, bridge.Config{Market: "girona"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	publishWorked(t, b)

	dir := t.TempDir()
	write := func(name, creds string) string {
		p := filepath.Join(dir, name)
		src := "market: girona\nnats:\n  url: " + url + "\n" + creds
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	with := write("with.yaml", "  creds_env: EDGEPROC_TEST_NATS_CREDS\n")
	without := write("without.yaml", "")

	code, out, errs := runCLI(t, "tail", "--config", with, "--since", "1h", "--json", "--type", "distance", "--count", "1")
	if code != 0 || !strings.Contains(out, `"type":"distance"`) {
		t.Errorf("tail with creds_env: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = runCLI(t, "tail", "--config", without, "--since", "1h", "--count", "1")
	if code != 1 || !strings.Contains(strings.ToLower(errs), "authorization violation") {
		t.Errorf("tail without credentials: exit %d, stderr %q; want the authorization violation", code, errs)
	}
	code, out, errs = runDeadzones(t, "--config", with, "--since", "1h")
	if code != 0 || !strings.Contains(out, `"type":"FeatureCollection"`) {
		t.Errorf("deadzones with creds_env: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
