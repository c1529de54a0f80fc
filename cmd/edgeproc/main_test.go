package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the command line and returns its exit code and outputs.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRun_ExitCodes(t *testing.T) {
	cases := []struct {
		args   []string
		code   int
		stdout string // in stdout ("" = stdout must be empty)
		stderr string // in stderr ("" = stderr must be empty)
	}{
		{nil, 2, "", "usage: edgeproc COMMAND"},
		{[]string{"nope"}, 2, "", `unknown command "nope"`},
		{[]string{"version"}, 0, "edgeproc " + binaryVersion() + "\n", ""},
		{[]string{"--version"}, 0, "edgeproc " + binaryVersion() + "\n", ""},
		{[]string{"--help"}, 0, "usage: edgeproc COMMAND", ""},
		{[]string{"-h"}, 0, "tail ", ""},
		{[]string{"help"}, 0, "check-config", ""},
		{[]string{"help", "nope"}, 2, "", `unknown command "nope"`},
		{[]string{"replay"}, 2, "", "edgeproc replay: replay takes --config FILE\nusage: edgeproc replay --config FILE"},
		{[]string{"run", "--nope"}, 2, "", "edgeproc run: flag provided but not defined: -nope\nusage: edgeproc run"},
		{[]string{"check-config", "../../examples/girona.yaml"}, 0, "ok (market girona)", ""},
		{[]string{"check-config", "../../examples/girona.yaml", "../../examples/valencia.yaml"}, 0, "ok (market valencia)", ""},
		{[]string{"check-config", "../../examples/owntracks.yaml"}, 0, "ok (market girona)", ""},
		{[]string{"check-config", "../../testdata/worked.jsonl"}, 1, "", "edgeproc check-config: ../../testdata/worked.jsonl:1: "},
		{[]string{"check-config", "missing.yaml"}, 1, "", "edgeproc check-config: config missing.yaml: no such file or directory\n"},
		{[]string{"replay", "--config", "../../testdata/worked.yaml", "--in", "../../testdata/worked.jsonl"}, 0, `"end_of_input":true`, "positions"},
		{[]string{"tail", "--market", "girona", "--type", "nope"}, 2, "", `--type "nope": must be among`},
		{[]string{"tail"}, 2, "", "tail takes --market M... or --config FILE..."},
		{[]string{"health", "http://127.0.0.1:1/healthz", "--timeout", "1s"}, 2, "", "health takes at most one URL"},
		{[]string{"health", "--timeout", "2s", "http://127.0.0.1:1/healthz"}, 1, "", "edgeproc health: Get "},
		{[]string{"sim", "--market", "girona", "--mqtt", "mqtt://127.0.0.1:1", "--duration", "300ms"}, 1, "", "edgeproc sim: connect to mqtt://127.0.0.1:1 within 300ms"},
		{[]string{"run", "--config", "../../examples/girona.yaml", "--log-level", "loud"}, 2, "", `log level "loud"`},
		// Three instances of one market: three processes, so one file each.
		{[]string{"check-config", "../../examples/scale-out/girona-a.yaml"}, 0, "ok (market girona)", ""},
		{[]string{"check-config", "../../examples/scale-out/girona-b.yaml"}, 0, "ok (market girona)", ""},
		{[]string{"check-config", "../../examples/scale-out/girona-c.yaml"}, 0, "ok (market girona)", ""},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stdout: %s\nstderr: %s", code, c.code, out, errs)
			}
			for _, o := range []struct{ name, got, want string }{{"stdout", out, c.stdout}, {"stderr", errs, c.stderr}} {
				if o.want == "" && o.got != "" && o.name == "stdout" {
					t.Errorf("%s: got %q, want nothing", o.name, o.got)
				}
				if !strings.Contains(o.got, o.want) {
					t.Errorf("%s lacks %q:\n%s", o.name, o.want, o.got)
				}
			}
		})
	}
}

// Every command has help on stdout, exit 0, three ways, with a description
// and an example.
func TestHelp_EveryCommand(t *testing.T) {
	for _, c := range commands {
		for _, args := range [][]string{{"help", c.name}, {c.name, "--help"}, {c.name, "-h"}} {
			code, out, errs := runCLI(t, args...)
			if code != 0 || errs != "" {
				t.Errorf("%v: exit %d, stderr %q; want 0 and nothing", args, code, errs)
			}
			if !strings.HasPrefix(out, "usage: edgeproc "+c.name) || !strings.Contains(out, "\nexample:\n  edgeproc ") || len(c.help) < 40 {
				t.Errorf("%v: help lacks usage, description or example:\n%s", args, out)
			}
		}
	}
}

// No message repeats its prefix ("open config X: open X", "sim: sim:").
func TestErrors_NoDoubledPrefix(t *testing.T) {
	for _, args := range [][]string{
		{"check-config", "missing.yaml"},
		{"replay", "--config", "missing.yaml"},
		{"run", "--config", "missing.yaml"},
		{"sim", "--market", "girona", "--mqtt", "mqtt://127.0.0.1:1", "--duration", "200ms"},
	} {
		_, _, errs := runCLI(t, args...)
		for _, line := range strings.Split(strings.TrimSpace(errs), "\n") {
			words := strings.Fields(line)
			for i := 1; i < len(words); i++ {
				if strings.HasSuffix(words[i], ":") && words[i] == words[i-1] {
					t.Errorf("%v: doubled %q in %q", args, words[i], line)
				}
			}
			if strings.Count(line, "missing.yaml") > 1 {
				t.Errorf("%v: path named twice in %q", args, line)
			}
		}
	}
}

// check-config finds what run would refuse: two files clashing, every
// problem of every file, YAML syntax errors with their line.
func TestCheckConfig_AsRunSees(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "market: girona\n")
	b := write("b.yaml", "market: valencia\nmqtt:\n  client_id: edgeproc-girona\n")
	bad := write("bad.yaml", "market: girona\nwindows:\n  sizee: 5m\n  gap: 0s\n")
	syntax := write("syntax.yaml", "market: girona\nwindows:\n  size: 5m\n gap: 1m\n")
	other := write("other.yaml", "market: girona\nmqtt:\n  topic: km0/valencia/positions/+\n")

	code, _, errs := runCLI(t, "check-config", a, b)
	if code != 1 || !strings.Contains(errs, "configurations clash: markets girona and valencia have the same mqtt client_id") {
		t.Errorf("clash: exit %d, stderr %q", code, errs)
	}
	code, _, errs = runCLI(t, "run", "--config", a, "--config", b)
	if code != 1 || !strings.Contains(errs, "same mqtt client_id") {
		t.Errorf("run on the clash: exit %d, stderr %q", code, errs)
	}
	code, _, errs = runCLI(t, "check-config", bad, syntax)
	want := []string{
		"edgeproc check-config: " + bad + ":3: windows.sizee: unknown key",
		"edgeproc check-config: " + bad + `:4: windows.gap = "0s": must be positive`,
		"edgeproc check-config: " + syntax + ":3: invalid YAML: did not find expected key",
	}
	if code != 1 || strings.Count(errs, "\n") != len(want) {
		t.Errorf("all problems: exit %d, stderr %q, want %d lines", code, errs, len(want))
	}
	for _, w := range want {
		if !strings.Contains(errs, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errs)
		}
	}
	code, out, errs := runCLI(t, "check-config", other)
	if code != 0 || !strings.Contains(out, "ok (market girona)") || !strings.Contains(errs, "warning: market girona: mqtt.topic \"km0/valencia/positions/+\" names market valencia") {
		t.Errorf("topic of another market: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// The demo's banner names edgeproc as it was started, and go run's
// temporary binary as the go run command that builds it again.
func TestSelfCommand(t *testing.T) {
	for _, tt := range []struct{ arg0, want string }{
		{"/tmp/go-build2718281828/b001/exe/edgeproc", "go run ./cmd/edgeproc"},
		{"./edgeproc", "./edgeproc"},
		{"edgeproc", "edgeproc"},
		{"/usr/local/bin/edgeproc", "/usr/local/bin/edgeproc"},
		{"", "edgeproc"},
	} {
		if got := selfCommand(tt.arg0); got != tt.want {
			t.Errorf("selfCommand(%q) = %q, want %q", tt.arg0, got, tt.want)
		}
	}
}
