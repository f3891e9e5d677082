package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/components/deciderstate"
	"github.com/sluicehq/sluice/components/ingest"
	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/internal/trace"
	"github.com/sluicehq/sluice/services/simengine"
	"github.com/sluicehq/sluice/services/simengine/engine"
	"github.com/sluicehq/sluice/state/clock"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/slots"
)

// start is the virtual time the first request arrives at. Any fixed instant would do; it is
// fixed so that runs are reproducible.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// inProcess stands in for the brokers the ingesters are never connected to: a replay feeds them
// with Apply and never runs them.
var inProcess = []string{"in-process.invalid:0"}

// epoch is every simulated engine's epoch (they never restart).
const epoch = 1

// Run reads the trace, simulates every policy and writes the report: report.md and report.json
// in cfg.Out, or the markdown to stdout. Progress and run times go to logger.
func Run(ctx context.Context, logger *slog.Logger, cfg Config, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// A replay allocates at a high rate and keeps little: trade memory for fewer collections,
	// unless GOGC says otherwise.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	reqs, err := trace.Read(cfg.Trace)
	if err != nil {
		return err
	}
	reqs = trace.Scale(trace.Window(reqs, cfg.WindowStart, cfg.Window), cfg.Speed)
	if len(reqs) == 0 {
		return fmt.Errorf("trace %s: no request in the window [%v, %v+%v)", cfg.Trace, cfg.WindowStart, cfg.WindowStart, cfg.Window)
	}
	var base *config.Document
	if cfg.ConfigPath != "" {
		data, err := os.ReadFile(cfg.ConfigPath)
		if err != nil {
			return err
		}
		if base, err = config.Parse(data, config.FormatForPath(cfg.ConfigPath)); err != nil {
			return fmt.Errorf("-config %s: %w", cfg.ConfigPath, err)
		}
	}
	rep, err := Simulate(ctx, logger, cfg, base, reqs)
	if err != nil {
		return err
	}
	return rep.write(cfg.Out, stdout)
}

// Simulate runs reqs for each policy of cfg on a fresh fleet under base (nil: one plain
// bucket) and returns the report.
func Simulate(ctx context.Context, logger *slog.Logger, cfg Config, base *config.Document, reqs []trace.Request) (*Report, error) {
	if base == nil {
		base = &config.Document{}
	}
	base = base.Clone()
	if base.Engines == nil {
		for i := range cfg.Engines {
			id := fmt.Sprintf("e%02d", i)
			base.Engines = append(base.Engines, config.EngineSpec{ID: id, URL: "http://" + id + ".sim.invalid", Models: []string{"sim"},
				Role: config.RolePlain})
		}
	}
	rep := newReport(cfg, base, reqs)
	t0, c0 := time.Now(), cpuTime()
	rep.Bounds = bounds(cfg, len(base.Engines), reqs)
	logger.Info("cache bounds", slog.Float64("pooled_lru_hit_rate", rep.Bounds.PooledLRU), slog.Float64("infinite_hit_rate", rep.Bounds.Infinite),
		slog.Duration("took", time.Since(t0)), slog.Duration("cpu", cpuTime()-c0))
	runs := cfg.policies()
	if len(runs) == 0 {
		runs = []string{""}
	}
	for _, p := range runs {
		doc := base.Clone()
		name := "config"
		if isPeer(p) {
			// A baseline routes in the harness: the document stays as given (the decider's state
			// still ingests the fleet's feedback, which llmd and dynamo read).
			name = p
		} else if p != "" {
			name = p
			if doc.DefaultPolicy == nil {
				doc.DefaultPolicy = &config.StagePolicies{}
			}
			doc.DefaultPolicy.Plain = &config.PolicySpec{Type: p}
		}
		if err := doc.Validate(); err != nil {
			return nil, fmt.Errorf("policy %q: %w", name, err)
		}
		t, c := time.Now(), cpuTime()
		peer := ""
		if isPeer(p) {
			peer = p
		}
		res, err := runPolicy(ctx, cfg, doc, peer, reqs)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", name, err)
		}
		res.Policy = name
		rep.Policies = append(rep.Policies, res)
		logger.Info("policy simulated", slog.String("policy", name), slog.Int("requests", len(reqs)),
			slog.Float64("block_hit_rate", res.BlockHitRate), slog.Float64("ttft_p50_ms", res.TTFTMs.P50),
			slog.Duration("took", time.Since(t)), slog.Duration("cpu", cpuTime()-c))
	}
	return rep, nil
}

// simEngine is one simulated engine and what the loop keeps for it.
type simEngine struct {
	idx     int // in the fleet
	id      string
	model   string
	sim     *engine.Sim
	kvSeq   uint64
	loadSeq uint64
	pending []engine.Event
	runs    map[*engine.SimRun]*pendingReq
}

type pendingReq struct {
	rec   *requestRecord
	lease string
}

// delivery is a KV record on its way to the decider.
type delivery struct {
	at  time.Time
	msg kafka.Message
}

// fleet is one policy's world: the decider's state and the engines, on one virtual clock.
type fleet struct {
	cfg     Config
	clk     *clock.Manual
	st      *deciderstate.State
	in      *deciderstate.Ingestion
	engines []*simEngine
	byID    map[string]*simEngine
	kvq     []delivery
	vocab   uint32
	records []requestRecord
	preds   []prediction // per request when cfg.Predictions is set (decider policies only)
	// peer is the baseline routing this fleet (nil: the decider); chainer hashes prompts into
	// the engines' block chains for it.
	peer    baseline
	chainer *engine.Cache
}

// newFleet builds a policy's world; peer, when set, names the baseline that routes in place of
// the decider.
func newFleet(cfg Config, doc *config.Document, peer string) (*fleet, error) {
	clk := clock.NewManual(start)
	// Each fleet draws its policies' samples from its own source seeded alike, so every policy
	// sees the same sequence and a run repeats exactly for a seed.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	st, err := deciderstate.New(deciderstate.Config{LoadFreshness: cfg.LoadFreshness, Now: clk.Now, IntN: rng.IntN})
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	in, err := st.NewIngestion(quiet, deciderstate.IngestConfig{Load: ingest.Config{Brokers: inProcess},
		KV: ingest.Config{Brokers: inProcess}}, prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	if err := st.BuildDecider(quiet, in, decider.Config{}); err != nil {
		return nil, err
	}
	if err := st.Apply(config.Snapshot{Version: 1, Document: doc, Source: "simulate", LoadedAt: start}); err != nil {
		return nil, err
	}
	f := &fleet{cfg: cfg, clk: clk, st: st, in: in, byID: map[string]*simEngine{}, vocab: engine.DefaultVocab}
	for _, w := range doc.Engines {
		ecfg := cfg.engineConfig()
		e := &simEngine{idx: len(f.engines), id: w.ID, model: w.Models[0], runs: map[*engine.SimRun]*pendingReq{}}
		ecfg.Sink = func(evs []engine.Event) { e.pending = append(e.pending, evs...) }
		if e.sim, err = engine.NewSim(ecfg); err != nil {
			return nil, err
		}
		f.engines = append(f.engines, e)
		f.byID[w.ID] = e
	}
	if peer != "" {
		if f.peer, err = f.newPeer(peer); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// newPeer builds the baseline peer over the fleet: its own seeded random source, and the
// decider state's KV index and load table as the lagged view of the engines.
func (f *fleet) newPeer(peer string) (baseline, error) {
	bs := f.engines[0].sim.Config().BlockSize
	f.chainer = engine.NewCache(bs, 1, f.cfg.Seed)
	slotIdx := map[slots.Slot]int{}
	engineSlots := make([]slots.Slot, len(f.engines))
	for i, e := range f.engines {
		engineSlots[i] = f.st.Slots.Intern(e.id)
		slotIdx[engineSlots[i]] = i
	}
	src := f.in.PrefixSource()
	ns := policy.Namespace{Model: f.engines[0].model}
	var buf []policy.PrefixMatch
	env := peerEnv{n: len(f.engines), blockSize: bs, rng: rand.New(rand.NewPCG(f.cfg.Seed, 0x9ee7)),
		overlap: func(tokens []uint32, out []int64) {
			clear(out)
			var err error
			if buf, err = src.LookupPrefix(context.Background(), ns, tokens, buf[:0]); err != nil {
				return
			}
			for _, m := range buf {
				if i, ok := slotIdx[m.Engine]; ok {
					out[i] = m.Tokens
				}
			}
		},
		load: func(i int) (loadtable.View, bool) { return f.st.Load.Snapshot().View(engineSlots[i]) },
	}
	return newBaseline(peer, env)
}

func runPolicy(ctx context.Context, cfg Config, doc *config.Document, peer string, reqs []trace.Request) (PolicyResult, error) {
	f, err := newFleet(cfg, doc, peer)
	if err != nil {
		return PolicyResult{}, err
	}
	if err := f.run(ctx, reqs); err != nil {
		return PolicyResult{}, err
	}
	if f.preds != nil {
		name := "config"
		if p := doc.DefaultPolicy; p != nil && p.Plain != nil {
			name = p.Plain.Type
		}
		if err := f.writePredictions(cfg.Predictions, name); err != nil {
			return PolicyResult{}, err
		}
	}
	return f.result(), nil
}

// run is the event loop. At one instant, in this order: engine events (prefills ending, runs
// finishing and the queued runs they admit), KV batches reaching the index, the load report
// tick, then arrivals. It ends when no request remains to arrive, run or be indexed.
func (f *fleet) run(ctx context.Context, reqs []trace.Request) error {
	f.records = make([]requestRecord, len(reqs))
	if f.cfg.Predictions != "" && f.peer == nil {
		f.preds = make([]prediction, len(reqs))
	}
	nextReport := start
	i := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var t time.Time
		have := false
		consider := func(x time.Time) {
			if !have || x.Before(t) {
				t, have = x, true
			}
		}
		for _, e := range f.engines {
			if x, ok := e.sim.Next(); ok {
				consider(x)
			}
		}
		if len(f.kvq) > 0 {
			consider(f.kvq[0].at)
		}
		if i < len(reqs) {
			consider(start.Add(reqs[i].Arrival))
		}
		if !have {
			return nil
		}
		if !nextReport.After(t) {
			t = nextReport
		}
		f.clk.Set(t)
		for _, e := range f.engines {
			if x, ok := e.sim.Next(); ok && !x.After(t) {
				for _, r := range e.sim.Step(t) {
					f.finish(e, r)
				}
				if err := f.flushKV(e, t); err != nil {
					return err
				}
			}
		}
		for len(f.kvq) > 0 && !f.kvq[0].at.After(t) {
			f.in.KV.Apply(f.kvq[0].msg)
			f.kvq[0] = delivery{}
			f.kvq = f.kvq[1:]
		}
		if !nextReport.After(t) {
			for _, e := range f.engines {
				e.loadSeq++
				msg, err := simengine.LoadRecord(e.id, e.model, epoch, e.loadSeq, t, e.sim.Load(t))
				if err != nil {
					return err
				}
				f.in.Load.Apply(msg)
			}
			nextReport = nextReport.Add(f.cfg.ReportInterval)
		}
		for i < len(reqs) && !start.Add(reqs[i].Arrival).After(t) {
			if err := f.arrive(ctx, &reqs[i], i, t); err != nil {
				return err
			}
			i++
		}
	}
}

// flushKV sends e's events since the last flush as one record, due at the index after the lag.
func (f *fleet) flushKV(e *simEngine, t time.Time) error {
	if len(e.pending) == 0 {
		return nil
	}
	e.kvSeq++
	msg, err := simengine.KVRecord(e.id, e.model, epoch, e.kvSeq, t, e.pending)
	if err != nil {
		return err
	}
	e.pending = nil
	f.kvq = append(f.kvq, delivery{at: t.Add(f.cfg.KVLag), msg: msg})
	return nil
}

// arrive decides r (request idx of the run) at t and submits it to the chosen engine.
func (f *fleet) arrive(ctx context.Context, r *trace.Request, idx int, t time.Time) error {
	rec := &f.records[idx]
	tokens := r.TokenIDs(f.vocab)
	out := max(r.OutputTokens, 1)
	rec.engine = -1
	rec.prompt = len(tokens)
	rec.arrival = r.Arrival
	if f.peer != nil {
		return f.arrivePeer(r, rec, tokens, out, t)
	}
	dec, err := f.st.Decider.Decide(ctx, policy.Request{Model: f.engines[0].model, InputTokens: int64(len(tokens)),
		ExpectedPeakTokens: int64(len(tokens) + out), HasPeak: true, TokenIDs: tokens, RequestID: strconv.Itoa(r.Index),
		Explain: f.preds != nil})
	if err != nil {
		var de *decider.Error
		if errors.As(err, &de) && de.Kind == decider.KindUnavailable {
			rec.rejected = de.Reason
			return nil
		}
		return fmt.Errorf("request %d: %w", r.Index, err)
	}
	pick := dec.Plain.Engine
	if dec.PD {
		pick = dec.Prefill.Engine
	}
	e, ok := f.byID[pick.ID]
	if !ok {
		return fmt.Errorf("request %d: decided engine %q is not simulated", r.Index, pick.ID)
	}
	if f.preds != nil {
		p := &f.preds[idx]
		recordPrediction(p, &dec)
		l := e.sim.Load(t)
		p.trueWaitingUncached, p.trueWaiting, p.trueRunning = l.WaitingUncachedTokens, l.Waiting, l.Running
	}
	run, err := e.sim.Submit(t, engine.Request{TokenIDs: tokens, MaxTokens: out})
	if err != nil {
		return fmt.Errorf("request %d: %w", r.Index, err)
	}
	for j, x := range f.engines {
		if x == e {
			rec.engine = j
		}
	}
	e.runs[run] = &pendingReq{rec: rec, lease: dec.Lease.ID}
	return f.flushKV(e, t)
}

// arrivePeer routes r by the fleet's baseline and submits it to the engine picked, as arrive
// does for a decider pick.
func (f *fleet) arrivePeer(r *trace.Request, rec *requestRecord, tokens []uint32, out int, t time.Time) error {
	a := &peerArrival{now: t, tokens: tokens, chain: f.chainer.Chain(tokens)}
	i := f.peer.pick(a)
	if i < 0 || i >= len(f.engines) {
		return fmt.Errorf("request %d: baseline picked engine %d of %d", r.Index, i, len(f.engines))
	}
	e := f.engines[i]
	run, err := e.sim.Submit(t, engine.Request{TokenIDs: tokens, MaxTokens: out})
	if err != nil {
		return fmt.Errorf("request %d: %w", r.Index, err)
	}
	rec.engine = i
	e.runs[run] = &pendingReq{rec: rec}
	f.peer.routed(i, a, run)
	return f.flushKV(e, t)
}

// finish records a finished run and releases its lease (or tells the baseline).
func (f *fleet) finish(e *simEngine, r *engine.SimRun) {
	p := e.runs[r]
	delete(e.runs, r)
	if f.peer != nil {
		f.peer.finished(e.idx, r)
	} else {
		f.st.Decider.Release(p.lease)
	}
	p.rec.done = true
	p.rec.cached = r.CachedTokens
	p.rec.queue = r.Admitted.Sub(r.Arrival)
	p.rec.ttft = r.FirstToken.Sub(r.Arrival)
	p.rec.e2e = r.Finished.Sub(r.Arrival)
}

// bounds are the hit rates of one LRU holding every engine's blocks (pooled) and of an
// unbounded cache, over the requests in arrival order: no routing can hit more than the
// infinite cache, and the pooled LRU is what perfect sharing of the fleet's memory would give.
func bounds(cfg Config, engines int, reqs []trace.Request) Bounds {
	ec := cfg.engineConfig()
	pooled := engine.NewCache(ec.BlockSize, engines*ec.CacheBlocks, ec.HashSeed)
	inf := engine.NewCache(ec.BlockSize, 0, ec.HashSeed)
	var ph, ih, blocks int
	for i := range reqs {
		tokens := reqs[i].TokenIDs(engine.DefaultVocab)
		chain := pooled.Chain(tokens)
		h, n := pooled.ServeChain(chain, tokens)
		ph += h
		blocks += n
		h, _ = inf.ServeChain(chain, tokens)
		ih += h
	}
	return Bounds{PooledLRU: ratio(ph, blocks), Infinite: ratio(ih, blocks)}
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// cpuTime is the CPU time (user + system) the process has used, for the run-time log lines: on
// a shared machine wall time says little.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
