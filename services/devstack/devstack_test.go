package devstack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a goroutine-safe buffer for the banner.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDevStack starts the whole dev stack, serves a plain and a streamed PD request through the
// gateway, and stops cleanly on cancellation.
func TestDevStack(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GatewayAddr, cfg.DeciderGRPCAddr, cfg.DeciderHTTPAddr, cfg.LinkAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Speed = 50
	cfg.AdminToken = testToken
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- Run(ctx, slog.New(slog.DiscardHandler), cfg, &out) }()
	var gateway string
	deadline := time.Now().Add(30 * time.Second)
	for gateway == "" {
		if m := regexp.MustCompile(`gateway \(OpenAI API \+ REST\)\s+(http://\S+)`).FindStringSubmatch(out.String()); m != nil {
			gateway = m[1]
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no banner within 30s: %q", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"plain-1", "prefill-1", "decode-1", "curl -si " + gateway + "/v1/chat/completions"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, out.String())
		}
	}
	post := func(body string) *http.Response {
		t.Helper()
		var resp *http.Response
		var err error
		for range 50 { // engines may need a moment before their first health probe
			resp, err = http.Post(gateway+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err == nil && resp.StatusCode == http.StatusOK {
				return resp
			}
			if resp != nil {
				resp.Body.Close()
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("POST %s: %v %v", body, resp, err)
		return nil
	}
	long := strings.Repeat("a prompt long enough to fill several KV blocks ", 40)
	resp := post(`{"model":"sim-chat","messages":[{"role":"user","content":"` + long + `"}],"max_tokens":4}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"choices"`) {
		t.Errorf("plain completion = %s", b)
	}
	resp = post(`{"model":"sim-pd","stream":true,"messages":[{"role":"user","content":"disaggregate"}],"max_tokens":4}`)
	sc := bufio.NewScanner(resp.Body)
	chunks, doneSeen := 0, false
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			doneSeen = true
		} else if strings.HasPrefix(line, "data: ") {
			chunks++
		}
	}
	resp.Body.Close()
	if chunks == 0 || !doneSeen {
		t.Errorf("PD stream: %d chunks, [DONE] %v", chunks, doneSeen)
	}
	// The production path: load from every engine's /metrics or /v1/loads (vLLM- and
	// SGLang-flavoured) and KV events over ZMQ reach the decider through enginelink and Kafka.
	decider := regexp.MustCompile(`decider HTTP \(Connect/REST\)\s+(http://\S+)`).FindStringSubmatch(out.String())
	if decider == nil {
		t.Fatalf("banner lacks the decider HTTP address:\n%s", out.String())
	}
	waitUntil(t, 30*time.Second, "every engine's load known to the decider", func() (bool, string) {
		var list struct {
			Engines []struct {
				ID   string `json:"id"`
				Load struct {
					LoadKnown bool `json:"loadKnown"`
				} `json:"load"`
			} `json:"engines"`
		}
		if err := getJSON(decider[1]+"/v1/admin/engines", &list, testToken); err != nil {
			return false, err.Error()
		}
		var unknown []string
		for _, e := range list.Engines {
			if !e.Load.LoadKnown {
				unknown = append(unknown, e.ID)
			}
		}
		return len(list.Engines) == 4 && len(unknown) == 0, fmt.Sprintf("%d engines, load unknown for %v", len(list.Engines), unknown)
	})
	waitUntil(t, 30*time.Second, "KV events ingested without bad records", func() (bool, string) {
		m, err := metricsText(decider[1] + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		kv := sample(m, "sluice_ingest_records_total", `stream="kv"`)
		bad := sample(m, "sluice_ingest_bad_records_total", "")
		return kv > 0 && bad == 0, fmt.Sprintf("kv records %v, bad records %v", kv, bad)
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev stack did not stop within 30s of cancellation")
	}
}

// waitUntil polls cond until it holds or within passes; cond says what it saw.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last: %s)", what, within, saw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// getJSON GETs url (with a bearer token when given) and decodes its JSON answer.
func getJSON(url string, v any, token ...string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	for _, t := range token {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func metricsText(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// sample sums the samples of metric whose labels contain match.
func sample(text, metric, match string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, metric) || !strings.Contains(line, match) {
			continue
		}
		rest := strings.TrimPrefix(line, metric)
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
