// Package courier holds where a courier was last seen and whether it is
// silent, and the one rule that updates it from the engine's positions and
// results. The courier bucket (package bridge) and the fleet board
// (package board) both keep a Place per courier and apply it, so they
// always agree on a courier's position and status.
package courier

// Place is a courier's last known position (TS in ms, the timestamp of
// the position) and status. The zero Place is a courier never seen.
type Place struct {
	TS       int64
	Lat, Lon float64
	// Silent is true from a no_signal until the courier is heard again.
	Silent bool
}

// Position applies a valid position. The newest timestamp wins: a
// position no newer than the place is ignored, so a late or duplicate
// position never moves a courier back; a newer one moves it and makes it
// online. It reports whether the position was applied and whether the
// status changed.
func (p *Place) Position(ts int64, lat, lon float64) (applied, status bool) {
	if ts <= p.TS {
		return false, false
	}
	status = p.Silent
	p.TS, p.Lat, p.Lon, p.Silent = ts, lat, lon, false
	return true, status
}

// NoSignal applies a no_signal result, whose session's latest position
// was at ts (lat, lon). It is ignored when a newer position is known:
// results reach the bucket and the board after the positions that follow
// them, and a courier that is back must stay online. It reports whether
// the result was applied and whether the status changed.
func (p *Place) NoSignal(ts int64, lat, lon float64) (applied, status bool) {
	if p.TS > ts {
		return false, false
	}
	status = !p.Silent
	p.TS, p.Lat, p.Lon, p.Silent = ts, lat, lon, true
	return true, status
}

// Restored applies a signal_restored result: a silent courier is online
// again. It reports whether the status changed.
func (p *Place) Restored() (status bool) {
	status = p.Silent
	p.Silent = false
	return status
}
