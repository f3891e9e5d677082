// Package simengine is a simulated LLM inference engine that speaks the wire of vLLM 0.33 and
// SGLang 0.5.23 (docs/wire-formats.md), so sluice's production path — engine → ZMQ → sluice
// enginelink → Kafka → decider — runs without a GPU. The model itself (queue, latency, prefix
// cache) is package engine; -metrics-naming picks the engine imitated.
//
// HTTP, both flavours: OpenAI /v1/chat/completions and /v1/completions (streaming too),
// SGLang's /generate, /tokenize, /v1/models, /health, Prometheus /metrics, and admin switches
// for tests (/admin/fail, /admin/recover, /admin/reset-cache, /admin/last-request,
// /admin/info). SGLang flavour only: /v1/loads (SGLang 0.5.23 schema), /server_info,
// /model_info, their deprecated /get_* aliases and /health_generate. vLLM flavour only:
// /version. /metrics carries the imitated engine's gauges with its names and labels
// (vllm:num_requests_running{engine="0",model_name}, vllm:cache_config_info, …;
// sglang:num_running_reqs{engine_type,model_name,pp_rank,tp_rank}, …) and its
// time_to_first_token_seconds histogram, beside sluice_simengine_* series of the sim's own.
//
// KV events, as a real engine publishes them (-kv-events-endpoint): a ZMQ PUB socket sends
// [topic, seq (8-byte big-endian, from 0 per process, +1 per batch), msgpack batch] every
// -kv-interval, in vLLM's or SGLang's map form (-kv-events-format). tcp://*:PORT binds (a
// subscriber connects); tcp://HOST:PORT connects to a subscriber that binds, like vLLM and
// like enginelink's bound mode, which tells engines apart by the topic kv@<engine id>@<model>
// (-kv-events-topic). -kv-replay-endpoint adds the ROUTER replay socket: a request
// [empty, start seq] gets every buffered batch from that seq, then an end marker with seq
// 0xFFFFFFFFFFFFFFFF (vLLM frames include the topic, SGLang's do not). Load is read by
// scraping /metrics or /v1/loads, as for a real engine.
//
// Data parallelism (-dp-size N): N ranks, each its own engine with its own queue, slots and
// prefix cache, its own PUB (and replay) socket at port + rank (ipc/inproc: a _dp<rank>
// suffix) with the rank in every batch, and its own series (vLLM engine="<rank>", SGLang
// dp_rank="<rank>") and /v1/loads entry. Requests go round-robin unless they name a rank
// (SGLang's data_parallel_rank body field, vLLM's X-data-parallel-rank header).
//
// Namespaces: a request's cache_salt, and its LoRA adapter (-lora-adapters; named as the
// OpenAI model or by SGLang's lora_path), give its prefix blocks a hash chain of their own;
// SGLang events carry cache_salt and lora_name, vLLM events lora_name, lora_id and both in
// the blocks' extra_keys, as the engines report them.
//
// Kafka (-kafka-brokers) is the older shortcut past enginelink: the sim writes sluice's own
// LoadReport and KV records to Kafka itself. It is off when -kafka-brokers is empty, and can
// run beside ZMQ. Roles plain, prefill (with a KV bootstrap port) and decode follow SGLang's
// PD disaggregation.
//
// Dev mode and end-to-end tests embed it: New binds the HTTP listeners, Run serves and owns
// the ZMQ sockets; Endpoints (or KVEventsEndpoints per rank) reports their bound addresses
// and what a follower such as enginelink needs.
package simengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/serve"
	"github.com/sluicehq/sluice/services/simengine/engine"
)

// MaxBodyBytes bounds a request body (413 beyond).
const MaxBodyBytes = 32 << 20

// Server is one simulated engine process (or an embedded one in dev mode and tests).
type Server struct {
	logger   *slog.Logger
	cfg      Config
	role     engine.Role
	adapters []string              // served LoRA adapters
	engines  []*engine.Engine      // one per DP rank
	ttft     []prometheus.Observer // per DP rank: <engine>:time_to_first_token_seconds
	pub      *Publisher            // nil without -kafka-brokers
	kvZMQ    []*zmqKVPublisher     // one per DP rank; nil without -kv-events-endpoint
	nextDP   atomic.Uint64         // round-robin dispatch over the DP ranks
	started  time.Time

	failed atomic.Bool
	lastMu sync.Mutex
	last   LastRequest

	lis, bootLis net.Listener
	httpServer   *http.Server
}

// New validates cfg, builds the engine (and the Kafka publisher when brokers are set) and binds
// the HTTP listener and, for a prefill engine, the bootstrap listener, so Addr and
// BootstrapPort are valid on return. It starts no goroutines: Run does.
func New(logger *slog.Logger, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	role, _ := engine.ParseRole(cfg.Role)
	s := &Server{logger: logger.With(slog.String("engine_id", cfg.ID)), cfg: cfg, role: role, adapters: cfg.Adapters(),
		started: time.Now()}
	s.failed.Store(cfg.StartFailed)

	promReg := prometheus.NewRegistry()
	var kafkaSink engine.Sink
	if brokers := cfg.Brokers(); len(brokers) > 0 {
		s.pub = newPublisher(s.logger, cfg, brokers, promReg) // DPSize is 1 (Validate)
		kafkaSink = s.pub.enqueueKV
	}
	for rank := range cfg.DPSize {
		sinks := []engine.Sink{kafkaSink}
		if cfg.KVEventsEndpoint != "" {
			z, err := newZMQKVPublisher(s.logger, cfg, rank, promReg)
			if err != nil {
				return nil, err
			}
			s.kvZMQ = append(s.kvZMQ, z)
			sinks = append(sinks, z.enqueue)
		}
		eng, err := engine.New(cfg.engineConfig(fanOut(sinks)))
		if err != nil {
			return nil, err
		}
		s.engines = append(s.engines, eng)
		s.ttft = append(s.ttft, registerEngineMetrics(promReg, cfg, rank, cfg.DPSize, eng, &s.failed))
	}
	if s.pub != nil {
		s.pub.load = s.engines[0].Load
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.generation(kindChat))
	mux.HandleFunc("POST /v1/completions", s.generation(kindCompletion))
	mux.HandleFunc("POST /generate", s.generation(kindGenerate))
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("GET /v1/models", s.models)
	// Routes only one of the two engines has: routers probe them to tell the engines apart.
	if cfg.MetricsNaming == NamingSGLang {
		mux.HandleFunc("GET /v1/loads", s.loads)
		mux.HandleFunc("GET /server_info", s.serverInfo)
		mux.HandleFunc("GET /get_server_info", s.serverInfo)
		mux.HandleFunc("GET /model_info", s.modelInfo)
		mux.HandleFunc("GET /get_model_info", s.modelInfo)
		mux.HandleFunc("GET /health_generate", s.healthGenerate)
	} else {
		mux.HandleFunc("GET /version", s.version)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("POST /admin/fail", s.setFailed(true))
	mux.HandleFunc("POST /admin/recover", s.setFailed(false))
	mux.HandleFunc("POST /admin/reset-cache", s.resetCache)
	mux.HandleFunc("GET /admin/last-request", s.lastRequest)
	mux.HandleFunc("GET /admin/info", s.info)
	s.httpServer = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn)}

	var err error
	if s.lis, err = serve.Listen("addr", cfg.Addr); err != nil {
		return nil, err
	}
	if role == engine.RolePrefill {
		host, _, _ := net.SplitHostPort(cfg.Addr)
		baddr := net.JoinHostPort(host, strconv.Itoa(cfg.BootstrapPort))
		if s.bootLis, err = net.Listen("tcp", baddr); err != nil {
			s.lis.Close()
			return nil, fmt.Errorf("-bootstrap-port %d: %w", cfg.BootstrapPort, err)
		}
	}
	return s, nil
}

// Addr is the bound HTTP address.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// BootstrapPort is the bound bootstrap port of a prefill engine, 0 for other roles.
func (s *Server) BootstrapPort() int {
	if s.bootLis == nil {
		return 0
	}
	return s.bootLis.Addr().(*net.TCPAddr).Port
}

// KVEventsEndpoints waits until Run has set up DP rank rank's KV-event sockets and returns
// endpoints a local subscriber can use: the PUB's (a bound wildcard as tcp://127.0.0.1:PORT,
// so an ephemeral port 0 is resolved; a connecting PUB's target as given) and the replay
// socket's ("" without replay). It returns ErrNoKVEvents when KV events over ZMQ are off or
// there is no such rank, and the bind error if Run could not bind.
func (s *Server) KVEventsEndpoints(ctx context.Context, rank int) (pub, replay string, err error) {
	if rank < 0 || rank >= len(s.kvZMQ) {
		return "", "", ErrNoKVEvents
	}
	return s.kvZMQ[rank].endpoints(ctx)
}

// fanOut returns a Sink giving every event slice to each non-nil sink (nil without any).
// Sinks only read the events.
func fanOut(all []engine.Sink) engine.Sink {
	var sinks []engine.Sink
	for _, s := range all {
		if s != nil {
			sinks = append(sinks, s)
		}
	}
	switch len(sinks) {
	case 0:
		return nil
	case 1:
		return sinks[0]
	}
	return func(evs []engine.Event) {
		for _, s := range sinks {
			s(evs)
		}
	}
}

// Engine is DP rank 0's simulated engine, for embedding and tests.
func (s *Server) Engine() *engine.Engine { return s.engines[0] }

// Engines returns the simulated engine of every DP rank, by rank.
func (s *Server) Engines() []*engine.Engine { return slices.Clone(s.engines) }

// errNoRank is a data_parallel_rank outside 0..dp_size-1.
var errNoRank = errors.New("data_parallel_rank out of range")

// pick returns the DP rank a request runs on: the one it asks for (SGLang's
// data_parallel_rank body field, or vLLM's X-data-parallel-rank header), else the next in
// round-robin order, as SGLang's default load_balance_method does.
func (s *Server) pick(asked *int) (int, error) {
	if asked != nil {
		if *asked < 0 || *asked >= len(s.engines) {
			return 0, fmt.Errorf("%w: %d, engine has %d ranks", errNoRank, *asked, len(s.engines))
		}
		return *asked, nil
	}
	return int((s.nextDP.Add(1) - 1) % uint64(len(s.engines))), nil
}

// SetFailed makes /health and the generation routes answer 503 (true) or serve again (false).
func (s *Server) SetFailed(failed bool) { s.failed.Store(failed) }

// Run serves until ctx is cancelled, then drains within ShutdownTimeout (internal/serve):
// health fails first, the listeners stop accepting, running requests finish or are cut at the
// deadline, and the publisher sends what it holds.
func (s *Server) Run(ctx context.Context) error {
	servers := []serve.Server{serve.HTTP(s.httpServer, s.lis)}
	if s.bootLis != nil {
		// KV-handoff connections are accepted and closed at once: only the port's reachability
		// is simulated.
		servers = append(servers, serve.Accept("bootstrap listener", s.bootLis, func(c net.Conn) { c.Close() }))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := serve.Run(gctx, serve.Options{ShutdownTimeout: s.cfg.ShutdownTimeout, OnDrain: func() { s.failed.Store(true) }}, servers...)
		// A request cut at the deadline ends its run with its context.
		for _, e := range s.engines {
			e.Wait()
		}
		if err == nil {
			s.logger.Info("simengine stopped")
		}
		return err
	})
	if s.pub != nil {
		g.Go(func() error { return s.pub.Run(gctx) })
	}
	for _, z := range s.kvZMQ {
		g.Go(func() error { return z.Run(gctx) })
	}
	s.logger.Info("simengine serving", slog.String("addr", s.Addr()), slog.String("role", s.role.String()),
		slog.String("model", s.cfg.Model), slog.Int("dp_size", len(s.engines)), slog.Int("bootstrap_port", s.BootstrapPort()),
		slog.Bool("kafka", s.pub != nil), slog.String("kv_events_endpoint", s.cfg.KVEventsEndpoint))
	return g.Wait()
}
