package deciderserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/gen/sluice/v1/sluicev1connect"
)

// holdDecideSlot starts a REST Decide on a raw connection whose body never
// completes, so it holds one of the replica's Decide slots until the
// returned func closes the connection.
func holdDecideSlot(t *testing.T, srv *Server) (release func()) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "POST /v1/decide HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\": "); err != nil {
		t.Fatal(err)
	}
	// Wait until the server counts it; nothing else is in flight meanwhile.
	for deadline := time.Now().Add(5 * time.Second); srv.shed.inFlight.Load() != 1; {
		if time.Now().After(deadline) {
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			b := make([]byte, 1000)
			k, err := conn.Read(b)
			t.Fatalf("the held REST Decide is not counted in flight; the server answered %q (%v)", b[:k], err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return func() { conn.Close() }
}

// With -max-concurrent-decides 1 and one Decide in progress (held open over
// REST), a Decide over gRPC, Connect and REST is answered at once with
// RESOURCE_EXHAUSTED (REST 503) and a retry hint; once the slot is free Decide
// works again, and sequential calls never leak slots.
func TestDecideShedsBeyondTheConcurrencyLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath = "127.0.0.1:0", "127.0.0.1:0", "testdata/two-buckets.yaml"
	cfg.Health.ProbeInterval = 0
	cfg.MaxConcurrentDecides, cfg.ShedRetryAfter = 1, 2*time.Second
	srv := runServer(t, cfg)
	g := grpcClient(t, srv)
	ctx := context.Background()
	req := &sluicev1.DecideRequest{Model: "chat", InputTokens: 10, DryRun: true}

	for range 20 { // each call returns its slot, whatever the protocol
		if _, err := g.Decide(ctx, req); err != nil {
			t.Fatalf("sequential gRPC Decide: %v", err)
		}
	}
	release := holdDecideSlot(t, srv)
	_, err := g.Decide(ctx, req)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "-max-concurrent-decides") {
		t.Fatalf("gRPC Decide while the slot is held = %v, want RESOURCE_EXHAUSTED naming -max-concurrent-decides", err)
	}
	var reason string
	var retry time.Duration
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration()
		}
	}
	if reason != "DECIDER_OVERLOADED" || retry != 2*time.Second {
		t.Errorf("shed gRPC details: reason %q retry %v, want DECIDER_OVERLOADED and 2s", reason, retry)
	}

	cc := sluicev1connect.NewDeciderServiceClient(http.DefaultClient, "http://"+srv.HTTPAddr())
	_, cerr := cc.Decide(ctx, connect.NewRequest(req))
	var ce *connect.Error
	if !errors.As(cerr, &ce) || ce.Code() != connect.CodeResourceExhausted {
		t.Errorf("Connect Decide while the slot is held = %v, want resource_exhausted", cerr)
	}

	start := time.Now()
	resp, herr := http.Post("http://"+srv.HTTPAddr()+"/v1/decide", "application/json", strings.NewReader(`{"model":"chat","input_tokens":10,"dry_run":true}`))
	if herr != nil {
		t.Fatal(herr)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("shed REST call answered in %v", time.Since(start))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" || !strings.Contains(string(body), "DECIDER_OVERLOADED") {
		t.Errorf("REST Decide while the slot is held = %d Retry-After %q %s, want 503, Retry-After 2 and DECIDER_OVERLOADED",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Other procedures are never shed.
	if _, err := sluicev1.NewAdminServiceClient(grpcConn(t, srv)).ListEngines(ctx, &sluicev1.ListEnginesRequest{}); err != nil {
		t.Errorf("ListEngines while Decide is saturated: %v", err)
	}

	release()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := g.Decide(ctx, req)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gRPC Decide 5s after the held call ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
