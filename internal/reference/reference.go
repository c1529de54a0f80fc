// Package reference is a slow, literal implementation of the edgeproc contract used only as a test oracle.
//
// It replays a JSONL file the way contract.md §2–§5 describe, keeping every
// accepted position forever and recomputing each result from scratch when it
// fires. Nothing here is tuned for speed or memory: differential tests run the
// fast engine and this package over the same random input and compare what
// they emit, so the code mirrors the wording of the contract (and the project's
// decisions where the contract is silent) as directly as possible.
//
// Event times that can leave the int64 range (window ends, session ends, the
// idle-advanced watermark) are compared as math/big integers, with ±infinity
// represented by ±2^100, far outside any sum of a few int64 values.
package reference

import (
	"bytes"
	"fmt"
	"math/big"
	"sort"

	"github.com/km0/edgeproc/geo"
)

// Params are the replay parameters of one market. All durations are in
// milliseconds; there are no defaults, the caller passes every value.
type Params struct {
	// Market names the market in every record and key.
	Market string
	// SizeMs and SlideMs define the sliding distance windows
	// [start, start+SizeMs), start a multiple of SlideMs. Both must be > 0.
	SizeMs, SlideMs int64
	// GapMs is the session inactivity gap. Must be > 0.
	GapMs int64
	// DelayMs is the tolerated delay: wm = max_ts - DelayMs. Must be >= 0.
	DelayMs int64
	// AllowedLatenessMs is how long past its end a fired distance window
	// is retained and re-fired as a revision when a late position changes
	// it. Must be >= 0.
	AllowedLatenessMs int64
	// IdleTimeoutMs is the processing-time silence after which the watermark
	// follows the clock; 0 disables the idle rule. Must be >= 0.
	IdleTimeoutMs int64
	// FutureSkewMs is how far timestamp_ms may be ahead of the clock before a
	// line is rejected as future_timestamp. Must be >= 0.
	FutureSkewMs int64
	// RestoreTTLMs: a tracked courier is forgotten once wm >= its latest +
	// RestoreTTLMs. Must be >= max(SizeMs + AllowedLatenessMs, GapMs).
	RestoreTTLMs int64
	// MaxCouriers is limits.max_couriers, how many couriers are tracked at
	// most. Must be > 0.
	MaxCouriers int
	// MinMoveM is the jitter threshold in metres (0 = off).
	MinMoveM float64
	// MaxSpeedKmh is the outlier-jump threshold in km/h (0 = off).
	MaxSpeedKmh float64
	// StoppedBelowM: a window with distance_m below it is "stopped".
	StoppedBelowM float64
	// H3Resolution is the resolution of every "cell" field (0–15).
	H3Resolution int
	// DeadZoneWindowMs, when > 0, counts no_signal warnings in dead zones:
	// tumbling windows of that length, cells of resolution DeadZoneRes,
	// at most DeadZoneMaxCells cells a window (must then be > 0).
	DeadZoneWindowMs int64
	DeadZoneRes      int
	DeadZoneMaxCells int
	// Area, when set, is the service area whose side each courier is
	// followed on (left_area, entered_area).
	Area *geo.Area
	// Format is the input format (§2 Input formats): "" or "edgeproc",
	// or "owntracks": each line is an OwnTracks message with its topic in
	// a "topic" member, whose level matched by the CourierLevel-th '+'
	// (0-based) of the subscription filter Topic is the courier.
	Format       string
	Topic        string
	CourierLevel int
}

func (p Params) validate() error {
	switch {
	case p.SizeMs <= 0:
		return fmt.Errorf("SizeMs %d: must be > 0", p.SizeMs)
	case p.SlideMs <= 0:
		return fmt.Errorf("SlideMs %d: must be > 0", p.SlideMs)
	case p.GapMs <= 0:
		return fmt.Errorf("GapMs %d: must be > 0", p.GapMs)
	case p.DelayMs < 0:
		return fmt.Errorf("DelayMs %d: must be >= 0", p.DelayMs)
	case p.IdleTimeoutMs < 0:
		return fmt.Errorf("IdleTimeoutMs %d: must be >= 0", p.IdleTimeoutMs)
	case p.FutureSkewMs < 0:
		return fmt.Errorf("FutureSkewMs %d: must be >= 0", p.FutureSkewMs)
	case p.AllowedLatenessMs < 0:
		return fmt.Errorf("AllowedLatenessMs %d: must be >= 0", p.AllowedLatenessMs)
	case p.RestoreTTLMs < max(p.SizeMs+p.AllowedLatenessMs, p.GapMs):
		return fmt.Errorf("RestoreTTLMs %d: must be >= max(SizeMs + AllowedLatenessMs, GapMs)", p.RestoreTTLMs)
	case p.MaxCouriers <= 0:
		return fmt.Errorf("MaxCouriers %d: must be > 0", p.MaxCouriers)
	case p.Format != "" && p.Format != "edgeproc" && p.Format != "owntracks":
		return fmt.Errorf("Format %q: must be edgeproc or owntracks", p.Format)
	case p.DeadZoneWindowMs < 0 || p.DeadZoneWindowMs > 0 && p.DeadZoneMaxCells <= 0:
		return fmt.Errorf("DeadZoneWindowMs %d, DeadZoneMaxCells %d: the window must be >= 0, the cells > 0", p.DeadZoneWindowMs, p.DeadZoneMaxCells)
	}
	return nil
}

// Run processes a whole replay file (JSONL) and returns every record
// `edgeproc replay` must write: results of all types of contract §4 plus
// "rejected" records, each as a map whose values are string, int64, float64
// or bool. Records come in the order the literal algorithm emits them; that
// order carries no meaning across couriers.
//
// Lines are split on '\n' and taken byte for byte (a '\r' before the '\n'
// stays part of the line). A line made only of whitespace is skipped, but
// counts for line numbers (1-based).
//
// Bad input never panics; invalid Params (see the field docs) do, because a
// test that passes them is broken.
func Run(p Params, input []byte) []map[string]any {
	if err := p.validate(); err != nil {
		panic("reference: invalid Params: " + err.Error())
	}
	pr := &processor{
		p:        p,
		wm:       negInfinity(),
		seen:     map[string]map[int64]bool{},
		couriers: map[string]*courierState{},
		tracked:  map[string]int64{},
	}
	for i, line := range bytes.Split(input, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		pr.handleLine(int64(i+1), line)
	}
	pr.flush()
	return pr.out
}

// processor is the whole state of one replay.
type processor struct {
	p   Params
	out []map[string]any

	// clock is the processing clock: the last arrival_ms read.
	clock    int64
	hasClock bool
	// lastArrival is the clock value of the previous message, if it had one.
	lastArrival    int64
	hasLastArrival bool

	wm           *big.Int
	maxTs        int64
	hasMaxTs     bool
	arrivalOfMax int64
	arrivalKnown bool

	// seen holds (courier, timestamp_ms) of every valid position, for the
	// duplicate rule. Kept forever: this is an oracle, not a service.
	seen     map[string]map[int64]bool
	couriers map[string]*courierState
	// tracked maps every tracked courier to its latest: the largest
	// timestamp_ms of its valid positions since it was first tracked.
	tracked map[string]int64

	zones deadZones
}

// position is one valid, non-duplicate input position.
type position struct {
	courier  string
	ts       int64
	lat, lon float64
	// acc is accuracy_m when it is a finite number >= 0, else 0.
	acc float64
}

type window struct {
	start     int64
	end       *big.Int
	positions []*position
	// fired: it has fired at least once; then last holds the values of its
	// last firing and revision the number of its re-firings.
	fired    bool
	last     distanceValues
	revision int64
}

// distanceValues are what decides whether a retained window re-fires.
type distanceValues struct {
	dist      float64
	positions int
}

type session struct {
	start int64
	// last is the latest position: largest ts, first arrived on a tie.
	last *position
	open bool
}

type courierState struct {
	name string
	// distPositions are all positions the distance operator ever accepted.
	distPositions []*position
	// windows are the windows holding at least one position that are
	// unfired or retained (fired, end + AllowedLatenessMs > wm), by start.
	windows map[int64]*window
	// sessions are all sessions ever, open and closed, in creation order
	// (a session merged into another is removed).
	sessions []*session
	// silentFrom is the pending signal_restored marker (last_seen of the
	// session that closed with no next session yet).
	silentFrom *int64
	area       areaState
}

func (pr *processor) courier(name string) *courierState {
	c, ok := pr.couriers[name]
	if !ok {
		c = &courierState{name: name, windows: map[int64]*window{}}
		pr.couriers[name] = c
	}
	return c
}

func (pr *processor) sortedCouriers() []*courierState {
	names := make([]string, 0, len(pr.couriers))
	for n := range pr.couriers {
		names = append(names, n)
	}
	sort.Strings(names)
	cs := make([]*courierState, len(names))
	for i, n := range names {
		cs[i] = pr.couriers[n]
	}
	return cs
}

func (pr *processor) emit(rec map[string]any) {
	rec["market"] = pr.p.Market
	pr.out = append(pr.out, rec)
}

// now is the clock value records are stamped with: 0 before any arrival_ms.
func (pr *processor) now() int64 {
	if pr.hasClock {
		return pr.clock
	}
	return 0
}

// handleLine processes one non-blank line: clock, idle rule, rejection or
// position.
func (pr *processor) handleLine(lineNo int64, line []byte) {
	d := decodeLine(line, &pr.p)

	if d.hasArrival || pr.hasClock {
		tau := pr.clock
		if d.hasArrival {
			tau = d.arrival
		}
		pr.idleAdvance(tau)
		pr.clock, pr.hasClock = tau, true
	}

	if d.ignored {
		// An arrival for the idle rule, and nothing else.
		pr.lastArrival, pr.hasLastArrival = pr.clock, pr.hasClock
		return
	}
	reason := d.reason
	if reason == "" && pr.hasClock && cmp(big.NewInt(d.pos.ts), plus(pr.clock, pr.p.FutureSkewMs)) > 0 {
		reason = "future_timestamp"
	}
	if reason == "" && !pr.makeRoom(d.pos.courier) {
		reason = "courier_limit"
	}
	if reason != "" {
		rec := map[string]any{
			"type":          "rejected",
			"key":           fmt.Sprintf("rejected|%s|%d", pr.p.Market, lineNo),
			"emitted_at_ms": pr.now(),
			"reason":        reason,
			"raw":           truncateRaw(line),
			"line":          lineNo,
		}
		if reason == "missing_field" {
			rec["field"] = d.field
		}
		pr.emit(rec)
		if reason == "courier_limit" {
			// A refused position still moves the watermark (§3 Courier limit).
			pr.observe(d.pos.ts)
		}
	} else {
		pos := d.pos
		pr.handlePosition(&pos)
	}

	pr.lastArrival, pr.hasLastArrival = pr.clock, pr.hasClock
}

// idleAdvance applies the idle rule (§3, decision 4) before a line whose
// clock value is tau.
func (pr *processor) idleAdvance(tau int64) {
	if pr.p.IdleTimeoutMs <= 0 || !pr.hasLastArrival || !pr.hasMaxTs || !pr.arrivalKnown {
		return
	}
	if cmp(big.NewInt(tau), plus(pr.lastArrival, pr.p.IdleTimeoutMs)) < 0 {
		return
	}
	cand := big.NewInt(pr.maxTs)
	cand.Add(cand, big.NewInt(tau))
	cand.Sub(cand, big.NewInt(pr.arrivalOfMax))
	cand.Sub(cand, big.NewInt(pr.p.DelayMs))
	pr.advance(cand, tau)
}

// lastWindowEnd is floor(ts/slide)*slide + size: the end of the latest window
// that can hold ts (ts > 0, so truncating division is floor).
func (pr *processor) lastWindowEnd(ts int64) *big.Int {
	return plus(ts-ts%pr.p.SlideMs, pr.p.SizeMs)
}

// closedAt is the watermark at which every window that can hold ts is
// closed for good: lastWindowEnd(ts) + AllowedLatenessMs.
func (pr *processor) closedAt(ts int64) *big.Int {
	return new(big.Int).Add(pr.lastWindowEnd(ts), big.NewInt(pr.p.AllowedLatenessMs))
}

// makeRoom applies §3 Courier limit before a valid position of courier:
// it reports false when the position must be refused.
func (pr *processor) makeRoom(courier string) bool {
	if _, ok := pr.tracked[courier]; ok || len(pr.tracked) < pr.p.MaxCouriers {
		return true
	}
	idle := ""
	for name, latest := range pr.tracked {
		if idle == "" || latest < pr.tracked[idle] || (latest == pr.tracked[idle] && name < idle) {
			idle = name
		}
	}
	if cmp(pr.wm, plus(pr.tracked[idle], max(pr.p.SizeMs+pr.p.AllowedLatenessMs, pr.p.GapMs))) < 0 {
		return false
	}
	pr.forgetCourier(idle)
	return true
}

// observe moves max_ts with a position's effective timestamp (§3) and the
// watermark with it.
func (pr *processor) observe(ts int64) {
	eff := ts
	if pr.hasClock {
		eff = min(ts, pr.clock)
	}
	if !pr.hasMaxTs || eff > pr.maxTs {
		pr.maxTs, pr.hasMaxTs = eff, true
		pr.arrivalOfMax, pr.arrivalKnown = pr.clock, pr.hasClock
	}
	pr.advance(minus(pr.maxTs, pr.p.DelayMs), pr.now())
}

func (pr *processor) handlePosition(pos *position) {
	now := pr.now()

	// Tracking (§3): latest counts every valid position, duplicates and
	// late ones included.
	if latest, ok := pr.tracked[pos.courier]; !ok || pos.ts > latest {
		pr.tracked[pos.courier] = pos.ts
	}

	// Duplicate rule (§2).
	if pr.seen[pos.courier][pos.ts] && cmp(pr.wm, pr.closedAt(pos.ts)) < 0 {
		return
	}
	if pr.seen[pos.courier] == nil {
		pr.seen[pos.courier] = map[int64]bool{}
	}
	pr.seen[pos.courier][pos.ts] = true

	// Lateness, against the watermark before this position moves it.
	lateDistance := cmp(pr.wm, pr.closedAt(pos.ts)) >= 0
	touching := pr.touchingSessions(pos)
	lateSession := len(touching) == 0 && cmp(pr.wm, plus(pos.ts, pr.p.GapMs)) >= 0
	if lateDistance {
		pr.emitLate(pos, "distance", now)
	}
	if lateSession {
		pr.emitLate(pos, "session", now)
	}

	if !lateDistance {
		pr.acceptDistance(pos)
		pr.revise(pr.courier(pos.courier), now)
	}
	if !lateSession {
		pr.acceptSession(pos, touching, now)
	}
	pr.areaStep(pos, now)

	pr.observe(pos.ts)
}

func (pr *processor) emitLate(pos *position, operator string, now int64) {
	wm := saturate(pr.wm)
	pr.emit(map[string]any{
		"type":          "late",
		"courier":       pos.courier,
		"key":           fmt.Sprintf("late|%s|%s|%d|%s", pr.p.Market, pos.courier, pos.ts, operator),
		"emitted_at_ms": now,
		"operator":      operator,
		"timestamp_ms":  pos.ts,
		"watermark_ms":  wm,
		"lateness_ms":   saturate(new(big.Int).Sub(pr.wm, big.NewInt(pos.ts))),
	})
}

// acceptDistance adds pos to the courier's LAG sequence and to each of its
// windows that is unfired or retained (end + AllowedLatenessMs > wm).
func (pr *processor) acceptDistance(pos *position) {
	c := pr.courier(pos.courier)
	c.distPositions = append(c.distPositions, pos)

	// Every start that is a multiple of slide with start <= ts < start+size,
	// newest first. ts > 0 and start > ts-size, so nothing overflows.
	for start := pos.ts - pos.ts%pr.p.SlideMs; start > pos.ts-pr.p.SizeMs; start -= pr.p.SlideMs {
		end := plus(start, pr.p.SizeMs)
		if cmp(plus(start, pr.p.SizeMs+pr.p.AllowedLatenessMs), pr.wm) <= 0 {
			continue
		}
		w, ok := c.windows[start]
		if !ok {
			w = &window{start: start, end: end}
			c.windows[start] = w
		}
		w.positions = append(w.positions, pos)
	}
}

// sessionEnd is last_ts + gap, the firing time of a session.
func (pr *processor) sessionEnd(s *session) *big.Int {
	return plus(s.last.ts, pr.p.GapMs)
}

// touchingSessions are the open sessions of pos's courier that [ts, ts+gap)
// overlaps or touches.
func (pr *processor) touchingSessions(pos *position) []*session {
	c, ok := pr.couriers[pos.courier]
	if !ok {
		return nil
	}
	var out []*session
	for _, s := range c.sessions {
		if !s.open {
			continue
		}
		if cmp(big.NewInt(pos.ts), pr.sessionEnd(s)) <= 0 && cmp(big.NewInt(s.start), plus(pos.ts, pr.p.GapMs)) <= 0 {
			out = append(out, s)
		}
	}
	return out
}

// acceptSession merges pos with every open session it touches, or opens a new
// session (which may restore a silent courier).
func (pr *processor) acceptSession(pos *position, touching []*session, now int64) {
	c := pr.courier(pos.courier)
	if len(touching) == 0 {
		c.sessions = append(c.sessions, &session{start: pos.ts, last: pos, open: true})
		if c.silentFrom != nil {
			pr.emitRestored(c, *c.silentFrom, pos.ts, now)
			c.silentFrom = nil
		}
		return
	}
	// Merge into the first touching session; the others disappear. Open
	// sessions of one courier are disjoint, so their latest positions never
	// tie; pos ties only with a position that arrived before it, which stays.
	merged := touching[0]
	for _, s := range touching[1:] {
		merged.start = min(merged.start, s.start)
		if s.last.ts > merged.last.ts {
			merged.last = s.last
		}
		removeSession(c, s)
	}
	merged.start = min(merged.start, pos.ts)
	if pos.ts > merged.last.ts {
		merged.last = pos
	}
}

func removeSession(c *courierState, s *session) {
	for i, x := range c.sessions {
		if x == s {
			c.sessions = append(c.sessions[:i], c.sessions[i+1:]...)
			return
		}
	}
}
