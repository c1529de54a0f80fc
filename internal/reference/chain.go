package reference

import "sort"

// lagChain returns the courier's accepted positions of last's LAG chain up
// to last, in timestamp order: what predecessor walks, in one pass.
func lagChain(c *courierState, last *position) []*position {
	var chain []*position
	for _, q := range c.distPositions {
		if q.ts <= last.ts { // a forgotten courier starts afresh: one chain
			chain = append(chain, q)
		}
	}
	sort.Slice(chain, func(i, j int) bool { return chain[i].ts < chain[j].ts })
	return chain
}
