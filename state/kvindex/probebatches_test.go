package kvindex

// probeBatches returns the mean number of the walker's probe batches (two
// dependent loads each) per lookup of seqs[:64].
func probeBatches(ix *Index, seqs [][]uint32) float64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	t := ix.trees[nsA][0]
	n := 0
	k := min(64, len(seqs))
	for _, q := range seqs[:k] {
		var w walker
		if _, ok := w.run(ix, t, q, nil, 0); !ok {
			return -1
		}
		n += w.batches
	}
	return float64(n) / float64(k)
}
