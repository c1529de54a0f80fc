package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/km0/edgeproc/defaults"
)

var healthCommand = &command{
	name:    "health",
	args:    "[--timeout D] [URL]",
	summary: "probe a running edgeproc's /healthz or /readyz (container health check)",
	help: `GETs URL (default http://127.0.0.1:9464/healthz) and exits 0 on 200 OK,
1 otherwise, printing the answer. /healthz says the process serves;
/readyz says every market has MQTT and NATS connected and its stream
open. For a Docker HEALTHCHECK or a script, with no curl in the image.`,
	example: "edgeproc health http://127.0.0.1:9464/readyz",
	setup: func(fs *flag.FlagSet) runFunc {
		timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
		return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
			url := "http://" + defaults.Listen + "/healthz"
			switch len(args) {
			case 0:
			case 1:
				url = args[0]
			default:
				return usageError{"health takes at most one URL"}
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
