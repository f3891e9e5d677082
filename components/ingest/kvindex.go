package ingest

import (
	"io"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// Holder is one (engine, DP rank) whose cache the index tracks.
type Holder = kvindex.Holder

// Namespace isolates blocks that have equal tokens but must not share
// cache entries: the model, the LoRA adapter and the cache salt.
type Namespace = kvindex.Namespace

// KVIndex is what KVIngester needs of the prefix index (state/kvindex). All
// writes come from one goroutine at a time (the ingester's writer lock). The
// events passed to Store and Remove, and their slices, are valid only during
// the call (the ingester decodes the next record into the same buffers);
// an index copies what it keeps.
type KVIndex interface {
	// Store records that h holds the blocks of ev in namespace ns.
	Store(h Holder, ns Namespace, ev *kvevents.BlockStored) error
	// Remove records that h evicted the blocks of ev.
	Remove(h Holder, ev *kvevents.BlockRemoved)
	// Clear drops every block h holds.
	Clear(h Holder)
	// RemoveEngine drops every rank of an engine.
	RemoveEngine(s slots.Slot)
	// WriteSnapshot writes the whole index to w; names maps slots to ids.
	WriteSnapshot(w io.Writer, names *slots.Table) error
	// Digest is an order-independent hash of the index contents, equal for
	// two indexes (sharing a slots table) that hold the same blocks.
	Digest() uint64
}

var _ KVIndex = (*kvindex.Index)(nil)

// IndexReader rebuilds an index from a snapshot section written by
// KVIndex.WriteSnapshot.
type IndexReader func(r io.Reader) (KVIndex, error)

// KVIndexReader returns the IndexReader for state/kvindex: ReadSnapshot with
// the decider's index config, interning engine ids in names (the slot table
// shared with the registry and load table).
func KVIndexReader(cfg kvindex.Config, names *slots.Table) IndexReader {
	return func(r io.Reader) (KVIndex, error) {
		ix, err := kvindex.ReadSnapshot(r, cfg, names)
		if err != nil {
			return nil, err
		}
		return ix, nil
	}
}

// indexCloner is a KVIndex other than state/kvindex's that can copy itself.
type indexCloner interface {
	// Clone returns a deep copy, consistent at the time of the call, that
	// later writes to the index do not affect. It must be cheap (memory
	// copies): the stream is paused while it runs.
	Clone() KVIndex
}

// copyIndex returns a point-in-time copy of idx for a snapshot to serialise
// without pausing the stream, reusing spare (an earlier copy that nothing
// uses any more; may be nil) where the index can. It returns nil for an index
// that cannot copy itself; the snapshotter then serialises it paused.
func copyIndex(idx, spare KVIndex) KVIndex {
	switch ix := idx.(type) {
	case *kvindex.Index:
		sp, _ := spare.(*kvindex.Index)
		if sp == ix {
			sp = nil
		}
		return ix.CloneInto(sp)
	case indexCloner:
		return ix.Clone()
	}
	return nil
}
