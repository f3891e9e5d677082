package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// tokenizingEngine answers /tokenize with n token ids and everything else like a plain engine.
func tokenizingEngine(t *testing.T, n int) *fakeEngine {
	e := newFakeEngine(t, "e1")
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = 4_000_000_000 + uint32(i%1000) // five-byte varints: the widest Decide
	}
	answer, err := json.Marshal(map[string]any{"tokens": ids, "count": n})
	if err != nil {
		t.Fatal(err)
	}
	e.setHandler(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path == "/tokenize" {
			_, _ = w.Write(answer)
			return
		}
		e.answerJSON(w, r, body)
	})
	return e
}

func completionCalls(e *fakeEngine) int {
	n := 0
	for _, r := range e.requests() {
		if r.path == routeCompletions {
			n++
		}
	}
	return n
}

// TestPromptLimitsAgreeWithTheDecider: the gateway's gRPC client kept the 4 MiB default, so a
// long prompt the decider would accept (its -max-token-ids is 2,097,152) failed with 500
// decider_resource_exhausted. The gateway's message limits now derive from the same
// -max-token-ids, and a prompt over it is refused at the gateway with 413.
func TestPromptLimitsAgreeWithTheDecider(t *testing.T) {
	prompt := `{"model": "m", "prompt": "a long document", "max_tokens": 1}`
	t.Run("a million token ids reach the decider", func(t *testing.T) {
		e := tokenizingEngine(t, 1_000_000) // 5 MB of token ids in the Decide
		d := startDecider(t, []listEntry{{engine: e, model: "m", role: "plain"}}, "")
		g := startGateway(t, d, func(c *Config) { c.Tokenizer, c.TokenizerURL = TokenizerEngine, e.url() })
		resp := post(t, g, routeCompletions, prompt)
		if got := readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Errorf("POST with a 1,000,000-token prompt = %d %.300s, want 200", resp.StatusCode, got)
		}
	})
	t.Run("more than -max-token-ids is 413 at the gateway", func(t *testing.T) {
		e := tokenizingEngine(t, 101)
		d := startDecider(t, []listEntry{{engine: e, model: "m", role: "plain"}}, "")
		g := startGateway(t, d, func(c *Config) {
			c.Tokenizer, c.TokenizerURL, c.MaxTokenIDs = TokenizerEngine, e.url(), 100
		})
		resp := post(t, g, routeCompletions, prompt)
		got := readAll(t, resp)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(got, "too_many_tokens") || !strings.Contains(got, "-max-token-ids") {
			t.Errorf("POST with a 101-token prompt, -max-token-ids 100 = %d %.300s, want 413 too_many_tokens", resp.StatusCode, got)
		}
		if n := completionCalls(e); n != 0 {
			t.Errorf("engine got %d completions, want 0", n)
		}
	})
}

// TestReadyzReflectsTheDecider: /readyz answered 200 while no decider listened, so a load
// balancer sent traffic to a gateway that could only fail it.
func TestReadyzReflectsTheDecider(t *testing.T) {
	e := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e, model: "m", role: "plain"}}, "")
	ready := func(g *Server) (int, string) {
		resp, err := http.Get("http://" + g.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, readAll(t, resp)
	}
	if code, body := ready(startGateway(t, d, nil)); code != http.StatusOK {
		t.Errorf("/readyz with a serving decider = %d %s, want 200", code, body)
	}
	nobody := startGatewayAt(t, "127.0.0.1:1", nil)
	if code, body := ready(nobody); code != http.StatusServiceUnavailable || !strings.Contains(body, "decider not ready") {
		t.Errorf("/readyz with no decider = %d %s, want 503 naming the decider", code, body)
	}
}

// TestSlowHeadersAreCut: a client that never finishes its headers held a connection for the
// hard-coded 10 s; -read-header-timeout bounds it (a generous deadline only detects a hang).
func TestSlowHeadersAreCut(t *testing.T) {
	g := startGatewayAt(t, "127.0.0.1:1", func(c *Config) { c.ReadHeaderTimeout = 100 * time.Millisecond })
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("connection with unfinished headers still open after 5s with -read-header-timeout 100ms")
	}
}

// TestRESTMappingRefusesUnknownFields: the gateway's REST mapping dropped unknown fields before
// proxying to the decider, so "dryrun": true took a real lease.
func TestRESTMappingRefusesUnknownFields(t *testing.T) {
	e := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e, model: "m", role: "plain"}}, "")
	g := startGateway(t, d, nil)
	resp := post(t, g, "/v1/decide", `{"model": "m", "input_tokens": 1, "dryrun": true}`)
	if got := readAll(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, `unknown field \"dryrun\"`) {
		t.Errorf("POST /v1/decide with \"dryrun\" through the gateway = %d %s, want 400 naming the field", resp.StatusCode, got)
	}
	if n := d.Leases().Leases(); n != 0 {
		t.Errorf("%d leases taken by a refused request, want 0", n)
	}
}

// TestErrorsDoNotEchoHugeValues: a 1 MB model name came back in a 1 MB error.
func TestErrorsDoNotEchoHugeValues(t *testing.T) {
	e := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e, model: "m", role: "plain"}}, "")
	g := startGateway(t, d, nil)
	resp := post(t, g, routeCompletions, `{"model": "`+strings.Repeat("x", 1<<20)+`", "prompt": "hi"}`)
	got := readAll(t, resp)
	if resp.StatusCode != http.StatusNotFound || len(got) > 4096 {
		t.Errorf("POST with a 1 MB model name = %d with a %d-byte body, want 404 model_not_found under 4 KiB", resp.StatusCode, len(got))
	}
}
