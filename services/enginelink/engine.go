package enginelink

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// engineRun is one followed engine: its epoch, one feeder per DP rank sequencing its KV stream,
// the subscriptions feeding them and the load scrape. It owns all their goroutines; stop ends
// and waits for them. Each goroutine runs under a context derived from the one its starter
// was given (start's for the subscriptions and scrape, the bound socket's for a feeder a
// batch creates); the run keeps only the cancel funcs.
type engineRun struct {
	l      *Link
	spec   EngineSpec
	epochs *engineEpoch
	wg     sync.WaitGroup

	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc // ends the subscriptions and the scrape; set by start
	feeders map[int]*rankFeeder
}

// rankFeeder feeds one kvStream from its subscription(s).
type rankFeeder struct {
	in     chan item
	drops  prometheus.Counter
	cancel context.CancelFunc // ends the feeder's goroutine
}

// maxRanks bounds the ranks a bound-socket engine may claim in its batches.
const maxRanks = 1024

func (l *Link) newEngineRun(spec EngineSpec) *engineRun {
	l.m.kvEpochs.WithLabelValues(spec.ID, "start").Inc()
	return &engineRun{l: l, spec: spec, epochs: newEngineEpoch(l.clock), feeders: map[int]*rankFeeder{}}
}

// start launches, under ctx, the subscriptions of an engine whose publishers the link dials,
// and the scrape.
func (er *engineRun) start(ctx context.Context) {
	er.mu.Lock()
	defer er.mu.Unlock()
	if er.stopped {
		return
	}
	ctx, er.cancel = context.WithCancel(ctx)
	if er.spec.dialsKV() {
		for r := range er.spec.ranks() {
			ep, _ := rankEndpoint(er.spec.KVEventsEndpoint, r) // validated
			w := er.feederLocked(ctx, r)
			er.wg.Go(func() { er.l.subscribeRank(ctx, er.spec.ID, r, ep, w.in) })
		}
	}
	if er.spec.MetricsURL != "" || er.spec.LoadsURL != "" {
		er.wg.Go(func() { er.l.scrapeLoop(ctx, er.spec, er.epochs) })
	}
}

// feeder returns rank's feeder, starting it under ctx on first use; nil once the engine is
// stopping or for an absurd rank.
func (er *engineRun) feeder(ctx context.Context, rank int) *rankFeeder {
	if rank < 0 || rank >= maxRanks {
		return nil
	}
	er.mu.Lock()
	defer er.mu.Unlock()
	return er.feederLocked(ctx, rank)
}

func (er *engineRun) feederLocked(ctx context.Context, rank int) *rankFeeder {
	if er.stopped {
		return nil
	}
	if w := er.feeders[rank]; w != nil {
		return w
	}
	l := er.l
	ctx, cancel := context.WithCancel(ctx)
	w := &rankFeeder{in: make(chan item, l.cfg.StreamBuffer), drops: l.m.kvStreamDrops.WithLabelValues(er.spec.ID), cancel: cancel}
	er.feeders[rank] = w
	s := newKVStream(l.logger, er.spec, rank, er.epochs, l.rp, l.cfg.ReplayTimeout, func() string { return l.kvTopic(er.spec.Model) }, l.prod.enqueue, l.m)
	er.wg.Go(func() { runStream(ctx, s, w.in) })
	return w
}

// runStream is a rank feeder's loop: live batches and resync requests in arrival order, and a
// resync whenever another rank of the engine minted a new epoch.
func runStream(ctx context.Context, s *kvStream, in <-chan item) {
	for {
		_, changed := s.epochs.current()
		select {
		case <-ctx.Done():
			return
		case it := <-in:
			if it.resync {
				s.resync(ctx, true)
			} else {
				s.handleLive(ctx, it.b)
			}
		case <-changed:
			if e, _ := s.epochs.current(); e != s.epoch {
				s.resync(ctx, false)
			}
		}
	}
}

// stop cancels the engine's goroutines and waits for them. Once stopped is set no feeder
// starts, so every goroutine's cancel func is known here.
func (er *engineRun) stop() {
	er.mu.Lock()
	er.stopped = true
	if er.cancel != nil {
		er.cancel()
	}
	for _, w := range er.feeders {
		w.cancel()
	}
	er.mu.Unlock()
	er.wg.Wait()
}
