package slots

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		intern  []string
		want    []Slot
		wantLen int
	}{
		{name: "empty", intern: nil, want: nil, wantLen: 0},
		{name: "dense from zero", intern: []string{"a", "b", "c"}, want: []Slot{0, 1, 2}, wantLen: 3},
		{name: "repeat returns existing", intern: []string{"a", "b", "a", "b"}, want: []Slot{0, 1, 0, 1}, wantLen: 2},
		{name: "empty id is an id", intern: []string{"", "x"}, want: []Slot{0, 1}, wantLen: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tbl := NewTable()
			var got []Slot
			for _, id := range tc.intern {
				got = append(got, tbl.Intern(id))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Intern(...) mismatch (-want +got):\n%s", diff)
			}
			if got := tbl.Len(); got != tc.wantLen {
				t.Errorf("Len() = %d, want %d", got, tc.wantLen)
			}
			for i, id := range tc.intern {
				s, ok := tbl.Lookup(id)
				if !ok || s != tc.want[i] {
					t.Errorf("Lookup(%q) = %d, %v; want %d, true", id, s, ok, tc.want[i])
				}
				if got := tbl.ID(s); got != id {
					t.Errorf("ID(%d) = %q, want %q", s, got, id)
				}
			}
			if _, ok := tbl.Lookup("never"); ok {
				t.Errorf("Lookup(%q) found a slot for an id never interned", "never")
			}
			if got := tbl.ID(Slot(tc.wantLen)); got != "" {
				t.Errorf("ID(%d) = %q for an unallocated slot, want \"\"", tc.wantLen, got)
			}
		})
	}
}

func TestZeroTable(t *testing.T) {
	t.Parallel()
	var tbl Table
	if _, ok := tbl.Lookup("a"); ok {
		t.Fatal("Lookup on zero Table found a slot")
	}
	if tbl.Len() != 0 || tbl.ID(0) != "" {
		t.Fatalf("zero Table: Len() = %d, ID(0) = %q; want 0, \"\"", tbl.Len(), tbl.ID(0))
	}
	if s := tbl.Intern("a"); s != 0 {
		t.Fatalf("Intern(%q) on zero Table = %d, want 0", "a", s)
	}
}

func TestConcurrentIntern(t *testing.T) {
	t.Parallel()
	tbl := NewTable()
	const engines, ids = 8, 200
	got := make([][]Slot, engines)
	var wg sync.WaitGroup
	for w := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				id := fmt.Sprintf("e%d", i)
				s := tbl.Intern(id)
				if back := tbl.ID(s); back != id {
					t.Errorf("ID(Intern(%q)) = %q", id, back)
				}
				got[w] = append(got[w], s)
			}
		}()
	}
	wg.Wait()
	if tbl.Len() != ids {
		t.Fatalf("Len() = %d, want %d", tbl.Len(), ids)
	}
	for w := 1; w < engines; w++ {
		if diff := cmp.Diff(got[0], got[w]); diff != "" {
			t.Errorf("worker %d saw different slots (-w0 +w%d):\n%s", w, w, diff)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	tbl := NewTable()
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = fmt.Sprintf("engine-%02d", i)
		tbl.Intern(ids[i])
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok := tbl.Lookup(ids[i&63]); !ok {
			b.Fatal("missing")
		}
	}
}

func BenchmarkID(b *testing.B) {
	tbl := NewTable()
	for i := range 64 {
		tbl.Intern(fmt.Sprintf("engine-%02d", i))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if tbl.ID(Slot(i&63)) == "" {
			b.Fatal("missing")
		}
	}
}
