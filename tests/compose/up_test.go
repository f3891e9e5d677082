package compose

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/proctest"
)

// The TestComposeUp* tests talk to the stack docker-compose.yaml describes, brought up for real
// by the compose phase of scripts/test.sh (scripts/lib/compose.sh: dockerd, stand-in images,
// `docker compose up -d --wait` with deploy/compose/smoke.yaml). They reach it only through
// the loopback ports the override publishes and through `docker compose` itself, as an
// operator would. Elsewhere (SLUICE_TEST_COMPOSE_UP unset) they skip.

const (
	smokeKVTopic = "sluice.kv-events.v1"
	// smokePrefixWords is the length of the shared prefixes: each word is one simengine token.
	smokePrefixWords = 1200
)

// smokeStack is what the compose phase tells the test about the running stack.
type smokeStack struct {
	gateway, decider1, decider2, kafka string // loopback host:port
	engines                            map[string]string
	token                              string
	compose                            string // the Compose v2 binary; COMPOSE_FILE etc. in the environment
	client                             *http.Client
}

func smokeEnv(t *testing.T) *smokeStack {
	t.Helper()
	if os.Getenv("SLUICE_TEST_COMPOSE_UP") != "1" {
		t.Skip("needs the stack the compose phase of scripts/test.sh brings up (SLUICE_TEST_COMPOSE=only scripts/test.sh)")
	}
	port := func(name string) string {
		v := os.Getenv("SLUICE_SMOKE_" + name + "_PORT")
		if _, err := strconv.Atoi(v); err != nil {
			t.Fatalf("SLUICE_SMOKE_%s_PORT=%q: want the host port scripts/lib/compose.sh published", name, v)
		}
		return net.JoinHostPort("127.0.0.1", v)
	}
	s := &smokeStack{
		gateway:  port("GATEWAY"),
		decider1: port("DECIDER1_HTTP"),
		decider2: port("DECIDER2_HTTP"),
		kafka:    port("KAFKA"),
		engines:  map[string]string{"sim-plain-1": port("SIM_PLAIN_1"), "sim-plain-2": port("SIM_PLAIN_2")},
		token:    os.Getenv("SLUICE_TEST_COMPOSE_ADMIN_TOKEN"),
		compose:  os.Getenv("SLUICE_TEST_COMPOSE_CMD"),
		client:   &http.Client{Timeout: 30 * time.Second},
	}
	if s.token == "" || s.compose == "" {
		t.Fatal("SLUICE_TEST_COMPOSE_ADMIN_TOKEN and SLUICE_TEST_COMPOSE_CMD must be set by scripts/lib/compose.sh")
	}
	return s
}

// TestComposeUp walks through what the issue asks of the running stack, one subtest per
// behaviour; the last one kills a decider, so it runs last.
func TestComposeUp(t *testing.T) {
	s := smokeEnv(t)
	// The binary the image was built around (the phase built it on the host), else a fresh one.
	bin := os.Getenv("SLUICE_TEST_COMPOSE_SLUICE")
	if bin == "" {
		bin = sluiceBinary(t).path
	}
	for _, step := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"plain", s.plain},
		{"stream", s.stream},
		{"pd", s.pd},
		{"ctl_and_replicas", func(t *testing.T) { s.ctlAndReplicas(t, bin) }},
		{"prefix", s.prefix},
		{"decider_killed", func(t *testing.T) { s.deciderKilled(t, bin) }},
	} {
		t0 := time.Now()
		t.Run(step.name, step.run)
		t.Logf("%s took %v", step.name, time.Since(t0).Round(time.Millisecond))
	}
}

// smokeCompletion is the part of a chat completion (or stream chunk) the checks read.
type smokeCompletion = proctest.Completion

// smokeEngine is the engine a completion id names: the simengine answers chatcmpl-<id>-<n>.
func smokeEngine(c smokeCompletion) string {
	rest, ok := strings.CutPrefix(c.ID, "chatcmpl-")
	if !ok {
		return ""
	}
	if i := strings.LastIndexByte(rest, '-'); i > 0 {
		return rest[:i]
	}
	return ""
}

func chatRequest(model, content string, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": model, "stream": stream, "max_tokens": 8,
		"messages": []map[string]string{{"role": "user", "content": content}},
	})
	return b
}

// chat sends a non-streaming chat completion to base (the gateway or an engine).
func (s *smokeStack) chat(t *testing.T, base, model, content string) smokeCompletion {
	t.Helper()
	resp, err := s.client.Post("http://"+base+"/v1/chat/completions", "application/json", bytes.NewReader(chatRequest(model, content, false)))
	if err != nil {
		t.Fatalf("POST %s/v1/chat/completions: %v", base, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s/v1/chat/completions (model %s) = %s: %s", base, model, resp.Status, body)
	}
	var c smokeCompletion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("chat completion: %v: %s", err, body)
	}
	if len(c.Choices) == 0 || c.Choices[0].Message.Content == "" {
		t.Fatalf("chat completion without content: %s", body)
	}
	return c
}

// streamChat sends a streaming chat completion through the gateway and returns its chunks;
// the stream must end with data: [DONE].
func (s *smokeStack) streamChat(t *testing.T, model, content string) []smokeCompletion {
	t.Helper()
	resp, err := s.client.Post("http://"+s.gateway+"/v1/chat/completions", "application/json", bytes.NewReader(chatRequest(model, content, true)))
	if err != nil {
		t.Fatalf("POST gateway /v1/chat/completions (stream): %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST gateway /v1/chat/completions (stream, model %s) = %s: %s", model, resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("stream Content-Type %q, want text/event-stream", ct)
	}
	var chunks []smokeCompletion
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var c smokeCompletion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("stream chunk %q: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	if !done {
		t.Fatalf("stream of %d chunks ended without data: [DONE]", len(chunks))
	}
	return chunks
}

func streamText(chunks []smokeCompletion) string {
	var b strings.Builder
	for _, c := range chunks {
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String()
}

// plain: a chat completion through the gateway is served by one of the two plain engines.
func (s *smokeStack) plain(t *testing.T) {
	c := s.chat(t, s.gateway, "sim-chat", "hello from the compose smoke test "+proctest.RandomSuffix())
	if eng := smokeEngine(c); eng != "sim-plain-1" && eng != "sim-plain-2" {
		t.Errorf("completion %q names engine %q, want sim-plain-1 or sim-plain-2", c.ID, eng)
	}
	if c.Model != "sim-chat" || c.Usage.CompletionTokens == 0 {
		t.Errorf("completion model %q with %d completion tokens, want sim-chat and > 0", c.Model, c.Usage.CompletionTokens)
	}
}

// stream: the same as a server-sent-event stream.
func (s *smokeStack) stream(t *testing.T) {
	chunks := s.streamChat(t, "sim-chat", "stream please "+proctest.RandomSuffix())
	if streamText(chunks) == "" {
		t.Errorf("stream of %d chunks carried no content", len(chunks))
	}
	for _, c := range chunks {
		if eng := smokeEngine(c); eng != "sim-plain-1" && eng != "sim-plain-2" {
			t.Errorf("chunk %q names engine %q, want a plain engine", c.ID, eng)
		}
	}
}

// pd: the PD model goes to the prefill and the decode engine; the client gets decode's stream.
// sim-decode runs with SLUICE_CHECK_BOOTSTRAP, so it refuses a request whose bootstrap record
// does not name the prefill engine's reachable bootstrap address.
func (s *smokeStack) pd(t *testing.T) {
	chunks := s.streamChat(t, "sim-pd", "disaggregated "+proctest.RandomSuffix())
	if len(chunks) == 0 || streamText(chunks) == "" {
		t.Fatalf("PD stream carried no content (%d chunks)", len(chunks))
	}
	for _, c := range chunks {
		if eng := smokeEngine(c); eng != "sim-decode" {
			t.Errorf("PD chunk %q comes from %q, want sim-decode", c.ID, eng)
		}
	}
	c := s.chat(t, s.gateway, "sim-pd", "disaggregated, not streamed "+proctest.RandomSuffix())
	if eng := smokeEngine(c); eng != "sim-decode" {
		t.Errorf("PD completion %q comes from %q, want sim-decode", c.ID, eng)
	}
}

// ctl runs `sluice ctl` (the host-built binary) against a decider's published HTTP port.
func (s *smokeStack) ctl(t *testing.T, bin, decider string, out proto.Message, args ...string) string {
	t.Helper()
	args = append(append([]string{"ctl"}, args...), "--server", "http://"+decider, "--token", s.token)
	if out != nil {
		args = append(args, "-o", "json")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "SLUICE_SERVER=", "SLUICE_TOKEN=")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	if out != nil {
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, out); err != nil {
			t.Fatalf("sluice %s: decode: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	return string(b)
}

// ctlAndReplicas: `sluice ctl get/apply/versions` against decider-1; decider-2, which shares
// decider-1's Postgres, serves each version decider-1 stored (Postgres NOTIFY).
func (s *smokeStack) ctlAndReplicas(t *testing.T, bin string) {
	var engines sluicev1.ListEnginesResponse
	s.ctl(t, bin, s.decider1, &engines, "get", "engines")
	got := map[string]bool{}
	for _, e := range engines.GetEngines() {
		got[e.GetId()] = e.GetHealthy()
	}
	for _, id := range []string{"sim-plain-1", "sim-plain-2", "sim-prefill", "sim-decode"} {
		if healthy, ok := got[id]; !ok || !healthy {
			t.Errorf("ctl get engines: %s registered=%v healthy=%v; have %v", id, ok, healthy, got)
		}
	}
	var before sluicev1.ListVersionsResponse
	s.ctl(t, bin, s.decider1, &before, "versions")
	if before.GetCurrentVersion() < 1 {
		t.Fatalf("ctl versions: current version %d, want >= 1 (config-init applied deploy/compose/sluice.yaml)", before.GetCurrentVersion())
	}
	s.sameVersion(t, bin, before.GetCurrentVersion())

	// A new version: the compose configuration with one admission limit changed, then the
	// original again, so later steps route as the stack's own configuration says.
	orig, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "compose", "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(orig), "admission: {max_running_requests: 64}", "admission: {max_running_requests: 48}", 1)
	if changed == string(orig) {
		t.Fatal("deploy/compose/sluice.yaml: no `admission: {max_running_requests: 64}` to change")
	}
	dir := t.TempDir()
	for i, doc := range []string{changed, string(orig)} {
		f := filepath.Join(dir, fmt.Sprintf("sluice-%d.yaml", i))
		if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		var applied sluicev1.ApplyConfigResponse
		s.ctl(t, bin, s.decider1, &applied, "apply", "-f", f)
		want := before.GetCurrentVersion() + int64(i) + 1
		if applied.GetVersion() != want {
			t.Errorf("ctl apply #%d: version %d, want %d", i+1, applied.GetVersion(), want)
		}
		s.sameVersion(t, bin, applied.GetVersion())
	}
	var after sluicev1.ListVersionsResponse
	s.ctl(t, bin, s.decider2, &after, "versions")
	if n := len(after.GetVersions()); n < 3 || after.GetVersions()[0].GetVersion() != before.GetCurrentVersion()+2 {
		t.Errorf("ctl versions on decider-2: %d versions, newest %v; want the two just applied on top of %d",
			n, after.GetVersions(), before.GetCurrentVersion())
	}
	if out := s.ctl(t, bin, s.decider2, nil, "get", "buckets"); !strings.Contains(out, "chat") || !strings.Contains(out, "disaggregated") {
		t.Errorf("ctl get buckets on decider-2 lacks the compose buckets:\n%s", out)
	}
}

// sameVersion waits until both deciders serve configuration version want.
func (s *smokeStack) sameVersion(t *testing.T, bin string, want int64) {
	t.Helper()
	start := time.Now()
	proctest.Eventually(t, 200*time.Millisecond, 20*time.Second, fmt.Sprintf("both deciders serve version %d", want), func() (bool, string) {
		var v1, v2 sluicev1.ListVersionsResponse
		s.ctl(t, bin, s.decider1, &v1, "versions", "--limit", "1")
		s.ctl(t, bin, s.decider2, &v2, "versions", "--limit", "1")
		return v1.GetCurrentVersion() == want && v2.GetCurrentVersion() == want,
			fmt.Sprintf("decider-1 serves %d, decider-2 serves %d", v1.GetCurrentVersion(), v2.GetCurrentVersion())
	})
	t.Logf("both deciders serve version %d (%v)", want, time.Since(start).Round(time.Millisecond))
}

func longText(tag string, words int) string {
	var b strings.Builder
	for i := range words {
		fmt.Fprintf(&b, "%s%d ", tag, i)
	}
	return b.String()
}

// tokenize asks engine id (published port) for the token ids of a chat prompt.
func (s *smokeStack) tokenize(t *testing.T, id, content string) []uint32 {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "sim-chat", "messages": []map[string]string{{"role": "user", "content": content}}})
	resp, err := s.client.Post("http://"+s.engines[id]+"/tokenize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("tokenize at %s: %v", id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tokenize at %s = %s: %s", id, resp.Status, b)
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("tokenize at %s: %v: %s", id, err, b)
	}
	return out.Tokens
}

// prefix: a request sharing a long prefix with an earlier one lands on the engine that cached
// it, once that engine's KV events went engine -> ZMQ -> enginelink -> the Kafka container ->
// both deciders. Checked for both plain engines; the second is seeded directly, so its cache
// (not the cold-prompt choice) must draw the request.
func (s *smokeStack) prefix(t *testing.T) {
	p1 := longText("alpha", smokePrefixWords)
	first := s.chat(t, s.gateway, "sim-chat", p1+"first question about alpha")
	holder := smokeEngine(first)
	if holder != "sim-plain-1" && holder != "sim-plain-2" {
		t.Fatalf("first long prompt served by %q, want a plain engine", holder)
	}
	s.checkPrefixHit(t, holder, p1+"second question about alpha")

	other := map[string]string{"sim-plain-1": "sim-plain-2", "sim-plain-2": "sim-plain-1"}[holder]
	p2 := longText("beta", smokePrefixWords)
	if c := s.chat(t, s.engines[other], "sim-chat", p2+"first question about beta"); smokeEngine(c) != other {
		t.Fatalf("seeding %s directly: completion %q", other, c.ID)
	}
	s.checkPrefixHit(t, other, p2+"second question about beta")
	s.kafkaCarries(t, holder, other)
}

// checkPrefixHit waits until both deciders' KV indexes make holder the cache candidate for
// content, then sends content through the gateway and checks it landed on holder and reused
// the cached prefix.
func (s *smokeStack) checkPrefixHit(t *testing.T, holder, content string) {
	t.Helper()
	ids := s.tokenize(t, holder, content)
	start := time.Now()
	for _, d := range []struct{ name, addr string }{{"decider-1", s.decider1}, {"decider-2", s.decider2}} {
		api := proctest.Decider{Addr: d.addr, Token: s.token, Client: s.client}
		proctest.Eventually(t, 200*time.Millisecond, 30*time.Second, d.name+": KV events of "+holder+" make it the cache candidate", func() (bool, string) {
			r := api.DryRun(t, "sim-chat", ids)
			p := r.GetPick().GetPlain()
			return p.GetEngineId() == holder && p.GetReason() == "cache_candidate" && proctest.Matched(r, holder) >= 1024,
				proctest.PlainPick(r) + "; " + proctest.Candidates(r)
		})
	}
	t.Logf("%s's KV events reached both deciders after %v", holder, time.Since(start).Round(time.Millisecond))
	fallbacks := s.gatewayMetric(t, "sluice_gateway_tokenizer_fallbacks_total")
	c := s.chat(t, s.gateway, "sim-chat", content)
	if smokeEngine(c) != holder {
		t.Errorf("request sharing a %d-token prefix with %s's cache went to %s (gateway tokenizer fallbacks during it: %v)",
			len(ids), holder, smokeEngine(c), s.gatewayMetric(t, "sluice_gateway_tokenizer_fallbacks_total")-fallbacks)
	}
	if got := c.Usage.PromptTokensDetails.CachedTokens; got < 1024 {
		t.Errorf("request on %s reused %d cached prompt tokens, want >= 1024 (of %d)", smokeEngine(c), got, c.Usage.PromptTokens)
	}
}

// gatewayMetric sums a metric's samples on the gateway's /metrics.
func (s *smokeStack) gatewayMetric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := s.client.Get("http://" + s.gateway + "/metrics")
	if err != nil {
		t.Fatalf("gateway /metrics: %v", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum
}

// kafkaCarries reads the KV topic from the Kafka container's published listener and checks
// it holds records keyed by each engine id (enginelink keys records by engine).
func (s *smokeStack) kafkaCarries(t *testing.T, ids ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.kafka), kgo.ConsumeTopics(smokeKVTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	records := 0
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("after %d records of %s, none keyed %v", records, smokeKVTopic, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			records++
			delete(want, string(r.Key))
		})
	}
}

// deciderKilled: decider-2 killed (docker compose kill), the stack still answers: chat through
// the gateway, ctl against decider-1, and decider-2's port no longer answers.
func (s *smokeStack) deciderKilled(t *testing.T, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, s.compose, "kill", "decider-2").CombinedOutput(); err != nil {
		t.Fatalf("docker compose kill decider-2: %v\n%s", err, out)
	}
	proctest.Eventually(t, 200*time.Millisecond, 20*time.Second, "decider-2 stops answering", func() (bool, string) {
		resp, err := s.client.Get("http://" + s.decider2 + "/healthz")
		if err != nil {
			return true, ""
		}
		resp.Body.Close()
		return false, "decider-2 /healthz still answers " + resp.Status
	})
	for i := range 5 {
		c := s.chat(t, s.gateway, "sim-chat", fmt.Sprintf("after decider-2 died, request %d %s", i, proctest.RandomSuffix()))
		if eng := smokeEngine(c); eng != "sim-plain-1" && eng != "sim-plain-2" {
			t.Errorf("completion after the kill names engine %q", eng)
		}
	}
	if chunks := s.streamChat(t, "sim-pd", "pd after decider-2 died"); streamText(chunks) == "" {
		t.Error("PD stream after the kill carried no content")
	}
	var engines sluicev1.ListEnginesResponse
	s.ctl(t, bin, s.decider1, &engines, "get", "engines")
	if len(engines.GetEngines()) != 4 {
		t.Errorf("ctl get engines on decider-1 after the kill: %d engines, want 4", len(engines.GetEngines()))
	}
}
