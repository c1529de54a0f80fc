package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
)

// The bridge publishes with core NATS and a reply subject of its own
// instead of nats.go's JetStream async publisher, which arms a timer,
// allocates a future with two channels and decodes the PubAck with
// encoding/json for every message, and hands the replies over through a
// goroutine of its own: 44 allocations an acked result instead of 31
// (BenchmarkPublish, the in-process server's included), and a third of the
// CPU of a courier write (BenchmarkKVCityFleet). Results get one reply
// subscription and one expiry loop for their ack timeouts (bridge.go), the
// courier writes one channel and one timer a chunk (kvput.go). A reply is
// read here without decoding it, unless it reports an error.

// pubAckError says what a JetStream reply to a publish reports: nil for a
// PubAck, an error wrapping nats.ErrNoResponders when no stream captured
// the subject (isNoStream), or the server's error.
func pubAckError(m *nats.Msg) error {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return nats.ErrNoResponders
		}
		return fmt.Errorf("empty reply (status %q)", m.Header.Get("Status"))
	}
	if !bytes.Contains(m.Data, []byte(`"error"`)) {
		return nil
	}
	var r struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Error == nil {
		return nil // "error" in a stream name, not an error
	}
	return fmt.Errorf("jetstream: %s (code %d, err_code %d)", r.Error.Description, r.Error.Code, r.Error.ErrCode)
}

// pubAckDuplicate reports whether a PubAck says "duplicate": true: the
// stream already held the message id. The server writes that part by hand,
// with a space after the colon, so it is matched loosely.
func pubAckDuplicate(data []byte) bool {
	const key = `"duplicate"`
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(data[i+len(key):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(rest[1:], " \t\r\n"), []byte("true"))
}
