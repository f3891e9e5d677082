package kvindex

import (
	"bytes"
	"testing"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

// TestSnapshotBytesDeterministic: an index with blocks in several
// namespaces (LoRA adapters, cache salts) writes the same bytes every time,
// and so does another index built from the same events; the namespaces
// were once written in map order, which differs from one write to the
// next.
func TestSnapshotBytesDeterministic(t *testing.T) {
	names := slots.NewTable()
	names.Intern("engine-0")
	build := func() *Index {
		ix, _ := New(Config{})
		for i, ns := range []Namespace{nsA, {Model: "m", LoRA: "a"}, {Model: "m", LoRA: "b"}, {Model: "m", CacheSalt: "s"},
			{Model: "m", LoRA: "a", CacheSalt: "s"}, {Model: "n"}, {Model: "o", LoRA: "a"}, {Model: ""}} {
			for _, bs := range []int{2, 4} {
				ev := &kvevents.BlockStored{BlockHashes: []uint64{uint64(i*10 + bs)}, TokenIDs: make([]uint32, bs), BlockSize: bs}
				if err := ix.Store(Holder{}, ns, ev); err != nil {
					t.Fatal(err)
				}
			}
		}
		return ix
	}
	a, b := build(), build()
	want := snapshotBytes(t, a, names)
	for i := range 20 {
		ix := a
		if i%2 == 1 {
			ix = b
		}
		if !bytes.Equal(snapshotBytes(t, ix, names), want) {
			t.Fatalf("write %d: the snapshot's bytes differ from the first write's", i)
		}
	}
	r, err := ReadSnapshot(bytes.NewReader(want), Config{}, names)
	if err != nil {
		t.Fatal(err)
	}
	if r.Digest() != a.Digest() || !bytes.Equal(snapshotBytes(t, r, names), want) {
		t.Fatal("the restored index differs")
	}
}
