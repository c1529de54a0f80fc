package service_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/service"
)

// TestRun_WebConfigGuardsEveryEndpoint: with http.web_config (TLS and a
// basic-auth user, the Prometheus exporters' file), every endpoint of the
// listener — /metrics, /healthz, /readyz, /board/ and its event stream —
// answers only over TLS and only to the user with the right password; a
// wrong password or an unknown user gets 401; nothing logged holds the
// password or its hash.
func TestRun_WebConfigGuardsEveryEndpoint(t *testing.T) {
	mosq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	dir := t.TempDir()
	pool := testenv.ServerCert(t, dir)
	const user, password = "ops", "correct horse battery staple"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webCfg, fmt.Appendf(nil, "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  %s: %s\n", user, hash), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := mustConfig(t, "guarded", mosq.URL(), ns.URL())
	cfg.HTTP.WebConfig = webCfg
	if err := service.CheckWebConfig([]config.Config{cfg}); err != nil {
		t.Fatal(err)
	}
	var logs testenv.LogBuffer
	svc := startService(t, []config.Config{cfg}, service.Deps{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	addr := (<-svc.addr).String()

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(scheme, path, u, p string) (int, string, error) {
		req, _ := http.NewRequest("GET", scheme+"://"+addr+path, nil)
		if u != "" {
			req.SetBasicAuth(u, p)
		}
		res, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			line, _ := bufio.NewReader(res.Body).ReadString('\n')
			return res.StatusCode, line, nil
		}
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), nil
	}
	testenv.WaitFor(t, 20*time.Second, "the listener answers over TLS", func() bool {
		code, _, err := get("https", "/healthz", user, password)
		return err == nil && code == http.StatusOK
	})
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/board/", "/board/events"} {
		for _, c := range []struct {
			name, user, password string
			want                 int
		}{
			{"no credentials", "", "", http.StatusUnauthorized},
			{"wrong password", user, "Tr0ub4dor&3", http.StatusUnauthorized},
			{"unknown user", "root", password, http.StatusUnauthorized},
		} {
			if code, _, err := get("https", path, c.user, c.password); err != nil || code != c.want {
				t.Errorf("%s with %s: %d (%v), want %d", path, c.name, code, err, c.want)
			}
		}
		code, body, err := get("https", path, user, password)
		if err != nil || (code != http.StatusOK && !(path == "/readyz" && code == http.StatusServiceUnavailable)) || body == "" {
			t.Errorf("%s with the right password: %d %.80q (%v), want it served", path, code, body, err)
		}
		if code, _, err := get("http", path, user, password); err == nil && code == http.StatusOK {
			t.Errorf("%s served over plain HTTP", path)
		}
	}
	svc.stop(t, 15*time.Second)
	if l := logs.String(); strings.Contains(l, password) || strings.Contains(l, string(hash)) {
		t.Error("the logs hold the password or its hash")
	}
}

// TestBoard_ThroughWebConfigInChromium: behind a web config with a
// basic-auth user, the fleet board does not load in a browser without
// credentials and works in one that sends them: the page, its script and
// its event stream, so every courier of a live fleet is drawn.
func TestBoard_ThroughWebConfigInChromium(t *testing.T) {
	const market = "guardedboard"
	mq := testenv.StartMosquitto(t)
	ns := testenv.StartNATS(t)
	dir := t.TempDir()
	const user, password = "ops", "correct horse battery staple"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webCfg, fmt.Appendf(nil, "basic_auth_users:\n  %s: %s\n", user, hash), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := mustConfig(t, market, mq.URL(), ns.URL())
	cfg.HTTP.WebConfig = webCfg
	r := startService(t, []config.Config{cfg}, service.Deps{Shards: 2})
	base := "http://" + (<-r.addr).String()

	br := testenv.StartChromium(t, 1280, 800)
	// Without credentials the page does not load (Chromium: a navigation
	// error, net::ERR_INVALID_AUTH_CREDENTIALS, after the server's 401).
	ctx, cancel := context.WithTimeout(br.Ctx, 20*time.Second)
	err = chromedp.Do(ctx, chromedp.Navigate(base+"/board/"))
	cancel()
	if err == nil || !strings.Contains(err.Error(), "AUTH") {
		t.Errorf("the board without credentials: %v, want an authentication error", err)
	}
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	if _, err := chromedp.Call(br.Ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(br.Ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}}); err != nil {
		t.Fatal(err)
	}
	br.Do(t, 20*time.Second, chromedp.Navigate(base+"/board/"))

	fl := &boardFleet{couriers: 12, period: 250 * time.Millisecond}
	fleetCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	pub := mq.Publisher(t, "guarded-fleet")
	go func() {
		defer close(done)
		fl.run(fleetCtx, t, pub, market)
	}()
	br.Wait(t, 20*time.Second, fmt.Sprintf(`document.getElementById("map").dataset.drawn == %d`, fl.couriers),
		`document.getElementById("map").dataset.drawn`)
	stop()
	<-done
}
