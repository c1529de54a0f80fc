// Package board is edgeproc's fleet board: a live web page that shows every
// courier's last position coloured by state, the current no-signal
// warnings, the couriers' latest window distance and each market's health,
// pushed to the browser by Server-Sent Events. A layer of dead zones
// draws the H3 cells where couriers lost signal over the last 24 h.
//
// A Hub owns the view state in one goroutine. The live service feeds it
// from the same calls that feed the courier key-value bucket — every valid
// position from the engine's sequencer (Feed.Position) and every batch of
// results from the sink (Feed.Results) — so the board shows the bucket's
// state, with the bucket's rules: a position no newer than the courier's
// last one is ignored, a no_signal result is ignored when a newer position
// is known, signal_restored puts a silent courier back online. Of a
// courier's distance results it shows the latest window at its highest
// revision: an earlier window, or a revision of the shown window no higher
// than the one shown, changes nothing (under allowed lateness a window's
// revisions may arrive out of order, and again after a restart). A courier
// the engine stops tracking leaves the board (Feed.Forget); the board holds
// at most Config.MaxCouriers couriers and refuses, and counts, the rest.
//
// The dead-zone layer sums, by market and cell, the dead_zone results
// (Feed.Result) whose window ends within ZoneHorizon (24 h) of the newest
// window end received: event time, so the layer depends only on the
// results fed. A dead zone fires once: the same window of a cell again
// changes nothing. Each cell's outline (h3.CellToBoundary) is computed once,
// when the cell joins the layer, and sent with the cell. The layer keeps at
// most Config.MaxDeadZoneCells cells and 8 times as many windows; beyond,
// the oldest windows are dropped and counted (Stats.DeadZonesDropped).
//
// A market with a service area (Market.Area) has its outline drawn: the
// edges between the area's H3 cells and the cells not in it, joined into
// rings, computed once by New and sent in every snapshot; at most
// Config.MaxAreaEdges edges a market. A courier is shown on the side of
// the area it is on now: the side the engine first knew it on (Feed.Side:
// a courier first seen outside is outside, though no left_area says so),
// then each left_area or entered_area result's (Feed.Result), as of the
// fix that decided it; a side dated no later than the one shown changes
// nothing, and a forgotten courier comes back unmarked, as the engine
// starts it afresh.
//
// A market with a lake (Market.Lake) has yesterday's greatest distances
// shown: the Config.DailyTop couriers of the greatest distance_m in the
// table `edgeproc daily` writes for the market's previous calendar day
// (LAKE/daily/market=M/date=D/daily.parquet, the day in Market.Location),
// with their positions, how many couriers the table has and their
// distance in all; or that it is not computed yet, or unavailable (it
// could not be read: logged once). The board looks for the table every
// Config.DailyEvery, off the hub's goroutine, and reads it again only when
// the date or the file (modification time, size) changed, keeping only
// the top couriers as it reads.
//
// Feeding never blocks the engine: a call copies the event into a bounded
// mailbox under a mutex held for that copy only; the hub swaps the mailbox
// out every DrainEvery while a page is connected, and with none (an
// instance nobody looks at: its board's state is only kept for the next
// page) every Interval or once the mailbox is half full, whichever comes
// first, so that an unwatched board does not wake its process ten times
// a second. Events that find the mailbox full are dropped and
// counted (Stats.Dropped, shown on the page). Every Interval the hub sends
// each connected page one message with the couriers and dead-zone cells
// that changed since the last one and the markets' status, so the browser
// gets at most 1/Interval updates whatever the fleet's rate. A page that
// does not keep up (its buffer of ClientBuffer messages is full) is
// disconnected and counted; its EventSource reconnects and starts again
// from a snapshot.
package board

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/result"
)

// Defaults applied to zero Config fields.
const (
	DefaultInterval     = 500 * time.Millisecond
	DefaultDrainEvery   = 100 * time.Millisecond
	DefaultMailbox      = 16384
	DefaultMaxCouriers  = 50000
	DefaultClientBuffer = 8
	DefaultMaxClients   = 32
	// DefaultMaxDeadZoneCells is Config.MaxDeadZoneCells' default.
	DefaultMaxDeadZoneCells = 5000
)

// maxID is the longest courier id (contract §2: 1–64 characters).
const maxID = 64

// Status is one market's health, read by the hub once per Interval.
type Status struct {
	// MQTT and NATS report whether the market's connections are up.
	MQTT, NATS bool
	// Watermark is the market's event-time watermark, ms since the Unix
	// epoch; HasWatermark is false before the first position.
	Watermark    int64
	HasWatermark bool
	// Received, Late and Rejected count, since the start, the messages
	// handed to the engine, the positions late for an operator and the
	// rejected inputs. The board shows their rates.
	Received, Late, Rejected int64
}

// Market is one market on the board.
type Market struct {
	// Name is the market's name (its page is /board/<Name>).
	Name string
	// Status returns the market's health. It is called from the hub's
	// goroutine and must be safe for that; nil shows no health.
	Status func() Status
	// Area is the market's service area (config geo.service_area), nil for
	// none. Its outline is drawn on the page.
	Area *geo.Area
	// Timezone is the market's IANA time zone (config timezone): the page
	// shows the market's times in it, on a 24-hour clock. Empty: UTC.
	Timezone string
	// Lake is the market's lake (config lake.dir): the board shows
	// yesterday's greatest distances from the table `edgeproc daily`
	// writes there (see the package doc). Empty: no such list.
	Lake string
	// Location is the market's time zone (config.Config.Location()), whose
	// calendar says which day was yesterday. Nil: UTC.
	Location *time.Location
}

// Config configures a Hub.
type Config struct {
	// Markets are the markets shown, in order. At least one, names unique.
	Markets []Market
	// Interval is the period of the updates sent to pages. Default 500ms.
	Interval time.Duration
	// DrainEvery is how often the mailbox is swapped out and applied
	// while a page is connected. Default 100ms.
	DrainEvery time.Duration
	// Mailbox is how many events wait between two drains, at most; more
	// are dropped (Stats.Dropped). Default 16384 (164 000 events/s at the
	// default DrainEvery).
	Mailbox int
	// MaxCouriers caps the couriers the board tracks, all markets
	// together; events for further couriers are refused (Stats.Refused).
	// Default 50 000.
	MaxCouriers int
	// MaxDeadZoneCells caps the cells of the dead-zone layer, all markets
	// together, and its windows at 8 times as many; past either cap the
	// oldest windows are dropped (Stats.DeadZonesDropped). Default 5 000.
	MaxDeadZoneCells int
	// MaxAreaEdges caps the edges of each market's service-area outline;
	// past it the outline is cut (the edges of the first cells, by H3
	// index, are kept) and the page says so. A city's outline has a few
	// hundred edges at resolution 9; 20 000 are ~450 KB in each snapshot.
	// Default 20 000.
	MaxAreaEdges int
	// ClientBuffer is how many messages may wait for one page; a page
	// further behind is disconnected (Stats.SlowClients). Default 8.
	ClientBuffer int
	// MaxClients caps the pages connected at once; more get 503. Default 32.
	MaxClients int
	// Tiles is an optional map tile URL template ({z}, {x}, {y}), e.g. a
	// local tile server's; empty draws the positions on a plain canvas.
	Tiles string
	// DailyTop is how many couriers of yesterday's table are shown, the
	// greatest distances (markets with a Lake). Default 10.
	DailyTop int
	// DailyEvery is how often the board looks for each market's table of
	// yesterday; it reads one only when the date or the file changed.
	// Default 1 minute.
	DailyEvery time.Duration
	// Now is the wall clock (silence durations, rates, the date of
	// yesterday). Default time.Now.
	Now func() time.Time
	// Log receives the board's logs: a table of yesterday that cannot be
	// read, once. Default: discarded.
	Log *slog.Logger
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Mailbox, DefaultMailbox)
	def(&c.MaxCouriers, DefaultMaxCouriers)
	def(&c.MaxDeadZoneCells, DefaultMaxDeadZoneCells)
	def(&c.MaxAreaEdges, DefaultMaxAreaEdges)
	def(&c.ClientBuffer, DefaultClientBuffer)
	def(&c.MaxClients, DefaultMaxClients)
	def(&c.DailyTop, DefaultDailyTop)
	if c.DailyEvery <= 0 {
		c.DailyEvery = DefaultDailyEvery
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.DrainEvery <= 0 {
		c.DrainEvery = DefaultDrainEvery
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Stats are a Hub's counters. They only grow, except Couriers and Clients.
type Stats struct {
	// Dropped counts events that found the mailbox full.
	Dropped uint64
	// Refused counts events for a new courier while MaxCouriers were
	// tracked, or with an id over 64 bytes, and dead zones with no valid
	// cell or window.
	Refused uint64
	// DeadZonesDropped counts the dead-zone windows dropped, oldest first,
	// at MaxDeadZoneCells (not those that passed out of the 24 h).
	DeadZonesDropped uint64
	// SlowClients counts pages disconnected for not keeping up.
	SlowClients uint64
	// Updates counts messages encoded (one per market filter with pages,
	// per Interval), and UpdateBytes their total size.
	Updates, UpdateBytes uint64
	// Couriers is the number of couriers tracked, Clients of pages
	// connected, DeadZones of cells on the dead-zone layer.
	Couriers, Clients, DeadZones int
}

// ErrClosed is returned to a page that connects after Close.
var ErrClosed = errors.New("board: closed")

// Hub owns the board's state; see the package doc.
type Hub struct {
	cfg      Config
	names    map[string]int // market name -> index
	outlines []*outline     // by market; nil: no service area

	// mu guards only the mailbox hand-over, never the state.
	mu      sync.Mutex
	box     []event
	zbox    []zoneEvent // dead zones; at most Mailbox too, grown on use
	dropped uint64
	// half wakes the hub when a mailbox is half full.
	half    chan struct{}
	statsMu sync.Mutex
	stats   Stats

	// watch says, per market, whether a page shows it (watching), for
	// feeds that cost something only worth paying while one does.
	watchMu sync.Mutex
	watch   []watching

	join    chan *client
	leave   chan *client
	daily   chan dailyChange // from the daily loader (runDaily)
	done    chan struct{}
	stopped chan struct{}
	loaders sync.WaitGroup // the daily loader
	once    sync.Once
}

// kind is an event's type.
type kind uint8

const (
	evPosition kind = iota
	evDistance
	evNoSignal
	evRestored
	evForget
	evLeft    // left_area: ts is the move's timestamp
	evEntered // entered_area: likewise
	evSide    // the side first known (Feed.Side): ts is its fix's, outside the side
)

// event is one fed call, copied by value into the mailbox (no allocation).
type event struct {
	kind    kind
	market  uint16
	n       uint8
	id      [maxID]byte
	ts      int64 // position: timestamp; distance: window end; no_signal: last seen
	start   int64 // distance: window start
	lat     float64
	lon     float64
	dist    float64
	stopped bool
	outside bool  // side: outside the service area
	rev     int32 // distance: revision (0: the window's first firing)
}

// New returns a running Hub. Call Close to stop it.
func New(cfg Config) (*Hub, error) {
	if len(cfg.Markets) == 0 {
		return nil, errors.New("board: no market")
	}
	cfg = cfg.withDefaults()
	h := &Hub{
		cfg:     cfg,
		names:   make(map[string]int, len(cfg.Markets)),
		box:     make([]event, 0, cfg.Mailbox),
		half:    make(chan struct{}, 1),
		join:    make(chan *client),
		leave:   make(chan *client),
		daily:   make(chan dailyChange),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	for i, m := range cfg.Markets {
		if m.Name == "" {
			return nil, errors.New("board: market with an empty name")
		}
		if _, dup := h.names[m.Name]; dup {
			return nil, errors.New("board: market " + m.Name + " twice")
		}
		h.names[m.Name] = i
		h.outlines = append(h.outlines, newOutline(m.Area, cfg.MaxAreaEdges))
		h.watch = append(h.watch, newWatching())
	}
	go h.run()
	if l := newDailyLoader(cfg); len(l.markets) > 0 {
		h.loaders.Go(func() { h.runDaily(l) })
	}
	return h, nil
}

// Close stops the hub and ends every page's event stream. It is safe to
// call more than once.
func (h *Hub) Close() {
	h.once.Do(func() { close(h.done) })
	<-h.stopped
	h.loaders.Wait()
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	h.statsMu.Lock()
	s := h.stats
	h.statsMu.Unlock()
	h.mu.Lock()
	s.Dropped = h.dropped
	h.mu.Unlock()
	return s
}

// Feed is one market's input to the hub. A nil *Feed ignores every call,
// so a service with the board turned off needs no checks.
type Feed struct {
	h      *Hub
	market uint16
}

// Feed returns the input of the named market, or nil if the hub does not
// show it.
func (h *Hub) Feed(market string) *Feed {
	i, ok := h.names[market]
	if !ok {
		return nil
	}
	return &Feed{h: h, market: uint16(i)}
}

// watching is whether pages show a market: on is closed while one does,
// off while none does.
type watching struct {
	shown   bool
	on, off chan struct{}
}

func newWatching() watching {
	w := watching{on: make(chan struct{}), off: make(chan struct{})}
	close(w.off)
	return w
}

// setShown records, from the hub goroutine, which markets pages show.
func (h *Hub) setShown(shown []bool) {
	h.watchMu.Lock()
	defer h.watchMu.Unlock()
	for i, now := range shown {
		w := &h.watch[i]
		switch {
		case now && !w.shown:
			close(w.on)
			w.off = make(chan struct{})
		case !now && w.shown:
			close(w.off)
			w.on = make(chan struct{})
		}
		w.shown = now
	}
}

// Watched returns a channel that is closed while a page shows the feed's
// market (its own page or the all-markets page), and Unwatched one closed
// while none does: a feed that costs something, such as the couriers an
// instance of a partitioned market reads from NATS, runs only while the
// board is looked at. A nil *Feed is never watched.
func (f *Feed) Watched() <-chan struct{} {
	if f == nil {
		return nil
	}
	return f.signal(true)
}

// Unwatched: see Watched.
func (f *Feed) Unwatched() <-chan struct{} {
	if f == nil {
		return closedChan
	}
	return f.signal(false)
}

// signal is the market's channel closed while it is watched (on) or not.
func (f *Feed) signal(on bool) <-chan struct{} {
	f.h.watchMu.Lock()
	defer f.h.watchMu.Unlock()
	w := f.h.watch[f.market]
	if on {
		return w.on
	}
	return w.off
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Position records a valid position (the engine's OnPosition: courier is
// only read during the call). It never blocks for longer than a copy.
func (f *Feed) Position(courier []byte, ts int64, lat, lon float64) {
	if f == nil {
		return
	}
	put(f, courier, event{kind: evPosition, ts: ts, lat: lat, lon: lon})
}

// Result records the courier state a result carries: distance (the
// window's distance, stopped flag and revision), no_signal (silent since
// End, last seen at Lat, Lon) and signal_restored; left_area and
// entered_area (outside the service area, or back in, as of TS); and a
// dead_zone's figures, for the dead-zone layer. Other types are ignored:
// the market's counters give their rates.
func (f *Feed) Result(r *result.Record) {
	if f == nil {
		return
	}
	switch r.Type {
	case result.Distance:
		put(f, r.Courier, event{kind: evDistance, ts: r.End, start: r.Start, dist: r.DistanceM, stopped: r.Stopped, rev: int32(r.Revision)})
	case result.NoSignal:
		put(f, r.Courier, event{kind: evNoSignal, ts: r.End, start: r.Start, lat: r.Lat, lon: r.Lon})
	case result.SignalRestored:
		put(f, r.Courier, event{kind: evRestored, ts: r.RestoredAt, start: r.SilentFrom})
	case result.LeftArea:
		put(f, r.Courier, event{kind: evLeft, ts: r.TS})
	case result.EnteredArea:
		put(f, r.Courier, event{kind: evEntered, ts: r.TS})
	case result.DeadZone:
		if r.Zone != nil {
			f.h.putZone(zoneEvent{market: f.market, cell: r.Cell, start: r.Start, end: r.End, zone: *r.Zone})
		}
	}
}

// Side records the side of the market's service area a courier was first
// known on by the engine (its OnSide: the first fix out of the border
// band, or the first after a restore), as of the fix at ts. Later moves
// come as left_area and entered_area results (Result). It is safe for
// concurrent use and never blocks for longer than a copy.
func (f *Feed) Side(courier string, ts int64, outside bool) {
	if f == nil {
		return
	}
	put(f, courier, event{kind: evSide, ts: ts, outside: outside})
}

// Forget removes a courier from the board: the engine's OnForget (the
// courier stops being tracked after windows.restore_ttl, or is evicted at
// limits.max_couriers), so the board keeps only couriers the engine keeps.
func (f *Feed) Forget(courier string) {
	if f == nil {
		return
	}
	put(f, courier, event{kind: evForget})
}

// put copies e, with f's market and the courier id, into the mailbox, or
// counts it as dropped when the mailbox is full. An id over 64 bytes is
// stored empty, and refused by the hub.
func put[S string | []byte](f *Feed, courier S, e event) {
	e.market = f.market
	if len(courier) <= maxID {
		e.n = uint8(copy(e.id[:], courier))
	}
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.box) == cap(h.box) {
		h.dropped++
		return
	}
	h.box = append(h.box, e)
	if len(h.box) == cap(h.box)/2 {
		h.wake()
	}
}

// wake asks the hub to drain its mailboxes now; it never blocks. Called
// with mu held.
func (h *Hub) wake() {
	select {
	case h.half <- struct{}{}:
	default: // a wake-up is pending
	}
}

// putZone copies a dead zone into its mailbox, or counts it as dropped
// when the mailbox is full.
func (h *Hub) putZone(z zoneEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.zbox) >= h.cfg.Mailbox {
		h.dropped++
		return
	}
	h.zbox = append(h.zbox, z)
	if len(h.zbox) == h.cfg.Mailbox/2 {
		h.wake()
	}
}

// swap hands the filled mailboxes to the hub goroutine and takes spare and
// zspare (empty) in their place; it also returns the drop count so far.
func (h *Hub) swap(spare []event, zspare []zoneEvent) ([]event, []zoneEvent, uint64) {
	h.mu.Lock()
	full, zones, dropped := h.box, h.zbox, h.dropped
	h.box, h.zbox = spare[:0], zspare[:0]
	h.mu.Unlock()
	return full, zones, dropped
}
