package engine

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/km0/edgeproc/result"
)

// rowsOf runs cfg over ins and returns the rows it hands OnRows and the
// keys of its late records.
func rowsOf(t *testing.T, cfg Config, ins []Input) ([]Row, map[string]bool) {
	t.Helper()
	var mu sync.Mutex
	var rows []Row
	late := map[string]bool{}
	cfg.OnRows = func(rs []Row) {
		mu.Lock()
		defer mu.Unlock()
		rows = append(rows, rs...)
	}
	e := New(cfg, func(rs []result.Record) {
		mu.Lock()
		defer mu.Unlock()
		for i := range rs {
			if rs[i].Type == result.Late {
				late[rs[i].Key()] = true
			}
		}
	})
	for i := range ins {
		in := ins[i]
		in.Payload = append([]byte(nil), in.Payload...)
		e.Push(&in)
	}
	e.EndOfInput()
	return rows, late
}

// TestRows_AreTheAcceptedPositionsAsJudged: OnRows gets every accepted
// position once (duplicates and refused ones not), in input order, its
// late flags those of its late records, whatever the shard count.
func TestRows_AreTheAcceptedPositionsAsJudged(t *testing.T) {
	lateRows := 0
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			cfg := seedConfig(t, seed)
			cfg.ToleratedDelay = 1000 // the tunnels' queued positions come late
			ins := smallFleet(seed)
			cfg.Shards = 1
			one, late := rowsOf(t, cfg, ins)
			cfg.Shards = 3
			three, _ := rowsOf(t, cfg, ins)
			if !reflect.DeepEqual(one, three) {
				t.Fatalf("rows differ between 1 and 3 shards: %d and %d", len(one), len(three))
			}
			e := New(cfg, func([]result.Record) {})
			for i := range ins {
				in := ins[i]
				e.Push(&in)
			}
			e.EndOfInput()
			st := e.Stats()
			if want := st.Accepted - st.Duplicates; int64(len(one)) != want {
				t.Errorf("%d rows; accepted %d, duplicates %d: want %d", len(one), st.Accepted, st.Duplicates, want)
			}
			var lateD, lateS int
			for i, r := range one {
				if i > 0 && r.Line <= one[i-1].Line {
					t.Fatalf("row %d (line %d) after line %d: not in input order", i, r.Line, one[i-1].Line)
				}
				for op, flag := range map[string]bool{"distance": r.LateDistance, "session": r.LateSession} {
					key := fmt.Sprintf("late|%s|%s|%d|%s", cfg.Market, r.Courier, r.TS, op)
					if flag && !late[key] {
						t.Errorf("row at line %d late for %s, but no record %s", r.Line, op, key)
					}
				}
				if r.LateDistance {
					lateD++
				}
				if r.LateSession {
					lateS++
				}
			}
			if int64(lateD) != st.LateDistance || int64(lateS) != st.LateSession {
				t.Errorf("rows late for distance %d, session %d; the engine counted %d and %d", lateD, lateS, st.LateDistance, st.LateSession)
			}
			lateRows += lateD + lateS
		})
	}
	if lateRows == 0 {
		t.Errorf("no late row in any seed: the fleets prove nothing about the flags")
	}
}
