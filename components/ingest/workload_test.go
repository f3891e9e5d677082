package ingest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// workload generates a deterministic KV-event stream over a few engines and
// ranks, with the faults the epoch/seq rules handle: duplicates (a record
// sent twice), seq gaps, epoch bumps (engine restarts) and clears.
type workload struct {
	t       testing.TB
	rng     *rand.Rand
	holders []*wlHolder
	last    *kgo.Record
	next    uint64 // next block hash
}

type wlHolder struct {
	engine     string
	rank       int32
	epoch, seq uint64
	held       []uint64
}

func newWorkload(t testing.TB, engines, ranks int, seed uint64) *workload {
	w := &workload{t: t, rng: rand.New(rand.NewPCG(seed, 1)), next: 1}
	for e := range engines {
		for r := range ranks {
			w.holders = append(w.holders, &wlHolder{engine: fmt.Sprintf("engine-%02d", e), rank: int32(r), epoch: 1})
		}
	}
	return w
}

// records returns the next n records.
func (w *workload) records(n int) []*kgo.Record {
	out := make([]*kgo.Record, 0, n)
	for len(out) < n {
		h := w.holders[w.rng.IntN(len(w.holders))]
		x := w.rng.IntN(100)
		if x < 4 && w.last != nil {
			// A fresh record with the same content: a produced record carries
			// the context, partition and offset of its produce call.
			out = append(out, &kgo.Record{Key: w.last.Key, Value: w.last.Value, Headers: w.last.Headers})
			continue
		}
		switch {
		case x < 6:
			h.seq += 2 // a lost batch
		case x < 8:
			h.epoch++
			h.seq = 0
			h.held = nil
		}
		h.seq++
		var b *sluicev1.KvEventBatch
		switch y := w.rng.IntN(100); {
		case y < 3:
			b = cleared(h.engine, h.rank, h.epoch, h.seq)
			h.held = nil
		case y < 30 && len(h.held) > 0:
			k := 1 + w.rng.IntN(min(len(h.held), 4))
			b = removed(h.engine, h.rank, h.epoch, h.seq, h.held[:k]...)
			h.held = h.held[k:]
		default:
			k := 1 + w.rng.IntN(4)
			b = stored(h.engine, h.rank, h.epoch, h.seq, w.next, k)
			for i := range k {
				h.held = append(h.held, w.next+uint64(i))
			}
			w.next += uint64(k)
		}
		w.last = kvProto(w.t, b)
		out = append(out, w.last)
	}
	return out
}
