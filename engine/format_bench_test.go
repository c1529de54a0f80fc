package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/km0/edgeproc/fleet"
	"github.com/km0/edgeproc/position"
	"github.com/km0/edgeproc/result"
)

// BenchmarkEngineOwnTracks is BenchmarkEngine's fleet (500 couriers, 2
// hours, 1 shard) as OwnTracks phones send it: location messages of about
// 200 bytes with the app's other members, the courier the USER level of
// owntracks/USER/phone, tst in seconds.
func BenchmarkEngineOwnTracks(b *testing.B) {
	f := fleet.New(fleet.Config{Couriers: 500, Duration: 2 * time.Hour, Seed: 1})
	var buf []byte
	type msg struct {
		off, end int32
		topic    string
		arrival  int64
	}
	var msgs []msg
	topics := map[string]string{}
	for e, ok := f.Next(); ok; e, ok = f.Next() {
		t, ok := topics[e.Courier]
		if !ok {
			t = "owntracks/" + e.Courier + "/phone"
			topics[e.Courier] = t
		}
		off := len(buf)
		buf = append(buf, `{"_type":"location","acc":`...)
		buf = strconv.AppendFloat(buf, e.Accuracy, 'f', -1, 64)
		buf = append(buf, `,"alt":96,"batt":64,"bs":1,"conn":"m","created_at":`...)
		buf = strconv.AppendInt(buf, e.TS/1000+1, 10)
		buf = append(buf, `,"lat":`...)
		buf = strconv.AppendFloat(buf, e.Lat, 'f', -1, 64)
		buf = append(buf, `,"lon":`...)
		buf = strconv.AppendFloat(buf, e.Lon, 'f', -1, 64)
		buf = append(buf, `,"t":"u","tid":"v3","tst":`...)
		buf = strconv.AppendInt(buf, e.TS/1000, 10)
		buf = append(buf, `,"vac":4,"vel":12}`...)
		msgs = append(msgs, msg{int32(off), int32(len(buf)), t, e.Arrival})
	}
	cfg := benchConfig(1)
	cfg.Format, cfg.Topic = position.FormatOwnTracks, "owntracks/+/+"
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		e := New(cfg, func([]result.Record) {})
		for _, m := range msgs {
			e.Push(&Input{Payload: buf[m.off:m.end], Topic: m.topic, Arrival: m.arrival, HasArrival: true})
		}
		e.EndOfInput()
		n += len(msgs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/position")
}
