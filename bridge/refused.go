package bridge

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// refusedCodes are the JetStream API errors by which a server refuses a
// stream's or a bucket's configuration itself: asked again, it refuses
// again until an operator changes the configuration or the stream.
// Errors a server gives while it cannot decide (no leader, no quorum, not
// enough peers for the replicas while a node is down) are not among them.
var refusedCodes = map[jetstream.ErrorCode]bool{
	10052: true, // invalid configuration, such as an update that changes the storage type
	10055: true, // a mirror's configuration cannot be updated
	10058: true, // the name is in use with another configuration
	10065: true, // its subjects overlap another stream's
	10074: true, // replicas > 1 on a server that is not clustered
}

// Refused reports whether err is a server refusing a stream or bucket
// configuration, which no retry fixes: the market cannot run until the
// configuration or the stream changes.
func Refused(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && refusedCodes[api.ErrorCode]
}
