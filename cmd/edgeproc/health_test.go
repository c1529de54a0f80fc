package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/km0/edgeproc/config"
)

func TestHealthURL(t *testing.T) {
	cases := []struct {
		h    config.HTTP
		want string // "" = an error
	}{
		{config.HTTP{Listen: "127.0.0.1:9464"}, "http://127.0.0.1:9464/healthz"},
		{config.HTTP{Listen: "0.0.0.0:8080"}, "http://127.0.0.1:8080/healthz"},
		{config.HTTP{Listen: ":9000"}, "http://127.0.0.1:9000/healthz"},
		{config.HTTP{Listen: "[::]:9464"}, "http://[::1]:9464/healthz"},
		{config.HTTP{Listen: "10.1.2.3:9464"}, "http://10.1.2.3:9464/healthz"},
		{config.HTTP{Listen: "edge.local:9464"}, "http://edge.local:9464/healthz"},
		{config.HTTP{Listen: "0.0.0.0:9464", WebConfig: "web.yml"}, ""},
	}
	for _, c := range cases {
		got, err := healthURL(c.h)
		if c.want == "" {
			if err == nil {
				t.Errorf("%+v: got %q, want an error", c.h, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: got %q, %v; want %q", c.h, got, err, c.want)
		}
	}
}

// health --config probes the listener the file names, on a port that is
// not the default.
func TestHealth_FollowsTheConfiguredListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("ok"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	dir := t.TempDir()
	cfg := filepath.Join(dir, "edgeproc.yaml")
	if err := os.WriteFile(cfg, []byte("market: girona\nhttp:\n  listen: 0.0.0.0:"+port+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "health", "--config", cfg)
	if code != 0 || !strings.Contains(out, "http://127.0.0.1:"+port+"/healthz: ok") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = runCLI(t, "health", "--config", cfg, "http://127.0.0.1:1/healthz")
	if code != 2 || !strings.Contains(errs, "not both") {
		t.Errorf("--config and a URL: exit %d, stderr %q", code, errs)
	}
}
