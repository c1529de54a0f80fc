package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
)

// ErrClash is wrapped by every error CheckClashes returns.
var ErrClash = errors.New("configurations clash")

// CheckClashes reports every pair of markets, configured for one process,
// that would share what must be a market's own: a market name, an MQTT
// session (client id on one broker), a JetStream stream (on one NATS), a
// state directory, or an HTTP port under two different listen addresses.
// Equal listen
// addresses are fine: those markets share one listener. `edgeproc run`
// refuses to start on any of them; `edgeproc check-config` reports them.
func CheckClashes(cfgs []Config) error {
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

// Warnings returns what looks wrong in configurations that are otherwise
// valid together, one sentence each: a market whose MQTT topic names
// another market (km0/valencia/positions/+ in girona's file, or a level
// equal to another configured market's name), which would mix two fleets'
// positions into one market's results.
func Warnings(cfgs []Config) []string {
	var out []string
	for _, c := range cfgs {
		levels := strings.Split(c.MQTT.Topic, "/")
		named := ""
		// The project's topic layout: km0/MARKET/positions/COURIER.
		if len(levels) == 4 && levels[0] == "km0" && levels[2] == "positions" && levels[1] != c.Market && levels[1] != "+" {
			named = levels[1]
		}
		for _, o := range cfgs {
			if named == "" && o.Market != c.Market && slices.Contains(levels, o.Market) {
				named = o.Market
			}
		}
		if named != "" {
			out = append(out, fmt.Sprintf("market %s: mqtt.topic %q names market %s: its positions would be counted as %s's",
				c.Market, c.MQTT.Topic, named, c.Market))
		}
	}
	return out
}

// LogLevel is the level the configurations ask for together: the most
// verbose of their log.level values ("info" for none).
func LogLevel(cfgs []Config) string {
	if len(cfgs) == 0 {
		return Default().Log.Level
	}
	best := len(LogLevels) - 1
	for _, c := range cfgs {
		if l := slices.Index(LogLevels, c.Log.Level); l >= 0 && l < best {
			best = l
		}
	}
	return LogLevels[best]
}
