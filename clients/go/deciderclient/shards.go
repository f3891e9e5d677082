package deciderclient

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// ReasonWrongShard is the ErrorInfo reason of a Decide sent to a decider whose shard does not
// own the model; its metadata names the owning shard ("shard") and, when the configuration
// lists them, that shard's deciders ("deciders", comma-separated host:port).
const ReasonWrongShard = "WRONG_SHARD"

// Sharded routes Decide calls by model among model-sharded deciders (docs/decisions.md,
// "Model-sharded deciders"). A model goes to the deciders of its shard when known (given with
// WithShardDeciders or learned from a WRONG_SHARD refusal), else to the home client. A
// WRONG_SHARD answer naming deciders updates the model's route and the call is sent there once
// more. It is safe for concurrent use.
type Sharded struct {
	home  *Client
	opts  []Option
	mu    sync.Mutex
	model map[string]string  // model -> deciders key (sorted addresses, comma-separated)
	conns map[string]*Client // deciders key -> client, round robin over the addresses (LeaseAffinity)
}

// NewSharded routes models of unknown shard to home, which the caller keeps owning; opts
// apply to the clients it dials for shards.
func NewSharded(home *Client, opts ...Option) *Sharded {
	return &Sharded{home: home, opts: opts, model: map[string]string{}, conns: map[string]*Client{}}
}

// SetModelDeciders routes model to deciders (host:port of one shard's replicas).
func (s *Sharded) SetModelDeciders(model string, deciders []string) error {
	key := strings.Join(deciders, ",")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.clientLocked(key); err != nil {
		return err
	}
	s.model[model] = key
	return nil
}

// clientLocked returns the client of key's addresses, dialing it on first use.
func (s *Sharded) clientLocked(key string) (*Client, error) {
	if c, ok := s.conns[key]; ok {
		return c, nil
	}
	var addrs []resolver.Address
	for _, a := range strings.Split(key, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, resolver.Address{Addr: a})
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("deciderclient: no decider addresses in %q", key)
	}
	r := manual.NewBuilderWithScheme("sluice-shard")
	r.InitialState(resolver.State{Addresses: addrs})
	o := newOptions(s.opts)
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r),
		WithLeaseAffinity()}, o.dialOptions...)
	conn, err := grpc.NewClient(r.Scheme()+":///shard", dial...)
	if err != nil {
		return nil, err
	}
	c := &Client{rpc: sluicev1.NewDeciderServiceClient(conn), conn: conn, o: o, routed: true}
	s.conns[key] = c
	return c, nil
}

// For returns the client serving model: its shard's, or home when the shard is not known.
func (s *Sharded) For(model string) *Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key, ok := s.model[model]; ok {
		return s.conns[key]
	}
	return s.home
}

// Decide sends req to its model's deciders, following one WRONG_SHARD redirect.
func (s *Sharded) Decide(ctx context.Context, req *sluicev1.DecideRequest) (*sluicev1.DecideResponse, error) {
	c := s.For(req.GetModel())
	resp, err := c.Decide(ctx, req)
	if Reason(err) != ReasonWrongShard {
		return resp, err
	}
	deciders := Metadata(err)["deciders"]
	if deciders == "" {
		return nil, err // the owning shard's addresses are not in the configuration
	}
	s.mu.Lock()
	next, derr := s.clientLocked(deciders)
	if derr == nil {
		s.model[req.GetModel()] = deciders
	}
	s.mu.Unlock()
	if derr != nil || next == c {
		return nil, err
	}
	return next.Decide(ctx, req)
}

// Release frees a lease Decide granted for model, on the replica of that model's deciders that
// granted it (a replica's leases live in its own table). A lease granted before its model's
// route changed is released on the new route and answered released: false; it expires by the
// deciders' -lease-ttl.
func (s *Sharded) Release(ctx context.Context, model, leaseID string, outcome sluicev1.ReleaseOutcome, failedEngineIDs ...string) (bool, error) {
	return s.For(model).Release(ctx, leaseID, outcome, failedEngineIDs...)
}

// Close closes the clients dialed for shards (not home).
func (s *Sharded) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.conns {
		_ = c.Close()
		delete(s.conns, k)
	}
	s.model = map[string]string{}
	return nil
}

// ForgetModel drops model's route, so its calls go to the home client again (until a
// WRONG_SHARD or SetModelDeciders routes it anew): for a model moved to a shard whose deciders
// are not listed, or out of every shard.
func (s *Sharded) ForgetModel(model string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.model, model)
}
