package simengine

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/services/simengine/engine"
)

// registerEngineMetrics registers one DP rank's gauges with the names and labels of the engine
// the sim imitates, plus sluice_simengine_* series of its own. client_golang writes exactly
// these names (the engines' "vllm:"/"sglang:" prefixes are valid metric names) with labels
// sorted, as the engines' prometheus_client does, so no hand-written exposition is needed.
//
// vLLM 0.33: vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc
// {engine=<rank>, model_name}; vllm:cache_config_info{block_size, enable_prefix_caching,
// engine, num_gpu_blocks} 1; counters vllm:prefix_cache_queries_total and
// vllm:prefix_cache_hits_total (prompt tokens looked up and found).
//
// SGLang 0.5.23: sglang:num_running_reqs, num_queue_reqs, token_usage, num_used_tokens,
// max_total_num_tokens, cache_hit_rate, gen_throughput, labelled as its scheduler labels them:
// {engine_type="unified", model_name, pp_rank="0", tp_rank="0"}, with dp_rank only when the
// engine runs data-parallel ranks (SGLang sets it for dp_size > 1 only).
//
// Both engines also export <prefix>:time_to_first_token_seconds (a histogram, same labels,
// vLLM's buckets), from a request's submission to the engine model (its HTTP body parsed and
// tokenized) to its first output token; the
// returned histogram is that rank's, observed by the HTTP handlers. Its _sum and _count are
// what the peer benchmark subtracts from the client's TTFT to tell routing from transport.
func registerEngineMetrics(reg *prometheus.Registry, cfg Config, rank int, dpSize int, eng *engine.Engine, failed *atomic.Bool) prometheus.Observer {
	gauge := func(name, help string, labels prometheus.Labels, f func(engine.Load) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(eng.Load()) }))
	}
	counter := func(name, help string, labels prometheus.Labels, f func(engine.Load) float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return f(eng.Load()) }))
	}
	var ttft prometheus.Observer
	histogram := func(name string, labels prometheus.Labels) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: "Histogram of time to first token in seconds.",
			ConstLabels: labels, Buckets: ttftBuckets})
		reg.MustRegister(h)
		return h
	}
	r := strconv.Itoa(rank)
	switch cfg.MetricsNaming {
	case NamingVLLM:
		l := prometheus.Labels{"engine": r, "model_name": cfg.Model}
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", l,
			func(l engine.Load) float64 { return float64(l.Running) })
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l,
			func(l engine.Load) float64 { return float64(l.Waiting) })
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, tokenUsage)
		counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", l,
			func(l engine.Load) float64 { return float64(l.PromptTokensTotal) })
		counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", l,
			func(l engine.Load) float64 { return float64(l.CachedTokensTotal) })
		ttft = histogram("vllm:time_to_first_token_seconds", l)
		gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", prometheus.Labels{
			"block_size": strconv.Itoa(cfg.BlockSize), "num_gpu_blocks": strconv.Itoa(cfg.CacheBlocks),
			"enable_prefix_caching": "True", "engine": r,
		}, func(engine.Load) float64 { return 1 })
	default:
		l := prometheus.Labels{"model_name": cfg.Model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
		if dpSize > 1 {
			l["dp_rank"] = r
		}
		gauge("sglang:num_running_reqs", "The number of running requests.", l,
			func(l engine.Load) float64 { return float64(l.Running) })
		gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", l,
			func(l engine.Load) float64 { return float64(l.Waiting) })
		gauge("sglang:token_usage", "The token usage.", l, tokenUsage)
		gauge("sglang:num_used_tokens", "The number of used tokens.", l,
			func(l engine.Load) float64 { return float64(l.KVUsedTokens) })
		gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", l,
			func(l engine.Load) float64 { return float64(l.KVCapacityTokens) })
		gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", l, cacheHitRate)
		gauge("sglang:gen_throughput", "The generation throughput (token/s).", l, cfg.genThroughput)
		ttft = histogram("sglang:time_to_first_token_seconds", l)
	}
	own := prometheus.Labels{"engine_id": cfg.ID, "dp_rank": r}
	gauge("sluice_simengine_cached_blocks", "Blocks in the simulated prefix cache.", own,
		func(l engine.Load) float64 { return float64(l.CachedBlocks) })
	counter("sluice_simengine_prefill_uncached_tokens_total", "Uncached prompt tokens prefilled.", own,
		func(l engine.Load) float64 { return float64(l.PrefillUncachedTokensTotal) })
	if rank == 0 {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_simengine_healthy",
			Help: "1 unless the engine was marked unhealthy.", ConstLabels: prometheus.Labels{"engine_id": cfg.ID}}, func() float64 {
			if failed.Load() {
				return 0
			}
			return 1
		}))
	}
	return ttft
}

// ttftBuckets are vLLM's bucket bounds for vllm:time_to_first_token_seconds (SGLang's start
// with the same eight); a tenth of a millisecond first, for engines run many times faster
// than real.
var ttftBuckets = []float64{0.0001, 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
	20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
