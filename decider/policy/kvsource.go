package policy

import (
	"context"

	"github.com/sluicehq/sluice/state/kvindex"
)

// LocalIndex serves prefix lookups from this process's KV index, which KV-event ingestion keeps
// current. Requests carry no LoRA or cache salt, so lookups use the model's base namespace.
type LocalIndex struct {
	Index *kvindex.Index
}

var _ PrefixSource = LocalIndex{}

// LookupPrefix implements PrefixSource; the local index is always available.
func (l LocalIndex) LookupPrefix(_ context.Context, model string, tokenIDs []uint32, out []PrefixMatch) ([]PrefixMatch, error) {
	var buf [64]kvindex.Match
	for _, m := range l.Index.Lookup(kvindex.Namespace{Model: model}, tokenIDs, buf[:0]) {
		out = append(out, PrefixMatch{Engine: m.Engine, Tokens: m.Tokens})
	}
	return out, nil
}
