package registry

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/state/slots"
)

func plain(id string, models ...string) Engine {
	return Engine{ID: id, URL: "http://" + id + ":8000", Models: models, Role: RolePlain}
}

func prefill(id string, port uint32, models ...string) Engine {
	return Engine{ID: id, URL: "http://" + id + ":8000", Models: models, Role: RolePrefill, BootstrapPort: port}
}

func decode(id string, models ...string) Engine {
	return Engine{ID: id, URL: "http://" + id + ":8000", Models: models, Role: RoleDecode}
}

func ids(ws []*Engine) []string {
	if ws == nil {
		return nil
	}
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

var fixedNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newTestRegistry(t *testing.T) *Registry {
	t.Helper()
	r := New(slots.NewTable())
	r.now = func() time.Time { return fixedNow }
	return r
}

func TestParseRole(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Role
		wantErr bool
	}{
		{in: "plain", want: RolePlain},
		{in: "prefill", want: RolePrefill},
		{in: "decode", want: RoleDecode},
		{in: "", wantErr: true},
		{in: "Plain", wantErr: true},
		{in: "unspecified", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.in), func(t *testing.T) {
			t.Parallel()
			got, err := ParseRole(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseRole(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
			if err == nil && got.String() != tc.in {
				t.Errorf("ParseRole(%q).String() = %q, want round trip", tc.in, got.String())
			}
		})
	}
	if got := Role(9).String(); got != "Role(9)" {
		t.Errorf("Role(9).String() = %q, want %q", got, "Role(9)")
	}
	if got := RoleUnspecified.String(); got != "unspecified" {
		t.Errorf("RoleUnspecified.String() = %q, want %q", got, "unspecified")
	}
}

func TestReplaceValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		engines []Engine
		want    []string // error messages, in order
	}{
		{name: "valid plain", engines: []Engine{plain("a", "m")}},
		{name: "valid pd", engines: []Engine{prefill("p1", 8998, "m"), decode("d1", "m")}},
		{name: "valid https and port 0 prefill", engines: []Engine{{ID: "p", URL: "https://h", Models: []string{"m"}, Role: RolePrefill}}},
		{name: "empty set", engines: nil},
		{
			name:    "empty id",
			engines: []Engine{{URL: "http://h", Models: []string{"m"}, Role: RolePlain}},
			want:    []string{`worker "": id: must be non-empty; give every worker a stable unique id`},
		},
		{
			name:    "duplicate id",
			engines: []Engine{plain("a", "m"), plain("a", "m")},
			want:    []string{`worker "a": id: duplicate; worker ids must be unique`},
		},
		{
			name:    "relative url",
			engines: []Engine{{ID: "p1", URL: "x", Models: []string{"m"}, Role: RolePlain}},
			want:    []string{`worker "p1": url "x": must be an absolute http(s) URL`},
		},
		{
			name:    "grpc scheme",
			engines: []Engine{{ID: "p1", URL: "grpc://h:1", Models: []string{"m"}, Role: RolePlain}},
			want:    []string{`worker "p1": url "grpc://h:1": must be an absolute http(s) URL`},
		},
		{
			name:    "no host",
			engines: []Engine{{ID: "p1", URL: "http:///path", Models: []string{"m"}, Role: RolePlain}},
			want:    []string{`worker "p1": url "http:///path": must be an absolute http(s) URL`},
		},
		{
			name:    "no models",
			engines: []Engine{{ID: "a", URL: "http://h", Role: RolePlain}},
			want:    []string{`worker "a": models: must list at least one model id`},
		},
		{
			name:    "empty and repeated model",
			engines: []Engine{{ID: "a", URL: "http://h", Models: []string{"m", "", "m"}, Role: RolePlain}},
			want: []string{
				`worker "a": models[1]: must be a non-empty model id`,
				`worker "a": models[2] "m": listed twice; list each model once`,
			},
		},
		{
			name:    "unspecified role",
			engines: []Engine{{ID: "a", URL: "http://h", Models: []string{"m"}}},
			want:    []string{`worker "a": role: must be one of plain, prefill, decode`},
		},
		{
			name:    "bootstrap port on decode",
			engines: []Engine{{ID: "d1", URL: "http://h", Models: []string{"m"}, Role: RoleDecode, BootstrapPort: 8998}},
			want:    []string{`worker "d1": bootstrap_port 8998: only prefill engines take a bootstrap port; remove it or set role prefill (role is decode)`},
		},
		{
			name:    "bootstrap port on plain",
			engines: []Engine{{ID: "a1", URL: "http://h", Models: []string{"m"}, Role: RolePlain, BootstrapPort: 1}},
			want:    []string{`worker "a1": bootstrap_port 1: only prefill engines take a bootstrap port; remove it or set role prefill (role is plain)`},
		},
		{
			name:    "bootstrap port out of range",
			engines: []Engine{prefill("p1", 65536, "m")},
			want:    []string{`worker "p1": bootstrap_port 65536: must be at most 65535`},
		},
		{
			name:    "mixing plain and pd in one model",
			engines: []Engine{prefill("p1", 0, "m"), plain("a1", "m"), plain("a2", "m"), decode("x1", "m")},
			want:    []string{`model "m": engines p1 (prefill) and a1 (plain) mix plain and prefill/decode serving; use separate models`},
		},
		{
			name:    "mixing decode and plain",
			engines: []Engine{decode("d1", "x", "m"), plain("a1", "m", "x")},
			want: []string{
				`model "m": engines d1 (decode) and a1 (plain) mix plain and prefill/decode serving; use separate models`,
				`model "x": engines d1 (decode) and a1 (plain) mix plain and prefill/decode serving; use separate models`,
			},
		},
		{
			name:    "plain and pd on different models",
			engines: []Engine{prefill("p1", 0, "pd"), decode("d1", "pd"), plain("a1", "m")},
		},
		{
			name:    "all problems reported at once",
			engines: []Engine{{ID: "b", URL: "ftp://h", Role: RoleDecode, BootstrapPort: 5}},
			want: []string{
				`worker "b": url "ftp://h": must be an absolute http(s) URL`,
				`worker "b": models: must list at least one model id`,
				`worker "b": bootstrap_port 5: only prefill engines take a bootstrap port; remove it or set role prefill (role is decode)`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRegistry(t)
			if err := r.Replace([]Engine{plain("keep", "other")}); err != nil {
				t.Fatalf("Replace(seed) = %v", err)
			}
			err := r.Replace(tc.engines)
			var got []string
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("Replace(...) error %v does not match ErrInvalid", err)
				}
				var ve *ValidationError
				if !errors.As(err, &ve) {
					t.Errorf("Replace(...) error %v is not a *ValidationError", err)
				}
				got = strings.Split(err.Error(), "\n")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Replace(...) errors mismatch (-want +got):\n%s", diff)
			}
			wantIDs := []string{"keep"}
			if len(tc.want) == 0 {
				wantIDs = nil
				for _, w := range tc.engines {
					wantIDs = append(wantIDs, w.ID)
				}
				wantIDs = sortedCopy(wantIDs)
			}
			if diff := cmp.Diff(wantIDs, ids(r.Snapshot().Engines()), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("workers after Replace mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestUpsertValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		upsert  Engine
		wantErr string
	}{
		{name: "new valid worker", upsert: plain("a2", "m")},
		{name: "replace existing", upsert: plain("a1", "m", "n")},
		{name: "invalid fields", upsert: Engine{ID: "x", URL: "/rel", Models: []string{"z"}, Role: RolePlain},
			wantErr: `worker "x": url "/rel": must be an absolute http(s) URL`},
		{name: "mixes with registered plain", upsert: prefill("p9", 1, "m"),
			wantErr: `model "m": engines p9 (prefill) and a1 (plain) mix plain and prefill/decode serving; use separate models`},
		{name: "role change of the only engine is fine", upsert: decode("a1", "m")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRegistry(t)
			if err := r.Replace([]Engine{plain("a1", "m")}); err != nil {
				t.Fatal(err)
			}
			before := r.Snapshot()
			err := r.Upsert(tc.upsert)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrInvalid) {
					t.Fatalf("Upsert(...) = %v, want %q matching ErrInvalid", err, tc.wantErr)
				}
				if r.Snapshot() != before {
					t.Errorf("Upsert failure published a new snapshot")
				}
				return
			}
			if err != nil {
				t.Fatalf("Upsert(...) = %v", err)
			}
			w, ok := r.Snapshot().Get(tc.upsert.ID)
			if !ok {
				t.Fatalf("Get(%q) after Upsert: not found", tc.upsert.ID)
			}
			want := tc.upsert
			want.Slot = w.Slot
			if diff := cmp.Diff(&want, w); diff != "" {
				t.Errorf("Get(%q) mismatch (-want +got):\n%s", tc.upsert.ID, diff)
			}
			if got := r.Snapshot().Version(); got != before.Version()+1 {
				t.Errorf("Version() = %d, want %d", got, before.Version()+1)
			}
		})
	}
}

func TestSnapshotQueries(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t)
	err := r.Replace([]Engine{
		plain("c", "m1"), plain("a", "m1", "m2"), plain("b", "m2"),
		prefill("p2", 9000, "pd"), prefill("p1", 9001, "pd"), decode("d1", "pd"), decode("d2", "pd"),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.SetHealth("c", Health{Healthy: false, Reason: "probe failed"})
	r.SetHealth("p1", Health{Healthy: false, Reason: "probe failed"})
	s := r.Snapshot()

	tests := []struct {
		name          string
		model         string
		role          Role
		wantIDs       []string
		wantUnhealthy int
	}{
		{name: "plain healthy only", model: "m1", role: RolePlain, wantIDs: []string{"a"}, wantUnhealthy: 1},
		{name: "plain sorted", model: "m2", role: RolePlain, wantIDs: []string{"a", "b"}},
		{name: "prefill", model: "pd", role: RolePrefill, wantIDs: []string{"p2"}, wantUnhealthy: 1},
		{name: "decode sorted", model: "pd", role: RoleDecode, wantIDs: []string{"d1", "d2"}},
		{name: "wrong role", model: "m1", role: RoleDecode},
		{name: "unknown model", model: "nope", role: RolePlain},
		{name: "unspecified role", model: "m1", role: RoleUnspecified},
		{name: "out of range role", model: "m1", role: Role(200)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := s.Candidates(tc.model, tc.role)
			if diff := cmp.Diff(tc.wantIDs, ids(got)); diff != "" {
				t.Errorf("Candidates(%q, %v) mismatch (-want +got):\n%s", tc.model, tc.role, diff)
			}
			if tc.wantIDs == nil && got != nil {
				t.Errorf("Candidates(%q, %v) = non-nil empty slice, want nil", tc.model, tc.role)
			}
			if got := s.UnhealthyCount(tc.model, tc.role); got != tc.wantUnhealthy {
				t.Errorf("UnhealthyCount(%q, %v) = %d, want %d", tc.model, tc.role, got, tc.wantUnhealthy)
			}
		})
	}

	if diff := cmp.Diff([]string{"m1", "m2", "pd"}, s.Models()); diff != "" {
		t.Errorf("Models() mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a", "b", "c", "d1", "d2", "p1", "p2"}, ids(s.Engines())); diff != "" {
		t.Errorf("Engines() mismatch (-want +got):\n%s", diff)
	}
	if h, ok := s.Health("c"); !ok || h.Healthy || h.Reason != "probe failed" || !h.Since.Equal(fixedNow) {
		t.Errorf("Health(%q) = %+v, %v; want unhealthy with reason and Since", "c", h, ok)
	}
	if _, ok := s.Health("zz"); ok {
		t.Errorf("Health(%q) found an unknown worker", "zz")
	}
	if _, ok := s.Get("zz"); ok {
		t.Errorf("Get(%q) found an unknown worker", "zz")
	}
	p2, _ := s.Get("p2")
	if p2.BootstrapPort != 9000 || p2.Role != RolePrefill {
		t.Errorf("Get(%q) = %+v", "p2", p2)
	}
}

func TestHealthAndVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		id          string
		h           Health
		wantOK      bool
		wantVersion uint64 // relative to the version before the call
		wantHealth  Health
		wantNewSnap bool
	}{
		{name: "unknown id", id: "zz", h: Health{Healthy: false}, wantOK: false,
			wantHealth: Health{Healthy: true, Since: fixedNow}},
		{name: "same state no-op", id: "a", h: Health{Healthy: true}, wantOK: true,
			wantHealth: Health{Healthy: true, Since: fixedNow}},
		{name: "flip to unhealthy bumps", id: "a", h: Health{Healthy: false, Reason: "down"}, wantOK: true,
			wantVersion: 1, wantNewSnap: true, wantHealth: Health{Healthy: false, Reason: "down", Since: fixedNow}},
		{name: "explicit since kept", id: "a", h: Health{Healthy: false, Since: fixedNow.Add(time.Hour)}, wantOK: true,
			wantVersion: 1, wantNewSnap: true, wantHealth: Health{Healthy: false, Since: fixedNow.Add(time.Hour)}},
		{name: "reason only keeps version and since", id: "a", h: Health{Healthy: true, Reason: "probe ok", Since: fixedNow.Add(time.Hour)}, wantOK: true,
			wantNewSnap: true, wantHealth: Health{Healthy: true, Reason: "probe ok", Since: fixedNow}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRegistry(t)
			if err := r.Replace([]Engine{plain("a", "m")}); err != nil {
				t.Fatal(err)
			}
			before := r.Snapshot()
			if got := r.SetHealth(tc.id, tc.h); got != tc.wantOK {
				t.Fatalf("SetHealth(%q) = %v, want %v", tc.id, got, tc.wantOK)
			}
			after := r.Snapshot()
			if got := after.Version() - before.Version(); got != tc.wantVersion {
				t.Errorf("version delta = %d, want %d", got, tc.wantVersion)
			}
			if (after != before) != tc.wantNewSnap {
				t.Errorf("new snapshot published = %v, want %v", after != before, tc.wantNewSnap)
			}
			got, _ := after.Health("a")
			if diff := cmp.Diff(tc.wantHealth, got); diff != "" {
				t.Errorf("Health(%q) mismatch (-want +got):\n%s", "a", diff)
			}
			if h, _ := before.Health("a"); !h.Healthy || h.Reason != "" {
				t.Errorf("old snapshot changed: Health(%q) = %+v", "a", h)
			}
		})
	}
}

func TestReplaceKeepsHealthAndIdentity(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t)
	if err := r.Replace([]Engine{plain("a", "m"), plain("b", "m"), plain("c", "m")}); err != nil {
		t.Fatal(err)
	}
	down := Health{Healthy: false, Reason: "down", Since: fixedNow.Add(-time.Minute)}
	for _, id := range []string{"a", "b", "c"} {
		r.SetHealth(id, down)
	}
	old := r.Snapshot()
	var removed []string
	r.OnRemove(func(w *Engine) { removed = append(removed, w.ID) })

	moved := plain("b", "m")
	moved.URL = "http://elsewhere:1"
	if err := r.Replace([]Engine{plain("a", "m", "n"), moved, plain("d", "m")}); err != nil {
		t.Fatal(err)
	}
	s := r.Snapshot()
	tests := []struct {
		id   string
		want Health
	}{
		{id: "a", want: down}, // same url, other fields changed: kept
		{id: "b", want: Health{Healthy: true, Since: fixedNow}}, // url changed: fresh
		{id: "d", want: Health{Healthy: true, Since: fixedNow}}, // new
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			t.Parallel()
			got, ok := s.Health(tc.id)
			if !ok {
				t.Fatalf("Health(%q) not found", tc.id)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Health(%q) mismatch (-want +got):\n%s", tc.id, diff)
			}
			oldW, _ := old.Get(tc.id)
			newW, _ := s.Get(tc.id)
			if oldW == newW {
				t.Errorf("Get(%q) returned the same pointer after Replace", tc.id)
			}
		})
	}
	if diff := cmp.Diff([]string{"c"}, removed); diff != "" {
		t.Errorf("OnRemove calls mismatch (-want +got):\n%s", diff)
	}
	if s.Version() <= old.Version() {
		t.Errorf("Version() = %d, not above %d", s.Version(), old.Version())
	}
	// Slots are stable across registrations of the same id.
	oa, _ := old.Get("a")
	na, _ := s.Get("a")
	if oa.Slot != na.Slot {
		t.Errorf("slot of %q changed: %d -> %d", "a", oa.Slot, na.Slot)
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		id          string
		want        bool
		wantIDs     []string
		wantRemoved []string
	}{
		{name: "known", id: "b", want: true, wantIDs: []string{"a", "c"}, wantRemoved: []string{"b"}},
		{name: "unknown", id: "z", want: false, wantIDs: []string{"a", "b", "c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRegistry(t)
			var removed []string
			r.OnRemove(func(w *Engine) { removed = append(removed, w.ID) })
			if err := r.Replace([]Engine{plain("a", "m"), plain("b", "m"), plain("c", "m")}); err != nil {
				t.Fatal(err)
			}
			v := r.Snapshot().Version()
			if got := r.Remove(tc.id); got != tc.want {
				t.Fatalf("Remove(%q) = %v, want %v", tc.id, got, tc.want)
			}
			s := r.Snapshot()
			if diff := cmp.Diff(tc.wantIDs, ids(s.Engines())); diff != "" {
				t.Errorf("Engines() mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantIDs, ids(s.Candidates("m", RolePlain))); diff != "" {
				t.Errorf("Candidates mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRemoved, removed); diff != "" {
				t.Errorf("OnRemove calls mismatch (-want +got):\n%s", diff)
			}
			wantV := v
			if tc.want {
				wantV++
			}
			if s.Version() != wantV {
				t.Errorf("Version() = %d, want %d", s.Version(), wantV)
			}
		})
	}
}

func TestEngineIsolatedFromCaller(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t)
	w := plain("a", "m")
	w.Labels = map[string]string{"zone": "x"}
	w.Slot = 77
	if err := r.Upsert(w); err != nil {
		t.Fatal(err)
	}
	w.Models[0] = "mutated"
	w.Labels["zone"] = "mutated"
	got, _ := r.Snapshot().Get("a")
	if got.Models[0] != "m" || got.Labels["zone"] != "x" {
		t.Errorf("registry worker changed through caller's slices: %+v", got)
	}
	if got.Slot != 0 {
		t.Errorf("Slot = %d, want the interned slot 0, not the caller's value", got.Slot)
	}
}

func TestEmptyRegistry(t *testing.T) {
	t.Parallel()
	r := New(slots.NewTable())
	s := r.Snapshot()
	if s == nil || s.Version() != 0 || len(s.Engines()) != 0 || s.Models() != nil || s.Candidates("m", RolePlain) != nil {
		t.Fatalf("empty registry snapshot = %+v", s)
	}
}

func TestConcurrentReadersAndWriters(t *testing.T) {
	t.Parallel()
	r := New(slots.NewTable())
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := r.Snapshot()
				for _, w := range s.Candidates("m", RolePlain) {
					if h, ok := s.Health(w.ID); !ok || !h.Healthy {
						t.Errorf("candidate %q is not healthy in its own snapshot", w.ID)
					}
				}
			}
		}()
	}
	for i := range 300 {
		id := fmt.Sprintf("e%d", i%10)
		switch i % 3 {
		case 0:
			if err := r.Upsert(plain(id, "m")); err != nil {
				t.Fatal(err)
			}
		case 1:
			r.SetHealth(id, Health{Healthy: i%2 == 0})
		case 2:
			r.Remove(id)
		}
	}
	close(stop)
	wg.Wait()
}

func benchRegistry(b *testing.B) *Registry {
	r := New(slots.NewTable())
	ws := make([]Engine, 64)
	for i := range ws {
		ws[i] = plain(fmt.Sprintf("engine-%02d", i), "m", "n")
	}
	if err := r.Replace(ws); err != nil {
		b.Fatal(err)
	}
	return r
}

func BenchmarkSnapshot(b *testing.B) {
	r := benchRegistry(b)
	b.ReportAllocs()
	for b.Loop() {
		if r.Snapshot() == nil {
			b.Fatal("nil")
		}
	}
}

func BenchmarkCandidates(b *testing.B) {
	r := benchRegistry(b)
	b.ReportAllocs()
	for b.Loop() {
		if len(r.Snapshot().Candidates("m", RolePlain)) != 64 {
			b.Fatal("wrong count")
		}
	}
}

func BenchmarkGet(b *testing.B) {
	r := benchRegistry(b)
	s := r.Snapshot()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.Get("engine-42"); !ok {
			b.Fatal("missing")
		}
	}
}

func BenchmarkHealth(b *testing.B) {
	r := benchRegistry(b)
	s := r.Snapshot()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.Health("engine-42"); !ok {
			b.Fatal("missing")
		}
	}
}

func TestDrainedIsNotACandidate(t *testing.T) {
	t.Parallel()
	r := New(slots.NewTable())
	err := r.Replace([]Engine{
		{ID: "a", URL: "http://a.test", Models: []string{"m"}, Role: RolePlain},
		{ID: "b", URL: "http://b.test", Models: []string{"m"}, Role: RolePlain, Labels: map[string]string{DrainedLabel: "true"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Snapshot()
	if c := s.Candidates("m", RolePlain); len(c) != 1 || c[0].ID != "a" {
		t.Errorf("Candidates = %v, want only a", c)
	}
	if _, ok := s.Get("b"); !ok || s.UnhealthyCount("m", RolePlain) != 0 {
		t.Errorf("drained engine should stay registered and not count as unhealthy")
	}
}
