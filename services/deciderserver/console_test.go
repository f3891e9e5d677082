package deciderserver

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/testrun"
	"github.com/sluicehq/sluice/services/deciderserver/console"
)

// consoleGet reads a console endpoint with an optional bearer token.
func consoleGet(t *testing.T, srv *Server, path, token string) (int, map[string]any) {
	t.Helper()
	return restCall(t, srv, http.MethodGet, path, token, "")
}

// TestConsoleReadRules holds the console's data to the admin API's read rule: a viewer or
// admin token when the decider has tokens, the decide token refused, the page itself open.
func TestConsoleReadRules(t *testing.T) {
	cfg := fileConfig(t)
	cfg.DecideToken = "decide-secret-1"
	srv := startWith(t, cfg)
	for _, tc := range []struct {
		name, path, token string
		status            int
		reason            string
	}{
		{"page without a token", "/ui/", "", http.StatusOK, ""},
		{"asset without a token", "/ui/console.js", "", http.StatusOK, ""},
		{"data without a token", "/ui/api/fleet", "", http.StatusUnauthorized, "TOKEN_MISSING"},
		{"data with an unknown token", "/ui/api/fleet", "nope", http.StatusUnauthorized, "TOKEN_INVALID"},
		{"data with the decide token", "/ui/api/buckets", "decide-secret-1", http.StatusForbidden, "ROLE_NOT_ALLOWED"},
		{"data with the viewer token", "/ui/api/fleet", viewerToken, http.StatusOK, ""},
		{"data with the admin token", "/ui/api/cache", adminToken, http.StatusOK, ""},
		{"stream without a token", "/ui/api/decisions/stream", "", http.StatusUnauthorized, "TOKEN_MISSING"},
		{"unknown endpoint", "/ui/api/nope", viewerToken, http.StatusNotFound, "NOT_FOUND"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, raw := restRaw(t, srv, http.MethodGet, tc.path, "", bearerHeader(tc.token)...)
			if resp.StatusCode != tc.status {
				t.Fatalf("GET %s = %d %s, want %d", tc.path, resp.StatusCode, raw, tc.status)
			}
			if tc.reason != "" && !strings.Contains(string(raw), `"reason":"`+tc.reason+`"`) {
				t.Errorf("GET %s body %s lacks reason %s", tc.path, raw, tc.reason)
			}
		})
	}
	resp, raw := restRaw(t, srv, http.MethodGet, "/ui/", "")
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("page CSP = %q, want default-src 'self' (nothing from elsewhere)", csp)
	}
	if !strings.Contains(string(raw), `<script src="console.js"`) {
		t.Errorf("page does not load its own script: %s", raw)
	}
	// Writes are not the console's: they go through the admin API.
	if resp, raw := restRaw(t, srv, http.MethodPost, "/ui/api/fleet", "{}", bearerHeader(adminToken)...); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/api/fleet = %d %s, want 405", resp.StatusCode, raw)
	}
}

// TestConsoleOff: -console=false serves nothing at /ui/.
func TestConsoleOff(t *testing.T) {
	cfg := fileConfig(t)
	cfg.Console = false
	srv := startWith(t, cfg)
	for _, p := range []string{"/ui/", "/ui/api/fleet"} {
		if resp, _ := restRaw(t, srv, http.MethodGet, p, "", bearerHeader(adminToken)...); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s with the console off = %d, want 404", p, resp.StatusCode)
		}
	}
}

// TestConsoleFleetQuery pages, sorts and filters the fleet on the server and refuses bad
// parameters naming them.
func TestConsoleFleetQuery(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	code, body := consoleGet(t, srv, "/ui/api/fleet?sort=-id&limit=2&offset=1", viewerToken)
	if code != http.StatusOK {
		t.Fatalf("fleet: %d %v", code, body)
	}
	rows := body["rows"].([]any)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.(map[string]any)["id"].(string))
	}
	if strings.Join(ids, ",") != "d1,a2" || body["matched"].(float64) != 4 {
		t.Errorf("fleet sort=-id offset=1 limit=2 = %v (matched %v), want d1,a2 of 4", ids, body["matched"])
	}
	// Without KV ingestion there is no per-engine block count (absent, not 0).
	if _, ok := rows[0].(map[string]any)["kv_blocks"]; ok {
		t.Errorf("row %v has kv_blocks without KV ingestion", rows[0])
	}
	summary := body["summary"].(map[string]any)
	if summary["engines"].(float64) != 4 || summary["by_role"].(map[string]any)["plain"].(float64) != 2 {
		t.Errorf("summary = %v, want 4 engines, 2 plain", summary)
	}
	if code, body := consoleGet(t, srv, "/ui/api/fleet?role=prefill", viewerToken); code != http.StatusOK || body["matched"].(float64) != 1 {
		t.Errorf("fleet role=prefill = %d %v, want 1 match", code, body)
	}
	if code, body := consoleGet(t, srv, "/ui/api/fleet?q=A2", viewerToken); code != http.StatusOK || body["matched"].(float64) != 1 {
		t.Errorf("fleet q=A2 = %d %v, want 1 match (case-insensitive)", code, body)
	}
	for _, bad := range []struct{ query, names string }{
		{"limit=-1", "limit"}, {"offset=x", "offset"}, {"sort=colour", "sort"}, {"health=fine", "health"},
	} {
		code, body := consoleGet(t, srv, "/ui/api/fleet?"+bad.query, viewerToken)
		if code != http.StatusBadRequest || !strings.Contains(body["message"].(string), bad.names) {
			t.Errorf("fleet?%s = %d %v, want 400 naming %s", bad.query, code, body, bad.names)
		}
	}
}

// TestConsoleTailAndCounters: Decide calls over gRPC land in the tail (with their explanation
// when asked), in the stream, and in the buckets' counters (fallbacks when the first bucket's
// cap refuses).
func TestConsoleTailAndCounters(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	c := sluicev1.NewDeciderServiceClient(grpcConn(t, srv))

	// Open the stream first; it must deliver the calls below.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+srv.HTTPAddr()+"/ui/api/decisions/stream?model=chat", nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, ct)
	}
	events := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- data
			}
		}
		close(events)
	}()

	// a1 (bucket short) admits one lease: the second call falls back to long.
	for i, id := range []string{"r-1", "r-2"} {
		out, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "chat", InputTokens: 100, RequestId: id, Explain: i == 1})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"short", "long"}[i]; out.GetBucketId() != want {
			t.Fatalf("Decide %s bucket = %s, want %s", id, out.GetBucketId(), want)
		}
	}
	if _, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "pd-chat", InputTokens: 10, RequestId: "r-pd", DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "nope", InputTokens: 10, RequestId: "r-bad"}); err == nil {
		t.Fatal("Decide of an unknown model succeeded")
	}

	got := map[string]map[string]any{}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case data, ok := <-events:
			if !ok {
				t.Fatalf("stream ended; got %v", got)
			}
			var rec map[string]any
			if json.Unmarshal([]byte(data), &rec) == nil && rec["request_id"] != nil {
				got[rec["request_id"].(string)] = rec
			}
		case <-deadline:
			t.Fatalf("stream delivered %v within 10s, want r-1 and r-2", got)
		}
	}
	if got["r-1"]["engine"] != "a1" || got["r-2"]["engine"] != "a2" || got["r-2"]["has_explain"] != true {
		t.Errorf("streamed records = %v", got)
	}
	if _, other := got["r-pd"]; other {
		t.Errorf("the stream filtered on model chat delivered pd-chat: %v", got)
	}

	code, body := consoleGet(t, srv, "/ui/api/decisions", viewerToken)
	if code != http.StatusOK {
		t.Fatalf("decisions: %d %v", code, body)
	}
	recs := body["decisions"].([]any)
	if len(recs) != 4 {
		t.Fatalf("decisions = %d records, want 4: %v", len(recs), recs)
	}
	last := recs[3].(map[string]any)
	if last["error"] != "UNKNOWN_MODEL" || last["request_id"] != "r-bad" {
		t.Errorf("last record = %v, want the UNKNOWN_MODEL refusal", last)
	}
	seq := int(recs[1].(map[string]any)["seq"].(float64))
	code, one := consoleGet(t, srv, "/ui/api/decisions/"+strconv.Itoa(seq), viewerToken)
	explain, _ := one["explain"].(map[string]any)
	if code != http.StatusOK || explain == nil || len(explain["attempts"].([]any)) != 2 {
		t.Errorf("decision %d = %d %v, want its explanation with two bucket attempts", seq, code, one)
	}
	if code, _ := consoleGet(t, srv, "/ui/api/decisions/99999", viewerToken); code != http.StatusNotFound {
		t.Errorf("a decision not in the tail = %d, want 404", code)
	}
	if code, _ := consoleGet(t, srv, "/ui/api/decisions/x", viewerToken); code != http.StatusBadRequest {
		t.Errorf("decision x = %d, want 400", code)
	}

	// The counters fold the tail in the background.
	var buckets map[string]map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, body := consoleGet(t, srv, "/ui/api/buckets", viewerToken)
		buckets = map[string]map[string]any{}
		for _, b := range body["buckets"].([]any) {
			bm := b.(map[string]any)
			buckets[bm["spec"].(map[string]any)["id"].(string)] = bm["counters"].(map[string]any)
		}
		if body["decisions"].(float64) == 4 || time.Now().After(deadline) {
			if errs := body["errors"].(map[string]any); errs["UNKNOWN_MODEL"] != 1.0 {
				t.Errorf("errors = %v, want one UNKNOWN_MODEL", errs)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if buckets["short"]["decisions"] != 1.0 || buckets["long"]["decisions"] != 1.0 || buckets["long"]["fallbacks"] != 1.0 ||
		buckets["short"]["fallbacks"] != 0.0 || buckets["pd"]["decisions"] != 1.0 {
		t.Errorf("bucket counters = %v, want short 1, long 1 with 1 fallback, pd 1", buckets)
	}
	// r-2 asked for an explanation: its refusal in short (a1 at its cap) is counted there.
	if rj := buckets["short"]["rejections"].(map[string]any); rj["max_inflight_requests"] != 1.0 {
		t.Errorf("short's rejections by cap = %v, want max_inflight_requests 1 (from r-2's explanation)", rj)
	}
}

// TestConsoleStreamEndsAtShutdown: an open decision stream does not hold the decider's
// graceful drain: the stream ends and Run returns well before the shutdown deadline.
func TestConsoleStreamEndsAtShutdown(t *testing.T) {
	cfg := fileConfig(t)
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.ShutdownTimeout = time.Minute
	srv, err := New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+srv.HTTPAddr()+"/ui/api/decisions/stream", nil)
		req.Header.Set("Authorization", "Bearer "+viewerToken)
		if resp, err = http.DefaultClient.Do(req); err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream: %v %v", resp, err)
		}
	}
	defer resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(testrun.StopTimeout):
		t.Fatalf("Run still draining %v after cancel with a console stream open (shutdown timeout %v)", testrun.StopTimeout, cfg.ShutdownTimeout)
	}
}

// TestConsoleStreamSkips: a reader far behind (more decisions than the ring holds, and more in
// one tick than a batch) is told how many it missed instead of slowing anything down.
func TestConsoleStreamSkips(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	for i := range console.TailSize + 952 {
		srv.console.tail.Put(&console.Record{Model: "chat", RequestID: "burst-" + strconv.Itoa(i)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+srv.HTTPAddr()+"/ui/api/decisions/stream?after=0", nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var event string
	decisions := 0
	for sc.Scan() {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			event = e
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		switch event {
		case "decision":
			decisions++
		case "skipped":
			var s struct{ Skipped, Next uint64 }
			if err := json.Unmarshal([]byte(data), &s); err != nil {
				t.Fatal(err)
			}
			// 952 overwritten before the read, 2048 - 250 beyond the first batch.
			if want := uint64(952 + console.TailSize - 250); s.Skipped != want || decisions != 250 || s.Next != uint64(console.TailSize+952) {
				t.Errorf("skipped %d (next %d) after %d decisions; want %d skipped, next %d, after 250", s.Skipped, s.Next, decisions, want, console.TailSize+952)
			}
			return
		}
	}
	t.Fatalf("stream ended without a skipped event (%d decisions): %v", decisions, sc.Err())
}
