package lake_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/km0/edgeproc/lake"
)

// The service's side of the lake, for one market (one series): what its
// loop does with the Writer. Rows come from the engine in log order with
// their late flags; the log is truncated only up to Durable().
func Example() {
	dir, _ := os.MkdirTemp("", "lake")
	defer os.RemoveAll(dir)
	if err := lake.CheckDir(dir); err != nil { // at start: refuse an unwritable lake.dir
		fmt.Println(err)
		return
	}
	w, err := lake.Open(lake.Options{Dir: dir, Market: "girona", RollInterval: 10 * time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	logLast := uint64(3) // the write-ahead log's last index
	if err := w.CheckLog(logLast); err != nil {
		fmt.Println(err) // a log behind the lake: refuse to start
		return
	}
	// Replaying the log from Durable()+1, then live: each accepted
	// position, in log order.
	for i := w.Durable() + 1; i <= logLast; i++ {
		r := lake.Row{Index: i, Courier: []byte("van-3"), TimestampMs: 1764756000000 + int64(i)*5000, ArrivalMs: 1764756000500 + int64(i)*5000, Lat: 41.98, Lon: 2.82}
		if err := w.Append(&r); errors.Is(err, lake.ErrBehind) {
			// Hold back intake (stop acking) and append it again later.
		}
	}
	w.Advance(5)                   // log entries 4-5 were no accepted positions
	w.Tick(time.Now())             // every few seconds: rolls, retries, compaction, retention
	fmt.Println(w.Behind() == nil) // /readyz
	_ = w.Durable()                // truncate the log up to here, never further
	if err := w.Close(context.Background()); err != nil {
		fmt.Println(err)
	}
	fmt.Println(w.Durable(), w.Stats().RowsWritten)
	// Output:
	// true
	// 5 3
}
