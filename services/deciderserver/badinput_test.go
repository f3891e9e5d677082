package deciderserver

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// fileConfig is a decider on a writable copy of two-buckets.yaml (the file store) with admin
// and viewer tokens and no probing.
func fileConfig(t testing.TB) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ConfigPath = filepath.Join(t.TempDir(), "sluice.yaml")
	src, err := os.ReadFile("testdata/two-buckets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.ConfigPath, src, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.AdminTokens, cfg.ViewerTokens = adminToken, viewerToken
	cfg.Health.ProbeInterval = 0
	return cfg
}

func messageOf(body map[string]any) string {
	m, _ := body["message"].(string)
	return m
}

// TestAdminRefusesEmptyDocuments: PUT /v1/admin/config with no body, {}, an empty document, a
// document of comments only or a misspelled field used to answer 200 and apply an empty
// configuration. Each is now 400 naming the field, and nothing changes.
func TestAdminRefusesEmptyDocuments(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	tests := []struct{ name, body, want string }{
		{"no body", "", "document: the document is empty"},
		{"empty object", "{}", "document: the document is empty"},
		{"empty document", `{"document": ""}`, "document: the document is empty"},
		{"empty mapping", `{"document": "{}"}`, "document: the document is empty"},
		{"comments only", `{"document": "# nothing\n"}`, "document: the document is empty"},
		{"validate_only too", `{"document": "", "validate_only": true}`, "document: the document is empty"},
		{"misspelled field", `{"doc": "buckets: []"}`, `unknown field "doc"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := restCall(t, srv, "PUT", "/v1/admin/config", adminToken, tt.body)
			if status != http.StatusBadRequest || !strings.Contains(messageOf(body), tt.want) {
				t.Errorf("PUT /v1/admin/config %s = %d %v, want 400 containing %q", tt.body, status, body, tt.want)
			}
		})
	}
	_, err := adminClient(srv, adminToken).ApplyConfig(context.Background(), connect.NewRequest(&sluicev1.ApplyConfigRequest{}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !containsPrefix(violations(t, err), "document") {
		t.Errorf("Connect ApplyConfig{} = %v, want InvalidArgument with a violation at document", err)
	}
	if cur := srv.Store().Current(); cur.Version != 1 || len(cur.Document.Engines) != 4 {
		t.Errorf("after refused empty applies: version %d with %d workers, want version 1 with 4", cur.Version, len(cur.Document.Engines))
	}
	if n := srv.Registry().Snapshot().Len(); n != 4 {
		t.Errorf("registry holds %d engines, want 4", n)
	}
}

// TestAdminDocumentAndRegistryAgree: a document without engines after one with them removes
// the engines it no longer lists, so GetConfig and ListEngines never disagree.
func TestAdminDocumentAndRegistryAgree(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	doc := `{"document": "buckets:\n  - id: all\n    groups: {plain: {}}\n"}`
	if status, body := restCall(t, srv, "PUT", "/v1/admin/config", adminToken, doc); status != 200 {
		t.Fatalf("PUT /v1/admin/config = %d %v", status, body)
	}
	waitFor(t, func() bool { return srv.decider.ConfigVersion() == 2 })
	if w := srv.Store().Current().Document.Engines; w != nil {
		t.Fatalf("document in force lists workers %v, want none", w)
	}
	if n := srv.Registry().Snapshot().Len(); n != 0 {
		t.Errorf("registry holds %d engines after a document without workers replaced one with 4, want 0", n)
	}
}

// TestAdminRollbackSurvivesRestart: the file store keeps its version log on disk, so a
// restarted decider can roll back to a version from before the restart.
func TestAdminRollbackSurvivesRestart(t *testing.T) {
	cfg := fileConfig(t)
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	first, err := New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	body := `{"document": ` + string(mustJSON(threeBuckets)) + `}`
	if status, resp := restCall(t, first, "PUT", "/v1/admin/config", adminToken, body); status != 200 {
		t.Fatalf("PUT /v1/admin/config = %d %v", status, resp)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	srv := startWith(t, cfg)
	if v := srv.Store().Current().Version; v != 2 {
		t.Fatalf("restarted on version %d, want 2", v)
	}
	if status, resp := restCall(t, srv, "POST", "/v1/admin/versions/1:rollback", adminToken, `{}`); status != 200 {
		t.Fatalf("rollback to version 1 after a restart = %d %v, want 200", status, resp)
	}
	cur := srv.Store().Current()
	if cur.Version != 3 || len(cur.Document.Buckets) != 3 || cur.Document.Buckets[0].ID != "short" {
		t.Errorf("after rollback: version %d buckets %v, want version 3 with version 1's buckets", cur.Version, cur.Document.EffectiveBuckets())
	}
}

// TestAdminEngineIDsFollowTheIDRules: engine ids such as ../../x or a\nb were accepted, then
// unreachable through /v1/admin/engines/{id}. They are refused naming engine.id and the rule.
func TestAdminEngineIDsFollowTheIDRules(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	for _, id := range []string{"../../x", `a\nb`, "has space", "a/b", strings.Repeat("x", 129)} {
		body := `{"engine": {"id": "` + id + `", "url": "http://x.test:8000", "models": ["chat"], "role": "ROLE_PLAIN"}}`
		status, resp := restCall(t, srv, "POST", "/v1/admin/engines", adminToken, body)
		msg := messageOf(resp)
		namesRule := strings.Contains(msg, "letters, digits") || strings.Contains(msg, "at most 128")
		if status != 400 || !strings.Contains(msg, "engine.id") || !namesRule {
			t.Errorf("register engine %q = %d %q, want 400 naming engine.id and the id rule", id, status, msg)
		}
	}
	doc := strings.Replace(threeBuckets, "id: a2", `id: "../a2"`, 1)
	_, err := adminClient(srv, adminToken).ApplyConfig(context.Background(), connect.NewRequest(&sluicev1.ApplyConfigRequest{Document: doc, ValidateOnly: true}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !containsPrefix(violations(t, err), "workers[1].id") {
		t.Errorf("ApplyConfig with worker id ../a2 = %v, want InvalidArgument at workers[1].id", err)
	}
	if v := srv.Store().Current().Version; v != 1 {
		t.Errorf("version %d after refused writes, want 1", v)
	}
}

// TestUnknownFieldsAreRefused: grpc-gateway and Connect's JSON codec dropped unknown fields,
// so the typo "dryrun" took a real lease and "outcome": "NOPE" read as unspecified. Both are
// 400 now, naming the field, and nothing happens.
func TestUnknownFieldsAreRefused(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	tests := []struct{ name, method, path, body, want string }{
		{"REST decide typo", "POST", "/v1/decide", `{"model": "chat", "input_tokens": 10, "dryrun": true}`, `unknown field "dryrun"`},
		{"REST release unknown enum", "POST", "/v1/release", `{"lease_id": "x", "outcome": "NOPE"}`, `NOPE`},
		{"REST admin typo", "POST", "/v1/admin/engines/a1:drain", `{"based_on": 1}`, `unknown field "based_on"`},
		{"REST query typo", "GET", "/v1/admin/versions?limitt=2", "", `unknown query parameter "limitt"`},
		{"Connect decide typo", "POST", "/sluice.v1.DeciderService/Decide", `{"model": "chat", "inputTokens": "10", "dryrun": true}`, `unknown field "dryrun"`},
		{"Connect release unknown enum", "POST", "/sluice.v1.DeciderService/Release", `{"leaseId": "x", "outcome": "NOPE"}`, `NOPE`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := restCall(t, srv, tt.method, tt.path, adminToken, tt.body)
			if status != http.StatusBadRequest || !strings.Contains(messageOf(body), tt.want) {
				t.Errorf("%s %s %s = %d %v, want 400 containing %q", tt.method, tt.path, tt.body, status, body, tt.want)
			}
		})
	}
	if n := srv.Leases().Leases(); n != 0 {
		t.Errorf("%d leases taken by refused requests, want 0", n)
	}
	if v := srv.Store().Current().Version; v != 1 {
		t.Errorf("version %d after refused writes, want 1", v)
	}
	// Correct spellings still work on both.
	for _, path := range []string{"/v1/decide", "/sluice.v1.DeciderService/Decide"} {
		if status, body := restCall(t, srv, "POST", path, "", `{"model": "chat", "input_tokens": 10, "dry_run": true}`); status != 200 {
			t.Errorf("POST %s with valid fields = %d %v, want 200", path, status, body)
		}
	}
}

// TestReplaceEmptyBucketOverGRPC: an empty bucket arrives over the wire without a field map,
// and ReplaceBucket filling in the id from the path panicked on it (REST and native gRPC alike
// once REST reached the service over gRPC). It is refused naming what is missing.
func TestReplaceEmptyBucketOverGRPC(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+adminToken)
	_, err := sluicev1.NewAdminServiceClient(grpcConn(t, srv)).ReplaceBucket(ctx, &sluicev1.ReplaceBucketRequest{Id: "long", Bucket: &structpb.Struct{}})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument {
		t.Errorf("ReplaceBucket(empty bucket) = %v, want InvalidArgument", err)
	}
	if status, body := restCall(t, srv, "PUT", "/v1/admin/buckets/long", adminToken, `{"bucket": {}}`); status != http.StatusBadRequest {
		t.Errorf("PUT /v1/admin/buckets/long {\"bucket\": {}} = %d %v, want 400", status, body)
	}
}
