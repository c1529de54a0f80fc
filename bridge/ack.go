package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// The courier writes are published with core NATS and a reply subject of
// the bridge's own instead of nats.go's JetStream async publisher, which
// arms a timer, allocates a future with two channels and decodes the
// PubAck with encoding/json for every message: BenchmarkKVCityFleet 7.3 →
// 4.2 CPU-µs a position (server included, a courier write every third
// position). They get one channel the writer reads itself and one timer a
// chunk (kvput.go). A reply is read here without decoding it, unless it is
// not plainly a PubAck. Results still go through nats.go's publisher: the
// same scheme for them (31 allocations an acked result instead of 44) was
// taken back while a partition failover test that lost results twice with
// it is not understood.

// errAckTimeout is an attempt whose ack did not come within
// Config.AckTimeout.
var errAckTimeout = errors.New("no ack within the ack timeout")

// inbox numbers a publisher's attempts: attempt n is published with the
// reply subject inbox+n, and a reply's subject says which attempt it
// answers.
type inbox string

func newInbox(nc *nats.Conn) inbox { return inbox(nc.NewInbox() + ".") }

// filter is the subscription subject that receives every reply.
func (x inbox) filter() string { return string(x) + "*" }

// reply is attempt n's reply subject (one allocation).
func (x inbox) reply(n uint64) string {
	var b [96]byte
	return string(strconv.AppendUint(append(b[:0], x...), n, 10))
}

// attempt returns the attempt a reply answers.
func (x inbox) attempt(subject string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(subject, string(x)), 10, 64)
	return n, err == nil
}

// pubAckError says what a JetStream reply to a publish reports: nil for a
// PubAck, an error wrapping nats.ErrNoResponders when no stream captured
// the subject (isNoStream), the server's error, or an error for a reply
// that is not a PubAck at all (the attempt is sent again: only a PubAck
// says the stream holds the message).
func pubAckError(m *nats.Msg) error {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return nats.ErrNoResponders
		}
		return fmt.Errorf("empty reply (status %q)", m.Header.Get("Status"))
	}
	if bytes.Contains(m.Data, []byte(`"seq"`)) && !bytes.Contains(m.Data, []byte(`"error"`)) {
		return nil // plainly a PubAck
	}
	var r struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Seq *uint64 `json:"seq"`
	}
	switch err := json.Unmarshal(m.Data, &r); {
	case err != nil:
		return fmt.Errorf("unreadable reply %.100q: %w", m.Data, err)
	case r.Error != nil:
		return fmt.Errorf("jetstream: %s (code %d, err_code %d)", r.Error.Description, r.Error.Code, r.Error.ErrCode)
	case r.Seq == nil:
		return fmt.Errorf("reply %.100q is not a PubAck", m.Data)
	}
	return nil // a PubAck whose stream name holds "error"
}
