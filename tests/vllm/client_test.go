package vllm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"
)

var (
	// quick is for health checks, metrics and admin reads.
	quick = &http.Client{Timeout: 10 * time.Second}
	// client is for generation requests: a CPU engine answers in about a second.
	client = &http.Client{Timeout: 2 * time.Minute}
)

// maxTokens keeps every generation short: the model is noise, the test is about routing.
const maxTokens = 8

// completion is a chat completion of the gateway or a vLLM engine.
type completion = proctest.Completion

// chatBody is an OpenAI chat request with one user message and a few output tokens.
func chatBody(content string) []byte {
	b, _ := json.Marshal(map[string]any{"model": modelName, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": content}}})
	return b
}

// chat sends a non-streaming chat completion through the gateway and fails the test unless
// it answers 200 with a completion.
func (s *stack) chat(t testing.TB, content string) completion {
	t.Helper()
	return postChat(t, "gateway", "http://"+s.gatewayAddr, content)
}

// chatDirect sends a chat completion straight to an engine, bypassing sluice.
func chatDirect(t testing.TB, e *vllmEngine, content string) completion {
	t.Helper()
	return postChat(t, e.id, e.url(), content)
}

func postChat(t testing.TB, who, base, content string) completion {
	t.Helper()
	resp, err := client.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(chatBody(content)))
	if err != nil {
		t.Fatalf("POST %s /v1/chat/completions: %v", who, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s answer: %v", who, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /v1/chat/completions = %s: %s", who, resp.Status, body)
	}
	var c completion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("%s answer is not a chat completion: %v: %s", who, err, body)
	}
	if c.Object != "chat.completion" || len(c.Choices) != 1 || c.Usage.PromptTokens == 0 {
		t.Fatalf("%s answer is not a vLLM chat completion: %s", who, body)
	}
	return c
}

// textCompletion is a /v1/completions answer.
type textCompletion struct {
	Object  string `json:"object"`
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// postCompletion sends a /v1/completions body to base and fails the test unless it answers
// 200 with one choice.
func postCompletion(t testing.TB, who, base string, body []byte) textCompletion {
	t.Helper()
	c, _ := postCompletionHeader(t, who, base, body)
	return c
}

// postCompletionHeader is postCompletion that also returns the answer's header.
func postCompletionHeader(t testing.TB, who, base string, body []byte) (textCompletion, http.Header) {
	t.Helper()
	resp, err := client.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s /v1/completions: %v", who, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s answer: %v", who, err)
	}
	var c textCompletion
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &c) != nil || c.Object != "text_completion" || len(c.Choices) != 1 || c.Usage.PromptTokens == 0 {
		t.Fatalf("%s /v1/completions = %s: %s; want a text completion", who, resp.Status, b)
	}
	return c, resp.Header
}

// tokenizePrompt asks an engine's /tokenize for a completion prompt's token ids, as the
// gateway's engine tokenizer does.
func tokenizePrompt(t testing.TB, e *vllmEngine, prompt string) []uint32 {
	t.Helper()
	return tokenizeRequest(t, e, map[string]any{"model": modelName, "prompt": prompt})
}

// tokenize asks an engine's /tokenize for a one-message chat's token ids (chat template and
// generation prompt included), as the gateway's engine tokenizer does.
func tokenize(t testing.TB, e *vllmEngine, content string) []uint32 {
	t.Helper()
	return tokenizeRequest(t, e, map[string]any{"model": modelName, "messages": []map[string]string{{"role": "user", "content": content}}})
}

// tokenizeRequest posts req to an engine's /tokenize and returns the token ids.
func tokenizeRequest(t testing.TB, e *vllmEngine, req map[string]any) []uint32 {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := quick.Post(e.url()+"/tokenize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("tokenize at %s: %v", e.id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("tokenize at %s = %s: %s", e.id, resp.Status, b)
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("tokenize at %s: %v", e.id, err)
	}
	return out.Tokens
}

// served is how many requests an engine has finished, by its own Prometheus counter
// (vllm:request_success_total, every finish reason): the gateway does not say which
// engine it forwarded to, and vLLM's completion ids are random.
func served(t testing.TB, e *vllmEngine) float64 {
	t.Helper()
	samples := scrape(t, e.url()+"/metrics", "vllm:request_success_total")
	var sum float64
	for _, s := range samples {
		sum += s.value
	}
	return sum
}

// servedBy runs send and returns the one engine of ids whose finished-request count grew
// by one. vLLM updates its counters just after answering, hence the polling.
func (s *stack) servedBy(t testing.TB, ids []string, send func()) string {
	t.Helper()
	before := map[string]float64{}
	for _, id := range ids {
		before[id] = served(t, s.engines[id])
	}
	send()
	var got string
	proctest.Eventually(t, poll, 30*time.Second, "exactly one engine counts one more finished request", func() (bool, string) {
		var grew []string
		var state []string
		for _, id := range ids {
			d := served(t, s.engines[id]) - before[id]
			state = append(state, fmt.Sprintf("%s +%v", id, d))
			if d != 0 {
				grew = append(grew, id)
			}
			if d == 1 {
				got = id
			}
		}
		return len(grew) == 1 && got != "", strings.Join(state, ", ")
	})
	return got
}

// sample is one Prometheus sample: its labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

// scrape reads every sample of the metric name at url (text exposition format).
func scrape(t testing.TB, url, name string) []sample {
	t.Helper()
	resp, err := quick.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %s", url, resp.Status)
	}
	var out []sample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		smp := sample{labels: map[string]string{}}
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				t.Fatalf("metric line %q: no closing brace", line)
			}
			for _, kv := range splitLabels(rest[1:end]) {
				k, v, _ := strings.Cut(kv, "=")
				smp.labels[k] = strings.Trim(v, `"`)
			}
			rest = rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric whose name starts with name
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		smp.value = v
		out = append(out, smp)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return out
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQuote, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			inQuote = !inQuote
		case ',':
			if !inQuote {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// kvCapacity is the engine's KV-cache capacity in tokens as its /metrics state it:
// num_gpu_blocks × block_size of vllm:cache_config_info (vLLM exports no capacity gauge).
func kvCapacity(t testing.TB, e *vllmEngine) int64 {
	t.Helper()
	for _, s := range scrape(t, e.url()+"/metrics", "vllm:cache_config_info") {
		blocks, err1 := strconv.ParseInt(s.labels["num_gpu_blocks"], 10, 64)
		size, err2 := strconv.ParseInt(s.labels["block_size"], 10, 64)
		if err1 == nil && err2 == nil {
			return blocks * size
		}
	}
	t.Fatalf("%s /metrics: no vllm:cache_config_info with num_gpu_blocks and block_size", e.id)
	return 0
}
