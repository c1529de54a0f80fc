package board

import (
	"embed"
	"html/template"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

var page = template.Must(template.ParseFS(static, "static/index.html"))

// Handler serves the board, read-only (GET and HEAD only):
//
//	/board/             every market
//	/board/{market}     one market
//	/board/events       the event stream of every market (?market= for one)
//	/board/static/…     the page's script and style, embedded
//
// A market named "events" or "static" has no page of its own; the
// all-markets page still shows it.
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(static, "static") // static is embedded: cannot fail
	mux.Handle("GET /board/static/", http.StripPrefix("/board/static/", http.FileServerFS(sub)))
	mux.HandleFunc("GET /board/events", func(w http.ResponseWriter, r *http.Request) {
		m, ok := h.market(r.URL.Query().Get("market"))
		if !ok {
			http.NotFound(w, r)
			return
		}
		h.serveEvents(w, r, m)
	})
	mux.HandleFunc("GET /board/{$}", func(w http.ResponseWriter, r *http.Request) { h.servePage(w, "") })
	mux.HandleFunc("GET /board/{market}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("market")
		if _, ok := h.market(name); !ok || name == "" {
			http.NotFound(w, r)
			return
		}
		h.servePage(w, name)
	})
	mux.Handle("GET /board", http.RedirectHandler("/board/", http.StatusFound))
	return mux
}

// market returns the index of the named market, -1 for "" (all).
func (h *Hub) market(name string) (int, bool) {
	if name == "" {
		return -1, true
	}
	i, ok := h.names[name]
	return i, ok
}

func (h *Hub) servePage(w http.ResponseWriter, market string) {
	title := "all markets"
	if market != "" {
		title = market
	}
	var names []string
	for _, m := range h.cfg.Markets {
		names = append(names, m.Name)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = page.Execute(w, struct {
		Market, Title string
		Markets       []string
	}{market, title, names})
}

// serveEvents streams the board's updates to one page: a snapshot, then
// one update per Interval, until the page goes away, falls behind (it is
// dropped; its EventSource reconnects) or the hub closes.
func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request, market int) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	c := &client{market: market, ch: make(chan []byte, h.cfg.ClientBuffer)}
	select {
	case h.join <- c:
	case <-h.stopped:
		http.Error(w, ErrClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	started := false
	for {
		select {
		case msg, open := <-c.ch:
			if !open {
				if !started && c.refused {
					http.Error(w, "board: too many pages connected", http.StatusServiceUnavailable)
				}
				return
			}
			if !started {
				started = true
				hd := w.Header()
				hd.Set("Content-Type", "text/event-stream")
				hd.Set("Cache-Control", "no-store")
				hd.Set("X-Accel-Buffering", "no")
				msg = append([]byte("retry: 1000\n"), msg...)
			}
			if _, err := w.Write(msg); err != nil {
				h.drop(c)
				return
			}
			fl.Flush()
		case <-r.Context().Done():
			h.drop(c)
			return
		}
	}
}

// drop disconnects a page that went away.
func (h *Hub) drop(c *client) {
	select {
	case h.leave <- c:
	case <-h.stopped:
	}
}
