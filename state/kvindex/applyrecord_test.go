package kvindex

import "github.com/sluicehq/sluice/state/kvevents"

// applyRecord applies one record's events the way the ingester does
// (components/ingest): one Apply call. (For an A/B run against an index
// without Apply, this file is replaced by one calling Store per event.)
func applyRecord(ix *Index, h Holder, ns Namespace, evs []kvevents.Event, errs []error) {
	ix.Apply(h, ns, evs, errs)
}
