package service

import (
	"github.com/km0/edgeproc/config"
)

// Embedded is the URL value (mqtt.url, nats.url) meaning that the caller
// provides the server: see Deps.MQTTURL and Deps.NATS.
const Embedded = "embedded"

// ErrClash is wrapped by the error Run returns when two configurations of
// one process would share what must be a market's own (config.CheckClashes).
var ErrClash = config.ErrClash
