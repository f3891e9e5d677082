package tokenids

import (
	"encoding/json"
	"slices"
	"testing"
)

var samples = []string{
	`[1,2,3]`, ` [ 0 , 4294967295 ]  `, `[]`, `[7]`, "[\n1,\t2\r]",
	`[4294967296]`, `[-1]`, `[01]`, `[1.0]`, `[1e3]`, `[1,]`, `[,1]`, `[1 2]`, `[1`, `["1"]`, `[[1]]`, `1`, ``, `[1]x`, `null`,
}

// Parse takes what encoding/json reads as a non-empty []uint32 of plain decimals, and the same
// ids; whatever it refuses, encoding/json refuses or reads as something else.
func FuzzParse(f *testing.F) {
	for _, s := range samples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := Parse(b)
		var want []uint32
		werr := json.Unmarshal(b, &want)
		if ok {
			if werr != nil || !slices.Equal(got, want) {
				t.Fatalf("Parse(%q) = %v; encoding/json %v, %v", b, got, want, werr)
			}
			return
		}
		// A refusal must be something the scan leaves to encoding/json on purpose: invalid
		// JSON, not a list of uint32, the empty list, or numbers it does not read by hand.
		var nums []json.Number
		if werr == nil && len(want) > 0 && json.Unmarshal(b, &nums) == nil {
			for _, n := range nums {
				if s := n.String(); len(s) == 0 || s[0] < '0' || s[0] > '9' {
					return
				}
			}
			t.Fatalf("Parse(%q) refused a plain list of ids %v", b, want)
		}
	})
}

func TestScanArrayEnd(t *testing.T) {
	b := []byte(`{"tokens":[5, 6],"count":2}`)
	ids, end, ok := ScanArray(b, 10)
	if !ok || !slices.Equal(ids, []uint32{5, 6}) || string(b[end:]) != `,"count":2}` {
		t.Fatalf("ScanArray = %v, %d (%q), %v", ids, end, b[end:], ok)
	}
	if ids, _, ok := ScanArray([]byte(`[]`), 0); !ok || ids == nil || len(ids) != 0 {
		t.Fatalf("ScanArray([]) = %v, %v; want an empty non-nil list", ids, ok)
	}
	if _, _, ok := ScanArray([]byte(`[4294967296]`), 0); ok {
		t.Fatal("ScanArray took an id above uint32")
	}
}
