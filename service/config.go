package service

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"

	"github.com/km0/edgeproc/config"
)

// Embedded is the URL value (mqtt.url, nats.url) meaning that the caller
// provides the server: see Deps.MQTTURL and Deps.NATS.
const Embedded = "embedded"

// ErrClash is wrapped by the error Run returns when two configurations of
// one process would share what must be a market's own.
var ErrClash = errors.New("configurations clash")

// checkClashes reports every pair of markets that would share a market
// name, an MQTT session (client id on one broker), a JetStream stream (on
// one NATS), a state directory, or an HTTP port under two different listen
// addresses. Equal listen addresses are fine: those markets share one
// listener.
func checkClashes(cfgs []config.Config) error {
	var errs []error
	seen := map[string]string{} // "kind\x00value" -> market that has it
	claim := func(kind, value, market string) {
		k := kind + "\x00" + value
		if other, ok := seen[k]; ok {
			errs = append(errs, fmt.Errorf("%w: markets %s and %s have the same %s %q", ErrClash, other, market, kind, value))
			return
		}
		seen[k] = market
	}
	ports := map[string]string{} // port -> listen address
	for _, c := range cfgs {
		claim("market", c.Market, c.Market)
		claim("mqtt client_id", c.MQTT.URL+" "+c.MQTT.ClientID, c.Market)
		claim("nats stream", c.NATS.URL+" "+c.NATS.Stream, c.Market)
		claim("state dir", filepath.Clean(c.State.Dir), c.Market)
		_, port, err := net.SplitHostPort(c.HTTP.Listen)
		if err != nil {
			errs = append(errs, fmt.Errorf("market %s: http.listen %q: %w", c.Market, c.HTTP.Listen, err))
			continue
		}
		if prev, ok := ports[port]; ok && prev != c.HTTP.Listen {
			errs = append(errs, fmt.Errorf("%w: market %s: http.listen %q uses the port of %q; use the same address to share a listener",
				ErrClash, c.Market, c.HTTP.Listen, prev))
			continue
		}
		ports[port] = c.HTTP.Listen
	}
	return errors.Join(errs...)
}
