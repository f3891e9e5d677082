package ingest

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// FuzzDecodeLoadReport checks the load-report translation never panics.
// The KV-record fuzzers are in components/kvwire.
func FuzzDecodeLoadReport(f *testing.F) {
	v, _ := proto.Marshal(&sluicev1.LoadReport{EngineId: "e", Epoch: 1, Seq: 1, CapturedAt: timestamppb.Now(),
		Native: &sluicev1.NativeLoad{MaxRunningRequests: 3}})
	f.Add([]byte("e"), v)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r, err := decodeLoadReport(key, value)
		if err == nil && r.EngineID == "" && len(key) > 0 {
			t.Fatalf("accepted report lost its key")
		}
	})
}
