package simengine

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/services/simengine/engine"
)

// The engine versions whose wire the simulation speaks, reported where the engines report
// their own version.
const (
	SGLangVersion = "0.5.23"
	VLLMVersion   = "0.33.0"
	// accelerator is what /v1/loads names as the device: there is none.
	accelerator = "simulated (sluice simengine)"
)

// RankLoad is one DP rank's entry of SGLang 0.5.23's GET /v1/loads ("core" section), field for
// field: timestamp is Unix seconds; the total_* fields are cumulative since start.
type RankLoad struct {
	Timestamp                float64 `json:"timestamp"`
	DPRank                   int     `json:"dp_rank"`
	NumRunningReqs           int64   `json:"num_running_reqs"`
	NumWaitingReqs           int64   `json:"num_waiting_reqs"`
	NumWaitingUncachedTokens int64   `json:"num_waiting_uncached_tokens"`
	NumUsedTokens            int64   `json:"num_used_tokens"`
	NumTotalTokens           int64   `json:"num_total_tokens"`
	// NumActiveTokens is NumTotalTokens less tokens awaiting a KV transfer: equal outside a
	// disaggregated decode engine, and the simulated handoff is instantaneous.
	NumActiveTokens int64 `json:"num_active_tokens"`
	// NumPreallocReadyTokens is 0: the simulated decode engine preallocates nothing.
	NumPreallocReadyTokens int64   `json:"num_prealloc_ready_tokens"`
	MaxTotalNumTokens      int64   `json:"max_total_num_tokens"`
	MaxRunningRequests     int64   `json:"max_running_requests"`
	TokenUsage             float64 `json:"token_usage"`
	// GenThroughput is the latency model's decode rate: decoding requests × tokens per second.
	GenThroughput float64 `json:"gen_throughput"`
	// CacheHitRate is cached ÷ looked-up prompt tokens since start.
	CacheHitRate float64 `json:"cache_hit_rate"`
	// Utilization is running ÷ max running requests; -1 on a prefill engine, as SGLang does.
	Utilization                float64 `json:"utilization"`
	TotalPrefillUncachedTokens int64   `json:"total_prefill_uncached_tokens"`
	TotalPrefillBusyUS         int64   `json:"total_prefill_busy_us"`
	// DecodeMoments is null: SGLang leaves it unset unless it collects decode step times,
	// which the simulation does not model.
	DecodeMoments []float64 `json:"decode_moments"`
}

// Loads is SGLang 0.5.23's GET /v1/loads response.
type Loads struct {
	// Timestamp is ISO 8601 with microseconds and a +00:00 offset, as Python's isoformat.
	Timestamp       string     `json:"timestamp"`
	Version         string     `json:"version"`
	Accelerator     string     `json:"accelerator"`
	NumAccelerators int        `json:"num_accelerators"`
	Loads           []RankLoad `json:"loads"`
}

// isoTime formats t as Python's datetime.isoformat() of an aware UTC time.
func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000-07:00") }

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func tokenUsage(l engine.Load) float64 {
	if l.KVCapacityTokens == 0 {
		return 0
	}
	return float64(l.KVUsedTokens) / float64(l.KVCapacityTokens)
}

func cacheHitRate(l engine.Load) float64 {
	if l.PromptTokensTotal == 0 {
		return 0
	}
	return float64(l.CachedTokensTotal) / float64(l.PromptTokensTotal)
}

// genThroughput is the decode rate the latency model gives the requests now decoding.
func (c *Config) genThroughput(l engine.Load) float64 {
	return float64(l.Decoding) * 1000 / c.DecodeMsPerToken * c.Speed
}

func (c *Config) utilization(l engine.Load) float64 {
	if c.Role == engine.RolePrefill.String() {
		return -1
	}
	if l.MaxRunning == 0 {
		return 0
	}
	return float64(l.Running) / float64(l.MaxRunning)
}

func (s *Server) rankLoad(rank int, at time.Time, l engine.Load) RankLoad {
	return RankLoad{
		Timestamp: unixSeconds(at), DPRank: rank, NumRunningReqs: l.Running, NumWaitingReqs: l.Waiting,
		NumWaitingUncachedTokens: l.WaitingUncachedTokens, NumUsedTokens: l.KVUsedTokens,
		NumTotalTokens: l.TotalTokens, NumActiveTokens: l.TotalTokens, MaxTotalNumTokens: l.KVCapacityTokens,
		MaxRunningRequests: l.MaxRunning, TokenUsage: tokenUsage(l), GenThroughput: s.cfg.genThroughput(l),
		CacheHitRate: cacheHitRate(l), Utilization: s.cfg.utilization(l),
		TotalPrefillUncachedTokens: l.PrefillUncachedTokensTotal, TotalPrefillBusyUS: l.PrefillBusyMicrosTotal,
	}
}

// loads serves GET /v1/loads (SGLang naming only).
func (s *Server) loads(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	out := Loads{Timestamp: isoTime(now), Version: SGLangVersion, Accelerator: accelerator, NumAccelerators: len(s.engines)}
	for rank, e := range s.engines {
		out.Loads = append(out.Loads, s.rankLoad(rank, now, e.Load()))
	}
	writeJSON(w, out)
}
