// Package honesty checks that `sluice simulate` tells the truth about the live stack (`make
// sim-honesty`): it replays one trace window through the processes `sluice dev` runs — the
// in-process Kafka-protocol broker, simulated engines speaking the SGLang wire (ZMQ KV events,
// /v1/loads), enginelink carrying both into Kafka, the decider and the HTTP gateway — with the
// trace replay client of tests/peer, then through `sluice simulate` with the same engine model,
// fleet and feedback intervals, and reports both side by side. cmd/honesty is the command.
package honesty

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/kafkadev"
	"github.com/sluicehq/sluice/internal/trace"
	"github.com/sluicehq/sluice/services/deciderserver"
	"github.com/sluicehq/sluice/services/enginelink"
	"github.com/sluicehq/sluice/services/gateway"
	"github.com/sluicehq/sluice/services/simengine"
	"github.com/sluicehq/sluice/services/simengine/engine"
	"github.com/sluicehq/sluice/services/simulate"
	"github.com/sluicehq/sluice/tests/peer"
)

// Model is the model name the fleet serves.
const Model = "sim"

// Settings are what both sides share.
type Settings struct {
	// Engines is the fleet size; the engine model is the simengine's defaults (CacheBlocks,
	// MaxRunning, PrefillTokensPerSec, DecodeMsPerToken of services/simengine/engine).
	Engines int
	// Policy is the plain group's policy type.
	Policy string
	// MaxTokensCap caps each request's output length (both sides).
	MaxTokensCap int
	// ReportInterval is enginelink's scrape interval (live) and the simulated report interval;
	// KVLag is the simulated KV-event lag (live, it is whatever the ZMQ → enginelink → Kafka →
	// decider path takes).
	ReportInterval, KVLag time.Duration
	// Timeout bounds one live request.
	Timeout time.Duration
}

// Outcome is one side's figures for one policy.
type Outcome struct {
	Requests, Errors int
	// BlockHitRate is hit blocks ÷ prompt blocks (whole blocks of each request), as sluice
	// simulate counts it.
	BlockHitRate   float64
	TTFT50, TTFT90 time.Duration
	E2E50          time.Duration
	// EngineTTFT50 and EngineTTFT90 (live only) are the engines' own queue + prefill times of
	// each run, without the client → gateway → decider → engine → client transport.
	EngineTTFT50, EngineTTFT90 time.Duration
	FirstErr                   string
	MeanLag, MaxSendLag        time.Duration
	// Transport50 (live only) is the median over requests of the client's TTFT less the
	// engine's own: client → gateway → decider → engine and the first chunk back, which the
	// simulation does not model (it is 0 there).
	Transport50          time.Duration
	WallTime, SetupTime  time.Duration
	CachedTok, PromptTok int64
	// Runs are the requests one by one, in the window's order (diagnose.go).
	Runs []Run
}

// Run is one request's course on one side. Times count from the replay's start.
type Run struct {
	// Arrival is the scheduled arrival; Sent (live) when the client sent it; Submitted when the
	// engine model got it (simulate: the arrival).
	Arrival, Sent, Submitted time.Duration
	// Engine is the engine that ran it ("" when it failed or was rejected).
	Engine string
	// Queue and Prefill are the engine's own times; TTFT is the client's (live) or arrival to
	// first token (simulate); EngineTTFT is Submitted to the first token (Queue + Prefill).
	Queue, Prefill, TTFT, EngineTTFT time.Duration
	// Decode is the first token to the last (the engine's; simulate: its model's).
	Decode         time.Duration
	Prompt, Cached int
	// Tokens is the prompt as the engine got it (live only; for diagnose's replays).
	Tokens []uint32
	// MaxTokens is the output length.
	MaxTokens int
}

// Capped returns reqs with every output length capped at limit (> 0), as the live client
// sends them.
func Capped(reqs []trace.Request, limit int) []trace.Request {
	out := make([]trace.Request, len(reqs))
	for i, r := range reqs {
		r.OutputTokens = peer.MaxTokens(r, limit)
		out[i] = r
	}
	return out
}

// Simulated runs reqs (arrivals already scaled, outputs capped) through sluice simulate with
// the settings.
func Simulated(ctx context.Context, s Settings, reqs []trace.Request) (Outcome, error) {
	cfg := simulate.DefaultConfig()
	cfg.Trace, cfg.Engines, cfg.Policies = "live-window", s.Engines, s.Policy
	cfg.ReportInterval, cfg.KVLag = s.ReportInterval, s.KVLag
	t0 := time.Now()
	rep, err := simulate.Simulate(ctx, slog.New(slog.DiscardHandler), cfg, nil, reqs)
	if err != nil {
		return Outcome{}, err
	}
	p := rep.Policies[0]
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	out := Outcome{Requests: len(reqs), Errors: len(reqs) - p.Served, BlockHitRate: p.BlockHitRate, TTFT50: ms(p.TTFTMs.P50),
		TTFT90: ms(p.TTFTMs.P90), E2E50: ms(p.E2EMs.P50), WallTime: time.Since(t0)}
	for i, r := range p.Runs {
		run := Run{Arrival: r.Arrival, Sent: r.Arrival, Submitted: r.Arrival, Queue: r.Queue, Prefill: r.TTFT - r.Queue, TTFT: r.TTFT,
			EngineTTFT: r.TTFT, Decode: r.E2E - r.TTFT, Prompt: r.Prompt, Cached: r.Cached, MaxTokens: max(reqs[i].OutputTokens, 1)}
		if r.Engine >= 0 {
			run.Engine = rep.Engines[r.Engine]
		}
		out.Runs = append(out.Runs, run)
	}
	return out, nil
}

// Live starts a fresh stack, replays reqs (arrivals scaled, outputs capped) through its gateway
// in real time and stops it. logDir receives the stack's log.
func Live(ctx context.Context, s Settings, reqs []trace.Request, logDir string) (Outcome, error) {
	t0 := time.Now()
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return Outcome{}, err
	}
	lf, err := os.Create(filepath.Join(logDir, "stack.log"))
	if err != nil {
		return Outcome{}, err
	}
	defer lf.Close()
	logger := slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bodies := make([][]byte, len(reqs))
	for i, r := range reqs {
		if bodies[i], err = peer.Body(r, Model, s.MaxTokensCap, true); err != nil {
			return Outcome{}, err
		}
	}
	// Each request's prompt as the engine gets it identifies its generation (the probes' and
	// any duplicate prompt's in arrival order).
	byPrompt := map[uint64][]int{}
	prompts := make([][]uint32, len(reqs))
	for i, r := range reqs {
		prompts[i] = simengine.Tokenize(peer.PromptText(r.TokenIDs(peer.Vocab)))
		h := engine.PromptHash(prompts[i])
		byPrompt[h] = append(byPrompt[h], i)
	}
	var mu sync.Mutex
	var gens []simengine.Generation
	onResult := func(g simengine.Generation) {
		mu.Lock()
		gens = append(gens, g)
		mu.Unlock()
	}
	st, err := startStack(ctx, logger, s, logDir, onResult)
	if err != nil {
		return Outcome{}, err
	}
	defer st.stop()
	if err := st.ready(ctx); err != nil {
		return Outcome{}, err
	}
	setup := time.Since(t0)
	mu.Lock()
	gens = gens[:0] // the readiness probes
	mu.Unlock()
	t1 := time.Now()
	res := peer.Replay(ctx, peer.Options{URL: "http://" + st.gatewayAddr, Model: Model, Timeout: s.Timeout, PromptIDs: true, Bodies: bodies}, reqs, nil)
	st.saveMetrics(ctx, logDir)
	out := Outcome{Requests: len(res), SetupTime: setup, WallTime: time.Since(t1), Runs: make([]Run, len(reqs))}
	var engineTTFT, transport []time.Duration
	mu.Lock()
	slices.SortFunc(gens, func(a, b simengine.Generation) int { return a.Submitted.Compare(b.Submitted) })
	for _, g := range gens {
		k := engine.PromptHash(g.Prompt)
		idx := byPrompt[k]
		if len(idx) == 0 {
			continue
		}
		i := idx[0]
		byPrompt[k] = idx[1:]
		out.Runs[i] = Run{Engine: g.EngineID, Submitted: g.Submitted.Sub(t1), Queue: g.QueueTime, Prefill: g.PrefillTime,
			EngineTTFT: g.QueueTime + g.PrefillTime, Decode: g.Duration - g.QueueTime - g.PrefillTime, Prompt: g.PromptTokens, Cached: g.CachedTokens, Tokens: prompts[i]}
		engineTTFT = append(engineTTFT, g.QueueTime+g.PrefillTime)
	}
	mu.Unlock()
	for i, r := range reqs {
		out.Runs[i].Arrival, out.Runs[i].MaxTokens = r.Arrival, max(r.OutputTokens, 1)
		if i < len(res) {
			out.Runs[i].Sent, out.Runs[i].TTFT = res[i].Sent, res[i].TTFT
			if res[i].Err == nil && out.Runs[i].Engine != "" {
				transport = append(transport, res[i].TTFT-out.Runs[i].EngineTTFT)
			}
		}
	}
	var hit, blocks int64
	var ttft, e2e []time.Duration
	var lag time.Duration
	const bs = 16 // the simengine's block size (engine.DefaultBlockSize)
	for _, r := range res {
		lag += r.Lag
		out.MaxSendLag = max(out.MaxSendLag, r.Lag)
		if r.Err != nil {
			out.Errors++
			if out.FirstErr == "" {
				out.FirstErr = r.Err.Error()
			}
			continue
		}
		hit += int64(r.CachedTokens / bs)
		blocks += int64(r.PromptTokens / bs)
		out.CachedTok += int64(r.CachedTokens)
		out.PromptTok += int64(r.PromptTokens)
		ttft, e2e = append(ttft, r.TTFT), append(e2e, r.E2E)
	}
	if len(res) > 0 {
		out.MeanLag = lag / time.Duration(len(res))
	}
	if blocks > 0 {
		out.BlockHitRate = float64(hit) / float64(blocks)
	}
	out.TTFT50, out.TTFT90, out.E2E50 = peer.Quantile(ttft, 0.5), peer.Quantile(ttft, 0.9), peer.Quantile(e2e, 0.5)
	out.EngineTTFT50, out.EngineTTFT90 = peer.Quantile(engineTTFT, 0.5), peer.Quantile(engineTTFT, 0.9)
	out.Transport50 = peer.Quantile(transport, 0.5)
	return out, nil
}

// stack is one live sluice dev stack.
type stack struct {
	cancel      context.CancelFunc
	g           *errgroup.Group
	broker      *kafkadev.Broker
	engines     []*simengine.Server
	gatewayAddr string
	deciderHTTP string
}

// startStack wires the processes as services/devstack does (one plain bucket of the policy over
// Engines SGLang-flavoured simengines; enginelink in fleet mode), each on a loopback port.
func startStack(ctx context.Context, logger *slog.Logger, s Settings, dir string, onResult func(simengine.Generation)) (*stack, error) {
	broker, err := kafkadev.Start(ctx, logger.With(slog.String("component", "kafka")))
	if err != nil {
		return nil, err
	}
	brokers := strings.Join(broker.Addr(), ",")
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	st := &stack{cancel: cancel, g: g, broker: broker}
	fail := func(err error) (*stack, error) {
		st.stop()
		return nil, err
	}
	for i := range s.Engines {
		ec := simengine.DefaultConfig()
		ec.Addr, ec.ID, ec.Model = "127.0.0.1:0", fmt.Sprintf("e%02d", i), Model
		ec.KafkaBrokers, ec.MetricsNaming = "", simengine.NamingSGLang
		ec.KVEventsEndpoint, ec.KVReplayEndpoint = "tcp://*:0", "tcp://*:0"
		ec.OnResult = onResult
		e, err := simengine.New(logger.With(slog.String("engine_id", ec.ID)), ec)
		if err != nil {
			return fail(fmt.Errorf("simengine %s: %w", ec.ID, err))
		}
		st.engines = append(st.engines, e)
		g.Go(func() error { return e.Run(gctx) })
	}
	var cfg strings.Builder
	cfg.WriteString("workers:\n")
	for _, e := range st.engines {
		ep, err := e.Endpoints(gctx)
		if err != nil {
			return fail(fmt.Errorf("simengine endpoints: %w", err))
		}
		if len(ep.KV) == 0 || len(ep.Replay) == 0 {
			return fail(fmt.Errorf("simengine %s: no KV-event or replay socket", ep.ID))
		}
		fmt.Fprintf(&cfg, "  - {id: %s, url: %q, models: [%s], role: plain, kv_events_endpoint: %q, kv_replay_endpoint: %q, metrics_url: %q, labels: {engine: %s, loads_url: %q}}\n",
			ep.ID, ep.BaseURL, Model, ep.KV[0], ep.Replay[0], ep.MetricsURL, ep.Engine, ep.LoadsURL)
	}
	fmt.Fprintf(&cfg, "buckets:\n  - id: all\n    models: [%s]\n    groups:\n      plain:\n        policy: {type: %s}\n", Model, s.Policy)
	cfgPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		return fail(err)
	}
	dc := deciderserver.DefaultConfig()
	dc.GRPCAddr, dc.HTTPAddr, dc.ConfigPath = "127.0.0.1:0", "127.0.0.1:0", cfgPath
	dc.Ingest.Brokers = brokers
	dc.Ingest.SnapshotDir = filepath.Join(dir, "snapshots")
	dec, err := deciderserver.New(logger.With(slog.String("component", "decider")), dc)
	if err != nil {
		return fail(fmt.Errorf("decider: %w", err))
	}
	lc := enginelink.DefaultConfig()
	lc.KafkaBrokers, lc.HTTPAddr = brokers, "127.0.0.1:0"
	lc.FleetAdminURL, lc.FleetPoll = "http://"+dec.HTTPAddr(), time.Second
	lc.ScrapeInterval = s.ReportInterval
	link, err := enginelink.New(logger.With(slog.String("component", "enginelink")), lc)
	if err != nil {
		return fail(fmt.Errorf("enginelink: %w", err))
	}
	gc := gateway.DefaultConfig()
	gc.Addr, gc.DeciderAddr, gc.Tokenizer = "127.0.0.1:0", dec.GRPCAddr(), "engine"
	gw, err := gateway.New(logger.With(slog.String("component", "gateway")), gc)
	if err != nil {
		return fail(fmt.Errorf("gateway: %w", err))
	}
	g.Go(func() error { return dec.Run(gctx) })
	g.Go(func() error { return link.Run(gctx) })
	g.Go(func() error { return gw.Run(gctx) })
	st.gatewayAddr, st.deciderHTTP = gw.Addr(), dec.HTTPAddr()
	return st, nil
}

func (st *stack) stop() {
	st.cancel()
	_ = st.g.Wait()
	st.broker.Close()
}

var quick = &http.Client{Timeout: 5 * time.Second}

// saveMetrics keeps the gateway's and the decider's /metrics after a replay in dir (their
// decide, upstream and first-byte latencies locate the transport's time); failures are ignored.
func (st *stack) saveMetrics(ctx context.Context, dir string) {
	for name, url := range map[string]string{"gateway": "http://" + st.gatewayAddr + "/metrics", "decider": "http://" + st.deciderHTTP + "/metrics"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			continue
		}
		resp, err := quick.Do(req)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = os.WriteFile(filepath.Join(dir, "metrics-"+name+".txt"), b, 0o644)
	}
}

// ready waits for a completion through the gateway, then empties every engine's cache (the
// probes left blocks) and gives the decider a moment to hear the clear and a load report.
func (st *stack) ready(ctx context.Context) error {
	deadline := time.Now().Add(90 * time.Second)
	probe := trace.Request{Index: -1, InputTokens: 8, OutputTokens: 1}
	var last error
	for {
		res := peer.Replay(ctx, peer.Options{URL: "http://" + st.gatewayAddr, Model: Model, Timeout: 5 * time.Second, Client: quick, PromptIDs: true},
			[]trace.Request{probe}, nil)
		if last = res[0].Err; last == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway %s: no completion within 90s: %w", st.gatewayAddr, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	for _, e := range st.engines {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.Addr()+"/admin/reset-cache", nil)
		if err != nil {
			return err
		}
		resp, err := quick.Do(req)
		if err != nil {
			return fmt.Errorf("reset-cache %s: %w", e.Addr(), err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("reset-cache %s: %s", e.Addr(), resp.Status)
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(1500 * time.Millisecond):
	}
	return nil
}

// Row is one policy's comparison.
type Row struct {
	Policy      string
	Live, Sim   Outcome
	HitRel      float64 // sim ÷ live − 1
	TTFT50Rel   float64 // against the client's TTFT
	EngineRel   float64 // against the engines' own queue + prefill
	HitOK, TTOK bool
	EngineOK    bool
}

// Compare fills the relative differences and whether each is within the goals (hit rate ±10 %
// relative, TTFT p50 ±20 %).
func Compare(policy string, live, sim Outcome) Row {
	r := Row{Policy: policy, Live: live, Sim: sim}
	if live.BlockHitRate > 0 {
		r.HitRel = sim.BlockHitRate/live.BlockHitRate - 1
	}
	if live.TTFT50 > 0 {
		r.TTFT50Rel = float64(sim.TTFT50)/float64(live.TTFT50) - 1
	}
	if live.EngineTTFT50 > 0 {
		r.EngineRel = float64(sim.TTFT50)/float64(live.EngineTTFT50) - 1
	}
	r.HitOK = live.BlockHitRate > 0 && r.HitRel >= -0.10 && r.HitRel <= 0.10
	r.TTOK = live.TTFT50 > 0 && r.TTFT50Rel >= -0.20 && r.TTFT50Rel <= 0.20
	r.EngineOK = live.EngineTTFT50 > 0 && r.EngineRel >= -0.20 && r.EngineRel <= 0.20
	return r
}

// Table writes the markdown comparison.
func Table(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| policy | side | requests | errors | block hit rate | TTFT p50 ms | TTFT p90 ms | engine-side TTFT p50 / p90 ms | transport p50 ms | e2e p50 ms |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
	mark := func(ok bool) string {
		if ok {
			return "within"
		}
		return "**outside**"
	}
	for _, r := range rows {
		for _, side := range []struct {
			name string
			o    Outcome
		}{{"live stack", r.Live}, {"sluice simulate", r.Sim}} {
			eng, tr := "—", "0 (not modelled)"
			if side.o.EngineTTFT50 > 0 {
				eng = ms(side.o.EngineTTFT50) + " / " + ms(side.o.EngineTTFT90)
				tr = ms(side.o.Transport50)
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %.4f | %s | %s | %s | %s | %s |\n", r.Policy, side.name, side.o.Requests, side.o.Errors,
				side.o.BlockHitRate, ms(side.o.TTFT50), ms(side.o.TTFT90), eng, tr, ms(side.o.E2E50))
		}
		fmt.Fprintf(&b, "| %s | simulate ÷ live − 1 | | | %+.1f %% (%s ±10 %%) | %+.1f %% (%s ±20 %%) | | p50 %+.1f %% (%s ±20 %%) | | |\n", r.Policy,
			100*r.HitRel, mark(r.HitOK), 100*r.TTFT50Rel, mark(r.TTOK), 100*r.EngineRel, mark(r.EngineOK))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ErrOutside is returned by Check when a row misses a goal.
var ErrOutside = errors.New("simulation outside the honesty goals")

// Check returns ErrOutside naming the rows that miss a goal.
func Check(rows []Row) error {
	var bad []string
	for _, r := range rows {
		if !r.HitOK || !r.TTOK {
			bad = append(bad, r.Policy)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrOutside, strings.Join(bad, ", "))
	}
	return nil
}
