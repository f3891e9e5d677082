package deciderserver

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/gen/sluice/v1/sluicev1connect"
)

// TestEveryProtocolPassesTheOneChain: a Decide over native gRPC, Connect, gRPC-Web and REST, and
// an admin write refused for want of a token, are each counted by the one interceptor chain
// with their protocol and the code the caller got.
func TestEveryProtocolPassesTheOneChain(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	ctx := context.Background()
	req := &sluicev1.DecideRequest{Model: "chat", InputTokens: 10, DryRun: true}
	if _, err := grpcClient(t, srv).Decide(ctx, req); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]connect.ClientOption{nil, {connect.WithGRPCWeb()}} {
		if _, err := sluicev1connect.NewDeciderServiceClient(http.DefaultClient, "http://"+srv.HTTPAddr(), opts...).Decide(ctx, connect.NewRequest(req)); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := restCall(t, srv, "POST", "/v1/decide", "", `{"model": "chat", "input_tokens": 10, "dry_run": true}`); code != 200 {
		t.Fatalf("REST Decide = %d %v", code, body)
	}
	if code, _ := restCall(t, srv, "DELETE", "/v1/admin/buckets/long", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("REST DeleteBucket without a token = %d, want 401", code)
	}
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`sluice_decider_rpcs_total{code="OK",procedure="/sluice.v1.DeciderService/Decide",protocol="grpc"} 1`,
		`sluice_decider_rpcs_total{code="OK",procedure="/sluice.v1.DeciderService/Decide",protocol="connect"} 1`,
		`sluice_decider_rpcs_total{code="OK",procedure="/sluice.v1.DeciderService/Decide",protocol="grpc-web"} 1`,
		`sluice_decider_rpcs_total{code="OK",procedure="/sluice.v1.DeciderService/Decide",protocol="rest"} 1`,
		`sluice_decider_rpcs_total{code="Unauthenticated",procedure="/sluice.v1.AdminService/DeleteBucket",protocol="rest"} 1`,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestHealthOnBothPorts: the HTTP port serves the same health service as the gRPC port (over
// Connect here), so both say SERVING for the decider's services while it runs.
func TestHealthOnBothPorts(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	ctx := context.Background()
	in := &healthpb.HealthCheckRequest{Service: sluicev1connect.DeciderServiceName}
	g, err := healthpb.NewHealthClient(grpcConn(t, srv)).Check(ctx, in)
	if err != nil || g.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC port health = %v, %v; want SERVING", g, err)
	}
	c := connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](http.DefaultClient,
		"http://"+srv.HTTPAddr()+"/grpc.health.v1.Health/Check")
	h, err := c.CallUnary(ctx, connect.NewRequest(in))
	if err != nil || h.Msg.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("HTTP port health (Connect) = %v, %v; want SERVING", h, err)
	}
	_, err = healthpb.NewHealthClient(grpcConn(t, srv)).Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("health of an unknown service = %v, want NotFound", err)
	}
	// A Connect call without the Connect-Protocol-Version header (curl) is still Connect.
	code, body := restCall(t, srv, "POST", "/sluice.v1.DeciderService/Decide", "", `{"model": "chat", "inputTokens": "10", "dryRun": true}`)
	if code != 200 || body["bucketId"] != "short" {
		t.Errorf("curl-style Connect Decide = %d %v, want 200 bucket short", code, body)
	}
}

// TestChainRecoversPanics: a handler's panic is answered Internal (and counted) instead of
// ending the process, as net/http did for REST and Connect handlers before they ran on gRPC.
func TestChainRecoversPanics(t *testing.T) {
	auth, err := newAuthenticator(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ch := &chain{shed: newShedder(1, time.Second, reg), auth: auth, logger: slog.New(slog.DiscardHandler),
		counter: newCallCounter(reg, []string{decideProcedure})}
	_, err = ch.unary(context.Background(), &sluicev1.DecideRequest{}, &grpc.UnaryServerInfo{FullMethod: decideProcedure},
		func(context.Context, any) (any, error) { panic("boom") })
	if status.Code(err) != codes.Internal {
		t.Errorf("panicking handler = %v, want Internal", err)
	}
	if n := testutil.ToFloat64(ch.counter.vec.WithLabelValues(decideProcedure, "grpc", "Internal")); n != 1 {
		t.Errorf("Internal calls counted = %v, want 1", n)
	}
}
