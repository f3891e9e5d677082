package deciderclient

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// shardDecider serves model and refuses every other one with WRONG_SHARD naming redirect.
type shardDecider struct {
	sluicev1.UnimplementedDeciderServiceServer
	model, redirect   string
	decides, releases atomic.Int32
}

func (d *shardDecider) Decide(_ context.Context, in *sluicev1.DecideRequest) (*sluicev1.DecideResponse, error) {
	d.decides.Add(1)
	if in.GetModel() != d.model {
		md := map[string]string{"model": in.GetModel(), "shard": "other"}
		if d.redirect != "" {
			md["deciders"] = d.redirect
		}
		st, _ := status.New(codes.FailedPrecondition, "wrong shard").WithDetails(&errdetails.ErrorInfo{Reason: ReasonWrongShard, Domain: "sluice.dev", Metadata: md})
		return nil, st.Err()
	}
	return &sluicev1.DecideResponse{BucketId: d.model, LeaseId: "l-" + d.model}, nil
}

func (d *shardDecider) Release(context.Context, *sluicev1.ReleaseRequest) (*sluicev1.ReleaseResponse, error) {
	d.releases.Add(1)
	return &sluicev1.ReleaseResponse{Released: true}, nil
}

func TestShardedFollowsWrongShard(t *testing.T) {
	t.Parallel()
	b := &shardDecider{model: "mb"}
	bAddr := serveShard(t, b)
	a := &shardDecider{model: "ma", redirect: bAddr}
	home, err := Dial(serveShard(t, a))
	if err != nil {
		t.Fatal(err)
	}
	defer home.Close()
	s := NewSharded(home)
	defer s.Close()
	ctx := context.Background()
	for range 3 {
		resp, err := s.Decide(ctx, &sluicev1.DecideRequest{Model: "mb"})
		if err != nil || resp.GetBucketId() != "mb" {
			t.Fatalf("Decide(mb) = %v, %v; want shard b's answer", resp, err)
		}
	}
	if na, nb := a.decides.Load(), b.decides.Load(); na != 1 || nb != 3 {
		t.Errorf("decides: home %d, shard b %d; want 1 (the first, refused) and 3", na, nb)
	}
	if _, err := s.Release(ctx, "mb", "l-mb", sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS); err != nil || b.releases.Load() != 1 || a.releases.Load() != 0 {
		t.Errorf("Release(mb): err %v, shard b %d, home %d; want it on shard b", err, b.releases.Load(), a.releases.Load())
	}
	if resp, err := s.Decide(ctx, &sluicev1.DecideRequest{Model: "ma"}); err != nil || resp.GetBucketId() != "ma" {
		t.Errorf("Decide(ma) = %v, %v; want home's answer", resp, err)
	}
	// A refusal without deciders is returned as is.
	_, err = NewSharded(home).Decide(ctx, &sluicev1.DecideRequest{Model: "mc"})
	if Reason(err) != ReasonWrongShard {
		t.Errorf("Decide(mc) = %v, want the WRONG_SHARD refusal", err)
	}
}

func serveShard(t *testing.T, d *shardDecider) string {
	addr, _ := serveDecider(t, d)
	return addr
}

// serveDecider serves d over gRPC on a loopback port until the test ends or stop is called.
func serveDecider(t *testing.T, d sluicev1.DeciderServiceServer) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	sluicev1.RegisterDeciderServiceServer(s, d)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String(), s.Stop
}

// TestShardedBurst: many concurrent first calls for a sharded model all end on the owning
// shard, and the route is dialed once.
func TestShardedBurst(t *testing.T) {
	t.Parallel()
	b := &shardDecider{model: "mb"}
	a := &shardDecider{model: "ma", redirect: serveShard(t, b)}
	home, err := Dial(serveShard(t, a))
	if err != nil {
		t.Fatal(err)
	}
	defer home.Close()
	s := NewSharded(home)
	defer s.Close()
	const n = 32
	errs := make(chan error, n)
	for range n {
		go func() {
			resp, err := s.Decide(context.Background(), &sluicev1.DecideRequest{Model: "mb"})
			if err == nil && resp.GetBucketId() != "mb" {
				err = status.Errorf(codes.Internal, "answered by %q", resp.GetBucketId())
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := b.decides.Load(); got != n {
		t.Errorf("shard b answered %d of %d calls", got, n)
	}
	s.mu.Lock()
	conns := len(s.conns)
	s.mu.Unlock()
	if conns != 1 {
		t.Errorf("%d shard connections dialed, want 1", conns)
	}
}
