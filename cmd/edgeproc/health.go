package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
)

var healthCommand = &command{
	name:    "health",
	args:    "[--timeout D] [--config FILE | URL]",
	summary: "probe a running edgeproc's /healthz or /readyz (container health check)",
	help: `GETs URL (default http://127.0.0.1:9464/healthz) and exits 0 on 200 OK,
1 otherwise, printing the answer. /healthz says the process serves;
/readyz says every market has MQTT and NATS connected and its stream
open. For a Docker HEALTHCHECK or a script, with no curl in the image.

With --config FILE the URL is that configuration's own listener:
http://HOST:PORT/healthz for its http.listen, a wildcard host (0.0.0.0,
::) probed on loopback, so the check follows the file the process runs
with. A file with http.web_config (TLS, basic auth) is refused there:
give the URL.`,
	example: "edgeproc health http://127.0.0.1:9464/readyz\nedgeproc health --config /etc/edgeproc/edgeproc.yaml",
	setup: func(fs *flag.FlagSet) runFunc {
		timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
		cfgPath := fs.String("config", "", "probe the /healthz of this configuration's http.listen")
		return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
			url := "http://" + defaults.Listen + "/healthz"
			switch {
			case len(args) > 1:
				return usageError{"health takes at most one URL"}
			case len(args) == 1 && *cfgPath != "":
				return usageError{"health takes --config FILE or a URL, not both"}
			case len(args) == 1:
				url = args[0]
			case *cfgPath != "":
				c, err := config.Load(*cfgPath)
				if err != nil {
					return err
				}
				if url, err = healthURL(c.HTTP); err != nil {
					return fmt.Errorf("%s: %w", *cfgPath, err)
				}
			}
			ctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return usageError{fmt.Sprintf("URL %q: %v", url, err)}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			text := strings.TrimSpace(string(body))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s: %s", url, resp.Status, text)
			}
			fmt.Fprintf(stdout, "%s: %s\n", url, text)
			return nil
		}
	},
}

// healthURL is the /healthz URL of a configuration's listener, as a probe
// on the same host reaches it: a wildcard address is probed on loopback.
func healthURL(h config.HTTP) (string, error) {
	if h.WebConfig != "" {
		return "", fmt.Errorf("http.web_config %s is set (TLS or basic auth): give health the URL instead of --config", h.WebConfig)
	}
	host, port, err := net.SplitHostPort(h.Listen)
	if err != nil {
		return "", fmt.Errorf("http.listen %q: %w", h.Listen, err)
	}
	switch ip := net.ParseIP(host); {
	case host == "" || (ip != nil && ip.IsUnspecified() && ip.To4() != nil):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}
