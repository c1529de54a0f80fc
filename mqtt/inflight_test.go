package mqtt

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"
)

// pubacks is what an inflight wrote, as the packet identifiers of its
// PUBACKs in order.
type pubacks struct{ ids []uint16 }

func (p *pubacks) write(b []byte) {
	for len(b) >= 4 {
		if b[0] != typePuback<<4 || b[1] != 2 {
			panic("not a four-byte PUBACK")
		}
		p.ids = append(p.ids, uint16(b[2])<<8|uint16(b[3]))
		b = b[4:]
	}
	if len(b) != 0 {
		panic("trailing bytes")
	}
}

func TestInflight_ReleasesInReceiveOrder(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		ack  []int // indexes of the received messages, in the order acked
		want []uint16
	}{
		{"in order", []int{0, 1, 2, 3}, []uint16{10, 11, 12, 13}},
		{"reversed", []int{3, 2, 1, 0}, []uint16{10, 11, 12, 13}},
		{"gap holds the rest", []int{1, 2, 3}, nil},
		{"gap filled last", []int{1, 3, 0}, []uint16{10, 11}},
		{"interleaved", []int{2, 0, 3, 1}, []uint16{10, 11, 12, 13}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p pubacks
			f := newInflight(4, p.write)
			var seqs []uint64
			for i := range 4 {
				seq, ok := f.add(ctx, uint16(10+i))
				if !ok {
					t.Fatalf("add %d refused", i)
				}
				seqs = append(seqs, seq)
			}
			for _, i := range tt.ack {
				if !f.ack(seqs[i]) {
					t.Fatalf("ack of message %d: stale, want live", i)
				}
			}
			if !slices.Equal(p.ids, tt.want) {
				t.Errorf("PUBACKs %v, want %v", p.ids, tt.want)
			}
			if got, want := f.count(), 4-len(tt.want); got != want {
				t.Errorf("count %d, want %d (acked behind a gap still hold their slot)", got, want)
			}
		})
	}
}

func TestInflight_WrapsAround(t *testing.T) {
	var p pubacks
	f := newInflight(3, p.write)
	var want []uint16
	for i := range 100 { // many times round the ring, two held at a time
		seq, ok := f.add(context.Background(), uint16(i+1))
		if !ok {
			t.Fatal("add refused")
		}
		if i%2 == 1 {
			f.ack(seq)
			f.ack(seq - 1)
			want = append(want, uint16(i), uint16(i+1))
		}
	}
	if !slices.Equal(p.ids, want) {
		t.Errorf("PUBACKs %v, want %v", p.ids, want)
	}
}

func TestInflight_FullWaitsForARelease(t *testing.T) {
	var p pubacks
	f := newInflight(2, p.write)
	ctx := context.Background()
	a, _ := f.add(ctx, 1)
	b, _ := f.add(ctx, 2)
	got := make(chan bool)
	go func() { _, ok := f.add(ctx, 3); got <- ok }()
	select {
	case <-got:
		t.Fatal("third add returned with 2 of 2 held, want it to wait")
	case <-time.After(50 * time.Millisecond):
	}
	f.ack(b) // acked, but behind a: frees nothing
	select {
	case <-got:
		t.Fatal("an ack behind a gap freed a slot: the broker has had no PUBACK for it")
	case <-time.After(50 * time.Millisecond):
	}
	f.ack(a)
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("add after the release: refused")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("add still waiting after the release")
	}
}

func TestInflight_DeadConnection(t *testing.T) {
	var p pubacks
	f := newInflight(1, p.write)
	ctx := context.Background()
	a, _ := f.add(ctx, 7)
	got := make(chan bool)
	go func() { _, ok := f.add(ctx, 8); got <- ok }()
	f.kill()
	select {
	case ok := <-got:
		if ok {
			t.Error("add on a dead connection: accepted")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("add still waiting after the connection died")
	}
	if f.ack(a) {
		t.Error("ack on a dead connection: live, want stale")
	}
	if len(p.ids) != 0 {
		t.Errorf("PUBACKs %v written for a dead connection", p.ids)
	}

	ctx2, cancel := context.WithCancel(context.Background())
	g := newInflight(1, p.write)
	g.add(ctx2, 1)
	go func() { _, ok := g.add(ctx2, 2); got <- ok }()
	cancel()
	if ok := <-got; ok {
		t.Error("add after its context ended: accepted")
	}
}

func TestAppendPuback(t *testing.T) {
	got := appendPuback(appendPuback(nil, 1), 0xABCD)
	if want := []byte{0x40, 2, 0, 1, 0x40, 2, 0xAB, 0xCD}; !bytes.Equal(got, want) {
		t.Errorf("got % x, want % x", got, want)
	}
}
