package testenv

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A node that cannot bind its port must say so: with NoLog the server
// otherwise only never becomes ready, which is what a CI failure showed
// ("not ready within 10s") without a cause.
func TestStartServer_SaysWhyItIsNotReady(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port,
		NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = startServer(srv, 500*time.Millisecond)
	if err == nil {
		t.Fatal("started on a port already taken")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %q does not give the cause", err)
	}
}
