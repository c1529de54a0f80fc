package mosquitto

import (
	"os"
	"strings"
	"testing"
)

func TestBroker_Config(t *testing.T) {
	// testenv.SkipShort's rule; testenv imports this package.
	if testing.Short() {
		t.Skip("-short: skips integration tests (this one starts a Mosquitto broker); run without -short (scripts/test.sh) for them")
	}
	m, err := Start("", t.TempDir(), 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	b, err := os.ReadFile(m.conf)
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	for _, want := range []string{
		"listener " + strings.TrimPrefix(m.Addr(), "127.0.0.1:") + " 127.0.0.1\n",
		"persistence true\n",
		"persistence_location " + m.data + "\n",
		"max_queued_messages 0\n", // the default 1000 silently drops messages
		"allow_anonymous true\n",
		"log_dest stderr\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q; got:\n%s", want, conf)
		}
	}
}
