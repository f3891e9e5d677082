package simengine

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/services/simengine/engine"
)

// RankLoad is one DP rank's entry of SGLang's GET /v1/loads, plus the simulation's cumulative
// prefill counters (the native load extension).
type RankLoad struct {
	DPRank                     int     `json:"dp_rank"`
	Timestamp                  float64 `json:"timestamp"`
	NumRunningReqs             int64   `json:"num_running_reqs"`
	NumWaitingReqs             int64   `json:"num_waiting_reqs"`
	NumWaitingUncachedTokens   int64   `json:"num_waiting_uncached_tokens"`
	NumUsedTokens              int64   `json:"num_used_tokens"`
	NumTotalTokens             int64   `json:"num_total_tokens"`
	MaxTotalNumTokens          int64   `json:"max_total_num_tokens"`
	TokenUsage                 float64 `json:"token_usage"`
	MaxRunningRequests         int64   `json:"max_running_requests"`
	PrefillUncachedTokensTotal int64   `json:"prefill_uncached_tokens_total"`
	PrefillBusyMicrosTotal     int64   `json:"prefill_busy_micros_total"`
}

// Loads is SGLang's GET /v1/loads response; timestamps are Unix seconds.
type Loads struct {
	Timestamp   float64    `json:"timestamp"`
	DPRankCount int        `json:"dp_rank_count"`
	Loads       []RankLoad `json:"loads"`
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func tokenUsage(l engine.Load) float64 {
	if l.KVCapacityTokens == 0 {
		return 0
	}
	return float64(l.KVUsedTokens) / float64(l.KVCapacityTokens)
}

func (s *Server) loads(w http.ResponseWriter, _ *http.Request) {
	now := unixSeconds(time.Now())
	l := s.engine.Load()
	writeJSON(w, Loads{Timestamp: now, DPRankCount: 1, Loads: []RankLoad{{
		DPRank: 0, Timestamp: now, NumRunningReqs: l.Running, NumWaitingReqs: l.Waiting,
		NumWaitingUncachedTokens: l.WaitingUncachedTokens, NumUsedTokens: l.KVUsedTokens,
		NumTotalTokens: l.TotalTokens, MaxTotalNumTokens: l.KVCapacityTokens, TokenUsage: tokenUsage(l),
		MaxRunningRequests: l.MaxRunning, PrefillUncachedTokensTotal: l.PrefillUncachedTokensTotal,
		PrefillBusyMicrosTotal: l.PrefillBusyMicrosTotal,
	}}})
}

// registerEngineMetrics registers the engine's gauges in the naming of the engine it imitates
// (SGLang: sglang:num_running_reqs{model_name}; vLLM: vllm:num_requests_running{engine="0",
// model_name}), plus sluice_simengine_* series of its own.
func registerEngineMetrics(reg *prometheus.Registry, cfg Config, eng *engine.Engine, failed *atomic.Bool) {
	gauge := func(name, help string, labels prometheus.Labels, f func(engine.Load) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(eng.Load()) }))
	}
	counter := func(name, help string, labels prometheus.Labels, f func(engine.Load) float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(eng.Load()) }))
	}
	switch cfg.MetricsNaming {
	case NamingVLLM:
		l := prometheus.Labels{"engine": "0", "model_name": cfg.Model}
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", l,
			func(l engine.Load) float64 { return float64(l.Running) })
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l,
			func(l engine.Load) float64 { return float64(l.Waiting) })
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, tokenUsage)
		gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", prometheus.Labels{
			"block_size": strconv.Itoa(cfg.BlockSize), "num_gpu_blocks": strconv.Itoa(cfg.CacheBlocks),
			"enable_prefix_caching": "True", "engine": "0",
		}, func(engine.Load) float64 { return 1 })
	default:
		l := prometheus.Labels{"model_name": cfg.Model}
		gauge("sglang:num_running_reqs", "The number of running requests.", l,
			func(l engine.Load) float64 { return float64(l.Running) })
		gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", l,
			func(l engine.Load) float64 { return float64(l.Waiting) })
		gauge("sglang:token_usage", "The token usage.", l, tokenUsage)
		gauge("sglang:num_used_tokens", "The number of used tokens.", l,
			func(l engine.Load) float64 { return float64(l.KVUsedTokens) })
		gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", l,
			func(l engine.Load) float64 { return float64(l.KVCapacityTokens) })
	}
	own := prometheus.Labels{"engine_id": cfg.ID}
	gauge("sluice_simengine_cached_blocks", "Blocks in the simulated prefix cache.", own,
		func(l engine.Load) float64 { return float64(l.CachedBlocks) })
	counter("sluice_simengine_prefill_uncached_tokens_total", "Uncached prompt tokens prefilled.", own,
		func(l engine.Load) float64 { return float64(l.PrefillUncachedTokensTotal) })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_simengine_healthy",
		Help: "1 unless the engine was marked unhealthy.", ConstLabels: own}, func() float64 {
		if failed.Load() {
			return 0
		}
		return 1
	}))
}
