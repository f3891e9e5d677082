package kvevents

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func seq(n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(i)
	}
	return s
}

// TestCheckStored covers the rules components/kvwire's cross-format test
// cannot: those that need a KV-cache group, which only msgpack carries.
func TestCheckStored(t *testing.T) {
	lim := Limits{MaxPayloadBytes: 1 << 20, MaxEventsPerBatch: 4, MaxHashesPerEvent: 8, MaxTokensPerEvent: 64}
	tests := []struct {
		name     string
		in       BlockStored
		hasGroup bool
		want     BlockStored
		kind     ErrorKind
	}{
		{name: "sparse group event", hasGroup: true,
			in:   BlockStored{BlockHashes: []uint64{1, 2}, TokenIDs: seq(20), BlockSize: 16, Group: 1},
			want: BlockStored{BlockHashes: []uint64{1, 2}, BlockSize: 16, Group: 1, Sparse: true}},
		{name: "windowed kind is a named group",
			in:   BlockStored{BlockHashes: []uint64{1, 2}, TokenIDs: seq(20), BlockSize: 16, GroupKind: GroupKindWindowed},
			want: BlockStored{BlockHashes: []uint64{1, 2}, BlockSize: 16, GroupKind: GroupKindWindowed, Sparse: true}},
		{name: "full kind is not", in: BlockStored{BlockHashes: []uint64{1, 2}, TokenIDs: seq(20), BlockSize: 16, GroupKind: GroupKindFull},
			kind: KindTokenCountMismatch},
		{name: "a short page is never sparse", hasGroup: true,
			in:   BlockStored{BlockHashes: []uint64{1}, TokenIDs: seq(5), BlockSize: 16},
			want: BlockStored{BlockHashes: []uint64{1}, TokenIDs: seq(5), BlockSize: 5}},
		{name: "aligned group event stays whole", hasGroup: true,
			in:   BlockStored{BlockHashes: []uint64{1, 2}, TokenIDs: seq(32), BlockSize: 16, Group: 2},
			want: BlockStored{BlockHashes: []uint64{1, 2}, TokenIDs: seq(32), BlockSize: 16, Group: 2}},
		{name: "all-empty extra keys become nil",
			in:   BlockStored{BlockHashes: []uint64{1}, TokenIDs: seq(16), BlockSize: 16, ExtraKeys: []string{"", ""}},
			want: BlockStored{BlockHashes: []uint64{1}, TokenIDs: seq(16), BlockSize: 16}},
		{name: "absurd before empty", in: BlockStored{TokenIDs: seq(65), BlockSize: 1}, kind: KindAbsurdSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in
			err := lim.CheckStored(&got, tc.hasGroup)
			if tc.kind != "" {
				if err == nil || err.Kind != tc.kind || err.Event != -1 {
					t.Fatalf("CheckStored() = %v, want kind %s", err, tc.kind)
				}
				return
			}
			if err != nil {
				t.Fatalf("CheckStored() = %v, want nil", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CheckStored() event mismatch (-want +got):\n%s", diff)
			}
			if !got.Canonical() {
				t.Errorf("CheckStored() kept %+v, which is not Canonical", got)
			}
		})
	}
}
