package deciderserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testrun"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/gen/sluice/v1/sluicev1connect"
)

// startServer runs a real decider on loopback ports with the given configuration file and
// stops it when the test ends.
func startServer(t testing.TB, configPath string) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath = "127.0.0.1:0", "127.0.0.1:0", configPath
	cfg.Health.ProbeInterval = 0 // test engines are not reachable; breaker tests drive health
	return runServer(t, cfg)
}

// runServer starts a decider with cfg and stops it when the test ends.
func runServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	srv, err := New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	testrun.Background(t, srv.Run)
	// Run marks the server serving after its listeners (bound by New) are served; callers start
	// from a ready server, as a client behind a readiness probe would.
	for deadline := time.Now().Add(10 * time.Second); ; {
		hc, err := srv.rpc.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err == nil && hc.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decider not serving 10s after Run: %v, %v", hc, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return srv
}

func grpcConn(t testing.TB, srv *Server) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func grpcClient(t testing.TB, srv *Server) sluicev1.DeciderServiceClient {
	t.Helper()
	return sluicev1.NewDeciderServiceClient(grpcConn(t, srv))
}

func TestGRPCDecideAndRelease(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	c := grpcClient(t, srv)
	ctx := context.Background()

	resp, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 1000, ExpectedPeakTokens: proto.Int64(1500)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetBucketId() != "short" || resp.GetPick().GetPlain().GetEngineId() != "a1" || resp.GetLeaseId() == "" || resp.GetConfigVersion() != 1 {
		t.Fatalf("Decide() = %v, want bucket short engine a1 with a lease at config version 1", resp)
	}
	if resp.GetPick().GetPlain().GetUrl() != "http://a1.test:8000" || resp.GetLeaseExpiresAt() == nil {
		t.Errorf("Decide() pick = %v, want a1's url and a lease expiry", resp.GetPick())
	}
	// a1 now has one in flight, at its cap: the next request moves to the long bucket.
	resp2, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 1000, Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	if resp2.GetBucketId() != "long" || resp2.GetPick().GetPlain().GetEngineId() != "a2" {
		t.Fatalf("second Decide() = %v, want bucket long engine a2", resp2)
	}
	atts := resp2.GetExplain().GetAttempts()
	if len(atts) != 2 || atts[0].GetOutcome() != "admission_rejected" || atts[0].GetStages()[0].GetCandidates()[0].GetRejection() != "max_inflight_requests" {
		t.Errorf("explain = %v, want short rejected at max_inflight_requests then long picked", resp2.GetExplain())
	}
	for _, id := range []string{resp.GetLeaseId(), resp2.GetLeaseId()} {
		rel, err := c.Release(ctx, &sluicev1.ReleaseRequest{LeaseId: id, Outcome: sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS})
		if err != nil || !rel.GetReleased() {
			t.Fatalf("Release(%s) = %v, %v", id, rel, err)
		}
	}
	if n := srv.Leases().Leases(); n != 0 {
		t.Errorf("leases after release = %d, want 0", n)
	}
	rel, err := c.Release(ctx, &sluicev1.ReleaseRequest{LeaseId: resp.GetLeaseId()})
	if err != nil || rel.GetReleased() {
		t.Errorf("second Release = %v, %v; want released=false", rel, err)
	}

	pd, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "pd-chat", InputTokens: 10, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if p := pd.GetPick().GetPd(); p.GetPrefill().GetEngineId() != "p1" || p.GetPrefill().GetBootstrapPort() != 8998 ||
		p.GetDecode().GetEngineId() != "d1" || p.GetDecode().GetRole() != sluicev1.Role_ROLE_DECODE || pd.GetLeaseId() != "" {
		t.Errorf("PD dry run = %v, want p1 (bootstrap 8998) + d1, no lease", pd)
	}
}

func TestGRPCErrors(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	c := grpcClient(t, srv)
	tests := []struct {
		name   string
		req    *sluicev1.DecideRequest
		code   codes.Code
		reason string
	}{
		{"empty model", &sluicev1.DecideRequest{InputTokens: 1}, codes.InvalidArgument, "EMPTY_MODEL"},
		{"unknown model", &sluicev1.DecideRequest{Model: "gpt-9", InputTokens: 1}, codes.InvalidArgument, "UNKNOWN_MODEL"},
		{"negative input", &sluicev1.DecideRequest{Model: "chat", InputTokens: -1}, codes.InvalidArgument, "INVALID_INPUT_TOKENS"},
		{"peak below input", &sluicev1.DecideRequest{Model: "chat", InputTokens: 10, ExpectedPeakTokens: proto.Int64(5)}, codes.InvalidArgument, "PEAK_BELOW_INPUT"},
		{"token ids mismatch", &sluicev1.DecideRequest{Model: "chat", InputTokens: 10, TokenIds: []uint32{1}}, codes.InvalidArgument, "TOKEN_IDS_MISMATCH"},
		{"no decode after excluding it", &sluicev1.DecideRequest{Model: "pd-chat", InputTokens: 1, ExcludeEngineIds: []string{"d1"}}, codes.Unavailable, "NO_DECODE_CANDIDATES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Decide(context.Background(), tt.req)
			st := status.Convert(err)
			if st.Code() != tt.code || reasonOf(st) != tt.reason {
				t.Errorf("Decide() = %v %q (%s), want %v %s", st.Code(), reasonOf(st), st.Message(), tt.code, tt.reason)
			}
		})
	}
	t.Run("unknown release outcome", func(t *testing.T) {
		_, err := c.Release(context.Background(), &sluicev1.ReleaseRequest{LeaseId: "x", Outcome: 42})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument {
			t.Errorf("Release(outcome 42) = %v, want InvalidArgument", st)
		}
	})
}

func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

func TestGRPCExhaustionCarriesRejections(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	c := grpcClient(t, srv)
	ctx := context.Background()
	// Fill a1 (cap 1) and keep going: the request of 5000 tokens only fits "long" and "pd"... so
	// use 100 tokens and exclude a2 to leave only the rejected a1.
	if _, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 100, ExcludeEngineIds: []string{"a2"}})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || reasonOf(st) != "ADMISSION_REJECTED" {
		t.Fatalf("Decide() = %v %s, want Unavailable ADMISSION_REJECTED", st.Code(), reasonOf(st))
	}
	var got *sluicev1.AdmissionRejections
	for _, d := range st.Details() {
		if r, ok := d.(*sluicev1.AdmissionRejections); ok {
			got = r
		}
	}
	want := &sluicev1.AdmissionRejections{Rejections: []*sluicev1.AdmissionRejection{
		{BucketId: "short", Role: sluicev1.Role_ROLE_PLAIN, EngineId: "a1", Limit: "max_inflight_requests"}}}
	if !proto.Equal(got, want) {
		t.Errorf("rejection details = %v, want %v", got, want)
	}
}

func TestConnectDecide(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	for _, opt := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}}, {"connect-json", []connect.ClientOption{connect.WithProtoJSON()}}} {
		t.Run(opt.name, func(t *testing.T) {
			c := sluicev1connect.NewDeciderServiceClient(http.DefaultClient, "http://"+srv.HTTPAddr(), opt.opts...)
			resp, err := c.Decide(context.Background(), connect.NewRequest(&sluicev1.DecideRequest{Model: "chat", InputTokens: 5000, DryRun: true}))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Msg.GetBucketId() != "long" || resp.Msg.GetPick().GetPlain().GetEngineId() != "a2" {
				t.Errorf("Decide() = %v, want long/a2", resp.Msg)
			}
			_, err = c.Decide(context.Background(), connect.NewRequest(&sluicev1.DecideRequest{Model: "chat", InputTokens: 10, ExpectedPeakTokens: proto.Int64(1)}))
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || len(ce.Details()) == 0 {
				t.Errorf("Decide(peak<input) error = %v, want InvalidArgument with details", err)
			}
		})
	}
}

func TestRESTDecide(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	base := "http://" + srv.HTTPAddr()
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("POST %s: %d %s: %v", path, resp.StatusCode, raw, err)
		}
		return resp.StatusCode, m
	}
	code, m := post("/v1/decide", `{"model":"chat","input_tokens":100,"expected_peak_tokens":"300"}`)
	if code != 200 || m["bucketId"] != "short" {
		t.Fatalf("POST /v1/decide = %d %v, want 200 bucket short", code, m)
	}
	lease, _ := m["leaseId"].(string)
	code, m = post("/v1/release", `{"lease_id":"`+lease+`","outcome":"RELEASE_OUTCOME_SUCCESS"}`)
	if code != 200 || m["released"] != true {
		t.Errorf("POST /v1/release = %d %v, want released", code, m)
	}
	for _, tt := range []struct {
		body string
		code int
	}{
		{`{"model":"chat","input_tokens":10,"expected_peak_tokens":"1"}`, 400},
		{`{"model":"","input_tokens":10}`, 400},
		{`{"model":"chat","input_tokens":"not a number"}`, 400},
		{`{"model":"pd-chat","input_tokens":1,"exclude_engine_ids":["p1"]}`, 503},
	} {
		if code, m := post("/v1/decide", tt.body); code != tt.code {
			t.Errorf("POST /v1/decide %s = %d %v, want %d", tt.body, code, m, tt.code)
		}
	}
	resp, err := http.Get(base + "/v1/admin/engines")
	if err != nil {
		t.Fatal(err)
	}
	var engines struct{ Engines []map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&engines); err != nil || len(engines.Engines) != 4 {
		t.Errorf("GET /v1/admin/engines = %v %v, want 4 engines", engines, err)
	}
	resp.Body.Close()
}

func TestHealthMetricsAndShutdown(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Run marks the services SERVING once it serves; until then they answer NOT_SERVING.
	deadline := time.Now().Add(10 * time.Second)
	for {
		hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "sluice.v1.DeciderService"})
		if err != nil || (hc.GetStatus() != healthpb.HealthCheckResponse_SERVING && hc.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING) {
			t.Fatalf("health = %v, %v; want NOT_SERVING while starting, then SERVING", hc, err)
		}
		if hc.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health still %v after 10s", hc.GetStatus())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c := sluicev1.NewDeciderServiceClient(conn)
	_, _ = c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "chat", InputTokens: 1, DryRun: true})
	_, _ = c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "nope", InputTokens: 1})
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`sluice_decider_decisions_total{bucket="short",outcome="ok",reason="power_of_two"} 1`,
		`sluice_decider_decisions_total{bucket="",outcome="invalid_argument",reason="UNKNOWN_MODEL"} 1`,
		`sluice_decider_decide_duration_seconds_bucket`,
		`sluice_decider_config_version 1`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestInvalidConfigFileIsAStartupError(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath = "127.0.0.1:0", "127.0.0.1:0", "testdata/invalid.yaml"
	_, err := New(slog.New(slog.DiscardHandler), cfg)
	if err == nil || !strings.Contains(err.Error(), "buckets[0].limits") || !strings.Contains(err.Error(), "stable_pair") {
		t.Fatalf("New() error = %v, want every problem listed", err)
	}
}

func TestShutdownIsBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.ShutdownTimeout = 2 * time.Second
	srv, err := New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("shutdown took %v, want within the 2s deadline", d)
	}
}

func TestGRPCSessionStaysPut(t *testing.T) {
	srv := startServer(t, "testdata/session.yaml")
	c := grpcClient(t, srv)
	ctx := context.Background()
	first, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "m", InputTokens: 10, SessionKey: "conv-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := first.GetPick().GetPlain().GetReason(); got != "assigned" {
		t.Fatalf("first reason = %q, want assigned", got)
	}
	want := first.GetPick().GetPlain().GetEngineId()
	for range 10 {
		resp, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "m", InputTokens: 10, SessionKey: "conv-1", Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		p := resp.GetPick().GetPlain()
		if p.GetEngineId() != want || p.GetReason() != "session_primary" {
			t.Fatalf("session moved: %s (%s), want %s session_primary", p.GetEngineId(), p.GetReason(), want)
		}
		if d := resp.GetExplain().GetAttempts()[0].GetStages()[0].GetDetail(); !strings.Contains(d, "binding reused") {
			t.Errorf("explain detail = %q, want the binding used", d)
		}
	}
}
