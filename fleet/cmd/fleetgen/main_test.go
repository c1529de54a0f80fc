package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun_WritesReplayFile(t *testing.T) {
	dir := t.TempDir()
	gen := func(name string, extra ...string) []byte {
		t.Helper()
		p := filepath.Join(dir, name)
		args := append([]string{"-couriers", "10", "-duration", "10m", "-seed", "3", "-start", "2026-03-01T08:00:00Z", "-out", p}, extra...)
		var stderr bytes.Buffer
		if err := run(args, &bytes.Buffer{}, &stderr); err != nil {
			t.Fatalf("run %v: %v (%s)", args, err, stderr.String())
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := gen("a.jsonl")
	lines := strings.Split(strings.TrimSuffix(string(a), "\n"), "\n")
	// 10 couriers × 10 min / 5 s, less what tunnels hide.
	if len(lines) < 1100 || len(lines) > 1260 {
		t.Errorf("got %d lines, want about 1200", len(lines))
	}
	var prev int64
	for i, l := range lines {
		var m struct {
			Courier   string `json:"courier"`
			TS        int64  `json:"timestamp_ms"`
			ArrivalMs int64  `json:"arrival_ms"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d %q: %v", i+1, l, err)
		}
		if m.TS < 1772352000000 || m.ArrivalMs < prev {
			t.Fatalf("line %d: timestamp %d (want ≥ start 1772352000000), arrival %d after %d", i+1, m.TS, m.ArrivalMs, prev)
		}
		prev = m.ArrivalMs
	}
	if b := gen("b.jsonl"); !bytes.Equal(a, b) {
		t.Errorf("same flags gave different files")
	}
	if c := gen("c.jsonl", "-bad", "0.2", "-dup", "0.1"); len(c) <= len(a) {
		t.Errorf("with -bad and -dup: %d bytes, want more than %d", len(c), len(a))
	}
}

func TestRun_Errors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-duration", "0s"}, "-duration"},
		{[]string{"-start", "yesterday"}, "-start"},
		{[]string{"-start", "-5"}, "-start"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-out", "/nonexistent-dir/x.jsonl"}, "create /nonexistent-dir/x.jsonl"},
		{[]string{"-nosuchflag"}, "not defined"},
	}
	for _, tt := range tests {
		err := run(tt.args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}
