package config

import (
	"strconv"
	"strings"
	"time"
)

// Ingests are the accepted values of jetstream.ingest.
var Ingests = []string{"gateway", "mqtt"}

// PartitionToken is the subject token of JetStream.Subject replaced by a
// partition's number.
const PartitionToken = "{partition}"

// MaxPartitions bounds jetstream.partitions: each partition is a consumer,
// an engine and a checkpoint.
const MaxPartitions = 1024

// JetStream is the partitioned stream source (yaml key jetstream), used
// when Source is "jetstream". Positions are read from the stream by one
// durable pull consumer per partition with the pinned_client priority
// policy, so that one running instance owns each partition; the stream is
// the log and checkpoints are kept in JetStream (see package partition).
// NATS.URL is the server for both the positions and the results.
type JetStream struct {
	// Stream holds the positions (yaml stream). Created with Replicas
	// replicas if missing. Default "POSITIONS_" + upper(MARKET), '-' -> '_'.
	Stream string
	// Subject is the subject pattern of one partition's positions (yaml
	// subject): dot-separated tokens, one of them exactly "{partition}"
	// (the partition number, 0 to Partitions-1) and the last one "*" (the
	// courier: the topic level that names it, the last one or with
	// mqtt.format owntracks the USER or DEVICE level). It must agree with
	// the server's subject mapping, e.g.
	// "km0.*.positions.*": "part.{{wildcard(1)}}.{{partition(4,2)}}.{{wildcard(2)}}",
	// or for OwnTracks by USER
	// "owntracks.*.*": "part.girona.{{partition(4,1)}}.{{wildcard(1)}}".
	// Default "part.MARKET.{partition}.*".
	Subject string
	// Partitions is the number of partitions, the N of the mapping's
	// partition(N, ...). Default 1; 1 to 1024. Changing it reassigns
	// couriers: start from empty checkpoints (see docs/scale-out.md).
	Partitions int
	// Consumer names the durable consumers (yaml consumer): partition n's is
	// CONSUMER-n. Default "edgeproc-MARKET".
	Consumer string
	// PinTTL is how long a partition's owner may go without asking for
	// messages before the server unpins it and another instance takes over
	// (yaml pin_ttl): the takeover delay after an owner dies. Default 10s;
	// at least 1s, whole milliseconds.
	PinTTL time.Duration
	// MaxOwned caps how many partitions this instance owns at once (yaml
	// max_owned). The instances balance by themselves (each owns about
	// partitions / instances, see package partition); the cap bounds one
	// instance's load whatever the others do. Default 0: no cap.
	MaxOwned int
	// Replicas of the positions stream (when created here), the results
	// stream and courier bucket, and the checkpoint bucket and object
	// store. Default 3; 1 to 5.
	Replicas int
	// MaxAge bounds how long the positions stream keeps a message (yaml
	// max_age; applied when edgeproc creates the stream): 0 keeps them
	// until MaxBytes, or forever. A new owner resumes from the partition's
	// last recorded checkpoint, so the stream must outlive it: at least
	// MinPositionsMaxAge and 10 × state.checkpoint_interval. Default 24h;
	// whole seconds.
	MaxAge time.Duration
	// MaxBytes bounds the positions stream's size (yaml max_bytes, like
	// nats.max_bytes; applied when edgeproc creates the stream): past it
	// the oldest positions are deleted, checkpointed or not, which a new
	// owner reports as missing. Default 0: no size bound.
	MaxBytes int64
	// Ingest is how positions reach the stream (yaml ingest): "gateway"
	// (nats-server's MQTT gateway and subject mapping store them; the
	// gateway acks a phone once its own store has a position, before the
	// positions stream does) or "mqtt" (the phones publish to the
	// market's broker, the mqtt section; the instance holding the relay
	// lease relays them into the stream, in batches, and acks each to the
	// broker only once the stream has stored it). Default "mqtt": the one
	// that acks a phone only once its position is durable in the stream
	// whatever node dies (contract §8; docs/scale-out.md).
	Ingest string
	// Instance names this process in ownership records, logs and metrics;
	// it must differ between the instances of a market. Default empty:
	// the host name and process id.
	Instance string
}

// MinPositionsMaxAge is the shortest jetstream.max_age accepted: a
// checkpoint that cannot be recorded for that long (the results stream
// without a leader) would leave a successor positions it cannot read.
const MinPositionsMaxAge = time.Hour

// PartitionSubject is the filter subject of partition n's positions:
// Subject with "{partition}" replaced by n.
func (j JetStream) PartitionSubject(n int) string {
	return strings.Replace(j.Subject, PartitionToken, strconv.Itoa(n), 1)
}
