package simengine

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/services/simengine/engine"
)

// eventQueue holds the engine's KV events between two batches of a publisher (Kafka or ZMQ).
// The engine's Sink only appends, under the engine's lock, so it never waits on I/O; beyond
// maxPendingEvents new events are dropped and counted, and take reports how many batches'
// worth were dropped so the publisher skips that many seqs: subscribers see the gap.
type eventQueue struct {
	dropped prometheus.Counter

	mu      sync.Mutex
	pending []engine.Event
	skipped int // batches' worth of events dropped since the last take
}

// add is the engine's Sink.
func (q *eventQueue) add(evs []engine.Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending)+len(evs) > maxPendingEvents {
		q.dropped.Add(float64(len(evs)))
		q.skipped++
		return
	}
	q.pending = append(q.pending, evs...)
}

// take returns the pending events and the batches dropped since the last take, and empties
// the queue.
func (q *eventQueue) take() (evs []engine.Event, skipped int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	evs, skipped = q.pending, q.skipped
	q.pending, q.skipped = nil, 0
	return evs, skipped
}
