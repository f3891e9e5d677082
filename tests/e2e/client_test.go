package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"
)

var (
	// quick is for health checks and admin reads.
	quick = &http.Client{Timeout: 5 * time.Second}
	// client is for requests through the gateway.
	client = &http.Client{Timeout: 20 * time.Second}
)

// completion is a chat completion of the gateway or a simengine.
type completion struct{ proctest.Completion }

// engine names the simengine that produced the completion: its ids read
// "chatcmpl-<engine id>-<run>".
func (c completion) engine() string { return engineFromID(c.ID) }

func engineFromID(id string) string {
	rest, ok := strings.CutPrefix(id, "chatcmpl-")
	if !ok {
		return ""
	}
	if i := strings.LastIndexByte(rest, '-'); i > 0 {
		return rest[:i]
	}
	return ""
}

// chatBody is an OpenAI chat request with one user message.
func chatBody(model, content string, stream bool, maxTokens int) []byte {
	req := map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": content}}, "stream": stream}
	if maxTokens > 0 {
		req["max_tokens"] = maxTokens
	}
	b, _ := json.Marshal(req)
	return b
}

// chat sends a non-streaming chat completion through the gateway (header holds name, value
// pairs) and fails the test unless it answers 200 with a completion.
func (s *stack) chat(t testing.TB, model, content string, header ...string) completion {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.gatewayAddr+"/v1/chat/completions", bytes.NewReader(chatBody(model, content, false, 0)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST gateway /v1/chat/completions (model %s): %v", model, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read gateway answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("gateway /v1/chat/completions (model %s) = %s: %s", model, resp.Status, body)
	}
	var c completion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("gateway answer is not a chat completion: %v: %s", err, body)
	}
	if c.Object != "chat.completion" || len(c.Choices) != 1 || c.engine() == "" {
		t.Fatalf("gateway answer is not a simengine chat completion: %s", body)
	}
	return c
}

// sseStream is what a streaming answer looked like on the client's side.
type sseStream struct {
	contentType string
	chunks      []completion // the JSON data events, in order
	done        bool         // the stream ended with "data: [DONE]"
	afterDone   int          // data events after [DONE] (want 0)
}

// chatStream sends a streaming chat completion through the gateway and reads the SSE stream to
// its end.
func (s *stack) chatStream(t testing.TB, model, content string) sseStream {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.gatewayAddr+"/v1/chat/completions", bytes.NewReader(chatBody(model, content, true, 8)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST gateway /v1/chat/completions (model %s, stream): %v", model, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("gateway stream (model %s) = %s: %s", model, resp.Status, body)
	}
	out := sseStream{contentType: resp.Header.Get("Content-Type")}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if out.done {
			out.afterDone++
			continue
		}
		if data == "[DONE]" {
			out.done = true
			continue
		}
		var c completion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("SSE event is not JSON: %v: %s", err, data)
		}
		out.chunks = append(out.chunks, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read SSE stream: %v", err)
	}
	return out
}

// holdStream starts a long streaming request directly on an engine (not through the gateway,
// so only the engine's own load reports tell the decider about it) and returns once the
// first token arrived. Cancelling ctx ends it; the returned channel closes once it has ended.
func holdStream(ctx context.Context, t testing.TB, e *engine, content string) <-chan struct{} {
	t.Helper()
	// max_tokens 60000 at -speed 50 lasts about 24 s: far longer than it is held.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url()+"/v1/chat/completions", bytes.NewReader(chatBody(e.model, content, true, 60000)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("long stream on %s: %v", e.id, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("long stream on %s = %s: %s", e.id, resp.Status, body)
	}
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		resp.Body.Close()
		t.Fatalf("long stream on %s: no first event: %v", e.id, err)
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, r) // ends with the context's error, or early if the engine stops
		resp.Body.Close()
		close(done)
	}()
	return done
}

// lastRequest is a simengine's GET /admin/last-request answer.
type lastRequest struct {
	EngineID      string  `json:"engine_id"`
	Role          string  `json:"role"`
	Requests      int64   `json:"requests"`
	Path          string  `json:"path"`
	BootstrapHost string  `json:"bootstrap_host"`
	BootstrapPort *int    `json:"bootstrap_port"`
	BootstrapRoom *uint64 `json:"bootstrap_room"`
	PromptTokens  int     `json:"prompt_tokens"`
}

func (s *stack) lastRequest(t testing.TB, id string) lastRequest {
	t.Helper()
	var lr lastRequest
	getJSON(t, s.engines[id].url()+"/admin/last-request", &lr)
	return lr
}

// requestCounts returns each plain engine's count of generation requests.
func (s *stack) requestCounts(t testing.TB) map[string]int64 {
	t.Helper()
	return map[string]int64{plainA: s.lastRequest(t, plainA).Requests, plainB: s.lastRequest(t, plainB).Requests}
}

// tokenize asks an engine's /tokenize for a one-message chat's token ids, as the gateway's
// engine tokenizer does.
func (s *stack) tokenize(t testing.TB, id, content string) []uint32 {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": s.engines[id].model, "messages": []map[string]string{{"role": "user", "content": content}}})
	resp, err := quick.Post(s.engines[id].url()+"/tokenize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("tokenize at %s: %v", id, err)
	}
	defer resp.Body.Close()
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("tokenize at %s = %s: %s", id, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("tokenize at %s: %v", id, err)
	}
	return out.Tokens
}

// metric sums the samples of a Prometheus metric (every label set) at url's /metrics, with
// whether any sample was found.
func metric(t testing.TB, url, name string) (float64, bool) {
	t.Helper()
	resp, err := quick.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		sample, value := line, ""
		if i := strings.IndexByte(line, '{'); i >= 0 {
			sample = line[:i]
			if j := strings.LastIndexByte(line, '}'); j > i {
				value = line[j+1:]
			}
		} else if f := strings.Fields(line); len(f) >= 2 {
			sample, value = f[0], f[1]
		}
		if sample != name {
			continue
		}
		f := strings.Fields(value)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return sum, found
}

func getJSON(t testing.TB, url string, out any) {
	t.Helper()
	resp, err := quick.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s = %s: %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
}
