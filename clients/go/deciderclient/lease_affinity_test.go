package deciderclient

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// replicaDecider keeps its own lease table, as a decider replica does: only the replica that
// granted a lease releases it.
type replicaDecider struct {
	sluicev1.UnimplementedDeciderServiceServer
	mu       sync.Mutex
	leases   map[string]bool
	decides  int
	released int
}

func (d *replicaDecider) Decide(context.Context, *sluicev1.DecideRequest) (*sluicev1.DecideResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := rand.Text()
	d.leases[id] = true
	d.decides++
	return &sluicev1.DecideResponse{LeaseId: id, LeaseExpiresAt: timestamppb.New(time.Now().Add(time.Minute))}, nil
}

func (d *replicaDecider) Release(_ context.Context, in *sluicev1.ReleaseRequest) (*sluicev1.ReleaseResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ok := d.leases[in.GetLeaseId()]
	delete(d.leases, in.GetLeaseId())
	if ok {
		d.released++
	}
	return &sluicev1.ReleaseResponse{Released: ok}, nil
}

func serveReplica(t *testing.T) (*replicaDecider, string, func()) {
	t.Helper()
	d := &replicaDecider{leases: map[string]bool{}}
	addr, stop := serveDecider(t, d)
	return d, addr, stop
}

// decideAndRelease takes n leases, then releases them all in the reverse order (a balancer
// that merely alternates would otherwise pair them up by chance), and returns how many releases
// the deciders answered released: true.
func decideAndRelease(t *testing.T, n int, decide func() (*sluicev1.DecideResponse, error), release func(id string) (bool, error)) int {
	t.Helper()
	var ids []string
	for range n {
		resp, err := decide()
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		ids = append(ids, resp.GetLeaseId())
	}
	ok := 0
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		released, err := release(id)
		if err != nil {
			t.Fatalf("Release(%s): %v", id, err)
		}
		if released {
			ok++
		}
	}
	return ok
}

// TestReleaseReachesTheGrantingReplica: with two replicas behind one connection (a shard's
// listed deciders, or one target resolving to two addresses), Decide spreads over both and
// every Release reaches the replica holding its lease. Under round_robin about half the
// releases were answered released: false and the leases held their slots until the TTL.
func TestReleaseReachesTheGrantingReplica(t *testing.T) {
	t.Parallel()
	a, aAddr, _ := serveReplica(t)
	b, bAddr, _ := serveReplica(t)
	ctx := context.Background()
	const n = 64

	t.Run("sharded", func(t *testing.T) {
		home, err := Dial(aAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer home.Close()
		s := NewSharded(home)
		defer s.Close()
		if err := s.SetModelDeciders("m", []string{aAddr, bAddr}); err != nil {
			t.Fatal(err)
		}
		if got := decideAndRelease(t, n,
			func() (*sluicev1.DecideResponse, error) { return s.Decide(ctx, &sluicev1.DecideRequest{Model: "m"}) },
			func(id string) (bool, error) {
				return s.Release(ctx, "m", id, sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS)
			}); got != n {
			t.Errorf("released %d of %d leases; want all, each on the replica that granted it", got, n)
		}
	})

	t.Run("one target, two addresses", func(t *testing.T) {
		r := manual.NewBuilderWithScheme("two-replicas")
		r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: aAddr}, {Addr: bAddr}}})
		conn, err := grpc.NewClient(r.Scheme()+":///deciders", grpc.WithResolvers(r),
			grpc.WithTransportCredentials(insecure.NewCredentials()), WithLeaseAffinity())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := New(conn)
		if got := decideAndRelease(t, n,
			func() (*sluicev1.DecideResponse, error) { return c.Decide(ctx, &sluicev1.DecideRequest{Model: "m"}) },
			func(id string) (bool, error) {
				return c.Release(ctx, id, sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS)
			}); got != n {
			t.Errorf("released %d of %d leases; want all", got, n)
		}
		if c.leases.take("unknown") != "" || len(c.leases.replica) != 0 {
			t.Errorf("%d leases still remembered after their release", len(c.leases.replica))
		}
	})

	a.mu.Lock()
	b.mu.Lock()
	defer a.mu.Unlock()
	defer b.mu.Unlock()
	// Round robin: both replicas took about half the Decides (exactly half from one picker).
	if a.decides < n/2 || b.decides < n/2 {
		t.Errorf("decides: %d and %d; want both replicas to take Decides (round robin)", a.decides, b.decides)
	}
	if len(a.leases)+len(b.leases) != 0 {
		t.Errorf("%d leases left held on the replicas", len(a.leases)+len(b.leases))
	}
}

// TestReleaseOfAGoneReplicasLease: when the replica that granted a lease is gone, its Release
// goes to another one (which answers released: false: the lease went with its replica)
// instead of failing or waiting.
func TestReleaseOfAGoneReplicasLease(t *testing.T) {
	t.Parallel()
	a, aAddr, stopA := serveReplica(t)
	_, bAddr, _ := serveReplica(t)
	home, err := Dial(bAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer home.Close()
	s := NewSharded(home, WithTimeout(5*time.Second), WithRetryUnavailable(5, 20*time.Millisecond))
	defer s.Close()
	if err := s.SetModelDeciders("m", []string{aAddr, bAddr}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var fromA string
	for i := 0; fromA == "" && i < 16; i++ {
		resp, err := s.Decide(ctx, &sluicev1.DecideRequest{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		if a.leases[resp.GetLeaseId()] {
			fromA = resp.GetLeaseId()
		}
		a.mu.Unlock()
	}
	if fromA == "" {
		t.Fatal("replica a granted none of 16 leases")
	}
	stopA()
	// Until the connection sees a gone, its lease's Release fails Unavailable (the replica
	// holding it cannot be reached); then the other replica answers released: false. Either
	// way it answers at once.
	released, err := s.Release(ctx, "m", fromA, sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS)
	if released || (err != nil && status.Code(err) != codes.Unavailable) {
		t.Errorf("Release of the gone replica's lease = %v, %v; want false, or Unavailable", released, err)
	}
	// A later lease is granted and released by the replica left.
	if got := decideAndRelease(t, 8,
		func() (*sluicev1.DecideResponse, error) { return s.Decide(ctx, &sluicev1.DecideRequest{Model: "m"}) },
		func(id string) (bool, error) {
			return s.Release(ctx, "m", id, sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS)
		}); got != 8 {
		t.Errorf("after a replica left: released %d of 8 leases, want all", got)
	}
}

func TestLeaseReplicasForgetsExpiredLeases(t *testing.T) {
	t.Parallel()
	var l leaseReplicas
	t0 := time.Now()
	for i := range 1000 {
		l.remember(fmt.Sprint(i), "a", t0.Add(time.Duration(i)*time.Millisecond), t0.Add(time.Duration(i)*time.Millisecond))
	}
	// Every lease's expiry is its grant instant: by the last grant all others have expired.
	if len(l.replica) != 1 || len(l.expiry)-l.head != 1 {
		t.Errorf("remembered %d leases (%d expiries), want only the last one", len(l.replica), len(l.expiry)-l.head)
	}
	if got := l.take("999"); got != "a" {
		t.Errorf("take(999) = %q, want a", got)
	}
}
