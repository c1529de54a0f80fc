package partition

import (
	"context"
	"fmt"
	"io"
	"iter"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/km0/edgeproc/board"
)

// checkBoard checks p's fleet board: the page of every market and of
// market answer, and its event stream's snapshot shows the market
// connected, at watermark wm (ms), every courier of mine at its newest
// position, and every other courier of the market (others, which the
// board reads from NATS) never ahead of it. It returns how many couriers
// of mine it checked (0: mine was empty). The snapshot is taken up to three times, 0.6 s apart: the
// market's status is sampled once per board interval (0.5 s).
func checkBoard(t *testing.T, p *proc, market string, wm int64, mine, others iter.Seq2[string, newestPosition]) int {
	t.Helper()
	for path, want := range map[string]string{"/board/": "all markets", "/board/" + market: `data-market="` + market + `"`} {
		res, err := metricsClient.Get("http://" + p.listen + path)
		if err != nil {
			t.Errorf("instance %s: GET %s: %v", p.name, path, err)
			continue
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), want) {
			t.Errorf("instance %s: GET %s: %d %s (%v), %d bytes; want 200, the page with %q", p.name, path, res.StatusCode, res.Header.Get("Content-Type"), err, len(body), want)
		}
	}
	// The first page to open starts the board's feed of the other
	// partitions (partition/board.go): their couriers come once it has
	// read the courier bucket, so a snapshot may lack them for a moment.
	var problem string
	opened := time.Now()
	for deadline := opened.Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var shown int
		if problem, shown = boardProblem(p.listen, market, wm, mine, others); problem == "" {
			t.Logf("instance %s: board snapshot shows %d couriers of its partitions at their newest position, and the market's others (%v after the first page opened)",
				p.name, shown, time.Since(opened).Round(10*time.Millisecond))
			return shown
		}
	}
	t.Errorf("instance %s: board: %s", p.name, problem)
	return 0
}

// boardProblem reads the first message (the snapshot) of p's board event
// stream for market and says what is wrong with it, "" if nothing, with
// the number of couriers of mine it showed.
func boardProblem(listen, market string, wm int64, mine, others iter.Seq2[string, newestPosition]) (string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+listen+"/board/events?market="+market, nil)
	if err != nil {
		return err.Error(), 0
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error(), 0
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || ct != "text/event-stream" {
		return fmt.Sprintf("/board/events: %d %s", res.StatusCode, ct), 0
	}
	u, _, err := board.NewStream(res.Body).Next()
	switch {
	case err != nil:
		return "/board/events: " + err.Error(), 0
	case !u.Full || len(u.Markets) != 1 || u.Markets[0].Name != market:
		return fmt.Sprintf("/board/events: first message full %v, markets %+v; want the snapshot of %s", u.Full, u.Markets, market), 0
	}
	m := u.Markets[0]
	if !m.NATS || !m.MQTT {
		return fmt.Sprintf("market %s shown with NATS %v and its source %v; want both connected", market, m.NATS, m.MQTT), 0
	}
	if m.LagMS == nil {
		return fmt.Sprintf("market %s shown with no watermark; want %d", market, wm), 0
	}
	if u.Now-*m.LagMS != wm {
		return fmt.Sprintf("market %s shown at watermark %d (lag %d ms at %d); want %d", market, u.Now-*m.LagMS, *m.LagMS, u.Now, wm), 0
	}
	shown := map[string]board.CourierUpdate{}
	for _, c := range u.Couriers {
		shown[c.ID] = c
	}
	n := 0
	var wrong []string
	for c, w := range mine {
		n++
		// A courier's events the board's mailbox dropped (counted) may
		// leave it behind, never ahead.
		if got, ok := shown[c]; !ok || got.TS > w.ts || u.Dropped == 0 && (got.TS != w.ts || got.Lat != w.lat || got.Lon != w.lon) {
			wrong = append(wrong, fmt.Sprintf("%s: shown %v %+v; newest position %d at %v,%v (partition %d)", c, ok, got, w.ts, w.lat, w.lon, w.partition))
		}
	}
	var missing []string
	for c, w := range others {
		if got, ok := shown[c]; !ok || got.TS > w.ts {
			missing = append(missing, fmt.Sprintf("%s: shown %v %+v; newest position %d (partition %d)", c, ok, got, w.ts, w.partition))
		}
	}
	switch {
	case len(missing) > 0:
		sort.Strings(missing)
		return fmt.Sprintf("%d couriers of the partitions of others missing or ahead in the snapshot (%d shown), first ones:\n%s",
			len(missing), len(u.Couriers), strings.Join(missing[:min(10, len(missing))], "\n")), n
	case len(wrong) > 0:
		sort.Strings(wrong)
		return fmt.Sprintf("%d of %d couriers of its partitions wrong in the snapshot (%d shown, %d events dropped), first ones:\n%s",
			len(wrong), n, len(u.Couriers), u.Dropped, strings.Join(wrong[:min(10, len(wrong))], "\n")), n
	}
	return "", n
}
