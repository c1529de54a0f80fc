package gpsnoise

import (
	"embed"
	"encoding/xml"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"time"
)

// ReadGPX returns the timestamped track points of a GPX file, in time
// order; points without a time, and repeats of a time, are left out.
func ReadGPX(r io.Reader) ([]Point, error) {
	var doc struct {
		Trk []struct {
			Seg []struct {
				Pt []struct {
					Lat  float64 `xml:"lat,attr"`
					Lon  float64 `xml:"lon,attr"`
					Time string  `xml:"time"`
				} `xml:"trkpt"`
			} `xml:"trkseg"`
		} `xml:"trk"`
	}
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("read gpx: %w", err)
	}
	var pts []Point
	for _, trk := range doc.Trk {
		for _, seg := range trk.Seg {
			for _, p := range seg.Pt {
				if p.Time == "" {
					continue
				}
				t, err := time.Parse(time.RFC3339, p.Time)
				if err != nil {
					return nil, fmt.Errorf("read gpx: point time %q: %w", p.Time, err)
				}
				pts = append(pts, Point{TS: t.UnixMilli(), Lat: p.Lat, Lon: p.Lon})
			}
		}
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].TS < pts[j].TS })
	out := pts[:0]
	for _, p := range pts {
		if len(out) == 0 || p.TS > out[len(out)-1].TS {
			out = append(out, p)
		}
	}
	return out, nil
}

// Resample returns pts at one point every stepMs from the first, each
// interpolated linearly between the recorded points around it.
func Resample(pts []Point, stepMs int64) []Point {
	if len(pts) == 0 {
		return nil
	}
	var out []Point
	j := 0
	for t := pts[0].TS; t <= pts[len(pts)-1].TS; t += stepMs {
		for j+1 < len(pts) && pts[j+1].TS < t {
			j++
		}
		a, b := pts[j], pts[min(j+1, len(pts)-1)] // a.TS <= t <= b.TS
		f := 0.0
		if b.TS > a.TS {
			f = float64(t-a.TS) / float64(b.TS-a.TS)
		}
		out = append(out, Point{TS: t, Lat: a.Lat + f*(b.Lat-a.Lat), Lon: a.Lon + f*(b.Lon-a.Lon)})
	}
	return out
}

//go:embed testdata/stoplight/*.gpx
var real embed.FS

// Trace is a named true path.
type Trace struct {
	Name   string
	Points []Point
}

// RealTraces returns the GPX tracks of testdata/stoplight (see SOURCE.md
// there), resampled to one point every stepMs.
func RealTraces(stepMs int64) ([]Trace, error) {
	names, err := fs.Glob(real, "testdata/stoplight/*.gpx")
	if err != nil {
		return nil, err
	}
	var out []Trace
	for _, name := range names {
		f, err := real.Open(name)
		if err != nil {
			return nil, err
		}
		pts, err := ReadGPX(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, Trace{Name: path.Base(name), Points: Resample(pts, stepMs)})
	}
	return out, nil
}
