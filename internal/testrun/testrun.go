// Package testrun runs a component's Run(ctx) loop for the length of a test: every package whose
// background work is a Run(ctx) method (services, ingesters, stores, trackers) starts it the same
// way, and a Run that fails, or does not return soon after its context is cancelled, fails the
// test.
package testrun

import (
	"context"
	"testing"
	"time"
)

// StopTimeout bounds how long Background waits for run to return after cancelling its context.
const StopTimeout = 15 * time.Second

// Background starts run in a goroutine with a context cancelled when the test ends, then checks
// that run returned nil within StopTimeout.
func Background(t testing.TB, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(StopTimeout):
			t.Errorf("Run did not return within %v of cancellation", StopTimeout)
		}
	})
}
