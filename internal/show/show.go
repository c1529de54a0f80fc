// Package show reads edgeproc's published records (results, late records,
// rejected inputs, courier states) back from their JSON and renders them as
// one human-readable line each: the terminal view of `edgeproc tail` and of
// the demo's status board.
package show

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/position"
)

// Record holds the fields of any published record (docs/reference.md).
type Record struct {
	Type       string  `json:"type"`
	Market     string  `json:"market"`
	Courier    string  `json:"courier"`
	Key        string  `json:"key"`
	EmittedAt  int64   `json:"emitted_at_ms"`
	WinStart   int64   `json:"window_start_ms"`
	WinEnd     int64   `json:"window_end_ms"`
	DistanceM  float64 `json:"distance_m"`
	Positions  int     `json:"positions"`
	Stopped    bool    `json:"stopped"`
	Revision   int     `json:"revision"`
	SessStart  int64   `json:"session_start_ms"`
	LastSeen   int64   `json:"last_seen_ms"`
	EndOfInput bool    `json:"end_of_input"`
	SilentFrom int64   `json:"silent_from_ms"`
	RestoredAt int64   `json:"restored_at_ms"`
	GapMs      int64   `json:"gap_ms"`
	Operator   string  `json:"operator"`
	TS         int64   `json:"timestamp_ms"`
	Lateness   int64   `json:"lateness_ms"`
	Reason     string  `json:"reason"`
	Field      string  `json:"field"`
	Raw        string  `json:"raw"`
	Cell       string  `json:"cell"`
	Lat        float64 `json:"lat"`
	Lon        float64 `json:"lon"`
	Warnings   int     `json:"warnings"`
	Couriers   int     `json:"couriers"`
	Restored   int     `json:"restored"`
	SilenceMs  int64   `json:"silence_ms"`
}

// Decode parses one published record. A rejected input carries no courier
// field; its Courier is the one the payload named, when it names one.
func Decode(data []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("decode record: %w", err)
	}
	if r.Type == "" {
		return r, fmt.Errorf("decode record: no type")
	}
	if r.Type == "rejected" && r.Courier == "" {
		r.Courier = payloadCourier(r.Raw)
	}
	return r, nil
}

// courierRe finds a courier field in a payload that is not valid JSON (cut
// at 1 KiB, or malformed after the field).
var courierRe = regexp.MustCompile(`"courier"\s*:\s*"([A-Za-z0-9._:-]{1,64})"`)

// payloadCourier returns the courier id a rejected payload named, or "".
func payloadCourier(raw string) string {
	var p struct {
		Courier any `json:"courier"`
	}
	if json.Unmarshal([]byte(raw), &p) != nil {
		if m := courierRe.FindStringSubmatch(raw); m != nil {
			return m[1]
		}
		return ""
	}
	if s, ok := p.Courier.(string); ok {
		return s
	}
	return ""
}

// ANSI colours, by record type.
const (
	ansiReset   = "\x1b[0m"
	ansiDim     = "\x1b[2m"
	ansiGreen   = "\x1b[32m"
	ansiYellow  = "\x1b[33m"
	ansiRed     = "\x1b[31m"
	ansiCyan    = "\x1b[36m"
	ansiMagenta = "\x1b[35m"
	ansiBlue    = "\x1b[34m"
)

// RawShown is how much of a rejected payload a line shows, in bytes.
const RawShown = 60

// Printer renders lines in a time zone, optionally coloured.
type Printer struct {
	Loc        *time.Location // nil means time.Local
	Color      bool
	ShowMarket bool // end each line with [market]: for several markets at once
}

// Line renders a record: time, type, courier, then its key numbers.
func (p Printer) Line(r Record) string {
	var b strings.Builder
	b.WriteString(p.Clock(r.EmittedAt))
	b.WriteByte(' ')
	colour := ""
	switch r.Type {
	case "distance":
		colour = ansiGreen
		if r.Stopped && r.Positions > 1 {
			colour = ansiDim
		}
	case "no_signal":
		colour = ansiRed
	case "signal_restored":
		colour = ansiCyan
	case "late":
		colour = ansiMagenta
	case "rejected":
		colour = ansiYellow
	case "dead_zone", "left_area":
		colour = ansiRed
	case "entered_area":
		colour = ansiCyan
	}
	b.WriteString(p.Paint(colour, fmt.Sprintf("%-15s", r.Type)))
	courier := r.Courier
	if courier == "" {
		courier = "-"
	}
	fmt.Fprintf(&b, " %-12s ", courier)
	switch r.Type {
	case "distance":
		fmt.Fprintf(&b, "%7.0f m  %2d pos  window %s-%s", r.DistanceM, r.Positions, p.Clock(r.WinStart), p.Clock(r.WinEnd))
		switch {
		case r.Positions <= 1:
			// One position says nothing about movement: not "stopped".
			b.WriteString("  one position")
		case r.Stopped:
			b.WriteString("  stopped")
		}
		if r.Revision > 0 {
			// Late positions changed a window already shown: this replaces it.
			fmt.Fprintf(&b, "  revision %d", r.Revision)
		}
	case "no_signal":
		fmt.Fprintf(&b, "silent since %s (session from %s)", p.Clock(r.LastSeen), p.Clock(r.SessStart))
		if r.EndOfInput {
			b.WriteString("  end of input")
		}
	case "signal_restored":
		fmt.Fprintf(&b, "back after %s of silence", Duration(r.GapMs))
	case "late":
		fmt.Fprintf(&b, "%s late for %s", Duration(r.Lateness), r.Operator)
		if r.TS > 0 && r.TS < position.SecondsBefore {
			b.WriteString("  (timestamp_ms looks like seconds, not milliseconds)")
		}
	case "left_area", "entered_area":
		fmt.Fprintf(&b, "at %s, %.5f,%.5f", p.Clock(r.TS), r.Lat, r.Lon)
	case "dead_zone":
		fmt.Fprintf(&b, "cell %s  %d no_signal of %d couriers, %d back after %s in all  window %s-%s",
			r.Cell, r.Warnings, r.Couriers, r.Restored, Duration(r.SilenceMs), p.Clock(r.WinStart), p.Clock(r.WinEnd))
	case "rejected":
		raw := r.Raw
		if len(raw) > RawShown {
			raw = raw[:RawShown] + "…"
		}
		if r.Field != "" {
			fmt.Fprintf(&b, "%s %s  %q", r.Reason, r.Field, raw)
		} else {
			fmt.Fprintf(&b, "%s  %q", r.Reason, raw)
		}
	}
	if p.ShowMarket && r.Market != "" {
		b.WriteString(p.Paint(ansiDim, "  ["+r.Market+"]"))
	}
	return b.String()
}

// CourierLine renders a courier state from market's bucket.
func (p Printer) CourierLine(market string, c bridge.CourierState) string {
	colour := ansiBlue
	if c.Status != "online" {
		colour = ansiRed
	}
	line := fmt.Sprintf("%s %s %-12s %-9s at %.5f,%.5f cell %s", p.Clock(c.TS), p.Paint(colour, fmt.Sprintf("%-15s", "courier")),
		c.Courier, c.Status, c.Lat, c.Lon, c.Cell)
	if p.ShowMarket {
		line += p.Paint(ansiDim, "  ["+market+"]")
	}
	return line
}

// Paint wraps s in an ANSI colour when the printer colours.
func (p Printer) Paint(colour, s string) string {
	if !p.Color || colour == "" {
		return s
	}
	return colour + s + ansiReset
}

// Clock formats a time in ms since the epoch as HH:MM:SS.
func (p Printer) Clock(msec int64) string {
	loc := p.Loc
	if loc == nil {
		loc = time.Local
	}
	return time.UnixMilli(msec).In(loc).Format("15:04:05")
}

// Duration formats milliseconds for people: 8.2s, 1m3s.
func Duration(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).Round(100 * time.Millisecond).String()
}
