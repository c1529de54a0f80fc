package result

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/uber/h3-go/v4"
)

// recordJSON is every field AppendJSON writes, for Parse.
type recordJSON struct {
	Type                 string   `json:"type"`
	Market               string   `json:"market"`
	Courier              string   `json:"courier"`
	EmittedAt            int64    `json:"emitted_at_ms"`
	WindowStart          *int64   `json:"window_start_ms"`
	WindowEnd            int64    `json:"window_end_ms"`
	DistanceM            float64  `json:"distance_m"`
	Positions            int      `json:"positions"`
	Stopped              bool     `json:"stopped"`
	InsufficientEvidence bool     `json:"insufficient_evidence"`
	Revision             int      `json:"revision"`
	Cell                 string   `json:"cell"`
	SessionStart         int64    `json:"session_start_ms"`
	LastSeen             int64    `json:"last_seen_ms"`
	LastLat              *float64 `json:"last_lat"`
	LastLon              *float64 `json:"last_lon"`
	EndOfInput           bool     `json:"end_of_input"`
	SilentFrom           int64    `json:"silent_from_ms"`
	RestoredAt           int64    `json:"restored_at_ms"`
	Operator             string   `json:"operator"`
	TS                   int64    `json:"timestamp_ms"`
	Watermark            int64    `json:"watermark_ms"`
	Lat                  *float64 `json:"lat"`
	Lon                  *float64 `json:"lon"`
	Warnings             int      `json:"warnings"`
	Couriers             int      `json:"couriers"`
	Restored             int      `json:"restored"`
	SilenceMs            int64    `json:"silence_ms"`
	LongestMs            int64    `json:"longest_silence_ms"`
	Reason               string   `json:"reason"`
	Field                string   `json:"field"`
	Raw                  string   `json:"raw"`
	Line                 int64    `json:"line"`
}

// Parse reads back a result record as AppendJSON writes it (every type
// but ZonePart): what a reader of the results stream, such as the
// partitioned source's fleet board, makes of it. Its Order is zero.
func Parse(data []byte) (Record, error) {
	var j recordJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return Record{}, fmt.Errorf("result: %w", err)
	}
	for _, s := range []string{j.Market, j.Courier, j.Reason, j.Field} {
		if !plain(s) {
			return Record{}, fmt.Errorf("result: %q is no id", s)
		}
	}
	r := Record{Market: j.Market, Courier: j.Courier, EmittedAt: j.EmittedAt}
	typ := -1
	for t, s := range typeText[:len(Types)] {
		if s == j.Type {
			typ = t
		}
	}
	if typ < 0 {
		return Record{}, fmt.Errorf("result: type %q", j.Type)
	}
	r.Type = Type(typ)
	var cell uint64
	if j.Cell != "" {
		var err error
		if cell, err = strconv.ParseUint(j.Cell, 16, 64); err != nil {
			return Record{}, fmt.Errorf("result: cell %q", j.Cell)
		}
	}
	r.Cell = h3.Cell(cell)
	coord := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	switch r.Type {
	case Distance:
		if j.WindowStart == nil {
			return Record{}, errors.New("result: distance without window_start_ms")
		}
		r.Start, r.End, r.DistanceM, r.Positions = *j.WindowStart, j.WindowEnd, j.DistanceM, j.Positions
		r.Stopped, r.InsufficientEvidence, r.Revision = j.Stopped, j.InsufficientEvidence, j.Revision
	case NoSignal:
		r.Start, r.End, r.Lat, r.Lon, r.EndOfInput = j.SessionStart, j.LastSeen, coord(j.LastLat), coord(j.LastLon), j.EndOfInput
	case SignalRestored:
		r.SilentFrom, r.RestoredAt = j.SilentFrom, j.RestoredAt
	case Late:
		r.TS, r.Watermark = j.TS, j.Watermark
		if j.Operator == OpSession.String() {
			r.Operator = OpSession
		}
	case LeftArea, EnteredArea:
		r.TS, r.Lat, r.Lon = j.TS, coord(j.Lat), coord(j.Lon)
	case DeadZone:
		if j.WindowStart == nil {
			return Record{}, errors.New("result: dead_zone without window_start_ms")
		}
		r.Start, r.End = *j.WindowStart, j.WindowEnd
		r.Zone = &Zone{Warnings: j.Warnings, Couriers: j.Couriers, Restored: j.Restored, SilenceMs: j.SilenceMs, LongestMs: j.LongestMs}
	case Rejected:
		r.Reason, r.Field, r.Raw, r.Line = j.Reason, j.Field, []byte(j.Raw), j.Line
	}
	return r, nil
}

// plain reports whether s is written as is in JSON, as AppendJSON writes
// ids and reasons (edgeproc's are: validated where they come in).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			return false
		}
	}
	return true
}
