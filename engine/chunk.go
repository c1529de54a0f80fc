package engine

import (
	"sort"

	"github.com/km0/edgeproc/result"
)

// event is a valid position on its way to its shard, or the sequencer's
// decision to forget a courier.
type event struct {
	seq           int64 // 2*input index + 1 (2*input index for an idle step)
	line          int64 // the input's Line
	ts            int64
	lat, lon, acc float64
	rawAcc        float64 // accuracy_m as decoded, -1: none
	wm            int64   // the watermark before this position (forget: at the decision)
	clock         int64   // processing clock at its arrival
	off           uint32
	n             uint8 // courier id: chunk.names[off:off+n]
	forget        bool  // drop the courier: it is no longer tracked
	slot          int32 // the courier's index in its shard's table (the tracker's)
}

// step is one advance of the watermark: to wm, at input seq (2i+1 for the
// i-th input, 2i for an idle advance before it), at processing time clock.
type step struct {
	seq, wm, clock int64
}

// chunk is a batch of inputs handed from the sequencer to every shard and
// then to the merger. Shards only read it, except out[shard], which only
// that shard writes; channels order those accesses.
type chunk struct {
	inputs     int
	events     [][]event // by shard
	names      []byte
	steps      []step // strictly increasing wm
	wm         int64  // watermark after the chunk
	endOfInput bool
	recs       []result.Record   // the sequencer's own (rejected inputs)
	out        [][]result.Record // by shard
	rows       [][]Row           // by shard, with Config.OnRows

	ckpt *snapshotJob // a checkpoint barrier follows this chunk's inputs
}

func newChunk(shards int) *chunk {
	return &chunk{events: make([][]event, shards), out: make([][]result.Record, shards), rows: make([][]Row, shards)}
}

func (c *chunk) reset() {
	c.inputs = 0
	for i := range c.events {
		c.events[i] = c.events[i][:0]
		clear(c.out[i]) // drop references to courier names and raw payloads
		c.out[i] = trim(c.out[i])
		c.rows[i] = c.rows[i][:0]
	}
	c.names = c.names[:0]
	c.steps = c.steps[:0]
	clear(c.recs)
	c.recs = trim(c.recs)
	c.endOfInput = false
	c.ckpt = nil
}

// stepAt returns the step at which the watermark first reached t.
func (c *chunk) stepAt(t int64) step {
	i := sort.Search(len(c.steps), func(i int) bool { return c.steps[i].wm >= t })
	if i == len(c.steps) { // unreachable: a shard fires only what the chunk's steps reached
		if i == 0 {
			return step{wm: c.wm}
		}
		i--
	}
	return c.steps[i]
}

func sortRecords(rs []result.Record) { sort.Sort(byOrder(rs)) }

// byOrder sorts records in place by result.Less without copying them.
type byOrder []result.Record

func (s byOrder) Len() int           { return len(s) }
func (s byOrder) Less(i, j int) bool { return result.Less(&s[i], &s[j]) }
func (s byOrder) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }

// keepRecords is the capacity of a record buffer kept between chunks. The
// firings at a window end can fill one far beyond the usual; such a buffer
// is let go rather than kept for the next minute's burst.
const keepRecords = 4096

func trim(rs []result.Record) []result.Record {
	if cap(rs) > keepRecords {
		return nil
	}
	return rs[:0]
}
