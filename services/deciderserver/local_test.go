package deciderserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/clients/go/deciderclient"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// The in-process connection serves what gRPC serves: the same decisions and leases, the same
// error statuses with their reasons, the same token checks and Decide admission, counted as
// protocol "in-process".
func TestLocalConnIsTheSameService(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath = "127.0.0.1:0", "127.0.0.1:0", "testdata/two-buckets.yaml"
	cfg.Health.ProbeInterval = 0
	cfg.DecideToken = "s3cret"
	cfg.MaxConcurrentDecides = 1
	srv := runServer(t, cfg)
	ctx := context.Background()

	anon := deciderclient.New(srv.LocalConn())
	if _, err := anon.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 1000}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Decide without the token = %v, want Unauthenticated", err)
	}
	c := deciderclient.New(srv.LocalConn(), deciderclient.WithToken("s3cret"))
	req := &sluicev1.DecideRequest{Model: "chat", InputTokens: 1000, ExpectedPeakTokens: proto.Int64(1500), TokenIds: nil}
	resp, err := c.Decide(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetBucketId() != "short" || resp.GetPick().GetPlain().GetEngineId() != "a1" || resp.GetLeaseId() == "" || resp.GetLeaseExpiresAt() == nil {
		t.Fatalf("Decide() = %v, want bucket short engine a1 with a lease", resp)
	}
	if srv.Leases().Leases() != 1 {
		t.Errorf("leases = %d after one Decide, want 1", srv.Leases().Leases())
	}
	released, err := c.Release(ctx, resp.GetLeaseId(), sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS)
	if err != nil || !released {
		t.Fatalf("Release = %v, %v", released, err)
	}
	if released, err := c.Release(ctx, resp.GetLeaseId(), sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS); err != nil || released {
		t.Errorf("second Release = %v, %v; want false", released, err)
	}
	_, err = c.Decide(ctx, &sluicev1.DecideRequest{Model: "gpt-9", InputTokens: 1})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || deciderclient.Reason(err) != "UNKNOWN_MODEL" {
		t.Errorf("unknown model = %v %q, want InvalidArgument UNKNOWN_MODEL", st.Code(), deciderclient.Reason(err))
	}
	// The caller's message is copied, not kept: changing it after the call changes nothing.
	req.Model = "changed"
	if resp.GetBucketId() != "short" {
		t.Error("the response changed with the request")
	}

	// The one Decide slot is held: the next in-process Decide is shed like a gRPC one.
	sl := srv.shed
	if !sl.acquire() {
		t.Fatal("slot not free")
	}
	_, err = c.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 1})
	sl.release()
	if !deciderclient.Overloaded(err) {
		t.Errorf("Decide with every slot taken = %v, want DECIDER_OVERLOADED", err)
	}

	admin := sluicev1.NewAdminServiceClient(srv.LocalConn())
	if _, err := admin.ListEngines(ctx, &sluicev1.ListEnginesRequest{}); err != nil {
		t.Errorf("ListEngines in process: %v", err)
	}

	resp2, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	for _, want := range []string{
		`sluice_decider_rpcs_total{code="OK",procedure="/sluice.v1.DeciderService/Decide",protocol="in-process"} 1`,
		`sluice_decider_rpcs_total{code="Unauthenticated",procedure="/sluice.v1.DeciderService/Decide",protocol="in-process"} 1`,
		`sluice_decider_rpcs_total{code="OK",procedure="/sluice.v1.DeciderService/Release",protocol="in-process"} 2`,
		`sluice_decider_shed_total{protocol="in-process"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
