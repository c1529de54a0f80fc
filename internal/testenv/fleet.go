package testenv

import (
	"time"

	"github.com/km0/edgeproc/fleet"
)

// Message is one MQTT message to publish.
type Message struct {
	Topic   string
	Payload []byte
}

// FleetMessages returns a market's simulated fleet in arrival (publish)
// order, on topics km0/MARKET/positions/COURIER, with event time ending at
// end, and a few duplicates (QoS 1 redelivery) and bad payloads mixed in.
func FleetMessages(market string, couriers int, span time.Duration, seed int64, end time.Time) []Message {
	f := fleet.New(fleet.Config{
		Market: market, Couriers: couriers, Seed: seed, Duration: span,
		Start:         end.Add(-span).UnixMilli(),
		DuplicateRate: 0.02, BadRate: 0.01,
	})
	var out []Message
	for e, ok := f.Next(); ok; e, ok = f.Next() {
		out = append(out, Message{Topic: "km0/" + market + "/positions/" + e.Courier, Payload: fleet.AppendJSON(nil, e, false)})
	}
	return out
}
