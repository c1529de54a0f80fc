package engine

// Row is one accepted position as the engine judged it: valid, not
// refused, not an exact duplicate (late ones included), with the
// operators it was late for — what the lake keeps of every position
// (contract §7). Config.OnRows receives them.
type Row struct {
	// Line is the input's Line: its place in the market's log.
	Line int64
	// Courier is the courier's id; it stays valid after the call.
	Courier string
	// TS is timestamp_ms, Arrival the processing time it arrived at (the
	// clock of a replay line without arrival_ms).
	TS, Arrival int64
	Lat, Lon    float64
	// Accuracy is accuracy_m, -1 when the input had none usable.
	Accuracy float64
	// LateDistance and LateSession say which operators it was late for
	// (contract §3, Lateness).
	LateDistance, LateSession bool

	seq int64 // the input's place in the engine's order (event.seq)
}

// mergeRows appends the rows of every shard's slice, each in input
// order, to dst in input order: the log's.
func mergeRows(dst []Row, byShard [][]Row) []Row {
	idx := make([]int, len(byShard))
	for {
		best := -1
		for s, rs := range byShard {
			if idx[s] < len(rs) && (best < 0 || rs[idx[s]].seq < byShard[best][idx[best]].seq) {
				best = s
			}
		}
		if best < 0 {
			return dst
		}
		dst = append(dst, byShard[best][idx[best]])
		idx[best]++
	}
}
