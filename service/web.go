package service

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/exporter-toolkit/web"

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
	if path == "" {
		if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
			log.Warn("http listener is not on loopback and has no http.web_config: /board/, /metrics and the health endpoints are open to whoever reaches it, without TLS",
				"addr", ln.Addr().String())
		}
	}
	return web.Serve(ln, srv, &web.FlagConfig{WebConfigFile: &path}, log)
}
