// Package wire is the little binary encoding of checkpoints: varints,
// float64 bits and length-prefixed strings, appended to a byte slice and
// read back by a Reader that remembers its first error, so decoders stay
// linear and a truncated or corrupt input is an error, never a panic.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrCorrupt is returned for input that ends early or holds impossible values.
var ErrCorrupt = errors.New("corrupt encoding")

func AppendInt(b []byte, v int64) []byte   { return binary.AppendVarint(b, v) }
func AppendUint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
func AppendFloat(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Reader decodes what the Append functions wrote.
type Reader struct {
	b   []byte
	off int
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err returns the first error met, with the offset where it happened.
func (r *Reader) Err() error { return r.err }

// Len returns how many bytes are left.
func (r *Reader) Len() int { return len(r.b) - r.off }

func (r *Reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s at offset %d", ErrCorrupt, what, r.off)
	}
}

func (r *Reader) Int() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.off += n
	return v
}

func (r *Reader) Uint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("uvarint")
		return 0
	}
	r.off += n
	return v
}

// Count reads a length that must fit in what is left, at least min bytes an item.
func (r *Reader) Count(minItem int) int {
	n := r.Uint()
	if r.err == nil && n > uint64(r.Len()/max(1, minItem)) {
		r.fail("count")
		return 0
	}
	return int(n)
}

func (r *Reader) Float() float64 {
	if r.err != nil {
		return 0
	}
	if r.Len() < 8 {
		r.fail("float")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.off:]))
	r.off += 8
	return v
}

func (r *Reader) Bool() bool {
	if r.err != nil {
		return false
	}
	if r.Len() < 1 || r.b[r.off] > 1 {
		r.fail("bool")
		return false
	}
	r.off++
	return r.b[r.off-1] == 1
}

func (r *Reader) String() string {
	n := r.Count(1)
	if r.err != nil {
		return ""
	}
	s := string(r.b[r.off : r.off+n])
	r.off += n
	return s
}
