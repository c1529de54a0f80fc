package fleet

import (
	"math"
	"strings"
	"time"
)

// Defaults applied by New to zero-valued Config fields.
const (
	DefaultCouriers       = 140
	DefaultInterval       = 5 * time.Second
	DefaultStart          = int64(1767614400000) // 2026-01-05T12:00:00Z, ms since epoch
	DefaultCenterLat      = 41.9794              // Girona
	DefaultCenterLon      = 2.8214
	DefaultRadius         = 4000.0 // metres
	DefaultTunnelRate     = 1.0    // tunnels per hour of driving
	DefaultTunnelFraction = 0.10
	DefaultTunnelMin      = 210 * time.Second // 3.5 min
	DefaultTunnelMax      = 6 * time.Minute
)

// TunnelMode is what happens to a courier's positions in a tunnel.
type TunnelMode uint8

const (
	// TunnelSilent: the phone loses GPS and network, and sends nothing
	// (its session splits).
	TunnelSilent TunnelMode = iota
	// TunnelBuffered: the phone keeps its GPS fix and loses the network;
	// its MQTT client queues the positions and delivers them when the
	// tunnel ends (each arrives 0.5-3 s after the exit, in order): minutes
	// late, the case allowed lateness is for.
	TunnelBuffered
	// TunnelOnTime: the same positions as TunnelBuffered, each arriving as
	// if there were no tunnel: what TunnelBuffered is measured against.
	TunnelOnTime
)

// ParseTunnelMode reads "silent", "buffered" or "on-time".
func ParseTunnelMode(s string) (TunnelMode, bool) {
	switch s {
	case "silent":
		return TunnelSilent, true
	case "buffered":
		return TunnelBuffered, true
	case "on-time":
		return TunnelOnTime, true
	}
	return 0, false
}

// Config describes a simulated fleet. The zero value is a usable demo fleet:
// New replaces zero fields by their defaults. The generator is a pure
// function of the Config: the same Config gives the same events.
type Config struct {
	// Market, when set, prefixes courier ids ("girona-c0001") so the fleets
	// of several markets never share ids. Characters outside the contract's
	// id alphabet [A-Za-z0-9._:-] are replaced by '_' and it is cut to 32
	// characters. Default "" (ids "c0001", "c0002", …).
	Market string
	// Couriers is the number of couriers. Default 140.
	Couriers int
	// Interval is the mean time between two positions of one courier; each
	// gap is Interval ± 20 %. Default 5s.
	Interval time.Duration
	// Start is the event time of the first positions, ms since the epoch.
	// Each courier starts at Start plus its own phase in [0, Interval).
	// Default DefaultStart (2026-01-05T12:00:00Z).
	Start int64
	// Duration is the event-time span to generate: positions have
	// timestamp_ms < Start+Duration. 0 (or negative) = unbounded, for live
	// use.
	Duration time.Duration
	// Seed selects the run; every random choice derives from it.
	Seed int64
	// CenterLat and CenterLon (degrees) are the centre of the area couriers
	// drive in. Default Girona (41.9794, 2.8214) when both are 0.
	CenterLat, CenterLon float64
	// Radius is the radius in metres around the centre inside which route
	// destinations are chosen. Default 4000.
	Radius float64
	// RoamFraction is the fraction of couriers (rounded up, chosen by the
	// seed) that drive round another centre,
	// RoamLat and RoamLon, within RoamRadius metres of it: a few couriers
	// working across a service area's edge among a fleet inside it.
	// Default 0: none (and the fleet is the same as without these fields).
	RoamFraction     float64
	RoamLat, RoamLon float64
	RoamRadius       float64
	// TunnelRate is the expected number of tunnels per hour of driving of a
	// tunnel-prone courier. In a tunnel a courier emits nothing for a
	// uniform TunnelMin–TunnelMax (by default 3.5–6 min, longer than the
	// default 3 min session gap, so its session splits). Default 1.0;
	// negative = no tunnels.
	TunnelRate float64
	// TunnelMin and TunnelMax bound a tunnel's silence. Defaults 3.5 min
	// and 6 min; a TunnelMax below TunnelMin is raised to it. Shorter
	// tunnels suit a configuration with a short session gap, such as
	// edgeproc demo's, where 3.5 min would be a long wait.
	TunnelMin, TunnelMax time.Duration
	// Tunnel is what a tunnel does to a courier's positions. Default
	// TunnelSilent.
	Tunnel TunnelMode
	// TunnelFraction is the fraction of couriers that are tunnel-prone
	// (rounded up, chosen by the seed); the others never enter a tunnel.
	// Default 0.10; negative = none; 1 = all.
	TunnelFraction float64
	// LateRate is the probability that a position is delivered 1–4 minutes
	// after the delay profile says (a phone that lost the network for a
	// while, then delivered its queue): late data for allowed lateness.
	// Default 0.
	LateRate float64
	// DuplicateRate is the probability that a position is delivered a
	// second time (QoS 1 redelivery) 0.2–5 s after the first. Default 0.
	DuplicateRate float64
	// BadRate is the probability that a position is accompanied by an
	// extra malformed payload (Event.Raw), for rejection paths. Default 0.
	BadRate float64
}

// withDefaults returns a copy of c with defaults filled in and values out of
// range clamped, so that New never fails and never panics.
func (c Config) withDefaults() Config {
	if c.Couriers <= 0 {
		c.Couriers = DefaultCouriers
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Interval < time.Millisecond {
		c.Interval = time.Millisecond
	}
	if c.Start == 0 {
		c.Start = DefaultStart
	}
	if c.Duration < 0 {
		c.Duration = 0
	}
	if c.CenterLat == 0 && c.CenterLon == 0 {
		c.CenterLat, c.CenterLon = DefaultCenterLat, DefaultCenterLon
	}
	// Keep the local projection sane: clamp away from the poles.
	c.CenterLat = clamp(finiteOr(c.CenterLat, DefaultCenterLat), -80, 80)
	c.CenterLon = clamp(finiteOr(c.CenterLon, DefaultCenterLon), -180, 180)
	if !(c.Radius > 0) || math.IsInf(c.Radius, 0) {
		c.Radius = DefaultRadius
	}
	c.Radius = math.Min(c.Radius, 100_000)
	c.RoamFraction = clamp(finiteOr(c.RoamFraction, 0), 0, 1)
	c.RoamLat = clamp(finiteOr(c.RoamLat, c.CenterLat), -80, 80)
	c.RoamLon = clamp(finiteOr(c.RoamLon, c.CenterLon), -180, 180)
	if !(c.RoamRadius > 0) || math.IsInf(c.RoamRadius, 0) {
		c.RoamRadius = c.Radius
	}
	c.RoamRadius = math.Min(c.RoamRadius, 100_000)
	c.TunnelRate = rateDefault(c.TunnelRate, DefaultTunnelRate)
	c.TunnelFraction = math.Min(rateDefault(c.TunnelFraction, DefaultTunnelFraction), 1)
	if c.TunnelMin <= 0 {
		c.TunnelMin = DefaultTunnelMin
	}
	if c.TunnelMax <= 0 {
		c.TunnelMax = DefaultTunnelMax
	}
	c.TunnelMax = max(c.TunnelMax, c.TunnelMin)
	c.DuplicateRate = clamp(finiteOr(c.DuplicateRate, 0), 0, 1)
	c.LateRate = clamp(finiteOr(c.LateRate, 0), 0, 1)
	c.BadRate = clamp(finiteOr(c.BadRate, 0), 0, 1)
	c.Market = sanitizeMarket(c.Market)
	return c
}

// rateDefault maps 0 to def, negative to 0 (off), NaN/Inf to def.
func rateDefault(v, def float64) float64 {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func finiteOr(v, def float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return def
	}
	return v
}

func clamp(v, lo, hi float64) float64 {
	return math.Max(lo, math.Min(hi, v))
}

func sanitizeMarket(m string) string {
	if len(m) > 32 {
		m = m[:32]
	}
	return strings.Map(func(r rune) rune {
		if validIDRune(r) {
			return r
		}
		return '_'
	}, m)
}

func validIDRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		r == '.' || r == '_' || r == ':' || r == '-'
}
