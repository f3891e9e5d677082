package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/testrun"
	"github.com/sluicehq/sluice/services/deciderserver"
	"github.com/sluicehq/sluice/services/devstack"
	"github.com/sluicehq/sluice/state/loadtable"
)

const (
	adminToken  = "ui-admin-secret"
	viewerToken = "ui-viewer-secret"
)

// syncBuffer is a goroutine-safe buffer for the dev stack's banner.
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

// startDevStack runs `sluice dev` in process on free ports and returns the gateway URL, the
// console URL and the admin token its banner prints.
func startDevStack(t *testing.T) (gateway, consoleURL, token string) {
	t.Helper()
	cfg := devstack.DefaultConfig()
	cfg.GatewayAddr, cfg.DeciderGRPCAddr, cfg.DeciderHTTPAddr, cfg.LinkAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Speed = 50
	var out syncBuffer
	testrun.Background(t, func(ctx context.Context) error { return devstack.Run(ctx, slog.New(slog.DiscardHandler), cfg, &out) })
	gwRE := regexp.MustCompile(`gateway \(OpenAI API \+ REST\)\s+(http://\S+)`)
	uiRE := regexp.MustCompile(`console \(web UI\)\s+(http://\S+/ui/)`)
	tokRE := regexp.MustCompile(`(?m)^\s*admin token\s+(\S+)`)
	for deadline := time.Now().Add(60 * time.Second); ; {
		g, u, k := gwRE.FindStringSubmatch(out.String()), uiRE.FindStringSubmatch(out.String()), tokRE.FindStringSubmatch(out.String())
		if g != nil && u != nil && k != nil {
			return g[1], u[1], k[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice dev printed no gateway URL, console URL and admin token within 60s:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chat sends one chat completion through the gateway with the request id, retrying while the
// engines are still unproven (their first health probe), and returns the status.
func chat(t *testing.T, gateway, model, requestID string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"console test %s"}],"max_tokens":4}`, model, requestID)
	var last string
	for range 100 {
		req, _ := http.NewRequest(http.MethodPost, gateway+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", requestID)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("chat completion %s through the gateway: %s", requestID, last)
}

// chatLong sends a chat completion with a prompt long enough (>= 256 tokens) for cache-aware routing.
func chatLong(t *testing.T, gateway, requestID string) {
	t.Helper()
	prompt := strings.Repeat("the console shows which engine holds this prefix ", 40)
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":2}`, devstack.PlainModel, prompt)
	req, _ := http.NewRequest(http.MethodPost, gateway+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", requestID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("long chat completion: %d %s", resp.StatusCode, b)
	}
}

// TestConsoleDevStack drives the console of `sluice dev` in Chromium: the fleet lists the
// simulated engines, the buckets page the generated buckets, a request through the gateway
// appears in the live decision tail with its detail, the dry-run form explains a Decide, and
// no page logs an error. Every page is saved as a screenshot.
func TestConsoleDevStack(t *testing.T) {
	gateway, consoleURL, token := startDevStack(t)
	tab, b := newBrowser(t)

	// sluice dev has an admin token (printed in its banner), so the console asks for one;
	// an admin token reads what a viewer token does.
	b.run(tab, "fleet page", 60*time.Second, chromedp.Navigate(consoleURL+"#/fleet"),
		poll(`/viewer token/.test(document.getElementById('banner').textContent)`),
		setValue(`#token`, token), click(`#token-form button`), waitFor(`body[data-rendered="fleet"]`))
	for _, e := range b.takeErrors() { // the reads before the token was entered
		if !strings.Contains(e, "401") {
			t.Errorf("unexpected page error before the token: %s", e)
		}
	}
	for _, id := range []string{"plain-1", "plain-2", "prefill-1", "decode-1"} {
		b.run(tab, "fleet lists "+id, 30*time.Second, waitFor(fmt.Sprintf(`#fleet-table [data-engine=%q]`, id)))
	}
	cards := b.text(tab, "#fleet-cards")
	if !strings.Contains(cards, "4\nengines") && !strings.Contains(cards, "4engines") && !strings.Contains(cards, "4 engines") {
		t.Errorf("fleet summary does not count 4 engines: %q", cards)
	}
	// The fleet's load comes in over engine -> ZMQ -> enginelink -> Kafka: wait for it.
	b.run(tab, "fleet load known", 30*time.Second, poll(`document.querySelector('#fleet-cards') && !/[1-9]\d*\s*load unknown/.test(document.querySelector('#fleet-cards').innerText)`))
	b.screenshot(tab, "fleet")
	b.noErrors("fleet")

	b.run(tab, "buckets page", 30*time.Second, chromedp.Navigate(consoleURL+"#/buckets"),
		waitFor(`body[data-rendered="buckets"]`), waitFor(`[data-bucket="plain"]`), waitFor(`[data-bucket="pd"]`))
	b.screenshot(tab, "buckets")
	b.noErrors("buckets")

	b.run(tab, "decisions page", 30*time.Second, chromedp.Navigate(consoleURL+"#/decisions"), waitFor(`body[data-rendered="decisions"]`))
	// Through the gateway while the tail is open: it must arrive over the stream.
	reqID := fmt.Sprintf("ui-test-%d", time.Now().UnixNano())
	chat(t, gateway, devstack.PlainModel, reqID)
	chat(t, gateway, devstack.PDModel, reqID+"-pd")
	row := fmt.Sprintf(`#tail-table [data-request=%q]`, reqID)
	b.run(tab, "the gateway's request appears in the tail", 30*time.Second, waitFor(row), waitFor(fmt.Sprintf(`#tail-table [data-request=%q]`, reqID+"-pd")))
	b.run(tab, "open the decision", 30*time.Second, click(row), waitFor(`#detail dl`))
	rowText := b.text(tab, row)
	if !strings.Contains(rowText, devstack.PlainModel) || !strings.Contains(rowText, "plain") {
		t.Errorf("tail row of %s = %q, want model %s in bucket plain", reqID, rowText, devstack.PlainModel)
	}
	// The dry-run form explains a Decide with the candidates considered.
	b.run(tab, "dry-run Decide", 30*time.Second,
		setValue(`#decide-form input[name="model"]`, devstack.PlainModel),
		setValue(`#decide-form input[name="input_tokens"]`, "1200"),
		click(`#decide-form button`),
		waitFor(`#decide-out .explain details`))
	pick := b.text(tab, `#decide-out .pick`)
	if !strings.HasPrefix(pick, "plain-") {
		t.Errorf("dry-run pick = %q, want a plain engine", pick)
	}
	// The filter narrows the tail to one model.
	b.run(tab, "filter by model", 30*time.Second,
		setValue(`#f-model`, devstack.PDModel),
		eval(`document.getElementById('f-model').dispatchEvent(new Event('change'))`),
		poll(fmt.Sprintf(`document.querySelector('#tail-table [data-request=%q]') === null && document.querySelector('#tail-table [data-request=%q]') !== null`, reqID, reqID+"-pd")))
	b.screenshot(tab, "decisions")
	b.noErrors("decisions")

	// Repeated long prompts: the engines' KV events reach the index, later picks are prefix hits.
	for i := range 12 {
		chatLong(t, gateway, fmt.Sprintf("%s-long-%d", reqID, i))
		time.Sleep(50 * time.Millisecond)
	}
	b.run(tab, "cache page", 30*time.Second, chromedp.Navigate(consoleURL+"#/cache"), waitFor(`body[data-rendered="cache"]`),
		waitFor(`#cache-table [data-engine]`))
	b.screenshot(tab, "cache")
	b.noErrors("cache")

	// The same KV events, per engine on the fleet: an engine that served the long prompts holds
	// blocks in the index, and every engine has a count.
	b.run(tab, "fleet: KV blocks per engine", 30*time.Second, chromedp.Navigate(consoleURL+"#/fleet"), waitFor(`body[data-rendered="fleet"]`),
		poll(`[...document.querySelectorAll('#fleet-table [data-engine^="plain-"] .blocks')].some((c) => parseInt(c.textContent.replace(/,/g, ''), 10) > 0)`))
	blocks := value(tab, b, "KV blocks per engine", chromedp.Evaluate[string](
		`[...document.querySelectorAll('#fleet-table [data-engine]')].map((r) => r.dataset.engine + '=' + r.querySelector('.blocks').textContent).join(' ')`))
	if strings.Contains(blocks, "—") {
		t.Errorf("fleet KV blocks per engine = %q; want a count for every engine (the dev stack ingests KV events)", blocks)
	}
	cards = b.text(tab, "#fleet-cards")
	if !regexp.MustCompile(`[1-9][\d,]*\s*KV blocks indexed`).MatchString(cards) {
		t.Errorf("fleet cards = %q, want a non-zero KV blocks indexed", cards)
	}
	b.run(tab, "fleet: one engine's ranks", 30*time.Second, click(`#fleet-table [data-engine="plain-1"]`), waitFor(`#rank-table tr[data-rank="0"]`))
	if d := b.text(tab, "#fleet-detail"); !strings.Contains(d, "KV blocks indexed") || !strings.Contains(d, "fresh") {
		t.Errorf("plain-1 detail = %q, want its blocks and a fresh rank 0", d)
	}
	b.screenshot(tab, "fleet-blocks")
	b.noErrors("fleet blocks")

	b.run(tab, "history page", 30*time.Second, chromedp.Navigate(consoleURL+"#/history"), waitFor(`body[data-rendered="history"]`),
		waitFor(`#versions [data-version="1"]`), click(`#versions [data-version="1"]`), waitFor(`#diff span`))
	b.screenshot(tab, "history")
	b.noErrors("history")
}

// fleetDecider runs a decider on a file configuration of n plain engines (model m) with
// admin and viewer tokens, every engine reporting load, and returns it with its console URL.
func fleetDecider(t *testing.T, n int) (*deciderserver.Server, string) {
	t.Helper()
	var sb strings.Builder
	sb.WriteString("workers:\n")
	for i := range n {
		fmt.Fprintf(&sb, "  - {id: e%04d, url: \"http://e%04d.test:8000\", models: [m], role: plain, dp_size: %d}\n", i, i, 1+i%2)
	}
	sb.WriteString("buckets:\n  - {id: short, models: [m], limits: {max: 4096}, groups: {plain: {policy: {type: load_based, admission: {max_running_requests: 8}}}}}\n")
	sb.WriteString("  - {id: long, models: [m], groups: {plain: {policy: {type: power_of_two}}}}\n")
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := deciderserver.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath = "127.0.0.1:0", "127.0.0.1:0", path
	cfg.Health.ProbeInterval = 0
	cfg.AdminTokens, cfg.ViewerTokens = adminToken, viewerToken
	srv, err := deciderserver.New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	testrun.Background(t, srv.Run)
	// Every engine reports its load each second, like a fleet behind enginelink. Odd engines
	// have two data-parallel ranks: rank 1's reports are 1.5 s older and its KV usage differs;
	// e0003's rank 1 is stuck (its reports are 10 s old, beyond the 5 s freshness), so e0003's
	// summed load is unknown and only its ranks say why.
	start := time.Now()
	report := func(seq uint64) error {
		now := time.Now()
		for i := range n {
			ranks := int32(1 + i%2)
			for r := range ranks {
				at, used := now, int64(i*37)%1000
				if r == 1 {
					at, used = now.Add(-1500*time.Millisecond), int64(i*37+500)%1000
				}
				if i == 3 && r == 1 {
					at = start.Add(-10 * time.Second)
				}
				err := srv.LoadTable().Apply(loadtable.Report{EngineID: fmt.Sprintf("e%04d", i), Epoch: 1, Seq: seq, Rank: r, Ranks: ranks,
					CapturedAt: at, Running: int64(i % 11), Waiting: int64(i % 3), KVUsedTokens: used, KVCapacityTokens: 1000})
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := report(1); err != nil {
		t.Fatal(err)
	}
	testrun.Background(t, func(ctx context.Context) error {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for seq := uint64(2); ; seq++ {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
				if err := report(seq); err != nil {
					return err
				}
			}
		}
	})
	base := "http://" + srv.HTTPAddr() + "/ui/"
	for deadline := time.Now().Add(10 * time.Second); ; {
		if resp, err := http.Get("http://" + srv.HTTPAddr() + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("decider not ready within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return srv, base
}

// decide sends n Decide calls over gRPC (short prompts in bucket short; some long in long).
func decide(t *testing.T, srv *deciderserver.Server, n int) {
	t.Helper()
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := sluicev1.NewDeciderServiceClient(conn)
	for i := range n {
		in := int64(100 + i*13)
		if i%5 == 0 {
			in = 9000
		}
		if _, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "m", InputTokens: in, RequestId: fmt.Sprintf("bench-%d", i), DryRun: true}); err != nil {
			t.Fatalf("Decide: %v", err)
		}
	}
}

// restJSON calls the decider's REST API with a bearer token and decodes the answer.
func restJSON(t *testing.T, method, url, token, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
	return resp.StatusCode
}

// TestConsoleTokensAndRollback holds the console to the admin API's rules in the browser: no
// data without the viewer token (the page says so), the viewer token reads, a rollback needs
// the admin token the page asks for, and a rollback from the page changes the version in force.
func TestConsoleTokensAndRollback(t *testing.T) {
	srv, base := fleetDecider(t, 64)
	api := "http://" + srv.HTTPAddr()
	// A second version to roll back from: cap the short bucket tighter.
	var cur struct {
		Version      string `json:"version"`
		DocumentJSON string `json:"documentJson"`
	}
	if code := restJSON(t, http.MethodGet, api+"/v1/admin/config", viewerToken, "", &cur); code != http.StatusOK {
		t.Fatalf("GET config: %d", code)
	}
	doc := strings.Replace(cur.DocumentJSON, `"max_running_requests":8`, `"max_running_requests":4`, 1)
	if doc == cur.DocumentJSON {
		t.Fatalf("document has no max_running_requests 8 to change: %s", cur.DocumentJSON)
	}
	body, _ := json.Marshal(map[string]string{"document": doc, "basedOnVersion": cur.Version})
	if code := restJSON(t, http.MethodPut, api+"/v1/admin/config", adminToken, string(body), nil); code != http.StatusOK {
		t.Fatalf("PUT config: %d", code)
	}
	tab, b := newBrowser(t)
	// Without a token both of the page's first reads (the fleet, and the version in the header)
	// are refused; wait for both to settle so that no refusal arrives after the token.
	b.run(tab, "without a token", 30*time.Second, chromedp.Navigate(base+"#/fleet"),
		poll(`!document.getElementById('banner').hidden && /viewer token/.test(document.getElementById('banner').textContent)`),
		waitFor(`#version[data-state="refused"]`))
	b.run(tab, "viewer token", 30*time.Second, setValue(`#token`, viewerToken),
		click(`#token-form button`), waitFor(`body[data-rendered="fleet"]`), waitFor(`[data-engine="e0000"]`),
		poll(`/64 of 64 engines/.test(document.getElementById('fleet-count').textContent)`),
		poll(`document.getElementById('version').textContent === 'config v2'`))
	// The refused reads, and nothing else. Taken after the token, so that a refresh the page
	// sent just before it counts here, not against a later step.
	for _, e := range b.takeErrors() {
		if !strings.Contains(e, "401") {
			t.Errorf("unexpected page error without a token: %s", e)
		}
	}
	b.run(tab, "history", 30*time.Second, chromedp.Navigate(base+"#/history"), waitFor(`body[data-rendered="history"]`),
		waitFor(`#versions [data-version="2"]`), click(`#versions [data-version="1"]`), waitFor(`#diff span`))
	diff := b.text(tab, `#diff`)
	if !strings.Contains(diff, `"max_running_requests": 8`) {
		t.Errorf("version 1 (the first, shown whole) lacks its cap of 8: %s", clip(diff, 2000))
	}
	// Version 2's diff shows the change.
	b.run(tab, "diff of version 2", 10*time.Second, click(`#versions [data-version="2"]`),
		poll(`[...document.querySelectorAll('#diff span.add')].some((s) => s.textContent.includes('"max_running_requests": 4'))`))
	b.screenshot(tab, "history-diff")
	// A viewer token cannot roll back; the page shows the refusal.
	b.run(tab, "rollback with the viewer token", 30*time.Second, click(`#versions [data-version="1"]`),
		waitFor(`#rollback-box:not([hidden])`), setValue(`#admin-token`, viewerToken),
		click(`#rollback-btn`), poll(`/ROLE_NOT_ALLOWED/.test(document.getElementById('rollback-out').textContent)`))
	for _, e := range b.takeErrors() {
		if !strings.Contains(e, "403") {
			t.Errorf("unexpected page error on the refused rollback: %s", e)
		}
	}
	b.run(tab, "rollback with the admin token", 30*time.Second, setValue(`#admin-token`, adminToken),
		click(`#rollback-btn`), poll(`/now version 3/.test(document.getElementById('rollback-out').textContent)`),
		waitFor(`#versions [data-version="3"]`), poll(`document.getElementById('version').textContent === 'config v3'`))
	b.screenshot(tab, "history-rollback")
	b.noErrors("rollback")
	var after struct {
		Version      string `json:"version"`
		DocumentJSON string `json:"documentJson"`
	}
	if code := restJSON(t, http.MethodGet, api+"/v1/admin/config", viewerToken, "", &after); code != http.StatusOK {
		t.Fatalf("GET config after rollback: %d", code)
	}
	if after.Version != "3" || !strings.Contains(after.DocumentJSON, `"max_running_requests":8`) {
		t.Errorf("after the page's rollback: version %s, document %s; want version 3 with the cap of version 1", after.Version, after.DocumentJSON)
	}
	// The admin token lives in the page's memory only: nothing in storage holds it.
	stored := value(tab, b, "storage", chromedp.Evaluate[string](`JSON.stringify(Object.assign({}, sessionStorage)) + JSON.stringify(Object.assign({}, localStorage)) + document.cookie`))
	if strings.Contains(stored, adminToken) {
		t.Errorf("the admin token was stored: %s", stored)
	}
}

// TestConsoleFleetRanks shows load per data-parallel rank in the browser: one bar per rank in
// the table (a stuck rank marked), and a click opens the engine's ranks with their own ages
// and KV usage; an engine whose summed load is unknown because one rank is stuck says so.
func TestConsoleFleetRanks(t *testing.T) {
	_, base := fleetDecider(t, 64)
	tab, b := newBrowser(t)
	b.run(tab, "fleet", 30*time.Second, chromedp.Navigate(base+"#/fleet"), setValue(`#token`, viewerToken),
		click(`#token-form button`), waitFor(`body[data-rendered="fleet"]`), waitFor(`[data-engine="e0003"]`))
	for _, e := range b.takeErrors() { // the reads before the token was entered
		if !strings.Contains(e, "401") {
			t.Errorf("unexpected page error before the token: %s", e)
		}
	}
	if n := b.count(tab, `[data-engine="e0001"] .ranks i`); n != 2 {
		t.Errorf("e0001 (dp 2) shows %d rank bars, want 2", n)
	}
	if n := b.count(tab, `[data-engine="e0002"] .ranks i`); n != 1 {
		t.Errorf("e0002 (dp 1) shows %d rank bars, want 1", n)
	}
	if n := b.count(tab, `[data-engine="e0003"] .ranks i.stale[data-rank="1"]`); n != 1 {
		t.Errorf("e0003's stuck rank 1 is not marked stale in the table")
	}
	if c := b.text(tab, `[data-engine="e0003"] .rank-cell`); !strings.Contains(c, "1/2") {
		t.Errorf("e0003 ranks cell = %q, want 1/2 fresh", c)
	}
	b.run(tab, "e0001's ranks", 30*time.Second, click(`#fleet-table [data-engine="e0001"]`), waitFor(`#rank-table tr[data-rank="1"]`))
	cells := func(rank int) []string {
		t.Helper()
		return strings.Split(value(tab, b, "rank row", chromedp.Evaluate[string](fmt.Sprintf(
			`[...document.querySelectorAll('#rank-table tr[data-rank="%d"] td')].map((c) => c.textContent).join('|')`, rank))), "|")
	}
	// Columns: rank, report, age, running, waiting, KV used, KV capacity, KV usage, ...
	r0, r1 := cells(0), cells(1)
	if len(r0) < 8 || len(r1) < 8 {
		t.Fatalf("rank rows = %q, %q", r0, r1)
	}
	if r0[1] != "fresh" || r0[5] != "37" || r0[7] != "3.7%" || r1[1] != "fresh" || r1[5] != "537" || r1[7] != "53.7%" {
		t.Errorf("e0001 ranks = %q / %q; want both fresh, KV used 37 (3.7%%) and 537 (53.7%%)", r0, r1)
	}
	// Rank 1's reports are 1.5 s older than rank 0's: its age shows it.
	age := func(s string) time.Duration {
		d, err := time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(s, " ", ""), "min", "m"))
		if err != nil {
			t.Errorf("age %q: %v", s, err)
		}
		return d
	}
	if a0, a1 := age(r0[2]), age(r1[2]); a1 < 1400*time.Millisecond || a1 <= a0 {
		t.Errorf("e0001 rank ages %s and %s; want rank 1 older, >= 1.5 s", r0[2], r1[2])
	}
	b.screenshot(tab, "fleet-ranks")
	b.run(tab, "e0003's ranks", 30*time.Second, click(`#fleet-table [data-engine="e0003"]`),
		poll(`/^e0003/.test(document.querySelector('#fleet-detail h3').textContent)`), waitFor(`#rank-table tr[data-rank="1"]`))
	if h := b.text(tab, "#fleet-detail h3"); !strings.Contains(h, "summed load unknown") {
		t.Errorf("e0003 detail heading = %q, want the summed load unknown", h)
	}
	if r := cells(1); r[1] != "stale" || age(r[2]) < 10*time.Second {
		t.Errorf("e0003 rank 1 = %q, want stale and >= 10 s old", r)
	}
	// The detail follows its engine when the table scrolls away from it.
	b.run(tab, "scroll away", 30*time.Second, eval(`document.querySelector('#fleet-table .vt-body').scrollTop = 1e9`),
		waitFor(`[data-engine="e0063"]`), poll(`document.querySelector('[data-engine="e0003"]') === null`))
	time.Sleep(2500 * time.Millisecond) // one refresh with e0003 out of the page
	if h := b.text(tab, "#fleet-detail h3"); !strings.HasPrefix(h, "e0003") {
		t.Errorf("after scrolling away: detail heading = %q, want e0003's still", h)
	}
	b.noErrors("fleet ranks")
}

// TestConsoleFirstRender measures every page's first render and weight with fleets of 64 and
// 1,000 engines, fleet sizes and pages interleaved over several rounds; the medians are logged
// and written to first-render.txt in the artifacts directory (figures in BENCHMARKS.md).
func TestConsoleFirstRender(t *testing.T) {
	type target struct {
		n    int
		base string
	}
	var targets []target
	for _, n := range []int{64, 1000} {
		srv, base := fleetDecider(t, n)
		decide(t, srv, 300)
		targets = append(targets, target{n, base})
	}
	tab, b := newBrowser(t)
	pages := []string{"fleet", "buckets", "decisions", "cache", "history"}
	const rounds = 5
	renders, readies, apis := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	weights := map[string]float64{}
	for _, tg := range targets {
		// The history page's two reads are refused (no token yet): wait for both answers and
		// leave the page, so that their errors are collected here and not in round 0.
		b.run(tab, "viewer token", 30*time.Second, chromedp.Navigate(tg.base+"#/history"),
			eval(fmt.Sprintf(`sessionStorage.setItem('sluice.viewerToken', %q)`, viewerToken)),
			poll(`['/v1/admin/versions', '/ui/api/buckets'].every((p) => performance.getEntriesByType('resource').some((e) => e.name.includes(p)))`),
			chromedp.Navigate("about:blank"))
	}
	for _, e := range b.takeErrors() { // the reads before the token was set
		if !strings.Contains(e, "401") {
			t.Errorf("unexpected page error: %s", e)
		}
	}
	loads := 0
	for r := range rounds {
		for _, tg := range targets {
			for _, p := range pages {
				loads++
				f := b.loadPage(tab, tg.base, p, loads)
				key := fmt.Sprintf("%d/%s", tg.n, p)
				if r > 0 { // the first round warms the browser's and the server's caches
					renders[key] = append(renders[key], f.Render)
					readies[key] = append(readies[key], f.Ready)
					apis[key] = append(apis[key], f.API)
				}
				weights[key] = f.Transfer
			}
		}
		b.noErrors(fmt.Sprintf("round %d", r))
	}
	var report strings.Builder
	fmt.Fprintf(&report, "first render (ms from navigation start to the page's data drawn, median of %d loads [min-max]; navigations within the console's origin) and transfer (bytes: document, assets, the page's API reads) per page\n", rounds-1)
	for _, tg := range targets {
		for _, p := range pages {
			key := fmt.Sprintf("%d/%s", tg.n, p)
			v := slices.Sorted(slices.Values(renders[key]))
			med := func(x []float64) float64 { return slices.Sorted(slices.Values(x))[len(x)/2] }
			fmt.Fprintf(&report, "%5d engines %-9s render %6.1f ms [%6.1f-%6.1f]  (document+script ready %5.1f ms, data requests %5.1f ms)  transfer %7.0f B\n",
				tg.n, p, v[len(v)/2], v[0], v[len(v)-1], med(readies[key]), med(apis[key]), weights[key])
		}
	}
	t.Log("\n" + report.String())
	path := filepath.Join(artifactsDir(t), "first-render.txt")
	if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	b.run(tab, "1000-engine fleet", 30*time.Second, chromedp.Navigate(targets[1].base+"#/fleet"), waitFor(`body[data-rendered="fleet"]`),
		waitFor(`[data-engine="e0000"]`))
	if n := b.count(tab, `#fleet-table .vt-row`); n == 0 || n > 200 {
		t.Errorf("fleet of 1000 renders %d rows; want only the rows in view (virtualised)", n)
	}
	// Scrolling to the end fetches that window from the server.
	b.run(tab, "scroll to the last engine", 30*time.Second,
		eval(`document.querySelector('#fleet-table .vt-body').scrollTop = 1e9`), waitFor(`[data-engine="e0999"]`))
	b.screenshot(tab, "fleet-1000")
	b.run(tab, "1000-engine buckets", 30*time.Second, chromedp.Navigate(targets[1].base+"#/buckets"), waitFor(`body[data-rendered="buckets"]`))
	b.screenshot(tab, "buckets-1000")
	b.run(tab, "1000-engine cache", 30*time.Second, chromedp.Navigate(targets[1].base+"#/cache"), waitFor(`body[data-rendered="cache"]`))
	b.screenshot(tab, "cache-1000")
	b.noErrors("1000 engines")
}
