package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sluicehq/sluice/components/limits"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

func TestPlainForwardsBodyUnchangedAndRelaysAnswer(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	g := startGateway(t, d, nil)
	tests := []struct {
		name, path, body string
	}{
		{"chat", routeChat, `{"model":"m","messages":[{"role":"user","content":"hi there"}],"max_tokens":16,"temperature":0.5,"x_extra":{"keep":[1,2]}}`},
		{"completions", routeCompletions, `{"model": "m", "prompt": "once upon a time", "max_tokens": 8}`},
		{"generate", routeGenerate, `{"model":"m","text":"the capital of France is","sampling_params":{"max_new_tokens":4}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e1.requests())
			resp := post(t, g, tt.path, tt.body, "X-Request-Id", "req-"+tt.name)
			got := readAll(t, resp)
			if resp.StatusCode != http.StatusOK || got != `{"engine":"e1","path":"`+tt.path+`"}` {
				t.Fatalf("POST %s = %d %s, want 200 with e1's answer", tt.path, resp.StatusCode, got)
			}
			if resp.Header.Get("X-Request-Id") != "req-"+tt.name || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("response headers = %v, want the request id and the engine's content type", resp.Header)
			}
			reqs := e1.requests()
			if len(reqs) != before+1 {
				t.Fatalf("engine got %d requests, want %d", len(reqs), before+1)
			}
			r := reqs[len(reqs)-1]
			if r.path != tt.path || string(r.body) != tt.body || r.header.Get("X-Request-Id") != "req-"+tt.name {
				t.Errorf("engine got %s %q (request id %q), want %s with the body unchanged", r.path, r.body, r.header.Get("X-Request-Id"), tt.path)
			}
		})
	}
	waitLeases(t, d)
}

func TestPDSendsBootstrapToBothAndRelaysDecode(t *testing.T) {
	p1, d1 := newFakeEngine(t, "p1"), newFakeEngine(t, "d1")
	d := startDecider(t, []listEntry{{engine: p1, model: "pd", role: "prefill", bootstrapPort: 8998}, {engine: d1, model: "pd", role: "decode"}}, "")
	g := startGateway(t, d, nil)

	t.Run("single", func(t *testing.T) {
		body := `{"model":"pd","messages":[{"role":"user","content":"hello"}],"max_tokens":3}`
		resp := post(t, g, routeChat, body)
		if got := readAll(t, resp); resp.StatusCode != http.StatusOK || got != `{"engine":"d1","path":"/v1/chat/completions"}` {
			t.Fatalf("POST = %d %s, want 200 with decode's answer", resp.StatusCode, got)
		}
		pre, dec := lastBody(t, p1), lastBody(t, d1)
		if diff := cmp.Diff(pre, dec); diff != "" {
			t.Errorf("prefill and decode bodies differ (-prefill +decode):\n%s", diff)
		}
		var orig map[string]any
		_ = json.Unmarshal([]byte(body), &orig)
		room, ok := pre["bootstrap_room"].(float64)
		if !ok || room < 0 {
			t.Fatalf("bootstrap_room = %v, want a non-negative integer", pre["bootstrap_room"])
		}
		orig["bootstrap_host"], orig["bootstrap_port"], orig["bootstrap_room"] = "127.0.0.1", float64(8998), room
		if diff := cmp.Diff(orig, pre); diff != "" {
			t.Errorf("PD body mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("batched generate", func(t *testing.T) {
		resp := post(t, g, routeGenerate, `{"model":"pd","text":["a b","c d"],"sampling_params":{"max_new_tokens":2}}`)
		if got := readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("POST = %d %s", resp.StatusCode, got)
		}
		pre, dec := lastBody(t, p1), lastBody(t, d1)
		if diff := cmp.Diff(pre, dec); diff != "" {
			t.Errorf("prefill and decode bodies differ:\n%s", diff)
		}
		hosts, _ := pre["bootstrap_host"].([]any)
		ports, _ := pre["bootstrap_port"].([]any)
		rooms, _ := pre["bootstrap_room"].([]any)
		if len(hosts) != 2 || len(ports) != 2 || len(rooms) != 2 || hosts[1] != "127.0.0.1" || ports[0] != float64(8998) {
			t.Errorf("batched bootstrap fields = %v %v %v, want lists of 2", hosts, ports, rooms)
		}
	})
	t.Run("prefill 4xx relayed", func(t *testing.T) {
		p1.setHandler(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":"prompt too long"}`)
		})
		defer p1.setHandler(nil)
		resp := post(t, g, routeCompletions, `{"model":"pd","prompt":"x"}`)
		if got := readAll(t, resp); resp.StatusCode != http.StatusBadRequest || got != `{"error":"prompt too long"}` {
			t.Errorf("POST = %d %s, want prefill's 400 as is", resp.StatusCode, got)
		}
	})
	waitLeases(t, d)
}

func TestPDPrefillFailureFailsRequest(t *testing.T) {
	p1, d1 := newFakeEngine(t, "p1"), newFakeEngine(t, "d1")
	p1.setHandler(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	d := startDecider(t, []listEntry{{engine: p1, model: "pd", role: "prefill", bootstrapPort: 8998}, {engine: d1, model: "pd", role: "decode"}}, "")
	g := startGateway(t, d, func(c *Config) { c.RetryOnEngineFailure = false })
	resp := post(t, g, routeChat, `{"model":"pd","messages":[{"role":"user","content":"hello"}]}`)
	got := readAll(t, resp)
	if resp.StatusCode != http.StatusBadGateway || errorCode(t, got) != "prefill_failed" {
		t.Errorf("POST = %d %s, want 502 prefill_failed", resp.StatusCode, got)
	}
	waitLeases(t, d)
	if n := metricValue(t, d.HTTPAddr(), `sluice_decider_releases_total{outcome="engine_failure",released="true"}`); n != 1 {
		t.Errorf("engine_failure releases = %v, want 1", n)
	}
}

func lastBody(t *testing.T, e *fakeEngine) map[string]any {
	t.Helper()
	reqs := e.requests()
	if len(reqs) == 0 {
		t.Fatalf("engine %s got no request", e.id)
	}
	var m map[string]any
	if err := json.Unmarshal(reqs[len(reqs)-1].body, &m); err != nil {
		t.Fatalf("engine %s got invalid JSON %q: %v", e.id, reqs[len(reqs)-1].body, err)
	}
	return m
}

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct {
			Message, Type, Code string
		}
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("body %q is not an OpenAI-style error: %v", body, err)
	}
	return e.Error.Code
}

// sseEngine streams one chunk, waits for next (or the request's end), then a second chunk and
// [DONE]. cancelled is closed when the request's context ends before the stream finished.
func sseEngine(next <-chan struct{}, cancelled chan<- struct{}) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"chunk\":1}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-next:
		case <-r.Context().Done():
			close(cancelled)
			return
		}
		_, _ = io.WriteString(w, "data: {\"chunk\":2}\n\ndata: [DONE]\n\n")
	}
}

func TestStreamingRelaysChunkByChunk(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	next, cancelled := make(chan struct{}), make(chan struct{})
	e1.setHandler(sseEngine(next, cancelled))
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	g := startGateway(t, d, nil)

	resp := post(t, g, routeChat, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("POST = %d %v, want a 200 event stream", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	first := readEvent(t, br)
	if first != "data: {\"chunk\":1}\n\n" {
		t.Fatalf("first event = %q", first)
	}
	// The engine has not sent chunk 2 yet: reading chunk 1 proves the gateway holds nothing back.
	close(next)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "data: {\"chunk\":2}\n\ndata: [DONE]\n\n" {
		t.Fatalf("rest of stream = %q, %v; want chunk 2 then [DONE]", rest, err)
	}
	waitLeases(t, d)
	if n := metricValue(t, g.Addr(), `sluice_gateway_ttfb_seconds_count{route="/v1/chat/completions"}`); n != 1 {
		t.Errorf("ttfb observations = %v, want 1", n)
	}
}

func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	done := make(chan struct{})
	var ev string
	var err error
	go func() {
		defer close(done)
		var line string
		for {
			line, err = br.ReadString('\n')
			ev += line
			if err != nil || line == "\n" {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s: the gateway buffers the stream")
	}
	if err != nil {
		t.Fatalf("read event: %v", err)
	}
	return ev
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	next, cancelled := make(chan struct{}), make(chan struct{})
	e1.setHandler(sseEngine(next, cancelled))
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	g := startGateway(t, d, nil)

	resp := post(t, g, routeCompletions, `{"model":"m","stream":true,"prompt":"hi"}`)
	readEvent(t, bufio.NewReader(resp.Body))
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("engine's request context not cancelled within 5s of the client leaving")
	}
	waitLeases(t, d)
	if n := metricValue(t, d.HTTPAddr(), `sluice_decider_releases_total{outcome="cancelled",released="true"}`); n != 1 {
		t.Errorf("cancelled releases = %v, want 1", n)
	}
}

func TestRoutingFactsReachDecide(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	rd := startRecordingDecider(t, d)
	g := startGatewayAt(t, rd.addr, func(c *Config) { c.SessionHeader, c.DefaultMaxTokens = "x-conversation", 100 })

	readAll(t, post(t, g, routeChat, `{"model":"m","messages":[{"role":"user","content":"0123456789"}],"max_completion_tokens":7}`,
		"X-Conversation", "s-1", "X-Routing-Key", "tenant-a", "X-Request-Id", "r-1"))
	readAll(t, post(t, g, routeCompletions, `{"model":"m","prompt":[1,2,3]}`, "X-Request-Id", "r-2"))
	readAll(t, post(t, g, routeGenerate, `{"model":"m","input_ids":[[1,2],[3,4,5]],"sampling_params":{"max_new_tokens":10}}`, "X-Request-Id", "r-3"))
	readAll(t, post(t, g, routeGenerate, `{"model":"m","input_ids":[1],"lora_path":["ad",null],"cache_salt":"t-1"}`, "X-Request-Id", "r-4"))
	want := []*sluicev1.DecideRequest{
		{Model: "m", InputTokens: 3, ExpectedPeakTokens: proto.Int64(10), SessionKey: "s-1", RoutingKey: "tenant-a", RequestId: "r-1"},
		{Model: "m", InputTokens: 3, ExpectedPeakTokens: proto.Int64(103), TokenIds: []uint32{1, 2, 3}, RequestId: "r-2"},
		{Model: "m", InputTokens: 5, ExpectedPeakTokens: proto.Int64(25), RequestId: "r-3"},
		{Model: "m", InputTokens: 1, ExpectedPeakTokens: proto.Int64(101), TokenIds: []uint32{1}, RequestId: "r-4", LoraName: "ad", CacheSalt: "t-1"},
	}
	if diff := cmp.Diff(want, rd.requests(), protocmp.Transform()); diff != "" {
		t.Errorf("Decide requests mismatch (-want +got):\n%s", diff)
	}
	waitLeases(t, d)
}

func TestSessionStaysOnEngine(t *testing.T) {
	fakes := []*fakeEngine{newFakeEngine(t, "e1"), newFakeEngine(t, "e2"), newFakeEngine(t, "e3")}
	var engines []listEntry
	for _, e := range fakes {
		engines = append(engines, listEntry{engine: e, model: "m", role: "plain"})
	}
	d := startDecider(t, engines, `buckets:
  - id: chat
    groups:
      plain:
        policy: {type: session_aware}
`)
	g := startGateway(t, d, nil)
	for _, session := range []string{"alice", "bob", "carol"} {
		var first string
		for i := range 5 {
			resp := post(t, g, routeChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "X-Session-Id", session)
			var got struct{ Engine string }
			if err := json.Unmarshal([]byte(readAll(t, resp)), &got); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = got.Engine
			} else if got.Engine != first {
				t.Fatalf("session %s call %d went to %s, want %s like its first call", session, i, got.Engine, first)
			}
		}
	}
	waitLeases(t, d)
}

func TestBodyLimit(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	g := startGateway(t, d, nil)
	body := `{"model":"m","prompt":"` + strings.Repeat("a", int(limits.For(limits.DefaultMaxTokenIDs).MaxBodyBytes)) + `"}`
	resp := post(t, g, routeCompletions, body)
	got := readAll(t, resp)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || errorCode(t, got) != "request_too_large" {
		t.Errorf("POST of %d bytes = %d %s, want 413", len(body), resp.StatusCode, got)
	}
	if n := len(e1.requests()); n != 0 {
		t.Errorf("engine got %d requests, want 0", n)
	}
}

func TestDecideErrorsMapped(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	next, cancelled := make(chan struct{}), make(chan struct{})
	e1.setHandler(sseEngine(next, cancelled))
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, `buckets:
  - id: only
    groups:
      plain:
        policy: {type: round_robin, admission: {max_inflight_requests: 1}}
`)
	g := startGateway(t, d, func(c *Config) { c.RetryAfter = 3 * time.Second })

	tests := []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"missing model", routeChat, `{"messages":[]}`, 400, "missing_model"},
		{"not json", routeChat, `{"model":`, 400, "invalid_json"},
		{"unknown model", routeChat, `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "model_not_found"},
		{"negative max_tokens", routeCompletions, `{"model":"m","prompt":"x","max_tokens":-1}`, 400, "invalid_max_tokens"},
		{"peak overflow", routeCompletions, `{"model":"m","prompt":"x","max_tokens":9223372036854775807}`, 400, "token_overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, g, tt.path, tt.body)
			got := readAll(t, resp)
			if resp.StatusCode != tt.status || errorCode(t, got) != tt.code {
				t.Errorf("POST %s = %d %s, want %d %s", tt.body, resp.StatusCode, got, tt.status, tt.code)
			}
		})
	}
	t.Run("all engines at their cap", func(t *testing.T) {
		held := post(t, g, routeCompletions, `{"model":"m","stream":true,"prompt":"hold"}`)
		readEvent(t, bufio.NewReader(held.Body))
		resp := post(t, g, routeCompletions, `{"model":"m","prompt":"x"}`)
		got := readAll(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, got) != "ADMISSION_REJECTED" || resp.Header.Get("Retry-After") != "3" {
			t.Errorf("POST = %d %v %s, want 503 ADMISSION_REJECTED with Retry-After 3", resp.StatusCode, resp.Header, got)
		}
		close(next)
		readAll(t, held)
	})
	t.Run("decider unreachable", func(t *testing.T) {
		g2 := startGatewayAt(t, "127.0.0.1:1", nil)
		resp := post(t, g2, routeCompletions, `{"model":"m","prompt":"x"}`)
		got := readAll(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, got) != "decider_unavailable" || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("POST = %d %v %s, want 503 decider_unavailable with Retry-After 1", resp.StatusCode, resp.Header, got)
		}
	})
	waitLeases(t, d)
}

func TestEngineFailureBeforeFirstByteRetriedElsewhere(t *testing.T) {
	bad, good := newFakeEngine(t, "bad"), newFakeEngine(t, "good")
	bad.setHandler(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		http.Error(w, "overloaded", http.StatusInternalServerError)
	})
	d := startDecider(t, []listEntry{{engine: bad, model: "m", role: "plain"}, {engine: good, model: "m", role: "plain"}}, `buckets:
  - id: rr
    groups:
      plain:
        policy: {type: round_robin}
`)
	g := startGateway(t, d, nil)
	const n = 6
	for i := range n {
		resp := post(t, g, routeCompletions, `{"model":"m","prompt":"x"}`)
		if got := readAll(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(got, `"good"`) {
			t.Fatalf("request %d = %d %s, want 200 from good", i, resp.StatusCode, got)
		}
	}
	failed := len(bad.requests())
	if failed == 0 {
		t.Fatal("round robin never picked the failing engine; the retry path went untested")
	}
	if got := len(good.requests()); got != n {
		t.Errorf("good engine got %d requests, want %d", got, n)
	}
	waitLeases(t, d)
	if got := metricValue(t, g.Addr(), "sluice_gateway_retries_total"); got != float64(failed) {
		t.Errorf("retries = %v, want %d", got, failed)
	}
	if got := metricValue(t, d.HTTPAddr(), `sluice_decider_releases_total{outcome="engine_failure",released="true"}`); got != float64(failed) {
		t.Errorf("engine_failure releases = %v, want %d", got, failed)
	}
}

func TestNoRetryAfterBytesReachedClient(t *testing.T) {
	e1, e2 := newFakeEngine(t, "e1"), newFakeEngine(t, "e2")
	var calls atomic.Int32
	breakOff := func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"chunk\":1}\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	e1.setHandler(breakOff)
	e2.setHandler(breakOff)
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}, {engine: e2, model: "m", role: "plain"}}, "")
	g := startGateway(t, d, nil)
	resp := post(t, g, routeCompletions, `{"model":"m","stream":true,"prompt":"x"}`)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "data: {\"chunk\":1}") {
		t.Errorf("POST = %d %q (%v), want the first chunk then a cut stream", resp.StatusCode, body, err)
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("engines called %d times, want 1 (no retry once bytes reached the client)", c)
	}
	waitLeases(t, d)
	if got := metricValue(t, d.HTTPAddr(), `sluice_decider_releases_total{outcome="engine_failure",released="true"}`); got != 1 {
		t.Errorf("engine_failure releases = %v, want 1", got)
	}
}

func TestModelsListsHealthyEngineModels(t *testing.T) {
	e1, e2, p1, d1 := newFakeEngine(t, "e1"), newFakeEngine(t, "e2"), newFakeEngine(t, "p1"), newFakeEngine(t, "d1")
	d := startDecider(t, []listEntry{{engine: e1, model: "llama", role: "plain"}, {engine: e2, model: "qwen", role: "plain"},
		{engine: p1, model: "deepseek", role: "prefill", bootstrapPort: 9000}, {engine: d1, model: "deepseek", role: "decode"}}, "")
	g := startGateway(t, d, nil)
	resp, err := http.Get("http://" + g.Addr() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	if err := json.Unmarshal([]byte(readAll(t, resp)), &got); err != nil {
		t.Fatal(err)
	}
	want := struct {
		Object string
		Data   []struct{ ID, Object string }
	}{"list", []struct{ ID, Object string }{{"deepseek", "model"}, {"llama", "model"}, {"qwen", "model"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET /v1/models mismatch (-want +got):\n%s", diff)
	}
}

func TestRESTMappingProxiedToDecider(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	g := startGateway(t, d, nil)
	resp := post(t, g, "/v1/decide", `{"model":"m","inputTokens":"12","dryRun":true}`)
	var dec struct {
		BucketID string `json:"bucketId"`
		Pick     struct {
			Plain struct {
				EngineID string `json:"engineId"`
				URL      string `json:"url"`
			}
		}
	}
	got := readAll(t, resp)
	if err := json.Unmarshal([]byte(got), &dec); err != nil || resp.StatusCode != http.StatusOK || dec.Pick.Plain.EngineID != "e1" || dec.Pick.Plain.URL != e1.url() {
		t.Fatalf("POST /v1/decide = %d %s, want a pick of e1", resp.StatusCode, got)
	}
	resp = post(t, g, "/v1/decide", `{"model":"nope","inputTokens":"1"}`)
	if got := readAll(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, "UNKNOWN_MODEL") {
		t.Errorf("POST /v1/decide unknown model = %d %s, want 400 UNKNOWN_MODEL", resp.StatusCode, got)
	}
	r2, err := http.Get("http://" + g.Addr() + "/v1/admin/engines")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, r2); r2.StatusCode != http.StatusOK || !strings.Contains(got, `"id":"e1"`) {
		t.Errorf("GET /v1/admin/engines = %d %s, want e1 listed", r2.StatusCode, got)
	}
}

// TestBodyTypeErrorsNameTheField: a body of the wrong shape is a 400 that names the field, the
// JSON type it must have and what came instead — never Go type names — and reaches no engine.
func TestBodyTypeErrorsNameTheField(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	g := startGateway(t, d, nil)
	tests := []struct {
		name, path, body, code, param string
		says                          []string
	}{
		{"empty", routeChat, "", "invalid_json", "", []string{"empty"}},
		{"blank", routeChat, " \n\t", "invalid_json", "", []string{"empty"}},
		{"array", routeChat, `[1,2]`, "invalid_json", "", []string{"must be a JSON object", "array"}},
		{"string", routeCompletions, `"hi"`, "invalid_json", "", []string{"must be a JSON object", "string"}},
		{"truncated", routeChat, `{"model":"m","messages":[`, "invalid_json", "", []string{"not valid JSON"}},
		{"model a number", routeChat, `{"model":5,"messages":[{"role":"user","content":"x"}]}`, "invalid_type", "model", []string{`"model" must be a string`, "number"}},
		{"stream a string", routeChat, `{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}`, "invalid_type", "stream", []string{`"stream" must be a boolean`, "string"}},
		{"max_tokens too big", routeCompletions, `{"model":"m","prompt":"x","max_tokens":1e30}`, "invalid_type", "max_tokens", []string{`"max_tokens" must be an integer`, "1e30"}},
		{"max_tokens fractional", routeCompletions, `{"model":"m","prompt":"x","max_tokens":1.5}`, "invalid_type", "max_tokens", []string{`"max_tokens" must be an integer`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, g, tt.path, tt.body)
			got := readAll(t, resp)
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Param   *string `json:"param"`
					Code    string  `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(got), &e); err != nil {
				t.Fatalf("POST %q = %d %s: not an OpenAI error: %v", tt.body, resp.StatusCode, got, err)
			}
			param := ""
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if resp.StatusCode != http.StatusBadRequest || e.Error.Code != tt.code || param != tt.param {
				t.Errorf("POST %q = %d code %q param %q, want 400 %q %q (%s)", tt.body, resp.StatusCode, e.Error.Code, param, tt.code, tt.param, got)
			}
			for _, s := range tt.says {
				if !strings.Contains(e.Error.Message, s) {
					t.Errorf("message %q does not say %q", e.Error.Message, s)
				}
			}
			for _, goName := range []string{"gateway.", "int64", "Go struct", "Go value"} {
				if strings.Contains(e.Error.Message, goName) {
					t.Errorf("message %q leaks the Go name %q", e.Error.Message, goName)
				}
			}
		})
	}
	if n := len(e1.requests()); n != 0 {
		t.Errorf("engine got %d requests, want 0", n)
	}
	waitLeases(t, d)
}

func TestReleaseBoundedByBothTimeouts(t *testing.T) {
	// Release is bounded by -release-timeout and by the decider client's per-call
	// -decide-timeout, whichever is shorter: the deadline the decider receives says so.
	e1 := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	for _, tc := range []struct{ decide, release time.Duration }{
		{decide: 3 * time.Second, release: time.Minute},
		{decide: time.Minute, release: 3 * time.Second},
		{decide: 3 * time.Second, release: 3 * time.Second},
	} {
		rd := startRecordingDecider(t, d)
		g := startGatewayAt(t, rd.addr, func(c *Config) { c.DecideTimeout, c.ReleaseTimeout = tc.decide, tc.release })
		readAll(t, post(t, g, routeChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		waitLeases(t, d)
		left := rd.releaseDeadlines()
		if len(left) != 1 || left[0] <= 0 || left[0] > 3*time.Second {
			t.Fatalf("decide %v, release %v: Release arrived with %v left, want one call with (0, 3s]", tc.decide, tc.release, left)
		}
	}
}
