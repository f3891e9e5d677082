// Package gateway is sluice's HTTP gateway: an OpenAI-compatible front door (chat and text
// completions, SGLang's /generate, /v1/models) that prepares each request's routing facts,
// asks a decider which engine (or prefill + decode pair) serves it, forwards the body there,
// relays the answer (streaming chunk by chunk) and releases the decision's lease. It also
// serves the decider's REST mapping (DeciderService and AdminService) by proxying to the
// decider over gRPC, all on one grpc-gateway runtime.ServeMux.
package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/clients/go/deciderclient"
	"github.com/sluicehq/sluice/components/limits"
	"github.com/sluicehq/sluice/components/strictjson"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/serve"
)

// Server is one gateway process (or an embedded gateway in dev mode).
type Server struct {
	logger    *slog.Logger
	cfg       Config
	conn      *grpc.ClientConn
	decider   *deciderclient.Client
	shards    *shardRouter // routes by model over sharded deciders (shards.go)
	admin     sluicev1.AdminServiceClient
	tokenizer tokenizer
	// forwardIDs: the tokenizer is the engines' own and -forward-token-ids is on
	// (withPromptIDs).
	forwardIDs bool
	// engines is the client to engines; engineRT its transport, which the request path calls
	// directly (engineDoer).
	engines  *http.Client
	engineRT http.RoundTripper
	metrics  *metrics

	sessionHeader, routingHeader string
	sizes                        limits.Sizes
	health                       healthpb.HealthClient
	readyMu                      sync.Mutex
	readyAt                      time.Time // when readyErr was found
	readyErr                     error     // the decider health check's last answer

	lis        net.Listener
	httpServer *http.Server
	draining   atomic.Bool
	// inflight counts inference handlers, so Run closes the decider connection only after
	// their leases were released.
	inflight sync.WaitGroup
}

// Option changes how New builds the gateway.
type Option func(*options)

type options struct {
	local grpc.ClientConnInterface
}

// WithLocalDecider sends the request path's Decide and Release calls to cc, an embedded
// decider's in-process connection (deciderserver.Server.LocalConn), instead of over gRPC to
// -decider-addr: one network hop, its serialisation and a process less per request. The REST
// mapping, /v1/models, the tokenizer's engine list and /readyz still use -decider-addr, which
// must then be the embedded decider's own gRPC address.
func WithLocalDecider(cc grpc.ClientConnInterface) Option { return func(o *options) { o.local = cc } }

// New validates cfg, builds the decider connection (gRPC connects lazily, on first use), the
// tokenizer (an hf: tokenizer.json is loaded now) and the routes, and binds the listener, so
// Addr is valid on return. It starts no goroutines: Run does.
func New(logger *slog.Logger, cfg Config, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	sizes := limits.For(cfg.MaxTokenIDs)
	// Round robin over every address the target resolves to (e.g. dns:///deciders:7070 or a
	// headless service): calls spread over the replicas, and a retry after a shed call lands
	// on another one; each Release goes to the replica that granted its lease
	// (deciderclient.LeaseAffinity).
	conn, err := grpc.NewClient(cfg.DeciderAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		deciderclient.WithLeaseAffinity(),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(sizes.MaxMessageBytes), grpc.MaxCallRecvMsgSize(sizes.MaxMessageBytes)))
	if err != nil {
		return nil, fmt.Errorf("-decider-addr %s: %w", cfg.DeciderAddr, err)
	}
	rt := newH1Transport(newEngineTransport())
	s := &Server{logger: logger, cfg: cfg, conn: conn, sizes: sizes,
		health:        healthpb.NewHealthClient(conn),
		admin:         sluicev1.NewAdminServiceClient(conn),
		engines:       &http.Client{Transport: rt},
		engineRT:      rt,
		sessionHeader: canonicalHeader(cfg.SessionHeader), routingHeader: canonicalHeader(cfg.RoutingHeader)}
	copts := []deciderclient.Option{deciderclient.WithTimeout(cfg.DecideTimeout)}
	if cfg.DeciderToken != "" {
		copts = append(copts, deciderclient.WithToken(cfg.DeciderToken))
	}
	var decisions grpc.ClientConnInterface = conn
	homeOpts := copts
	if o.local != nil {
		// The embedded decider answers in process: a call there waits on no network and no
		// other process, so -decide-timeout, which bounds a remote decider's calls, arms
		// no timer for it (docs/operations.md, `-decide-timeout`). The request's own
		// context still bounds it, and the shards' remote clients keep the bound.
		decisions = o.local
		homeOpts = append(slices.Clip(copts), deciderclient.WithTimeout(0))
	}
	s.decider = deciderclient.New(decisions, homeOpts...)
	s.shards = newShardRouter(s.decider, copts, sizes, o.local == nil)
	if s.tokenizer, err = s.newTokenizer(); err != nil {
		conn.Close()
		return nil, err
	}

	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.metrics = newMetrics(promReg)

	mux := runtime.NewServeMux(strictjson.GatewayMarshaler(), strictjson.GatewayQueryParser(), runtime.WithRoutingErrorHandler(s.routingError))
	ctx := context.Background()
	if err := sluicev1.RegisterDeciderServiceHandlerClient(ctx, mux, sluicev1.NewDeciderServiceClient(conn)); err != nil {
		conn.Close()
		return nil, err
	}
	if err := sluicev1.RegisterAdminServiceHandlerClient(ctx, mux, s.admin); err != nil {
		conn.Close()
		return nil, err
	}
	routes := []struct {
		method, path string
		h            runtime.HandlerFunc
	}{
		{http.MethodPost, routeChat, s.inference(routeChat)},
		{http.MethodPost, routeCompletions, s.inference(routeCompletions)},
		{http.MethodPost, routeGenerate, s.inference(routeGenerate)},
		{http.MethodGet, routeModels, s.listModels},
		{http.MethodGet, routeModels + "/{model=**}", s.retrieveModel},
		{http.MethodGet, "/metrics", handler(promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))},
		{http.MethodGet, "/healthz", func(w http.ResponseWriter, _ *http.Request, _ map[string]string) { _, _ = w.Write([]byte("ok\n")) }},
		{http.MethodGet, "/readyz", s.ready},
	}
	inference := map[string]runtime.HandlerFunc{}
	for _, r := range routes {
		if r.method == http.MethodPost {
			inference[r.path] = r.h
		}
		if err := mux.HandlePath(r.method, r.path, r.h); err != nil {
			conn.Close()
			return nil, fmt.Errorf("route %s %s: %w", r.method, r.path, err)
		}
	}
	s.httpServer = &http.Server{Handler: limitBodies(inferenceFirst(mux, inference), sizes.MaxBodyBytes),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout, ReadTimeout: cfg.ReadTimeout, IdleTimeout: cfg.IdleTimeout,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	if s.lis, err = serve.Listen("addr", cfg.Addr); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) newTokenizer() (tokenizer, error) {
	mode, err := parseTokenizerMode(s.cfg.Tokenizer)
	if err != nil {
		return nil, err
	}
	switch mode.kind {
	case TokenizerEngine:
		s.forwardIDs = s.cfg.ForwardTokenIDs
		return newEngineTokenizer(engineDoer{s.engines, s.engineRT}, s.cfg.TokenizerURL, adminLister{s}, s.cfg.TokenizerTimeout), nil
	case "hf":
		return loadHFTokenizer(mode.path)
	}
	return estimator{}, nil
}

// newEngineTransport is tuned for many concurrent requests to a few engines: large idle pools
// per host, no transparent compression (bodies are relayed byte for byte).
func newEngineTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.DisableCompression = true
	t.IdleConnTimeout = 90 * time.Second
	return t
}

func handler(h http.Handler) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ map[string]string) { h.ServeHTTP(w, r) }
}

// Addr is the bound HTTP address.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// ready answers /readyz: not while draining, and not while the decider does not answer its
// gRPC health check (within ReadyTimeout; the answer is reused for ReadyCache so probes do not
// become load) — a gateway that cannot decide serves nothing.
func (s *Server) ready(w http.ResponseWriter, r *http.Request, _ map[string]string) {
	if s.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	if err := s.deciderReady(r.Context()); err != nil {
		http.Error(w, "decider not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

func (s *Server) deciderReady(ctx context.Context) error {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	if !s.readyAt.IsZero() && time.Since(s.readyAt) < s.cfg.ReadyCache {
		return s.readyErr
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	if s.cfg.DeciderToken != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.cfg.DeciderToken)
	}
	resp, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "sluice.v1.DeciderService"})
	switch {
	case err != nil:
		s.readyErr = fmt.Errorf("health check of %s: %w", s.cfg.DeciderAddr, err)
	case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		s.readyErr = fmt.Errorf("%s reports %s", s.cfg.DeciderAddr, resp.GetStatus())
	default:
		s.readyErr = nil
	}
	s.readyAt = time.Now()
	return s.readyErr
}

// Run serves until ctx is cancelled, then drains within ShutdownTimeout: readiness fails first,
// the listener stops accepting, in-flight requests (streams included) finish or are cut at the
// deadline, and the decider connection closes last so their leases are still released.
func (s *Server) Run(ctx context.Context) error {
	s.logger.Info("gateway serving", slog.String("addr", s.Addr()), slog.String("decider_addr", s.cfg.DeciderAddr),
		slog.String("tokenizer", s.cfg.Tokenizer))
	stopShardMap := s.followShardMap(ctx)
	err := serve.Run(ctx, serve.Options{ShutdownTimeout: s.cfg.ShutdownTimeout, Logger: s.logger,
		OnDrain: func() { s.draining.Store(true) }}, serve.HTTP(s.httpServer, s.lis))
	if err == nil {
		s.logger.Info("gateway stopped")
	}
	s.waitHandlers()
	s.engines.CloseIdleConnections()
	stopShardMap()
	_ = s.shards.Close()
	if cerr := s.conn.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close decider connection: %w", cerr)
	}
	return err
}

// waitHandlers waits for inference handlers cut by a forced close to release their leases,
// at most ReleaseTimeout (Release itself is bounded by it).
func (s *Server) waitHandlers() {
	done := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(done)
	}()
	t := time.NewTimer(s.cfg.ReleaseTimeout + time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.logger.Warn("gateway stopped with requests still releasing their leases")
	}
}

// deciderCtx adds the gateway's decider token to the gateway's own AdminService calls.
func (s *Server) deciderCtx(ctx context.Context) context.Context {
	if s.cfg.DeciderToken == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.cfg.DeciderToken)
}

// adminLister lists engines with the gateway's decider token.
type adminLister struct{ s *Server }

var _ engineLister = adminLister{}

func (a adminLister) ListEngines(ctx context.Context, in *sluicev1.ListEnginesRequest, opts ...grpc.CallOption) (*sluicev1.ListEnginesResponse, error) {
	return a.s.admin.ListEngines(a.s.deciderCtx(ctx), in, opts...)
}

// inferenceFirst serves a POST to exactly one of the inference routes (paths in their plain
// form) without the REST mux's pattern walk: the route the mux would pick, since the routes
// registered last are matched first, with the same handler. Anything else — another path or
// method, an escaped path, grpc-gateway's X-HTTP-Method-Override — goes to the mux.
func inferenceFirst(mux *runtime.ServeMux, routes map[string]runtime.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.RawPath == "" {
			if h, ok := routes[r.URL.Path]; ok && r.Header.Get("X-HTTP-Method-Override") == "" {
				h(w, r, nil)
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// limitBodies bounds every request body to max (limits.Sizes.MaxBodyBytes): a declared
// Content-Length above it is answered 413 before a byte is read; a longer chunked body fails
// its read at the limit (the inference routes answer 413 then).
func limitBodies(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			w.Header().Set("Connection", "close")
			writeAPIError(w, apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalidRequest, code: "request_too_large",
				message: limits.TooLarge("request body", r.ContentLength, max)})
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, max)
		}
		next.ServeHTTP(w, r)
	})
}
