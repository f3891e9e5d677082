package deciderserver

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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
