package wire

import (
	"errors"
	"math"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var b []byte
	b = AppendInt(b, math.MinInt64)
	b = AppendUint(b, math.MaxUint64)
	b = AppendFloat(b, -0.5)
	b = AppendBool(b, true)
	b = AppendString(b, "van-3")
	r := NewReader(b)
	if v := r.Int(); v != math.MinInt64 {
		t.Errorf("Int: got %d", v)
	}
	if v := r.Uint(); v != math.MaxUint64 {
		t.Errorf("Uint: got %d", v)
	}
	if v := r.Float(); v != -0.5 {
		t.Errorf("Float: got %v", v)
	}
	if v := r.Bool(); !v {
		t.Errorf("Bool: got false")
	}
	if v := r.String(); v != "van-3" {
		t.Errorf("String: got %q", v)
	}
	if r.Err() != nil || r.Len() != 0 {
		t.Fatalf("got err %v, %d bytes left", r.Err(), r.Len())
	}
}

func TestReader_TruncatedIsAnError(t *testing.T) {
	b := AppendString(AppendFloat(nil, 1), "courier")
	for n := 0; n < len(b); n++ {
		r := NewReader(b[:n])
		r.Float()
		_ = r.String()
		if !errors.Is(r.Err(), ErrCorrupt) {
			t.Fatalf("cut at %d: got %v, want ErrCorrupt", n, r.Err())
		}
	}
}

func TestReader_CountBoundedByInput(t *testing.T) {
	r := NewReader(AppendUint(nil, 1<<40))
	if n := r.Count(1); n != 0 || !errors.Is(r.Err(), ErrCorrupt) {
		t.Fatalf("got %d, %v: a count larger than the input must be refused", n, r.Err())
	}
}
