package engine

import (
	"fmt"
	"slices"

	"github.com/km0/edgeproc/internal/wire"
	"github.com/km0/edgeproc/sessions"
	"github.com/km0/edgeproc/window"
)

// An incremental snapshot (CheckpointDelta) is a header like a whole
// snapshot's under its own magic, with the tag of the snapshot it builds
// on before its own, then the dead zones whole, then sections: a
// courier's delta (deltaCourier) or the name of a courier forgotten since
// (deltaForgotten).
var deltaMagic = []byte("EDGEPROC-DELTA\n")

// DeltaVersion is the format version of CheckpointDelta's snapshots; Merge
// reads this one only (a delta lives until the next whole snapshot, which
// the same build writes).
const DeltaVersion = 1

const (
	deltaCourier   = 1
	deltaForgotten = 2
)

func (e *Engine) appendDeltaHeader(b []byte, base, tag uint64) []byte {
	b = append(b, deltaMagic...)
	b = wire.AppendUint(b, DeltaVersion)
	b = wire.AppendUint(b, base)
	h := e.appendHeader(nil, tag)
	return append(b, h[len(snapshotMagic):]...) // version, market, fingerprint, tag, counters, watermark
}

// DeltaBase returns the tag of the snapshot an incremental snapshot builds
// on and its own; ok is false for a whole snapshot (or anything else).
func DeltaBase(snapshot []byte) (base, tag uint64, ok bool) {
	if len(snapshot) < len(deltaMagic) || string(snapshot[:len(deltaMagic)]) != string(deltaMagic) {
		return 0, 0, false
	}
	r := wire.NewReader(snapshot[len(deltaMagic):])
	if r.Uint() != DeltaVersion {
		return 0, 0, false
	}
	base = r.Uint()
	r.Uint() // the whole snapshot's version
	_ = r.String()
	for range fingerprintNames {
		r.Int()
	}
	tag = r.Uint()
	return base, tag, r.Err() == nil
}

// snapshotParts is a whole snapshot of the current version split at its
// sections: the header up to the tag, what follows the tag in it, the
// dead zones, and each courier's section by name.
type snapshotParts struct {
	prefix   []byte // magic to fingerprint
	tag      uint64
	counters []byte // after the tag: inputs and watermark
	zones    []byte
	couriers map[string][]byte
	// decoded holds the couriers a delta changed, as state: a courier
	// that changes in every delta of a chain is decoded once and encoded
	// once, not once a delta.
	decoded map[string]*courier
}

// Merge applies incremental snapshots to the whole snapshot they build on,
// in order, and returns the whole snapshot they make: the one Checkpoint
// would have taken at the last one's barrier, but for the order of its
// couriers. Each delta must build on the tag before it (the whole
// snapshot's, then the previous delta's) under the same configuration;
// anything else is an error wrapping ErrSnapshotCorrupt or
// ErrSnapshotConfig, never a wrong state.
func Merge(cfg Config, full []byte, deltas ...[]byte) ([]byte, error) {
	if len(deltas) == 0 {
		return full, nil
	}
	p, err := splitSnapshot(cfg, full)
	if err != nil {
		return nil, err
	}
	spec := window.NewSpec(cfg.Size, cfg.Slide)
	spec.Lateness = cfg.AllowedLateness
	p.decoded = map[string]*courier{}
	for i, d := range deltas {
		if err := p.apply(spec, d); err != nil {
			return nil, fmt.Errorf("delta %d of %d: %w", i+1, len(deltas), err)
		}
	}
	for name, c := range p.decoded {
		p.couriers[name] = appendCourierState(nil, c)
	}
	names := make([]string, 0, len(p.couriers))
	size := len(p.prefix) + len(p.counters) + len(p.zones) + 16
	for name, c := range p.couriers {
		names = append(names, name)
		size += len(c) + 1
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	b = append(b, p.prefix...)
	b = wire.AppendUint(b, p.tag)
	b = append(b, p.counters...)
	b = append(b, p.zones...)
	for _, name := range names {
		b = wire.AppendUint(b, 1)
		b = append(b, p.couriers[name]...)
	}
	return b, nil
}

// splitSnapshot splits a whole snapshot of the current version, reading
// every section to find where it ends.
func splitSnapshot(cfg Config, snap []byte) (*snapshotParts, error) {
	if len(snap) < len(snapshotMagic) || string(snap[:len(snapshotMagic)]) != string(snapshotMagic) {
		return nil, fmt.Errorf("%w: not an edgeproc snapshot", ErrSnapshotCorrupt)
	}
	r := wire.NewReader(snap[len(snapshotMagic):])
	at := func() int { return len(snap) - r.Len() }
	if v := r.Uint(); r.Err() == nil && v != SnapshotVersion {
		return nil, fmt.Errorf("%w: incremental snapshots build on version %d, not %d", ErrSnapshotVersion, SnapshotVersion, v)
	}
	if err := checkConfig(cfg, r, SnapshotVersion); err != nil {
		return nil, err
	}
	p := &snapshotParts{prefix: snap[:at()], couriers: map[string][]byte{}}
	p.tag = r.Uint()
	start := at()
	skipCounters(r)
	p.counters = snap[start:at()]
	start = at()
	if err := (*zones)(nil).readState(r); err != nil {
		return nil, fmt.Errorf("%w: dead zones: %v", ErrSnapshotCorrupt, err)
	}
	p.zones = snap[start:at()]
	spec := window.NewSpec(cfg.Size, cfg.Slide)
	spec.Lateness = cfg.AllowedLateness
	for r.Len() > 0 && r.Err() == nil {
		n := r.Count(4)
		for i := 0; i < n && r.Err() == nil; i++ {
			start := at()
			var c courier
			if err := readCourier(spec, r, &c, SnapshotVersion); err != nil {
				return nil, err
			}
			if _, dup := p.couriers[c.name]; dup {
				return nil, fmt.Errorf("%w: courier %q twice", ErrSnapshotCorrupt, c.name)
			}
			p.couriers[c.name] = snap[start:at()]
		}
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	return p, nil
}

// apply applies one incremental snapshot to p.
func (p *snapshotParts) apply(spec window.Spec, d []byte) error {
	base, tag, ok := DeltaBase(d)
	if !ok {
		return fmt.Errorf("%w: not an incremental snapshot of version %d", ErrSnapshotCorrupt, DeltaVersion)
	}
	if base != p.tag {
		return fmt.Errorf("%w: builds on %d, the snapshot before it is %d", ErrSnapshotCorrupt, base, p.tag)
	}
	r := wire.NewReader(d[len(deltaMagic):])
	at := func() int { return len(d) - r.Len() }
	r.Uint() // DeltaVersion
	r.Uint() // base
	start := at()
	if v := r.Uint(); r.Err() == nil && v != SnapshotVersion {
		return fmt.Errorf("%w: version %d", ErrSnapshotVersion, v)
	}
	_ = r.String() // market: the fingerprint's equality is checked below
	for range fingerprintNames {
		r.Int()
	}
	if string(d[start:at()]) != string(p.prefix[len(snapshotMagic):]) {
		return fmt.Errorf("%w: the incremental snapshot's market or settings differ from the one it builds on", ErrSnapshotConfig)
	}
	r.Uint() // tag
	start = at()
	skipCounters(r)
	counters := d[start:at()]
	start = at()
	if err := (*zones)(nil).readState(r); err != nil {
		return fmt.Errorf("%w: dead zones: %v", ErrSnapshotCorrupt, err)
	}
	zones := d[start:at()]
	// A shard's part lists the couriers forgotten since the snapshot
	// before, then the changed ones: a courier forgotten and seen again
	// is deleted, then comes back whole (a new courier's delta is its
	// whole state). A courier's sections are all in one part.
	for r.Len() > 0 && r.Err() == nil {
		switch kind := r.Uint(); kind {
		case deltaForgotten:
			name := r.String()
			delete(p.couriers, name)
			delete(p.decoded, name)
		case deltaCourier:
			name := r.String()
			c := p.decoded[name]
			if c == nil {
				c = &courier{name: name}
				if old, ok := p.couriers[name]; ok {
					if err := readCourier(spec, wire.NewReader(old), c, SnapshotVersion); err != nil {
						return err
					}
				}
				p.decoded[name] = c
				p.couriers[name] = nil // listed; encoded at the end
			}
			if err := readCourierDelta(spec, r, c); err != nil {
				return fmt.Errorf("%w: courier %q: %v", ErrSnapshotCorrupt, c.name, err)
			}
		default:
			return fmt.Errorf("%w: section kind %d", ErrSnapshotCorrupt, kind)
		}
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	p.tag, p.counters, p.zones = tag, counters, zones
	return nil
}

// readCourierDelta reads a courier's section of an incremental snapshot
// after its name, applying it to c (its state at the snapshot before; the
// zero courier for one new since).
func readCourierDelta(spec window.Spec, r *wire.Reader, c *courier) error {
	c.latest = r.Int()
	if err := c.dist.ApplyDelta(spec, r); err != nil {
		return err
	}
	c.sess = sessions.State{}
	if err := c.sess.ReadState(r); err != nil {
		return err
	}
	c.area = nil
	if err := readPresence(r, &c.area); err != nil {
		return err
	}
	if c.latest <= 0 {
		return fmt.Errorf("latest position at %d", c.latest)
	}
	return r.Err()
}

// skipCounters reads past what a header holds after the tag.
func skipCounters(r *wire.Reader) { readCounters(r) }
