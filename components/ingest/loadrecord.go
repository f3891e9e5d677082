package ingest

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/loadtable"
)

// errKeyMismatch marks a record whose key names another engine than its value.
var errKeyMismatch = errors.New("record key and engine_id differ")

// decodeLoadReport translates a sluice.v1.LoadReport record value into a
// loadtable.Report. key is the record key (the engine id); when the value's
// engine_id is empty the key is used. The native extension is present only
// when the native message is set.
func decodeLoadReport(key, value []byte) (loadtable.Report, error) {
	var pb sluicev1.LoadReport
	if err := proto.Unmarshal(value, &pb); err != nil {
		return loadtable.Report{}, err
	}
	id := pb.GetEngineId()
	switch {
	case id == "":
		id = string(key)
	case len(key) > 0 && string(key) != id:
		return loadtable.Report{}, fmt.Errorf("%w: key %q, engine_id %q", errKeyMismatch, key, id)
	}
	r := loadtable.Report{
		EngineID:         id,
		Rank:             pb.GetDpRank(),
		Ranks:            pb.GetDpSize(),
		Epoch:            pb.GetEpoch(),
		Seq:              pb.GetSeq(),
		Running:          pb.GetRunningRequests(),
		Waiting:          pb.GetWaitingRequests(),
		KVUsedTokens:     pb.GetKvUsedTokens(),
		KVCapacityTokens: pb.GetKvCapacityTokens(),
	}
	if ts := pb.GetCapturedAt(); ts != nil {
		r.CapturedAt = ts.AsTime()
	}
	if n := pb.GetNative(); n != nil {
		r.Native = &loadtable.Native{
			WaitingUncachedTokens:      n.GetWaitingUncachedTokens(),
			TotalTokens:                n.GetTotalTokens(),
			MaxRunningRequests:         n.GetMaxRunningRequests(),
			PrefillUncachedTokensTotal: n.GetPrefillUncachedTokensTotal(),
			PrefillBusyMicrosTotal:     n.GetPrefillBusyMicrosTotal(),
		}
	}
	return r, nil
}
