package board

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/uber/h3-go/v4"
)

// Update is one event-stream message decoded, for clients written in Go
// (tests, measurement tools); the page's script reads the same JSON.
type Update struct {
	// Full is set on the first message of a stream: Couriers is then every
	// courier shown; later messages carry only the couriers changed since
	// the previous one.
	Full bool `json:"full"`
	// Now is the server's clock, ms since the Unix epoch.
	Now int64 `json:"now"`
	// IntervalMS is the period of the updates.
	IntervalMS int64 `json:"interval_ms"`
	// Tiles is the tile URL template, empty for a plain canvas.
	Tiles string `json:"tiles"`
	// Dropped and Refused are the hub's Stats.Dropped and Stats.Refused.
	Dropped uint64 `json:"dropped"`
	Refused uint64 `json:"refused"`
	// Markets are the markets of the stream, in the board's order.
	Markets []MarketUpdate `json:"markets"`
	// Gone are the couriers forgotten since the previous message (never in
	// a Full one), to remove before applying Couriers.
	Gone []string `json:"gone"`
	// Couriers are the couriers, Market indexing Markets.
	Couriers []CourierUpdate `json:"c"`
	// ZonesDropped is the hub's Stats.DeadZonesDropped.
	ZonesDropped uint64 `json:"zones_dropped"`
	// ZonesGone are the dead-zone cells that left the layer since the
	// previous message (never in a Full one), to remove before applying
	// Zones.
	ZonesGone []ZoneKey `json:"zones_gone"`
	// Zones are the dead-zone cells: every cell in a Full message, later
	// the cells changed since the previous one.
	Zones []ZoneUpdate `json:"zones"`
	// Areas are the service-area outlines of the markets that have one;
	// in a Full message only.
	Areas []AreaUpdate `json:"areas"`
	// Daily is each market's table of yesterday, of the markets with a
	// lake (Market.Lake): in a Full message, and in a later one when any
	// of them changed (nil otherwise: keep the last one).
	Daily []DailyUpdate `json:"daily"`
}

// DailyUpdate is a market's yesterday in an Update: the table `edgeproc
// daily` wrote for the market's previous calendar day.
type DailyUpdate struct {
	// Market indexes Update.Markets.
	Market int `json:"market"`
	// Date is yesterday, YYYY-MM-DD in the market's time zone.
	Date string `json:"date"`
	// State is "ok" (the table was read), "missing" (no table for the
	// date yet: `edgeproc daily` has not run for it) or "unavailable"
	// (there, but it could not be read; the service logged why).
	State string `json:"state"`
	// Couriers counts the table's couriers and DistanceM is their
	// distance_m summed, metres.
	Couriers  int     `json:"couriers"`
	DistanceM float64 `json:"distance_m"`
	// Top are the couriers of the greatest distance_m, greatest first, at
	// most Config.DailyTop.
	Top []DailyCourier `json:"top"`
}

// DailyCourier is a courier of yesterday's greatest distances.
type DailyCourier struct {
	Courier   string  `json:"courier"`
	DistanceM float64 `json:"distance_m"` // metres, to one decimal
	Positions int64   `json:"positions"`
}

// MarketUpdate is a market's health in an Update.
type MarketUpdate struct {
	Name string `json:"name"`
	MQTT bool   `json:"mqtt"`
	NATS bool   `json:"nats"`
	// LagMS is the server's clock minus the watermark; nil before the
	// first position.
	LagMS *int64 `json:"lag_ms"`
	// Rates per second over the last 10 s.
	ReceivedPerS float64 `json:"received_per_s"`
	LatePerS     float64 `json:"late_per_s"`
	RejectedPerS float64 `json:"rejected_per_s"`
	// Timezone is the market's IANA time zone, for its times on the page.
	Timezone string `json:"tz"`
}

// CourierUpdate is a courier in an Update, sent as the JSON array
// [id, market, lat, lon, timestamp_ms, state, distance_m|null,
// window_end_ms, revision, outside_since_ms|null[, stopped_since_ms]], the
// last member there only while the courier is stopped.
type CourierUpdate struct {
	ID       string
	Market   int
	Lat, Lon float64
	// TS is the courier bucket's timestamp_ms: the last position's, or the
	// last seen when silent.
	TS    int64
	State State
	// DistanceM is the latest fired window's distance (HasDistance), the
	// window ending at WindowEnd, as of its firing numbered Revision (0:
	// the window's first firing; n: its n-th revision under allowed
	// lateness, the highest the board has received).
	DistanceM   float64
	HasDistance bool
	WindowEnd   int64
	Revision    int
	// Outside is set while the courier is outside its market's service
	// area: since OutsideSince, the timestamp of the fix that put it
	// there (a left_area's, or the first fix the engine knew its side by).
	Outside      bool
	OutsideSince int64
	// StoppedSince is, while State is Stopped, the start of the first of
	// its consecutive stopped windows.
	StoppedSince int64
}

// UnmarshalJSON reads the array form.
func (c *CourierUpdate) UnmarshalJSON(b []byte) error {
	var dist *float64
	var state uint8
	var outside, stopped *int64
	a := []any{&c.ID, &c.Market, &c.Lat, &c.Lon, &c.TS, &state, &dist, &c.WindowEnd, &c.Revision, &outside, &stopped}
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("board: courier %s: %w", b, err)
	}
	if len(a) < 10 || len(a) > 11 || int(state) >= len(stateText) {
		return fmt.Errorf("board: courier %s: want 10 or 11 fields and a state code below %d", b, len(stateText))
	}
	if len(a) == 11 && stopped != nil {
		c.StoppedSince = *stopped
	}
	c.State = State(state)
	if dist != nil {
		c.DistanceM, c.HasDistance = *dist, true
	}
	if outside != nil {
		c.OutsideSince, c.Outside = *outside, true
	}
	return nil
}

// ZoneKey names a dead-zone cell in an Update, sent as [cell, market].
type ZoneKey struct {
	// Cell is the H3 cell, sent in hex as in the dead_zone results.
	Cell h3.Cell
	// Market indexes Update.Markets.
	Market int
}

// UnmarshalJSON reads the array form.
func (k *ZoneKey) UnmarshalJSON(b []byte) error {
	a := []any{&k.Cell, &k.Market}
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("board: dead zone %s: %w", b, err)
	}
	if len(a) != 2 {
		return fmt.Errorf("board: dead zone %s: want [cell, market]", b)
	}
	return nil
}

// ZoneUpdate is a dead-zone cell in an Update: the dead_zone results of
// the cell whose windows end within ZoneHorizon of the newest window end
// the board has received, summed. It is sent as the JSON array [cell,
// market, warnings, couriers, restored, open, silence_ms,
// longest_silence_ms, windows, first_window_start_ms, last_window_end_ms,
// [[lat,lon],…]].
type ZoneUpdate struct {
	ZoneKey
	// Warnings, Couriers, Restored and SilenceMS are the windows' sums (a
	// courier silent in two windows counts twice), Open is Warnings −
	// Restored and LongestMS the longest restored silence, ms.
	Warnings, Couriers, Restored, Open int
	SilenceMS, LongestMS               int64
	// Windows is how many windows were summed: the first starting at
	// FirstStart, the last ending at LastEnd, ms since the Unix epoch.
	Windows             int
	FirstStart, LastEnd int64
	// Boundary is the cell's outline, in degrees (h3.CellToBoundary, to
	// 7 decimals).
	Boundary []h3.LatLng
}

// UnmarshalJSON reads the array form.
func (z *ZoneUpdate) UnmarshalJSON(b []byte) error {
	var outline [][2]float64
	a := []any{&z.Cell, &z.Market, &z.Warnings, &z.Couriers, &z.Restored, &z.Open, &z.SilenceMS, &z.LongestMS,
		&z.Windows, &z.FirstStart, &z.LastEnd, &outline}
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("board: dead zone %s: %w", b, err)
	}
	if len(a) != 12 || len(outline) < 3 {
		return fmt.Errorf("board: dead zone %s: want 12 fields and an outline of 3 points or more", b)
	}
	z.Boundary = make([]h3.LatLng, len(outline))
	for i, p := range outline {
		z.Boundary[i] = h3.LatLng{Lat: p[0], Lng: p[1]}
	}
	return nil
}

// AreaUpdate is a market's service-area outline in an Update.
type AreaUpdate struct {
	// Market indexes Update.Markets.
	Market int
	// Edges counts the H3 cell edges in Outline; Truncated says the area
	// had more than Config.MaxAreaEdges and the rest were left out.
	Edges     int
	Truncated bool
	// Outline is the boundary between the area's cells and the others, as
	// polylines in degrees (to 7 decimals); a closed ring ends with its
	// first point.
	Outline [][]h3.LatLng
}

// UnmarshalJSON reads the object form, its outline as [[[lat,lon],…],…].
func (a *AreaUpdate) UnmarshalJSON(b []byte) error {
	var w struct {
		Market    *int           `json:"market"`
		Edges     int            `json:"edges"`
		Truncated bool           `json:"truncated"`
		Outline   [][][2]float64 `json:"outline"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("board: area: %w", err)
	}
	if w.Market == nil {
		return fmt.Errorf("board: area %.80s: no market", b)
	}
	a.Market, a.Edges, a.Truncated, a.Outline = *w.Market, w.Edges, w.Truncated, make([][]h3.LatLng, len(w.Outline))
	for i, line := range w.Outline {
		if len(line) < 2 {
			return fmt.Errorf("board: area of market %d: line %d has %d points, want 2 or more", a.Market, i, len(line))
		}
		a.Outline[i] = make([]h3.LatLng, len(line))
		for j, p := range line {
			a.Outline[i][j] = h3.LatLng{Lat: p[0], Lng: p[1]}
		}
	}
	return nil
}

// DecodeMessage decodes one event-stream message: its "data:" line (with
// or without the prefix and the blank line that ends it; other SSE fields
// are skipped).
func DecodeMessage(msg []byte) (Update, error) {
	var u Update
	for _, line := range bytes.Split(msg, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			if err := json.Unmarshal(d, &u); err != nil {
				return u, fmt.Errorf("board: decode update: %w", err)
			}
			return u, nil
		}
	}
	return u, fmt.Errorf("board: no data line in %q", msg)
}

// Stream reads the messages of an event stream (the body of a GET of
// /board/events), for clients written in Go.
type Stream struct {
	r   *bufio.Reader
	msg []byte
}

// NewStream reads the event stream r.
func NewStream(r io.Reader) *Stream { return &Stream{r: bufio.NewReaderSize(r, 64<<10)} }

// Next returns the next message, decoded, and its size on the wire.
func (s *Stream) Next() (Update, int, error) {
	s.msg = s.msg[:0]
	for {
		line, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			s.msg = append(s.msg, line...)
			continue
		}
		if err != nil {
			return Update{}, len(s.msg), fmt.Errorf("board: read event stream: %w", err)
		}
		s.msg = append(s.msg, line...)
		if len(line) == 1 { // the blank line that ends a message
			u, err := DecodeMessage(s.msg)
			return u, len(s.msg), err
		}
	}
}
