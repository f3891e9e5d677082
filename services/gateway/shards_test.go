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
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := deciderserver.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath, cfg.ConfigSnapshot, cfg.Shard = "127.0.0.1:0", "127.0.0.1:0", path, "-", shard
	cfg.Health.ProbeInterval = 0
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
	return srv
}

// TestGatewayRoutesByShard: the gateway's -decider-addr is a decider of shard a. A request for
// shard b's model is refused there with WRONG_SHARD naming shard b's decider; the gateway
// sends it (and its Release) to that decider, which picks shard b's engine. Shard a's model
// still goes to shard a.
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
	a := startShardDecider(t, "a", doc(fmt.Sprintf("%q", b.GRPCAddr())))
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
