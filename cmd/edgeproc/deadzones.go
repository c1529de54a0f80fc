package main

// deadzones: the dead_zone results of a replay (replayResults, the same
// engine set-up as `edgeproc replay`) or of a market's results stream
// (package resultstream), summed by cell and written as GeoJSON (package
// zonemap).

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/config"
	"github.com/km0/edgeproc/defaults"
	"github.com/km0/edgeproc/internal/resultstream"
	"github.com/km0/edgeproc/internal/zonemap"
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
			zs := zonemap.NewSet()
			if *inPath != "" {
				if cfg.DeadZones.Window == 0 {
					fmt.Fprintf(stderr, "warning: %s: dead_zones.window is 0: the replay counts no dead zones\n", *cfgPath)
				}
				err = zonesFromReplay(cfg, *inPath, zs, stderr)
			} else {
				err = zonesFromStream(ctx, resultsNATS(*natsURL, &cfg), cfg, time.Now().Add(-*since), zs, stderr)
			}
			if err != nil {
				return err
			}
			var buf bytes.Buffer
			if err := zs.WriteGeoJSON(&buf); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "deadzones: %d cells, %d windows\n", zs.Cells(), zs.Windows())
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
func zonesFromReplay(cfg config.Config, inPath string, zs *zonemap.Set, stderr io.Writer) error {
	in, closeIn, err := openReplayInput(inPath, stderr)
	if err != nil {
		return err
	}
	defer closeIn()
	w := &zonemap.Lines{Set: zs}
	if err := replayResults(cfg, 0, in, w, stderr); err != nil {
		return err
	}
	return w.Close()
}

// zonesFromStream adds to zs the dead_zone results of cfg's market stored
// in its results stream from start on, up to the stream's last one when
// it is called.
func zonesFromStream(ctx context.Context, n config.NATS, cfg config.Config, start time.Time, zs *zonemap.Set, stderr io.Writer) error {
	nc, js, err := connectJetStream(n, "edgeproc-deadzones", stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	bc := bridge.Config{Market: cfg.Market, SubjectPrefix: cfg.NATS.SubjectPrefix, Stream: cfg.NATS.Stream}.Resolved()
	return resultstream.ReadToNow(ctx, js, bc, bc.Subject(bridge.KindDeadZone), start, func(_ uint64, data []byte) error { return zs.Add(data) })
}
