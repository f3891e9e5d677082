package kvindex

import (
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

// BenchmarkApplyAlternating compares, in one process and at a fine grain
// (so that both see the same machine load), BenchmarkApply's events
// applied one Store call per event and the same events applied one Apply
// call per record of 8 events (a 32-block chain of one engine): equal
// indexes, one per way, take turns a wrap at a time (32,768 events, after
// which every engine is removed, as in BenchmarkApply), each wrap timed on
// the thread's CPU clock; a third index takes the records through Apply
// without its next-event prefetch. One b.N iteration is one wrap of each,
// in a rotating order. It reports blocks per CPU second of each way and
// the ratios.
func BenchmarkApplyAlternating(b *testing.B) {
	if _, ok := threadCPU(); !ok {
		b.Skip("needs the thread CPU clock")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	evs := applyEvents()
	const per = 8
	type rec struct {
		h   Holder
		evs []kvevents.Event
	}
	var recs []rec
	for i := 0; i < len(evs); i += per {
		r := rec{h: evs[i].h}
		for _, e := range evs[i : i+per] {
			r.evs = append(r.evs, kvevents.Event{Kind: kvevents.KindBlockStored, Stored: e.ev})
		}
		recs = append(recs, r)
	}
	// Three ways, each with its own index, in a rotating order.
	ways := []struct {
		name string
		ix   *Index
		cpu  int64
		run  func(ix *Index)
	}{
		{name: "store", run: func(ix *Index) {
			for _, e := range evs {
				if err := ix.Store(e.h, nsA, e.ev); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{name: "apply8", run: func(ix *Index) {
			errs := make([]error, per)
			for j := range recs {
				ix.Apply(recs[j].h, nsA, recs[j].evs, errs)
			}
		}},
		{name: "apply8-noprefetch", run: func(ix *Index) {
			applyPrefetchNext = false
			defer func() { applyPrefetchNext = true }()
			errs := make([]error, per)
			for j := range recs {
				ix.Apply(recs[j].h, nsA, recs[j].evs, errs)
			}
		}},
	}
	for k := range ways {
		ways[k].ix, _ = New(Config{MaxNodes: 1 << 20})
	}
	for i := 0; b.Loop(); i++ {
		for k := range ways {
			w := &ways[(i+k)%len(ways)]
			c0, _ := threadCPU()
			w.run(w.ix)
			c1, _ := threadCPU()
			w.cpu += c1 - c0
			for e := range 64 {
				w.ix.RemoveEngine(slots.Slot(e))
			}
		}
	}
	blocks := float64(b.N) * float64(len(evs)) * 4
	for _, w := range ways {
		b.ReportMetric(blocks/(float64(w.cpu)/1e9), w.name+"-blocks/cpu-s")
	}
	b.ReportMetric(float64(ways[0].cpu)/float64(ways[1].cpu), "apply8/store-speed")
	b.ReportMetric(float64(ways[2].cpu)/float64(ways[1].cpu), "apply8/noprefetch-speed")
}
