package service

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"

	"github.com/km0/edgeproc/config"
)

// CheckWebConfig checks the http.web_config files of cfgs as Run would
// use them: each file must load (its TLS certificate and key, its users'
// bcrypt hashes), and markets that share a listener must name the same
// file, since the listener serves them all behind one.
func CheckWebConfig(cfgs []config.Config) error {
	byListen := map[string]config.Config{}
	for _, c := range cfgs {
		if err := web.Validate(c.HTTP.WebConfig); err != nil {
			return fmt.Errorf("market %s: http.web_config %s: %w", c.Market, c.HTTP.WebConfig, err)
		}
		if o, ok := byListen[c.HTTP.Listen]; ok && o.HTTP.WebConfig != c.HTTP.WebConfig {
			return fmt.Errorf("markets %s and %s share http.listen %s but not http.web_config (%q, %q)",
				o.Market, c.Market, c.HTTP.Listen, o.HTTP.WebConfig, c.HTTP.WebConfig)
		}
		byListen[c.HTTP.Listen] = c
	}
	return nil
}

// serveWeb serves srv on ln behind the web config file path (the
// Prometheus exporters' format: TLS, and basic-auth users with bcrypt
// hashes, every endpoint of the listener behind them), or in plain HTTP
// when path is empty. A listener that is not on loopback and has no web
// config serves courier positions to whoever reaches it: that is warned
// about.
func serveWeb(srv *http.Server, ln net.Listener, path string, log *slog.Logger) error {
	open := false
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
		open = true
	}
	switch {
	case path == "" && open:
		log.Warn("http listener is not on loopback and has no http.web_config: /board/, /metrics and the health endpoints are open to whoever reaches it, without TLS",
			"addr", ln.Addr().String())
	case path != "":
		if open {
			warnOpenWebConfig(path, ln.Addr().String(), log)
		}
		stop := watchWebConfig(path, webConfigEvery, log)
		srv.RegisterOnShutdown(stop)
		defer stop()
	}
	return web.Serve(ln, srv, &web.FlagConfig{WebConfigFile: &path}, log)
}

// warnOpenWebConfig warns when a web config guarding a listener off
// loopback leaves it open: no basic_auth_users (every endpoint served to
// anyone), or no TLS (passwords and positions in clear).
func warnOpenWebConfig(path, addr string, log *slog.Logger) {
	b, err := os.ReadFile(path)
	if err != nil {
		return // CheckWebConfig read it; a file gone now is watchWebConfig's to report
	}
	var wc struct {
		TLS   map[string]any    `yaml:"tls_server_config"`
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if yaml.Unmarshal(b, &wc) != nil {
		return
	}
	if len(wc.Users) == 0 {
		log.Warn("http.web_config has no basic_auth_users: /board/, /metrics and the health endpoints of a listener off loopback are open to whoever reaches it",
			"web_config", path, "addr", addr)
	}
	if len(wc.TLS) == 0 {
		log.Warn("http.web_config has no tls_server_config: a listener off loopback serves passwords and courier positions in clear",
			"web_config", path, "addr", addr)
	}
}

// webConfigEvery is how often the web config file is checked while the
// listener serves: it is read again at every request and handshake, and
// one that stops loading fails them all.
const webConfigEvery = 5 * time.Second

// watchWebConfig checks the web config file every d until the returned
// stop is called: once it no longer loads, every request and TLS
// handshake fails closed (the exporter toolkit's rule), so it says so at
// ERROR with the cause, and again when the file loads once more.
func watchWebConfig(path string, d time.Duration, log *slog.Logger) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(d)
		defer t.Stop()
		var broken bool
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			switch err := web.Validate(path); {
			case err != nil && !broken:
				broken = true
				log.Error("http.web_config no longer loads: every request and TLS handshake of its listener fails until it is fixed", "web_config", path, "err", err)
			case err == nil && broken:
				broken = false
				log.Info("http.web_config loads again", "web_config", path)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-exited
	}
}
