package vllm

import (
	"bufio"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// Names and tokens of the stack.
const (
	modelName   = "tiny" // the served model name of both engines, and the bucket's model
	engineA     = "vllm-a"
	engineB     = "vllm-b"
	viewerToken = "vllm-viewer-token"
	adminToken  = "vllm-admin-token"
	// sluiceStartTimeout bounds each sluice process's start-up.
	sluiceStartTimeout = 60 * time.Second
	// poll is how often the test checks a condition it waits for.
	poll = 100 * time.Millisecond
	// stopGrace is how long a process group gets to exit after SIGTERM before it is
	// killed; vLLM stops in ~3 s.
	stopGrace = 15 * time.Second
	// tailLines is how much of each process log a failing test prints.
	tailLines = 80
	// minMatchTokens is the cache_aware bucket's threshold: two blocks.
	minMatchTokens = 2 * blockSize
)

// stack is the whole path as real processes: two vLLM engines, enginelink carrying their
// KV events (one bound ZMQ socket) and /metrics load into Kafka, a decider reading both
// topics, and a gateway in front of it tokenizing with the engines' /tokenize.
type stack struct {
	procs *proctest.Set
	dir   string
	bin   string
	api   proctest.Decider

	brokers            string
	loadTopic, kvTopic string
	kvBind             string

	// model is the tiny model's directory (its tokenizer.json for a local tokenizer).
	model string

	deciderGRPC, deciderHTTP, gatewayAddr, linkHTTP string
	decider, gateway, link                          *proctest.Process
	engines                                         map[string]*vllmEngine
}

// startStack starts everything and returns once both engines are healthy in the decider
// with a load report that came from their /metrics through enginelink and Kafka.
func startStack(t *testing.T, env testenv.VLLMEnv) *stack {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	suffix := proctest.RandomSuffix()
	s := &stack{dir: workDir(t), brokers: strings.Join(brokers, ","),
		loadTopic: "vllm-load-" + suffix, kvTopic: "vllm-kv-" + suffix, model: env.Model}
	s.procs = proctest.NewSet(t, s.dir, proctest.Options{StopGrace: stopGrace, TailLines: tailLines})
	ports := proctest.FreePorts(t, 5)
	late := proctest.ServerPorts(t, 4) // the engines bind theirs late
	s.deciderGRPC = "127.0.0.1:" + strconv.Itoa(ports[0])
	s.deciderHTTP = "127.0.0.1:" + strconv.Itoa(ports[1])
	s.gatewayAddr = "127.0.0.1:" + strconv.Itoa(ports[2])
	s.api = proctest.Decider{Addr: s.deciderHTTP, Token: viewerToken, Client: quick}
	s.linkHTTP = "127.0.0.1:" + strconv.Itoa(ports[3])
	s.kvBind = "tcp://127.0.0.1:" + strconv.Itoa(ports[4])
	s.engines = map[string]*vllmEngine{
		engineA: {id: engineA, port: late[0], replayPort: late[1], dir: filepath.Join(s.dir, engineA)},
		engineB: {id: engineB, port: late[2], replayPort: late[3], dir: filepath.Join(s.dir, engineB)},
	}

	// The engines take a minute: start them first, in parallel, and build and start sluice
	// meanwhile. Their publishers connect to the link's socket and reconnect until it is
	// bound; nothing is published before the first request.
	for _, id := range []string{engineA, engineB} {
		startVLLM(t, s.procs, env, s.engines[id], s.kvBind)
	}
	t.Logf("started vLLM engines %s (port %d) and %s (port %d); they publish KV events to %s",
		engineA, s.engines[engineA].port, engineB, s.engines[engineB].port, s.kvBind)

	proctest.CreateTopics(t, brokers, s.loadTopic, s.kvTopic)
	s.bin = proctest.BuildSluice(t, s.dir)
	s.link = s.procs.Start(t, "enginelink", nil, s.bin, s.linkArgs(false)...)
	s.waitHTTP(t, s.link, "http://"+s.linkHTTP+"/healthz")

	cfg := filepath.Join(s.dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(s.configYAML()), 0o600); err != nil {
		t.Fatal(err)
	}
	s.decider = s.procs.Start(t, "decider", nil, s.bin, "decider",
		"-grpc-addr", s.deciderGRPC, "-http-addr", s.deciderHTTP, "-config", cfg, "-config-snapshot", "-",
		"-kafka-brokers", s.brokers, "-load-topic", s.loadTopic, "-kv-topic", s.kvTopic,
		// A killed engine fails its probes within seconds; one failed dispatch opens its
		// breaker first.
		"-probe-interval", "1s", "-probe-failures", "2", "-probe-successes", "1", "-probe-timeout", "1s",
		"-breaker-failures", "1", "-breaker-cool-down", "2s",
		"-admin-token", adminToken, "-viewer-token", viewerToken,
		"-lease-ttl", "10m", "-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug")
	s.waitHTTP(t, s.decider, "http://"+s.deciderHTTP+"/readyz")
	s.gateway = s.procs.Start(t, "gateway", nil, s.bin, "gateway",
		"-addr", s.gatewayAddr, "-decider-addr", s.deciderGRPC, "-decider-token", viewerToken,
		"-tokenizer", "engine", "-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug")
	s.waitHTTP(t, s.gateway, "http://"+s.gatewayAddr+"/healthz")

	var wg sync.WaitGroup
	for _, e := range s.engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waitEngine(t, e)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	ids := slices.Sorted(maps.Keys(s.engines))
	proctest.Eventually(t, poll, 60*time.Second, "both engines healthy in the decider with a load report from their /metrics", func() (bool, string) {
		return s.api.EnginesReady(t, ids...)
	})
	return s
}

// startGateway starts one more gateway on the stack's decider with the given flags added and
// returns its address once it answers /healthz; the run stops it with the rest.
func (s *stack) startGateway(t *testing.T, name string, args ...string) string {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePorts(t, 1)[0])
	p := s.procs.Start(t, name, nil, s.bin, append([]string{"gateway",
		"-addr", addr, "-decider-addr", s.deciderGRPC, "-decider-token", viewerToken,
		"-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug"}, args...)...)
	s.waitHTTP(t, p, "http://"+addr+"/healthz")
	return addr
}

// workDir is the directory of the run's logs, engine caches and sluice binary: the test's
// temp dir, or one kept after the run when SLUICE_TEST_KEEP=1 (as scripts/test.sh keeps its
// services' dir), to read what the engines and enginelink logged.
func workDir(t *testing.T) string {
	t.Helper()
	if os.Getenv("SLUICE_TEST_KEEP") != "1" {
		return t.TempDir()
	}
	d, err := os.MkdirTemp("", "sluice-vllmtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("keeping the logs in %s (SLUICE_TEST_KEEP=1)", d)
	return d
}

// waitEngine waits for one engine's start-up from a goroutine of startStack: failures are
// reported with t.Errorf and the caller stops after all have been waited for.
func waitEngine(t *testing.T, e *vllmEngine) {
	deadline := e.started.Add(engineStartTimeout)
	var last string
	for {
		if !e.proc.Running() {
			t.Errorf("vLLM engine %s exited during start-up (%v); last lines of its log:\n%s", e.id, e.proc.Err(), proctest.Tail(e.proc.LogPath, tailLines))
			return
		}
		resp, err := quick.Get(e.url() + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Logf("vLLM engine %s ready after %v", e.id, time.Since(e.started).Round(time.Second))
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Errorf("vLLM engine %s not ready within %v of its start: GET /health: %s; last lines of its log:\n%s",
				e.id, engineStartTimeout, last, proctest.Tail(e.proc.LogPath, tailLines))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// linkArgs runs enginelink with the engines' connecting publishers on the one socket it
// binds. In static mode both engines are named with -engine; in fleet mode the link follows
// the decider's registry, where the engines declare the same endpoints (configYAML). A
// scrape may take longer than the interval: a vLLM server on a loaded CPU answers /metrics
// in up to a second.
func (s *stack) linkArgs(fleet bool) []string {
	args := []string{"enginelink",
		"-kafka-brokers", s.brokers, "-kv-topic", s.kvTopic, "-load-topic", s.loadTopic,
		"-kv-bind", s.kvBind, "-http-addr", s.linkHTTP, "-scrape-interval", "250ms", "-scrape-timeout", "2s",
		"-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug"}
	if fleet {
		return append(args, "-fleet-admin-url", "http://"+s.deciderHTTP, "-admin-token", viewerToken, "-fleet-poll", "1s")
	}
	for _, id := range []string{engineA, engineB} {
		e := s.engines[id]
		args = append(args, "-engine", fmt.Sprintf("id=%s,model=%s,engine=vllm,kv=bind,replay=%s,metrics=%s/metrics",
			e.id, modelName, e.replayEndpoint(), e.url()))
	}
	return args
}

// configYAML is the decider's configuration: both engines in one cache_aware bucket, each
// declaring its KV-event endpoint (it connects to the link's bound socket), replay socket
// and metrics for enginelink in fleet mode.
func (s *stack) configYAML() string {
	var b strings.Builder
	b.WriteString("workers:\n")
	for _, id := range []string{engineA, engineB} {
		e := s.engines[id]
		fmt.Fprintf(&b, "  - {id: %s, url: %q, models: [%s], role: plain, kv_events_endpoint: %q, kv_replay_endpoint: %q, metrics_url: %q}\n",
			id, e.url(), modelName, "bind:"+s.kvBind, e.replayEndpoint(), e.url()+"/metrics")
	}
	fmt.Fprintf(&b, `buckets:
  - id: tiny
    models: [%s]
    groups:
      plain:
        policy: {type: cache_aware, min_match_tokens: %d}
`, modelName, minMatchTokens)
	return b.String()
}

// waitHTTP polls url until it answers 200, failing early if the process exits.
func (s *stack) waitHTTP(t testing.TB, p *proctest.Process, url string) {
	t.Helper()
	proctest.WaitHTTP(t, quick, p, url, sluiceStartTimeout)
}

// linkKVCounters returns enginelink's KV-stream metric lines (batches, gaps, replays, ...),
// for the log: how the real engines' streams behaved (a lost first batch shows as a gap).
func (s *stack) linkKVCounters(t testing.TB) string {
	t.Helper()
	resp, err := quick.Get("http://" + s.linkHTTP + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "sluice_enginelink_kv") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}
