// Package clock is the time source the state packages take: production passes time.Now, tests and
// trace replays in virtual time pass a Manual clock they move by hand, so freshness, TTLs and
// ordering are checked without sleeping.
package clock

import (
	"sync"
	"time"
)

// Manual is a clock that moves only when told to. It is safe for concurrent use; its zero value
// reads the zero time.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a Manual clock reading t.
func NewManual(t time.Time) *Manual { return &Manual{now: t} }

// Now returns the clock's time; pass the method value (c.Now) where a func() time.Time is wanted.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t (backwards too, for clock-skew cases).
func (c *Manual) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock forward by d.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
