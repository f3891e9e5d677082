package enginelink

import (
	"slices"
	"sync"

	"github.com/segmentio/kafka-go"
)

// partitionGate holds a partition's records back while an earlier produce request for that
// partition is unanswered, and hands them to the writer together when it is answered
// (docs/architecture.md, "Data flow", step 2). kafka-go's writer sends one partition's batches one after
// another, and closes each batch when its linger expires whether or not the previous one is
// still in flight. Records arriving faster than the broker answers then queued in batches of
// one or two, each a produce request of its own: the partition sent one request per
// round trip however many records waited, and a slow or cold broker let the queue grow (the
// peer benchmark at a 10 ms scrape, on a broker fresh from its start: load reports acked 370
// ms after their scrape on average; 39 ms with the gate, BENCHMARKS.md). Held back here,
// the records that arrive during a round trip leave in the next request, so a partition's
// throughput grows with its backlog instead of staying at one batch per round trip, and the
// first record after a quiet spell goes at once.
//
// Holding back never reorders a key: its records reach the writer in arrival order, and the
// writer keeps a partition's order. The gate finds a record's partition with the writer's own
// balancer over the partitions the writer last balanced over, so before the first write, or
// while a topic grows, a record may pass the gate early; the writer still orders it. Held-back
// records count in the producer's buffered records, so MaxBufferedRecords bounds them too.
type partitionGate struct {
	hash kafka.Hash

	mu       sync.Mutex
	parts    []int                   // the partitions the writer balanced over last; nil before its first write
	inflight map[int]int             // records handed to the writer per partition, not yet completed
	held     map[int][]kafka.Message // records held back per partition, in arrival order
	nheld    int
	opened   []int // admit's scratch: partitions opened by the current call
}

func newPartitionGate() *partitionGate {
	return &partitionGate{inflight: map[int]int{}, held: map[int][]kafka.Message{}}
}

// Balance implements kafka.Balancer for the writer: the gate's hash balancer, remembering the
// partitions it was given so that admit can place records the same way.
func (g *partitionGate) Balance(msg kafka.Message, partitions ...int) int {
	g.mu.Lock()
	if !slices.Equal(g.parts, partitions) {
		g.parts = slices.Clone(partitions)
	}
	g.mu.Unlock()
	return g.hash.Balance(msg, partitions...)
}

// noPartition marks a record that passed the gate without a known partition (before the
// writer's first balancing): nothing to account when it completes.
const noPartition = -1

// admit appends to out the records of msgs that may go to the writer now, in order, and holds
// back the others: those of a partition with records in flight or held. Records of a
// partition opened by this call go with it. Every admitted record carries its partition in
// WriterData for done.
func (g *partitionGate) admit(msgs []kafka.Message, out []kafka.Message) []kafka.Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opened = g.opened[:0]
	for _, m := range msgs {
		part := noPartition
		if len(g.parts) > 0 && m.Key != nil { // a keyless record is balanced round-robin: not placed here
			part = g.hash.Balance(m, g.parts...)
			if (g.inflight[part] > 0 || len(g.held[part]) > 0) && !slices.Contains(g.opened, part) {
				g.held[part] = append(g.held[part], m)
				g.nheld++
				continue
			}
			if g.inflight[part] == 0 {
				g.opened = append(g.opened, part)
			}
			g.inflight[part]++
		}
		m.WriterData = part
		out = append(out, m)
	}
	return out
}

// done accounts completed (acked or failed) records; it reports whether a partition with
// records held back has none in flight any more, so release has work.
func (g *partitionGate) done(msgs []kafka.Message) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ready := false
	for i := range msgs {
		part, ok := msgs[i].WriterData.(int)
		if !ok || part == noPartition {
			continue
		}
		if g.inflight[part]--; g.inflight[part] <= 0 {
			delete(g.inflight, part)
			ready = ready || len(g.held[part]) > 0
		}
	}
	return ready
}

// release appends to out the held records of every partition with nothing in flight (all of
// them when all is set, as at shutdown), in order, and accounts them as in flight.
func (g *partitionGate) release(out []kafka.Message, all bool) []kafka.Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	for part, ms := range g.held {
		if !all && g.inflight[part] > 0 {
			continue
		}
		for _, m := range ms {
			m.WriterData = part
			out = append(out, m)
		}
		g.inflight[part] += len(ms)
		g.nheld -= len(ms)
		clear(ms)
		delete(g.held, part)
	}
	return out
}
