package mqtt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/packets"
)

// client is one MQTT v5 connection to the broker, from CONNECT to its end:
// the Source makes a new one for every connection. Its reader (serve) is the
// only goroutine that reads the socket; PUBLISHes go to the handler from
// there, one at a time, so a handler that blocks stops the reading (the
// backpressure path). Writes — PUBACKs from any goroutine's Ack, the
// SUBSCRIBE, pings, the DISCONNECT — go through the bufConn, which
// coalesces them.
//
// The rare packets (CONNECT, CONNACK, SUBSCRIBE, SUBACK, a broker's
// DISCONNECT) are encoded and decoded with paho's packets package; the hot
// ones (PUBLISH in, PUBACK out) by this package, without an allocation
// beyond the message itself: paho's reader allocated about ten times per
// PUBLISH, ~70 % of edgeproc's allocations under load.
type client struct {
	s   *Source
	bc  *bufConn
	in  *inflight
	max int // the largest packet accepted: what CONNECT announced

	sessionPresent bool
	keepAlive      time.Duration // as agreed in CONNACK

	// suback takes the reason codes of the SUBACK for subID, the packet
	// identifier of the last SUBSCRIBE.
	suback chan []byte
	subID  atomic.Uint32
	// pinged is set when a PINGREQ is out and its PINGRESP has not come.
	pinged atomic.Bool
	done   chan struct{} // closed when serve returns
}

// dial connects to the broker and does the CONNECT/CONNACK handshake within
// cfg.ConnectTimeout.
func (s *Source) dial(ctx context.Context) (*client, error) {
	cfg := s.cfg
	bc, err := s.dialer(ctx, s.url)
	if err != nil {
		return nil, err
	}
	c := &client{
		s:         s,
		bc:        bc,
		max:       cfg.MaxPayload + PacketOverhead,
		keepAlive: time.Duration(keepAliveSeconds(cfg.KeepAlive)) * time.Second,
		suback:    make(chan []byte, 1),
		done:      make(chan struct{}),
	}
	c.in = newInflight(cfg.ReceiveMaximum, c.writePubacks)
	// Close ends a handshake in progress rather than wait for its timeout.
	stop := context.AfterFunc(ctx, func() { _ = bc.Conn.Close() })
	defer stop()
	if err := c.handshake(); err != nil {
		_ = bc.Close()
		return nil, err
	}
	return c, nil
}

// handshake sends CONNECT and reads CONNACK. Clean Start is never set: the
// session (subscription and queued messages) outlives the connection for
// SessionExpiry.
func (c *client) handshake() error {
	cfg := c.s.cfg
	expiry, rm, mps := expirySeconds(cfg.SessionExpiry), cfg.ReceiveMaximum, uint32(c.max)
	cp := &packets.Connect{
		ProtocolName:    "MQTT",
		ProtocolVersion: 5,
		ClientID:        cfg.ClientID,
		KeepAlive:       keepAliveSeconds(cfg.KeepAlive),
		Properties: &packets.Properties{
			SessionExpiryInterval: &expiry,
			ReceiveMaximum:        &rm,
			MaximumPacketSize:     &mps,
		},
	}
	if cfg.Username != "" {
		cp.UsernameFlag, cp.Username = true, cfg.Username
	}
	if cfg.Password != "" {
		cp.PasswordFlag, cp.Password = true, []byte(cfg.Password)
	}
	if err := c.send(cp); err != nil {
		return fmt.Errorf("send CONNECT: %w", err)
	}
	_ = c.bc.SetReadDeadline(time.Now().Add(cfg.ConnectTimeout))
	typ, _, body, err := c.read()
	if err != nil {
		return fmt.Errorf("read CONNACK: %w", err)
	}
	_ = c.bc.SetReadDeadline(time.Time{})
	if typ != typeConnack {
		return fmt.Errorf("read CONNACK: got packet type %d", typ)
	}
	ca := packets.Connack{Properties: &packets.Properties{}}
	if err := ca.Unpack(bytes.NewBuffer(body)); err != nil {
		return fmt.Errorf("read CONNACK: %w", err)
	}
	if ca.ReasonCode >= 0x80 {
		return fmt.Errorf("broker refused the connection: %s", reason(ca.Reason(), ca.ReasonCode, ca.Properties))
	}
	if ka := ca.Properties.ServerKeepAlive; ka != nil {
		c.keepAlive = time.Duration(*ka) * time.Second // the broker's word is final
	}
	c.sessionPresent = ca.SessionPresent
	return nil
}

// header reads a packet's fixed header, refusing a packet larger than
// CONNECT announced.
func (c *client) header() (typ, flags byte, n int, err error) {
	typ, flags, n, err = c.bc.readHeader()
	if err == nil && n > c.max {
		err = fmt.Errorf("%w: packet of %d bytes, above the %d announced", errMalformed, n, c.max)
	}
	return typ, flags, n, err
}

// read reads one whole packet other than a PUBLISH; its body is a copy.
func (c *client) read() (typ, flags byte, body []byte, err error) {
	typ, flags, n, err := c.header()
	if err == nil {
		body, err = c.body(n)
	}
	return typ, flags, body, err
}

// body reads the n bytes of a packet's body into a buffer of its own.
func (c *client) body(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(c.bc, b); err != nil {
		return nil, err
	}
	return b, nil
}

// reason words a broker's reason code, with its reason string if it sent one.
func reason(text string, code byte, props *packets.Properties) string {
	if props != nil && props.ReasonString != "" {
		text += ": " + props.ReasonString
	}
	return fmt.Sprintf("%s (reason 0x%02x)", text, code)
}

// serve reads packets until the connection fails or is closed, and returns
// why. It hands each PUBLISH to the Source.
func (c *client) serve(ctx context.Context) error {
	defer close(c.done)
	defer c.in.kill()
	// Nothing reads after this returns, so a Close must not wait to read
	// the broker's end of the connection.
	defer c.bc.failed(errConnectionDown)
	if c.keepAlive > 0 { // 0: the broker turned keep-alive off
		go c.pinger()
	}
	for {
		typ, flags, n, err := c.header()
		if err != nil {
			return err
		}
		if typ == typePublish {
			if err := c.publish(ctx, flags, n); err != nil {
				return err
			}
			continue
		}
		body, err := c.body(n)
		if err != nil {
			return err
		}
		switch typ {
		case typePingresp:
			c.pinged.Store(false)
		case typeSuback:
			sa := packets.Suback{Properties: &packets.Properties{}}
			if err := sa.Unpack(bytes.NewBuffer(body)); err != nil {
				return fmt.Errorf("SUBACK: %w", err)
			}
			if sa.PacketID == uint16(c.subID.Load()) {
				select {
				case c.suback <- sa.Reasons:
				default:
				}
			}
		case typeDisconnect:
			d := packets.Disconnect{Properties: &packets.Properties{}}
			if len(body) == 0 {
				return errors.New("the broker disconnected (normal disconnection)")
			}
			if err := d.Unpack(bytes.NewBuffer(body)); err != nil {
				return fmt.Errorf("DISCONNECT: %w", err)
			}
			return fmt.Errorf("the broker disconnected: %s", reason(d.Reason(), d.ReasonCode, d.Properties))
		default:
			// PUBREL & co. answer publishes this client never makes; QoS 2
			// was never asked for.
			return fmt.Errorf("unexpected packet type %d from the broker", typ)
		}
	}
}

// publish reads a PUBLISH body of n bytes and hands it on. A body that fits
// the read buffer is decoded in place, and only the topic and the payload
// are copied out of it.
func (c *client) publish(ctx context.Context, flags byte, n int) error {
	var (
		body []byte
		own  bool // body is a fresh buffer, not the reader's
		err  error
	)
	if n <= c.bc.r.Size() {
		body, err = c.bc.peek(n)
	} else {
		body, own = make([]byte, n), true
		_, err = io.ReadFull(c.bc, body)
	}
	if err != nil {
		return err
	}
	p, err := decodePublish(flags, body)
	if err != nil {
		return err
	}
	if p.qos == 2 {
		return fmt.Errorf("%w: QoS 2 PUBLISH on a QoS 1 subscription", errMalformed)
	}
	topic := string(p.topic)
	if !own {
		p.payload = bytes.Clone(p.payload)
		_, _ = c.bc.r.Discard(n)
	}
	return c.s.deliver(ctx, c, p, topic)
}

// send writes one of paho's packets as one Write, so that no other
// goroutine's packet lands inside it.
func (c *client) send(p io.WriterTo) error {
	var b bytes.Buffer
	if _, err := p.WriteTo(&b); err != nil {
		return err
	}
	_, err := c.bc.Write(b.Bytes())
	return err
}

// writePubacks is the inflight's writer.
func (c *client) writePubacks(b []byte) {
	_, _ = c.bc.Write(b) // an error is the connection's; its reader fails too
}

// pinger sends a PINGREQ every keep-alive until the connection ends, and
// drops the connection when the previous one had no answer: the broker or
// the path to it is gone without a word.
func (c *client) pinger() {
	t := time.NewTicker(c.keepAlive)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if c.pinged.Swap(true) {
				c.s.log.Warn("mqtt keep-alive: no answer to the last ping; dropping the connection", "keep_alive", c.keepAlive)
				_ = c.bc.Conn.Close() // the reader fails, the Source reconnects
				return
			}
			_, _ = c.bc.Write(pingreq)
		}
	}
}

// subscribe sends the SUBSCRIBE and waits for its SUBACK, within
// ConnectTimeout. Each attempt has a packet identifier of its own, so a
// late SUBACK of an earlier one is told apart.
func (c *client) subscribe(ctx context.Context) error {
	cfg := c.s.cfg
	id := uint16(c.subID.Add(1))
	if id == 0 { // wrapped: 0 is not a packet identifier
		id = uint16(c.subID.Add(1))
	}
	select {
	case <-c.suback: // an earlier attempt's, come too late
	default:
	}
	sp := &packets.Subscribe{
		PacketID:   id,
		Properties: &packets.Properties{},
		Subscriptions: []packets.SubOptions{{
			Topic: cfg.Topic,
			QoS:   1,
			// Never send retained messages: a retained position is an old
			// one, and a new session must not ingest it as if it had just
			// arrived.
			RetainHandling: packets.RetainDoNotSend,
		}},
	}
	if err := c.send(sp); err != nil {
		return fmt.Errorf("subscribe %q: %w", cfg.Topic, err)
	}
	t := time.NewTimer(cfg.ConnectTimeout)
	defer t.Stop()
	select {
	case reasons := <-c.suback:
		if len(reasons) != 1 || reasons[0] < 1 || reasons[0] >= 0x80 {
			// Reason 0 is "granted QoS 0": messages would arrive without
			// acks or redelivery, which breaks the durability contract.
			return fmt.Errorf("subscribe %q: broker granted %v, want QoS 1", cfg.Topic, reasons)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("subscribe %q: no SUBACK within %s", cfg.Topic, cfg.ConnectTimeout)
	case <-c.done:
		return errConnectionDown
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errConnectionDown: the connection ended before the SUBACK.
var errConnectionDown = errors.New("connection down")

// close ends the connection cleanly: a DISCONNECT after every PUBACK
// written so far, then bufConn's last flush and half-close.
func (c *client) close() {
	_, _ = c.bc.Write(disconnectNormal)
	_ = c.bc.Close()
}
