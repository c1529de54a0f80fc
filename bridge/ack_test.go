package bridge

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestPubAckError(t *testing.T) {
	noResponders := &nats.Msg{Header: nats.Header{"Status": []string{"503"}}}
	cases := []struct {
		name    string
		msg     *nats.Msg
		wantErr bool
		noStrm  bool
	}{
		{"ack", &nats.Msg{Data: []byte(`{"stream":"KV_x","seq":7}`)}, false, false},
		{"duplicate", &nats.Msg{Data: []byte(`{"stream":"KV_x","seq":7,"duplicate":true}`)}, false, false},
		{"stream named error", &nats.Msg{Data: []byte(`{"stream":"KV_\"error\"","seq":7}`)}, false, false},
		{"server error", &nats.Msg{Data: []byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`)}, true, false},
		{"no stream", noResponders, true, true},
		{"not a PubAck", &nats.Msg{Data: []byte(`{"stream":"S"}`)}, true, false},
		{"not JSON", &nats.Msg{Data: []byte(`+OK`)}, true, false},
		{"empty, other status", &nats.Msg{Header: nats.Header{"Status": []string{"408"}}}, true, false},
	}
	for _, c := range cases {
		err := pubAckError(c.msg)
		if (err != nil) != c.wantErr {
			t.Errorf("%s: got %v, want error %v", c.name, err, c.wantErr)
		}
		if isNoStream(err) != c.noStrm {
			t.Errorf("%s: isNoStream(%v) = %v, want %v", c.name, err, isNoStream(err), c.noStrm)
		}
		if c.name == "server error" && err != nil && !strings.Contains(err.Error(), "maximum messages exceeded") {
			t.Errorf("%s: %v does not say the server's description", c.name, err)
		}
	}
}

func TestInbox_RepliesNameTheirAttempt(t *testing.T) {
	x := inbox("_INBOX.abc.")
	for _, n := range []uint64{0, 7, 1 << 40, ^uint64(0)} {
		if got, ok := x.attempt(x.reply(n)); !ok || got != n {
			t.Errorf("attempt(reply(%d)) = %d, %v", n, got, ok)
		}
	}
	for _, subj := range []string{"_INBOX.abc.", "_INBOX.abc.x1", "_INBOX.abc.-1"} {
		if n, ok := x.attempt(subj); ok {
			t.Errorf("attempt(%q) = %d, want none", subj, n)
		}
	}
	if x.filter() != "_INBOX.abc.*" {
		t.Errorf("filter %q", x.filter())
	}
}
