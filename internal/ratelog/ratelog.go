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

// Backoff lets the first line of a run of failures through at once, then
// one after each step of a doubling delay (Min, 2·Min, ... up to Max),
// each saying how many were held back since the last: a failure that
// repeats every quarter second logs a handful of lines in its first
// minute, then one per Max. Reset, on success, starts the next run at
// once again. The zero value lets every line through. It is safe for
// concurrent use.
type Backoff struct {
	Min, Max time.Duration

	mu         sync.Mutex
	next       time.Time     // no line before this, in a run
	step       time.Duration // the delay after the next line let through
	suppressed int
	now        func() time.Time // tests only
}

// Allow reports whether to log now, and how many lines were held back
// since the last one logged.
func (b *Backoff) Allow() (bool, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.now != nil {
		now = b.now()
	}
	if now.Before(b.next) {
		b.suppressed++
		return false, 0
	}
	if b.step == 0 {
		b.step = b.Min
	}
	n := b.suppressed
	b.next, b.suppressed = now.Add(b.step), 0
	b.step = min(2*b.step, b.Max)
	return true, n
}

// Reset ends a run of failures, returning how many lines were held back
// since the last one logged (for the line that says it is over).
func (b *Backoff) Reset() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.suppressed
	b.next, b.step, b.suppressed = time.Time{}, 0, 0
	return n
}
