package service

import (
	"net"
	"net/http"

	"github.com/km0/edgeproc/board"
	"github.com/km0/edgeproc/internal/tmath"
	"github.com/km0/edgeproc/market"
	"github.com/km0/edgeproc/result"
)

// attachBoard serves the fleet board (package board) on srv for the
// markets of one listener that have http.board on, and gives each of them
// its feed (sink.board). A market with lake.dir has yesterday's greatest
// distances shown, from its `edgeproc daily` tables. The board's tile template is the first one set
// among them. It returns ln wrapped so that closing the listener — which
// both Shutdown and Close do — stops the board and ends its event streams,
// so a graceful shutdown does not wait for the open pages.
func attachBoard(srv *http.Server, ln net.Listener, ms []*market.Market, deps *Deps) net.Listener {
	var (
		on    []*market.Market
		bms   []board.Market
		tiles string
	)
	for _, m := range ms {
		c := m.Config()
		if !c.HTTP.Board {
			continue
		}
		on = append(on, m)
		bms = append(bms, board.Market{Name: c.Market, Status: boardStatus(m), Area: c.Geo.Area, Timezone: c.Timezone,
			Lake: c.Lake.Dir, Location: c.Location()})
		if tiles == "" {
			tiles = c.HTTP.BoardTiles
		}
	}
	if len(on) == 0 {
		return ln
	}
	hub, err := board.New(board.Config{Markets: bms, Tiles: tiles, Now: deps.Clock, Log: deps.Log})
	if err != nil { // names are unique and non-empty (checkClashes, config)
		deps.Log.Error("fleet board not started", "addr", ln.Addr().String(), "err", err)
		return ln
	}
	for _, m := range on {
		m.SetBoard(hub.Feed(m.Config().Market))
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

// boardStatus is a market's health as the board shows it. Its source is
// the MQTT broker, or NATS for a partitioned market.
func boardStatus(m *market.Market) func() board.Status {
	return func() board.Status {
		s := m.Snapshot()
		source := s.HasMQTT && s.MQTT.Connected
		if !s.HasMQTT {
			source = s.HasBridge && s.Bridge.Connected
		}
		return board.Status{
			MQTT:         source,
			NATS:         s.HasBridge && s.Bridge.Connected,
			Watermark:    s.Engine.Watermark,
			HasWatermark: s.HasEngine && s.Engine.Watermark != tmath.Never,
			Received:     s.Engine.Received,
			Late:         s.Engine.LateDistance + s.Engine.LateSession,
			Rejected:     s.Engine.Results[result.Rejected.String()],
		}
	}
}
