package loadtable

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/state/slots"
)

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	now := time.Now().Round(0).Truncate(time.Millisecond)
	src, _ := New(slots.NewTable(), Config{})
	native := func(tokens, busy int64) *Native {
		return &Native{WaitingUncachedTokens: 100, TotalTokens: 50, MaxRunningRequests: 8,
			PrefillUncachedTokensTotal: tokens, PrefillBusyMicrosTotal: busy}
	}
	for _, r := range []Report{
		{EngineID: "a", Ranks: 2, Rank: 0, Epoch: 3, Seq: 1, CapturedAt: now, Running: 1, KVCapacityTokens: 10, Native: native(100, 1000)},
		{EngineID: "a", Ranks: 2, Rank: 0, Epoch: 3, Seq: 2, CapturedAt: now, Running: 2, KVCapacityTokens: 10, Native: native(300, 2000)},
		{EngineID: "a", Ranks: 2, Rank: 1, Epoch: 3, Seq: 7, CapturedAt: now.Add(-time.Second), Waiting: 4, KVCapacityTokens: 10, Native: native(10, 10)},
		{EngineID: "a", Ranks: 2, Rank: 1, Epoch: 3, Seq: 8, CapturedAt: now.Add(-time.Second), Waiting: 4, KVCapacityTokens: 10, Native: native(20, 20)},
		{EngineID: "b", Epoch: 1, Seq: 1, CapturedAt: now, Running: 5},
	} {
		if err := src.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := src.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	dstSlots := slots.NewTable()
	dstSlots.Intern("unrelated") // slots differ between processes
	dst, _ := New(dstSlots, Config{})
	if err := dst.Apply(Report{EngineID: "gone", CapturedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := dst.ReadSnapshot(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, dst.Engines()); diff != "" {
		t.Errorf("Engines mismatch (-want +got):\n%s", diff)
	}
	for _, id := range []string{"a", "b"} {
		s1, _ := src.slots.Lookup(id)
		s2, _ := dst.slots.Lookup(id)
		v1, ok1 := src.SnapshotAt(now).View(s1)
		v2, ok2 := dst.SnapshotAt(now).View(s2)
		if ok1 != ok2 || !cmp.Equal(v1, v2) {
			t.Errorf("engine %s: view after restore %+v %v, want %+v %v", id, v2, ok2, v1, ok1)
		}
	}
	gone, _ := dstSlots.Lookup("gone")
	if _, ok := dst.SnapshotAt(now).View(gone); ok {
		t.Errorf("engine absent from the snapshot still has a view")
	}
	// Epoch and seq state survive: a duplicate and a stale epoch are refused.
	if err := dst.Apply(Report{EngineID: "a", Ranks: 2, Rank: 1, Epoch: 3, Seq: 8, CapturedAt: now}); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Apply(dup) = %v, want ErrDuplicate", err)
	}
	if err := dst.Apply(Report{EngineID: "a", Epoch: 2, Seq: 99, CapturedAt: now}); !errors.Is(err, ErrStaleEpoch) {
		t.Errorf("Apply(old epoch) = %v, want ErrStaleEpoch", err)
	}
}

func TestReadSnapshotInvalid(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"not json":     "{",
		"version":      `{"version":2,"engines":[]}`,
		"empty id":     `{"version":1,"engines":[{"id":"","epoch":1,"rank":[]}]}`,
		"dup":          `{"version":1,"engines":[{"id":"a","epoch":1,"rank":[]},{"id":"a","epoch":1,"rank":[]}]}`,
		"rank entries": `{"version":1,"engines":[{"id":"a","epoch":1,"ranks":1,"rank":[{},{}]}]}`,
		"unknown":      `{"version":1,"engines":[],"extra":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tbl, _ := New(slots.NewTable(), Config{})
			if err := tbl.ReadSnapshot(strings.NewReader(in)); !errors.Is(err, ErrSnapshot) {
				t.Errorf("ReadSnapshot = %v, want ErrSnapshot", err)
			}
		})
	}
}
