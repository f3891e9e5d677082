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
	"github.com/sluicehq/sluice/state/slots"
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
	// DPSize is the registry's data-parallel size; Ranks the ranks the load view sums.
	DPSize    int32 `json:"dp_size,omitempty"`
	LoadKnown bool  `json:"load_known"`
	Ranks     int32 `json:"ranks,omitempty"`
	// LoadAgeMillis is the age of the stalest rank's report.
	LoadAgeMillis int64 `json:"load_age_ms,omitempty"`
	// RankLoad is each rank's last report as the load table holds it, also when the summed
	// view is unknown (a rank missing or stale says which); only on the rows of the page.
	RankLoad []RankRow `json:"rank_load,omitempty"`
	// KVBlocks is the blocks the prefix index holds for the engine, summed over its ranks;
	// absent without KV ingestion.
	KVBlocks *int `json:"kv_blocks,omitempty"`
	// The engine's summed load: running and waiting requests, KV tokens used and capacity.
	Running    int64   `json:"running"`
	Waiting    int64   `json:"waiting"`
	KVUsed     int64   `json:"kv_used_tokens"`
	KVCapacity int64   `json:"kv_capacity_tokens"`
	KVUsage    float64 `json:"kv_usage"` // KVUsed / KVCapacity, 0 when unknown
	InFlight   int64   `json:"inflight"`
	// Uncertain flags an engine whose KV residency the index cannot vouch for (a gap in its
	// event stream until a replay or a clear repairs it).
	Uncertain bool `json:"uncertain,omitempty"`

	slot slots.Slot
}

// RankRow is one data-parallel rank's load on the Fleet page.
type RankRow struct {
	Rank int32 `json:"rank"`
	// Reported is false for a rank of the advertised size that has sent nothing this epoch.
	Reported bool `json:"reported"`
	// Fresh is whether the report is within the decider's load freshness window; AgeMillis
	// is its age.
	Fresh      bool    `json:"fresh,omitempty"`
	AgeMillis  int64   `json:"age_ms,omitempty"`
	Running    int64   `json:"running,omitempty"`
	Waiting    int64   `json:"waiting,omitempty"`
	KVUsed     int64   `json:"kv_used_tokens,omitempty"`
	KVCapacity int64   `json:"kv_capacity_tokens,omitempty"`
	KVUsage    float64 `json:"kv_usage,omitempty"`
	// WaitingUncached and PrefillRate (uncached tokens/s) come from the native extension;
	// absent when the rank does not send it or the rate is not known yet.
	WaitingUncached int64   `json:"waiting_uncached_tokens,omitempty"`
	PrefillRate     float64 `json:"prefill_rate,omitempty"`
}

// FleetSummary is the whole fleet aggregated on the server, so the page never needs every row.
type FleetSummary struct {
	Engines     int   `json:"engines"`
	Healthy     int   `json:"healthy"`
	Unhealthy   int   `json:"unhealthy"`
	Drained     int   `json:"drained"`
	BreakerOpen int   `json:"breaker_open"`
	LoadUnknown int   `json:"load_unknown"`
	Uncertain   int   `json:"uncertain"`
	InFlight    int64 `json:"inflight"`
	Running     int64 `json:"running"`
	Waiting     int64 `json:"waiting"`
	// KVBlocks is the engines' indexed blocks summed ((block, rank) pairs, so a block two
	// engines hold counts twice).
	KVBlocks int            `json:"kv_blocks"`
	ByRole   map[string]int `json:"by_role"`
	ByModel  map[string]int `json:"by_model"`
	// KVUsageHistogram counts engines with known load by KV usage in tenths (0-10%, ... 90-100%).
	KVUsageHistogram [10]int `json:"kv_usage_histogram"`
}

// fleetQuery selects, orders and pages the rows.
type fleetQuery struct {
	id     string // exactly this engine
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
	blocks    func(dst []int) []int // per engine slot; nil without KV ingestion
}

// rows builds every engine's row and returns them with the time load was judged against.
func (f *fleetSources) rows() ([]EngineRow, time.Time) {
	reg := f.reg.Snapshot()
	snap := f.load.Snapshot()
	now := snap.Now()
	out := make([]EngineRow, 0, reg.Len())
	var blocks []int
	if f.blocks != nil {
		blocks = f.blocks(nil)
	}
	for _, w := range reg.Engines() {
		h, _ := reg.Health(w.ID)
		r := EngineRow{ID: w.ID, Role: w.Role.String(), Models: w.Models, URL: w.URL, Kind: w.Labels["engine"],
			Healthy: h.Healthy, HealthReason: h.Reason, Drained: w.Drained(), DPSize: w.DPSize, ProbeOK: true, Breaker: enginehealth.BreakerClosed,
			InFlight: f.leases.InFlight(w.Slot), slot: w.Slot}
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
		if f.blocks != nil {
			n := 0
			if int(w.Slot) < len(blocks) {
				n = blocks[w.Slot]
			}
			r.KVBlocks = &n
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
	return out, now
}

// addRanks fills in the rows' per-rank load, judged against now. It takes the load table's
// writer lock once per row, so it runs for the page's rows only.
func (f *fleetSources) addRanks(rows []EngineRow, now time.Time) {
	var buf []loadtable.RankLoad
	for i := range rows {
		r := &rows[i]
		buf, _, _ = f.load.Ranks(r.ID, now, buf[:0])
		if len(buf) == 0 {
			continue
		}
		r.RankLoad = make([]RankRow, len(buf))
		for k, rl := range buf {
			rr := RankRow{Rank: rl.Rank, Reported: rl.Reported}
			if rl.Reported {
				rr.Fresh, rr.AgeMillis = rl.Fresh, rl.Age(now).Milliseconds()
				rr.Running, rr.Waiting, rr.KVUsed, rr.KVCapacity = rl.Running, rl.Waiting, rl.KVUsedTokens, rl.KVCapacityTokens
				if rl.KVCapacityTokens > 0 {
					rr.KVUsage = float64(rl.KVUsedTokens) / float64(rl.KVCapacityTokens)
				}
				rr.WaitingUncached, rr.PrefillRate = rl.WaitingUncachedTokens, rl.PrefillRate
			}
			r.RankLoad[k] = rr
		}
	}
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
		if r.KVBlocks != nil {
			s.KVBlocks += *r.KVBlocks
		}
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
	if q.id != "" && r.ID != q.id {
		return false
	}
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
	"blocks":   func(a, b *EngineRow) int { return cmp.Compare(derefInt(a.KVBlocks), derefInt(b.KVBlocks)) },
}

func derefInt(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (f *fleetSources) page(q fleetQuery) fleetPage {
	rows, now := f.rows()
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
	f.addRanks(p.Rows, now)
	return p
}
