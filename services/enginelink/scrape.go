package enginelink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
//
// Only the lines of the families read here reach the text parser (loadLines): an engine's page
// is mostly histograms the link does not read, and parsing them all cost most of a scrape. A
// malformed line of another family therefore no longer fails the scrape.
func parseMetrics(page []byte) (map[int]*rankLoad, error) {
	fams, err := parseFamilies(loadLines(page))
	if err != nil {
		return nil, err
	}
	return loadsOf(fams)
}

// loadFamilies are the metric families parseMetrics reads.
var loadFamilies = map[string]bool{
	"vllm:num_requests_running": true, "vllm:num_requests_waiting": true, "vllm:gpu_cache_usage_perc": true,
	"vllm:kv_cache_usage_perc": true, "vllm:cache_config_info": true,
	"sglang:num_running_reqs": true, "sglang:num_queue_reqs": true, "sglang:num_used_tokens": true,
	"sglang:max_total_num_tokens": true,
}

// loadLines returns the lines of page that can belong to loadFamilies, in order: their samples
// and their HELP and TYPE comments, and every line whose name is quoted (the UTF-8 form
// {"name",...}, which the text parser sorts out). Other comments, blank lines and other
// families' lines are left out. The lines are page's own, so the result is only read.
func loadLines(page []byte) []byte {
	out := make([]byte, 0, 1024)
	for rest := page; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i+1], rest[i+1:]
		} else {
			rest = nil
		}
		if keepLine(line) {
			out = append(out, line...)
			if line[len(line)-1] != '\n' {
				out = append(out, '\n')
			}
		}
	}
	return out
}

func keepLine(line []byte) bool {
	l := bytes.TrimLeft(line, " \t")
	if len(l) == 0 {
		return false
	}
	if l[0] == '#' {
		// "# HELP name ..." and "# TYPE name type"; the parser skips other comments.
		f := bytes.Fields(l[1:])
		if len(f) < 2 || string(f[0]) != "HELP" && string(f[0]) != "TYPE" {
			return false
		}
		return f[1][0] == '"' || loadFamilies[string(f[1])]
	}
	if l[0] == '{' {
		return true
	}
	end := bytes.IndexAny(l, "{ \t\r\n")
	if end < 0 {
		end = len(l)
	}
	return loadFamilies[string(l[:end])]
}

// parseFamilies parses a Prometheus text exposition.
func parseFamilies(page []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return fams, nil
}

// loadsOf maps the parsed families to per-rank loads (parseMetrics).
func loadsOf(fams map[string]*dto.MetricFamily) (map[int]*rankLoad, error) {
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
	// Timestamp is Unix seconds as a float in SGLang's per-rank LoadSnapshot (only the
	// document's own timestamp is an ISO string); either form is accepted.
	Timestamp                  rankStamp `json:"timestamp"`
	DPRank                     float64   `json:"dp_rank"`
	NumRunningReqs             float64   `json:"num_running_reqs"`
	NumWaitingReqs             float64   `json:"num_waiting_reqs"`
	NumWaitingUncachedTokens   float64   `json:"num_waiting_uncached_tokens"`
	NumUsedTokens              float64   `json:"num_used_tokens"`
	NumTotalTokens             float64   `json:"num_total_tokens"`
	MaxTotalNumTokens          float64   `json:"max_total_num_tokens"`
	MaxRunningRequests         float64   `json:"max_running_requests"`
	TotalPrefillUncachedTokens float64   `json:"total_prefill_uncached_tokens"`
	TotalPrefillBusyUs         float64   `json:"total_prefill_busy_us"`
}

// parseSGLangLoads maps /v1/loads to per-rank loads with the native numbers filled.
func parseSGLangLoads(body []byte) (map[int]*rankLoad, error) {
	var doc sglangLoads
	if err := json.Unmarshal(body, &doc); err != nil {
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
		if e.Timestamp.ok {
			l.CapturedAt = e.Timestamp.t
		} else if t, err := parseISO(doc.Timestamp); err == nil {
			l.CapturedAt = t
		}
		out[rank] = l
	}
	return out, nil
}

// rankStamp is a per-rank timestamp as decoded (rankTime); ok is false when absent or unreadable.
type rankStamp struct {
	t  time.Time
	ok bool
}

// UnmarshalJSON reads the value in place: no json.RawMessage copy, no second decode.
func (s *rankStamp) UnmarshalJSON(raw []byte) error {
	s.t, s.ok = rankTime(raw)
	return nil
}

// rankTime reads a per-rank timestamp: Unix seconds (a JSON number) or an RFC 3339 string.
func rankTime(raw []byte) (time.Time, bool) {
	// A JSON number (the decoder has checked the syntax) is what ParseFloat reads.
	if len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		if secs, err := strconv.ParseFloat(string(raw), 64); err == nil && secs > 0 {
			return time.UnixMicro(int64(math.Round(secs * 1e6))).UTC(), true // float seconds carry about µs precision
		}
		return time.Time{}, false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if t, err := parseISO(s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// parseISO reads an SGLang timestamp that names its zone (RFC 3339). One without a zone is in the
// engine's local time, which the link cannot know: the scrape time is used instead.
func parseISO(s string) (time.Time, error) {
	return time.Parse(time.RFC3339Nano, s)
}
