package engine

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/km0/edgeproc/geo"
	"github.com/km0/edgeproc/internal/wire"
	"github.com/km0/edgeproc/position"
	"github.com/km0/edgeproc/watermark"
	"github.com/km0/edgeproc/window"
)

// SnapshotVersion is the format version of Checkpoint's snapshots. A
// snapshot of another version is refused, never misread, except versions
// 2 and 3, which Restore still reads: version 3 is version 4 without the
// dead zones (no section after the header) and without each courier's
// side of the service area, and version 2 is version 3
// without allowed lateness (no windows.allowed_lateness in its
// fingerprint, no retained windows).
const SnapshotVersion = 4

// snapshotV2 is the last version before allowed lateness, snapshotV3 the
// last before dead zones.
const (
	snapshotV2 = 2
	snapshotV3 = 3
)

var snapshotMagic = []byte("EDGEPROC-STATE\n")

var (
	// ErrSnapshotVersion is returned by Restore for a snapshot written in a
	// format this build does not know.
	ErrSnapshotVersion = errors.New("unsupported snapshot format version")
	// ErrSnapshotConfig is returned by Restore for a snapshot taken under
	// another market or another window, delay or filter configuration: its
	// state would mean something else now.
	ErrSnapshotConfig = errors.New("snapshot taken with another configuration")
	// ErrSnapshotCorrupt is returned for a snapshot that does not decode.
	ErrSnapshotCorrupt = errors.New("corrupt snapshot")
)

// Checkpoint takes a consistent snapshot of the engine after every input
// pushed so far: a barrier travels through the shard queues behind those
// inputs, and done receives the snapshot once every shard has saved its
// couriers as they were at the barrier and the sink has received every
// result of those inputs. done is called from a goroutine of the engine's
// (Stop waits for it); it may block without stopping the engine.
//
// The snapshot comes as its parts (a header, then one per shard), whose
// concatenation is what Restore reads: a city's state is tens of MB, and
// the parts go to a file or a store as they are, never copied whole.
//
// Intake goes on meanwhile: a shard saves its couriers copy-on-write, a
// courier about to change after the barrier first, the others whenever the
// shard has no chunk waiting, so no shard stops for the whole state.
//
// The snapshot holds state by courier, not by shard: Restore accepts it
// under any shard count. tag is stored in it and returned by Restore (the
// live service stores the write-ahead-log index the snapshot reflects).
func (e *Engine) Checkpoint(tag uint64, done func(snapshot [][]byte)) {
	c := e.take()
	j := &snapshotJob{header: e.appendHeader(nil, tag), parts: make([][]byte, len(e.shards)), done: done, wg: &e.wg}
	j.left.Store(int32(len(e.shards) + 1)) // every shard, and the merger
	c.ckpt = j
	e.dispatch(c)
}

// CheckpointDelta is Checkpoint writing only what changed since the
// previous checkpoint's barrier, whose tag is base: the couriers changed
// since (each as a delta on its state then, see window.AppendDelta) and
// the names of those forgotten since, with the header and the dead zones
// whole. Merge applies it to that checkpoint's snapshot. The caller must
// only build on a previous snapshot it has stored: after one it could not
// store, the next must be whole (Checkpoint).
//
// The first checkpoint of an engine must be whole: the changes before it
// are not tracked.
func (e *Engine) CheckpointDelta(base, tag uint64, done func(snapshot [][]byte)) {
	c := e.take()
	j := &snapshotJob{header: e.appendDeltaHeader(nil, base, tag), delta: true, parts: make([][]byte, len(e.shards)), done: done, wg: &e.wg}
	j.left.Store(int32(len(e.shards) + 1))
	c.ckpt = j
	e.dispatch(c)
}

// snapshotJob gathers one checkpoint's parts.
type snapshotJob struct {
	delta  bool // CheckpointDelta's
	header []byte
	zones  []byte   // the dead zones' state, written by the merger
	parts  [][]byte // by shard, each written only by its shard
	left   atomic.Int32
	done   func([][]byte)
	wg     *sync.WaitGroup // the engine's
}

// arrive marks one part done. The last one calls done on a goroutine of
// its own, so that neither a shard nor the merger waits for it.
func (j *snapshotJob) arrive() {
	if j.left.Add(-1) != 0 {
		return
	}
	// The caller is one of the engine's goroutines, so the WaitGroup's
	// count is above zero here.
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		j.done(append([][]byte{j.header, j.zones}, j.parts...))
	}()
}

// shardSnap is a shard's snapshot in progress.
type shardSnap struct {
	job  *snapshotJob
	buf  []byte
	todo []*courier // the couriers at the barrier
}

// snapBatch is how many couriers a shard saves between two chunks.
var snapBatch = 512

// beginSnap starts saving the shard's couriers as they are now.
func (s *shard) beginSnap(j *snapshotJob) {
	if s.snap != nil {
		s.snapStep(-1) // finish the previous one first
	}
	s.epoch++
	// Size the buffer after the previous snapshot: growing a large one by
	// doubling leaves as much garbage as it keeps.
	sn := &shardSnap{job: j, buf: make([]byte, 0, s.lastSnap+s.lastSnap/8)}
	if j.delta {
		sn.todo = s.changed // their due is the new epoch
		for _, name := range s.forgotten {
			sn.buf = wire.AppendUint(sn.buf, deltaForgotten)
			sn.buf = wire.AppendString(sn.buf, name)
		}
	} else {
		sn.todo = make([]*courier, 0, s.count)
		for _, c := range s.couriers {
			if c != nil {
				sn.todo = append(sn.todo, c)
			}
		}
	}
	s.changed, s.forgotten = nil, nil
	s.snap = sn
}

// save writes c into the snapshot in progress unless it is there already
// or, in an incremental one, unchanged before the barrier; and counts it
// changed for the next one. Every change to a courier's state is preceded
// by a save.
func (s *shard) save(c *courier) {
	s.saveSnap(c)
	s.changedNow(c)
}

func (s *shard) saveSnap(c *courier) {
	if s.snap == nil || c.epoch == s.epoch || (s.snap.job.delta && c.due != s.epoch) {
		return
	}
	c.epoch = s.epoch
	if s.snap.job.delta {
		s.snap.buf = s.appendCourierDelta(s.snap.buf, c)
	} else {
		s.snap.buf = s.appendCourier(s.snap.buf, c)
	}
	c.dist.Checkpointed()
}

// changedNow lists c for the next snapshot, once. Before the first
// snapshot nothing is listed: an incremental one builds on a snapshot
// (the first is whole), and an engine that never takes one (a replay)
// must not keep every courier it changed.
func (s *shard) changedNow(c *courier) {
	if s.epoch != 0 && c.due != s.epoch+1 {
		c.due = s.epoch + 1
		s.changed = append(s.changed, c)
	}
}

// snapStep saves up to n couriers (all when n < 0), and hands the part
// over when none is left.
func (s *shard) snapStep(n int) {
	sn := s.snap
	if sn == nil {
		return
	}
	for len(sn.todo) > 0 && n != 0 {
		c := sn.todo[len(sn.todo)-1]
		sn.todo[len(sn.todo)-1] = nil
		sn.todo = sn.todo[:len(sn.todo)-1]
		if !c.gone {
			s.saveSnap(c)
		}
		n--
	}
	if len(sn.todo) == 0 {
		s.snap = nil
		s.lastSnap = len(sn.buf)
		sn.job.parts[s.id] = sn.buf
		sn.job.arrive()
	}
}

// fingerprint lists the configuration a snapshot's state depends on.
func (cfg *Config) fingerprint() []int64 {
	return []int64{
		cfg.Size, cfg.Slide, cfg.Gap, cfg.ToleratedDelay, cfg.RestoreTTL,
		int64(math.Float64bits(cfg.Filter.MinMoveM)), int64(math.Float64bits(cfg.Filter.MaxSpeedKmh)),
		cfg.AllowedLateness,
	}
}

// fingerprintNames are the configuration keys of fingerprint's values.
var fingerprintNames = []string{"windows.size", "windows.slide", "windows.gap", "windows.tolerated_delay", "windows.restore_ttl",
	"distance.min_move_m", "distance.max_speed_kmh", "windows.allowed_lateness"}

func (e *Engine) appendHeader(b []byte, tag uint64) []byte {
	b = append(b, snapshotMagic...)
	b = wire.AppendUint(b, SnapshotVersion)
	b = wire.AppendString(b, e.cfg.Market)
	for _, v := range e.cfg.fingerprint() {
		b = wire.AppendInt(b, v)
	}
	b = wire.AppendUint(b, tag)
	b = wire.AppendInt(b, e.items)
	w := e.wm.State()
	for _, v := range []int64{w.WM, w.MaxTS, w.Clock, w.MaxArrival, w.Last} {
		b = wire.AppendInt(b, v)
	}
	for _, v := range []bool{w.HasClock, w.HasMaxArrival, w.HasLast} {
		b = wire.AppendBool(b, v)
	}
	return b
}

// appendCourierDelta appends one courier as a section of an incremental
// snapshot: its distance state as a delta on the last checkpoint's, the
// rest whole.
func (s *shard) appendCourierDelta(b []byte, c *courier) []byte {
	b = wire.AppendUint(b, deltaCourier)
	b = wire.AppendString(b, c.name)
	b = wire.AppendInt(b, c.latest)
	b = c.dist.AppendDelta(s.p.spec, b)
	b = c.sess.AppendState(b)
	return appendPresence(b, c.area)
}

// appendCourier appends one courier as a section of its own: a count of 1,
// then its state. A shard's part is any number of sections.
func (s *shard) appendCourier(b []byte, c *courier) []byte {
	return appendCourierState(wire.AppendUint(b, 1), c)
}

// appendCourierState appends one courier's whole state, as a section of a
// whole snapshot holds it after its count.
func appendCourierState(b []byte, c *courier) []byte {
	b = wire.AppendString(b, c.name)
	b = wire.AppendInt(b, c.latest)
	b = c.dist.AppendState(b)
	b = c.sess.AppendState(b)
	return appendPresence(b, c.area)
}

// appendPresence appends a courier's side of the service area; nil (no
// area) as a courier that has seen none.
func appendPresence(b []byte, p *geo.Presence) []byte {
	if p == nil {
		p = &geo.Presence{}
	}
	b = wire.AppendInt(b, p.Last)
	b = wire.AppendUint(b, uint64(p.Side))
	b = wire.AppendUint(b, uint64(p.Pending))
	if p.Pending > 0 {
		b = wire.AppendInt(b, p.At.TS)
		b = wire.AppendFloat(b, p.At.Lat)
		b = wire.AppendFloat(b, p.At.Lon)
	}
	return b
}

// readPresence reads what appendPresence wrote into *pp, left nil for a
// courier that has seen no side.
func readPresence(r *wire.Reader, pp **geo.Presence) error {
	var p geo.Presence
	defer func() {
		if p != (geo.Presence{}) {
			*pp = &p
		}
	}()
	p.Last = r.Int()
	side, pending := r.Uint(), r.Uint()
	if side > uint64(geo.Outside) || side == uint64(geo.Border) || pending >= geo.ConfirmFixes {
		return fmt.Errorf("service area side %d, %d pending", side, pending)
	}
	p.Side, p.Pending = geo.Side(side), uint8(pending)
	if pending > 0 {
		p.At = geo.Fix{TS: r.Int(), Lat: r.Float(), Lon: r.Float()}
	}
	return r.Err()
}

// Restore starts an engine from a snapshot taken by Checkpoint, under cfg
// (whose shard count may differ from the snapshot's), and returns the
// snapshot's tag.
func Restore(cfg Config, sink Sink, snapshot []byte) (*Engine, uint64, error) {
	r, version, err := openSnapshot(cfg, snapshot)
	if err != nil {
		return nil, 0, err
	}
	tag := r.Uint()
	items, w := readCounters(r)
	if err := r.Err(); err != nil {
		return nil, 0, fmt.Errorf("%w: header: %v", ErrSnapshotCorrupt, err)
	}
	if items < 0 {
		return nil, 0, fmt.Errorf("%w: negative input count", ErrSnapshotCorrupt)
	}

	e := New(cfg, sink)
	e.items = items
	e.wm.Restore(w)
	// The shard goroutines touch their state only once a chunk arrives:
	// filling it here, before the first dispatch, is ordered by the channel.
	for _, s := range e.shards {
		s.wm = w.WM
		s.stats.watermark.Store(w.WM)
	}
	if version >= 4 {
		if err := e.zones.readState(r); err != nil {
			e.Stop()
			return nil, 0, fmt.Errorf("%w: dead zones: %v", ErrSnapshotCorrupt, err)
		}
	}
	for r.Len() > 0 && r.Err() == nil {
		n := r.Count(4)
		for i := 0; i < n && r.Err() == nil; i++ {
			c := &courier{}
			if err := readCourier(e.params.spec, r, c, version); err != nil {
				e.Stop()
				return nil, 0, err
			}
			if e.track.byName[c.name] != nil || r.Err() != nil {
				e.Stop()
				return nil, 0, fmt.Errorf("%w: courier %q twice", ErrSnapshotCorrupt, c.name)
			}
			sh := shardOf(c.name, len(e.shards))
			t := e.track.add(c.name, c.latest, sh)
			t.ahead = c.dist.After(w.MaxTS, nil)
			s := e.shards[sh]
			s.put(t.slot, c)
			s.schedule(c)
		}
	}
	if err := r.Err(); err != nil {
		e.Stop()
		return nil, 0, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	for _, s := range e.shards {
		s.stats.couriers.Store(int64(s.count))
		if len(s.timers) > 0 {
			s.next.Store(s.timers[0].at)
		}
	}
	return e, tag, nil
}

// CheckSnapshot reads a whole snapshot's header only, and returns the
// error Restore would return under cfg for its format version
// (ErrSnapshotVersion) or its market and settings (ErrSnapshotConfig), or
// for a header that does not decode (ErrSnapshotCorrupt); nil when
// Restore would get past the header. It starts nothing and reads no
// courier: check-config uses it on a state directory's newest checkpoint.
func CheckSnapshot(cfg Config, snapshot []byte) error {
	r, _, err := openSnapshot(cfg, snapshot)
	if err != nil {
		return err
	}
	r.Uint() // the tag
	readCounters(r)
	if err := r.Err(); err != nil {
		return fmt.Errorf("%w: header: %v", ErrSnapshotCorrupt, err)
	}
	return nil
}

// openSnapshot checks a whole snapshot's magic, format version, market
// and fingerprint, and returns the reader after them, at the tag.
func openSnapshot(cfg Config, snapshot []byte) (*wire.Reader, uint64, error) {
	if len(snapshot) < len(snapshotMagic) || string(snapshot[:len(snapshotMagic)]) != string(snapshotMagic) {
		return nil, 0, fmt.Errorf("%w: not an edgeproc snapshot", ErrSnapshotCorrupt)
	}
	r := wire.NewReader(snapshot[len(snapshotMagic):])
	version := r.Uint()
	if r.Err() == nil && version != SnapshotVersion && version != snapshotV3 && version != snapshotV2 {
		return nil, 0, fmt.Errorf("%w: version %d, this edgeproc reads versions %d to %d", ErrSnapshotVersion, version, snapshotV2, SnapshotVersion)
	}
	if err := checkConfig(cfg, r, version); err != nil {
		return nil, 0, err
	}
	return r, version, nil
}

// checkConfig reads a snapshot header's market and fingerprint and
// requires them to be cfg's.
func checkConfig(cfg Config, r *wire.Reader, version uint64) error {
	if m := r.String(); r.Err() == nil && m != cfg.Market {
		return fmt.Errorf("%w: market %q, configured %q", ErrSnapshotConfig, m, cfg.Market)
	}
	for i, want := range cfg.fingerprint() {
		got := int64(0) // version 2 was written without allowed lateness
		if version != snapshotV2 || i < len(fingerprintNames)-1 {
			got = r.Int()
		}
		if r.Err() == nil && got != want {
			return fmt.Errorf("%w: %s differs (snapshot %d, configured %d)", ErrSnapshotConfig, fingerprintNames[i], got, want)
		}
	}
	return nil
}

// readCounters reads what a header holds after the tag.
func readCounters(r *wire.Reader) (items int64, w watermark.State) {
	items = r.Int()
	w.WM, w.MaxTS, w.Clock, w.MaxArrival, w.Last = r.Int(), r.Int(), r.Int(), r.Int(), r.Int()
	w.HasClock, w.HasMaxArrival, w.HasLast = r.Bool(), r.Bool(), r.Bool()
	return items, w
}

// readCourier reads one courier's section (after its count) as a
// snapshot of version wrote it.
func readCourier(spec window.Spec, r *wire.Reader, c *courier, version uint64) error {
	c.name, c.latest = r.String(), r.Int()
	if err := c.dist.ReadState(spec, r, version != snapshotV2); err != nil {
		return fmt.Errorf("%w: courier %q: %v", ErrSnapshotCorrupt, c.name, err)
	}
	if err := c.sess.ReadState(r); err != nil {
		return fmt.Errorf("%w: courier %q: %v", ErrSnapshotCorrupt, c.name, err)
	}
	if version >= 4 {
		if err := readPresence(r, &c.area); err != nil {
			return fmt.Errorf("%w: courier %q: %v", ErrSnapshotCorrupt, c.name, err)
		}
	}
	// Event times beyond the contract's range would leave int64 at a
	// window end: such state was not written by an engine.
	if c.latest <= 0 || c.latest > position.MaxTimestamp || c.dist.After(c.latest, nil) != nil {
		return fmt.Errorf("%w: courier %q: timestamps out of range", ErrSnapshotCorrupt, c.name)
	}
	return nil
}

// Refused reports whether err is a snapshot Restore refuses as it is
// (another configuration, format or a corrupt one): trying again under
// the same configuration fails alike.
func Refused(err error) bool {
	return errors.Is(err, ErrSnapshotConfig) || errors.Is(err, ErrSnapshotVersion) || errors.Is(err, ErrSnapshotCorrupt)
}
