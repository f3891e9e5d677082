package deciderserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// readyz returns /readyz's status and body.
func readyz(t *testing.T, srv *Server) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A decider whose brokers never answer keeps serving (200: Decide works on
// what it has) but says on /readyz that both Kafka streams are unreachable,
// instead of looking perfectly healthy.
func TestReadyzNamesUnreachableKafka(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there any more: connections are refused
	cfg := DefaultConfig()
	cfg.Ingest.Brokers = dead
	cfg.Ingest.HealthInterval = 200 * time.Millisecond
	srv := startWith(t, cfg)
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, body := readyz(t, srv)
		if status != http.StatusOK {
			t.Fatalf("/readyz = %d %q, want 200 while serving", status, body)
		}
		if strings.Contains(body, "degraded: ingest load") && strings.Contains(body, "degraded: ingest kv") {
			if !strings.Contains(body, dead) {
				t.Errorf("/readyz = %q, want the unreachable broker %s named", body, dead)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %q after 20s, want both Kafka streams listed as degraded", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// With everything reachable /readyz says only "ready".
func TestReadyzPlain(t *testing.T) {
	srv := startWith(t, DefaultConfig())
	if status, body := readyz(t, srv); status != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz = %d %q, want 200 \"ready\\n\"", status, body)
	}
}

// Before Run serves (its listeners are already bound by New, and Run may first probe every
// engine), the decider is not ready: /readyz answers 503 and the health service NOT_SERVING for
// the server and each service. grpc's health server starts with "" SERVING, so /readyz used to
// say ready before anything was served.
func TestNotReadyBeforeServing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	srv, err := New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.ready(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before Run = %d %q, want 503", rec.Code, rec.Body.String())
	}
	for _, svc := range []string{"", "sluice.v1.DeciderService", "sluice.v1.AdminService"} {
		hc, err := srv.rpc.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q before Run = %v, %v; want NOT_SERVING", svc, hc, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Run(ctx); err != nil {
		t.Errorf("Run on a cancelled context: %v", err)
	}
}
