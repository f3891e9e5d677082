package gateway

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/services/deciderserver"
)

// A decider replica that sheds Decide (its -max-concurrent-decides is taken by a call held
// open over REST) makes the gateway retry the decision once, then answer 503 with the
// decider's own retry hint as Retry-After and the OpenAI-style code decider_overloaded, never
// a 500.
func TestGatewayAnswersOverloadedDecider(t *testing.T) {
	eng := newFakeEngine(t, "e1")
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfgText := "workers:\n  - {id: e1, url: \"" + eng.url() + "\", models: [m], role: plain}\n"
	if err := os.WriteFile(path, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := deciderserver.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath, cfg.ConfigSnapshot = "127.0.0.1:0", "127.0.0.1:0", path, "-"
	cfg.MaxConcurrentDecides, cfg.ShedRetryAfter = 1, 3*time.Second
	cfg.Health.TrustNewEngines = true
	d, err := deciderserver.New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d.Run)
	g := startGateway(t, d, nil)

	// Hold the replica's only Decide slot with a REST call whose body never completes.
	conn, err := net.Dial("tcp", d.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/decide HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\": "); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for metricValue(t, d.HTTPAddr(), "sluice_decider_decides_in_progress") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the held Decide is not counted in progress")
		}
		time.Sleep(10 * time.Millisecond)
	}

	resp := post(t, g, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "3" || !strings.Contains(body, "decider_overloaded") {
		t.Errorf("chat completion against a shedding decider = %d Retry-After %q %s; want 503, Retry-After 3, decider_overloaded",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if got := metricValue(t, g.Addr(), "sluice_gateway_decider_overload_retries_total"); got != 1 {
		t.Errorf("sluice_gateway_decider_overload_retries_total = %v, want 1 (one retry before answering 503)", got)
	}
	if n := len(eng.requests()); n != 0 {
		t.Errorf("the engine saw %d requests, want none", n)
	}

	conn.Close() // the slot frees: the same request now goes through
	deadline = time.Now().Add(5 * time.Second)
	for {
		resp := post(t, g, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
		body := readAll(t, resp)
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the slot was freed: %d %s", resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
