package service

import (
	"net"
	"net/http"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/bridge"
	"github.com/km0/edgeproc/internal/tmath"
	"github.com/km0/edgeproc/result"
)

// attachBoard serves the fleet board (package board) on srv for the
// markets of one listener that have http.board on, and gives each of them
// its feed (sink.board). The board's tile template is the first one set
// among them. It returns ln wrapped so that closing the listener — which
// both Shutdown and Close do — stops the board and ends its event streams,
// so a graceful shutdown does not wait for the open pages.
func attachBoard(srv *http.Server, ln net.Listener, ms []*market, deps *Deps) net.Listener {
	var (
		on    []*market
		bms   []board.Market
		tiles string
	)
	for _, m := range ms {
		if !m.cfg.HTTP.Board {
			continue
		}
		on = append(on, m)
		bms = append(bms, board.Market{Name: m.cfg.Market, Status: m.boardStatus})
		if tiles == "" {
			tiles = m.cfg.HTTP.BoardTiles
		}
	}
	if len(on) == 0 {
		return ln
	}
	hub, err := board.New(board.Config{Markets: bms, Tiles: tiles, Now: deps.Clock})
	if err != nil { // names are unique and non-empty (checkClashes, config)
		deps.Log.Error("fleet board not started", "addr", ln.Addr().String(), "err", err)
		return ln
	}
	for _, m := range on {
		m.snk.board = hub.Feed(m.cfg.Market)
	}
	mux := http.NewServeMux()
	bh := hub.Handler()
	mux.Handle("/board", bh)
	mux.Handle("/board/", bh)
	mux.Handle("/", srv.Handler)
	srv.Handler = mux
	deps.Log.Info("fleet board", "url", "http://"+ln.Addr().String()+"/board/")
	return &boardListener{Listener: ln, hub: hub}
}

// boardListener stops its board when it is closed.
type boardListener struct {
	net.Listener
	hub *board.Hub
}

func (l *boardListener) Close() error {
	err := l.Listener.Close()
	l.hub.Close()
	return err
}

// onPosition is the engine's OnPosition: every valid position goes to the
// courier bucket and, at the same point, to the board.
func (m *market) onPosition(br *bridge.Bridge) func(courier []byte, ts int64, lat, lon float64) {
	if m.snk.board == nil {
		return br.UpdatePosition
	}
	f := m.snk.board
	return func(courier []byte, ts int64, lat, lon float64) {
		br.UpdatePosition(courier, ts, lat, lon)
		f.Position(courier, ts, lat, lon)
	}
}

// boardStatus is the market's health as the board shows it.
func (m *market) boardStatus() board.Status {
	s := m.snapshot()
	return board.Status{
		MQTT:         s.HasMQTT && s.MQTT.Connected,
		NATS:         s.HasBridge && s.Bridge.Connected,
		Watermark:    s.Engine.Watermark,
		HasWatermark: s.HasEngine && s.Engine.Watermark != tmath.Never,
		Received:     s.Engine.Received,
		Late:         s.Engine.LateDistance + s.Engine.LateSession,
		Rejected:     s.Engine.Results[result.Rejected.String()],
	}
}
