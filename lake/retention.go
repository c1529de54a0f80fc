package lake

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// applyRetention deletes the market's date folders (every series') that
// ended Retention or more before now.
func (w *Writer) applyRetention(now time.Time) error {
	if w.o.Retention <= 0 {
		return nil
	}
	ents, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	deleted := 0
	for _, e := range ents {
		date, ok := strings.CutPrefix(e.Name(), "date=")
		if !ok || !e.IsDir() {
			continue
		}
		_, end, err := DateBounds(date, w.o.Location)
		if err != nil || now.UnixMilli() < end+w.o.Retention.Milliseconds() {
			continue
		}
		if err := os.RemoveAll(filepath.Join(w.dir, e.Name())); err != nil {
			return fmt.Errorf("retention: %w", err)
		}
		deleted++
		w.mu.Lock()
		delete(w.dates, date)
		w.stats.DatesDeleted++
		w.mu.Unlock()
	}
	if deleted > 0 {
		if err := syncDir(w.dir); err != nil {
			return fmt.Errorf("retention: sync %s: %w", w.dir, err)
		}
	}
	return nil
}
