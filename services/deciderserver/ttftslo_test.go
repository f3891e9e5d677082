package deciderserver

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/clients/go/deciderclient"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/gen/sluice/v1/sluicev1connect"
)

// holdShort puts one leased request in flight on s1, the short bucket's only engine, so its
// predicted time to first token is about 1 s (testdata/ttft-slo.yaml).
func holdShort(t *testing.T, c sluicev1.DeciderServiceClient) {
	t.Helper()
	resp, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "chat", InputTokens: 100})
	if err != nil || resp.GetPick().GetPlain().GetEngineId() != "s1" {
		t.Fatalf("Decide() = %v, %v; want s1 in capacity order", resp, err)
	}
}

func TestGRPCDecideTTFTTarget(t *testing.T) {
	srv := startServer(t, "testdata/ttft-slo.yaml")
	c := grpcClient(t, srv)
	ctx := context.Background()
	holdShort(t, c)

	// Without a target the order stays by capacity: short first, even with s1 busy.
	resp, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 100, DryRun: true, Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetBucketId() != "short" || resp.GetExplain().GetTtftSlo() != nil {
		t.Fatalf("Decide() without target = %v, want short and no ttft_slo explanation", resp)
	}

	// With 500 ms: short predicts 1 s + 10 ms (one request in flight), long 10 ms: long first.
	resp, err = c.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 100, TtftSloMs: proto.Float64(500), DryRun: true, Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetBucketId() != "long" {
		t.Fatalf("Decide(ttft_slo_ms 500) bucket = %s, want long", resp.GetBucketId())
	}
	slo := resp.GetExplain().GetTtftSlo()
	if slo.GetStatus() != "ordered" || slo.GetTargetMs() != 500 || len(slo.GetBuckets()) != 2 {
		t.Fatalf("explain ttft_slo = %v, want ordered, target 500, two buckets", slo)
	}
	long, short := slo.GetBuckets()[0], slo.GetBuckets()[1]
	if long.GetBucketId() != "long" || !long.GetMet() || long.GetPredictedTtft().AsDuration() != 10*time.Millisecond || long.GetEngineId() != "l1" {
		t.Errorf("first bucket = %v, want long met at 10ms on l1", long)
	}
	if short.GetBucketId() != "short" || short.GetMet() || short.GetPredictedTtft().AsDuration() != 1010*time.Millisecond ||
		short.GetEstimate().GetQueueTokens() != 10000 || !strings.Contains(short.GetEstimate().GetQueueFrom(), "in-flight") ||
		!short.GetEstimate().GetPrefillRateDefault() || short.GetEstimate().GetPrefillTokensPerS() != 10000 {
		t.Errorf("second bucket = %v, want short not met at 1.01s (10000 in-flight tokens ahead at the default rate)", short)
	}
	// The long bucket runs ttft_aware: each candidate's estimate and parts are on the wire.
	cands := resp.GetExplain().GetAttempts()[0].GetStages()[0].GetCandidates()
	if len(cands) != 2 {
		t.Fatalf("candidates = %v, want l1 and l2", cands)
	}
	for _, cand := range cands {
		e := cand.GetTtft()
		if e.GetEstimate().AsDuration() != 10*time.Millisecond || e.GetOwnPrefill().AsDuration() != 10*time.Millisecond ||
			e.GetQueue().AsDuration() != 0 || e.GetSlotWait().AsDuration() != 0 || cand.GetUncachedTokens() != 100 || e.GetBatchFull() {
			t.Errorf("candidate %s ttft = %v (uncached %d), want 10ms = own prefill of 100 uncached tokens", cand.GetEngineId(), e, cand.GetUncachedTokens())
		}
	}

	// A target both buckets miss keeps capacity order: short is tried first and picks.
	resp, err = c.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 100, TtftSloMs: proto.Float64(1), DryRun: true, Explain: true})
	if err != nil || resp.GetBucketId() != "short" {
		t.Fatalf("Decide(ttft_slo_ms 1) = %v, %v; want short", resp, err)
	}
	// A request only long fits has only long to try.
	resp, err = c.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 5000, TtftSloMs: proto.Float64(0.5), DryRun: true, Explain: true})
	if err != nil || resp.GetBucketId() != "long" || len(resp.GetExplain().GetTtftSlo().GetBuckets()) != 1 {
		t.Fatalf("Decide(5000 tokens) = %v, %v; want long, one predicted bucket", resp, err)
	}
}

// ttftViolation returns the ErrorInfo reason and the BadRequest field of st.
func ttftViolation(st *status.Status) (reason, field string) {
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				field = v.GetField()
			}
		}
	}
	return reason, field
}

// disabledConfig is testdata/ttft-slo.yaml with the preference turned off.
func disabledConfig(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("testdata/ttft-slo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(string(raw), "enabled: true", "enabled: false", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestGRPCDecideInvalidTTFTTarget(t *testing.T) {
	enabled := grpcClient(t, startServer(t, "testdata/ttft-slo.yaml"))
	disabled := grpcClient(t, startServer(t, disabledConfig(t)))
	for _, tt := range []struct {
		name string
		ms   float64
		want string
	}{
		{"negative", -5, "is not positive"},
		{"zero", 0, "is not positive"},
		{"not a number", math.NaN(), "is not a number"},
		{"infinite", math.Inf(1), "above the largest target accepted, 60000 ms (ttft_slo.max_target_ms)"},
		{"absurd", 1e12, "above the largest target accepted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := enabled.Decide(context.Background(), &sluicev1.DecideRequest{Model: "chat", InputTokens: 1, TtftSloMs: proto.Float64(tt.ms), DryRun: true})
			st := status.Convert(err)
			reason, field := ttftViolation(st)
			if st.Code() != codes.InvalidArgument || reason != "INVALID_TTFT_SLO" || field != "ttft_slo_ms" || !strings.Contains(st.Message(), tt.want) {
				t.Errorf("Decide(ttft_slo_ms %v) = %v %s field %q: %s; want InvalidArgument INVALID_TTFT_SLO on ttft_slo_ms saying %q",
					tt.ms, st.Code(), reason, field, st.Message(), tt.want)
			}
			if v := deciderclient.FieldViolations(err)["ttft_slo_ms"]; !strings.Contains(v, tt.want) {
				t.Errorf("deciderclient.FieldViolations(err)[ttft_slo_ms] = %q, want it to say %q", v, tt.want)
			}
			// Not enabled: the same target is ignored, and explain says so.
			resp, err := disabled.Decide(context.Background(), &sluicev1.DecideRequest{Model: "chat", InputTokens: 1, TtftSloMs: proto.Float64(tt.ms), DryRun: true, Explain: true})
			if err != nil || resp.GetBucketId() != "short" || resp.GetExplain().GetTtftSlo().GetStatus() != "disabled" {
				t.Errorf("Decide(ttft_slo_ms %v) with ttft_slo off = %v, %v; want short, ttft_slo disabled", tt.ms, resp, err)
			}
		})
	}
}

func TestConnectDecideTTFTTarget(t *testing.T) {
	srv := startServer(t, "testdata/ttft-slo.yaml")
	holdShort(t, grpcClient(t, srv))
	for _, opt := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}}, {"connect-json", []connect.ClientOption{connect.WithProtoJSON()}}} {
		t.Run(opt.name, func(t *testing.T) {
			c := sluicev1connect.NewDeciderServiceClient(http.DefaultClient, "http://"+srv.HTTPAddr(), opt.opts...)
			for _, tt := range []struct {
				target *float64
				want   string
			}{{nil, "short"}, {proto.Float64(500), "long"}} {
				resp, err := c.Decide(context.Background(), connect.NewRequest(&sluicev1.DecideRequest{Model: "chat", InputTokens: 100, TtftSloMs: tt.target, DryRun: true}))
				if err != nil || resp.Msg.GetBucketId() != tt.want {
					t.Errorf("Decide(ttft_slo_ms %v) = %v, %v; want %s", tt.target, resp, err, tt.want)
				}
			}
			_, err := c.Decide(context.Background(), connect.NewRequest(&sluicev1.DecideRequest{Model: "chat", InputTokens: 100, TtftSloMs: proto.Float64(-1)}))
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.Contains(ce.Message(), "ttft_slo_ms -1 is not positive") {
				t.Errorf("Decide(ttft_slo_ms -1) error = %v, want InvalidArgument naming ttft_slo_ms", err)
			}
		})
	}
}

func TestRESTDecideTTFTTarget(t *testing.T) {
	srv := startServer(t, "testdata/ttft-slo.yaml")
	holdShort(t, grpcClient(t, srv))
	decide := func(body string) (int, map[string]any) {
		t.Helper()
		resp, raw := restRaw(t, srv, http.MethodPost, "/v1/decide", body)
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("POST /v1/decide %s: %d %s", body, resp.StatusCode, raw)
		}
		return resp.StatusCode, m
	}
	for _, tt := range []struct {
		body   string
		code   int
		bucket string
		msg    string
	}{
		{`{"model":"chat","input_tokens":100,"dry_run":true}`, 200, "short", ""},
		{`{"model":"chat","input_tokens":100,"dry_run":true,"ttft_slo_ms":500}`, 200, "long", ""},
		{`{"model":"chat","input_tokens":100,"dry_run":true,"ttftSloMs":"500"}`, 200, "long", ""},
		{`{"model":"chat","input_tokens":100,"ttft_slo_ms":-3}`, 400, "", "ttft_slo_ms -3 is not positive"},
		{`{"model":"chat","input_tokens":100,"ttft_slo_ms":"NaN"}`, 400, "", "ttft_slo_ms is not a number"},
		{`{"model":"chat","input_tokens":100,"ttft_slo_ms":"Infinity"}`, 400, "", "above the largest target"},
		{`{"model":"chat","input_tokens":100,"ttft_slo_ms":"soon"}`, 400, "", ""},
	} {
		code, m := decide(tt.body)
		if code != tt.code || (tt.bucket != "" && m["bucketId"] != tt.bucket) || !strings.Contains(messageOf(m), tt.msg) {
			t.Errorf("POST /v1/decide %s = %d %v, want %d bucket %q message %q", tt.body, code, m, tt.code, tt.bucket, tt.msg)
		}
	}
}
