package console

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/components/enginehealth"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// EngineRow is one engine on the Fleet page.
type EngineRow struct {
	ID     string   `json:"id"`
	Role   string   `json:"role"`
	Models []string `json:"models"`
	URL    string   `json:"url"`
	Kind   string   `json:"kind,omitempty"` // the "engine" label (vllm, sglang)
	// Healthy is the registry's verdict; HealthReason says why not (probe, breaker).
	Healthy      bool   `json:"healthy"`
	HealthReason string `json:"health_reason,omitempty"`
	HealthSince  string `json:"health_since,omitempty"`
	ProbeOK      bool   `json:"probe_ok"`
	Breaker      string `json:"breaker"`
	Drained      bool   `json:"drained,omitempty"`
	// DPSize is the advertised data-parallel size; Ranks the ranks the load view sums.
	DPSize    int32 `json:"dp_size,omitempty"`
	LoadKnown bool  `json:"load_known"`
	Ranks     int32 `json:"ranks,omitempty"`
	// LoadAgeMillis is the age of the stalest rank's report.
	LoadAgeMillis int64   `json:"load_age_ms,omitempty"`
	Running       int64   `json:"running"`
	Waiting       int64   `json:"waiting"`
	KVUsed        int64   `json:"kv_used_tokens"`
	KVCapacity    int64   `json:"kv_capacity_tokens"`
	KVUsage       float64 `json:"kv_usage"` // KVUsed / KVCapacity, 0 when unknown
	InFlight      int64   `json:"inflight"`
	// Uncertain flags an engine whose KV residency the index cannot vouch for (a gap in its
	// event stream until a replay or a clear repairs it).
	Uncertain bool `json:"uncertain,omitempty"`
}

// FleetSummary is the whole fleet aggregated on the server, so the page never needs every row.
type FleetSummary struct {
	Engines     int            `json:"engines"`
	Healthy     int            `json:"healthy"`
	Unhealthy   int            `json:"unhealthy"`
	Drained     int            `json:"drained"`
	BreakerOpen int            `json:"breaker_open"`
	LoadUnknown int            `json:"load_unknown"`
	Uncertain   int            `json:"uncertain"`
	InFlight    int64          `json:"inflight"`
	Running     int64          `json:"running"`
	Waiting     int64          `json:"waiting"`
	ByRole      map[string]int `json:"by_role"`
	ByModel     map[string]int `json:"by_model"`
	// KVUsageHistogram counts engines with known load by KV usage in tenths (0-10%, ... 90-100%).
	KVUsageHistogram [10]int `json:"kv_usage_histogram"`
}

// fleetQuery selects, orders and pages the rows.
type fleetQuery struct {
	q      string // substring of id, model, URL or health reason
	role   string
	health string // "", "healthy", "unhealthy", "drained", "uncertain"
	sort   string // a column; "-" prefix for descending
	offset int
	limit  int
}

type fleetPage struct {
	Summary FleetSummary `json:"summary"`
	// Matched is the number of rows the query selects; Rows is the page of them at Offset.
	Matched int         `json:"matched"`
	Offset  int         `json:"offset"`
	Rows    []EngineRow `json:"rows"`
}

type fleetSources struct {
	reg       *registry.Registry
	load      *loadtable.Table
	leases    *inflight.Tracker
	health    func(id string) enginehealth.State
	uncertain func(id string) bool
}

func (f *fleetSources) rows() []EngineRow {
	reg := f.reg.Snapshot()
	snap := f.load.Snapshot()
	now := snap.Now()
	out := make([]EngineRow, 0, reg.Len())
	for _, w := range reg.Engines() {
		h, _ := reg.Health(w.ID)
		r := EngineRow{ID: w.ID, Role: w.Role.String(), Models: w.Models, URL: w.URL, Kind: w.Labels["engine"],
			Healthy: h.Healthy, HealthReason: h.Reason, Drained: w.Drained(), DPSize: w.DPSize, ProbeOK: true, Breaker: enginehealth.BreakerClosed,
			InFlight: f.leases.InFlight(w.Slot)}
		if !h.Since.IsZero() {
			r.HealthSince = h.Since.UTC().Format(time.RFC3339)
		}
		if f.health != nil {
			st := f.health(w.ID)
			r.ProbeOK, r.Breaker = st.ProbeOK, st.Breaker
		}
		if f.uncertain != nil {
			r.Uncertain = f.uncertain(w.ID)
		}
		if v, ok := snap.View(w.Slot); ok {
			r.LoadKnown, r.Ranks = true, v.Ranks
			r.LoadAgeMillis = v.Age(now).Milliseconds()
			r.Running, r.Waiting, r.KVUsed, r.KVCapacity = v.Running, v.Waiting, v.KVUsedTokens, v.KVCapacityTokens
			if v.KVCapacityTokens > 0 {
				r.KVUsage = float64(v.KVUsedTokens) / float64(v.KVCapacityTokens)
			}
		}
		out = append(out, r)
	}
	return out
}

func summarize(rows []EngineRow) FleetSummary {
	s := FleetSummary{Engines: len(rows), ByRole: map[string]int{}, ByModel: map[string]int{}}
	for i := range rows {
		r := &rows[i]
		if r.Healthy {
			s.Healthy++
		} else {
			s.Unhealthy++
		}
		if r.Drained {
			s.Drained++
		}
		if r.Breaker == enginehealth.BreakerOpen {
			s.BreakerOpen++
		}
		if r.Uncertain {
			s.Uncertain++
		}
		s.InFlight += r.InFlight
		s.ByRole[r.Role]++
		for _, m := range r.Models {
			s.ByModel[m]++
		}
		if !r.LoadKnown {
			s.LoadUnknown++
			continue
		}
		s.Running += r.Running
		s.Waiting += r.Waiting
		s.KVUsageHistogram[min(int(r.KVUsage*10), 9)]++
	}
	return s
}

func (q fleetQuery) keep(r *EngineRow) bool {
	if q.role != "" && r.Role != q.role {
		return false
	}
	switch q.health {
	case "healthy":
		if !r.Healthy {
			return false
		}
	case "unhealthy":
		if r.Healthy {
			return false
		}
	case "drained":
		if !r.Drained {
			return false
		}
	case "uncertain":
		if !r.Uncertain {
			return false
		}
	}
	if q.q == "" {
		return true
	}
	s := strings.ToLower(q.q)
	if strings.Contains(strings.ToLower(r.ID), s) || strings.Contains(strings.ToLower(r.URL), s) ||
		strings.Contains(strings.ToLower(r.HealthReason), s) {
		return true
	}
	return slices.ContainsFunc(r.Models, func(m string) bool { return strings.Contains(strings.ToLower(m), s) })
}

// fleetColumns are the columns the Fleet page sorts by.
var fleetColumns = map[string]func(a, b *EngineRow) int{
	"id":       func(a, b *EngineRow) int { return cmp.Compare(a.ID, b.ID) },
	"role":     func(a, b *EngineRow) int { return cmp.Compare(a.Role, b.Role) },
	"health":   func(a, b *EngineRow) int { return cmp.Compare(boolInt(a.Healthy), boolInt(b.Healthy)) },
	"running":  func(a, b *EngineRow) int { return cmp.Compare(a.Running, b.Running) },
	"waiting":  func(a, b *EngineRow) int { return cmp.Compare(a.Waiting, b.Waiting) },
	"kv":       func(a, b *EngineRow) int { return cmp.Compare(a.KVUsage, b.KVUsage) },
	"inflight": func(a, b *EngineRow) int { return cmp.Compare(a.InFlight, b.InFlight) },
	"age":      func(a, b *EngineRow) int { return cmp.Compare(a.LoadAgeMillis, b.LoadAgeMillis) },
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (f *fleetSources) page(q fleetQuery) fleetPage {
	rows := f.rows()
	p := fleetPage{Summary: summarize(rows), Offset: q.offset}
	kept := slices.DeleteFunc(rows, func(r EngineRow) bool { return !q.keep(&r) })
	by, desc := q.sort, false
	if rest, ok := strings.CutPrefix(by, "-"); ok {
		by, desc = rest, true
	}
	if c, ok := fleetColumns[by]; ok {
		slices.SortStableFunc(kept, func(a, b EngineRow) int {
			if desc {
				return c(&b, &a)
			}
			return c(&a, &b)
		})
	}
	p.Matched = len(kept)
	lo := min(q.offset, len(kept))
	hi := min(lo+q.limit, len(kept))
	p.Rows = kept[lo:hi:hi]
	return p
}
