package position

import (
	"encoding/json"
	"testing"
)

var benchPayloads = []struct {
	name string
	in   string
}{
	{"typical", typical},
	{"arrival_accuracy", `{"courier":"van-3","lat":41.9794,"lon":2.8214,"timestamp_ms":1726308298000,"accuracy_m":8.5,"arrival_ms":1726308298123}`},
}

func BenchmarkDecode(b *testing.B) {
	for _, bp := range benchPayloads {
		b.Run(bp.name, func(b *testing.B) {
			in := []byte(bp.in)
			var d Decoder
			var p Position
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if r := d.Decode(in, &p); r != OK {
					b.Fatalf("Decode = %v, want ok", r)
				}
			}
		})
	}
}

// BenchmarkEncodingJSON is the comparison: encoding/json into a struct,
// which could not even apply the contract's rules on literals.
func BenchmarkEncodingJSON(b *testing.B) {
	type jsonPosition struct {
		Courier   string   `json:"courier"`
		Lat       *float64 `json:"lat"`
		Lon       *float64 `json:"lon"`
		Timestamp *int64   `json:"timestamp_ms"`
		Accuracy  *float64 `json:"accuracy_m"`
		Arrival   *int64   `json:"arrival_ms"`
	}
	for _, bp := range benchPayloads {
		b.Run(bp.name, func(b *testing.B) {
			in := []byte(bp.in)
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				var p jsonPosition
				if err := json.Unmarshal(in, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeOwnTracks decodes the apps' location payloads, larger
// than the edgeproc format's (about 250 bytes, most of them ignored).
func BenchmarkDecodeOwnTracks(b *testing.B) {
	for _, bp := range []struct{ name, in, topic string }{
		{"ios", otIOS, "owntracks/van-3/iphone"},
		{"android", otAndroid, "owntracks/van-3/pixel"},
		{"replay_line", otMinimal[:len(otMinimal)-1] + `,"topic":"owntracks/van-3/nokia","arrival_ms":1706856299000}`, ""},
	} {
		b.Run(bp.name, func(b *testing.B) {
			in := []byte(bp.in)
			var d Decoder
			var p Position
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if r := d.DecodeOwnTracks(in, bp.topic, otFilter, 0, &p); r != OK {
					b.Fatalf("DecodeOwnTracks = %v, want ok", r)
				}
			}
		})
	}
}
