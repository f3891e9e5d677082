package devstack

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
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
	cfg.GatewayAddr, cfg.DeciderGRPCAddr, cfg.DeciderHTTPAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Speed = 50
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
	for _, want := range []string{"plain-1", "prefill-1", "decode-1", "curl -s " + gateway + "/v1/chat/completions"} {
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
	resp := post(`{"model":"sim-chat","messages":[{"role":"user","content":"hello sluice"}],"max_tokens":4}`)
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
