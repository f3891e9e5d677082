package deciderserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/state/pgstore/pgtest"
)

const (
	adminToken  = "admin-secret-1"
	viewerToken = "viewer-secret-1"
)

// startWith runs a decider with cfg (loopback ports filled in) until the test ends.
func startWith(t testing.TB, cfg Config) *Server {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	return runServer(t, cfg)
}

// pgConfig is a decider on its own Postgres schema, seeded from two-buckets.yaml, with tokens.
func pgConfig(t testing.TB, dsn string) Config {
	cfg := DefaultConfig()
	cfg.PostgresDSN, cfg.ConfigPath = dsn, "testdata/two-buckets.yaml"
	cfg.ConfigSnapshot = filepath.Join(t.TempDir(), "last-known.json")
	cfg.AdminTokens, cfg.ViewerTokens = adminToken, viewerToken
	cfg.Health.ProbeInterval = 0 // the test engines are not reachable: nothing would ever prove them
	return cfg
}

func bearer(token string) func(http.Header) {
	return func(h http.Header) { h.Set("Authorization", "Bearer "+token) }
}

func adminClient(srv *Server, token string) sluicev1connect.AdminServiceClient {
	var opts []connect.ClientOption
	if token != "" {
		opts = append(opts, connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				bearer(token)(req.Header())
				return next(ctx, req)
			}
		})))
	}
	return sluicev1connect.NewAdminServiceClient(http.DefaultClient, "http://"+srv.HTTPAddr(), opts...)
}

const threeBuckets = `
workers:
  - {id: a1, url: "http://a1.test:8000", models: [chat], role: plain}
  - {id: a2, url: "http://a2.test:8000", models: [chat], role: plain}
buckets:
  - id: tiny
    limits: {min: 0, max: 512}
    groups: {plain: {worker_ids: [a2], policy: {type: round_robin}}}
  - id: rest
    rank: 5
    groups: {plain: {policy: {type: power_of_two}}}
`

func TestAdminApplyReloadsEveryReplica(t *testing.T) {
	dsn := pgtest.SchemaDSN(t)
	a := startWith(t, pgConfig(t, dsn))
	b := startWith(t, pgConfig(t, dsn))
	bDecide := grpcClient(t, b)
	ctx := context.Background()
	admin := adminClient(a, adminToken)
	time.Sleep(200 * time.Millisecond) // both listeners connected

	var worst time.Duration
	for i := range 5 {
		doc := strings.Replace(threeBuckets, "max: 512", "max: "+string(rune('1'+i))+"00", 1)
		cur := a.Store().Current().Version
		resp, err := admin.ApplyConfig(ctx, connect.NewRequest(&sluicev1.ApplyConfigRequest{Document: doc, BasedOnVersion: cur}))
		if err != nil {
			t.Fatalf("ApplyConfig: %v", err)
		}
		committed := time.Now()
		want := resp.Msg.GetVersion()
		for {
			d, err := bDecide.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 10, DryRun: true})
			if err == nil && d.GetConfigVersion() == want {
				if d.GetBucketId() != "tiny" || d.GetPick().GetPlain().GetEngineId() != "a2" {
					t.Fatalf("replica b at version %d decided %v, want bucket tiny engine a2", want, d)
				}
				break
			}
			if time.Since(committed) > time.Second {
				t.Fatalf("version %d not live on replica b within 1s of commit (last: %v, %v)", want, d.GetConfigVersion(), err)
			}
			time.Sleep(time.Millisecond)
		}
		lat := time.Since(committed)
		worst = max(worst, lat)
		t.Logf("version %d: commit → live on the other replica in %v", want, lat)
	}
	t.Logf("worst commit → live latency over 5 writes: %v (goal ≤ 1s)", worst)

	vs, err := adminClient(b, viewerToken).ListVersions(ctx, connect.NewRequest(&sluicev1.ListVersionsRequest{Limit: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if got := vs.Msg.GetVersions(); len(got) != 2 || !strings.HasPrefix(got[0].GetAuthor(), "admin#") || got[0].GetSummary() == "" {
		t.Errorf("ListVersions on replica b = %v, want 2 entries by an admin token with summaries", got)
	}
}

func TestAdminErrorsCarryDetails(t *testing.T) {
	srv := startWith(t, pgConfig(t, pgtest.SchemaDSN(t)))
	ctx := context.Background()
	admin := adminClient(srv, adminToken)
	bad := "buckets:\n  - id: x\n    limits: {min: 100, max: 10}\n    groups:\n      pd:\n        prefill: {}\n        decode: {policy: {type: cache_aware}}\n    fuse: 1\n"
	_, err := admin.ApplyConfig(ctx, connect.NewRequest(&sluicev1.ApplyConfigRequest{Document: bad, ValidateOnly: true}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("ApplyConfig(invalid, validate_only) = %v, want InvalidArgument", err)
	}
	fields := violations(t, err)
	for _, want := range []string{"buckets[0].limits", "buckets[0].groups.pd.decode.policy.type", "buckets[0].fuse"} {
		if !containsPrefix(fields, want) {
			t.Errorf("field violations %v: none at %s", fields, want)
		}
	}
	// validate_only with a viewer token is allowed and stores nothing.
	ok, err := adminClient(srv, viewerToken).ApplyConfig(ctx, connect.NewRequest(&sluicev1.ApplyConfigRequest{Document: threeBuckets, ValidateOnly: true}))
	if err != nil || ok.Msg.GetApplied() || srv.Store().Current().Version != 1 {
		t.Fatalf("validate_only = %v, %v; want not applied, version still 1", ok, err)
	}
	if _, err := admin.ApplyConfig(ctx, connect.NewRequest(&sluicev1.ApplyConfigRequest{Document: threeBuckets, BasedOnVersion: 1})); err != nil {
		t.Fatal(err)
	}
	_, err = admin.ApplyConfig(ctx, connect.NewRequest(&sluicev1.ApplyConfigRequest{Document: threeBuckets, BasedOnVersion: 1}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition || !strings.Contains(ce.Message(), "current version is 2") {
		t.Fatalf("stale ApplyConfig = %v, want FailedPrecondition naming version 2", err)
	}
	_, err = admin.CreateBucket(ctx, connect.NewRequest(&sluicev1.CreateBucketRequest{Bucket: mustStruct(t, map[string]any{"id": "tiny", "groups": map[string]any{"plain": map[string]any{}}})}))
	if connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("CreateBucket(existing) = %v, want AlreadyExists", err)
	}
	_, err = admin.GetVersion(ctx, connect.NewRequest(&sluicev1.GetVersionRequest{Version: 99}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetVersion(99) = %v, want NotFound", err)
	}
}

func violations(t *testing.T, err error) []string {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%v is not a connect error", err)
	}
	var out []string
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if br, ok := v.(*errdetails.BadRequest); ok {
			for _, fv := range br.GetFieldViolations() {
				out = append(out, fv.GetField())
			}
		}
	}
	return out
}

func containsPrefix(xs []string, prefix string) bool {
	for _, x := range xs {
		if strings.HasPrefix(x, prefix) {
			return true
		}
	}
	return false
}

// restCall sends a REST request the way curl would, with token as a bearer token when set, and
// returns the status and decoded body.
func restCall(t *testing.T, srv *Server, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	resp, raw := restRaw(t, srv, method, path, body, bearerHeader(token)...)
	var out map[string]any
	if len(bytes.TrimSpace(raw)) > 0 && json.Unmarshal(raw, &out) != nil {
		out = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, out
}

// bearerHeader is the Authorization header for token, none when it is empty.
func bearerHeader(token string) []string {
	if token == "" {
		return nil
	}
	return []string{"Authorization", "Bearer " + token}
}

func TestAdminREST(t *testing.T) {
	srv := startWith(t, pgConfig(t, pgtest.SchemaDSN(t)))
	bucket := `{"bucket": {"id": "huge", "rank": 9, "limits": {"min": 0}, "groups": {"plain": {"worker_ids": ["a2"], "policy": {"type": "load_based", "admission": {"max_running_requests": 4}}}}}}`
	steps := []struct {
		name, method, path, token, body string
		status                          int
		check                           func(map[string]any) bool
	}{
		{"list buckets as viewer", "GET", "/v1/admin/buckets", viewerToken, "", 200,
			func(m map[string]any) bool { return len(m["buckets"].([]any)) == 3 }},
		{"list buckets without a token", "GET", "/v1/admin/buckets", "", "", 401, nil},
		{"create as viewer", "POST", "/v1/admin/buckets", viewerToken, bucket, 403, nil},
		{"create with a wrong token", "POST", "/v1/admin/buckets", "nope", bucket, 401, nil},
		{"create as admin", "POST", "/v1/admin/buckets", adminToken, bucket, 200,
			func(m map[string]any) bool { return m["version"] == "2" && m["summary"] == "buckets: +huge" }},
		{"get the bucket", "GET", "/v1/admin/buckets/huge", viewerToken, "", 200,
			func(m map[string]any) bool { return m["bucket"].(map[string]any)["rank"] == float64(9) }},
		{"replace on a stale version", "PUT", "/v1/admin/buckets/huge", adminToken, `{"based_on_version": 1, "bucket": {"groups": {"plain": {}}}}`, 400,
			func(m map[string]any) bool { return strings.Contains(m["message"].(string), "current version is 2") }},
		{"replace with an unknown key", "PUT", "/v1/admin/buckets/huge", adminToken, `{"bucket": {"groups": {"plain": {}}, "stable_pair": true}}`, 400,
			func(m map[string]any) bool { return strings.Contains(m["message"].(string), "bucket.stable_pair") }},
		{"delete", "DELETE", "/v1/admin/buckets/huge", adminToken, "", 200, nil},
		{"delete again", "DELETE", "/v1/admin/buckets/huge", adminToken, "", 404, nil},
		{"register an engine", "POST", "/v1/admin/engines", adminToken, `{"engine": {"id": "a3", "url": "http://a3.test:8000", "models": ["chat"], "role": "ROLE_PLAIN"}}`, 200, nil},
		{"drain it", "POST", "/v1/admin/engines/a2:drain", adminToken, `{}`, 200,
			func(m map[string]any) bool { return strings.Contains(m["summary"].(string), "~a2") }},
		{"engine is registered", "GET", "/v1/admin/engines/a3", viewerToken, "", 200, nil},
		{"register an engine with enginelink endpoints", "POST", "/v1/admin/engines", adminToken,
			`{"engine": {"id": "a4", "url": "http://a4.test:8000", "models": ["chat"], "role": "ROLE_PLAIN", "kvEventsEndpoint": "bind:tcp://127.0.0.1:5600",
			"kvReplayEndpoint": "tcp://a4.test:5558", "metricsUrl": "http://a4.test:8000/metrics", "dpSize": 2, "loraAdapters": ["chat-sql"]}}`, 200, nil},
		{"the endpoints are listed", "GET", "/v1/admin/engines/a4", viewerToken, "", 200,
			func(m map[string]any) bool {
				e := m["engine"].(map[string]any)
				return e["kvEventsEndpoint"] == "bind:tcp://127.0.0.1:5600" && e["kvReplayEndpoint"] == "tcp://a4.test:5558" &&
					e["metricsUrl"] == "http://a4.test:8000/metrics" && e["dpSize"] == float64(2) &&
					fmt.Sprint(e["loraAdapters"]) == "[chat-sql]"
			}},
		{"a bad endpoint names the field", "POST", "/v1/admin/engines", adminToken,
			`{"engine": {"id": "a5", "url": "http://a5.test:8000", "models": ["chat"], "role": "ROLE_PLAIN", "kvEventsEndpoint": "a5:5557"}}`, 400,
			func(m map[string]any) bool { return strings.Contains(m["message"].(string), "kv_events_endpoint") }},
		{"versions", "GET", "/v1/admin/versions?limit=2", viewerToken, "", 200,
			func(m map[string]any) bool { return len(m["versions"].([]any)) == 2 }},
		{"rollback to 1", "POST", "/v1/admin/versions/1:rollback", adminToken, `{}`, 200, nil},
		{"apply invalid", "PUT", "/v1/admin/config", adminToken, `{"document": "buckets: []"}`, 400,
			func(m map[string]any) bool {
				return strings.Contains(string(mustJSON(m["details"])), "fieldViolations")
			}},
		{"decide stays open", "POST", "/v1/decide", "", `{"model": "chat", "input_tokens": 10, "dry_run": true}`, 200, nil},
	}
	for _, s := range steps {
		status, body := restCall(t, srv, s.method, s.path, s.token, s.body)
		if status != s.status || (s.check != nil && status == s.status && !s.check(body)) {
			t.Errorf("%s: %s %s = %d %v, want %d", s.name, s.method, s.path, status, body, s.status)
		}
	}
	if v := srv.Store().Current(); v.Version != 7 || len(v.Document.Buckets) != 3 {
		t.Errorf("after rollback: version %d with %d buckets, want version 7 with version 1's 3 buckets", v.Version, len(v.Document.Buckets))
	}
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(raw, []byte(`"/v1/admin/buckets/{id}"`)) {
		t.Errorf("GET /openapi.json = %d (%d bytes), want the document with the admin paths", resp.StatusCode, len(raw))
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func TestAuthGRPC(t *testing.T) {
	cfg := DefaultConfig()
	dir := t.TempDir()
	cfg.ConfigPath = filepath.Join(dir, "sluice.yaml")
	src, err := os.ReadFile("testdata/two-buckets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.ConfigPath, src, 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# role:token\nadmin:"+adminToken+"\nviewer:"+viewerToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.AdminTokensFile, cfg.DecideToken = tokens, "decide-secret"
	cfg.Health.ProbeInterval = 0 // the test engines are not reachable: nothing would ever prove them
	srv := startWith(t, cfg)     // file store: auth does not depend on the store
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin, dec := sluicev1.NewAdminServiceClient(conn), sluicev1.NewDeciderServiceClient(conn)
	with := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	}
	write := &sluicev1.DeleteBucketRequest{Id: "long"}
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"write without token", func() error { _, err := admin.DeleteBucket(context.Background(), write); return err }, codes.Unauthenticated},
		{"write as viewer", func() error { _, err := admin.DeleteBucket(with(viewerToken), write); return err }, codes.PermissionDenied},
		{"read as viewer", func() error {
			_, err := admin.ListBuckets(with(viewerToken), &sluicev1.ListBucketsRequest{})
			return err
		}, codes.OK},
		{"decide without token", func() error {
			_, err := dec.Decide(context.Background(), &sluicev1.DecideRequest{Model: "chat", InputTokens: 1, DryRun: true})
			return err
		}, codes.Unauthenticated},
		{"decide with the decide token", func() error {
			_, err := dec.Decide(with("decide-secret"), &sluicev1.DecideRequest{Model: "chat", InputTokens: 1, DryRun: true})
			return err
		}, codes.OK},
		{"write as admin", func() error { _, err := admin.DeleteBucket(with(adminToken), write); return err }, codes.OK},
	}
	for _, tt := range tests {
		if got := status.Code(tt.call()); got != tt.want {
			t.Errorf("%s: code %v, want %v", tt.name, got, tt.want)
		}
	}
	if n := len(srv.Store().Current().Document.Buckets); n != 2 {
		t.Errorf("file store has %d buckets after the admin delete, want 2", n)
	}
}

func TestOutagePostgres(t *testing.T) {
	dsn := pgtest.SchemaDSN(t)
	a := startWith(t, pgConfig(t, dsn))
	b := startWith(t, pgConfig(t, dsn))
	ctx := context.Background()
	decideB := grpcClient(t, b)
	admin := adminClient(a, adminToken)

	testenv.StopPostgres(t)
	if d, err := decideB.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 10, DryRun: true}); err != nil || d.GetConfigVersion() != 1 {
		t.Fatalf("Decide during the outage = %v, %v; want version 1 served", d, err)
	}
	_, err := admin.ApplyConfig(ctx, connect.NewRequest(&sluicev1.ApplyConfigRequest{Document: threeBuckets}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
		t.Fatalf("ApplyConfig during the outage = %v, want Unavailable", err)
	}
	hasRetry := false
	for _, d := range ce.Details() {
		if v, _ := d.Value(); v != nil {
			if _, ok := v.(*errdetails.RetryInfo); ok {
				hasRetry = true
			}
		}
	}
	if !hasRetry {
		t.Error("Unavailable carries no RetryInfo")
	}
	if ce.Meta().Get("Retry-After") == "" {
		t.Error("Connect Unavailable carries no Retry-After header")
	}
	// REST: the retry hint is a Retry-After header too, and the message names no database
	// user, database or address (it used to carry the pgx connect error).
	req, _ := http.NewRequest("PUT", "http://"+a.HTTPAddr()+"/v1/admin/config", strings.NewReader(`{"document": `+string(mustJSON(threeBuckets))+`}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	hresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	if hresp.StatusCode != http.StatusServiceUnavailable || hresp.Header.Get("Retry-After") == "" {
		t.Errorf("REST PUT /v1/admin/config during the outage = %d, Retry-After %q; want 503 with Retry-After", hresp.StatusCode, hresp.Header.Get("Retry-After"))
	}
	u, perr := url.Parse(dsn)
	if perr != nil {
		t.Fatal(perr)
	}
	for _, secret := range []string{u.Host, u.Port(), strings.TrimPrefix(u.Path, "/"), "user=" + u.User.Username(), u.Hostname()} {
		for _, msg := range []string{string(raw), ce.Message()} {
			if secret != "" && strings.Contains(msg, secret) {
				t.Errorf("Unavailable message reveals %q: %s", secret, msg)
			}
		}
	}

	testenv.StartPostgres(t)
	deadline := time.Now().Add(30 * time.Second)
	var resp *connect.Response[sluicev1.ApplyConfigResponse]
	for {
		resp, err = admin.ApplyConfig(ctx, connect.NewRequest(&sluicev1.ApplyConfigRequest{Document: threeBuckets}))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("ApplyConfig after the database returned: %v", err)
	}
	for {
		d, err := decideB.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 10, DryRun: true})
		if err == nil && d.GetConfigVersion() == resp.Msg.GetVersion() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica b did not reload version %d after the outage (last %v, %v)", resp.Msg.GetVersion(), d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An admin write against a Postgres that does not answer (a lock another
// session holds on the version head, as a hung backend would) ends at the
// decider's -postgres-write-timeout with 503 UNAVAILABLE saying nothing was
// written, although the client sets no deadline of its own; Decide is not
// affected meanwhile.
func TestAdminWriteDeadlineOnHungDatabase(t *testing.T) {
	dsn := pgtest.SchemaDSN(t)
	cfg := pgConfig(t, dsn)
	cfg.PostgresWriteTimeout = 500 * time.Millisecond
	srv := startWith(t, cfg)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE config_head IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"document": threeBuckets})
	start := time.Now()
	status, out := restCall(t, srv, "PUT", "/v1/admin/config", adminToken, string(body))
	took := time.Since(start)
	if status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(out["message"]), "nothing was written") {
		t.Fatalf("PUT /v1/admin/config against a hung database = %d %v, want 503 saying nothing was written", status, out)
	}
	t.Logf("admin write answered 503 after %v (write timeout 500ms)", took.Round(time.Millisecond))
	if d, err := grpcClient(t, srv).Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 10, DryRun: true}); err != nil || d.GetConfigVersion() != 1 {
		t.Errorf("Decide while the database hangs = %v, %v; want version 1 served", d, err)
	}
}

// A caller reads its own admin writes on the replica that took them: every engine registered
// is listed by the very next GET, and one deleted is gone from it (the store publishes writes
// to the replica asynchronously; the write's answer waits until the replica serves its version).
func TestAdminReadYourWrites(t *testing.T) {
	srv := startWith(t, pgConfig(t, pgtest.SchemaDSN(t)))
	for i := range 30 {
		id := fmt.Sprintf("ryw%d", i)
		body := fmt.Sprintf(`{"engine": {"id": %q, "url": "http://%s.test:8000", "models": ["chat"], "role": "ROLE_PLAIN"}}`, id, id)
		if status, out := restCall(t, srv, "POST", "/v1/admin/engines", adminToken, body); status != 200 {
			t.Fatalf("register %s = %d %v", id, status, out)
		}
		if status, out := restCall(t, srv, "GET", "/v1/admin/engines/"+id, viewerToken, ""); status != 200 {
			t.Fatalf("GET %s right after registering it = %d %v, want 200", id, status, out)
		}
		if i%3 != 0 {
			continue
		}
		if status, out := restCall(t, srv, "DELETE", "/v1/admin/engines/"+id, adminToken, ""); status != 200 {
			t.Fatalf("DELETE %s = %d %v", id, status, out)
		}
		if status, out := restCall(t, srv, "GET", "/v1/admin/engines/"+id, viewerToken, ""); status != 404 {
			t.Fatalf("GET %s right after deleting it = %d %v, want 404", id, status, out)
		}
	}
}
