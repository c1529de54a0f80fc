package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"strings"
	"testing"

	"github.com/km0/edgeproc/entry"
)

func TestFrame_RoundTrip(t *testing.T) {
	tests := []struct {
		name string
		e    entry.Entry
	}{
		{"typical", entry.Entry{Arrival: 1726308298123, Topic: "couriers/bcn/van-3/pos", Payload: []byte(`{"courier":"van-3","lat":41.9,"lon":2.8}`)}},
		{"empty", entry.Entry{}},
		{"empty topic", entry.Entry{Arrival: 1, Payload: []byte("x")}},
		{"empty payload", entry.Entry{Arrival: 2, Topic: "t"}},
		{"negative arrival", entry.Entry{Arrival: -5, Topic: "t", Payload: []byte{0}}},
		{"extreme arrivals", entry.Entry{Arrival: math.MinInt64, Topic: strings.Repeat("t", 300), Payload: bytes.Repeat([]byte{0xff}, 4096)}},
		{"max arrival", entry.Entry{Arrival: math.MaxInt64}},
		{"tick", entry.Entry{Kind: entry.Tick, Arrival: 1726308298123}},
		{"tick with topic", entry.Entry{Kind: entry.Tick, Arrival: 3, Topic: "t", Payload: []byte("p")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := appendFrame([]byte("prefix"), tt.e)
			if got := string(frame[:6]); got != "prefix" {
				t.Fatalf("appendFrame overwrote dst: got %q", got)
			}
			got, err := decodeFrame(9, frame[6:])
			if err != nil {
				t.Fatalf("decodeFrame: %v", err)
			}
			assertEntry(t, 9, got, tt.e)
		})
	}
}

func TestFrame_DecodeRejects(t *testing.T) {
	good := appendFrame(nil, entry.Entry{Arrival: 7, Topic: "a/b", Payload: []byte("hello")})
	mutate := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	tests := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"nil", nil, ErrMalformed},
		{"short header", good[:4], ErrMalformed},
		{"version", mutate(func(b []byte) []byte { b[0] = 3; return b }), ErrVersion},
		{"unknown kind", withCRC(mutate(func(b []byte) []byte { b[headerSize] = entry.Kinds; return b })), ErrMalformed},
		{"no kind byte", withCRC([]byte{frameVersion, 0, 0, 0, 0}), ErrMalformed},
		{"v1 missing topic length", withCRC([]byte{frameVersionV1, 0, 0, 0, 0, 2}), ErrMalformed},
		{"zero version (zeroed tail)", make([]byte, 16), ErrVersion},
		{"crc byte", mutate(func(b []byte) []byte { b[2] ^= 1; return b }), ErrChecksum},
		{"payload byte", mutate(func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }), ErrChecksum},
		{"truncated", good[:len(good)-1], ErrChecksum},
		{"extra byte", mutate(func(b []byte) []byte { return append(b, 'x') }), ErrChecksum},
		{"topic length past end", withCRC([]byte{frameVersion, 0, 0, 0, 0, 0, 2, 9, 'a'}), ErrMalformed},
		{"non-canonical varint", withCRC([]byte{frameVersion, 0, 0, 0, 0, 0, 0x80, 0x00, 0}), ErrMalformed},
		{"missing topic length", withCRC([]byte{frameVersion, 0, 0, 0, 0, 0, 2}), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeFrame(42, tt.frame)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got error %v, want %v", err, tt.want)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("got %v, want it to match ErrCorrupt", err)
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Index != 42 {
				t.Errorf("got %#v, want a *CorruptError with index 42", err)
			}
			if !strings.Contains(err.Error(), "index 42") {
				t.Errorf("got message %q, want it to name index 42", err)
			}
		})
	}
}

// appendFrameV1 writes a version-1 frame, as binaries before entry kinds
// did: no kind byte (a tick was an empty topic and payload).
func appendFrameV1(dst []byte, e entry.Entry) []byte {
	start := len(dst)
	dst = append(dst, frameVersionV1, 0, 0, 0, 0)
	dst = binary.AppendVarint(dst, e.Arrival)
	dst = binary.AppendUvarint(dst, uint64(len(e.Topic)))
	dst = append(dst, e.Topic...)
	dst = append(dst, e.Payload...)
	return withCRC(dst[start:])
}

func TestFrame_ReadsVersion1(t *testing.T) {
	tests := []struct {
		name string
		in   entry.Entry
		want entry.Kind
	}{
		{"position", entry.Entry{Arrival: 1726308298123, Topic: "couriers/bcn/van-3/pos", Payload: []byte(`{"lat":41.9}`)}, entry.Position},
		{"empty payload is a position", entry.Entry{Arrival: 5, Topic: "t"}, entry.Position},
		{"empty topic is a position", entry.Entry{Arrival: 5, Payload: []byte("x")}, entry.Position},
		{"empty topic and payload is a tick", entry.Entry{Arrival: 1726308298123}, entry.Tick},
		{"tick at zero", entry.Entry{}, entry.Tick},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeFrame(4, appendFrameV1(nil, tt.in))
			if err != nil {
				t.Fatalf("decodeFrame: %v", err)
			}
			want := tt.in
			want.Kind = tt.want
			assertEntry(t, 4, got, want)
		})
	}
}

// withCRC fills in the CRC of a hand-made frame, to reach the checks behind it.
func withCRC(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[1:], crc32.Checksum(b[headerSize:], castagnoli))
	return b
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(appendFrame(nil, entry.Entry{Arrival: 1726308298123, Topic: "couriers/bcn/van-3/pos", Payload: []byte(`{"lat":41.9}`)}))
	f.Add(appendFrame(nil, entry.Entry{}))
	f.Add(appendFrame(nil, entry.Entry{Kind: entry.Tick, Arrival: 1726308298123}))
	f.Add(appendFrameV1(nil, entry.Entry{Arrival: 1726308298123, Topic: "t", Payload: []byte("p")}))
	f.Add(appendFrameV1(nil, entry.Entry{Arrival: 1726308298123}))
	f.Add([]byte{})
	f.Add(make([]byte, 12))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := decodeFrame(7, data)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Index != 7 {
				t.Fatalf("got error %#v, want a *CorruptError with index 7", err)
			}
			return
		}
		// Only canonical frames decode, so re-encoding in the input's
		// version gives the input back.
		enc := appendFrame
		if data[0] == frameVersionV1 {
			enc = appendFrameV1
			if wantTick := e.Topic == "" && len(e.Payload) == 0; (e.Kind == entry.Tick) != wantTick {
				t.Fatalf("v1 frame decoded as %v, topic %q, %d payload bytes", e.Kind, e.Topic, len(e.Payload))
			}
		}
		if got := enc(nil, e); !bytes.Equal(got, data) {
			t.Fatalf("re-encoded %x, want the input %x", got, data)
		}
	})
}

func FuzzFrameRoundTrip(f *testing.F) {
	f.Add(uint8(0), int64(1726308298123), "couriers/bcn/van-3/pos", []byte(`{"lat":41.9}`))
	f.Add(uint8(1), int64(-1), "", []byte{})
	f.Add(uint8(0), int64(math.MinInt64), "\x00", []byte{0xff})
	f.Fuzz(func(t *testing.T, kind uint8, arrival int64, topic string, payload []byte) {
		in := entry.Entry{Kind: entry.Kind(kind % entry.Kinds), Arrival: arrival, Topic: topic, Payload: payload}
		frame := appendFrame(nil, in)
		got, err := decodeFrame(3, frame)
		if err != nil {
			t.Fatalf("decodeFrame(appendFrame(e)): %v", err)
		}
		assertEntry(t, 3, got, in)
		// CRC-32C catches every burst of up to 32 bits, so any one damaged
		// byte must be refused, never misread.
		step := 1 + len(frame)/64
		for i := 0; i < len(frame); i += step {
			bad := append([]byte(nil), frame...)
			bad[i] ^= 0x5a
			if _, err := decodeFrame(3, bad); err == nil {
				t.Fatalf("byte %d of %d flipped: decoded without error", i, len(frame))
			}
		}
	})
}

func assertEntry(tb testing.TB, index uint64, got, want entry.Entry) {
	tb.Helper()
	if got.Kind != want.Kind || got.Arrival != want.Arrival || got.Topic != want.Topic || !bytes.Equal(got.Payload, want.Payload) {
		tb.Fatalf("index %d: got {%v %d %q %d bytes}, want {%v %d %q %d bytes}", index,
			got.Kind, got.Arrival, got.Topic, len(got.Payload), want.Kind, want.Arrival, want.Topic, len(want.Payload))
	}
}
