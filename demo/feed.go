package demo

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/km0/edgeproc/internal/show"
)

// Record types of contract §4, in the order the totals print them.
var types = [...]string{"distance", "no_signal", "signal_restored", "late", "left_area", "entered_area", "rejected", "dead_zone"}

// boardNames is how many couriers a board line names before "+N more".
const boardNames = 8

// recentRejected is how many rejected inputs the board keeps to show.
const recentRejected = 4

// courierView is what the board knows of one courier, from its results.
type courierView struct {
	state     string // "moving", "stopped", "one position" (from its last window), or "" before one
	silent    bool   // a no_signal not yet followed by signal_restored
	lastSeen  int64  // no_signal's last_seen_ms
	stoppedAt int64  // window end of the first of its consecutive stopped windows
}

// feed is the demo's view of the results: it prints the events a
// dispatcher acts on as they come (a courier going silent or coming back,
// a rejected input with the courier it named) and, every TallyEvery, a
// status board: how many couriers move, who is stopped, who is silent and
// for how long, the late and rejected rates. Distance windows update the
// board, not the screen. Its methods are safe for concurrent use.
type feed struct {
	p   show.Printer
	out io.Writer

	mu        sync.Mutex // guards everything below, and serialises writes to out
	couriers  map[string]*courierView
	counts    [len(types)]uint64
	since     [len(types)]uint64 // counts at the previous board
	other     uint64             // undecodable messages or unknown types
	rejected  []show.Record      // the latest few, newest last
	lastBoard time.Time
}

// maxCouriers bounds the board's map: a fleet larger than this is shown by
// its first couriers only (the demo runs 140).
const maxCouriers = 100_000

func newFeed(out io.Writer, color bool, loc *time.Location) *feed {
	return &feed{p: show.Printer{Loc: loc, Color: color}, out: out, couriers: map[string]*courierView{}}
}

// handle takes one message from delivery.>.
func (f *feed) handle(data []byte) {
	r, err := show.Decode(data)
	f.mu.Lock()
	defer f.mu.Unlock()
	i := typeIndex(r.Type)
	if err != nil || i < 0 {
		f.other++
		return
	}
	f.counts[i]++
	switch r.Type {
	case "rejected":
		f.rejected = append(f.rejected, r)
		if len(f.rejected) > recentRejected {
			f.rejected = f.rejected[1:]
		}
		f.printLocked(f.p.Line(r))
		return
	case "late":
		return
	case "dead_zone": // a place, not a courier
		f.printLocked(f.p.Line(r))
		return
	}
	c := f.couriers[r.Courier]
	if c == nil {
		if len(f.couriers) >= maxCouriers {
			return
		}
		c = &courierView{}
		f.couriers[r.Courier] = c
	}
	switch r.Type {
	case "distance":
		switch {
		case r.Positions <= 1:
			// One position says nothing about movement.
			c.state, c.stoppedAt = "one position", 0
		case r.Stopped:
			if c.state != "stopped" {
				c.stoppedAt = r.WinStart
			}
			c.state = "stopped"
		default:
			c.state, c.stoppedAt = "moving", 0
		}
	case "no_signal":
		c.silent, c.lastSeen = true, r.LastSeen
		f.printLocked(f.p.Line(r))
	case "signal_restored":
		c.silent = false
		f.printLocked(f.p.Line(r))
	case "left_area", "entered_area":
		f.printLocked(f.p.Line(r))
	}
}

func typeIndex(t string) int {
	for i, name := range types {
		if name == t {
			return i
		}
	}
	return -1
}

func (f *feed) println(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.printLocked(line)
}

func (f *feed) printLocked(line string) { fmt.Fprintln(f.out, line) }

// totals returns the counts by type, in the order of types.
func (f *feed) totals() [len(types)]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}

// board prints the status board at now; extra (the broker's losses, if
// any) goes on its first line. Rates are over the time since the previous
// board.
func (f *feed) board(now time.Time, extra string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var moving, one int
	var stopped, silent []string
	for id, c := range f.couriers {
		switch {
		case c.silent:
			silent = append(silent, id)
		case c.state == "moving":
			moving++
		case c.state == "stopped":
			stopped = append(stopped, id)
		case c.state == "one position":
			one++
		}
	}
	nowMs := now.UnixMilli()
	// Longest silent or stopped first: who to call.
	sort.Slice(silent, func(i, j int) bool {
		a, b := f.couriers[silent[i]].lastSeen, f.couriers[silent[j]].lastSeen
		return a < b || a == b && silent[i] < silent[j]
	})
	sort.Slice(stopped, func(i, j int) bool {
		a, b := f.couriers[stopped[i]].stoppedAt, f.couriers[stopped[j]].stoppedAt
		return a < b || a == b && stopped[i] < stopped[j]
	})
	secs := now.Sub(f.lastBoard).Seconds()
	if f.lastBoard.IsZero() || secs <= 0 {
		secs = 0
	}
	rate := func(i int) string {
		if secs == 0 {
			return fmt.Sprintf("%d", f.counts[i]-f.since[i])
		}
		return fmt.Sprintf("%.1f/s", float64(f.counts[i]-f.since[i])/secs)
	}
	clock := now.In(f.loc()).Format("15:04:05")
	head := fmt.Sprintf("%s ── %d couriers: %s moving, %s stopped, %d one position, %s silent ── late %s, rejected %s",
		clock, len(f.couriers), f.p.Paint("\x1b[32m", fmt.Sprint(moving)), fmt.Sprint(len(stopped)), one,
		f.p.Paint("\x1b[31m", fmt.Sprint(len(silent))), rate(typeIndex("late")), rate(typeIndex("rejected")))
	if extra != "" {
		head += " ── " + extra
	}
	f.printLocked(head)
	if len(silent) > 0 {
		f.printLocked("  silent now: " + names(silent, func(id string) string {
			return fmt.Sprintf("%s %s", id, show.Duration(nowMs-f.couriers[id].lastSeen))
		}))
	}
	if len(stopped) > 0 {
		f.printLocked("  stopped:    " + names(stopped, func(id string) string {
			return fmt.Sprintf("%s %s", id, show.Duration(nowMs-f.couriers[id].stoppedAt))
		}))
	}
	if len(f.rejected) > 0 {
		var rs []string
		for _, r := range f.rejected {
			who := r.Courier
			if who == "" {
				who = "?"
			}
			rs = append(rs, who+" "+r.Reason)
		}
		f.printLocked("  rejected:   " + strings.Join(rs, ", ") + " (latest)")
	}
	f.since = f.counts
	f.lastBoard = now
}

func (f *feed) loc() *time.Location {
	if f.p.Loc == nil {
		return time.Local
	}
	return f.p.Loc
}

// names joins the first boardNames ids, each as label renders it.
func names(ids []string, label func(string) string) string {
	var parts []string
	for i, id := range ids {
		if i == boardNames {
			parts = append(parts, fmt.Sprintf("+%d more", len(ids)-boardNames))
			break
		}
		parts = append(parts, label(id))
	}
	return strings.Join(parts, ", ")
}
