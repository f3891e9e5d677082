package loadtable

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// snapshotVersion is the version of the format WriteSnapshot writes.
const snapshotVersion = 1

// ErrSnapshot marks a snapshot that ReadSnapshot cannot use: unreadable, of
// an unknown version, or with invalid contents. The table is unchanged.
var ErrSnapshot = errors.New("invalid load table snapshot")

// persisted is the snapshot document. It is JSON: the table holds one
// entry per (engine, rank), small next to the KV index.
type persisted struct {
	Version int               `json:"version"`
	Engines []persistedEngine `json:"engines"`
}

type persistedEngine struct {
	ID    string          `json:"id"`
	Epoch uint64          `json:"epoch"`
	Ranks int32           `json:"ranks,omitempty"`
	Rank  []persistedRank `json:"rank"`
}

type persistedRank struct {
	Present      bool      `json:"present,omitempty"`
	Seq          uint64    `json:"seq,omitempty"`
	CapturedAt   time.Time `json:"captured_at"`
	Running      int64     `json:"running,omitempty"`
	Waiting      int64     `json:"waiting,omitempty"`
	KVUsed       int64     `json:"kv_used,omitempty"`
	KVCap        int64     `json:"kv_cap,omitempty"`
	Native       *Native   `json:"native,omitempty"`
	HasSample    bool      `json:"has_sample,omitempty"`
	SampleTokens int64     `json:"sample_tokens,omitempty"`
	SampleBusy   int64     `json:"sample_busy,omitempty"`
	Rate         float64   `json:"rate,omitempty"`
}

// WriteSnapshot writes the table's writer-side state (every engine's epoch,
// advertised ranks, per-rank last seq, latest report and throughput
// estimate) to w, so that ReadSnapshot in another process resumes exactly
// where this table is: later reports are judged stale, duplicate or new as
// they would be here. Callers that pair the snapshot with stream offsets
// must keep Apply from running concurrently (WriteSnapshot itself is safe
// for concurrent use).
func (t *Table) WriteSnapshot(w io.Writer) error {
	t.mu.Lock()
	doc := persisted{Version: snapshotVersion, Engines: make([]persistedEngine, 0, len(t.engines))}
	for id, e := range t.engines {
		pe := persistedEngine{ID: id, Epoch: e.epoch, Ranks: e.ranks, Rank: make([]persistedRank, len(e.rank))}
		for i, rs := range e.rank {
			pr := persistedRank{
				Present: rs.present, Seq: rs.seq, CapturedAt: rs.capturedAt,
				Running: rs.running, Waiting: rs.waiting, KVUsed: rs.kvUsed, KVCap: rs.kvCap,
				HasSample: rs.hasSample, SampleTokens: rs.sampleTokens, SampleBusy: rs.sampleBusy, Rate: rs.rate,
			}
			if rs.native {
				n := rs.n
				pr.Native = &n
			}
			pe.Rank[i] = pr
		}
		doc.Engines = append(doc.Engines, pe)
	}
	t.mu.Unlock()
	if err := json.NewEncoder(w).Encode(&doc); err != nil {
		return fmt.Errorf("loadtable: write snapshot: %w", err)
	}
	return nil
}

// ReadSnapshot replaces the table's contents with a snapshot written by
// WriteSnapshot and publishes every engine's view. On error (wrapping
// ErrSnapshot) the table is unchanged. Engines present before and absent
// from the snapshot are removed.
func (t *Table) ReadSnapshot(r io.Reader) error {
	var doc persisted
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%w: decode: %w", ErrSnapshot, err)
	}
	if doc.Version != snapshotVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrSnapshot, doc.Version, snapshotVersion)
	}
	engines := make(map[string]*engineState, len(doc.Engines))
	for _, pe := range doc.Engines {
		switch {
		case pe.ID == "":
			return fmt.Errorf("%w: engine with empty id", ErrSnapshot)
		case engines[pe.ID] != nil:
			return fmt.Errorf("%w: engine %q twice", ErrSnapshot, pe.ID)
		case pe.Ranks < 0 || pe.Ranks > maxRanks || len(pe.Rank) > maxRanks:
			return fmt.Errorf("%w: engine %q: %d ranks", ErrSnapshot, pe.ID, max(int(pe.Ranks), len(pe.Rank)))
		case pe.Ranks > 0 && len(pe.Rank) > int(pe.Ranks):
			return fmt.Errorf("%w: engine %q: %d rank entries for %d ranks", ErrSnapshot, pe.ID, len(pe.Rank), pe.Ranks)
		}
		e := &engineState{epoch: pe.Epoch, ranks: pe.Ranks, rank: make([]rankState, len(pe.Rank))}
		for i, pr := range pe.Rank {
			rs := rankState{
				present: pr.Present, seq: pr.Seq, capturedAt: pr.CapturedAt,
				running: pr.Running, waiting: pr.Waiting, kvUsed: pr.KVUsed, kvCap: pr.KVCap,
				hasSample: pr.HasSample, sampleTokens: pr.SampleTokens, sampleBusy: pr.SampleBusy, rate: pr.Rate,
			}
			if pr.Native != nil {
				rs.native, rs.n = true, *pr.Native
			}
			e.rank[i] = rs
		}
		engines[pe.ID] = e
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	for id, old := range t.engines {
		if engines[id] == nil {
			t.publish(old.slot, false, View{})
		}
	}
	for id, e := range engines {
		e.slot = t.slots.Intern(id)
		view, ok := e.aggregate()
		t.publish(e.slot, ok, view)
	}
	t.engines = engines
	return nil
}
