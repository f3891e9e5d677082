package kvindex

import (
	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

// buildCompat applies the scenario that testdata/snapshot-v1.bin and
// testdata/snapshot-v2.bin were written from (by the index of before
// format 3): several holders, ranks, tiers, an unknown medium, EAGLE, a
// second KV-cache group, removals that prune, a clear and an engine
// removal, and no eviction (so that any eviction policy builds it alike).
func buildCompat(ix *Index, names *slots.Table) error {
	engines := []slots.Slot{names.Intern("engine-a"), names.Intern("engine-b"), names.Intern("engine-c")}
	for s := range 120 {
		hd := Holder{Engine: engines[s%3], Rank: int32(s % 2)}
		hashes := []uint64{uint64(s) << 8, uint64(s)<<8 | 1, uint64(s)<<8 | 2}
		ev := &kvevents.BlockStored{BlockHashes: hashes, TokenIDs: append(toks(0, 1), toks(s%40, 2)...), BlockSize: bs, Medium: kvevents.Medium(s % 3)}
		if s%13 == 0 {
			ev.Medium = kvevents.MediumUnknown
		}
		ev.Lookahead = s%11 == 0
		if err := ix.Store(hd, nsA, ev); err != nil {
			return err
		}
		if s%4 == 1 {
			g := &kvevents.BlockStored{BlockHashes: hashes, TokenIDs: ev.TokenIDs, BlockSize: bs, Group: 1}
			if err := ix.Store(hd, nsA, g); err != nil {
				return err
			}
		}
		if s%7 == 0 {
			ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: hashes[1:], AllTiers: true, Group: 1})
		}
		if s%5 == 0 {
			ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: []uint64{uint64(s)<<8 | 2}, AllTiers: true})
		}
		if s == 60 {
			ix.Clear(hd)
		}
		if s == 90 {
			ix.RemoveEngine(engines[2])
		}
	}
	return nil
}
