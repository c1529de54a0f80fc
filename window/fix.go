package window

import "github.com/km0/edgeproc/geo"

// fix is a geo.Fix as a courier keeps it: 24 bytes rather than 32, for
// the fixes are most of a courier's memory (under allowed lateness, more
// than two thirds). The timestamp takes the low 48 bits (the contract's
// last one, in year 9999, is below 2^48) and the accuracy, in the
// filter's whole centimetres (geo.AccuracyCM), the high 16.
type fix struct {
	tsAcc    uint64
	lat, lon float64
}

const tsBits = 48

func pack(x geo.Fix) fix {
	return fix{tsAcc: uint64(x.TS) | uint64(geo.AccuracyCM(x.Acc))<<tsBits, lat: x.Lat, lon: x.Lon}
}

func (f *fix) ts() int64 { return int64(f.tsAcc & (1<<tsBits - 1)) }

func (f *fix) unpack() geo.Fix {
	return geo.Fix{TS: f.ts(), Lat: f.lat, Lon: f.lon, Acc: float64(f.tsAcc>>tsBits) / 100}
}

// grow returns s with room for at least c elements, and as many more as
// the allocator's size class of c elements holds anyway: a slice grown
// by append doubles while under 256 elements, and half of a steady
// courier's slices would be room it never uses.
func grow[T any](s []T, c int) []T {
	if c <= cap(s) {
		return s
	}
	g := append([]T(nil), make([]T, c)...) // capacity rounded up to the size class
	return g[:copy(g, s)]
}
