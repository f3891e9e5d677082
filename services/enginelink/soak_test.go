package enginelink_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/services/enginelink"
	"github.com/sluicehq/sluice/services/simengine"
	"github.com/sluicehq/sluice/services/simengine/engine"
)

// TestOutageLinkSoak runs the production path under steady traffic for SLUICE_SOAK (default
// 45s; the recorded run uses 10m): a simulated vLLM engine (its own LRU prefix cache, KV events
// over ZMQ with a replay socket, /metrics) → enginelink → the real broker → a decider's prefix
// index. A third of the way in the broker is stopped for 5 s and started again; two thirds in
// the engine restarts (new process state, seq back to 0, empty cache). At the end every prompt
// of the workload must be credited by Decide with exactly the prefix the engine really holds
// (nothing missing, nothing stale), with no engine left uncertain, no bad record, and no gap
// the link could not recover (none was injected: the link buffers through the broker outage
// and replays what ZMQ lost).
func TestOutageLinkSoak(t *testing.T) {
	if os.Getenv(testenv.EnvOutage) != "1" {
		t.Skip("outage test: runs in scripts/test.sh's serial outage phase (it stops the broker)")
	}
	d := 45 * time.Second
	if v := os.Getenv("SLUICE_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("SLUICE_SOAK=%q: %v", v, err)
		}
	}
	brokers := testenv.KafkaBrokers(t)
	pub, replay := freePort(t), freePort(t)
	simCfg := simengine.DefaultConfig()
	simCfg.Addr, simCfg.ID, simCfg.Model, simCfg.Role = "127.0.0.1:0", "e1", "m", "plain"
	simCfg.KafkaBrokers, simCfg.MetricsNaming = "", simengine.NamingVLLM
	simCfg.KVEventsEndpoint, simCfg.KVReplayEndpoint = "tcp://*:"+strconv.Itoa(pub), "tcp://*:"+strconv.Itoa(replay)
	simCfg.CacheBlocks, simCfg.Speed, simCfg.KVInterval = 2048, 2000, 10*time.Millisecond
	sim := startSim(t, simCfg)

	cfg := testConfig(brokers)
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: "tcp://127.0.0.1:" + strconv.Itoa(pub),
		KVReplayEndpoint: "tcp://127.0.0.1:" + strconv.Itoa(replay)}}
	link := runLink(t, cfg)
	dec := startDecisionDecider(t, strings.Join(brokers, ","), cfg.KVTopic, cfg.LoadTopic)
	conn, err := grpc.NewClient(dec.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := sluicev1.NewDeciderServiceClient(conn)
	matched := func(tokens []uint32) int64 {
		dd, err := client.Decide(context.Background(), &sluicev1.DecideRequest{Model: "m", InputTokens: int64(len(tokens)),
			TokenIds: tokens, DryRun: true, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		return proctest.Matched(dd, "e1")
	}

	// The workload: 256 conversations of a shared 4-block system prompt, a 4-block topic and
	// a growing tail; the cache holds 2048 blocks, so the LRU keeps evicting.
	rng := rand.New(rand.NewPCG(1, 2))
	block := func() []uint32 {
		out := make([]uint32, simCfg.BlockSize)
		for i := range out {
			out[i] = rng.Uint32N(50_000) + 1
		}
		return out
	}
	system := slicesConcat(block(), block(), block(), block())
	var prompts [][]uint32
	for range 256 {
		p := slicesConcat(system, block(), block(), block(), block())
		for range rng.IntN(12) {
			p = append(p, block()...)
		}
		prompts = append(prompts, p)
	}
	var (
		mu       sync.RWMutex // held shared by a request in progress, exclusively to restart the engine
		requests atomic.Int64
	)
	current := func() *simengine.Server { mu.RLock(); defer mu.RUnlock(); return sim.srv }
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for ctx.Err() == nil {
				p := prompts[r.IntN(len(prompts))]
				mu.RLock()
				run, err := sim.srv.Engine().Submit(ctx, engine.Request{TokenIDs: p, MaxTokens: 1})
				if err == nil {
					if _, err := run.Result(); err == nil {
						requests.Add(1)
					}
				}
				mu.RUnlock()
			}
		}()
	}

	start := time.Now()
	time.Sleep(d / 3)
	testenv.StopKafka(t)
	time.Sleep(5 * time.Second)
	testenv.StartKafka(t)
	t.Logf("broker restarted at %v", time.Since(start).Round(time.Second))
	time.Sleep(time.Until(start.Add(2 * d / 3)))
	mu.Lock()
	sim.stop()
	sim = startSim(t, simCfg)
	mu.Unlock()
	t.Logf("engine restarted at %v", time.Since(start).Round(time.Second))
	time.Sleep(time.Until(start.Add(d)))
	stop()
	wg.Wait()
	current().Engine().Wait()

	// Converge: the engine's last batches travel to the index.
	var mismatches []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		mismatches = mismatches[:0]
		for i, p := range prompts {
			want, got := int64(current().Engine().CachedPrefix(p)), matched(p)
			if want != got {
				mismatches = append(mismatches, fmt.Sprintf("prompt %d: engine holds %d tokens, Decide credits %d", i, want, got))
			}
		}
		if len(mismatches) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(mismatches) > 0 {
		t.Errorf("%d of %d prompts differ between the engine's cache and the index, e.g. %v", len(mismatches), len(prompts), mismatches[:min(5, len(mismatches))])
	}
	held := 0
	for _, p := range prompts {
		held += current().Engine().CachedPrefix(p)
	}
	uncertain := scrapeSum(t, "http://"+dec.HTTPAddr()+"/metrics", "sluice_ingest_kv_uncertain_holders")
	bad := scrapeSum(t, "http://"+dec.HTTPAddr()+"/metrics", "sluice_ingest_bad_records_total")
	lost := metricValue(t, link.Registry(), "sluice_enginelink_kv_gap_batches_total", map[string]string{"outcome": "unrecovered"}) +
		metricValue(t, link.Registry(), "sluice_enginelink_kafka_records_dropped_total", nil)
	t.Logf("soak %v: %d requests; at the end the engine holds %d prompt tokens of the workload; uncertain holders %v, bad records %v, unrecovered gaps %v",
		d, requests.Load(), held, uncertain, bad, lost)
	if uncertain != 0 || bad != 0 || lost != 0 {
		t.Errorf("uncertain holders %v, bad records %v, unrecovered gaps %v; want 0 (no gap was injected)", uncertain, bad, lost)
	}
}

// soakSim is one life of the simulated engine.
type soakSim struct {
	srv  *simengine.Server
	stop func()
}

func startSim(t *testing.T, cfg simengine.Config) soakSim {
	t.Helper()
	srv, err := simengine.New(testLogger(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	if _, err := srv.Endpoints(ctx); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("simengine Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return soakSim{srv: srv, stop: stop}
}

func slicesConcat(parts ...[]uint32) []uint32 {
	var out []uint32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// scrapeSum sums every sample of a counter or gauge family on a /metrics page.
func scrapeSum(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, m := range fams[name].GetMetric() {
		sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	return sum
}
