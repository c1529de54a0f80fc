package lake_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/km0/edgeproc/internal/testenv"
	"github.com/km0/edgeproc/lake"
)

// killRows is the log the killed writer and its successor write: a row a
// minute of event time, so dates close (and are compacted) all along.
func killRows() []lake.Row { return mkRows(1, 60000, 1_767_571_200_000, 60_000) }

const killDirEnv = "LAKE_KILL_CHILD_DIR"

// killOptions roll every 500 rows' tick and compact a date as soon as it
// has ended: a kill lands in a roll or a compaction most of the time.
func killOptions(dir string) lake.Options {
	return lake.Options{Dir: dir, Market: "m", RollInterval: time.Minute, CompactAfter: time.Millisecond}
}

// feed appends rows through w, ticking the Writer's clock by an event-time
// minute every 500 rows, as a service replaying its log would.
func feed(w *lake.Writer, rs []lake.Row) error {
	for i := range rs {
		if err := w.Append(&rs[i]); err != nil {
			return err
		}
		if i%500 == 499 {
			w.Tick(time.UnixMilli(rs[i].TimestampMs).Add(time.Hour))
		}
	}
	return nil
}

// TestKillChild is the process TestWriter_Kill9 kills: it writes the log
// and then loops, rolling nothing more, until it is killed.
func TestKillChild(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		return // only as TestWriter_Kill9's child
	}
	w, err := lake.Open(killOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "started"), nil, 0o644)
	if err := feed(w, killRows()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Hour) // until killed (a bare select{} would be a deadlock once the Writer idles)
}

// TestWriter_Kill9 kills a process writing the lake (SIGKILL, at moments
// spread over its run: in rolls, compactions, renames), then opens the
// lake as a restart would and appends the whole log again: every row
// must be there exactly once, and nothing a crash leaves behind.
func TestWriter_Kill9(t *testing.T) {
	for _, after := range []time.Duration{30 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond, 900 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), killDirEnv+"="+dir)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 30*time.Second, "the child to start writing", func() bool {
				_, err := os.Stat(filepath.Join(dir, "started"))
				return err == nil
			})
			time.Sleep(after) // a moment in the run; any moment must do
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()

			w := open(t, killOptions(dir))
			from := w.Durable()
			rs := killRows()
			if err := feed(w, rs); err != nil {
				t.Fatal(err)
			}
			mustClose(t, w)
			t.Logf("killed after %v with rows up to %d in files", after, from)
			checkOnce(t, readLake(t, dir, "m"), rs, time.UTC)
			var parquets int
			for _, f := range allFiles(t, dir) {
				if strings.HasSuffix(f, ".tmp") {
					t.Errorf("temporary file %s left", f)
				}
				if strings.HasSuffix(f, ".parquet") {
					parquets++
				}
			}
			if live, _ := lake.Files(dir); len(live) != parquets {
				t.Errorf("%d files on disk, %d live: covered files left", parquets, len(live))
			}
		})
	}
}
