package devstack

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/services/ctl"
)

const testToken = "dev-test-token"

// startDev runs the dev stack on free ports until the test ends and returns its banner once
// it is printed.
func startDev(t *testing.T, edit func(*Config)) string {
	t.Helper()
	cfg := DefaultConfig()
	cfg.GatewayAddr, cfg.DeciderGRPCAddr, cfg.DeciderHTTPAddr, cfg.LinkAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Speed = 50
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- Run(ctx, slog.New(slog.DiscardHandler), cfg, &out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run after cancel: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("dev stack did not stop within 30s of cancellation")
		}
	})
	waitUntil(t, 30*time.Second, "the banner", func() (bool, string) {
		return strings.Contains(out.String(), "Try:"), out.String()
	})
	return out.String()
}

func bannerField(t *testing.T, banner, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("banner lacks %s:\n%s", re, banner)
	}
	return m[1]
}

// chatUntilOK posts a chat until the engines are candidates (their first health probe).
func chatUntilOK(t *testing.T, gateway, body string, header ...string) *http.Response {
	t.Helper()
	var last string
	for range 100 {
		req, _ := http.NewRequest(http.MethodPost, gateway+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil && resp.StatusCode == http.StatusOK {
			return resp
		}
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = resp.Status + " " + string(b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("POST %s: %s", body, last)
	return nil
}

// TestDevReadmeExamples walks the README's dev examples: a starting line comes first, the
// generated admin token is printed and guards the admin API, a session (x-session-id on model
// sim-session) stays on one engine, and the decision headers name the engine and bucket.
func TestDevReadmeExamples(t *testing.T) {
	banner := startDev(t, nil)
	if !strings.HasPrefix(banner, "sluice dev: starting") {
		t.Errorf("the first line is not the starting line:\n%s", banner)
	}
	gateway := bannerField(t, banner, `gateway \(OpenAI API \+ REST\)\s+(http://\S+)`)
	decider := bannerField(t, banner, `decider HTTP \(Connect/REST\)\s+(http://\S+)`)
	token := bannerField(t, banner, `admin token\s+([0-9a-f]{32}) \(generated`)
	if !strings.Contains(banner, "export T="+token) {
		t.Errorf("banner does not export the token it generated:\n%s", banner)
	}
	var engines map[string]any
	if err := getJSON(decider+"/v1/admin/engines", &engines); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("admin read without a token = %v, want 401", err)
	}
	if err := getJSON(decider+"/v1/admin/engines", &engines, token); err != nil {
		t.Errorf("admin read with the printed token: %v", err)
	}

	var first string
	for i := range 4 {
		resp := chatUntilOK(t, gateway, `{"model":"sim-session","messages":[{"role":"user","content":"again"}]}`, "x-session-id", "conv-42")
		resp.Body.Close()
		engine, reason := resp.Header.Get("X-Sluice-Engine"), resp.Header.Get("X-Sluice-Reason")
		if i == 0 {
			first = engine
			if reason != "assigned" {
				t.Errorf("first request of the session: reason %q, want assigned", reason)
			}
			continue
		}
		if engine != first || reason != "session_primary" || resp.Header.Get("X-Sluice-Bucket") != "sessions" {
			t.Errorf("request %d of the session = %s (%s, bucket %s), want %s (session_primary, bucket sessions)", i+1, engine, reason,
				resp.Header.Get("X-Sluice-Bucket"), first)
		}
	}
}

// TestDevServesACopyOfConfig: with -config, admin writes change dev's working copy in its data
// dir, never the file given (e.g. the repository's examples/), and each run starts a fresh
// version sequence.
func TestDevServesACopyOfConfig(t *testing.T) {
	src := filepath.Join(t.TempDir(), "mine.yaml")
	original := []byte("# mine\nbuckets:\n  - id: all\n    groups: {plain: {policy: {type: round_robin}}}\n")
	if err := os.WriteFile(src, original, 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	for run := range 2 {
		banner := startDev(t, func(c *Config) { c.ConfigPath, c.DataDir, c.AdminToken = src, data, testToken })
		decider := bannerField(t, banner, `decider HTTP \(Connect/REST\)\s+(http://\S+)`)
		served := bannerField(t, banner, `configuration\s+(\S+)`)
		if filepath.Dir(served) != data || !strings.Contains(banner, "working copy of "+src) {
			t.Errorf("run %d serves %s, want a working copy in %s:\n%s", run, served, data, banner)
		}
		var out, errOut bytes.Buffer
		if code := ctl.Run(context.Background(), []string{"--server", decider, "--token", testToken, "versions", "-o", "json"}, &out, &errOut); code != 0 ||
			!strings.Contains(out.String(), `"current_version": 1`) {
			t.Errorf("run %d: versions = %d %s %s, want a fresh sequence at version 1", run, code, out.String(), errOut.String())
		}
		doc := filepath.Join(t.TempDir(), "new.yaml")
		if err := os.WriteFile(doc, []byte("buckets:\n  - id: other\n    groups: {plain: {}}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		errOut.Reset()
		if code := ctl.Run(context.Background(), []string{"apply", "-f", doc, "--server", decider, "--token", testToken}, &out, &errOut); code != 0 {
			t.Fatalf("run %d: apply = %d %s%s", run, code, out.String(), errOut.String())
		}
		if got, _ := os.ReadFile(src); !bytes.Equal(got, original) {
			t.Errorf("run %d: the -config file was rewritten:\n%s", run, got)
		}
		if got, _ := os.ReadFile(served); !strings.Contains(string(got), "other") {
			t.Errorf("run %d: the working copy %s lacks the applied bucket:\n%s", run, served, got)
		}
		if _, err := os.Stat(src + ".history"); !os.IsNotExist(err) {
			t.Errorf("run %d: a version history was written beside the -config file (%v)", run, err)
		}
	}
}
