package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/state/pgstore/pgtest"
)

// Tokens and timings of the stack.
const (
	adminToken  = "e2e-admin-token"
	viewerToken = "e2e-viewer-token"
	// speed divides every simulated engine duration: 50 turns 20 ms per output token into 0.4 ms.
	speed = "50"
	// startTimeout bounds each process's start-up.
	startTimeout = 30 * time.Second
	// poll is how often the test checks a condition it waits for.
	poll = 50 * time.Millisecond
)

// Engine ids. Two plain engines serve models chat and chat-s; a prefill and a decode engine
// serve model pd. plain-a publishes its KV events and load straight to Kafka in sluice's
// protobuf form; the others speak a real engine's wire, which enginelink (following the
// decider's registry) carries into Kafka: plain-b as SGLang (it connects to the link's bound
// socket with topic kv@<id>@<model>, load from /v1/loads, whose native numbers the load step's
// pressure comparison needs), prefill and decode as vLLM (they bind their ZMQ PUB and replay
// sockets, the link dials them, load from /metrics).
const (
	plainA  = "plain-a"
	plainB  = "plain-b"
	prefill = "prefill-1"
	decode  = "decode-1"
)

// Models, one per bucket.
const (
	modelChat    = "chat"   // bucket chat: cache_aware, min_match_tokens 64
	modelSession = "chat-s" // bucket sessions: session_aware
	modelPD      = "pd"     // bucket pd: prefill + decode
)

// engine is one simengine the stack runs, restartable on the same ports.
type engine struct {
	id, model, role string
	// wire is how the engine's KV events and load leave it: "kafka-proto" (straight to Kafka),
	// "vllm" (ZMQ PUB it binds, replay socket, /metrics) or "sglang" (ZMQ PUB connecting to
	// enginelink's bound socket, /v1/loads).
	wire                string
	models              []string // the models its worker entry lists
	port, bootstrapPort int
	kvPort, replayPort  int // vllm wire: its PUB and replay ports
	proc                *proctest.Process
}

func (e *engine) url() string { return "http://127.0.0.1:" + strconv.Itoa(e.port) }

// stack is the whole system as real processes: a decider on Postgres and Kafka, a gateway in
// front of it, and four simengines publishing to Kafka.
type stack struct {
	procs *proctest.Set
	dir   string
	bin   string // sluice, built once for the test
	api   proctest.Decider

	brokers            string
	loadTopic, kvTopic string
	dsn                string

	deciderGRPC, deciderHTTP, gatewayAddr string
	linkBind, linkHTTP                    string // enginelink's bound KV socket and its /metrics
	deciderArgs                           []string
	decider, gateway, link                *proctest.Process
	engines                               map[string]*engine
}

// startStack builds sluice and starts every process, seeds the configuration through
// `sluice ctl apply`, and returns once the decider lists all four engines as healthy with
// load reports that came through Kafka (three of them through enginelink).
func startStack(t *testing.T) *stack {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	dsn := pgtest.SchemaDSN(t) // its cleanup runs after the processes stopped
	suffix := proctest.RandomSuffix()
	loadTopic, kvTopic := "e2e-load-"+suffix, "e2e-kv-"+suffix
	proctest.CreateTopics(t, brokers, loadTopic, kvTopic) // deleted after the processes stop, like the schema
	dir := t.TempDir()
	bin := proctest.BuildSluice(t, dir)
	s := &stack{procs: proctest.NewSet(t, dir, proctest.Options{StopGrace: 5 * time.Second, TailLines: 60}),
		dir: dir, bin: bin, brokers: strings.Join(brokers, ","), dsn: dsn, loadTopic: loadTopic, kvTopic: kvTopic}

	ports := proctest.FreePorts(t, 14)
	s.deciderGRPC = "127.0.0.1:" + strconv.Itoa(ports[0])
	s.deciderHTTP = "127.0.0.1:" + strconv.Itoa(ports[1])
	s.gatewayAddr = "127.0.0.1:" + strconv.Itoa(ports[2])
	s.api = proctest.Decider{Addr: s.deciderHTTP, Token: viewerToken, Client: quick}
	s.engines = map[string]*engine{
		plainA: {id: plainA, model: modelChat, models: []string{modelChat, modelSession}, role: "plain", wire: "kafka-proto", port: ports[3]},
		plainB: {id: plainB, model: modelChat, models: []string{modelChat, modelSession}, role: "plain", wire: "sglang", port: ports[4]},
		prefill: {id: prefill, model: modelPD, models: []string{modelPD}, role: "prefill", wire: "vllm", port: ports[5], bootstrapPort: ports[6],
			kvPort: ports[8], replayPort: ports[9]},
		decode: {id: decode, model: modelPD, models: []string{modelPD}, role: "decode", wire: "vllm", port: ports[7],
			kvPort: ports[12], replayPort: ports[13]},
	}
	s.linkBind = "tcp://127.0.0.1:" + strconv.Itoa(ports[10])
	s.linkHTTP = "127.0.0.1:" + strconv.Itoa(ports[11])

	s.deciderArgs = []string{"decider",
		"-grpc-addr", s.deciderGRPC, "-http-addr", s.deciderHTTP,
		"-postgres-dsn", dsn, "-config-snapshot", filepath.Join(dir, "last-known.json"),
		"-kafka-brokers", s.brokers, "-load-topic", s.loadTopic, "-kv-topic", s.kvTopic,
		// Probe once a second, two failures make an engine unhealthy: slow enough that the
		// gateway's failure reports open the breaker first after a kill, fast enough for
		// the test. One failed dispatch opens the breaker; it half-opens after a second.
		"-probe-interval", "1s", "-probe-failures", "2", "-probe-successes", "1", "-probe-timeout", "500ms",
		"-breaker-failures", "1", "-breaker-cool-down", "1s",
		"-admin-token", adminToken, "-viewer-token", viewerToken,
		// Long enough that no lease of the run expires: the drain check sees releases only.
		"-lease-ttl", "10m",
		// Warm restarts: snapshots of the load table and KV index with the offsets they cover.
		"-snapshot-dir", filepath.Join(dir, "snapshots"), "-snapshot-interval", "300ms",
		"-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug"}
	s.startDecider(t)
	s.applyConfig(t)
	s.link = s.procs.Start(t, "enginelink", nil, s.bin,
		"enginelink",
		"-kafka-brokers", s.brokers, "-load-topic", s.loadTopic, "-kv-topic", s.kvTopic,
		"-fleet-admin-url", "http://"+s.deciderHTTP, "-admin-token", viewerToken, "-fleet-poll", "500ms",
		"-kv-bind", s.linkBind, "-scrape-interval", "200ms", "-http-addr", s.linkHTTP,
		"-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug")
	s.waitHTTP(t, s.link, "http://"+s.linkHTTP+"/healthz")

	for _, id := range []string{plainA, plainB, prefill, decode} {
		s.startEngine(t, s.engines[id])
	}
	s.gateway = s.procs.Start(t, "gateway", nil, s.bin,
		"gateway",
		"-addr", s.gatewayAddr, "-decider-addr", s.deciderGRPC, "-decider-token", viewerToken,
		"-tokenizer", "engine", "-session-header", "x-session-id",
		"-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug")
	s.waitHTTP(t, s.gateway, "http://"+s.gatewayAddr+"/healthz")

	ids := slices.Sorted(maps.Keys(s.engines))
	proctest.Eventually(t, poll, 30*time.Second, "every engine healthy with a load report from Kafka", func() (bool, string) {
		return s.api.EnginesReady(t, ids...)
	})
	return s
}

// waitHTTP polls url until it answers 200, failing early if the process exits.
func (s *stack) waitHTTP(t testing.TB, p *proctest.Process, url string) {
	t.Helper()
	proctest.WaitHTTP(t, quick, p, url, startTimeout)
}

// startDecider (re)starts the decider on its ports and waits for /readyz.
func (s *stack) startDecider(t testing.TB) {
	t.Helper()
	s.decider = s.procs.Start(t, "decider", nil, s.bin, s.deciderArgs...)
	s.waitHTTP(t, s.decider, "http://"+s.deciderHTTP+"/readyz")
}

// configYAML is the configuration applied with `sluice ctl apply`.
func (s *stack) configYAML() string {
	var b strings.Builder
	b.WriteString("workers:\n")
	for _, id := range []string{plainA, plainB, prefill, decode} {
		e := s.engines[id]
		fmt.Fprintf(&b, "  - {id: %s, url: %q, models: [%s], role: %s", e.id, e.url(), strings.Join(e.models, ", "), e.role)
		if e.bootstrapPort != 0 {
			fmt.Fprintf(&b, ", bootstrap_port: %d", e.bootstrapPort)
		}
		switch e.wire {
		case "vllm":
			fmt.Fprintf(&b, `, kv_events_endpoint: "tcp://127.0.0.1:%d", kv_replay_endpoint: "tcp://127.0.0.1:%d", labels: {engine: vllm}`,
				e.kvPort, e.replayPort)
		case "sglang":
			fmt.Fprintf(&b, `, kv_events_endpoint: "bind:%s", labels: {engine: sglang, loads_url: "%s/v1/loads"}`, s.linkBind, e.url())
		}
		b.WriteString("}\n")
	}
	b.WriteString(`buckets:
  - id: chat
    models: [chat]
    groups:
      plain:
        policy: {type: cache_aware, min_match_tokens: 64}
  - id: sessions
    models: [chat-s]
    groups:
      plain:
        policy: {type: session_aware, idle_timeout: 10m}
  - id: pd
    models: [pd]
    groups:
      pd:
        prefill: {policy: {type: power_of_two}}
        decode: {policy: {type: power_of_two}}
`)
	return b.String()
}

// applyConfig stores the configuration in the (empty) Postgres store through the decider's
// admin API, as an operator would.
func (s *stack) applyConfig(t testing.TB) {
	t.Helper()
	path := filepath.Join(s.dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(s.configYAML()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, s.bin, "ctl", "apply", "-f", path,
		"--server", "http://"+s.deciderHTTP, "--token", adminToken).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice ctl apply: %v\n%s\nconfig:\n%s", err, out, s.configYAML())
	}
	t.Logf("sluice ctl apply: %s", strings.TrimSpace(string(out)))
}

// startEngine (re)starts a simengine on its ports and waits for its health endpoint.
func (s *stack) startEngine(t testing.TB, e *engine) {
	t.Helper()
	args := []string{"simengine",
		"-addr", "127.0.0.1:" + strconv.Itoa(e.port), "-id", e.id, "-model", e.model, "-role", e.role,
		"-load-interval", "200ms", "-kv-interval", "20ms", "-speed", speed,
		"-shutdown-timeout", "2s", "-log-format", "text"}
	switch e.wire {
	case "kafka-proto":
		args = append(args, "-kafka-brokers", s.brokers, "-load-topic", s.loadTopic, "-kv-topic", s.kvTopic, "-kv-format", "proto")
	case "vllm":
		args = append(args, "-metrics-naming", "vllm",
			"-kv-events-endpoint", "tcp://*:"+strconv.Itoa(e.kvPort), "-kv-replay-endpoint", "tcp://*:"+strconv.Itoa(e.replayPort))
	case "sglang":
		args = append(args, "-metrics-naming", "sglang",
			"-kv-events-endpoint", s.linkBind, "-kv-events-topic", "kv@"+e.id+"@"+e.model)
	}
	if e.bootstrapPort != 0 {
		args = append(args, "-bootstrap-port", strconv.Itoa(e.bootstrapPort))
	}
	e.proc = s.procs.Start(t, e.id, nil, s.bin, args...)
	s.waitHTTP(t, e.proc, e.url()+"/health")
}
