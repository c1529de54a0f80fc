package mqtt

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/km0/edgeproc/internal/testenv"
)

// fakeBroker is a scripted MQTT v5 server on loopback for the protocol
// edges the real broker does not produce on demand: it accepts each
// connection, answers CONNECT and SUBSCRIBE, and hands the connection to
// the test's script.
type fakeBroker struct {
	ln    net.Listener
	conns chan *fakeSession
}

// fakeSession is one accepted connection, after CONNACK and SUBACK.
type fakeSession struct {
	c       net.Conn
	r       *bufio.Reader
	connect *packets.Connect
}

func startFakeBroker(t *testing.T) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBroker{ln: ln, conns: make(chan *fakeSession, 16)}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
			go fb.handshake(c)
		}
	}()
	return fb
}

func (fb *fakeBroker) url() string { return "mqtt://" + fb.ln.Addr().String() }

// handshake answers CONNECT (session present) and the first SUBSCRIBE
// (QoS 1 granted), then queues the session for the test.
func (fb *fakeBroker) handshake(c net.Conn) {
	fs := &fakeSession{c: c, r: bufio.NewReader(c)}
	cp, err := packets.ReadPacket(fs.r)
	if err != nil || cp.Type != packets.CONNECT {
		return
	}
	fs.connect = cp.Content.(*packets.Connect)
	ack := packets.NewControlPacket(packets.CONNACK)
	ack.Content.(*packets.Connack).SessionPresent = true
	if _, err := ack.WriteTo(c); err != nil {
		return
	}
	sp, err := fs.next(packets.SUBSCRIBE)
	if err != nil {
		return
	}
	sa := packets.NewControlPacket(packets.SUBACK)
	sa.Content.(*packets.Suback).PacketID = sp.Content.(*packets.Subscribe).PacketID
	sa.Content.(*packets.Suback).Reasons = []byte{1}
	if _, err := sa.WriteTo(c); err != nil {
		return
	}
	fb.conns <- fs
}

// next reads packets until one of type typ, skipping PINGREQs unanswered
// and PUBACKs.
func (fs *fakeSession) next(typ byte) (*packets.ControlPacket, error) {
	for {
		cp, err := packets.ReadPacket(fs.r)
		if err != nil {
			return nil, err
		}
		if cp.Type == typ {
			return cp, nil
		}
	}
}

func (fb *fakeBroker) accept(t *testing.T, within time.Duration) *fakeSession {
	t.Helper()
	select {
	case fs := <-fb.conns:
		return fs
	case <-time.After(within):
		t.Fatalf("no connection within %s", within)
		return nil
	}
}

func TestClient_ConnectAnnouncesTheSession(t *testing.T) {
	fb := startFakeBroker(t)
	cfg := testConfig(fb.url(), "edgeproc-connect")
	cfg.Username, cfg.Password = "edge", "secret"
	cfg.ReceiveMaximum, cfg.MaxPayload = 64, 4096
	mustStart(t, cfg, func(*Message) {})
	cp := fb.accept(t, 5*time.Second).connect
	p := cp.Properties
	switch {
	case cp.ClientID != "edgeproc-connect", cp.CleanStart, cp.ProtocolVersion != 5:
		t.Errorf("CONNECT client %q clean start %t version %d: want our id, a kept session, v5", cp.ClientID, cp.CleanStart, cp.ProtocolVersion)
	case !cp.UsernameFlag || cp.Username != "edge" || !cp.PasswordFlag || string(cp.Password) != "secret":
		t.Errorf("CONNECT credentials %q/%q", cp.Username, cp.Password)
	case p.SessionExpiryInterval == nil || *p.SessionExpiryInterval != 3600:
		t.Errorf("CONNECT session expiry %v, want 3600 s", p.SessionExpiryInterval)
	case p.ReceiveMaximum == nil || *p.ReceiveMaximum != 64:
		t.Errorf("CONNECT receive maximum %v, want 64", p.ReceiveMaximum)
	case p.MaximumPacketSize == nil || *p.MaximumPacketSize != 4096+PacketOverhead:
		t.Errorf("CONNECT maximum packet size %v, want %d", p.MaximumPacketSize, 4096+PacketOverhead)
	}
}

// TestClient_UnansweredPingDropsTheConnection: a broker that stops
// answering without closing the socket (a dead path) is noticed by the
// keep-alive, and the Source reconnects.
func TestClient_UnansweredPingDropsTheConnection(t *testing.T) {
	fb := startFakeBroker(t)
	cfg := testConfig(fb.url(), "edgeproc-ping")
	cfg.KeepAlive = time.Second
	s := mustStart(t, cfg, func(*Message) {})
	first := fb.accept(t, 5*time.Second)
	if _, err := first.next(packets.PINGREQ); err != nil {
		t.Fatalf("no PINGREQ within the keep-alive: %v", err)
	}
	// Never answered: the next tick finds the ping unanswered.
	fb.accept(t, 10*time.Second)
	testenv.WaitFor(t, 5*time.Second, "second connection counted", func() bool { return s.Stats().Reconnects == 1 })
}

// TestClient_BrokerDisconnectAndMalformedPublish: a DISCONNECT from the
// broker, and a PUBLISH that breaks the encoding, each end the connection
// (nothing of the bad packet reaches the handler) and the Source comes
// back; a good PUBLISH on the new connection is delivered and its PUBACK
// comes back with its packet identifier.
func TestClient_BrokerDisconnectAndMalformedPublish(t *testing.T) {
	fb := startFakeBroker(t)
	rec := newRecorder()
	s := mustStart(t, testConfig(fb.url(), "edgeproc-edges"), func(m *Message) { rec.handle(m); m.Ack() })

	fs := fb.accept(t, 5*time.Second)
	d := packets.NewControlPacket(packets.DISCONNECT)
	d.Content.(*packets.Disconnect).ReasonCode = packets.DisconnectServerShuttingDown
	if _, err := d.WriteTo(fs.c); err != nil {
		t.Fatal(err)
	}

	fs = fb.accept(t, 5*time.Second)
	// QoS 1, topic length 9 running past the packet's 3 bytes of body.
	if _, err := fs.c.Write([]byte{0x32, 3, 0, 9, 'k'}); err != nil {
		t.Fatal(err)
	}

	fs = fb.accept(t, 5*time.Second)
	good := packets.NewControlPacket(packets.PUBLISH)
	pub := good.Content.(*packets.Publish)
	pub.Topic, pub.QoS, pub.PacketID, pub.Payload = testTopic("c-1"), 1, 77, []byte(`{"ok":1}`)
	if _, err := good.WriteTo(fs.c); err != nil {
		t.Fatal(err)
	}
	ack, err := fs.next(packets.PUBACK)
	if err != nil {
		t.Fatalf("no PUBACK: %v", err)
	}
	if id := ack.Content.(*packets.Puback).PacketID; id != 77 {
		t.Errorf("PUBACK for packet %d, want 77", id)
	}
	got := rec.snapshot()
	if len(got) != 1 || got[0].Topic != testTopic("c-1") || !bytes.Equal(got[0].Payload, []byte(`{"ok":1}`)) {
		t.Fatalf("handler got %d messages (%v), want only the good one", len(got), got)
	}
	if st := s.Stats(); st.Reconnects != 2 || st.Acked != 1 {
		t.Errorf("got %d reconnects and %d acks, want 2 and 1", st.Reconnects, st.Acked)
	}
}

// TestClient_ShortConnectionsBackOff: a broker that disconnects every
// connection at once (a refused session, a client-id fight) gets backed-off
// attempts, not a reconnect loop as fast as the machine goes.
func TestClient_ShortConnectionsBackOff(t *testing.T) {
	fb := startFakeBroker(t)
	cfg := testConfig(fb.url(), "edgeproc-kicked") // backoff 50 ms doubling to 500 ms
	mustStart(t, cfg, func(*Message) {})
	d := packets.NewControlPacket(packets.DISCONNECT)
	d.Content.(*packets.Disconnect).ReasonCode = packets.DisconnectSessionTakenOver
	end := time.After(1500 * time.Millisecond)
	conns := 0
	for {
		select {
		case fs := <-fb.conns:
			conns++
			if _, err := d.WriteTo(fs.c); err != nil {
				t.Fatal(err)
			}
			_ = fs.c.Close() // as a broker does after its DISCONNECT
		case <-end:
			// 50+100+200+400+500 ms of backoff (±20 %) fit about six
			// attempts in 1.5 s; an upper bound, which a slow machine
			// only lowers.
			if conns > 10 {
				t.Errorf("%d connections in 1.5 s of immediate disconnects, want backed-off attempts (≤ 10)", conns)
			}
			if conns < 2 {
				t.Errorf("%d connections in 1.5 s, want reconnection to go on", conns)
			}
			return
		}
	}
}
