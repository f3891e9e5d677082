package deciderserver

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/decider/policy"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// TestGRPCDecideAnswerFields checks every field of a plain and a PD answer with a lease as a
// gRPC caller reads them (the answer's messages are built in one allocation, not one each), and
// that both leases release.
func TestGRPCDecideAnswerFields(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	c := grpcClient(t, srv)
	ctx := context.Background()
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	ttl := DefaultConfig().LeaseTTL

	tests := []struct {
		name string
		req  *sluicev1.DecideRequest
		// want is the answer with its lease id, expiry and reasons left out (checked apart).
		want *sluicev1.DecideResponse
	}{
		{name: "plain", req: &sluicev1.DecideRequest{Model: "chat", InputTokens: 100},
			want: &sluicev1.DecideResponse{BucketId: "short", ConfigVersion: 1, Pick: &sluicev1.BucketPick{Kind: &sluicev1.BucketPick_Plain{
				Plain: &sluicev1.EnginePick{EngineId: "a1", Url: "http://a1.test:8000", Role: sluicev1.Role_ROLE_PLAIN}}}}},
		{name: "pd", req: &sluicev1.DecideRequest{Model: "pd-chat", InputTokens: 10},
			want: &sluicev1.DecideResponse{BucketId: "pd", ConfigVersion: 1, Pick: &sluicev1.BucketPick{Kind: &sluicev1.BucketPick_Pd{Pd: &sluicev1.PrefillDecodePick{
				Prefill: &sluicev1.EnginePick{EngineId: "p1", Url: "http://p1.test:8000", BootstrapPort: 8998, Role: sluicev1.Role_ROLE_PREFILL},
				Decode:  &sluicev1.EnginePick{EngineId: "d1", Url: "http://d1.test:8000", Role: sluicev1.Role_ROLE_DECODE}}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			resp, err := c.Decide(ctx, tc.req)
			after := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			got := proto.Clone(resp).(*sluicev1.DecideResponse)
			if !hex32.MatchString(got.GetLeaseId()) {
				t.Errorf("lease_id = %q, want 32 lowercase hex digits", got.GetLeaseId())
			}
			exp := got.GetLeaseExpiresAt()
			if err := exp.CheckValid(); err != nil || exp.AsTime().Before(before.Add(ttl)) || exp.AsTime().After(after.Add(ttl)) {
				t.Errorf("lease_expires_at = %v (%v), want within [%v, %v]", exp.AsTime(), err, before.Add(ttl), after.Add(ttl))
			}
			picks := []*sluicev1.EnginePick{got.GetPick().GetPlain(), got.GetPick().GetPd().GetPrefill(), got.GetPick().GetPd().GetDecode()}
			for _, p := range picks {
				if p != nil && p.GetReason() == "" {
					t.Errorf("pick %s has no reason", p.GetEngineId())
				}
				if p != nil {
					p.Reason = ""
				}
			}
			got.LeaseId, got.LeaseExpiresAt = "", nil
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Decide() mismatch (-want +got):\n%s", diff)
			}
			rel, err := c.Release(ctx, &sluicev1.ReleaseRequest{LeaseId: resp.GetLeaseId(), Outcome: sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS})
			if err != nil || !rel.GetReleased() {
				t.Errorf("Release(%s) = %v, %v; want released", resp.GetLeaseId(), rel, err)
			}
		})
	}
	if n := srv.Leases().Leases(); n != 0 {
		t.Errorf("leases after release = %d, want 0", n)
	}
}

// TestDecisionToProtoExpiry checks the lease expiry keeps nanoseconds exactly as
// timestamppb.New does.
func TestDecisionToProtoExpiry(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "testdata/two-buckets.yaml")
	dec, err := srv.decider.Decide(context.Background(), policy.Request{Model: "chat", InputTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	dec.Lease.Expires = time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)
	if got, want := decisionToProto(&dec).GetLeaseExpiresAt(), timestamppb.New(dec.Lease.Expires); !proto.Equal(got, want) {
		t.Errorf("lease_expires_at = %v, want %v", got, want)
	}
}
