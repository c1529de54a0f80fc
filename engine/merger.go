package engine

import (
	"container/heap"

	"github.com/km0/edgeproc/result"
)

// runMerger hands each chunk's results to the sink in output order: the
// sequencer's records and every shard's, each sorted by its own goroutine,
// merged into pieces of at most keepRecords. The firings at a window end
// (one distance result per courier of a whole market, 264 bytes each)
// then exist once, in their shards' buffers, rather than once more in a
// merged copy as large, and the sink sees them a piece at a time.
func (e *Engine) runMerger(sink Sink) {
	piece := mergePiece
	var (
		srcs sources
		out  []result.Record
		rows []Row
	)
	for c := range e.merge {
		for _, s := range e.shards {
			<-s.done // shards finish chunks in order
		}
		if e.cfg.OnRows != nil {
			if rows = mergeRows(rows[:0], c.rows); len(rows) > 0 {
				e.cfg.OnRows(rows)
			}
			clear(rows) // drop the courier names
		}
		sortRecords(c.recs) // in input order already: a linear check
		srcs.reset(c)
		for step, last := 0, false; !last; {
			out = srcs.fill(out, piece)
			last = srcs.Len() == 0
			if e.zones != nil {
				out, step = e.zones.apply(out, c.steps, step, last)
			}
			if len(out) > 0 {
				sink(out)
			}
			clear(out)
			out = trim(out)
		}
		if c.ckpt != nil {
			c.ckpt.zones = e.zones.appendState(nil)
			c.ckpt.arrive() // every result of the inputs before the barrier is out
		}
		c.reset()
		e.free <- c
	}
}

// mergePiece is how many records the merger hands the sink at most at a
// time (more when dead zones fire in a piece). Tests make it small.
var mergePiece = keepRecords

// sources is a k-way merge of sorted record slices: a min-heap of those
// with records left, by their first record. Advancing reslices the heap's
// copy of each slice header; the chunk's own are untouched.
type sources [][]result.Record

func (h sources) Len() int           { return len(h) }
func (h sources) Less(i, j int) bool { return result.Less(&h[i][0], &h[j][0]) }
func (h sources) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }

// Push and Pop satisfy heap.Interface; reset and fill never call them.
func (h *sources) Push(x any) { *h = append(*h, x.([]result.Record)) }
func (h *sources) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (h *sources) reset(c *chunk) {
	*h = (*h)[:0]
	if len(c.recs) > 0 {
		*h = append(*h, c.recs)
	}
	for _, o := range c.out {
		if len(o) > 0 {
			*h = append(*h, o)
		}
	}
	heap.Init(h)
}

// fill appends the next records in output order to out until it holds n
// or every source is drained.
func (h *sources) fill(out []result.Record, n int) []result.Record {
	for len(*h) > 0 && len(out) < n {
		s := *h
		if len(s) == 1 { // the rest of one source: no more comparisons
			k := min(len(s[0]), n-len(out))
			out = append(out, s[0][:k]...)
			if s[0] = s[0][k:]; len(s[0]) == 0 {
				*h = s[:0]
			}
			continue
		}
		top := s[0]
		out = append(out, top[0])
		if len(top) == 1 {
			s[0] = s[len(s)-1]
			s[len(s)-1] = nil
			*h = s[:len(s)-1]
		} else {
			s[0] = top[1:]
		}
		heap.Fix(h, 0)
	}
	return out
}
