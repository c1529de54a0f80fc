package service

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
)

// TestWatchWebConfig_SaysWhenTheFileStopsLoading: a web config that no
// longer loads fails every handshake closed; the watcher says so at
// ERROR with the cause, and once more when it loads again.
func TestWatchWebConfig_SaysWhenTheFileStopsLoading(t *testing.T) {
	path := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(path, []byte("basic_auth_users: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testenv.LogBuffer
	stop := watchWebConfig(path, 20*time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil)))
	defer stop()
	if err := os.WriteFile(path, []byte("tls_server_config:\n  cert_file: /nonexistent/cert.pem\n  key_file: /nonexistent/key.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "an ERROR naming the file and the cause", func() bool {
		l := logs.String()
		return strings.Contains(l, "level=ERROR") && strings.Contains(l, "no longer loads") && strings.Contains(l, path) && strings.Contains(l, "nonexistent")
	})
	if err := os.WriteFile(path, []byte("basic_auth_users: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the line that it loads again", func() bool { return strings.Contains(logs.String(), "loads again") })
	if n := strings.Count(logs.String(), "no longer loads"); n != 1 {
		t.Errorf("%d ERROR lines for one breakage, want 1:\n%s", n, logs.String())
	}
}

// TestWarnOpenWebConfig: a web config off loopback without users, or
// without TLS, is warned about; one with both is not.
func TestWarnOpenWebConfig(t *testing.T) {
	for _, c := range []struct {
		name, file string
		want       []string
	}{
		{"users and TLS", "tls_server_config: {cert_file: c.pem, key_file: k.pem}\nbasic_auth_users: {ops: $2y$10$x}\n", nil},
		{"TLS only", "tls_server_config: {cert_file: c.pem, key_file: k.pem}\n", []string{"no basic_auth_users"}},
		{"users only", "basic_auth_users: {ops: $2y$10$x}\n", []string{"no tls_server_config"}},
		{"empty", "{}\n", []string{"no basic_auth_users", "no tls_server_config"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "web.yml")
			if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs testenv.LogBuffer
			warnOpenWebConfig(path, "0.0.0.0:9464", slog.New(slog.NewTextHandler(&logs, nil)))
			if got := strings.Count(logs.String(), "level=WARN"); got != len(c.want) {
				t.Errorf("%d warnings, want %d:\n%s", got, len(c.want), logs.String())
			}
			for _, w := range c.want {
				if !strings.Contains(logs.String(), w) {
					t.Errorf("no warning saying %q:\n%s", w, logs.String())
				}
			}
		})
	}
}
