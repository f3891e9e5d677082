package interop

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/testenv"
)

const (
	// model is the one model every engine serves; bucket cacheBucket routes it cache-aware.
	model       = "interop-m"
	cacheBucket = "cache"
	// loraAdapter is the LoRA adapter engine vllmA declares (lora_adapters).
	loraAdapter = "sql-lora"
	adminToken  = "interop-admin"
	// stopGrace is how long a process gets to exit after SIGTERM before it is killed.
	stopGrace = 5 * time.Second
	// tailLines is how much of each process log a failing test prints.
	tailLines = 60
	// poll is how often a condition the test waits for is checked.
	poll = 100 * time.Millisecond
	// startTimeout bounds each process's start-up.
	startTimeout = 60 * time.Second
	// maxTokenIDs is the decider's -max-token-ids: room for the 100k-token prompt.
	maxTokenIDs = 200_000
)

var quick = &http.Client{Timeout: 10 * time.Second}

// engine is one engine of the fleet: a Python process running the real vLLM or SGLang
// publisher, on fixed ports so that a restart comes back where the link looks.
type engine struct {
	id, kind    string
	dpSize      int
	pageSize    int  // SGLang page size (vLLM's block size is in its events)
	replay      bool // serves the replay socket
	lossy       bool // a forwarder that can drop messages sits in front of the PUB
	bind        bool // the publisher connects to the link's -kv-bind socket (topic kv@id@model)
	loads       bool // SGLang: the link scrapes GET /v1/loads instead of /metrics
	lora        []string
	kvPort      int // rank r publishes on kvPort+r
	replayPort  int // rank r's replay ROUTER is replayPort+r
	metricsPort int // /health and /metrics
	py          *pyEngine
}

func (e *engine) url() string { return "http://127.0.0.1:" + strconv.Itoa(e.metricsPort) }

// stack is the system under test as real processes: the engines (Python), one
// `sluice enginelink` forwarding their ZMQ streams and metrics to Kafka, and one
// `sluice decider` consuming Kafka with a cache_aware bucket.
type stack struct {
	owner  testing.TB // the test that owns every process
	fleet  bool       // the link follows the decider's engine registry instead of an engines file
	procs  *proctest.Set
	bin    string
	dir    string
	python string

	brokers            string
	loadTopic, kvTopic string
	configPath         string

	deciderHTTP, deciderGRPC string
	linkHTTP                 string
	kvBindPort               int // the link's -kv-bind socket, for engines with bind
	decider, link            *proctest.Process
	engines                  map[string]*engine
	order                    []string

	dc sluicev1connect.DeciderServiceClient
}

// startStack starts the whole system. With fleet, the decider's configuration declares the
// engines' endpoints and the link follows its engine registry (-fleet-admin-url); without,
// the link reads them from its own -engines file.
func startStack(t *testing.T, fleet bool, defs []*engine) *stack {
	t.Helper()
	py := python(t)
	brokers := testenv.KafkaBrokers(t)
	suffix := proctest.RandomSuffix()
	dir := t.TempDir()
	bin := proctest.BuildSluice(t, dir)
	s := &stack{owner: t, fleet: fleet, procs: proctest.NewSet(t, dir, proctest.Options{StopGrace: stopGrace, TailLines: tailLines}), bin: bin, dir: dir, python: py, brokers: strings.Join(brokers, ","),
		loadTopic: "interop-load-" + suffix, kvTopic: "interop-kv-" + suffix, engines: map[string]*engine{}}
	used := map[int]bool{}
	s.deciderGRPC = "127.0.0.1:" + strconv.Itoa(freeRange(t, used, 1))
	s.deciderHTTP = "127.0.0.1:" + strconv.Itoa(freeRange(t, used, 1))
	s.linkHTTP = "127.0.0.1:" + strconv.Itoa(freeRange(t, used, 1))
	s.kvBindPort = freeRange(t, used, 1)
	for _, e := range defs {
		e.kvPort = freeRange(t, used, e.dpSize)
		if e.replay {
			e.replayPort = freeRange(t, used, e.dpSize)
		}
		e.metricsPort = freeRange(t, used, 1)
		s.engines[e.id] = e
		s.order = append(s.order, e.id)
	}
	proctest.CreateTopics(t, brokers, s.loadTopic, s.kvTopic)
	s.configPath = filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(s.configPath, []byte(s.configYAML()), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("configuration:\n%s", s.configYAML())

	for _, id := range s.order {
		s.startEngine(t, s.engines[id])
	}
	s.decider = s.procs.Start(t, "decider", nil, s.bin, "decider",
		"-grpc-addr", s.deciderGRPC, "-http-addr", s.deciderHTTP,
		"-config", s.configPath, "-config-snapshot", "-",
		"-kafka-brokers", s.brokers, "-load-topic", s.loadTopic, "-kv-topic", s.kvTopic,
		"-max-token-ids", strconv.Itoa(maxTokenIDs),
		"-probe-interval", "1s", "-probe-timeout", "500ms",
		"-admin-token", adminToken,
		"-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug")
	proctest.WaitHTTP(t, quick, s.decider, "http://"+s.deciderHTTP+"/readyz", startTimeout)
	s.startLink(t)
	s.dc = sluicev1connect.NewDeciderServiceClient(quick, "http://"+s.deciderHTTP)
	return s
}

// startLink starts `sluice enginelink`: on an engines file (static mode) listing every
// engine's KV-event, replay and metrics endpoints and DP size, or, in fleet mode, on the
// decider's engine registry.
func (s *stack) startLink(t *testing.T) {
	t.Helper()
	args := []string{"enginelink", "-http-addr", s.linkHTTP,
		// The test broker takes records up to 16 MiB (scripts/lib/kafka.sh), as a KV topic must
		// for SGLang's page-size-1 prompts: the 100k-token one is a single ~1.3 MB record.
		"-kafka-max-batch-bytes", "16777216",
		"-kv-bind", "tcp://127.0.0.1:" + strconv.Itoa(s.kvBindPort),
		"-kafka-brokers", s.brokers, "-load-topic", s.loadTopic, "-kv-topic", s.kvTopic,
		"-scrape-interval", "250ms",
		"-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug"}
	if s.fleet {
		args = append(args, "-fleet-admin-url", "http://"+s.deciderHTTP, "-admin-token", adminToken, "-fleet-poll", "500ms")
	} else {
		path := filepath.Join(s.dir, "engines.yaml")
		if err := os.WriteFile(path, []byte(s.enginesYAML()), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Logf("enginelink engines:\n%s", s.enginesYAML())
		args = append(args, "-engines", path)
	}
	s.link = s.procs.Start(t, "enginelink", nil, s.bin, args...)
	proctest.WaitHTTP(t, quick, s.link, "http://"+s.linkHTTP+"/healthz", startTimeout)
}

// enginesYAML is the link's -engines file.
func (s *stack) enginesYAML() string {
	var b strings.Builder
	for _, id := range s.order {
		e := s.engines[id]
		fmt.Fprintf(&b, "- id: %s\n  model: %s\n  engine: %s\n", e.id, model, e.kind)
		if e.bind {
			b.WriteString("  kv_events_endpoint: bind\n")
		} else {
			fmt.Fprintf(&b, "  kv_events_endpoint: \"tcp://127.0.0.1:%d\"\n", e.kvPort)
		}
		if e.replay {
			fmt.Fprintf(&b, "  kv_replay_endpoint: \"tcp://127.0.0.1:%d\"\n", e.replayPort)
		}
		fmt.Fprintf(&b, "  metrics_url: %q\n", e.url()+"/metrics")
		if e.loads {
			fmt.Fprintf(&b, "  loads_url: %q\n", e.url()+"/v1/loads")
		}
		fmt.Fprintf(&b, "  dp_size: %d\n", e.dpSize)
	}
	return b.String()
}

// configYAML is the decider's configuration: every engine and one cache_aware bucket for
// model. Engines that serve LoRA adapters declare them (lora_adapters). In fleet mode the
// engines also carry what the link needs: endpoints, DP size, and the kind and SGLang
// /v1/loads URL as the labels the link reads (engine, loads_url).
func (s *stack) configYAML() string {
	var b strings.Builder
	b.WriteString("workers:\n")
	for _, id := range s.order {
		e := s.engines[id]
		fmt.Fprintf(&b, "  - id: %s\n    url: %q\n    models: [%s]\n    role: plain\n", e.id, e.url(), model)
		if len(e.lora) > 0 {
			fmt.Fprintf(&b, "    lora_adapters: [%s]\n", strings.Join(e.lora, ", "))
		}
		if !s.fleet {
			continue
		}
		fmt.Fprintf(&b, "    labels: {engine: %s", e.kind)
		if e.loads {
			fmt.Fprintf(&b, ", loads_url: %q", e.url()+"/v1/loads")
		}
		b.WriteString("}\n")
		if e.bind {
			fmt.Fprintf(&b, "    kv_events_endpoint: \"bind:tcp://127.0.0.1:%d\"\n", s.kvBindPort)
		} else {
			fmt.Fprintf(&b, "    kv_events_endpoint: \"tcp://127.0.0.1:%d\"\n", e.kvPort)
		}
		if e.replay {
			fmt.Fprintf(&b, "    kv_replay_endpoint: \"tcp://127.0.0.1:%d\"\n", e.replayPort)
		}
		fmt.Fprintf(&b, "    metrics_url: %q\n    dp_size: %d\n", e.url()+"/metrics", e.dpSize)
	}
	fmt.Fprintf(&b, `buckets:
  - id: %s
    models: [%s]
    groups:
      plain:
        policy: {type: cache_aware, min_match_tokens: 1}
`, cacheBucket, model)
	return b.String()
}

// startEngine (re)starts e's Python process on its ports.
func (s *stack) startEngine(t testing.TB, e *engine) {
	t.Helper()
	st := engineStart{Kind: e.kind, Endpoint: "tcp://*:" + strconv.Itoa(e.kvPort), DPSize: e.dpSize,
		Lossy: e.lossy, PageSize: e.pageSize, MetricsPort: e.metricsPort, Model: model}
	if e.replay {
		r := "tcp://*:" + strconv.Itoa(e.replayPort)
		st.ReplayEndpoint = &r
	}
	if e.bind {
		// A concrete host: vLLM's publisher connects instead of binding (docs/wire-formats.md), and the
		// topic frame tells the link which engine it is.
		st.Endpoint = "tcp://127.0.0.1:" + strconv.Itoa(s.kvBindPort)
		st.Topic = "kv@" + e.id + "@" + model
	}
	e.py = startPyEngine(t, s.owner, s.python, s.dir, e.id, st)
}

// decide runs a dry-run Decide with explain for the given request fields.
func (s *stack) decide(ctx context.Context, req *sluicev1.DecideRequest) (*sluicev1.DecideResponse, error) {
	req.DryRun, req.Explain = true, true
	if req.Model == "" {
		req.Model = model
	}
	req.InputTokens = int64(len(req.TokenIds))
	resp, err := s.dc.Decide(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// adminEngines is GET /v1/admin/engines, by engine id.
func (s *stack) adminEngines(t testing.TB) map[string]*sluicev1.Engine {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.deciderHTTP+"/v1/admin/engines", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := quick.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/admin/engines: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/admin/engines = %s: %s", resp.Status, body)
	}
	var list sluicev1.ListEnginesResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &list); err != nil {
		t.Fatalf("GET /v1/admin/engines: %v: %s", err, body)
	}
	out := map[string]*sluicev1.Engine{}
	for _, e := range list.GetEngines() {
		out[e.GetId()] = e
	}
	return out
}

// freeRange returns the first of n consecutive free loopback TCP ports (a DP engine's
// rank r listens on base+r), none of them in used, and adds them to used. The ports are
// taken below the kernel's ephemeral range (ip_local_port_range), so that no outgoing
// connection of the processes (the decider's and the link's Kafka clients) takes one
// between the pick and the bind; another test could still bind one first, and the process
// then fails to start and says so.
func freeRange(t testing.TB, used map[int]bool, n int) int {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	for range 500 {
		r, err := rand.Int(rand.Reader, big.NewInt(int64(hi-lo-n)))
		if err != nil {
			t.Fatal(err)
		}
		base := lo + int(r.Int64())
		var lis []net.Listener
		ok := true
		for i := range n {
			if used[base+i] {
				ok = false
				break
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			lis = append(lis, l)
		}
		for _, l := range lis {
			l.Close()
		}
		if ok {
			for i := range n {
				used[base+i] = true
			}
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports found in [%d, %d)", n, lo, hi)
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil || v <= 11000 {
		return 32768
	}
	return v
}
