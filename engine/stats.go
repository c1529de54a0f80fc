package engine

import (
	"github.com/km0/edgeproc/internal/tmath"
	"github.com/km0/edgeproc/position"
	"github.com/km0/edgeproc/result"
)

// Stats are the engine's counters so far.
type Stats struct {
	Received, Accepted int64
	Rejected           map[string]int64 // by reason
	// Ignored counts, with FormatOwnTracks, the messages that are not
	// positions, by _type (position.MessageType's names); empty in the
	// edgeproc format. Received counts them too, Accepted and Rejected
	// do not.
	Ignored map[string]int64
	// SecondsLate counts late positions whose timestamp_ms reads as
	// seconds (before position.SecondsBefore, 2001-01-01).
	SecondsLate  int64
	Duplicates   int64
	LateDistance int64
	LateSession  int64
	// MissedMemberships counts window memberships lost to the watermark:
	// for each position not late for distance, its windows that had
	// already fired (contract §3: a window with end <= wm is never joined).
	MissedMemberships int64
	// Revisions counts distance windows re-emitted because a late position
	// changed them, and Recovered the positions that joined a window that
	// had already fired (both 0 without allowed lateness).
	Revisions, Recovered int64
	Results              map[string]int64 // by type, rejected included
	Couriers             int64            // tracked couriers (with state in a shard)
	// Evicted counts couriers forgotten to make room for a new one at
	// MaxCouriers (those refused are Rejected["courier_limit"]).
	Evicted int64
	// DeadZoneRefused counts no_signal warnings not counted in a dead
	// zone: their window had DeadZoneCells cells already.
	DeadZoneRefused int64
	Watermark       int64
	// InFlight is how many chunks of inputs are between the sequencer and
	// the sink, out of InFlightMax: at the maximum, Push blocks.
	InFlight, InFlightMax int
}

// Stats returns the counters. It is safe to call from any goroutine.
func (e *Engine) Stats() Stats {
	st := Stats{
		Received: e.received.Load(), Accepted: e.accepted.Load(), Evicted: e.evicted.Load(),
		Rejected: map[string]int64{}, Results: map[string]int64{}, Ignored: map[string]int64{},
	}
	if e.cfg.Format == position.FormatOwnTracks {
		for _, t := range position.MessageTypes {
			st.Ignored[t.String()] = e.ignored[t].Load()
		}
	}
	for _, r := range position.Reasons {
		st.Rejected[r.String()] = e.rejected[r].Load()
		st.Results[result.Rejected.String()] += e.rejected[r].Load()
	}
	for _, s := range e.shards {
		st.Duplicates += s.stats.duplicates.Load()
		st.LateDistance += s.stats.lateDistance.Load()
		st.LateSession += s.stats.lateSession.Load()
		st.SecondsLate += s.stats.secondsLate.Load()
		st.MissedMemberships += s.stats.missed.Load()
		st.Revisions += s.stats.revisions.Load()
		st.Recovered += s.stats.recovered.Load()
		st.Couriers += s.stats.couriers.Load()
		for _, t := range result.Types[:result.Rejected] {
			st.Results[t.String()] += s.stats.results[t].Load()
		}
	}
	if e.zones != nil {
		typ := result.DeadZone
		if e.zones.parts {
			typ = result.ZonePart
		}
		st.Results[typ.String()] = e.zones.fired.Load()
		st.DeadZoneRefused = e.zones.refused.Load()
	}
	st.InFlight, st.InFlightMax = inFlight-len(e.free), inFlight
	st.Watermark = tmath.Never
	for _, s := range e.shards {
		st.Watermark = max(st.Watermark, s.stats.watermark.Load())
	}
	return st
}

// Add adds the counters of o to s, as when a market's figures are summed
// over several engines (the partitions of an instance, and the ended terms
// of each). The gauges — Couriers, Watermark, InFlight and InFlightMax —
// are not counters, and are left to the caller.
func (s *Stats) Add(o Stats) {
	if s.Rejected == nil {
		s.Rejected = map[string]int64{}
	}
	if s.Results == nil {
		s.Results = map[string]int64{}
	}
	s.Received += o.Received
	s.Accepted += o.Accepted
	s.Duplicates += o.Duplicates
	s.LateDistance += o.LateDistance
	s.LateSession += o.LateSession
	s.MissedMemberships += o.MissedMemberships
	s.Revisions += o.Revisions
	s.Recovered += o.Recovered
	s.Evicted += o.Evicted
	s.DeadZoneRefused += o.DeadZoneRefused
	s.SecondsLate += o.SecondsLate
	for k, v := range o.Ignored {
		if s.Ignored == nil {
			s.Ignored = map[string]int64{}
		}
		s.Ignored[k] += v
	}
	for k, v := range o.Rejected {
		s.Rejected[k] += v
	}
	for k, v := range o.Results {
		s.Results[k] += v
	}
}
