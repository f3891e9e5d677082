package enginelink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/serve"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/pgstore"
)

// Link is the enginelink process: it follows a set of engines (static, and the decider's
// registry in fleet mode), forwarding their KV events and load to Kafka. Build it with New and
// run it with Run.
type Link struct {
	logger *slog.Logger
	cfg    Config
	static []EngineSpec
	reg    *prometheus.Registry
	m      *metrics
	prod   *producer
	clock  *epochClock
	rp     replayer
	client *http.Client

	unknownLog throttle

	mu      sync.Mutex
	engines map[string]*engineRun // by id
	topics  map[string]*engineRun // by kv@<id>@<model>

	shardStore config.Store                // the shard map's store; nil without one
	closeStore func()                      // releases shardStore (Postgres); nil when nothing to release
	shards     atomic.Pointer[shardRoutes] // the shard map in force; nil without a store

	ready    atomic.Bool
	httpAddr atomic.Value // string, once listening
}

// New validates cfg, reads the -engines file and builds the link; it starts nothing.
func New(logger *slog.Logger, cfg Config) (*Link, error) {
	if logger == nil {
		return nil, errors.New("enginelink: nil logger")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	specs := append([]EngineSpec(nil), cfg.Engines...)
	if cfg.EnginesFile != "" {
		fromFile, err := LoadEngineFile(cfg.EnginesFile)
		if err != nil {
			return nil, err
		}
		specs = append(specs, fromFile...)
	}
	static, err := normalizeSpecs(specs, "static")
	if err != nil {
		return nil, err
	}
	for _, s := range static {
		if s.viaBind() && cfg.KVBind == "" {
			return nil, fmt.Errorf("engine %q: kv_events_endpoint %q needs -kv-bind (the socket the engine connects to)", s.ID, s.KVEventsEndpoint)
		}
	}
	shardStore, err := openShardStore(logger, cfg)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := newMetrics(reg)
	l := &Link{
		logger:     logger.With(slog.String("service", "enginelink")),
		cfg:        cfg,
		static:     static,
		shardStore: shardStore,
		reg:        reg,
		m:          m,
		clock:      &epochClock{now: time.Now},
		client:     scrapeClient(),
		engines:    map[string]*engineRun{},
		topics:     map[string]*engineRun{},
	}
	l.rp = zmqReplayer{logger: l.logger}
	if pg, ok := shardStore.(*pgstore.Store); ok {
		l.closeStore = pg.Close
	}
	if shardStore != nil {
		l.setShards(shardStore.Current())
	}
	l.prod = newProducer(l.logger, cfg, m)
	return l, nil
}

// scrapeClient is the HTTP client of the load scrapes. Each scrape's context bounds it
// (-scrape-timeout). It asks for uncompressed answers: a page of a few KB gains nothing from
// gzip across a LAN, and compressing it costs the engine and unpacking it the link on every
// scrape (promhttp, which vLLM and SGLang use too, gzips when asked).
func scrapeClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	return &http.Client{Transport: t}
}

// Registry is the link's metrics registry (served on /metrics).
func (l *Link) Registry() *prometheus.Registry { return l.reg }

// HTTPAddr is the address /metrics, /healthz and /readyz listen on, once Run has bound it; "" before.
func (l *Link) HTTPAddr() string {
	s, _ := l.httpAddr.Load().(string)
	return s
}

// Run follows the engines until ctx is cancelled, then stops every subscription and scrape,
// drains the producer within the shutdown timeout and returns. It fails early when the HTTP
// address or the -kv-bind socket cannot be bound.
func (l *Link) Run(ctx context.Context) error {
	if l.cfg.ScrapeInterval > 2500*time.Millisecond {
		l.logger.Warn("-scrape-interval is more than half the decider's default -load-freshness (5s): loads may expire between scrapes",
			slog.Duration("scrape_interval", l.cfg.ScrapeInterval))
	}
	var ln net.Listener
	if l.cfg.HTTPAddr != "" {
		var err error
		if ln, err = serve.Listen("http-addr", l.cfg.HTTPAddr); err != nil {
			return fmt.Errorf("%w (use a free address)", err)
		}
		l.httpAddr.Store(ln.Addr().String())
	}
	engCtx, stopEngines := context.WithCancel(ctx)
	defer stopEngines()
	var socks []zmq4.Socket
	if l.cfg.KVBind != "" {
		var err error
		if socks, err = l.bindSockets(engCtx); err != nil {
			if ln != nil {
				_ = ln.Close()
			}
			return err
		}
	}

	prodCtx, stopProducer := context.WithCancel(context.Background())
	defer stopProducer()
	prodDone := make(chan error, 1)
	go func() { prodDone <- l.prod.Run(prodCtx) }()

	g, gctx := errgroup.WithContext(engCtx)
	if ln != nil {
		g.Go(func() error {
			return serve.Run(gctx, serve.Options{ShutdownTimeout: time.Second, OnDrain: func() { l.ready.Store(false) }},
				serve.HTTP(l.httpServer(), ln))
		})
	}
	if len(socks) > 0 {
		g.Go(func() error {
			l.runBind(gctx, socks)
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			for _, s := range socks {
				_ = s.Close()
			}
			return nil
		})
	}
	if l.shardStore != nil {
		g.Go(func() error { return l.followShards(gctx) })
	}
	l.reconcile(gctx, l.static, nil)
	l.m.engines.WithLabelValues("static").Set(float64(len(l.static)))
	if l.cfg.FleetAdminURL != "" {
		g.Go(func() error {
			l.runFleet(gctx)
			return nil
		})
	} else {
		l.ready.Store(true)
	}
	l.logger.Info("enginelink started", slog.Int("static_engines", len(l.static)),
		slog.String("fleet_admin_url", l.cfg.FleetAdminURL), slog.String("kv_bind", l.cfg.KVBind))

	<-gctx.Done() // cancelled by ctx or by a failing part
	err := g.Wait()
	l.ready.Store(false)
	stopEngines()
	l.stopAll()
	stopProducer()
	if perr := <-prodDone; perr != nil && err == nil {
		err = fmt.Errorf("kafka producer: %w", perr)
	}
	if l.closeStore != nil {
		l.closeStore()
	}
	l.logger.Info("enginelink stopped")
	return err
}

// reconcile makes the followed engines equal to static plus fleet (static wins on an id both
// name): stops engines that went away or changed, starts new ones.
func (l *Link) reconcile(ctx context.Context, static, fleet []EngineSpec) {
	want := map[string]EngineSpec{}
	for _, s := range fleet {
		want[s.ID] = s
	}
	for _, s := range static {
		want[s.ID] = s
	}
	l.mu.Lock()
	var stop []*engineRun
	for id, er := range l.engines {
		if s, ok := want[id]; !ok || s != er.spec {
			stop = append(stop, er)
			delete(l.engines, id)
			delete(l.topics, er.spec.Topic())
		}
	}
	l.mu.Unlock()
	for _, er := range stop {
		er.stop()
		l.m.forgetEngine(er.spec.ID)
		l.logger.Info("stopped following engine", slog.String("engine_id", er.spec.ID))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, s := range want {
		if _, ok := l.engines[id]; ok {
			continue
		}
		er := l.newEngineRun(s)
		l.engines[id] = er
		l.topics[s.Topic()] = er
		er.start(ctx)
		l.logger.Info("following engine", slog.String("engine_id", id), slog.String("model", s.Model),
			slog.String("engine", s.Engine), slog.Int("dp_size", s.DPSize), slog.String("kv_events_endpoint", s.KVEventsEndpoint),
			slog.String("kv_replay_endpoint", s.KVReplayEndpoint), slog.String("metrics_url", s.MetricsURL),
			slog.Uint64("epoch", er.epochs.epoch))
	}
}

func (l *Link) stopAll() {
	l.mu.Lock()
	all := make([]*engineRun, 0, len(l.engines))
	for _, er := range l.engines {
		all = append(all, er)
	}
	clear(l.engines)
	clear(l.topics)
	l.mu.Unlock()
	for _, er := range all {
		er.stop()
	}
}

func (l *Link) byTopic(topic string) *engineRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.topics[topic]
}

// Engines returns the ids of the engines currently followed, sorted.
func (l *Link) Engines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.engines))
	for id := range l.engines {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
