package board

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/km0/edgeproc/daily"
)

// Yesterday's greatest distances (see the package doc): a loader, on its
// own goroutine, looks for each market's table and reads what changed;
// the hub's goroutine keeps the views and sends them to the pages.

// Defaults of the daily view.
const (
	// DefaultDailyTop is Config.DailyTop's default.
	DefaultDailyTop = 10
	// DefaultDailyEvery is Config.DailyEvery's default.
	DefaultDailyEvery = time.Minute
)

// What the board has of a market's table of yesterday: sent as "state".
const (
	dailyOK          = "ok"          // read
	dailyMissing     = "missing"     // not written yet: `edgeproc daily` has not run for the date
	dailyUnavailable = "unavailable" // there, but could not be read (logged)
)

// dailyView is a market's yesterday as the board shows it.
type dailyView struct {
	date     string
	state    string
	couriers int     // records in the table
	distance float64 // their distance_m, summed
	top      []dailyTop
}

// dailyTop is a courier of the greatest distances.
type dailyTop struct {
	courier   string
	distance  float64
	positions int64
}

// dailyChange is a market's new view, from the loader to the hub.
type dailyChange struct {
	market int
	view   dailyView
}

// stamp is what says a table file changed: rewriting it (`edgeproc daily`
// replaces it whole, by a rename) changes its modification time.
type stamp struct {
	mod  int64 // ns since the Unix epoch
	size int64
}

// dailyMarket is the loader's state of one market with a lake.
type dailyMarket struct {
	index      int // in Config.Markets
	name, lake string
	loc        *time.Location
	// What the last look found: the date, the table's stamp (zero when
	// there was none) and whether the look itself failed.
	looked bool
	date   string
	at     stamp
	failed bool
}

// dailyLoader finds and reads the markets' tables of yesterday. It is
// owned by one goroutine (Hub.runDaily), or a test.
type dailyLoader struct {
	markets []dailyMarket
	top     int
	log     *slog.Logger
	reads   int // tables read, for tests
}

func newDailyLoader(cfg Config) *dailyLoader {
	l := &dailyLoader{top: cfg.DailyTop, log: cfg.Log}
	for i, m := range cfg.Markets {
		if m.Lake == "" {
			continue
		}
		loc := m.Location
		if loc == nil {
			loc = time.UTC
		}
		l.markets = append(l.markets, dailyMarket{index: i, name: m.Name, lake: m.Lake, loc: loc})
	}
	return l
}

// check looks, as of now, for each market's table of yesterday, and
// reads it if the date or the file changed since the last look. It
// returns the views that changed. A table that cannot be read is logged
// once, and read again only once it changes.
func (l *dailyLoader) check(now time.Time) []dailyChange {
	var out []dailyChange
	for i := range l.markets {
		m := &l.markets[i]
		date := daily.Yesterday(now, m.loc)
		path := daily.TablePath(m.lake, m.name, date)
		at, err := statTable(path)
		if m.looked && m.date == date && m.at == at && m.failed == (err != nil) {
			continue
		}
		m.looked, m.date, m.at, m.failed = true, date, at, err != nil
		v := dailyView{date: date, state: dailyMissing}
		if err == nil && at != (stamp{}) {
			v, err = l.read(path, date)
		}
		if err != nil {
			v = dailyView{date: date, state: dailyUnavailable}
			l.log.Error("fleet board: yesterday's distances unavailable", "market", m.name, "date", date, "err", err)
		}
		out = append(out, dailyChange{m.index, v})
	}
	return out
}

// statTable returns the stamp of the table at path, zero when there is
// none.
func statTable(path string) (stamp, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return stamp{}, nil
	}
	if err != nil {
		return stamp{}, fmt.Errorf("look for the daily table: %w", err)
	}
	return stamp{st.ModTime().UnixNano(), st.Size()}, nil
}

// read reads the table at path, keeping its l.top greatest distances
// (of equal ones, the first courier id in byte order: the table's
// order). A table removed since it was found is missing again.
func (l *dailyLoader) read(path, date string) (dailyView, error) {
	l.reads++
	v := dailyView{date: date, state: dailyOK, top: make([]dailyTop, 0, l.top)}
	err := daily.ReadTable(path, func(r *daily.Record) error {
		v.couriers++
		v.distance += r.DistanceM
		v.top = offerTop(v.top, l.top, dailyTop{r.Courier, r.DistanceM, r.Positions})
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return dailyView{date: date, state: dailyMissing}, nil
	}
	for i := range v.top {
		v.top[i].courier = strings.Clone(v.top[i].courier) // not the decoder's buffer, kept a day
	}
	return v, err
}

// offerTop inserts e in top (greatest distance first, at most n) if it
// belongs there. Of equal distances the one offered first stays first.
func offerTop(top []dailyTop, n int, e dailyTop) []dailyTop {
	if len(top) == n && e.distance <= top[n-1].distance {
		return top
	}
	k := len(top)
	if k < n {
		top = append(top, e)
	} else {
		k = n - 1
	}
	for ; k > 0 && e.distance > top[k-1].distance; k-- {
		top[k] = top[k-1]
	}
	top[k] = e
	return top
}

// runDaily is the loader's goroutine: a look at start, then one every
// DailyEvery, each change handed to the hub's goroutine.
func (h *Hub) runDaily(l *dailyLoader) {
	t := time.NewTicker(h.cfg.DailyEvery)
	defer t.Stop()
	for {
		for _, c := range l.check(h.cfg.Now()) {
			select {
			case h.daily <- c:
			case <-h.done:
				return
			}
		}
		select {
		case <-h.done:
			return
		case <-t.C:
		}
	}
}

// appendDaily appends the "daily" member: the views of the markets in
// the filter (-1: all) that have a lake, as encode documents.
func appendDaily(b []byte, filter int, views []*dailyView) []byte {
	b = append(b, `"daily":[`...)
	first := true
	for i, v := range views {
		if v == nil || filter >= 0 && i != filter {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		m := i
		if filter >= 0 {
			m = 0
		}
		b = append(b, `{"market":`...)
		b = strconv.AppendInt(b, int64(m), 10)
		b = append(b, `,"date":`...)
		b = appendString(b, v.date)
		b = append(b, `,"state":`...)
		b = appendString(b, v.state)
		b = append(b, `,"couriers":`...)
		b = strconv.AppendInt(b, int64(v.couriers), 10)
		b = append(b, `,"distance_m":`...)
		b = strconv.AppendFloat(b, v.distance, 'f', 1, 64)
		b = append(b, `,"top":[`...)
		for k, t := range v.top {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"courier":`...)
			b = appendString(b, t.courier)
			b = append(b, `,"distance_m":`...)
			b = strconv.AppendFloat(b, t.distance, 'f', 1, 64)
			b = append(b, `,"positions":`...)
			b = strconv.AppendInt(b, t.positions, 10)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	return append(b, ']')
}
