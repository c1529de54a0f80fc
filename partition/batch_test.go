package partition

import (
	"bytes"
	"fmt"
	"testing"
)

func TestBatch_RoundTrip(t *testing.T) {
	type pos struct{ token, payload string }
	var want []pos
	body := []byte{batchVersion}
	for i := range 300 {
		p := pos{fmt.Sprintf("courier-%d", i%17), fmt.Sprintf(`{"courier_id":"courier-%d","n":%d}`, i%17, i)}
		if i == 5 {
			p = pos{"van//3", ""} // a '.' in the level, an empty payload
		}
		want = append(want, p)
		body = appendBatchEntry(body, p.token, []byte(p.payload))
	}
	var got []pos
	err := eachBatchEntry(body, func(i int, token, payload []byte) {
		if i != len(got) {
			t.Fatalf("entry %d numbered %d", len(got), i)
		}
		got = append(got, pos{string(token), string(payload)})
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got[:3], want[:3])
	}
	for _, bad := range [][]byte{nil, {0}, {2}, body[:len(body)-1], append(bytes.Clone(body), 200)} {
		if err := eachBatchEntry(bad, func(int, []byte, []byte) {}); err == nil {
			t.Errorf("a damaged batch (%d bytes) decodes", len(bad))
		}
	}
	if lineOf(7, 0) >= lineOf(7, 1) || lastLineOf(7) >= lineOf(8, 0) || lineOf(7, batchMax-1) != lastLineOf(7) {
		t.Error("lines are not ordered by sequence, then position")
	}
}

// FuzzEachBatchEntry: any body is an error or entries, never a panic, and
// at most batchMax entries.
func FuzzEachBatchEntry(f *testing.F) {
	f.Add(appendBatchEntry([]byte{batchVersion}, "c1", []byte(`{"a":1}`)))
	f.Add([]byte{batchVersion, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		n := 0
		_ = eachBatchEntry(body, func(i int, token, payload []byte) {
			if i != n {
				t.Fatalf("entry %d numbered %d", n, i)
			}
			n++
		})
		if n > batchMax {
			t.Fatalf("%d entries", n)
		}
	})
}
