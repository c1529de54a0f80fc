package board

import (
	"strconv"
	"time"

	where "github.com/km0/edgeproc/courier"
)

// State is what the board shows of a courier, in the order of the codes
// sent to the page.
type State uint8

const (
	// Unknown: online, but no distance window of it has fired yet.
	Unknown State = iota
	// Moving: its latest window's distance was at least
	// distance.stopped_below_m.
	Moving
	// Stopped: its latest window's distance was below it.
	Stopped
	// NoSignal: its session closed (no_signal) and no newer position
	// arrived since.
	NoSignal
)

var stateText = [...]string{"unknown", "moving", "stopped", "no_signal"}

func (s State) String() string { return stateText[s] }

// courier is the hub's view of one courier; owned by the hub goroutine.
type courier struct {
	id     string
	market uint16
	// place is the bucket's: last position, or last seen when silent,
	// under the rule the bucket applies too.
	place   where.Place
	hasDist bool
	stopped bool
	dist    float64 // metres in the latest fired window
	distEnd int64   // that window's end, ms
	distRev int32   // that firing's revision (0: the window's first firing)
	// stoppedSince is the start of the first of its consecutive stopped
	// windows, while stopped.
	stoppedSince int64
	// hasMove is set by the first side known (Feed.Side, left_area or
	// entered_area); moveTS is the latest one's timestamp, outside
	// whether it is outside the service area.
	hasMove bool
	outside bool
	moveTS  int64
	dirty   bool // changed since the last update sent
	gone    bool // forgotten: sent as gone, then dropped
}

func (c *courier) state() State {
	switch {
	case c.place.Silent:
		return NoSignal
	case !c.hasDist:
		return Unknown
	case c.stopped:
		return Stopped
	}
	return Moving
}

// sample is one reading of a market's counters, for rates.
type sample struct {
	at                       time.Time
	received, late, rejected int64
}

// rateWindow is the span over which rates are measured.
const rateWindow = 10 * time.Second

// marketView is the hub's view of one market.
type marketView struct {
	status  Status
	samples []sample // oldest first, spanning at most rateWindow
}

// rates returns the received, late and rejected rates per second over the
// samples.
func (m *marketView) rates() (received, late, rejected float64) {
	if len(m.samples) < 2 {
		return 0, 0, 0
	}
	a, b := m.samples[0], m.samples[len(m.samples)-1]
	dt := b.at.Sub(a.at).Seconds()
	if dt <= 0 {
		return 0, 0, 0
	}
	return float64(b.received-a.received) / dt, float64(b.late-a.late) / dt, float64(b.rejected-a.rejected) / dt
}

func (m *marketView) observe(now time.Time, s Status) {
	m.status = s
	for len(m.samples) > 0 && now.Sub(m.samples[0].at) > rateWindow {
		m.samples = m.samples[1:]
	}
	m.samples = append(m.samples, sample{now, s.Received, s.Late, s.Rejected})
}

// client is one connected page.
type client struct {
	market  int // index of the market it shows; -1: all
	ch      chan []byte
	refused bool // set before ch is closed at join: too many pages
}

// state is everything the hub goroutine owns.
type state struct {
	cfg      Config
	couriers map[string]*courier
	order    []*courier // in arrival order, for stable snapshots; gone ones until compacted
	goneIn   int        // gone couriers still in order
	dirty    []*courier
	zones    *zoneLayer
	areas    []*outline // by market; nil: no service area
	markets  []marketView
	clients  map[*client]struct{}
	shown    []bool // by market: a page shows it (publish)
	refused  uint64
	dropped  uint64
	slow     uint64
	updates  uint64
	bytes    uint64
	buf      []byte

	// daily is each market's yesterday (nil: no lake, or not looked at
	// yet); dailyDirty says it changed since the last update sent.
	daily      []*dailyView
	hasDaily   bool // a market has a lake: messages carry "daily"
	dailyDirty bool
}

func (h *Hub) run() {
	defer close(h.stopped)
	st := &state{
		cfg:      h.cfg,
		couriers: map[string]*courier{},
		zones:    newZoneLayer(h.cfg.MaxDeadZoneCells),
		areas:    h.outlines,
		markets:  make([]marketView, len(h.cfg.Markets)),
		clients:  map[*client]struct{}{},
		daily:    make([]*dailyView, len(h.cfg.Markets)),
	}
	for _, m := range h.cfg.Markets {
		st.hasDaily = st.hasDaily || m.Lake != ""
	}
	spare := make([]event, 0, h.cfg.Mailbox)
	var zspare []zoneEvent
	drain := time.NewTicker(h.cfg.DrainEvery)
	drain.Stop() // runs only while a page is connected
	defer drain.Stop()
	draining := false
	send := time.NewTicker(h.cfg.Interval)
	defer send.Stop()
	applyBox := func() {
		var box []event
		var zbox []zoneEvent
		box, zbox, st.dropped = h.swap(spare, zspare)
		for i := range box {
			st.apply(&box[i])
		}
		for i := range zbox {
			if !st.zones.add(&zbox[i]) {
				st.refused++
			}
		}
		spare, zspare = box, zbox
		h.publish(st) // before anything is sent: Stats covers what pages see
	}
	st.sample(h.cfg.Now())
	for {
		select {
		case <-h.done:
			for c := range st.clients {
				close(c.ch)
			}
			return
		case <-drain.C:
			applyBox()
		case <-h.half:
			applyBox()
		case <-send.C:
			applyBox()
			st.sample(h.cfg.Now())
			st.broadcast(h.cfg.Now())
		case c := <-h.join:
			applyBox()
			st.add(c, h.cfg.Now())
		case c := <-h.leave:
			if _, ok := st.clients[c]; ok {
				delete(st.clients, c)
				close(c.ch)
			}
		case d := <-h.daily:
			st.daily[d.market] = &d.view
			st.dailyDirty = true
		}
		if watched := len(st.clients) > 0; watched != draining {
			if draining = watched; draining {
				drain.Reset(h.cfg.DrainEvery)
			} else {
				drain.Stop()
			}
		}
		h.publish(st)
	}
}

// publish copies the hub goroutine's counters for Stats, and which
// markets pages show for Feed.Watched.
func (h *Hub) publish(st *state) {
	shown := st.shown[:0]
	for range h.cfg.Markets {
		shown = append(shown, false)
	}
	for c := range st.clients {
		if c.market < 0 {
			for i := range shown {
				shown[i] = true
			}
			break
		}
		shown[c.market] = true
	}
	st.shown = shown
	h.setShown(shown)
	h.statsMu.Lock()
	h.stats = Stats{
		Refused: st.refused, DeadZonesDropped: st.zones.dropped, SlowClients: st.slow, Updates: st.updates, UpdateBytes: st.bytes,
		Couriers: len(st.couriers), Clients: len(st.clients), DeadZones: len(st.zones.cells),
	}
	h.statsMu.Unlock()
}

// apply applies one event with the courier bucket's rules (package
// bridge: UpdatePosition, MarkNoSignal, MarkOnline).
func (st *state) apply(e *event) {
	if e.n == 0 {
		st.refused++
		return
	}
	c := st.couriers[string(e.id[:e.n])] // no allocation for a lookup
	if e.kind == evForget {
		if c != nil {
			st.forget(c)
		}
		return
	}
	if c == nil {
		if e.kind != evPosition && e.kind != evNoSignal {
			return // nothing to show where the board has no position
		}
		if len(st.couriers) >= st.cfg.MaxCouriers {
			st.refused++
			return
		}
		c = &courier{id: string(e.id[:e.n]), market: e.market}
		st.couriers[c.id] = c
		st.order = append(st.order, c)
	}
	switch e.kind {
	case evPosition:
		if applied, _ := c.place.Position(e.ts, e.lat, e.lon); !applied {
			return // late or duplicate: never moves the courier back
		}
	case evNoSignal:
		if applied, _ := c.place.NoSignal(e.ts, e.lat, e.lon); !applied {
			return // a newer position arrived: the courier is back
		}
	case evRestored:
		if !c.place.Restored() {
			return
		}
	case evDistance:
		// The latest window at its highest revision (docs/reference.md: a
		// consumer keeps a window's highest revision). A market's windows
		// all have one size, so the end names the window. A revision no
		// higher than the one shown is older, or the same firing again
		// (each key always carries the same values).
		if c.hasDist && (e.ts < c.distEnd || e.ts == c.distEnd && e.rev <= c.distRev) {
			return
		}
		if !e.stopped {
			c.stoppedSince = 0
		} else if !c.hasDist || !c.stopped {
			c.stoppedSince = e.start // still for the whole window
		}
		c.hasDist, c.stopped, c.dist, c.distEnd, c.distRev = true, e.stopped, e.dist, e.ts, e.rev
	case evLeft, evEntered, evSide:
		// A courier's moves are dated by strictly later fixes
		// (geo.Presence): one dated no later than the move shown is that
		// move again, or an older one re-delivered.
		if c.hasMove && e.ts <= c.moveTS {
			return
		}
		c.hasMove, c.outside, c.moveTS = true, e.kind == evLeft || e.kind == evSide && e.outside, e.ts
	}
	if !c.dirty {
		c.dirty = true
		st.dirty = append(st.dirty, c)
	}
}

// forget drops c: the next update says it is gone.
func (st *state) forget(c *courier) {
	delete(st.couriers, c.id)
	c.gone = true
	if !c.dirty {
		c.dirty = true
		st.dirty = append(st.dirty, c)
	}
	if st.goneIn++; st.goneIn > len(st.order)/2 {
		live := st.order[:0]
		for _, o := range st.order {
			if !o.gone {
				live = append(live, o)
			}
		}
		clear(st.order[len(live):])
		st.order, st.goneIn = live, 0
	}
}

func (st *state) sample(now time.Time) {
	for i, m := range st.cfg.Markets {
		if m.Status != nil {
			st.markets[i].observe(now, m.Status())
		}
	}
}

// add connects a page: it gets a snapshot first, then every update.
func (st *state) add(c *client, now time.Time) {
	if len(st.clients) >= st.cfg.MaxClients {
		c.refused = true
		close(c.ch)
		return
	}
	c.ch <- st.encode(c.market, now, st.order, st.zones.all(), true) // ch is empty: never blocks
	st.clients[c] = struct{}{}
}

// broadcast sends every page the couriers and dead-zone cells changed
// since the last update, encoded once per market filter.
func (st *state) broadcast(now time.Time) {
	var msgs = map[int][]byte{}
	for c := range st.clients {
		msg, ok := msgs[c.market]
		if !ok {
			msg = st.encode(c.market, now, st.dirty, st.zones.dirty, false)
			msgs[c.market] = msg
		}
		select {
		case c.ch <- msg:
		default:
			delete(st.clients, c)
			close(c.ch)
			st.slow++
		}
	}
	for _, c := range st.dirty {
		c.dirty = false
	}
	st.dirty = st.dirty[:0]
	st.zones.sent()
	st.dailyDirty = false
}

// encode renders one SSE message: the markets' status, the couriers of cs
// and the dead-zone cells of zs in the market filter (-1: all), as
//
//	{"full":bool,"now":ms,"interval_ms":n,"tiles":"…","dropped":n,"refused":n,
//	 "markets":[{"name":…,"mqtt":bool,"nats":bool,"lag_ms":n|null,
//	            "received_per_s":x,"late_per_s":x,"rejected_per_s":x,"tz":"…"}],
//	 "gone":[id,…],
//	 "c":[[id,market,lat,lon,timestamp_ms,state,distance_m|null,window_end_ms,revision,
//	       outside_since_ms|null[,stopped_since_ms]],…],
//	 "zones_dropped":n,
//	 "zones_gone":[[cell,market],…],
//	 "zones":[[cell,market,warnings,couriers,restored,open,silence_ms,
//	           longest_silence_ms,windows,first_window_start_ms,last_window_end_ms,
//	           [[lat,lon],…]],…],
//	 "areas":[{"market":n,"edges":n,"truncated":bool,"outline":[[[lat,lon],…],…]},…],
//	 "daily":[{"market":n,"date":"YYYY-MM-DD","state":"ok"|"missing"|"unavailable",
//	           "couriers":n,"distance_m":x,"top":[{"courier":id,"distance_m":x,"positions":n},…]},…]}
//
// where market indexes "markets", state is a State code, revision numbers
// the firing of the window shown (0: its first firing), outside_since_ms
// is null unless the courier is outside its market's service area, and
// then the timestamp of the fix that put it there (see the package doc),
// stopped_since_ms is there only while its state is stopped: the start
// of the first of its consecutive stopped windows, tz is the
// market's IANA time zone (Market.Timezone, "UTC" when empty), and gone lists
// the couriers forgotten since the last update (to remove before adding
// those of "c": a courier forgotten and back is in both).
//
// "zones" are the dead-zone cells (ZoneHorizon, in the package doc): cell
// is the H3 cell in hex as in the dead_zone results; warnings, couriers,
// restored, silence_ms are summed over the cell's windows within the
// horizon (couriers per window, so a courier silent in two windows counts
// twice), open is warnings − restored, longest_silence_ms the longest of
// them; windows counts those windows, spanning first_window_start_ms to
// last_window_end_ms; the last member is the cell's outline in degrees.
// "zones_gone" lists the cells whose last window left the layer since the
// last update (to remove before adding those of "zones", as for couriers),
// and zones_dropped is Stats.DeadZonesDropped. A snapshot ("full") has
// every cell, a later update the cells changed since the previous one.
// The members before "zones_dropped" are as they were before the layer.
//
// "areas" is in a snapshot only: the service-area outline of each market
// that has one (Market.Area), as polylines in degrees to 7 decimals; a
// closed ring ends with its first point (an area's outer rings and its
// holes' are all rings). edges counts the H3 cell edges drawn; truncated
// says the area had more than Config.MaxAreaEdges, and only the edges of
// its first cells are drawn. outside_since_ms and "areas" came after the
// dead-zone layer, stopped_since_ms and tz after them; the members before
// them are unchanged.
//
// "daily" is there only when a market of the board has a lake
// (Market.Lake), in a snapshot and in the first update after any
// market's changed, and then holds each market of the filter that has
// one: its table of yesterday (date, in the market's calendar), as
// `edgeproc daily` wrote it — "ok" with how many couriers it has, their
// distance summed and the DailyTop greatest (greatest first; of equal
// ones, the first id in byte order); "missing" when there is no table
// for the date yet; "unavailable" when it could not be read (logged). A
// market not yet looked at is left out; distances are in metres to one
// decimal. It came after "areas"; the members before it are unchanged.
func (st *state) encode(filter int, now time.Time, cs []*courier, zs []*zoneCell, full bool) []byte {
	b := append(st.buf[:0], "data: {\"full\":"...)
	b = strconv.AppendBool(b, full)
	b = append(b, `,"now":`...)
	b = strconv.AppendInt(b, now.UnixMilli(), 10)
	b = append(b, `,"interval_ms":`...)
	b = strconv.AppendInt(b, st.cfg.Interval.Milliseconds(), 10)
	b = append(b, `,"tiles":`...)
	b = appendString(b, st.cfg.Tiles)
	b = append(b, `,"dropped":`...)
	b = strconv.AppendUint(b, st.dropped, 10)
	b = append(b, `,"refused":`...)
	b = strconv.AppendUint(b, st.refused, 10)
	b = append(b, `,"markets":[`...)
	first := true
	for i, m := range st.cfg.Markets {
		if filter >= 0 && i != filter {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = st.appendMarket(b, i, m.Name, now)
	}
	b = append(b, `],"gone":[`...)
	first = true
	for _, c := range cs {
		if !c.gone || full || (filter >= 0 && int(c.market) != filter) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, c.id)
	}
	b = append(b, `],"c":[`...)
	first = true
	for _, c := range cs {
		if c.gone || (filter >= 0 && int(c.market) != filter) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		m := int(c.market)
		if filter >= 0 {
			m = 0
		}
		b = append(b, '[')
		b = appendString(b, c.id)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(m), 10)
		b = append(b, ',')
		b = strconv.AppendFloat(b, c.place.Lat, 'f', -1, 64) // exact: the bucket's value
		b = append(b, ',')
		b = strconv.AppendFloat(b, c.place.Lon, 'f', -1, 64)
		b = append(b, ',')
		b = strconv.AppendInt(b, c.place.TS, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(c.state()), 10)
		b = append(b, ',')
		if c.hasDist {
			b = strconv.AppendFloat(b, c.dist, 'f', 1, 64)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, ',')
		b = strconv.AppendInt(b, c.distEnd, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(c.distRev), 10)
		b = append(b, ',')
		if c.outside {
			b = strconv.AppendInt(b, c.moveTS, 10)
		} else {
			b = append(b, "null"...)
		}
		if c.state() == Stopped {
			b = append(b, ',')
			b = strconv.AppendInt(b, c.stoppedSince, 10)
		}
		b = append(b, ']')
	}
	b = append(b, `],"zones_dropped":`...)
	var zonesDropped uint64
	if st.zones != nil {
		zonesDropped = st.zones.dropped
	}
	b = strconv.AppendUint(b, zonesDropped, 10)
	b = append(b, ',')
	b = appendZones(b, filter, zs, full)
	if full {
		b = append(b, ',')
		b = appendAreas(b, filter, st.areas)
	}
	if st.hasDaily && (full || st.dailyDirty) {
		b = append(b, ',')
		b = appendDaily(b, filter, st.daily)
	}
	b = append(b, "}\n\n"...)
	st.buf = b
	st.updates++
	st.bytes += uint64(len(b))
	// Pages share the message and read it after this returns: a copy.
	return append([]byte(nil), b...)
}

func (st *state) appendMarket(b []byte, i int, name string, now time.Time) []byte {
	m := &st.markets[i]
	s := m.status
	b = append(b, `{"name":`...)
	b = appendString(b, name)
	b = append(b, `,"mqtt":`...)
	b = strconv.AppendBool(b, s.MQTT)
	b = append(b, `,"nats":`...)
	b = strconv.AppendBool(b, s.NATS)
	b = append(b, `,"lag_ms":`...)
	if s.HasWatermark {
		b = strconv.AppendInt(b, now.UnixMilli()-s.Watermark, 10)
	} else {
		b = append(b, "null"...)
	}
	recv, late, rej := m.rates()
	b = append(b, `,"received_per_s":`...)
	b = strconv.AppendFloat(b, recv, 'f', 2, 64)
	b = append(b, `,"late_per_s":`...)
	b = strconv.AppendFloat(b, late, 'f', 2, 64)
	b = append(b, `,"rejected_per_s":`...)
	b = strconv.AppendFloat(b, rej, 'f', 2, 64)
	b = append(b, `,"tz":`...)
	tz := st.cfg.Markets[i].Timezone
	if tz == "" {
		tz = "UTC"
	}
	b = appendString(b, tz)
	return append(b, '}')
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
