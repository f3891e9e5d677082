package ingest

import (
	"io"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// eventByEvent hides state/kvindex's Apply, so that the ingester applies a
// record's events one call each.
type eventByEvent struct{ ix *kvindex.Index }

func (e eventByEvent) Store(h Holder, ns Namespace, ev *kvevents.BlockStored) error {
	return e.ix.Store(h, ns, ev)
}
func (e eventByEvent) Remove(h Holder, ev *kvevents.BlockRemoved) { e.ix.Remove(h, ev) }
func (e eventByEvent) Clear(h Holder)                             { e.ix.Clear(h) }
func (e eventByEvent) RemoveEngine(s slots.Slot)                  { e.ix.RemoveEngine(s) }
func (e eventByEvent) WriteSnapshot(w io.Writer, names *slots.Table) error {
	return e.ix.WriteSnapshot(w, names)
}
func (e eventByEvent) Digest() uint64 { return e.ix.Digest() }

// multiEventRecords returns n records of 1–10 events each from 3 engines:
// chains continued across the record's events, removals, clears, a LoRA
// override, other media, an unknown parent, with duplicates,
// gaps and epoch bumps between records.
func multiEventRecords(t *testing.T, seed uint64, n int) []*kgo.Record {
	r := rand.New(rand.NewPCG(seed, 3))
	type eng struct {
		id         string
		epoch, seq uint64
		held       []uint64
	}
	engs := []*eng{{id: "e0", epoch: 1}, {id: "e1", epoch: 1}, {id: "e2", epoch: 1}}
	next := uint64(1)
	var out []*kgo.Record
	for len(out) < n {
		e := engs[r.IntN(len(engs))]
		switch x := r.IntN(40); {
		case x == 0 && len(out) > 0:
			last := out[len(out)-1]
			out = append(out, &kgo.Record{Key: last.Key, Value: last.Value})
			continue
		case x == 1:
			e.seq += 2
		case x == 2:
			e.epoch, e.seq, e.held = e.epoch+1, 0, nil
		}
		e.seq++
		b := &sluicev1.KvEventBatch{EngineId: e.id, Epoch: e.epoch, Seq: e.seq, Model: "m"}
		var last *uint64
		for range 1 + r.IntN(10) {
			switch y := r.IntN(20); {
			case y < 13:
				k := 1 + r.IntN(6)
				st := &sluicev1.BlockStored{BlockSize: 4}
				if last != nil && r.IntN(4) > 0 {
					p := *last
					st.ParentBlockHash = &p
				} else if r.IntN(12) == 0 {
					p := uint64(1) << 50
					st.ParentBlockHash = &p // unknown
				}
				for i := range k {
					st.BlockHashes = append(st.BlockHashes, next)
					e.held = append(e.held, next)
					for j := range 4 {
						st.TokenIds = append(st.TokenIds, uint32(r.IntN(3)*1000+i*4+j))
					}
					next++
				}
				switch r.IntN(10) {
				case 0:
					st.LoraName = "adapter"
				case 1:
					st.Medium = sluicev1.Medium(1 + r.IntN(2))
				}
				h := st.BlockHashes[k-1]
				last = &h
				b.Events = append(b.Events, &sluicev1.KvEvent{Event: &sluicev1.KvEvent_BlockStored{BlockStored: st}})
			case y < 18 && len(e.held) > 0:
				rm := &sluicev1.BlockRemoved{}
				for range 1 + r.IntN(3) {
					rm.BlockHashes = append(rm.BlockHashes, e.held[r.IntN(len(e.held))])
				}
				b.Events = append(b.Events, &sluicev1.KvEvent{Event: &sluicev1.KvEvent_BlockRemoved{BlockRemoved: rm}})
			case y >= 18:
				b.Events = append(b.Events, &sluicev1.KvEvent{Event: &sluicev1.KvEvent_AllBlocksCleared{AllBlocksCleared: &sluicev1.AllBlocksCleared{}}})
				e.held, last = nil, nil
			}
		}
		out = append(out, kvProto(t, b))
	}
	return out
}

// TestKVRecordBatchMatchesEventByEvent feeds the same multi-event records
// to an ingester over state/kvindex (which applies each record with one
// Apply call) and to one over the same index with Apply hidden (one call
// per event): after every record the two indexes must have equal digests
// and the ingesters equal stats.
func TestKVRecordBatchMatchesEventByEvent(t *testing.T) {
	for seed := range uint64(8) {
		recs := multiEventRecords(t, seed, 300)
		mk := func(wrap bool) (*KVIngester, *kvindex.Index) {
			ix, err := kvindex.New(kvindex.Config{MaxNodes: []int{0, 200}[seed%2]})
			if err != nil {
				t.Fatal(err)
			}
			var idx KVIndex = ix
			if wrap {
				idx = eventByEvent{ix}
			}
			if _, ok := idx.(batchIndex); ok == wrap {
				t.Fatalf("wrap %v: the index has Apply: %v", wrap, ok)
			}
			k, err := NewKVIngester(testLogger(t), KVConfig{Config: Config{Brokers: []string{"127.0.0.1:1"}}}, idx, slots.NewTable(), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			return k, ix
		}
		ka, a := mk(false)
		kb, b := mk(true)
		for i, rec := range recs {
			feed(t, ka, rec)
			feed(t, kb, rec)
			if a.Digest() != b.Digest() {
				t.Fatalf("seed %d record %d: indexes differ", seed, i)
			}
			if sa, sb := ka.Stats(), kb.Stats(); sa != sb {
				t.Fatalf("seed %d record %d: stats differ:\nbatched      %+v\nevent by event %+v", seed, i, sa, sb)
			}
		}
		if st := ka.Stats(); st.BlocksStored == 0 || st.BlocksRemoved == 0 || st.Cleared == 0 || st.RejectedEvents+st.IgnoredEvents == 0 {
			t.Fatalf("seed %d: the records did not exercise every path: %+v", seed, st)
		}
	}
}
