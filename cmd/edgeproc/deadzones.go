package main

// deadzones: the dead_zone results of a replay, or of a market's results
// stream, summed by cell and written as a GeoJSON FeatureCollection. It
// owns the summing and the GeoJSON; the replay is replayResults' (the same
// engine set-up as `edgeproc replay`) and the stream reading is tail's
// (connectJetStream, resultStream, orderedResults).

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/uber/h3-go/v4"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
)

var deadzonesCommand = &command{
	name:    "deadzones",
	args:    "--config FILE (--in FILE|- | --since D [--nats URL]) [--out FILE|-]",
	summary: "map the dead zones of a replay or of the results stream as GeoJSON",
	help: `Writes the market's dead zones (dead_zone results, docs/reference.md) as
a GeoJSON FeatureCollection (RFC 7946): one Feature per H3 cell, its
boundary as a Polygon (counter-clockwise, [lon, lat]), its windows summed:
warnings, couriers (each window's distinct couriers, added up), restored,
open, silence_ms, longest_silence_ms (the longest of any window), windows,
first_window_start_ms, last_window_end_ms and mean_silence_s
(silence_ms / restored / 1000; null when none was restored). Features are
sorted by cell, so the same results give the same bytes; QGIS and
kepler.gl open the file as it is.

With --in the results are those of replaying the positions file exactly as
edgeproc replay does (its summary goes to stderr). With --since they are
read from the market's results stream (nats.url, nats.stream and
nats.subject_prefix of the file, or --nats), dead_zone subject only, with
an ordered consumer from D ago up to the stream's last result when the
command starts. A result read twice counts once.`,
	example: `edgeproc deadzones --config testdata/worked.yaml --in testdata/worked.jsonl --out zones.geojson
edgeproc deadzones --config /etc/edgeproc/girona.yaml --since 24h --out zones.geojson`,
	setup: func(fs *flag.FlagSet) runFunc {
		cfgPath := fs.String("config", "", "market configuration `FILE` (required)")
		inPath := fs.String("in", "", "replay this positions JSONL `FILE`, - for stdin")
		since := fs.Duration("since", 0, "instead of --in, read the results stream from this long ago (e.g. 24h)")
		natsURL := fs.String("nats", "", "with --since, NATS `URL` (default: the file's nats.url, else "+defaults.NATSURL+")")
		outPath := fs.String("out", "-", "output GeoJSON `FILE`, - for stdout")
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			if *cfgPath == "" || len(args) > 0 || (*inPath == "") == (*since == 0) {
				return usageError{"deadzones takes --config FILE and either --in FILE or --since D"}
			}
			if *since < 0 {
				return usageError{"--since must be positive"}
			}
			if *natsURL != "" && *inPath != "" {
				return usageError{"--nats goes with --since, not --in"}
			}
			cfg, err := config.Load(*cfgPath)
			if err != nil {
				return err
			}
			zs := newZoneSet()
			if *inPath != "" {
				if cfg.DeadZones.Window == 0 {
					fmt.Fprintf(stderr, "warning: %s: dead_zones.window is 0: the replay counts no dead zones\n", *cfgPath)
				}
				err = zonesFromReplay(cfg, *inPath, zs, stderr)
			} else {
				err = zonesFromStream(ctx, resultsURL(*natsURL, &cfg), cfg, time.Now().Add(-*since), zs)
			}
			if err != nil {
				return err
			}
			var buf bytes.Buffer
			if err := zs.writeGeoJSON(&buf); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "deadzones: %d cells, %d windows\n", len(zs.cells), zs.windows)
			if *outPath == "-" {
				_, err = stdout.Write(buf.Bytes())
				return err
			}
			// Written only once everything is read: a failed read leaves no
			// half file behind.
			if err := os.WriteFile(*outPath, buf.Bytes(), 0o666); err != nil {
				return fmt.Errorf("output: %w", err)
			}
			return nil
		}
	},
}

// zonesFromReplay replays inPath under cfg as `edgeproc replay` does and
// adds its dead_zone results to zs.
func zonesFromReplay(cfg config.Config, inPath string, zs *zoneSet, stderr io.Writer) error {
	in, closeIn, err := openReplayInput(inPath, stderr)
	if err != nil {
		return err
	}
	defer closeIn()
	w := &zoneLines{zs: zs}
	if err := replayResults(cfg, 0, in, w, stderr); err != nil {
		return err
	}
	if len(w.partial) > 0 {
		return fmt.Errorf("result line %d: no line end", w.line+1)
	}
	return nil
}

// zonesFromStream adds to zs the dead_zone results of cfg's market stored
// in its results stream from start on, up to the stream's last sequence
// when it is called: it returns once caught up, not following new ones.
func zonesFromStream(ctx context.Context, url string, cfg config.Config, start time.Time, zs *zoneSet) error {
	nc, js, err := connectJetStream(url, "edgeproc-deadzones")
	if err != nil {
		return err
	}
	defer nc.Close()
	bc := bridge.Config{Market: cfg.Market, SubjectPrefix: cfg.NATS.SubjectPrefix, Stream: cfg.NATS.Stream}.Resolved()
	s, err := resultStream(ctx, js, bc)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("market %s: stream %s: %w", bc.Market, bc.Stream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	subject := bc.Subject(bridge.KindDeadZone)
	cons, err := orderedResults(ctx, s, bc, []string{subject}, start)
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("market %s: read %s: %w", bc.Market, bc.Stream, err)
	}
	defer it.Stop()
	if ci := cons.CachedInfo(); ci != nil && ci.NumPending == 0 {
		return nil // no dead zone since start
	}
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("market %s: read %s: %w", bc.Market, bc.Stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("market %s: read %s: %w", bc.Market, bc.Stream, err)
		}
		seq := meta.Sequence.Stream
		if seq > last {
			return nil // stored after the start: the next run's
		}
		if m.Subject() == subject {
			if err := zs.add(m.Data()); err != nil {
				return fmt.Errorf("market %s: stream %s sequence %d: %w", bc.Market, bc.Stream, seq, err)
			}
		}
		// Nothing pending: no dead zone up to the stream's end, which is
		// at or past last.
		if seq == last || meta.NumPending == 0 {
			return nil
		}
	}
}

// deadZonePrefix starts every dead_zone line a replay writes
// (result.Record.AppendJSON); other lines are skipped undecoded.
var deadZonePrefix = []byte(`{"type":"dead_zone"`)

// zoneLines is the io.Writer a replay's JSON lines go to: it adds each
// dead_zone line to zs and drops the others.
type zoneLines struct {
	zs      *zoneSet
	partial []byte // a line begun by one Write, not yet ended
	line    int64  // lines ended so far
}

func (w *zoneLines) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.partial = append(w.partial, p...)
			break
		}
		line := p[:i]
		if len(w.partial) > 0 {
			w.partial = append(w.partial, line...)
			line = w.partial
		}
		w.line++
		if bytes.HasPrefix(line, deadZonePrefix) {
			if err := w.zs.add(line); err != nil {
				return 0, fmt.Errorf("result line %d: %w", w.line, err)
			}
		}
		w.partial = w.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

// deadZone is the part of a dead_zone result (docs/reference.md) summed.
type deadZone struct {
	Type        string `json:"type"`
	WindowStart int64  `json:"window_start_ms"`
	WindowEnd   int64  `json:"window_end_ms"`
	Cell        string `json:"cell"`
	Warnings    int    `json:"warnings"`
	Couriers    int    `json:"couriers"`
	Restored    int    `json:"restored"`
	Open        int    `json:"open"`
	SilenceMs   int64  `json:"silence_ms"`
	LongestMs   int64  `json:"longest_silence_ms"`
}

// zoneSet sums dead_zone results by cell.
type zoneSet struct {
	cells   map[h3.Cell]*cellZones
	windows int // windows added, over every cell
}

// cellZones is one cell's windows, summed.
type cellZones struct {
	seen                         map[int64]bool // window starts added
	warnings, couriers, restored int
	open                         int
	silenceMs, longestMs         int64
	first, last                  int64 // first window's start, last window's end
}

func newZoneSet() *zoneSet { return &zoneSet{cells: make(map[h3.Cell]*cellZones)} }

// add adds one dead_zone result, given as its JSON. A window already added
// (the same key: a dead zone is never revised) is skipped.
func (zs *zoneSet) add(data []byte) error {
	var d deadZone
	if err := json.Unmarshal(data, &d); err != nil {
		return fmt.Errorf("decode dead_zone: %w", err)
	}
	if d.Type != "dead_zone" {
		return fmt.Errorf("decode dead_zone: type %q", d.Type)
	}
	u, err := strconv.ParseUint(d.Cell, 16, 64)
	if c := h3.Cell(u); err != nil || !c.IsValid() {
		return fmt.Errorf("dead_zone: cell %q is not an H3 cell", d.Cell)
	}
	c := h3.Cell(u)
	z := zs.cells[c]
	if z == nil {
		z = &cellZones{seen: make(map[int64]bool), first: d.WindowStart, last: d.WindowEnd}
		zs.cells[c] = z
	}
	if z.seen[d.WindowStart] {
		return nil
	}
	z.seen[d.WindowStart] = true
	zs.windows++
	z.warnings += d.Warnings
	z.couriers += d.Couriers
	z.restored += d.Restored
	z.open += d.Open
	z.silenceMs += d.SilenceMs
	z.longestMs = max(z.longestMs, d.LongestMs)
	z.first = min(z.first, d.WindowStart)
	z.last = max(z.last, d.WindowEnd)
	return nil
}

// The GeoJSON written (RFC 7946).
type (
	featureCollection struct {
		Type     string    `json:"type"` // FeatureCollection
		Features []feature `json:"features"`
	}
	feature struct {
		Type       string         `json:"type"` // Feature
		ID         string         `json:"id"`   // the cell
		Geometry   polygon        `json:"geometry"`
		Properties zoneProperties `json:"properties"`
	}
	polygon struct {
		Type        string         `json:"type"` // Polygon
		Coordinates [][][2]float64 `json:"coordinates"`
	}
	zoneProperties struct {
		Cell             string   `json:"cell"`
		Warnings         int      `json:"warnings"`
		Couriers         int      `json:"couriers"`
		Restored         int      `json:"restored"`
		Open             int      `json:"open"`
		SilenceMs        int64    `json:"silence_ms"`
		LongestMs        int64    `json:"longest_silence_ms"`
		Windows          int      `json:"windows"`
		FirstWindowStart int64    `json:"first_window_start_ms"`
		LastWindowEnd    int64    `json:"last_window_end_ms"`
		MeanSilenceS     *float64 `json:"mean_silence_s"` // null when none restored
	}
)

// writeGeoJSON writes zs as a FeatureCollection, features sorted by cell,
// one a line.
func (zs *zoneSet) writeGeoJSON(w io.Writer) error {
	cells := make([]h3.Cell, 0, len(zs.cells))
	for c := range zs.cells {
		cells = append(cells, c)
	}
	slices.Sort(cells)
	var b bytes.Buffer
	b.WriteString(`{"type":"FeatureCollection","features":[`)
	for i, c := range cells {
		z := zs.cells[c]
		f := feature{
			Type:     "Feature",
			ID:       c.String(),
			Geometry: polygon{Type: "Polygon", Coordinates: [][][2]float64{cellRing(c)}},
			Properties: zoneProperties{
				Cell: c.String(), Warnings: z.warnings, Couriers: z.couriers, Restored: z.restored, Open: z.open,
				SilenceMs: z.silenceMs, LongestMs: z.longestMs, Windows: len(z.seen),
				FirstWindowStart: z.first, LastWindowEnd: z.last,
			},
		}
		if z.restored > 0 {
			mean := float64(z.silenceMs) / float64(z.restored) / 1000
			f.Properties.MeanSilenceS = &mean
		}
		line, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("encode cell %s: %w", c, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n")
		b.Write(line)
	}
	b.WriteString("\n]}\n")
	_, err := w.Write(b.Bytes())
	return err
}

// cellRing is c's boundary as a closed GeoJSON linear ring: [lon, lat]
// positions rounded to 1e-7° (about a centimetre), counter-clockwise,
// the first repeated at the end. A cell across the antimeridian keeps its
// longitudes continuous (some beyond ±180) rather than wrapping round the
// world.
func cellRing(c h3.Cell) [][2]float64 {
	b := h3.CellToBoundary(c)
	ring := make([][2]float64, 0, len(b)+1)
	wraps := false
	for i, v := range b {
		ring = append(ring, [2]float64{round7(v.Lng), round7(v.Lat)})
		if i > 0 && math.Abs(v.Lng-b[i-1].Lng) > 180 {
			wraps = true
		}
	}
	if wraps {
		for i := range ring {
			if ring[i][0] < 0 {
				ring[i][0] += 360
			}
		}
	}
	// Shoelace: twice the signed area, positive counter-clockwise.
	area := 0.0
	for i := range ring {
		p, q := ring[i], ring[(i+1)%len(ring)]
		area += p[0]*q[1] - q[0]*p[1]
	}
	if area < 0 {
		slices.Reverse(ring)
	}
	return append(ring, ring[0])
}

func round7(x float64) float64 { return math.Round(x*1e7) / 1e7 }
