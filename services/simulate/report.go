package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/trace"
	"github.com/sluicehq/sluice/state/config"
)

// requestRecord is what the loop learns about one request.
type requestRecord struct {
	engine   int    // index in the fleet, -1 when rejected
	rejected string // the decider's reason when rejected
	done     bool
	prompt   int
	arrival  time.Duration
	cached   int
	queue    time.Duration
	ttft     time.Duration
	e2e      time.Duration
}

// Report is the whole comparison; it holds no wall-clock value, so equal inputs give equal bytes.
type Report struct {
	Trace       string   `json:"trace"`
	WindowStart string   `json:"window_start"`
	Window      string   `json:"window"`
	Speed       float64  `json:"speed"`
	Requests    int      `json:"requests"`
	Span        string   `json:"arrival_span"`
	Engines     []string `json:"engines"`
	Model       Model    `json:"engine_model"`
	Feedback    Feedback `json:"feedback"`
	Seed        uint64   `json:"seed"`
	// Bounds are policy-independent hit-rate references.
	Bounds   Bounds         `json:"bounds"`
	Policies []PolicyResult `json:"policies"`
}

// Model is the engine model's settings.
type Model struct {
	CacheBlocks         int     `json:"cache_blocks"`
	BlockSize           int     `json:"block_size"`
	MaxRunning          int     `json:"max_running"`
	PrefillTokensPerSec float64 `json:"prefill_tokens_per_sec"`
	DecodeMsPerToken    float64 `json:"decode_ms_per_token"`
}

// Feedback is how load and KV state reach the decider.
type Feedback struct {
	ReportInterval string `json:"report_interval"`
	KVLag          string `json:"kv_lag"`
	LoadFreshness  string `json:"load_freshness"`
}

// Bounds are block hit rates no policy decides: one LRU of every engine's blocks, and an
// unbounded cache, each fed the requests in arrival order.
type Bounds struct {
	PooledLRU float64 `json:"pooled_lru_hit_rate"`
	Infinite  float64 `json:"infinite_hit_rate"`
}

// Percentiles are in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99,omitempty"`
}

// PolicyResult is one policy's run.
type PolicyResult struct {
	Policy string `json:"policy"`
	Served int    `json:"served"`
	// Rejected counts requests the decider refused, by reason.
	Rejected map[string]int `json:"rejected"`
	// BlockHitRate is prompt blocks found cached over full prompt blocks, served requests.
	BlockHitRate float64     `json:"block_hit_rate"`
	TTFTMs       Percentiles `json:"ttft_ms"`
	E2EMs        Percentiles `json:"e2e_ms"`
	QueueMs      Percentiles `json:"queue_ms"`
	// EngineShare is each engine's share of the served requests, in fleet order.
	EngineShare []float64 `json:"engine_share"`
	MaxShare    float64   `json:"max_share"`
	// Makespan is from the first arrival to the last finish, virtual time.
	Makespan string `json:"makespan"`

	// Runs are the requests' own outcomes in trace order (not in the report: tests/honesty
	// compares them with the live stack's request by request).
	Runs []RunOutcome `json:"-"`

	ttfts []time.Duration // sorted, for the plots
}

// RunOutcome is one request of a policy's run.
type RunOutcome struct {
	// Engine is the index in the fleet of the engine that ran it, -1 when it was rejected.
	Engine int
	// Arrival is the request's (scaled) arrival; Queue, TTFT and E2E count from it.
	Arrival, Queue, TTFT, E2E time.Duration
	Prompt, Cached            int
}

func newReport(cfg Config, doc *config.Document, reqs []trace.Request) *Report {
	ec := cfg.engineConfig()
	r := &Report{Trace: filepath.Base(cfg.Trace), WindowStart: cfg.WindowStart.String(), Window: cfg.Window.String(), Speed: cfg.Speed,
		Requests: len(reqs), Span: reqs[len(reqs)-1].Arrival.String(), Seed: cfg.Seed,
		Model: Model{CacheBlocks: cfg.CacheBlocks, BlockSize: cfg.BlockSize, MaxRunning: cfg.MaxRunning,
			PrefillTokensPerSec: cfg.PrefillTokensPerSec, DecodeMsPerToken: cfg.DecodeMsPerToken},
		Feedback: Feedback{ReportInterval: cfg.ReportInterval.String(), KVLag: cfg.KVLag.String(), LoadFreshness: cfg.LoadFreshness.String()}}
	if ec.BlockSize == 0 {
		r.Model.BlockSize = 16
	}
	for _, w := range doc.Engines {
		r.Engines = append(r.Engines, w.ID)
	}
	return r
}

func (f *fleet) result() PolicyResult {
	bs := f.engines[0].sim.Config().BlockSize
	res := PolicyResult{Rejected: map[string]int{}, EngineShare: make([]float64, len(f.engines)), Runs: make([]RunOutcome, len(f.records))}
	var ttft, e2e, queue []time.Duration
	var hit, blocks int
	counts := make([]int, len(f.engines))
	var end time.Duration
	for i := range f.records {
		r := &f.records[i]
		res.Runs[i] = RunOutcome{Engine: r.engine, Arrival: r.arrival, Queue: r.queue, TTFT: r.ttft, E2E: r.e2e, Prompt: r.prompt, Cached: r.cached}
		if r.rejected != "" {
			res.Rejected[r.rejected]++
			continue
		}
		res.Served++
		counts[r.engine]++
		hit += r.cached / bs
		blocks += r.prompt / bs
		ttft, e2e, queue = append(ttft, r.ttft), append(e2e, r.e2e), append(queue, r.queue)
		end = max(end, r.arrival+r.e2e)
	}
	for j, c := range counts {
		res.EngineShare[j] = round(ratio(c, res.Served), 4)
		res.MaxShare = max(res.MaxShare, res.EngineShare[j])
	}
	res.BlockHitRate = round(ratio(hit, blocks), 4)
	res.TTFTMs = percentiles(ttft, true)
	res.ttfts = ttft
	res.E2EMs = percentiles(e2e, false)
	res.QueueMs = percentiles(queue, false)
	res.Makespan = end.Round(time.Millisecond).String()
	return res
}

// percentiles are nearest-rank percentiles in ms, to 0.1 ms.
func percentiles(ds []time.Duration, p99 bool) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return round(float64(ds[max(i, 0)])/float64(time.Millisecond), 1)
	}
	out := Percentiles{P50: at(0.5), P90: at(0.9)}
	if p99 {
		out.P99 = at(0.99)
	}
	return out
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// JSON is the report as indented JSON.
func (r *Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Markdown is the report as a markdown document.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# sluice simulate\n\n")
	window := "to the end"
	if r.Window != "0s" {
		window = r.Window
	}
	fmt.Fprintf(&b, "Trace `%s`, from %s, window %s, speed %g: %d requests over %s. %d engines (%s).\n\n",
		r.Trace, r.WindowStart, window, r.Speed, r.Requests, r.Span, len(r.Engines), strings.Join(r.Engines, ", "))
	fmt.Fprintf(&b, "Engine model: %d cache blocks of %d tokens, max running %d, prefill %g tokens/s, decode %g ms/token. "+
		"Load reports every %s (freshness %s), KV events after %s. Seed %d.\n\n",
		r.Model.CacheBlocks, r.Model.BlockSize, r.Model.MaxRunning, r.Model.PrefillTokensPerSec, r.Model.DecodeMsPerToken,
		r.Feedback.ReportInterval, r.Feedback.LoadFreshness, r.Feedback.KVLag, r.Seed)
	fmt.Fprintf(&b, "Block hit-rate references (requests in arrival order, no timing): one pooled LRU of all engines' blocks %.4f "+
		"(LRU is not optimal, so a policy may beat it), an infinite cache %.4f (no policy can beat it).\n\n",
		r.Bounds.PooledLRU, r.Bounds.Infinite)
	b.WriteString("| policy | served | rejected | block hit rate | TTFT p50 / p90 / p99 ms | e2e p50 / p90 ms | queue p50 / p90 ms | max share | makespan |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Policies {
		rej := 0
		for _, n := range p.Rejected {
			rej += n
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.4f | %.1f / %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.4f | %s |\n",
			p.Policy, p.Served, rej, p.BlockHitRate, p.TTFTMs.P50, p.TTFTMs.P90, p.TTFTMs.P99, p.E2EMs.P50, p.E2EMs.P90,
			p.QueueMs.P50, p.QueueMs.P90, p.MaxShare, p.Makespan)
	}
	b.WriteString("\nPer-engine request share:\n\n| policy | " + strings.Join(r.Engines, " | ") + " |\n|---|" + strings.Repeat("---:|", len(r.Engines)) + "\n")
	for _, p := range r.Policies {
		cells := make([]string, len(p.EngineShare))
		for i, s := range p.EngineShare {
			cells[i] = fmt.Sprintf("%.3f", s)
		}
		fmt.Fprintf(&b, "| %s | %s |\n", p.Policy, strings.Join(cells, " | "))
	}
	var rejLines []string
	for _, p := range r.Policies {
		reasons := make([]string, 0, len(p.Rejected))
		for k := range p.Rejected {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		for _, k := range reasons {
			rejLines = append(rejLines, fmt.Sprintf("- %s: %d × %s", p.Policy, p.Rejected[k], k))
		}
	}
	if len(rejLines) > 0 {
		b.WriteString("\nRejections:\n\n" + strings.Join(rejLines, "\n") + "\n")
	}
	return b.String()
}

// write puts report.md and report.json in dir, or prints the markdown when dir is empty.
func (r *Report) write(dir string, stdout io.Writer) error {
	md := r.Markdown()
	if dir == "" {
		_, err := io.WriteString(stdout, md)
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := r.JSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), js, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := r.plots(dir); err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "%swrote report.md, report.json, hit_rate.png and ttft_cdf.png in %s\n", md, dir)
	return err
}
