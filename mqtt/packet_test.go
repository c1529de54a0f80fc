package mqtt

import (
	"bufio"
	"bytes"
	"errors"
	"testing"

	"github.com/eclipse/paho.golang/packets"
)

// encodePublish encodes p with paho's packets package and returns the
// fixed header's flags and the body.
func encodePublish(t testing.TB, p *packets.Publish) (byte, []byte) {
	var b bytes.Buffer
	if _, err := p.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReaderSize(&b, b.Len()) // all of it buffered, however long
	typ, flags, n, err := readHeader(r)
	if err != nil || typ != typePublish || n != r.Buffered() {
		t.Fatalf("header: type %d, length %d of %d buffered, err %v", typ, n, r.Buffered(), err)
	}
	body, _ := r.Peek(n)
	return flags, body
}

func TestDecodePublish(t *testing.T) {
	expiry := uint32(60)
	tests := []struct {
		name string
		p    packets.Publish
	}{
		{"QoS 1 with properties", packets.Publish{
			Topic: "km0/madrid/positions/c-1", QoS: 1, PacketID: 513, Payload: []byte(`{"lat":40.4}`),
			Properties: &packets.Properties{MessageExpiry: &expiry, ContentType: "application/json",
				User: []packets.User{{Key: "k", Value: "v"}}},
		}},
		{"QoS 0, retained, empty payload", packets.Publish{Topic: "a", Retain: true, Properties: &packets.Properties{}}},
		{"redelivery", packets.Publish{Topic: "a/b", QoS: 1, PacketID: 65535, Duplicate: true, Payload: []byte("x"), Properties: &packets.Properties{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flags, body := encodePublish(t, &tt.p)
			got, err := decodePublish(flags, body)
			if err != nil {
				t.Fatal(err)
			}
			if string(got.topic) != tt.p.Topic || !bytes.Equal(got.payload, tt.p.Payload) ||
				got.id != tt.p.PacketID || got.qos != tt.p.QoS || got.dup != tt.p.Duplicate {
				t.Errorf("got topic %q payload %q id %d qos %d dup %t, want %+v", got.topic, got.payload, got.id, got.qos, got.dup, tt.p)
			}
		})
	}

	bad := []struct {
		name  string
		flags byte
		body  []byte
	}{
		{"QoS 3", 6, []byte{0, 1, 'a', 0, 1, 0}},
		{"empty", 2, nil},
		{"topic past the end", 2, []byte{0, 9, 'a'}},
		{"no topic (an alias)", 2, []byte{0, 0, 0, 1, 3, 0x23, 0, 1}},
		{"no packet identifier", 2, []byte{0, 1, 'a', 0}},
		{"packet identifier 0", 2, []byte{0, 1, 'a', 0, 0, 0}},
		{"properties past the end", 2, []byte{0, 1, 'a', 0, 1, 5, 1}},
		{"properties length cut", 2, []byte{0, 1, 'a', 0, 1, 0x80}},
		{"properties length of five bytes", 0, []byte{0, 1, 'a', 0x80, 0x80, 0x80, 0x80, 1}},
	}
	for _, tt := range bad {
		if _, err := decodePublish(tt.flags, tt.body); !errors.Is(err, errMalformed) {
			t.Errorf("%s: got %v, want errMalformed", tt.name, err)
		}
	}
}

func TestReadHeader(t *testing.T) {
	tests := []struct {
		in      []byte
		typ, fl byte
		n       int
		bad     bool
	}{
		{in: []byte{0x32, 0}, typ: 3, fl: 2},
		{in: []byte{0x30, 0x7f}, typ: 3, n: 127},
		{in: []byte{0x90, 0x80, 0x01}, typ: 9, n: 128},
		{in: []byte{0x30, 0xff, 0xff, 0xff, 0x7f}, typ: 3, n: 268435455},
		{in: []byte{0x30, 0x80, 0x80, 0x80, 0x80, 0x01}, bad: true},
		{in: []byte{0x30, 0x80}, bad: true}, // cut short
	}
	for _, tt := range tests {
		typ, fl, n, err := readHeader(bufio.NewReader(bytes.NewReader(tt.in)))
		if (err != nil) != tt.bad || !tt.bad && (typ != tt.typ || fl != tt.fl || n != tt.n) {
			t.Errorf("% x: got type %d flags %d length %d err %v", tt.in, typ, fl, n, err)
		}
	}
}

// reencode encodes p with paho again; ok is false where paho's encoder
// panics on what its decoder accepted (a property value above the variable
// byte integer's range, say).
func reencode(t *testing.T, p *packets.Publish) (flags byte, body []byte, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	flags, body = encodePublish(t, p)
	return flags, body, true
}

// FuzzDecodePublish checks decodePublish against paho's decoder: it never
// panics; what both accept decodes to the same message; and whatever paho
// accepts, encoded again by paho (so well formed), it accepts too, unless
// for the reasons it documents (no topic, packet identifier 0). It may
// refuse bytes paho lets through (paho does not check that the properties
// fit the packet) and accept properties paho would refuse, as it skips them
// unread.
func FuzzDecodePublish(f *testing.F) {
	expiry := uint32(5)
	for _, p := range []*packets.Publish{
		{Topic: "km0/x/positions/c", QoS: 1, PacketID: 7, Payload: []byte(`{"courier_id":"c"}`), Properties: &packets.Properties{MessageExpiry: &expiry}},
		{Topic: "t", Payload: []byte("p"), Properties: &packets.Properties{User: []packets.User{{Key: "a", Value: "b"}}}},
	} {
		flags, body := encodePublish(f, p)
		f.Add(flags, body)
	}
	f.Add(byte(2), []byte{0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, flags byte, body []byte) {
		flags &= 0x0f
		got, err := decodePublish(flags, body)
		var pkt bytes.Buffer
		pkt.WriteByte(typePublish<<4 | flags)
		n := len(body)
		for {
			c := byte(n & 0x7f)
			n >>= 7
			if n > 0 {
				c |= 0x80
			}
			pkt.WriteByte(c)
			if n == 0 {
				break
			}
		}
		pkt.Write(body)
		cp, perr := packets.ReadPacket(&pkt)
		if perr == nil {
			want := cp.Content.(*packets.Publish)
			if want.Topic != "" && !(want.QoS > 0 && want.PacketID == 0) && want.QoS < 3 {
				fl, b, ok := reencode(t, want)
				if !ok {
					return // paho cannot encode what it decoded
				}
				again, err := decodePublish(fl, b)
				if err != nil {
					t.Fatalf("refused a well-formed PUBLISH (%+v): %v", want, err)
				}
				if string(again.topic) != want.Topic || !bytes.Equal(again.payload, want.Payload) || again.id != want.PacketID {
					t.Fatalf("well-formed PUBLISH %+v decoded as topic %q payload %q id %d", want, again.topic, again.payload, again.id)
				}
			}
		}
		if err != nil {
			return
		}
		if len(got.payload) > len(body) || len(got.topic) > len(body) {
			t.Fatal("slices longer than the body")
		}
		if perr != nil {
			return // properties paho refuses; skipped here
		}
		want := cp.Content.(*packets.Publish)
		if string(got.topic) != want.Topic || !bytes.Equal(got.payload, want.Payload) ||
			got.id != want.PacketID || got.qos != want.QoS || got.dup != want.Duplicate {
			t.Fatalf("got topic %q payload %q id %d qos %d dup %t; paho %+v", got.topic, got.payload, got.id, got.qos, got.dup, want)
		}
	})
}
