package enginelink

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// rankLoad is one DP rank's load as scraped.
type rankLoad struct {
	Running, Waiting     int64
	KVUsed, KVCapacity   int64
	Native               *nativeLoad
	CapturedAt           time.Time // zero: the scrape time
	hasUsage, hasRunning bool
	usage                float64
}

// nativeLoad mirrors sluice.v1.NativeLoad.
type nativeLoad struct {
	WaitingUncachedTokens, TotalTokens, MaxRunningRequests int64
	PrefillUncachedTokensTotal, PrefillBusyMicrosTotal     int64
}

// errNoLoadMetrics marks a metrics page with neither vLLM nor SGLang load gauges.
var errNoLoadMetrics = errors.New("no vLLM (vllm:num_requests_running) or SGLang (sglang:num_running_reqs) load metrics found")

// parseMetrics maps an engine's Prometheus text exposition to per-rank loads. vLLM: the engine
// label is the DP rank; capacity = num_gpu_blocks × block_size from vllm:cache_config_info;
// used = kv_cache_usage_perc (or the older gpu_cache_usage_perc) × capacity. SGLang: the
// dp_rank label is the rank; of several tp/pp ranks of one DP rank the lowest is read.
func parseMetrics(r io.Reader) (map[int]*rankLoad, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	loads := map[int]*rankLoad{}
	at := func(rank int) *rankLoad {
		if loads[rank] == nil {
			loads[rank] = &rankLoad{}
		}
		return loads[rank]
	}
	// vLLM
	each(fams["vllm:num_requests_running"], "engine", func(rank int, v float64, _ *dto.Metric) {
		l := at(rank)
		l.Running += int64(v)
		l.hasRunning = true
	})
	each(fams["vllm:num_requests_waiting"], "engine", func(rank int, v float64, _ *dto.Metric) { at(rank).Waiting += int64(v) })
	each(fams["vllm:gpu_cache_usage_perc"], "engine", func(rank int, v float64, _ *dto.Metric) {
		l := at(rank)
		l.usage, l.hasUsage = v, true
	})
	each(fams["vllm:kv_cache_usage_perc"], "engine", func(rank int, v float64, _ *dto.Metric) { // wins over the old name
		l := at(rank)
		l.usage, l.hasUsage = v, true
	})
	each(fams["vllm:cache_config_info"], "engine", func(rank int, _ float64, m *dto.Metric) {
		bs, _ := strconv.ParseInt(label(m, "block_size"), 10, 64)
		nb, _ := strconv.ParseInt(label(m, "num_gpu_blocks"), 10, 64)
		if bs > 0 && nb > 0 {
			at(rank).KVCapacity = bs * nb
		}
	})
	for _, l := range loads {
		if l.hasUsage && l.KVCapacity > 0 {
			l.KVUsed = int64(math.Round(min(max(l.usage, 0), 1) * float64(l.KVCapacity)))
		}
	}
	// SGLang
	sg := func(name string, set func(l *rankLoad, v int64)) {
		best := map[int][2]int{}
		each(fams[name], "dp_rank", func(rank int, v float64, m *dto.Metric) {
			tp, _ := strconv.Atoi(label(m, "tp_rank"))
			pp, _ := strconv.Atoi(label(m, "pp_rank"))
			if b, seen := best[rank]; seen && (tp > b[0] || tp == b[0] && pp >= b[1]) {
				return
			}
			best[rank] = [2]int{tp, pp}
			set(at(rank), int64(v))
		})
	}
	sg("sglang:num_running_reqs", func(l *rankLoad, v int64) { l.Running, l.hasRunning = v, true })
	sg("sglang:num_queue_reqs", func(l *rankLoad, v int64) { l.Waiting = v })
	sg("sglang:num_used_tokens", func(l *rankLoad, v int64) { l.KVUsed = v })
	sg("sglang:max_total_num_tokens", func(l *rankLoad, v int64) { l.KVCapacity = v })

	for rank, l := range loads {
		if !l.hasRunning {
			delete(loads, rank) // e.g. a cache_config_info without load gauges
		}
	}
	if len(loads) == 0 {
		return nil, errNoLoadMetrics
	}
	return loads, nil
}

// each calls f for every sample of fam with the rank read from rankLabel (absent: 0).
// Samples with an unparsable rank are skipped.
func each(fam *dto.MetricFamily, rankLabel string, f func(rank int, v float64, m *dto.Metric)) {
	if fam == nil {
		return
	}
	for _, m := range fam.GetMetric() {
		rank := 0
		if s := label(m, rankLabel); s != "" {
			r, err := strconv.Atoi(s)
			if err != nil || r < 0 || r >= maxRanks {
				continue
			}
			rank = r
		}
		var v float64
		switch {
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Untyped != nil:
			v = m.GetUntyped().GetValue()
		default:
			continue
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		f(rank, v, m)
	}
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// sglangLoads is SGLang's GET /v1/loads answer (0.5.23).
type sglangLoads struct {
	Timestamp string           `json:"timestamp"`
	Loads     []sglangRankLoad `json:"loads"`
}

type sglangRankLoad struct {
	Timestamp                  string  `json:"timestamp"`
	DPRank                     float64 `json:"dp_rank"`
	NumRunningReqs             float64 `json:"num_running_reqs"`
	NumWaitingReqs             float64 `json:"num_waiting_reqs"`
	NumWaitingUncachedTokens   float64 `json:"num_waiting_uncached_tokens"`
	NumUsedTokens              float64 `json:"num_used_tokens"`
	NumTotalTokens             float64 `json:"num_total_tokens"`
	MaxTotalNumTokens          float64 `json:"max_total_num_tokens"`
	MaxRunningRequests         float64 `json:"max_running_requests"`
	TotalPrefillUncachedTokens float64 `json:"total_prefill_uncached_tokens"`
	TotalPrefillBusyUs         float64 `json:"total_prefill_busy_us"`
}

// parseSGLangLoads maps /v1/loads to per-rank loads with the native numbers filled.
func parseSGLangLoads(r io.Reader) (map[int]*rankLoad, error) {
	var doc sglangLoads
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("parse /v1/loads: %w", err)
	}
	if len(doc.Loads) == 0 {
		return nil, errors.New("parse /v1/loads: no loads entries")
	}
	out := map[int]*rankLoad{}
	for i, e := range doc.Loads {
		rank := int(e.DPRank)
		if e.DPRank < 0 || e.DPRank >= maxRanks || float64(rank) != e.DPRank {
			return nil, fmt.Errorf("parse /v1/loads: loads[%d].dp_rank %v is not a rank", i, e.DPRank)
		}
		l := &rankLoad{
			Running: int64(e.NumRunningReqs), Waiting: int64(e.NumWaitingReqs),
			KVUsed: int64(e.NumUsedTokens), KVCapacity: int64(e.MaxTotalNumTokens), hasRunning: true,
			Native: &nativeLoad{
				WaitingUncachedTokens:      int64(e.NumWaitingUncachedTokens),
				TotalTokens:                int64(e.NumTotalTokens),
				MaxRunningRequests:         int64(e.MaxRunningRequests),
				PrefillUncachedTokensTotal: int64(e.TotalPrefillUncachedTokens),
				PrefillBusyMicrosTotal:     int64(e.TotalPrefillBusyUs),
			},
		}
		ts := e.Timestamp
		if ts == "" {
			ts = doc.Timestamp
		}
		if t, err := parseISO(ts); err == nil {
			l.CapturedAt = t
		}
		out[rank] = l
	}
	return out, nil
}

// parseISO reads an SGLang timestamp that names its zone (RFC 3339). One without a zone is in the
// engine's local time, which the link cannot know: the scrape time is used instead.
func parseISO(s string) (time.Time, error) {
	return time.Parse(time.RFC3339Nano, s)
}
