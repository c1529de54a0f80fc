package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A batch is one message of a partition's stream carrying many positions,
// in the order the relay received them: one store, one ack and one
// delivery for up to batchMax positions, where a message a position cost
// the server most of its CPU. Its subject is the partition's with the
// last token BatchToken; its body is batchVersion, then per position the
// subject token the gateway would have given it (its courier level) and
// its payload, each a uvarint length and the bytes. Every position of a
// batch arrives at the batch's stream timestamp, and position i of the
// batch stored at sequence seq is line seq<<lineBits | i of the
// partition's log (lineOf): ordered, and the same in every replay.
const (
	// BatchToken is the last subject token of a batch. Like TickToken it
	// cannot be a courier's.
	BatchToken   = "_batch"
	batchVersion = 1
	// lineBits leaves room for batchMax positions in a sequence.
	lineBits = 10
)

// Bounds of a batch: it is published at batchMax positions or
// batchMaxBytes, or batchLinger after its first position, whichever
// comes first.
const (
	batchMax      = 1 << lineBits
	batchMaxBytes = 256 << 10
)

// errBatch is a batch body that does not decode.
var errBatch = errors.New("partition: malformed batch")

// lineOf is position i's line in the partition's log: its place for the
// engine (a rejected record's key) and the lake's row index.
func lineOf(seq uint64, i int) uint64 { return seq<<lineBits | uint64(i) }

// lastLineOf is the last line sequence seq may hold: the lake's index of
// a checkpoint at seq.
func lastLineOf(seq uint64) uint64 { return lineOf(seq, batchMax-1) }

// appendBatchEntry adds a position to a batch body (started with
// batchVersion).
func appendBatchEntry(b []byte, token string, payload []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(token)))
	b = append(b, token...)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

// eachBatchEntry calls fn with each position of a batch body, in order;
// token and payload alias body. A body that does not decode stops it with
// an error wrapping errBatch, after the positions before the damage.
func eachBatchEntry(body []byte, fn func(i int, token, payload []byte)) error {
	if len(body) == 0 || body[0] != batchVersion {
		return fmt.Errorf("%w: version %v", errBatch, body[:min(len(body), 1)])
	}
	b := body[1:]
	for i := 0; len(b) > 0; i++ {
		if i >= batchMax {
			return fmt.Errorf("%w: more than %d positions", errBatch, batchMax)
		}
		tok, rest, ok := cutUvarintBytes(b)
		if !ok {
			return fmt.Errorf("%w: position %d: bad token", errBatch, i)
		}
		pl, rest, ok := cutUvarintBytes(rest)
		if !ok {
			return fmt.Errorf("%w: position %d: bad payload", errBatch, i)
		}
		fn(i, tok, pl)
		b = rest
	}
	return nil
}

// cutUvarintBytes splits a length-prefixed byte string off b.
func cutUvarintBytes(b []byte) (v, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}
