package deciderserver

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/clients/go/deciderclient"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// exampleConfig is a copy of examples/sluice.yaml, so that no admin write could touch the
// repository's file.
func exampleConfig(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return &errdetails.ErrorInfo{}
}

// With examples/sluice.yaml the only bucket wide enough for 200,000 tokens is the unlimited
// disaggregated one, and llama-3-8b has no prefill or decode engines: no bucket that can serve
// the model fits, which is the caller's to fix (400), not an outage to retry (503).
func TestDecideTooLongForEveryBucketOfTheModel(t *testing.T) {
	srv := startServer(t, exampleConfig(t))
	c := grpcClient(t, srv)
	tests := []struct {
		name     string
		req      *sluicev1.DecideRequest
		code     codes.Code
		reason   string
		metadata map[string]string
		message  string
	}{
		{name: "plain model beyond its widest bucket", req: &sluicev1.DecideRequest{Model: "llama-3-8b", InputTokens: 200000},
			code: codes.InvalidArgument, reason: "NO_MATCHING_BUCKET",
			metadata: map[string]string{"widest_bucket": "long-context", "widest_capacity_tokens": "131072"},
			message:  `no bucket able to serve model "llama-3-8b" accepts input_tokens 200000; the widest that is, "long-context", takes input_tokens 0 to 131072 within a context of 131072 tokens`},
		{name: "output budget beyond it", req: &sluicev1.DecideRequest{Model: "llama-3-8b", InputTokens: 100000, ExpectedPeakTokens: proto.Int64(140000)},
			code: codes.InvalidArgument, reason: "NO_MATCHING_BUCKET",
			metadata: map[string]string{"widest_bucket": "long-context", "widest_capacity_tokens": "131072"},
			message:  "disaggregated (no prefill engine for the model)"},
		// The plain engines exist but are out of reach for this request: retryable.
		{name: "plain engines excluded", req: &sluicev1.DecideRequest{Model: "llama-3-8b", InputTokens: 100000, ExcludeEngineIds: []string{"plain-a", "plain-b"}},
			code: codes.Unavailable, reason: "NO_CANDIDATES"},
		// The PD model fits the disaggregated bucket, whose prefill engine is out of reach.
		{name: "pd model, prefill excluded", req: &sluicev1.DecideRequest{Model: "qwen3-32b", InputTokens: 200000, ExcludeEngineIds: []string{"prefill-1"}},
			code: codes.Unavailable, reason: "NO_PREFILL_CANDIDATES"},
		{name: "pd model fits", req: &sluicev1.DecideRequest{Model: "qwen3-32b", InputTokens: 200000, DryRun: true}, code: codes.OK},
		{name: "plain model fits", req: &sluicev1.DecideRequest{Model: "llama-3-8b", InputTokens: 131072, DryRun: true}, code: codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Decide(context.Background(), tt.req)
			st := status.Convert(err)
			info := errorInfo(st)
			if st.Code() != tt.code || info.GetReason() != tt.reason || !strings.Contains(st.Message(), tt.message) {
				t.Fatalf("Decide() = %v %s: %s; want %v %s saying %q", st.Code(), info.GetReason(), st.Message(), tt.code, tt.reason, tt.message)
			}
			for k, v := range tt.metadata {
				if info.GetMetadata()[k] != v {
					t.Errorf("ErrorInfo metadata %s = %q, want %q (all: %v)", k, info.GetMetadata()[k], v, info.GetMetadata())
				}
			}
		})
	}
	// The Go client reads the widest capacity from the error.
	dc, err := deciderclient.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	_, err = dc.Decide(context.Background(), &sluicev1.DecideRequest{Model: "llama-3-8b", InputTokens: 200000})
	if md := deciderclient.Metadata(err); deciderclient.Reason(err) != "NO_MATCHING_BUCKET" || md["widest_capacity_tokens"] != "131072" {
		t.Errorf("deciderclient: %s %v, want NO_MATCHING_BUCKET with widest_capacity_tokens 131072", deciderclient.Reason(err), md)
	}
	// REST answers the same 400.
	resp, raw := restRaw(t, srv, http.MethodPost, "/v1/decide", `{"model":"llama-3-8b","input_tokens":200000}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), "NO_MATCHING_BUCKET") || !strings.Contains(string(raw), "131072") {
		t.Errorf("POST /v1/decide = %d %s, want 400 NO_MATCHING_BUCKET naming 131072", resp.StatusCode, raw)
	}
}
