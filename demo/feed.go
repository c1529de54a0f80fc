package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ANSI colours of the feed, by record type.
const (
	ansiReset   = "\x1b[0m"
	ansiDim     = "\x1b[2m"
	ansiGreen   = "\x1b[32m"
	ansiYellow  = "\x1b[33m"
	ansiRed     = "\x1b[31m"
	ansiCyan    = "\x1b[36m"
	ansiMagenta = "\x1b[35m"
)

// rawShown is how much of a rejected payload a feed line shows, in bytes.
const rawShown = 60

// Record types of contract §4, in the order the tally prints them.
var types = [...]string{"distance", "no_signal", "signal_restored", "late", "rejected"}

// record holds the fields of any result the feed prints (contract §4).
type record struct {
	Type      string  `json:"type"`
	Courier   string  `json:"courier"`
	EmittedAt int64   `json:"emitted_at_ms"`
	WinStart  int64   `json:"window_start_ms"`
	WinEnd    int64   `json:"window_end_ms"`
	DistanceM float64 `json:"distance_m"`
	Positions int     `json:"positions"`
	Stopped   bool    `json:"stopped"`
	SessStart int64   `json:"session_start_ms"`
	LastSeen  int64   `json:"last_seen_ms"`
	GapMs     int64   `json:"gap_ms"`
	Operator  string  `json:"operator"`
	Lateness  int64   `json:"lateness_ms"`
	Reason    string  `json:"reason"`
	Raw       string  `json:"raw"`
}

// feed prints one line per result and counts them by type. Its methods are
// safe for concurrent use; lines are never interleaved.
type feed struct {
	color bool
	loc   *time.Location

	mu  sync.Mutex // serialises writes to out
	out io.Writer

	counts    [len(types)]atomic.Uint64
	other     atomic.Uint64      // undecodable messages or unknown types
	lastTally [len(types)]uint64 // owned by the goroutine calling tally
}

func newFeed(out io.Writer, color bool, loc *time.Location) *feed {
	return &feed{out: out, color: color, loc: loc}
}

// handle prints and counts one message from delivery.>.
func (f *feed) handle(data []byte) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		f.other.Add(1)
		return
	}
	i := typeIndex(r.Type)
	if i < 0 {
		f.other.Add(1)
		return
	}
	f.counts[i].Add(1)
	f.println(f.format(&r))
}

func typeIndex(t string) int {
	for i, name := range types {
		if name == t {
			return i
		}
	}
	return -1
}

// format renders one record: time, type, courier, then its key numbers.
func (f *feed) format(r *record) string {
	var b strings.Builder
	b.WriteString(f.clock(r.EmittedAt))
	b.WriteByte(' ')
	colour := ""
	switch r.Type {
	case "distance":
		colour = ansiGreen
		if r.Stopped {
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
	}
	f.paint(&b, colour, fmt.Sprintf("%-15s", r.Type))
	courier := r.Courier
	if r.Type == "rejected" {
		courier = "-"
	}
	fmt.Fprintf(&b, " %-12s ", courier)
	switch r.Type {
	case "distance":
		fmt.Fprintf(&b, "%7.0f m  %2d pos  window %s-%s", r.DistanceM, r.Positions, f.clock(r.WinStart), f.clock(r.WinEnd))
		if r.Stopped {
			b.WriteString("  stopped")
		}
	case "no_signal":
		fmt.Fprintf(&b, "silent since %s (session from %s)", f.clock(r.LastSeen), f.clock(r.SessStart))
	case "signal_restored":
		fmt.Fprintf(&b, "back after %s of silence", ms(r.GapMs))
	case "late":
		fmt.Fprintf(&b, "%s late for %s", ms(r.Lateness), r.Operator)
	case "rejected":
		raw := r.Raw
		if len(raw) > rawShown {
			raw = raw[:rawShown] + "…"
		}
		fmt.Fprintf(&b, "%s  %q", r.Reason, raw)
	}
	return b.String()
}

func (f *feed) paint(b *strings.Builder, colour, s string) {
	if f.color && colour != "" {
		b.WriteString(colour)
		b.WriteString(s)
		b.WriteString(ansiReset)
		return
	}
	b.WriteString(s)
}

// clock formats a time in ms since the epoch as HH:MM:SS in f's zone.
func (f *feed) clock(msec int64) string {
	return time.UnixMilli(msec).In(f.loc).Format("15:04:05")
}

// ms formats a duration in milliseconds for people: 8.2s, 1m3s.
func ms(d int64) string {
	return (time.Duration(d) * time.Millisecond).Round(100 * time.Millisecond).String()
}

func (f *feed) println(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintln(f.out, line)
}

// totals returns the counts by type, in the order of types.
func (f *feed) totals() [len(types)]uint64 {
	var t [len(types)]uint64
	for i := range f.counts {
		t[i] = f.counts[i].Load()
	}
	return t
}

// tally prints one line with the counts so far and, in brackets, how many
// arrived since the previous tally. Only one goroutine may call it.
func (f *feed) tally(now time.Time, extra string) {
	t := f.totals()
	var b strings.Builder
	fmt.Fprintf(&b, "%s -- tally:", now.In(f.loc).Format("15:04:05"))
	for i, name := range types {
		fmt.Fprintf(&b, " %s %d (+%d)", name, t[i], t[i]-f.lastTally[i])
	}
	f.lastTally = t
	if extra != "" {
		b.WriteString(" | ")
		b.WriteString(extra)
	}
	line := b.String()
	if f.color {
		line = ansiDim + line + ansiReset
	}
	f.println(line)
}
