package partition

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is every series of one /metrics answer.
type scrape []sample

// metricsClient reads /metrics and the board's pages.
var metricsClient = &http.Client{Timeout: 10 * time.Second}

// scrapeMetrics reads and parses the /metrics of the process listening
// on listen.
func scrapeMetrics(t testing.TB, listen string) scrape {
	t.Helper()
	res, err := metricsClient.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics of %s: %v", listen, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics of %s: %d, %v", listen, res.StatusCode, err)
	}
	var out scrape
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			t.Fatalf("/metrics of %s: %v", listen, err)
		}
		out = append(out, s)
	}
	return out
}

// parseSample parses `name{label="value",…} value [timestamp]`.
func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no value in %q", line)
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, ",")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq <= 0 {
				return s, fmt.Errorf("bad labels in %q", line)
			}
			key := line[:eq]
			q, err := strconv.QuotedPrefix(line[eq+1:])
			if err != nil {
				return s, fmt.Errorf("bad label %s in %q: %w", key, line, err)
			}
			if s.labels[key], err = strconv.Unquote(q); err != nil {
				return s, fmt.Errorf("bad label %s in %q: %w", key, line, err)
			}
			line = line[eq+1+len(q):]
		}
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return s, fmt.Errorf("no value for %s", s.name)
	}
	var err error
	s.value, err = strconv.ParseFloat(f[0], 64)
	return s, err
}

// match reports whether s is a series of name with every label of want
// (name, value pairs).
func (s *sample) match(name string, want []string) bool {
	if s.name != name {
		return false
	}
	for i := 0; i+1 < len(want); i += 2 {
		if v, ok := s.labels[want[i]]; !ok || v != want[i+1] {
			return false
		}
	}
	return true
}

// get returns the value of the one series of name with the labels of
// want, and whether there is exactly one.
func (sc scrape) get(name string, want ...string) (float64, bool) {
	v, n := sc.sum(name, want...)
	return v, n == 1
}

// sum adds up the series of name with the labels of want, and counts
// them.
func (sc scrape) sum(name string, want ...string) (float64, int) {
	var v float64
	n := 0
	for i := range sc {
		if sc[i].match(name, want) {
			v += sc[i].value
			n++
		}
	}
	return v, n
}
