package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/services/deciderserver"
)

// startShardDecider runs a real decider of shard on the configuration doc.
func startShardDecider(t *testing.T, shard, doc string) *deciderserver.Server {
	t.Helper()
	srv, _ := startShardDeciderWith(t, shard, doc, nil)
	return srv
}

// startShardDeciderWith is startShardDecider with edit applied to the decider's config; it
// also returns the configuration file's path.
func startShardDeciderWith(t *testing.T, shard, doc string, edit func(*deciderserver.Config)) (*deciderserver.Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := deciderserver.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath, cfg.ConfigSnapshot, cfg.Shard = "127.0.0.1:0", "127.0.0.1:0", path, "-", shard
	cfg.Health.ProbeInterval = 0
	if edit != nil {
		edit(&cfg)
	}
	srv, err := deciderserver.New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatalf("deciderserver.New: %v\nconfig:\n%s", err, doc)
	}
	run(t, srv.Run)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		resp, err := http.Get("http://" + srv.HTTPAddr() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("decider not ready 10s after Run: %v", err)
		}
	}
	return srv, path
}

// TestGatewayRoutesByShard: the gateway's -decider-addr is a decider of shard a whose
// configuration the gateway may not read (admin reads need a token it does not have), so it
// cannot route up front. A request for shard b's model is refused there with WRONG_SHARD naming
// shard b's decider; the gateway sends it (and its Release) to that decider, which picks shard
// b's engine. Shard a's model still goes to shard a.
func TestGatewayRoutesByShard(t *testing.T) {
	ea, eb := newFakeEngine(t, "ea"), newFakeEngine(t, "eb")
	doc := func(bDeciders string) string {
		return fmt.Sprintf(`workers:
  - {id: ea, url: %q, models: [ma], role: plain}
  - {id: eb, url: %q, models: [mb], role: plain}
buckets:
  - {id: chat, models: [ma, mb], groups: {plain: {}}}
shards:
  - {id: a, models: [ma]}
  - {id: b, models: [mb], deciders: [%s]}
`, ea.url(), eb.url(), bDeciders)
	}
	b := startShardDecider(t, "b", doc(`"127.0.0.1:1"`))
	a, _ := startShardDeciderWith(t, "a", doc(fmt.Sprintf("%q", b.GRPCAddr())), func(c *deciderserver.Config) { c.AdminTokens = "admin-secret" })
	g := startGateway(t, a, nil)
	for i := range 3 {
		body := `{"model":"mb","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
		if resp := post(t, g, routeChat, body); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d for shard b's model = %d %s, want 200", i, resp.StatusCode, readAll(t, resp))
		} else {
			readAll(t, resp)
		}
	}
	if n, m := len(eb.requests()), len(ea.requests()); n != 3 || m != 0 {
		t.Fatalf("engine eb got %d requests and ea %d; want 3 and 0", n, m)
	}
	waitLeases(t, b) // the Releases went to shard b's decider too
	resp := post(t, g, routeChat, `{"model":"ma","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)
	if got := readAll(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(got, `"engine":"ea"`) {
		t.Fatalf("request for shard a's model = %d %s, want 200 from ea", resp.StatusCode, got)
	}
	waitLeases(t, a)
}

// TestGatewayReadsShardMapUpFront: the gateway reads the shards list from its -decider-addr (a
// decider of shard a) before serving, so shard b's model goes straight to shard b's listed
// decider: shard a refuses nothing. When the configuration moves the model into shard a (whose
// deciders are not listed), the next read sends it back to -decider-addr, and shard a serves it
// (shard b would now refuse it, and a refusal without deciders would fail the request).
func TestGatewayReadsShardMapUpFront(t *testing.T) {
	defer func(p time.Duration) { shardMapPoll = p }(shardMapPoll)
	shardMapPoll = 20 * time.Millisecond
	ea, eb := newFakeEngine(t, "ea"), newFakeEngine(t, "eb")
	doc := func(aModels, bModels, bDeciders string) string {
		return fmt.Sprintf(`workers:
  - {id: ea, url: %q, models: [ma], role: plain}
  - {id: eb, url: %q, models: [mb], role: plain}
buckets:
  - {id: chat, models: [ma, mb], groups: {plain: {}}}
shards:
  - {id: a, models: [%s]}
  - {id: b, models: [%s], deciders: [%s]}
`, ea.url(), eb.url(), aModels, bModels, bDeciders)
	}
	fast := func(c *deciderserver.Config) { c.ConfigPoll = 20 * time.Millisecond }
	b, bPath := startShardDeciderWith(t, "b", doc("ma", "mb", `"127.0.0.1:1"`), fast)
	bAddr := fmt.Sprintf("%q", b.GRPCAddr())
	a, aPath := startShardDeciderWith(t, "a", doc("ma", "mb", bAddr), fast)
	g := startGateway(t, a, nil)
	chat := func() (int, string) {
		t.Helper()
		resp := post(t, g, routeChat, `{"model":"mb","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)
		return resp.StatusCode, readAll(t, resp)
	}
	for i := range 3 {
		if code, body := chat(); code != http.StatusOK {
			t.Fatalf("request %d for shard b's model = %d %s, want 200", i, code, body)
		}
	}
	if n := len(eb.requests()); n != 3 {
		t.Fatalf("engine eb got %d requests, want 3", n)
	}
	if n := metricValue(t, a.HTTPAddr(), `sluice_decider_wrong_shard_total{owner="b",shard="a"}`); n != 0 {
		t.Errorf("shard a refused shard b's model %v times; the gateway should have routed it to b up front", n)
	}
	waitLeases(t, b)

	// Move mb into shard a (no deciders listed for it) on both deciders.
	moved := doc("ma, mb", "other", bAddr)
	for _, p := range []string{aPath, bPath} {
		if err := os.WriteFile(p+".tmp", []byte(moved), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []*deciderserver.Server{a, b} {
		for deadline := time.Now().Add(10 * time.Second); d.Store().Current().Version < 2; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("decider did not reload the moved configuration within 10s")
			}
		}
	}
	time.Sleep(10 * shardMapPoll) // several reads of the map
	before := metricValue(t, b.HTTPAddr(), `sluice_decider_wrong_shard_total{owner="a",shard="b"}`)
	for i := range 3 {
		if code, body := chat(); code != http.StatusOK {
			t.Fatalf("request %d for mb after it moved to shard a = %d %s, want 200", i, code, body)
		}
	}
	if n := metricValue(t, b.HTTPAddr(), `sluice_decider_wrong_shard_total{owner="a",shard="b"}`) - before; n != 0 {
		t.Errorf("shard b refused mb %v times after the move; the gateway should send it to -decider-addr", n)
	}
	waitLeases(t, a)
}
