package console

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/state/config"
)

func seqs(recs []Record) []uint64 {
	out := []uint64{}
	for _, r := range recs {
		out = append(out, r.Seq)
	}
	return out
}

func TestTailSince(t *testing.T) {
	tail := NewTail()
	if recs, next, lost := tail.Since(0, 0, nil); len(recs) != 0 || next != 0 || lost != 0 {
		t.Fatalf("empty tail: %v %d %d", recs, next, lost)
	}
	for range 5 {
		tail.Put(&Record{})
	}
	recs, next, lost := tail.Since(2, 0, nil)
	if diff := cmp.Diff([]uint64{3, 4, 5}, seqs(recs)); diff != "" || next != 5 || lost != 0 {
		t.Errorf("Since(2) mismatch (-want +got):\n%s next %d lost %d", diff, next, lost)
	}
	recs, next, _ = tail.Since(0, 2, nil)
	if diff := cmp.Diff([]uint64{1, 2}, seqs(recs)); diff != "" || next != 2 {
		t.Errorf("Since(0, limit 2) mismatch (-want +got):\n%s next %d", diff, next)
	}
	// Overrun: a reader TailSize+10 behind loses the 10 oldest and is told so.
	for range TailSize + 10 {
		tail.Put(&Record{})
	}
	recs, next, lost = tail.Since(5, 0, nil)
	if len(recs) != TailSize || lost != 10 || recs[0].Seq != 16 || next != 5+TailSize+10 {
		t.Errorf("overrun: %d records from %d, lost %d, next %d; want %d from 16, lost 10, next %d",
			len(recs), recs[0].Seq, lost, next, TailSize, 5+TailSize+10)
	}
	if _, ok := tail.Get(3); ok {
		t.Error("Get(3) found a record the tail overwrote")
	}
	if r, ok := tail.Get(next); !ok || r.Seq != next {
		t.Errorf("Get(%d) = %v, %v", next, r, ok)
	}
}

// TestTailConcurrent: writers never wait; a reader following them sees every sequence number
// once, in order, or counts it lost.
func TestTailConcurrent(t *testing.T) {
	tail := NewTail()
	const writers, each = 4, 20000
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				tail.Put(&Record{Model: "m"})
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var next, seen, lost uint64
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		recs, n, l := tail.Since(next, 0, nil)
		for i, r := range recs {
			if i > 0 && r.Seq <= recs[i-1].Seq {
				t.Fatalf("out of order: %d after %d", r.Seq, recs[i-1].Seq)
			}
		}
		seen, lost, next = seen+uint64(len(recs)), lost+l, n
	}
	recs, _, l := tail.Since(next, 0, nil)
	seen, lost = seen+uint64(len(recs)), lost+l
	if seen+lost != writers*each {
		t.Errorf("seen %d + lost %d = %d, want %d", seen, lost, seen+lost, writers*each)
	}
}

func TestWantSample(t *testing.T) {
	tail := NewTail()
	now := time.Now().UnixNano()
	for _, tc := range []struct {
		name string
		at   int64
		n    int
		want bool
	}{
		{"no token ids", now, 0, false},
		{"too many token ids", now, MaxSampleTokenIDs + 1, false},
		{"first", now, 10, true},
		{"within the interval", now + int64(SampleEvery)/2, 10, false},
		{"after the interval", now + int64(SampleEvery), 10, true},
	} {
		if got := tail.WantSample(tc.at, tc.n); got != tc.want {
			t.Errorf("%s: WantSample = %v, want %v", tc.name, got, tc.want)
		}
	}
	for range SampleQueue + 5 {
		tail.Offer(Sample{}) // a full queue drops, never blocks
	}
	if len(tail.samples) != SampleQueue {
		t.Errorf("queue holds %d, want %d", len(tail.samples), SampleQueue)
	}
}

func TestFirstFit(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	doc := &config.Document{Buckets: []config.BucketSpec{
		{ID: "long", Rank: 0, Models: []string{"m"}},
		{ID: "short", Rank: 5, Models: []string{"m"}, Limits: config.Limits{Max: i64(4096)}},
		{ID: "ctx", Rank: 1, Limits: config.Limits{Min: 10}, MaxContextTokens: i64(2048)},
	}}
	order := bucketOrder(doc)
	for _, tc := range []struct {
		model       string
		input, peak int64
		want        string
	}{
		{"m", 100, 0, "ctx"},      // capacity 2048 sorts first and takes every model
		{"m", 5, 0, "short"},      // below ctx's min
		{"m", 100, 3000, "short"}, // peak above ctx's context
		{"m", 5000, 0, "long"},
		{"other", 100, 0, "ctx"},
		{"other", 5000, 0, ""},
	} {
		if got := firstFit(order, tc.model, tc.input, tc.peak); got != tc.want {
			t.Errorf("firstFit(%s, %d, %d) = %q, want %q", tc.model, tc.input, tc.peak, got, tc.want)
		}
	}
}
