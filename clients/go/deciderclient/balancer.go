package deciderclient

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
)

// A lease lives in the table of the decider replica that granted it (docs/decisions.md,
// "Leases"): a Release sent to another replica of the same fleet is answered released: false
// and the lease holds its engine's in-flight slot until -lease-ttl. gRPC's round_robin spreads
// calls over every address a target resolves to, Release included, so with N replicas behind
// one connection (N-1)/N of the releases went astray. LeaseAffinity is round_robin for Decide
// and sends each Release to the replica its lease came from.
//
// gRPC's balancer/base (the frame round_robin itself was built on) is used for the picker's
// bookkeeping; the pick is ours: round robin over the ready replicas, except for a call whose
// context names the replica it must reach.

// LeaseAffinity is the name of the load-balancing policy that spreads Decide calls round robin
// over a connection's ready addresses and sends each Release to the address that granted the
// lease. Dial with WithLeaseAffinity (or this name in a service config) when one target
// resolves to several decider replicas.
const LeaseAffinity = "sluice_lease_affinity"

// WithLeaseAffinity is the dial option selecting LeaseAffinity for a connection.
func WithLeaseAffinity() grpc.DialOption {
	return grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"` + LeaseAffinity + `": {}}]}`)
}

// gRPC's balancer registry is read without locks, so balancer.Register's contract is to be
// called during initialization (in an init function), before any connection is made: the one
// exception to the house rule of no init functions.
func init() { //nolint:gochecknoinits // balancer.Register must run at package initialization
	balancer.Register(base.NewBalancerBuilder(LeaseAffinity, affinityPickerBuilder{}, base.Config{HealthCheck: true}))
}

// replicaRoute travels in a call's context to the picker: want names the address a Release
// must reach; the picker writes the address a Decide reached into got. (Only this picker
// writes it: over any other balancer got stays "" and nothing is remembered.)
type replicaRoute struct {
	want string
	got  string
}

type routeKey struct{}

func withRoute(ctx context.Context, r *replicaRoute) context.Context {
	return context.WithValue(ctx, routeKey{}, r)
}

type affinityPickerBuilder struct{}

func (affinityPickerBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	if len(info.ReadySCs) == 0 {
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	p := &affinityPicker{byAddr: make(map[string]balancer.SubConn, len(info.ReadySCs))}
	for sc, sci := range info.ReadySCs {
		p.scs = append(p.scs, sc)
		p.addrs = append(p.addrs, sci.Address.Addr)
		p.byAddr[sci.Address.Addr] = sc
	}
	p.next.Store(rand.Uint32()) // replicas' shares do not depend on when each picker was built
	return p
}

type affinityPicker struct {
	scs    []balancer.SubConn
	addrs  []string
	byAddr map[string]balancer.SubConn
	next   atomic.Uint32
}

func (p *affinityPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	r, _ := info.Ctx.Value(routeKey{}).(*replicaRoute)
	if r != nil && r.want != "" {
		if sc, ok := p.byAddr[r.want]; ok {
			return balancer.PickResult{SubConn: sc}, nil
		}
		// The granting replica is gone from the ready set: its leases went with it, and any
		// replica answers released: false. (A replica that has just failed may still be
		// picked by this picker; the Release then fails Unavailable.)
	}
	i := int(p.next.Add(1) % uint32(len(p.scs)))
	if r != nil {
		r.got = p.addrs[i]
	}
	return balancer.PickResult{SubConn: p.scs[i]}, nil
}

// leaseReplicas remembers, for the leases a Client was granted through a LeaseAffinity
// connection, which replica granted each, until it is released or expires. Every such lease is
// remembered, even when one replica was ready at its Decide: the others may be ready by its
// Release.
type leaseReplicas struct {
	mu      sync.Mutex
	replica map[string]string // lease id -> address
	expiry  []leaseExpiry     // from head on, in grant order; leases' TTLs are alike, so expiries almost are
	head    int
}

type leaseExpiry struct {
	at time.Time
	id string
}

// maxRememberedLeases bounds the table (a decider holds at most 1,000,000 live leases).
const maxRememberedLeases = 1 << 20

func (l *leaseReplicas) remember(id, addr string, expires, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.replica == nil {
		l.replica = map[string]string{}
	}
	for l.head < len(l.expiry) && (l.expiry[l.head].at.Before(now) || len(l.expiry)-l.head >= maxRememberedLeases) {
		delete(l.replica, l.expiry[l.head].id)
		l.expiry[l.head] = leaseExpiry{}
		l.head++
	}
	if l.head > 0 && l.head >= len(l.expiry)/2 { // amortized: each entry moves at most once per halving
		l.expiry = append(l.expiry[:0], l.expiry[l.head:]...)
		l.head = 0
	}
	l.replica[id] = addr
	l.expiry = append(l.expiry, leaseExpiry{at: expires, id: id})
}

// take returns the replica that granted id ("" when not remembered) and forgets it.
func (l *leaseReplicas) take(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	addr, ok := l.replica[id]
	if ok {
		delete(l.replica, id) // its expiry entry goes when it comes due
	}
	return addr
}
