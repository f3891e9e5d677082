package ctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testrun"

	"github.com/sluicehq/sluice/services/ctl"
	"github.com/sluicehq/sluice/services/deciderserver"
	"github.com/sluicehq/sluice/state/pgstore/pgtest"
)

const adminToken = "ctl-admin-token"

func startDecider(t *testing.T) *deciderserver.Server {
	t.Helper()
	cfg := deciderserver.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.PostgresDSN = pgtest.SchemaDSN(t)
	cfg.ConfigSnapshot = "-"
	cfg.AdminTokens = adminToken
	srv, err := deciderserver.New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	testrun.Background(t, srv.Run)
	return srv
}

// run invokes `sluice ctl args...` against srv and returns the exit code and outputs.
func run(t *testing.T, srv *deciderserver.Server, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	full := append(args, "--server", "http://"+srv.HTTPAddr(), "--token", adminToken)
	code := ctl.Run(context.Background(), full, &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The first bucket of docs/decisions.md "Example", with the engines it names.
const policyDesignExample = `
workers:
  - {id: P1, url: "http://p1:8000", models: [m], role: prefill}
  - {id: P2, url: "http://p2:8000", models: [m], role: prefill}
  - {id: D1, url: "http://d1:8000", models: [m], role: decode}
  - {id: D2, url: "http://d2:8000", models: [m], role: decode}
buckets:
  - id: short-context
    rank: 10
    limits: {min: 0, max: 4096}
    max_context_tokens: 8192
    groups:
      pd:
        prefill:
          worker_ids: [P1, P2]
          policy:
            type: cache_aware
            admission: {max_running_requests: 64, max_kv_tokens: 1048576}
        decode:
          worker_ids: [D1, D2]
          policy:
            type: power_of_two
            admission: {max_running_requests: 64, max_kv_tokens: 1048576}
`

func TestRoundTrip(t *testing.T) {
	srv := startDecider(t)
	// This decider runs without KV-event ingestion, so it cannot serve cache_aware: the
	// example as written is refused before anything is stored, and applied with load_based.
	verbatim := writeFile(t, "verbatim.yaml", policyDesignExample)
	if code, _, errOut := run(t, srv, "apply", "-f", verbatim); code != ctl.ExitInvalid || !strings.Contains(errOut, "KV prefix index") {
		t.Errorf("apply of the §7 example without a KV index = exit %d\n%s\nwant %d naming the KV prefix index", code, errOut, ctl.ExitInvalid)
	}
	file := writeFile(t, "sluice.yaml", strings.ReplaceAll(policyDesignExample, "cache_aware", "load_based"))

	steps := []struct {
		name string
		args []string
		code int
		out  string // substring of stdout, or of stderr when the code is an error
	}{
		{"validate", []string{"validate", "-f", file}, ctl.ExitOK, "valid against version 1"},
		{"diff before apply", []string{"diff", "-f", file}, ctl.ExitDiffers, "+   - id: short-context"},
		{"apply", []string{"apply", "-f", file}, ctl.ExitOK, "applied version 2"},
		{"diff after apply", []string{"diff", "-f", file}, ctl.ExitOK, "no differences from version 2"},
		{"get buckets", []string{"get", "buckets"}, ctl.ExitOK, "short-context  10    0–4096        prefill load_based [P1,P2]; decode power_of_two [D1,D2]"},
		{"get engines as json", []string{"get", "engines", "-o", "json"}, ctl.ExitOK, `"id": "P1"`},
		{"stale apply conflicts", []string{"apply", "-f", file, "--based-on", "1"}, ctl.ExitConflict, "current version is 2"},
		{"versions", []string{"versions"}, ctl.ExitOK, "*2"},
		{"rollback", []string{"rollback", "1"}, ctl.ExitOK, "as version 3"},
		{"get buckets after rollback", []string{"get", "buckets", "-o", "yaml"}, ctl.ExitOK, "id: plain"},
		{"usage", []string{"rollback"}, ctl.ExitUsage, "rollback wants one version number"},
		{"unknown output", []string{"versions", "-o", "xml"}, ctl.ExitUsage, "-o \"xml\""},
	}
	for _, s := range steps {
		code, out, errOut := run(t, srv, s.args...)
		got := out
		if s.code != ctl.ExitOK && s.code != ctl.ExitDiffers {
			got = errOut
		}
		if code != s.code || !strings.Contains(got, s.out) {
			t.Errorf("%s: sluice ctl %s = exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d and %q", s.name, strings.Join(s.args, " "), code, out, errOut, s.code, s.out)
		}
	}
	if v := srv.Store().Current().Version; v != 3 {
		t.Errorf("server at version %d, want 3", v)
	}
}

func TestInvalidFileListsEveryProblem(t *testing.T) {
	srv := startDecider(t)
	bad := writeFile(t, "bad.yaml", `
workers:
  - {id: P1, url: "http://p1:8000", models: [m], role: prefill}
buckets:
  - id: a
    limits: {min: 10, max: 5}
    groups:
      pd:
        prefill: {worker_ids: [P1]}
        decode: {worker_ids: [P1], policy: {type: cache_aware}}
  - id: a
    groups: {plain: {}}
    stable_pair: true
`)
	for _, cmd := range []string{"validate", "apply"} {
		code, _, errOut := run(t, srv, cmd, "-f", bad)
		if code != ctl.ExitInvalid {
			t.Errorf("%s: exit %d, want %d\n%s", cmd, code, ctl.ExitInvalid, errOut)
		}
		for _, want := range []string{"buckets[0].limits", "buckets[0].groups.pd.decode.worker_ids[0]", "buckets[0].groups.pd.decode.policy.type", "buckets[1].id", "buckets[1].stable_pair"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: stderr lacks a problem at %s:\n%s", cmd, want, errOut)
			}
		}
	}
	if v := srv.Store().Current().Version; v != 1 {
		t.Errorf("an invalid apply changed the version to %d", v)
	}
	// The gRPC protocol gives the same answer.
	code, out, errOut := run(t, srv, "versions", "--grpc", "-o", "json")
	var parsed map[string]any
	if code != ctl.ExitOK || json.Unmarshal([]byte(out), &parsed) != nil {
		t.Errorf("versions --grpc -o json = %d %q %q", code, out, errOut)
	}
}

// TestApplyEmptyFileIsRefused: `sluice ctl apply -f /dev/null` used to apply an empty
// configuration; the decider refuses it naming the document, and ctl exits "invalid".
func TestApplyEmptyFileIsRefused(t *testing.T) {
	srv := startDecider(t)
	comments := writeFile(t, "comments.yaml", "# to be written\n")
	for _, file := range []string{os.DevNull, comments} {
		for _, cmd := range []string{"validate", "apply"} {
			code, _, errOut := run(t, srv, cmd, "-f", file)
			if code != ctl.ExitInvalid || !strings.Contains(errOut, "document: the document is empty") {
				t.Errorf("sluice ctl %s -f %s = exit %d\n%s\nwant %d naming the empty document", cmd, file, code, errOut, ctl.ExitInvalid)
			}
		}
	}
	if v := srv.Store().Current().Version; v != 1 {
		t.Errorf("an empty apply changed the version to %d", v)
	}
}

// TestGetShards: `get shards` lists each shard's models, deciders and topics and names the
// workers' models no shard lists; -o json gives the shards list as stored; a document without
// shards says so.
func TestGetShards(t *testing.T) {
	srv := startDecider(t)
	if code, out, _ := run(t, srv, "get", "shards"); code != ctl.ExitOK || !strings.Contains(out, "has no shards") {
		t.Errorf("get shards with no shards = exit %d\n%s\nwant 0 and a line saying there are none", code, out)
	}
	file := writeFile(t, "sharded.yaml", `
workers:
  - {id: w1, url: "http://w1:8000", models: [chat-70b, chat-8b], role: plain}
  - {id: w2, url: "http://w2:8000", models: [coder, embed], role: plain}
shards:
  - {id: chat, models: [chat-70b, chat-8b], deciders: ["decider-chat-1:7070", "decider-chat-2:7070"]}
  - {id: code, models: [coder]}
`)
	if code, _, errOut := run(t, srv, "apply", "-f", file); code != ctl.ExitOK {
		t.Fatalf("apply = exit %d: %s", code, errOut)
	}
	code, out, errOut := run(t, srv, "get", "shards")
	if code != ctl.ExitOK {
		t.Fatalf("get shards = exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"chat  chat-70b,chat-8b  decider-chat-1:7070,decider-chat-2:7070  <topic>.chat",
		"code  coder             (none listed)",
		"served by the unsharded deciders: embed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("get shards output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run(t, srv, "get", "shards", "-o", "json")
	var got struct {
		Version int64
		Shards  []struct {
			ID       string
			Models   []string
			Deciders []string
		}
	}
	if err := json.Unmarshal([]byte(out), &got); code != ctl.ExitOK || err != nil || len(got.Shards) != 2 ||
		got.Shards[0].ID != "chat" || len(got.Shards[0].Deciders) != 2 || got.Shards[1].Models[0] != "coder" || got.Version != 2 {
		t.Errorf("get shards -o json = exit %d, %+v (%v)\n%s", code, got, err, out)
	}
}
