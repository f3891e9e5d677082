package simengine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testrun"

	"github.com/google/go-cmp/cmp"
)

// testConfig is a fast engine on a free loopback port.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.ID = "sim-test"
	cfg.Model = "m"
	cfg.PrefillTokensPerSec = 1e6
	cfg.DecodeMsPerToken = 1
	cfg.ShutdownTimeout = 2 * time.Second
	return cfg
}

// start runs a server until the test ends and returns it with its base URL.
func start(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s, err := New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	testrun.Background(t, s.Run)
	return s, "http://" + s.Addr()
}

func post(t *testing.T, url string, body any) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type openAIResponse struct {
	Object  string `json:"object"`
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Role, Content string
		} `json:"message"`
		Delta        map[string]any `json:"delta"`
		FinishReason *string        `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func TestNonStreamingCompletionsAndCache(t *testing.T) {
	cfg := testConfig()
	cfg.BlockSize = 4
	_, base := start(t, cfg)
	prompt := "the quick brown fox jumps over the lazy dog again and again"
	want := len(Tokenize(prompt)) // 12 tokens: 3 blocks
	for i, wantCached := range []int{0, 12} {
		resp, body := post(t, base+"/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 3})
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var r openAIResponse
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		wantUsage := &usage{PromptTokens: want, CompletionTokens: 3, TotalTokens: want + 3}
		wantUsage.PromptTokensDetails.CachedTokens = wantCached
		if diff := cmp.Diff(wantUsage, r.Usage); diff != "" {
			t.Errorf("request %d usage mismatch (-want +got):\n%s", i, diff)
		}
		if r.Object != "text_completion" || len(r.Choices) != 1 || len(strings.Fields(r.Choices[0].Text)) != 3 {
			t.Errorf("request %d: %s", i, body)
		}
	}
	resp, body := post(t, base+"/v1/chat/completions", map[string]any{"model": "m", "max_tokens": 2,
		"messages": []map[string]any{{"role": "user", "content": "hello there"}}})
	var r openAIResponse
	_ = json.Unmarshal(body, &r)
	if resp.StatusCode != 200 || r.Object != "chat.completion" || r.Choices[0].Message.Role != "assistant" ||
		r.Usage.PromptTokens != len(TokenizeMessages([]ChatMessage{{Role: "user", Content: "hello there"}})) {
		t.Errorf("chat: %d %s", resp.StatusCode, body)
	}
}

// sseReader reads one SSE data payload at a time.
type sseReader struct{ r *bufio.Reader }

func (s sseReader) next() (string, error) {
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return "", err
		}
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
			return data, nil
		}
	}
}

func TestStreamingChunkByChunk(t *testing.T) {
	cfg := testConfig()
	cfg.DecodeMsPerToken = 30
	s, base := start(t, cfg)
	b, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "max_tokens": 5,
		"stream_options": map[string]any{"include_usage": true},
		"messages":       []map[string]any{{"role": "user", "content": "stream me"}}})
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	rd := sseReader{bufio.NewReader(resp.Body)}
	first, err := rd.next()
	if err != nil {
		t.Fatal(err)
	}
	// The first token arrived while the engine is still decoding the other four.
	if l := s.Engine().Load(); l.Running != 1 {
		t.Errorf("after the first chunk the run is not running: %+v", l)
	}
	chunks := []string{first}
	for {
		d, err := rd.next()
		if err != nil {
			t.Fatalf("stream ended without [DONE]: %v", err)
		}
		if d == "[DONE]" {
			break
		}
		chunks = append(chunks, d)
	}
	// 5 tokens, the finish chunk, the usage chunk.
	if len(chunks) != 7 {
		t.Fatalf("got %d chunks, want 7: %q", len(chunks), chunks)
	}
	var c0, fin, use openAIResponse
	_ = json.Unmarshal([]byte(chunks[0]), &c0)
	_ = json.Unmarshal([]byte(chunks[5]), &fin)
	_ = json.Unmarshal([]byte(chunks[6]), &use)
	if c0.Object != "chat.completion.chunk" || c0.Choices[0].Delta["role"] != "assistant" || c0.Choices[0].Delta["content"] == "" {
		t.Errorf("first chunk %s", chunks[0])
	}
	if fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "length" {
		t.Errorf("finish chunk %s", chunks[5])
	}
	if use.Usage == nil || use.Usage.CompletionTokens != 5 {
		t.Errorf("usage chunk %s", chunks[6])
	}
}

func TestGenerate(t *testing.T) {
	_, base := start(t, testConfig())
	resp, body := post(t, base+"/generate", map[string]any{"input_ids": []int{1, 2, 3, 4, 5},
		"sampling_params": map[string]any{"max_new_tokens": 4}})
	var r struct {
		Text      string   `json:"text"`
		OutputIDs []uint32 `json:"output_ids"`
		MetaInfo  struct {
			PromptTokens     int                   `json:"prompt_tokens"`
			CompletionTokens int                   `json:"completion_tokens"`
			FinishReason     struct{ Type string } `json:"finish_reason"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s %v", resp.StatusCode, body, err)
	}
	if r.MetaInfo.PromptTokens != 5 || r.MetaInfo.CompletionTokens != 4 || len(r.OutputIDs) != 4 || r.MetaInfo.FinishReason.Type != "length" {
		t.Errorf("generate: %s", body)
	}

	// Streaming: cumulative text, then [DONE].
	b, _ := json.Marshal(map[string]any{"text": "a b c", "stream": true, "sampling_params": map[string]any{"max_new_tokens": 3}})
	sresp, err := http.Post(base+"/generate", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	rd := sseReader{bufio.NewReader(sresp.Body)}
	var texts []string
	for {
		d, err := rd.next()
		if err != nil {
			t.Fatal(err)
		}
		if d == "[DONE]" {
			break
		}
		var c struct{ Text string }
		_ = json.Unmarshal([]byte(d), &c)
		texts = append(texts, c.Text)
	}
	if len(texts) != 4 || !strings.HasPrefix(texts[2], texts[1]) || texts[3] != texts[2] {
		t.Errorf("streamed texts %q", texts)
	}
}

func TestPDBootstrap(t *testing.T) {
	pcfg := testConfig()
	pcfg.Role, pcfg.ID = "prefill", "prefill-0"
	prefill, pbase := start(t, pcfg)
	dcfg := testConfig()
	dcfg.Role, dcfg.ID = "decode", "decode-0"
	_, dbase := start(t, dcfg)
	if prefill.BootstrapPort() == 0 {
		t.Fatal("prefill engine has no bootstrap port")
	}

	body := map[string]any{"model": "m", "prompt": "a shared prompt", "max_tokens": 4}
	for _, base := range []string{pbase, dbase} {
		resp, b := post(t, base+"/v1/completions", body)
		if resp.StatusCode != 400 || !strings.Contains(string(b), "bootstrap_host") {
			t.Errorf("%s without bootstrap fields: %d %s", base, resp.StatusCode, b)
		}
	}
	bad := map[string]any{"model": "m", "prompt": "x", "bootstrap_host": "127.0.0.1", "bootstrap_port": 1, "bootstrap_room": -5}
	if resp, b := post(t, pbase+"/v1/completions", bad); resp.StatusCode != 400 || !strings.Contains(string(b), "bootstrap_room") {
		t.Errorf("negative room: %d %s", resp.StatusCode, b)
	}

	const room = uint64(1)<<62 + 12345
	body["bootstrap_host"] = "127.0.0.1"
	body["bootstrap_port"] = prefill.BootstrapPort()
	body["bootstrap_room"] = room
	resp, b := post(t, pbase+"/v1/completions", body)
	var r openAIResponse
	_ = json.Unmarshal(b, &r)
	if resp.StatusCode != 200 || r.Usage.CompletionTokens != 1 {
		t.Errorf("prefill: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, dbase+"/v1/completions", body)
	_ = json.Unmarshal(b, &r)
	if resp.StatusCode != 200 || r.Usage.CompletionTokens != 4 {
		t.Errorf("decode: %d %s", resp.StatusCode, b)
	}
	for _, base := range []string{pbase, dbase} {
		_, lb := get(t, base+"/admin/last-request")
		var last LastRequest
		if err := json.Unmarshal(lb, &last); err != nil {
			t.Fatal(err)
		}
		if last.BootstrapRoom == nil || *last.BootstrapRoom != room || last.BootstrapHost != "127.0.0.1" ||
			last.PromptTokens != len(Tokenize("a shared prompt")) || last.Path != "/v1/completions" {
			t.Errorf("%s last request: %s", base, lb)
		}
	}

	// A decode engine cannot reach a bootstrap port nobody listens on.
	body["bootstrap_port"] = 1
	if resp, b := post(t, dbase+"/v1/completions", body); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("decode with unreachable bootstrap: %d %s", resp.StatusCode, b)
	}
}

func TestClientDisconnectFreesSlot(t *testing.T) {
	cfg := testConfig()
	cfg.MaxRunning = 1
	cfg.DecodeMsPerToken = 50
	s, base := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(map[string]any{"prompt": "long running", "stream": true, "max_tokens": 1000})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (sseReader{bufio.NewReader(resp.Body)}).next(); err != nil {
		t.Fatal(err)
	}
	if l := s.Engine().Load(); l.Running != 1 {
		t.Fatalf("not running: %+v", l)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.Engine().Load().Running != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slot not freed after disconnect: %+v", s.Engine().Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The freed slot serves the next request at once.
	if resp, body := post(t, base+"/v1/completions", map[string]any{"prompt": "next", "max_tokens": 1}); resp.StatusCode != 200 {
		t.Errorf("next request: %d %s", resp.StatusCode, body)
	}
}

func TestHealthToggle(t *testing.T) {
	_, base := start(t, testConfig())
	check := func(want int) {
		t.Helper()
		if code, _ := get(t, base+"/health"); code != want {
			t.Errorf("/health = %d, want %d", code, want)
		}
	}
	check(200)
	post(t, base+"/admin/fail", nil)
	check(503)
	if resp, _ := post(t, base+"/v1/completions", map[string]any{"prompt": "x"}); resp.StatusCode != 503 {
		t.Errorf("completion while failed: %d", resp.StatusCode)
	}
	post(t, base+"/admin/recover", nil)
	check(200)
}

func TestTokenizeAndModels(t *testing.T) {
	_, base := start(t, testConfig())
	_, body := post(t, base+"/tokenize", map[string]any{"prompt": "Hello, world!"})
	var r struct {
		Tokens []uint32
		Count  int
	}
	_ = json.Unmarshal(body, &r)
	if diff := cmp.Diff(Tokenize("Hello, world!"), r.Tokens); diff != "" || r.Count != 4 {
		t.Errorf("/tokenize mismatch (-want +got):\n%s (count %d)", diff, r.Count)
	}
	msgs := []ChatMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: []any{map[string]any{"type": "text", "text": "hi"}}}}
	_, body = post(t, base+"/tokenize", map[string]any{"messages": msgs})
	_ = json.Unmarshal(body, &r)
	if diff := cmp.Diff(TokenizeMessages(msgs), r.Tokens); diff != "" {
		t.Errorf("/tokenize messages mismatch (-want +got):\n%s", diff)
	}
	_, body = get(t, base+"/v1/models")
	if !strings.Contains(string(body), `"id":"m"`) {
		t.Errorf("/v1/models: %s", body)
	}
}

func TestBodyLimit(t *testing.T) {
	_, base := start(t, testConfig())
	big := bytes.Repeat([]byte("a"), MaxBodyBytes+10)
	resp, err := http.Post(base+"/v1/completions", "application/json", io.MultiReader(strings.NewReader(`{"prompt":"`), bytes.NewReader(big), strings.NewReader(`"}`)))
	if err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", resp.StatusCode)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Role, cfg.KVFormat, cfg.MetricsNaming, cfg.Speed = "both", "json", "tgi", 0
	cfg.KVEventsEndpoint, cfg.KVEventsFormat, cfg.KVReplayEndpoint, cfg.KVReplayBuffer = "tcp://:5557", "dynamo", "udp://x:1", 0
	cfg.DPSize = 0
	err := cfg.Validate()
	for _, flag := range []string{"-role", "-kv-format", "-metrics-naming", "-speed",
		"-kv-events-endpoint", "-kv-events-format", "-kv-replay-endpoint", "-kv-replay-buffer", "-dp-size"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("Validate error %v does not name %s", err, flag)
		}
	}
}

func TestConfigValidateDPWithKafka(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DPSize, cfg.KafkaBrokers = 2, "localhost:9092"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "-dp-size 2: Kafka") {
		t.Errorf("Validate() = %v, want -dp-size > 1 refused with -kafka-brokers", err)
	}
}

func TestConfigValidateReplayNeedsPUB(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KVReplayEndpoint = "tcp://*:5558"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "needs -kv-events-endpoint") {
		t.Errorf("Validate() = %v, want -kv-replay-endpoint to need -kv-events-endpoint", err)
	}
	for _, ep := range []string{"tcp://*:5557", "tcp://10.0.0.1:5557", "tcp://[::1]:5557", "ipc:///tmp/kv", "inproc://kv"} {
		cfg := DefaultConfig()
		cfg.KVEventsEndpoint, cfg.KVReplayEndpoint = ep, "tcp://*:5558"
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(-kv-events-endpoint %s) = %v, want nil", ep, err)
		}
	}
}

func TestCacheSaltFromRequest(t *testing.T) {
	s, base := start(t, testConfig())
	prompt := make([]int, 32)
	for i := range prompt {
		prompt[i] = i + 1
	}
	post(t, base+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1, "cache_salt": "tenant-a"})
	ids := make([]uint32, len(prompt))
	for i, p := range prompt {
		ids[i] = uint32(p)
	}
	if got := s.Engine().CachedPrefixIn(ids, "", "tenant-a"); got != 32 {
		t.Errorf("cached with the request's salt: %d tokens, want 32", got)
	}
	if got := s.Engine().CachedPrefix(ids); got != 0 {
		t.Errorf("cached without a salt: %d tokens, want 0", got)
	}
}

func TestLoRAAdapters(t *testing.T) {
	cfg := testConfig()
	cfg.LoRAAdapters = "adapter-a, adapter-b"
	s, base := start(t, cfg)
	prompt := make([]int, 32)
	ids := make([]uint32, len(prompt))
	for i := range prompt {
		prompt[i], ids[i] = i+1, uint32(i+1)
	}
	post(t, base+"/v1/completions", map[string]any{"model": "adapter-a", "prompt": prompt, "max_tokens": 1})
	post(t, base+"/generate", map[string]any{"input_ids": prompt, "lora_path": "adapter-b", "sampling_params": map[string]any{"max_new_tokens": 1}})
	e := s.Engine()
	for _, tc := range []struct {
		lora string
		want int
	}{{"adapter-a", 32}, {"adapter-b", 32}, {"", 0}} {
		if got := e.CachedPrefixIn(ids, tc.lora, ""); got != tc.want {
			t.Errorf("cached in adapter %q's namespace: %d tokens, want %d", tc.lora, got, tc.want)
		}
	}
	if resp, body := post(t, base+"/generate", map[string]any{"input_ids": prompt, "lora_path": "nope"}); resp.StatusCode != 400 {
		t.Errorf("lora_path of no served adapter: %d %s, want 400", resp.StatusCode, body)
	}
	var models struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	_, body := get(t, base+"/v1/models")
	if err := json.Unmarshal(body, &models); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range models.Data {
		p := ""
		if m.Parent != nil {
			p = *m.Parent
		}
		got = append(got, m.ID+"<"+p)
	}
	if diff := cmp.Diff([]string{"m<", "adapter-a<m", "adapter-b<m"}, got); diff != "" {
		t.Errorf("/v1/models mismatch (-want +got):\n%s", diff)
	}
	bad := testConfig()
	bad.LoRAAdapters = "x,m"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "-lora-adapters") {
		t.Errorf("Validate(adapter named as the base model) = %v, want a -lora-adapters error", err)
	}
}
