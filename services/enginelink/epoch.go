package enginelink

import (
	"sync"
	"time"
)

// epochClock mints epochs: wall-clock nanoseconds, strictly increasing within the process, so
// an epoch minted later (a restart, or a new link process) is always newer.
type epochClock struct {
	mu   sync.Mutex
	last uint64
	now  func() time.Time
}

func (c *epochClock) mint() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := uint64(c.now().UnixNano())
	if e <= c.last {
		e = c.last + 1
	}
	c.last = e
	return e
}

// engineEpoch is the epoch shared by one engine's KV streams (all DP ranks) and its load
// reports. A rank that sees the engine restart mints a new one; the other ranks learn of it
// through changed and resynchronise.
type engineEpoch struct {
	clock *epochClock

	mu      sync.Mutex
	epoch   uint64
	changed chan struct{} // closed when epoch changes
}

func newEngineEpoch(clock *epochClock) *engineEpoch {
	return &engineEpoch{clock: clock, epoch: clock.mint(), changed: make(chan struct{})}
}

// current returns the epoch and a channel closed when it changes.
func (e *engineEpoch) current() (uint64, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.epoch, e.changed
}

// restart mints a new epoch if seen is still the current one (so ranks seeing the same
// restart mint only once) and returns the current epoch and whether this call minted it.
func (e *engineEpoch) restart(seen uint64) (uint64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.epoch != seen {
		return e.epoch, false
	}
	e.epoch = e.clock.mint()
	close(e.changed)
	e.changed = make(chan struct{})
	return e.epoch, true
}
