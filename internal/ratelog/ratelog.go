// Package ratelog keeps a repeating error from flooding the log: one line
// per period goes through, and the next one says how many were held back.
package ratelog

import (
	"sync"
	"time"
)

// Limiter lets one log line through per Every. The zero value lets every
// line through. It is safe for concurrent use.
type Limiter struct {
	Every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Allow reports whether to log now, and how many lines were suppressed
// since the last one logged.
func (l *Limiter) Allow() (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.Every {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}
