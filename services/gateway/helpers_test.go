package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testrun"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/services/deciderserver"
)

// recorded is one request a fake engine received.
type recorded struct {
	path   string
	body   []byte
	header http.Header
}

// fakeEngine is a hand-written OpenAI-compatible engine: it records every POST it gets and
// answers with handle (by default a JSON body naming itself). It answers health probes.
type fakeEngine struct {
	id  string
	srv *httptest.Server

	mu     sync.Mutex
	reqs   []recorded
	handle func(w http.ResponseWriter, r *http.Request, body []byte)
}

func newFakeEngine(t testing.TB, id string) *fakeEngine {
	t.Helper()
	e := &fakeEngine{id: id}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, "ok")
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		e.mu.Lock()
		e.reqs = append(e.reqs, recorded{path: r.URL.Path, body: body, header: r.Header.Clone()})
		h := e.handle
		e.mu.Unlock()
		if h == nil {
			h = e.answerJSON
		}
		h(w, r, body)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *fakeEngine) answerJSON(w http.ResponseWriter, r *http.Request, _ []byte) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"engine":%q,"path":%q}`, e.id, r.URL.Path)
}

func (e *fakeEngine) setHandler(h func(w http.ResponseWriter, r *http.Request, body []byte)) {
	e.mu.Lock()
	e.handle = h
	e.mu.Unlock()
}

func (e *fakeEngine) requests() []recorded {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]recorded(nil), e.reqs...)
}

func (e *fakeEngine) url() string { return e.srv.URL }

// listEntry is one line of the decider configuration's engine list (key `workers`).
type listEntry struct {
	engine        *fakeEngine
	model, role   string
	bootstrapPort int
}

// startDecider runs a real decider whose configuration lists engines (and the extra YAML,
// typically buckets), on loopback ports, stopped when the test ends.
func startDecider(t testing.TB, engines []listEntry, extra string) *deciderserver.Server {
	t.Helper()
	var b strings.Builder
	b.WriteString("workers:\n")
	for _, w := range engines {
		fmt.Fprintf(&b, "  - {id: %s, url: %q, models: [%s], role: %s", w.engine.id, w.engine.url(), w.model, w.role)
		if w.bootstrapPort != 0 {
			fmt.Fprintf(&b, ", bootstrap_port: %d", w.bootstrapPort)
		}
		b.WriteString("}\n")
	}
	b.WriteString(extra)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := deciderserver.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath, cfg.ConfigSnapshot = "127.0.0.1:0", "127.0.0.1:0", path, "-"
	srv, err := deciderserver.New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatalf("deciderserver.New: %v\nconfig:\n%s", err, b.String())
	}
	run(t, srv.Run)
	// The decider is not ready until Run serves; start from a ready one, as a gateway behind a
	// rollout would.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		resp, err := http.Get("http://" + srv.HTTPAddr() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("decider not ready 10s after Run: %v", err)
		}
	}
	return srv
}

// startGateway runs a gateway in front of the decider.
func startGateway(t testing.TB, d *deciderserver.Server, edit func(*Config)) *Server {
	t.Helper()
	return startGatewayAt(t, d.GRPCAddr(), edit)
}

// run runs a service until the test ends and checks it stopped cleanly.
func run(t testing.TB, fn func(context.Context) error) {
	t.Helper()
	testrun.Background(t, fn)
}

// post sends a JSON body to the gateway.
func post(t testing.TB, g *Server, path, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+g.Addr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitLeases waits until the decider holds no lease (releases run after the response ends).
func waitLeases(t testing.TB, d *deciderserver.Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for d.Leases().Leases() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("decider still holds %d leases, want 0", d.Leases().Leases())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metricValue scrapes one sample (name plus its label text, e.g.
// `sluice_gateway_retries_total` or `x{a="b"}`) from a /metrics endpoint; 0 when absent.
func metricValue(t testing.TB, addr, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text := readAll(t, resp)
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err != nil {
				t.Fatalf("metric %s: %v", sample, err)
			}
			return v
		}
	}
	return 0
}

// recordingDecider is a hand-written gRPC front for a real decider: it records every
// DecideRequest and forwards Decide, Release and ListEngines, so tests can see exactly what the
// gateway asked.
type recordingDecider struct {
	sluicev1.UnimplementedDeciderServiceServer
	sluicev1.UnimplementedAdminServiceServer
	next  sluicev1.DeciderServiceClient
	admin sluicev1.AdminServiceClient
	addr  string

	mu   sync.Mutex
	reqs []*sluicev1.DecideRequest
	// releaseLeft is the time left before each Release call's deadline when it arrived
	// (-1 without a deadline).
	releaseLeft []time.Duration
}

func startRecordingDecider(t testing.TB, d *deciderserver.Server) *recordingDecider {
	t.Helper()
	conn, err := grpc.NewClient(d.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rd := &recordingDecider{next: sluicev1.NewDeciderServiceClient(conn), admin: sluicev1.NewAdminServiceClient(conn)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rd.addr = lis.Addr().String()
	srv := grpc.NewServer()
	sluicev1.RegisterDeciderServiceServer(srv, rd)
	sluicev1.RegisterAdminServiceServer(srv, rd)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return rd
}

func (rd *recordingDecider) Decide(ctx context.Context, in *sluicev1.DecideRequest) (*sluicev1.DecideResponse, error) {
	rd.mu.Lock()
	rd.reqs = append(rd.reqs, proto.Clone(in).(*sluicev1.DecideRequest))
	rd.mu.Unlock()
	return rd.next.Decide(ctx, in)
}

func (rd *recordingDecider) Release(ctx context.Context, in *sluicev1.ReleaseRequest) (*sluicev1.ReleaseResponse, error) {
	left := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	rd.mu.Lock()
	rd.releaseLeft = append(rd.releaseLeft, left)
	rd.mu.Unlock()
	return rd.next.Release(ctx, in)
}

func (rd *recordingDecider) releaseDeadlines() []time.Duration {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return append([]time.Duration(nil), rd.releaseLeft...)
}

func (rd *recordingDecider) ListEngines(ctx context.Context, in *sluicev1.ListEnginesRequest) (*sluicev1.ListEnginesResponse, error) {
	return rd.admin.ListEngines(ctx, in)
}

func (rd *recordingDecider) requests() []*sluicev1.DecideRequest {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return append([]*sluicev1.DecideRequest(nil), rd.reqs...)
}

// startGatewayAt runs a gateway whose decider is at deciderAddr.
func startGatewayAt(t testing.TB, deciderAddr string, edit func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Addr, cfg.DeciderAddr = "127.0.0.1:0", deciderAddr
	if edit != nil {
		edit(&cfg)
	}
	g, err := New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, g.Run)
	return g
}
