package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitGet(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s not 200 in 20s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// `sluice gateway -embed-decider` serves completions with the decider in process (Decide and
// Release counted as protocol in-process, the lease released), and the embedded decider's own
// gRPC port still answers other clients.
func TestGatewayEmbedsDecider(t *testing.T) {
	engine, gw, grpcAddr, httpAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("workers:\n  - {id: e0, url: \"http://%s\", models: [sim], role: plain}\n", engine)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() {
		done <- run(ctx, []string{"simengine", "-addr", engine, "-model", "sim", "-speed", "100", "-log-level", "error"}, io.Discard)
	}()
	waitGet(t, "http://"+engine+"/health")
	go func() {
		done <- run(ctx, []string{"gateway", "-addr", gw, "-embed-decider", "-decider.grpc-addr", grpcAddr, "-decider.http-addr", httpAddr,
			"-decider.config", cfgPath, "-decider.config-snapshot", "-", "-tokenizer", "engine", "-log-level", "error"}, io.Discard)
	}()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("process: %v", err)
			}
		}
	}()
	waitGet(t, "http://"+gw+"/readyz")

	for range 3 {
		resp, err := http.Post("http://"+gw+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"sim","max_tokens":4,"messages":[{"role":"user","content":"hello there"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"choices"`) {
			t.Fatalf("chat completion: %s %s", resp.Status, b)
		}
	}
	// The gateway flushes a finished answer before it releases the lease, so the last Release
	// may still be running when the client has its answer: wait for it (bounded).
	wants := []string{
		`sluice_decider_rpcs_total{code="OK",procedure="/sluice.v1.DeciderService/Decide",protocol="in-process"} 3`,
		`sluice_decider_rpcs_total{code="OK",procedure="/sluice.v1.DeciderService/Release",protocol="in-process"} 3`,
		"sluice_decider_leases 0",
	}
	var m []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		missing := false
		for _, want := range wants {
			missing = missing || !strings.Contains(string(m), want)
		}
		if !missing || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range wants {
		if !strings.Contains(string(m), want) {
			t.Errorf("decider metrics lack %s", want)
		}
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dec, err := sluicev1.NewDeciderServiceClient(conn).Decide(context.Background(), &sluicev1.DecideRequest{Model: "sim", InputTokens: 3, DryRun: true})
	if err != nil || dec.GetPick().GetPlain().GetEngineId() != "e0" {
		t.Errorf("Decide over the embedded decider's gRPC port = %v, %v; want e0", dec, err)
	}
}
