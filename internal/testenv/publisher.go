package testenv

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// Publisher is a plain MQTT client (no autopaho, no session) that publishes
// QoS 1 messages to a test broker: Publish returns once the broker has
// acknowledged the message, so it is in the subscribers' session queues.
type Publisher struct {
	c *paho.Client
}

// Publisher connects a publisher to m with clientID ("" for a unique one).
// It fails the test on error: call it from the test's goroutine. The
// connection is closed at cleanup.
func (m *Mosquitto) Publisher(tb testing.TB, clientID string) *Publisher {
	tb.Helper()
	p, err := DialPublisher(m.Addr(), clientID)
	if err != nil {
		tb.Fatalf("publisher: %v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

// DialPublisher connects a publisher to the broker at addr with clientID
// ("" for a unique one); the caller closes it. Unlike Publisher it may be
// called from any goroutine, e.g. to reconnect as a phone would after the
// broker restarted.
func DialPublisher(addr, clientID string) (*Publisher, error) {
	if clientID == "" {
		clientID = fmt.Sprintf("pub-%d", time.Now().UnixNano())
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30})
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	if ca.ReasonCode != 0 {
		_ = conn.Close()
		return nil, fmt.Errorf("connect: reason %d", ca.ReasonCode)
	}
	return &Publisher{c: c}, nil
}

// Publish sends one QoS 1 message and waits for the broker's ack. It is
// safe to call from any goroutine.
func (p *Publisher) Publish(ctx context.Context, topic string, payload []byte) error {
	return p.publish(ctx, topic, payload, false)
}

// PublishRetained is Publish with the retain flag: the broker keeps the
// message and offers it to later subscribers of topic.
func (p *Publisher) PublishRetained(ctx context.Context, topic string, payload []byte) error {
	return p.publish(ctx, topic, payload, true)
}

func (p *Publisher) publish(ctx context.Context, topic string, payload []byte, retain bool) error {
	if _, err := p.c.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: payload, Retain: retain}); err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	return nil
}

// MustPublish is Publish with a 10 s bound that fails the test on error;
// call it from the test's goroutine.
func (p *Publisher) MustPublish(tb testing.TB, topic string, payload []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, topic, payload); err != nil {
		tb.Fatal(err)
	}
}

// Close disconnects; closing twice is harmless.
func (p *Publisher) Close() { _ = p.c.Disconnect(&paho.Disconnect{}) }
