// Package deciderserver is the decider service: it serves sluice.v1.DeciderService and
// AdminService over native gRPC on its own port, and over Connect, gRPC-Web and REST
// (grpc-gateway) on an HTTP port beside /metrics and health endpoints — each service
// implemented once, every protocol through one gRPC interceptor chain (rpc.go, chain.go). It owns the in-memory state (engine registry,
// load table, leases) and the configuration store, and can be embedded (dev mode does).
package deciderserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/components/deciderstate"
	"github.com/sluicehq/sluice/components/enginehealth"
	"github.com/sluicehq/sluice/components/limits"
	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/gen/openapiv2"
	"github.com/sluicehq/sluice/internal/serve"
	"github.com/sluicehq/sluice/state/affinity"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/pgstore"
	"github.com/sluicehq/sluice/state/registry"
)

// Server is one decider process (or an embedded decider in dev mode).
type Server struct {
	logger  *slog.Logger
	cfg     Config
	reg     *registry.Registry
	load    *loadtable.Table
	leases  *inflight.Tracker
	store   config.Store
	auth    *authenticator
	decider *decider.Decider

	affinity     *affinity.Store
	engineHealth *enginehealth.Tracker
	ingestion    *ingestion // nil without -kafka-brokers
	// state is the shared construction of the tables above (components/deciderstate); only
	// applyConfig (New, then the watchConfig goroutine) installs snapshots through it.
	state *deciderstate.State
	// configApplied is the unix nanos at which the configuration in force was applied.
	configApplied atomic.Int64

	grpcLis, httpLis net.Listener
	rpc              *rpcStack
	httpServer       *http.Server
	shed             *shedder
	console          *webConsole // nil with -console=false
	shards           *shardGate
}

// New builds the state, loads the configuration (an invalid file is a start-up error listing
// every problem) and binds both listeners, so Addr methods are valid on return. It starts no
// goroutines: Run does.
func New(logger *slog.Logger, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	state, err := deciderstate.New(deciderstate.Config{LoadFreshness: cfg.LoadFreshness, ClockSkew: cfg.ClockSkew,
		LeaseTTL: cfg.LeaseTTL, AffinitySweep: cfg.AffinitySweep})
	if err != nil {
		return nil, err
	}
	reg, load, leases, aff := state.Registry, state.Load, state.Leases, state.Affinity
	auth, err := newAuthenticator(cfg)
	if err != nil {
		return nil, err
	}
	// The file store refuses a reloaded file this decider cannot serve, so the version it
	// reports is the one in force; the decider that checks is built below, before Run.
	shards := &shardGate{shard: cfg.Shard}
	serviceable := func(doc *config.Document) error {
		if err := shards.checkDocument(doc); err != nil {
			return err
		}
		if state.Decider == nil {
			return nil
		}
		return state.Decider.Check(doc)
	}
	store, err := openStore(logger, cfg, serviceable)
	if err != nil {
		return nil, err
	}
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	healthTracker, err := enginehealth.New(logger, reg, cfg.Health, nil, promReg)
	if err != nil {
		return nil, err
	}
	shards.register(shardRegisterer(promReg, cfg.Shard))
	in, err := newIngestion(logger, cfg.Ingest.forShard(cfg.Shard), state, shardRegisterer(promReg, cfg.Shard))
	if err != nil {
		return nil, err
	}
	var shared *deciderstate.Ingestion
	if in != nil {
		shared = in.shared
	}
	if err := state.BuildDecider(logger, shared, decider.Config{MaxTokenIDs: cfg.MaxTokenIDs}); err != nil {
		return nil, err
	}
	d := state.Decider
	s := &Server{logger: logger, cfg: cfg, state: state, reg: reg, load: load, leases: leases, store: store, auth: auth, decider: d,
		affinity: aff, engineHealth: healthTracker, ingestion: in, shards: shards}
	if err := s.applyConfig(store.Current()); err != nil {
		return nil, fmt.Errorf("configuration %s: %w", store.Current().Source, err)
	}
	s.registerConfigMetrics(promReg)
	svc := &deciderService{logger: logger, d: d, metrics: newMetrics(promReg, leases, d.ConfigVersion), health: healthTracker, shards: shards}
	admin := &adminService{reg: reg, load: load, leases: leases, store: store, check: d.Check, served: s.awaitServed}

	s.shed = newShedder(cfg.MaxConcurrentDecides, cfg.ShedRetryAfter, promReg)
	sizes := limits.For(cfg.MaxTokenIDs)
	if s.rpc, err = newRPCStack(rpcDeps{logger: logger, auth: auth, shed: s.shed, reg: promReg, sizes: sizes}, svc, admin); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	s.rpc.mount(mux)
	mux.HandleFunc("/openapi.json", serveOpenAPI)
	mux.Handle("/metrics", promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", s.ready)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	// Shedding comes first: a shed call costs no body read.
	s.httpServer = &http.Server{Handler: s.shed.http(limitBodies(mux, sizes.MaxBodyBytes, cfg.MaxTokenIDs)), Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	if s.console, err = newConsole(s, mux, s.httpServer, svc); err != nil {
		_ = s.rpc.rest.Close()
		return nil, err
	}

	if s.grpcLis, err = serve.Listen("grpc-addr", cfg.GRPCAddr); err != nil {
		_ = s.rpc.rest.Close()
		return nil, err
	}
	if s.httpLis, err = serve.Listen("http-addr", cfg.HTTPAddr); err != nil {
		s.grpcLis.Close()
		_ = s.rpc.rest.Close()
		return nil, err
	}
	return s, nil
}

// GRPCAddr is the bound native gRPC address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr is the bound HTTP address (Connect, REST, /metrics).
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// Registry is the engine registry, for embedding (dev mode registers simulated engines).
func (s *Server) Registry() *registry.Registry { return s.reg }

// LoadTable is the engine load table, which ingestion (or tests) feed.
func (s *Server) LoadTable() *loadtable.Table { return s.load }

// Leases is the in-flight lease tracker.
func (s *Server) Leases() *inflight.Tracker { return s.leases }

// applyConfig installs a snapshot (deciderstate.State.Apply: engines when the document lists
// any, then buckets, checked first so a snapshot that cannot be built changes nothing).
func (s *Server) applyConfig(snap config.Snapshot) error {
	if err := s.shards.checkDocument(snap.Document); err != nil {
		return err
	}
	if err := s.state.Apply(snap); err != nil {
		return err
	}
	s.shards.doc.Store(snap.Document)
	s.configApplied.Store(time.Now().UnixNano())
	return nil
}

// maxServedWait bounds how long an admin write waits for this replica to serve its version.
const maxServedWait = 2 * time.Second

// awaitServed returns once the decider serves version or a later one, ctx ends, or
// maxServedWait passed (a version this replica refuses never arrives; the write stands).
func (s *Server) awaitServed(ctx context.Context, version int64) {
	deadline := time.Now().Add(maxServedWait)
	for s.decider.ConfigVersion() < version && ctx.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// Store is the configuration store in use (file or Postgres).
func (s *Server) Store() config.Store { return s.store }

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiv2.SluiceJSON)
}

// ready answers 503 while the server is not serving (starting, draining). While it serves it
// answers 200, because Decide keeps working on the state it has, and lists on further
// "degraded:" lines each dependency it cannot reach: the configuration store (this replica may
// serve a stale configuration) and the Kafka streams (load and KV residency stop updating).
func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	resp, err := s.rpc.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	var b strings.Builder
	b.WriteString("ready\n")
	for _, d := range s.degraded() {
		b.WriteString("degraded: " + d + "\n")
	}
	_, _ = w.Write([]byte(b.String()))
}

// degraded lists the dependencies this replica cannot reach right now.
func (s *Server) degraded() []string {
	var out []string
	if pg, ok := s.store.(*pgstore.Store); ok {
		if st := pg.ListenerStats(); !st.Connected {
			out = append(out, fmt.Sprintf("configuration store unreachable: serving version %d, last heard from Postgres %s",
				s.store.Current().Version, since(st.LastContact)))
		}
	}
	if s.ingestion != nil {
		out = append(out, s.ingestion.degraded()...)
	}
	return out
}

// since formats how long ago t was, or "never".
func since(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return time.Since(t).Round(time.Millisecond).String() + " ago"
}

// Run serves until ctx is cancelled, then drains within ShutdownTimeout (internal/serve):
// readiness fails first, both listeners stop accepting, in-flight calls finish or are cut at
// the deadline.
func (s *Server) Run(ctx context.Context) error {
	if s.cfg.Health.ProbeInterval > 0 {
		// New engines are unproven until a probe passes: probe once before serving (bounded
		// by -probe-timeout; early connections wait in the listen backlog), so a fresh decider
		// does not refuse every Decide for a probe interval.
		s.engineHealth.ProbeAll(ctx)
	}
	g, gctx := errgroup.WithContext(ctx)
	// HTTP drains first: its Connect, gRPC-Web and REST calls run on the gRPC server.
	g.Go(func() error {
		err := serve.Run(gctx, serve.Options{ShutdownTimeout: s.cfg.ShutdownTimeout, Logger: s.logger,
			OnServing: s.rpc.serving, OnDrain: s.rpc.health.Shutdown},
			serve.HTTP(s.httpServer, s.httpLis), serve.GRPC(s.rpc.grpc, s.grpcLis, s.rpc.mem))
		s.logger.Info("decider stopped")
		return err
	})
	g.Go(func() error { return ignoreCancel(s.store.Run(gctx)) })
	g.Go(func() error { return ignoreCancel(s.leases.Run(gctx)) })
	g.Go(func() error { return ignoreCancel(s.affinity.Run(gctx)) })
	g.Go(func() error { return s.engineHealth.Run(gctx) })
	if s.ingestion != nil {
		s.ingestion.run(gctx, g)
	}
	g.Go(func() error { return s.watchConfig(gctx) })
	s.console.run(gctx, g)
	s.logger.Info("decider serving", slog.String("grpc_addr", s.GRPCAddr()), slog.String("http_addr", s.HTTPAddr()),
		slog.Int64("config_version", s.decider.ConfigVersion()))
	err := g.Wait()
	_ = s.rpc.rest.Close()
	if c, ok := s.store.(interface{ Close() }); ok {
		c.Close()
	}
	return err
}

func (s *Server) watchConfig(ctx context.Context) error {
	ch, cancel := s.store.Subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case snap := <-ch:
			if err := s.applyConfig(snap); err != nil {
				s.logger.Error("configuration reload refused; still serving the previous version",
					slog.Int64("config_version", snap.Version), slog.Int64("serving_version", s.decider.ConfigVersion()), slog.Any("error", err))
			}
		}
	}
}

func ignoreCancel(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
