package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRun_ExitCodes(t *testing.T) {
	cases := []struct {
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{nil, 2, "usage: edgeproc"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"version"}, 0, "edgeproc dev"},
		{[]string{"replay"}, 2, "replay takes --config"},
		{[]string{"check-config", "../../examples/girona.yaml"}, 0, "ok (market girona)"},
		{[]string{"check-config", "../../testdata/worked.jsonl"}, 1, "worked.jsonl"},
		{[]string{"check-config", "../../examples/scale-out/girona-a.yaml", "../../examples/scale-out/girona-b.yaml", "../../examples/scale-out/girona-c.yaml"}, 0, "ok (market girona)"},
		{[]string{"run", "--config", "../../examples/scale-out/girona-a.yaml", "--config", "../../examples/valencia.yaml"}, 2, "runs alone in its process"},
		{[]string{"replay", "--config", "../../testdata/worked.yaml", "--in", "../../testdata/worked.jsonl"}, 0, `"end_of_input":true`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), c.args, &out, &errb)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, c.code, errb.String())
			}
			if !strings.Contains(out.String()+errb.String(), c.out) {
				t.Fatalf("output lacks %q:\nstdout: %s\nstderr: %s", c.out, out.String(), errb.String())
			}
		})
	}
}
