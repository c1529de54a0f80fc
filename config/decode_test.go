package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse_DecodeErrors(t *testing.T) {
	const m = "market: girona\n"
	tests := []struct {
		name, src, field string
		err              error
		line             int
	}{
		// unknown keys, full dotted name
		{"unknown top-level key", m + "markets: x\n", "markets", ErrUnknownKey, 2},
		{"unknown section", m + "kafka:\n  url: x\n", "kafka", ErrUnknownKey, 2},
		{"unknown nested key", m + "windows:\n  sizee: 5m\n", "windows.sizee", ErrUnknownKey, 3},
		{"unknown key in mqtt", m + "mqtt:\n  password: hunter2\n", "mqtt.password", ErrUnknownKey, 3},
		{"unknown key below a scalar key", m + "geo:\n  h3:\n    resolution: 9\n", "geo.h3", ErrUnknownKey, 3},
		{"key case matters", m + "Windows:\n  size: 5m\n", "Windows", ErrUnknownKey, 2},
		{"merge key not supported", m + "base: &b\n  size: 5m\n", "base", ErrUnknownKey, 2},
		{"duplicate key", m + "windows:\n  gap: 3m\n  gap: 4m\n", "windows.gap", ErrDuplicateKey, 4},
		{"duplicate market", m + m, "market", ErrDuplicateKey, 2},

		// wrong YAML types, naming the key
		{"list where map expected", m + "windows:\n  - 5m\n", "windows", ErrWrongType, 3},
		{"scalar where map expected", m + "windows: 5m\n", "windows", ErrWrongType, 2},
		{"map where string expected", m + "mqtt:\n  url:\n    host: x\n", "mqtt.url", ErrWrongType, 4},
		{"list where string expected", "market: [girona]\n", "market", ErrWrongType, 1},
		{"map where duration expected", m + "windows:\n  gap: {m: 3}\n", "windows.gap", ErrWrongType, 3},
		{"string where number expected", m + "distance:\n  min_move_m: ten\n", "distance.min_move_m", ErrWrongType, 3},
		{"quoted number where number expected", m + "distance:\n  min_move_m: '10'\n", "distance.min_move_m", ErrWrongType, 3},
		{"string where bool expected", m + "http:\n  board: 'yes'\n", "http.board", ErrWrongType, 3},
		{"number where bool expected", m + "http:\n  board: 1\n", "http.board", ErrWrongType, 3},
		{"string where pprof bool expected", m + "http:\n  pprof: on\n", "http.pprof", ErrWrongType, 3},
		{"bool where number expected", m + "distance:\n  max_speed_kmh: true\n", "distance.max_speed_kmh", ErrWrongType, 3},
		{"float where integer expected", m + "geo:\n  h3_resolution: 9.5\n", "geo.h3_resolution", ErrWrongType, 3},
		{"string where integer expected", m + "geo:\n  h3_resolution: nine\n", "geo.h3_resolution", ErrWrongType, 3},
		{"integer too large", m + "geo:\n  h3_resolution: 99999999999999999999\n", "geo.h3_resolution", ErrWrongType, 3},
		{"integer beyond int32", m + "geo:\n  h3_resolution: 4294967305\n", "geo.h3_resolution", ErrOutOfRange, 3},
		{"list as key", m + "? [a]\n: 1\n", "", ErrWrongType, 2},

		// durations
		{"bad duration unit", m + "windows:\n  size: 5 minutes\n", "windows.size", ErrBadDuration, 3},
		{"bare number", m + "windows:\n  gap: 180\n", "windows.gap", ErrBadDuration, 3},
		{"bare float", m + "windows:\n  gap: 1.5\n", "windows.gap", ErrBadDuration, 3},
		{"bool duration", m + "windows:\n  idle_timeout: false\n", "windows.idle_timeout", ErrBadDuration, 3},
		{"days are not Go syntax", m + "windows:\n  restore_ttl: 1d\n", "windows.restore_ttl", ErrBadDuration, 3},
		{"overflowing duration", m + "state:\n  checkpoint_interval: 9999999999h\n", "state.checkpoint_interval", ErrBadDuration, 3},
		{"bad duration in mqtt", m + "mqtt:\n  session_expiry: forever\n", "mqtt.session_expiry", ErrBadDuration, 3},
		{"bad duration in nats", m + "nats:\n  duplicate_window: 10\n", "nats.duplicate_window", ErrBadDuration, 3},
		{"bad duration of max_age", m + "nats:\n  max_age: 1d\n", "nats.max_age", ErrBadDuration, 3},

		// sizes
		{"size with a space in the unit", m + "nats:\n  max_bytes: 1 gigabyte\n", "nats.max_bytes", ErrBadSize, 3},
		{"negative size", m + "nats:\n  max_bytes: -1\n", "nats.max_bytes", ErrBadSize, 3},
		{"fractional size", m + "nats:\n  max_bytes: 1.5GiB\n", "nats.max_bytes", ErrBadSize, 3},
		{"overflowing size", m + "nats:\n  max_bytes: 9000000TiB\n", "nats.max_bytes", ErrOutOfRange, 3},
		{"size as a list", m + "nats:\n  max_bytes: [1]\n", "nats.max_bytes", ErrWrongType, 3},

		// whole-file problems
		{"empty file", "", "", ErrEmpty, 0},
		{"only comments", "# nothing here\n", "", ErrEmpty, 0},
		{"null document", "~\n", "", ErrEmpty, 0},
		{"top level list", "- market: girona\n", "", ErrWrongType, 1},
		{"top level scalar", "girona\n", "", ErrWrongType, 1},
		{"syntax error", "market: girona\n  windows: [\n", "", ErrSyntax, 2},
		{"tab indentation", "market: girona\nwindows:\n\tsize: 5m\n", "", ErrSyntax, 3},
		{"two documents", m + "---\nmarket: valencia\n", "", ErrSyntax, 2},
		{"undefined alias", m + "windows:\n  gap: *nope\n", "", ErrSyntax, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := wantOneFieldError(t, tt.src, tt.field, tt.err)
			if fe.Line != tt.line {
				t.Errorf("got line %d, want %d (%v)", fe.Line, tt.line, fe)
			}
		})
	}
}

func TestParse_UnknownKeySuggestsNearest(t *testing.T) {
	tests := []struct{ src, want string }{
		{"market: girona\nwindows:\n  sizee: 5m\n", `girona.yaml:3: windows.sizee: unknown key (did you mean "windows.size"?)`},
		{"market: girona\nwindow:\n  size: 5m\n", `girona.yaml:2: window: unknown key (did you mean "windows"?)`},
		{"market: girona\nmqtt:\n  clientid: x\n", `girona.yaml:3: mqtt.clientid: unknown key (did you mean "mqtt.client_id"?)`},
		{"market: girona\nmqtt:\n  qos: 1\n", `girona.yaml:3: mqtt.qos: unknown key`},
	}
	for _, tt := range tests {
		_, err := Parse(strings.NewReader(tt.src), "girona.yaml")
		if err == nil || err.Error() != tt.want {
			t.Errorf("got  %v\nwant %s", err, tt.want)
		}
	}
}

func TestParse_DurationForms(t *testing.T) {
	tests := []struct {
		val  string
		want time.Duration
	}{
		{"0", 0},
		{"'0'", 0},
		{"0s", 0},
		{"45s", 45 * time.Second},
		{"1m30s", 90 * time.Second},
		{"1.5s", 1500 * time.Millisecond},
		{"250ms", 250 * time.Millisecond},
		{`"2h"`, 2 * time.Hour},
	}
	for _, tt := range tests {
		c := mustParse(t, "market: girona\nwindows:\n  tolerated_delay: "+tt.val+"\n")
		if c.Windows.ToleratedDelay != tt.want {
			t.Errorf("tolerated_delay: %s: got %v, want %v", tt.val, c.Windows.ToleratedDelay, tt.want)
		}
	}
}

func TestParse_AliasesResolve(t *testing.T) {
	src := "market: &m girona\nmqtt:\n  client_id: *m\nwindows: &w\n  gap: 4m\n"
	c := mustParse(t, src)
	if c.MQTT.ClientID != "girona" || c.Windows.Gap != 4*time.Minute {
		t.Errorf("got client_id %q gap %v, want girona 4m0s", c.MQTT.ClientID, c.Windows.Gap)
	}
}

func TestParse_SizesAndRetention(t *testing.T) {
	tests := []struct {
		val  string
		want int64
	}{
		{"0", 0},
		{"1073741824", 1 << 30},
		{"1GiB", 1 << 30},
		{"512MiB", 512 << 20},
		{"500MB", 500_000_000},
		{"2 GB", 2_000_000_000},
		{`"64KiB"`, 64 << 10},
		{"10B", 10},
	}
	for _, tt := range tests {
		c := mustParse(t, "market: girona\nnats:\n  max_bytes: "+tt.val+"\n")
		if c.NATS.MaxBytes != tt.want {
			t.Errorf("max_bytes: %s: got %d, want %d", tt.val, c.NATS.MaxBytes, tt.want)
		}
	}
	c := mustParse(t, "market: girona\nnats:\n  max_age: 0\n  max_bytes: 0\n")
	if c.NATS.MaxAge != 0 || c.NATS.MaxBytes != 0 {
		t.Errorf("0 and 0: got max_age %v max_bytes %d, want both 0 (unbounded)", c.NATS.MaxAge, c.NATS.MaxBytes)
	}
}

func TestParse_ReportsDecodeAndValueErrorsTogether(t *testing.T) {
	// An unknown key sets nothing: the rest of the file is still checked.
	src := "market: girona\nwindows:\n  sizee: 5m\n  gap: 0s\nhttp:\n  listen: nope\n"
	_, err := Parse(strings.NewReader(src), "g.yaml")
	fes := FieldErrors(err)
	want := []struct {
		field string
		line  int
	}{{"windows.sizee", 3}, {"windows.gap", 4}, {"http.listen", 6}}
	if len(fes) != len(want) {
		t.Fatalf("got %d errors (%v), want %d", len(fes), err, len(want))
	}
	for i, w := range want {
		if fes[i].Field != w.field || fes[i].Line != w.line || fes[i].File != "g.yaml" {
			t.Errorf("error %d: got %s at %s:%d, want %s at g.yaml:%d", i, fes[i].Field, fes[i].File, fes[i].Line, w.field, w.line)
		}
	}
}

func TestParse_ReportsAllDecodeErrorsAndSkipsValidation(t *testing.T) {
	// gap: 0s would fail validation, but a section with a value that did not
	// decode skips its value rules: they would judge the default it kept.
	src := "market: girona\nwindows:\n  sizee: 5m\n  gap: 0s\n  slide: 1 m\ngeo: 9\n"
	_, err := Parse(strings.NewReader(src), "g.yaml")
	fes := FieldErrors(err)
	want := []string{"windows.sizee", "windows.slide", "geo"}
	if len(fes) != len(want) {
		t.Fatalf("got %d errors (%v), want %d", len(fes), err, len(want))
	}
	for i, f := range want {
		if fes[i].Field != f || fes[i].File != "g.yaml" {
			t.Errorf("error %d: got %s in %q, want %s in g.yaml", i, fes[i].Field, fes[i].File, f)
		}
	}
}

func TestParse_InvalidMarketDoesNotRepeatInDerivedKeys(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"derived values left out", "market: 'gi rona'\n", []string{"market"}},
		{"values set in the file still checked", "market: 'gi rona'\nnats:\n  stream: 'A B'\n", []string{"market", "nats.stream"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.src), "g.yaml")
			fes := FieldErrors(err)
			var got []string
			for _, fe := range fes {
				got = append(got, fe.Field)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("got fields %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParse_TooLarge(t *testing.T) {
	src := "market: girona\n# " + strings.Repeat("x", MaxFileSize) + "\n"
	_, err := Parse(strings.NewReader(src), "big.yaml")
	if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "big.yaml: ") {
		t.Errorf("got %v, want ErrInvalid naming big.yaml", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestParse_ReadError(t *testing.T) {
	_, err := Parse(failingReader{}, "x.yaml")
	if err == nil || !strings.Contains(err.Error(), "x.yaml") || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("got %v, want the read error with the file name", err)
	}
}

func TestFieldErrors(t *testing.T) {
	a := &FieldError{Field: "a", Err: ErrInvalid}
	b := &FieldError{Field: "b", Err: ErrRequired}
	tests := []struct {
		name string
		err  error
		want []*FieldError
	}{
		{"nil", nil, nil},
		{"single", a, []*FieldError{a}},
		{"joined", errors.Join(a, b), []*FieldError{a, b}},
		{"wrapped join", fmtWrap(errors.Join(a, errors.New("other"), b)), []*FieldError{a, b}},
		{"none", errors.New("plain"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FieldErrors(tt.err)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("got[%d] = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func fmtWrap(err error) error { return &wrapped{err} }

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

func TestFieldError_Format(t *testing.T) {
	tests := []struct {
		fe   FieldError
		want string
	}{
		{FieldError{File: "g.yaml", Line: 3, Field: "windows.gap", Value: "0s", Err: ErrNotPositive}, `g.yaml:3: windows.gap = "0s": must be positive`},
		{FieldError{File: "g.yaml", Field: "windows.gap", Value: "0s", Err: ErrNotPositive}, `g.yaml: windows.gap = "0s": must be positive`},
		{FieldError{Field: "market", Err: ErrRequired}, `market: is required`},
		{FieldError{File: "g.yaml", Err: ErrEmpty}, `g.yaml: file is empty: at least market is required`},
		{FieldError{Field: "x", Value: strings.Repeat("é", 100), Err: ErrInvalid, Reason: "bad"}, `x = "` + strings.Repeat("é", 40) + `…": bad`},
		{FieldError{}, `invalid configuration`},
	}
	for _, tt := range tests {
		if got := tt.fe.Error(); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"market: girona\n",
		"market: girona\nwindows:\n  size: 5m\n  slide: 1m\n",
		"market: [x]\nmqtt: {url: embedded}\n",
		"a: &a [*a]\n",
		"market: girona\ngeo:\n  h3_resolution: 9\n---\n",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		c, err := Parse(strings.NewReader(src), "f.yaml")
		if err != nil {
			if len(FieldErrors(err)) == 0 {
				t.Fatalf("error without FieldError: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config Validate rejects: %v", err)
		}
	})
}
