package main

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/km0/edgeproc/sim"
)

// baselineTopic keeps the baseline's messages away from edgeproc's
// subscription (km0/bench/positions/+), whatever runs when.
const baselineTopic = "km0/loadbench-baseline/positions/"

// unlimitedRate makes sim.Run send back to back: every message is already
// due, so only the in-flight bound (PUBACKs) paces it.
const unlimitedRate = 1e9

// baselineResult is the broker's own QoS 1 pub→sub rate.
type baselineResult struct {
	Sent, Acked, Received uint64
	PubRate               float64 // messages acked by the broker per second
	SubRate               float64 // messages delivered to the subscriber per second
	Span                  time.Duration
}

// counter counts deliveries and remembers the first and last.
type counter struct {
	mu          sync.Mutex
	n           uint64
	first, last time.Time
}

func (c *counter) add(now time.Time) {
	c.mu.Lock()
	if c.n == 0 {
		c.first = now
	}
	c.n++
	c.last = now
	c.mu.Unlock()
}

func (c *counter) get() (n uint64, first, last time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.first, c.last
}

// runBaseline measures the broker alone: sim.Run publishes fleet payloads
// (fleet.AppendJSON, as for edgeproc) with QoS 1 as fast as its in-flight
// bound allows for d, while a plain QoS 1 subscriber with a persistent
// session and paho's automatic acks counts them. The rate is the
// subscriber's: messages received between its first and last delivery.
func runBaseline(ctx context.Context, brokerURL string, couriers int, d, drain time.Duration) (baselineResult, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return baselineResult{}, fmt.Errorf("parse broker URL %q: %w", brokerURL, err)
	}
	var cnt counter
	subCtx, cancelSub := context.WithCancel(ctx)
	defer cancelSub()
	cm, err := autopaho.NewConnection(subCtx, autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     20,
		CleanStartOnInitialConnection: false,
		// Short: the session is only needed while loadbench runs.
		SessionExpiryInterval: 30,
		ConnectTimeout:        5 * time.Second,
		// The same Receive Maximum as edgeproc's source (mqtt.DefaultReceiveMaximum),
		// so the broker's flow control is the same for both.
		ConnectPacketBuilder: func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if cp.Properties == nil {
				cp.Properties = &paho.ConnectProperties{}
			}
			rm := uint16(1024)
			cp.Properties.ReceiveMaximum = &rm
			return cp, nil
		},
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			// Errors surface as a missing count below; resubscribing on
			// every connection is what a plain subscriber does.
			sctx, cancel := context.WithTimeout(subCtx, 5*time.Second)
			defer cancel()
			_, _ = cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: baselineTopic + "+", QoS: 1}}})
		},
		ClientConfig: paho.ClientConfig{
			ClientID: "loadbench-baseline-sub",
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(paho.PublishReceived) (bool, error) {
					cnt.add(time.Now())
					return true, nil
				},
			},
		},
	})
	if err != nil {
		return baselineResult{}, fmt.Errorf("baseline subscriber: connect to %s: %w", brokerURL, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = cm.Disconnect(dctx)
	}()
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = cm.AwaitConnection(actx)
	cancel()
	if err != nil {
		return baselineResult{}, fmt.Errorf("baseline subscriber: connect to %s: %w", brokerURL, err)
	}
	// The SUBSCRIBE goes out in OnConnectionUp; give its SUBACK a moment so
	// the first messages are not published to nobody.
	time.Sleep(200 * time.Millisecond)

	st, err := sim.Run(ctx, sim.Options{
		URL:         brokerURL,
		Market:      "bench",
		TopicPrefix: baselineTopic,
		Couriers:    couriers,
		Rate:        unlimitedRate,
		Duration:    d,
		Seed:        1,
		ClientID:    "loadbench-baseline-pub",
	}, nil)
	if err != nil {
		return baselineResult{}, fmt.Errorf("baseline publisher: %w", err)
	}
	// Wait, bounded, for the subscriber to get everything the broker acked.
	deadline := time.Now().Add(drain)
	for {
		n, _, _ := cnt.get()
		if n >= st.Acked || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	n, first, last := cnt.get()
	res := baselineResult{Sent: st.Sent, Acked: st.Acked, Received: n, PubRate: st.Rate(), Span: last.Sub(first)}
	if n < 2 || res.Span <= 0 {
		return res, fmt.Errorf("baseline: subscriber received %d of %d messages", n, st.Acked)
	}
	res.SubRate = float64(n-1) / res.Span.Seconds()
	if n < st.Acked {
		return res, fmt.Errorf("baseline: subscriber received %d of %d acked messages within %s of the end", n, st.Acked, drain)
	}
	return res, nil
}
