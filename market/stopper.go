package market

// Stopper supervises the long-lived goroutines of a source: it starts
// each with the way to stop it, and Stop stops them in the reverse order
// of their start, each one's stop then a wait until it has returned, so a
// part stops only after every part downstream of it has drained what it
// sent. Both sources start their goroutines through one.
type Stopper struct {
	parts []stoppable
}

type stoppable struct {
	stop func()
	done chan struct{}
}

// Go runs run in a goroutine of its own; stop is what makes it return.
func (s *Stopper) Go(run, stop func()) {
	p := stoppable{stop: stop, done: make(chan struct{})}
	s.parts = append(s.parts, p)
	go func() {
		defer close(p.done)
		run()
	}()
}

// Stop stops every goroutine, the last started first, and waits for each.
func (s *Stopper) Stop() {
	for i := len(s.parts) - 1; i >= 0; i-- {
		s.parts[i].stop()
		<-s.parts[i].done
	}
	s.parts = nil
}
