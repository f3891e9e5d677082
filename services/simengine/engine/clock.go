package engine

import (
	"context"
	"sync"
	"time"
)

// Clock is the engine's source of time. The latency model only ever waits through Sleep, so a
// simulated clock makes a run's timing exact and independent of the machine.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d or until ctx is done, returning ctx's error in the latter case.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the wall clock.
type SystemClock struct{}

var _ Clock = SystemClock{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits on a timer.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StepClock is a virtual clock whose Sleep advances the time at once instead of waiting. It
// makes a sequential simulation (one request at a time, as in a trace replay that serialises
// requests, or a unit test) exact and instant. Concurrent sleepers each advance the shared
// time, so it is not a faithful model of overlapping requests.
type StepClock struct {
	mu  sync.Mutex
	now time.Time
}

var _ Clock = (*StepClock)(nil)

// NewStepClock returns a StepClock reading start.
func NewStepClock(start time.Time) *StepClock { return &StepClock{now: start} }

// Now returns the virtual time.
func (c *StepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep advances the virtual time by d unless ctx is already done.
func (c *StepClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// Advance moves the virtual time forward by d (d <= 0 does nothing).
func (c *StepClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
