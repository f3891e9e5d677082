// Package enginehealth decides which engines are candidates: an active probe of each engine's
// health endpoint (interval, timeout, consecutive-failure and recovery thresholds) and a
// per-engine circuit breaker opened by consecutive dispatch failures that callers report through
// Release (failure threshold, cool-down, then one half-open trial), as SGLang's router does. The
// combined verdict is written to the engine registry, where engine groups read it; stale or
// missing load never makes an engine unhealthy.
package enginehealth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/state/registry"
)

// Config holds the probe and breaker settings.
type Config struct {
	// ProbeInterval is how often each engine's health endpoint is probed; 0 disables probing.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe.
	ProbeTimeout time.Duration
	// ProbePath is appended to the engine URL.
	ProbePath string
	// ProbeFailures consecutive failed probes mark an engine unhealthy.
	ProbeFailures int
	// ProbeSuccesses consecutive good probes bring it back.
	ProbeSuccesses int
	// BreakerFailures consecutive dispatch failures open the breaker; 0 disables the breaker.
	BreakerFailures int
	// BreakerCoolDown is how long an open breaker keeps the engine out before a trial.
	BreakerCoolDown time.Duration
	// MaxConcurrentProbes bounds probes in flight.
	MaxConcurrentProbes int
	// TrustNewEngines makes a newly registered engine (or one whose url changed) a candidate at
	// once. By default, while probing is on, it is unproven, and no candidate, until its first
	// successful probe: an engine registered where nothing listens must not get picks.
	TrustNewEngines bool
}

// DefaultConfig returns SGLang-router-like defaults.
func DefaultConfig() Config {
	return Config{ProbeInterval: 5 * time.Second, ProbeTimeout: 2 * time.Second, ProbePath: "/health",
		ProbeFailures: 3, ProbeSuccesses: 2, BreakerFailures: 5, BreakerCoolDown: 30 * time.Second, MaxConcurrentProbes: 32}
}

// Validate checks every field, naming the flag it comes from.
func (c Config) Validate() error {
	var errs []error
	if c.ProbeInterval < 0 {
		errs = append(errs, fmt.Errorf("-probe-interval %v: must not be negative (0 disables probing)", c.ProbeInterval))
	}
	if c.ProbeInterval > 0 && (c.ProbeTimeout <= 0 || c.ProbeFailures < 1 || c.ProbeSuccesses < 1) {
		errs = append(errs, fmt.Errorf("-probe-timeout %v, -probe-failures %d, -probe-successes %d: must be positive when probing", c.ProbeTimeout, c.ProbeFailures, c.ProbeSuccesses))
	}
	if c.ProbeInterval > 0 && !strings.HasPrefix(c.ProbePath, "/") {
		errs = append(errs, fmt.Errorf("-probe-path %q: must start with /", c.ProbePath))
	}
	if c.BreakerFailures < 0 || (c.BreakerFailures > 0 && c.BreakerCoolDown <= 0) {
		errs = append(errs, fmt.Errorf("-breaker-failures %d / -breaker-cool-down %v: failures >= 0 (0 disables), cool-down > 0", c.BreakerFailures, c.BreakerCoolDown))
	}
	if c.MaxConcurrentProbes < 1 {
		errs = append(errs, fmt.Errorf("max concurrent probes %d: must be positive", c.MaxConcurrentProbes))
	}
	return errors.Join(errs...)
}

// Breaker states.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)

// unprovenReason is the health reason of an engine no probe has passed yet.
const unprovenReason = "unproven: waiting for its first successful health probe"

type engineState struct {
	url           string // the url the state is about; a new url starts afresh
	unproven      bool   // no probe has passed since the engine (at this url) was registered
	probeOK       bool
	probeFails    int
	probeOKs      int
	probeErr      string
	breaker       string
	dispatchFails int
	openedAt      time.Time
}

// State is one engine's health as this component sees it.
type State struct {
	Healthy bool
	Reason  string
	Breaker string
	// ProbeOK is false after ProbeFailures consecutive failed probes, until ProbeSuccesses good ones.
	ProbeOK bool
}

// Tracker owns probing and breakers for the engines of one registry.
type Tracker struct {
	logger *slog.Logger
	reg    *registry.Registry
	cfg    Config
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	engines map[string]*engineState

	opened  prometheus.Counter
	probes  *prometheus.CounterVec
	healthy *prometheus.GaugeVec

	probedAt atomic.Int64 // unix nanos of the last ProbeAll's start
}

// New returns a Tracker; it starts nothing until Run. client may be nil (a default client).
func New(logger *slog.Logger, reg *registry.Registry, cfg Config, client *http.Client, promReg prometheus.Registerer) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if client == nil {
		client = &http.Client{}
	}
	t := &Tracker{logger: logger, reg: reg, cfg: cfg, client: client, now: time.Now, engines: map[string]*engineState{},
		opened: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_decider_breaker_opened_total",
			Help: "Times an engine's circuit breaker opened after consecutive dispatch failures."}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_decider_health_probes_total",
			Help: "Active health probes by result."}, []string{"result"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_decider_engine_healthy",
			Help: "1 when the engine is a candidate (probe passing, breaker not open), else 0."}, []string{"engine", "reason"}),
	}
	if promReg != nil {
		promReg.MustRegister(t.opened, t.probes, t.healthy)
	}
	if t.unprovenMode() {
		reg.SetInitialHealth(registry.Health{Healthy: false, Reason: unprovenReason})
	}
	reg.OnRemove(func(w *registry.Engine) {
		t.mu.Lock()
		delete(t.engines, w.ID)
		t.mu.Unlock()
		t.healthy.DeletePartialMatch(prometheus.Labels{"engine": w.ID})
	})
	return t, nil
}

// state returns the state of a registered engine, creating it on first use, or nil for an id
// the registry does not hold: health exists only for registered engines, so reports naming
// unknown ids cannot grow memory. Called with t.mu held.
func (t *Tracker) state(id string) *engineState {
	s, ok := t.engines[id]
	if !ok {
		w, registered := t.reg.Snapshot().Get(id)
		if !registered {
			return nil
		}
		s = t.newState(id, w.URL)
		t.engines[id] = s
	}
	return s
}

// unprovenMode reports whether new engines wait for a probe.
func (t *Tracker) unprovenMode() bool { return t.cfg.ProbeInterval > 0 && !t.cfg.TrustNewEngines }

// newState is the state of an engine this tracker has not seen at url: unproven when the
// registry says so (it registered the engine after New), otherwise as the registry had it.
func (t *Tracker) newState(id, url string) *engineState {
	h, _ := t.reg.Snapshot().Health(id)
	unproven := t.unprovenMode() && !h.Healthy && strings.HasPrefix(h.Reason, unprovenReason)
	return &engineState{url: url, unproven: unproven, probeOK: true, breaker: BreakerClosed}
}

// ReportSuccess records a successful dispatch; it closes a half-open breaker. An engine the
// registry does not hold is ignored.
func (t *Tracker) ReportSuccess(engineID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(engineID)
	if s == nil {
		return
	}
	s.dispatchFails = 0
	if s.breaker != BreakerClosed {
		s.breaker = BreakerClosed
		t.publish(engineID, s)
	}
}

// ReportFailure records a failed dispatch; BreakerFailures in a row (or a failed half-open
// trial) open the breaker. An engine the registry does not hold is ignored.
func (t *Tracker) ReportFailure(engineID string) {
	if t.cfg.BreakerFailures == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(engineID)
	if s == nil {
		return
	}
	s.dispatchFails++
	if s.breaker == BreakerHalfOpen || (s.breaker == BreakerClosed && s.dispatchFails >= t.cfg.BreakerFailures) {
		s.breaker, s.openedAt = BreakerOpen, t.now()
		t.opened.Inc()
		t.logger.Warn("engine circuit breaker opened", slog.String("engine_id", engineID), slog.Int("consecutive_failures", s.dispatchFails))
		t.publish(engineID, s)
	}
}

// State returns an engine's current health; an engine with no reports yet (or one the
// registry does not hold) reads as healthy with a closed breaker.
func (t *Tracker) State(engineID string) State {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.engines[engineID]
	if !ok {
		s = &engineState{probeOK: true, breaker: BreakerClosed}
	}
	healthy, reason := verdict(s)
	return State{Healthy: healthy, Reason: reason, Breaker: s.breaker, ProbeOK: s.probeOK}
}

func verdict(s *engineState) (bool, string) {
	switch {
	case s.breaker == BreakerOpen:
		return false, "circuit breaker open after consecutive dispatch failures"
	case s.unproven && s.probeErr != "":
		return false, unprovenReason + "; health probe failing: " + s.probeErr
	case s.unproven:
		return false, unprovenReason
	case !s.probeOK:
		return false, "health probe failing: " + s.probeErr
	}
	return true, ""
}

// publish writes the verdict to the registry; called with t.mu held.
func (t *Tracker) publish(id string, s *engineState) {
	healthy, reason := verdict(s)
	t.reg.SetHealth(id, registry.Health{Healthy: healthy, Reason: reason, Since: t.now()})
	t.healthy.DeletePartialMatch(prometheus.Labels{"engine": id})
	v := 0.0
	if healthy {
		v = 1
	}
	t.healthy.WithLabelValues(id, reason).Set(v)
}

// tick moves open breakers whose cool-down has passed to half-open (a candidate again; the next
// reported dispatch decides).
func (t *Tracker) tick() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for id, s := range t.engines {
		if s.breaker == BreakerOpen && now.Sub(s.openedAt) >= t.cfg.BreakerCoolDown {
			s.breaker = BreakerHalfOpen
			t.logger.Info("engine circuit breaker half-open: next dispatch is the trial", slog.String("engine_id", id))
			t.publish(id, s)
		}
	}
}

// ProbeAll probes every registered engine once, concurrently (bounded). Run calls it every
// ProbeInterval; a caller may call it before serving so new engines are proven at start.
func (t *Tracker) ProbeAll(ctx context.Context) {
	t.probedAt.Store(t.now().UnixNano())
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(t.cfg.MaxConcurrentProbes)
	for _, w := range t.reg.Snapshot().Engines() {
		g.Go(func() error {
			err := t.probe(gctx, w.URL)
			t.record(w.ID, w.URL, err)
			return nil
		})
	}
	_ = g.Wait()
}

func (t *Tracker) probe(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+t.cfg.ProbePath, nil)
	if err != nil {
		return err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func (t *Tracker) record(id, url string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(id)
	if s == nil {
		return // removed while its probe was in flight
	}
	if s.url != url {
		if w, ok := t.reg.Snapshot().Get(id); !ok || w.URL != url {
			return // re-registered at another url while this probe was in flight
		}
		*s = *t.newState(id, url) // the registry gave the new url fresh health too
	}
	before, beforeReason := verdict(s)
	if err != nil {
		t.probes.WithLabelValues("failure").Inc()
		s.probeOKs = 0
		s.probeFails++
		s.probeErr = err.Error()
		if s.probeFails >= t.cfg.ProbeFailures {
			s.probeOK = false
		}
	} else {
		t.probes.WithLabelValues("success").Inc()
		s.probeFails = 0
		s.probeOKs++
		if s.unproven {
			s.unproven, s.probeOK, s.probeErr = false, true, ""
		}
		if !s.probeOK && s.probeOKs >= t.cfg.ProbeSuccesses {
			s.probeOK = true
		}
	}
	after, afterReason := verdict(s)
	if after != before {
		if after {
			t.logger.Info("engine healthy", slog.String("engine_id", id))
		} else {
			t.logger.Warn("engine unhealthy", slog.String("engine_id", id), slog.String("error", s.probeErr))
		}
	}
	// Publish whenever the registry's verdict differs (not only on a change here): the
	// registry gives a re-registered engine fresh health of its own.
	if h, ok := t.reg.Snapshot().Health(id); !ok || h.Healthy != after || (afterReason != beforeReason && !after) {
		t.publish(id, s)
	}
}

// Run probes every ProbeInterval and advances breakers until ctx is done; it returns nil on
// cancellation.
func (t *Tracker) Run(ctx context.Context) error {
	interval := t.cfg.ProbeInterval
	if interval == 0 {
		interval = time.Second // breakers still need their cool-down ticks
	}
	tick := time.NewTicker(min(interval, time.Second))
	defer tick.Stop()
	for {
		if t.cfg.ProbeInterval > 0 && t.now().Sub(time.Unix(0, t.probedAt.Load())) >= t.cfg.ProbeInterval {
			t.ProbeAll(ctx)
		}
		t.tick()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
