// Package deciderclient is a small typed Go client for sluice's DeciderService over native
// gRPC: per-attempt deadlines, an optional bearer token, and retries on Unavailable only when
// asked (a Decide that returned Unavailable granted no lease, so retrying it is safe).
package deciderclient

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// Client calls a decider. It is safe for concurrent use.
type Client struct {
	rpc  sluicev1.DeciderServiceClient
	conn *grpc.ClientConn // owned when Dial created it
	o    options
	// routed: the connection is a gRPC one, whose balancer may be LeaseAffinity; the
	// replicas that granted its leases are remembered when it had a choice (balancer.go).
	routed bool
	leases leaseReplicas
}

type options struct {
	timeout     time.Duration
	attempts    int
	backoff     time.Duration
	maxBackoff  time.Duration
	token       string
	dialOptions []grpc.DialOption
}

// Option configures a Client.
type Option func(*options)

// WithTimeout bounds each attempt (default 1s); the caller's context still bounds the whole call.
// 0 sets no bound of its own: the caller's context alone bounds each call, and none is derived
// from it (for a connection that answers in process, where a call waits on nothing).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithRetryUnavailable retries Decide up to attempts times in total when the decider answers
// Unavailable (all buckets exhausted, or the decider itself unreachable), sleeping backoff
// doubled per attempt with jitter, capped at 10 × backoff. attempts <= 1 disables retries
// (the default).
func WithRetryUnavailable(attempts int, backoff time.Duration) Option {
	return func(o *options) { o.attempts, o.backoff, o.maxBackoff = attempts, backoff, 10*backoff }
}

// WithToken sends "authorization: Bearer <token>" on every call.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithDialOptions adds gRPC dial options (credentials, interceptors) used by Dial. Without
// transport credentials Dial connects in plaintext.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

func newOptions(opts []Option) options {
	o := options{timeout: time.Second, attempts: 1}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Dial returns a Client for target (host:port or any gRPC target string). Close releases it.
func Dial(target string, opts ...Option) (*Client, error) {
	o := newOptions(opts)
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, o.dialOptions...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, err
	}
	return &Client{rpc: sluicev1.NewDeciderServiceClient(conn), conn: conn, o: o, routed: true}, nil
}

// New returns a Client over an existing connection, which the caller keeps owning. When conn
// is a *grpc.ClientConn using the LeaseAffinity balancer (WithLeaseAffinity), each Release
// goes to the replica that granted its lease.
func New(conn grpc.ClientConnInterface, opts ...Option) *Client {
	_, routed := conn.(*grpc.ClientConn)
	return &Client{rpc: sluicev1.NewDeciderServiceClient(conn), o: newOptions(opts), routed: routed}
}

// Close closes the connection Dial opened; it is a no-op for New.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

func (c *Client) attemptCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.o.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.o.token)
	}
	if c.o.timeout > 0 {
		return context.WithTimeout(ctx, c.o.timeout)
	}
	// No bound of its own: the caller's context is the attempt's. (A cancellable child would
	// cost a context, its registration with the parent and its removal on every call: an
	// embedded gateway makes two such calls per request.)
	return ctx, noCancel
}

func noCancel() {}

// Decide asks for an engine (or a prefill + decode pair). Errors are gRPC statuses; use Reason
// and Rejections to read their details.
func (c *Client) Decide(ctx context.Context, req *sluicev1.DecideRequest) (*sluicev1.DecideResponse, error) {
	backoff := c.o.backoff
	for attempt := 1; ; attempt++ {
		actx, cancel := c.attemptCtx(ctx)
		var route *replicaRoute
		if c.routed {
			route = &replicaRoute{}
			actx = withRoute(actx, route)
		}
		resp, err := c.rpc.Decide(actx, req)
		cancel()
		if err == nil && route != nil && route.got != "" && resp.GetLeaseId() != "" {
			c.leases.remember(resp.GetLeaseId(), route.got, leaseExpires(resp), time.Now())
		}
		if err == nil || attempt >= c.o.attempts || status.Code(err) != codes.Unavailable {
			return resp, err
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-time.After(sleep):
		}
		backoff = min(2*backoff, c.o.maxBackoff)
	}
}

// Release frees a lease, reporting how the dispatch went. It returns false when the lease was
// unknown, already released or expired.
func (c *Client) Release(ctx context.Context, leaseID string, outcome sluicev1.ReleaseOutcome, failedEngineIDs ...string) (bool, error) {
	actx, cancel := c.attemptCtx(ctx)
	defer cancel()
	if c.routed {
		if addr := c.leases.take(leaseID); addr != "" {
			actx = withRoute(actx, &replicaRoute{want: addr})
		}
	}
	resp, err := c.rpc.Release(actx, &sluicev1.ReleaseRequest{LeaseId: leaseID, Outcome: outcome, FailedEngineIds: failedEngineIDs})
	if err != nil {
		return false, err
	}
	return resp.GetReleased(), nil
}

// leaseExpires is when resp's lease expires, or in an hour when the decider did not say.
func leaseExpires(resp *sluicev1.DecideResponse) time.Time {
	if at := resp.GetLeaseExpiresAt(); at != nil {
		return at.AsTime()
	}
	return time.Now().Add(time.Hour)
}

// Reason returns the machine-readable reason of a decider error (e.g. "NO_MATCHING_BUCKET",
// "ADMISSION_REJECTED"), or "" when err carries none.
func Reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// Metadata returns the ErrorInfo metadata of a decider error, or nil. NO_MATCHING_BUCKET
// carries "widest_bucket" and "widest_capacity_tokens" (a number, or "unbounded"): the largest
// request the model's buckets take; stage errors carry "stage".
func Metadata(err error) map[string]string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetMetadata()
		}
	}
	return nil
}

// FieldViolations returns the request fields a decider error names (google.rpc.BadRequest),
// each with what is wrong with it, e.g. "ttft_slo_ms"; nil when it names none.
func FieldViolations(err error) map[string]string {
	var out map[string]string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if out == nil {
					out = map[string]string{}
				}
				out[v.GetField()] = v.GetDescription()
			}
		}
	}
	return out
}

// RetryDelay returns the retry hint (google.rpc.RetryInfo) an error carries, or 0.
func RetryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// Overloaded reports whether err is a decider replica shedding the call because too many
// Decide calls were in progress on it (RESOURCE_EXHAUSTED, reason DECIDER_OVERLOADED): another
// replica, or the same one a moment later, can answer.
func Overloaded(err error) bool {
	return status.Code(err) == codes.ResourceExhausted && Reason(err) == ReasonOverloaded
}

// ReasonOverloaded is the ErrorInfo reason of a shed Decide call.
const ReasonOverloaded = "DECIDER_OVERLOADED"

// Rejections returns the admission rejections an Unavailable error carries.
func Rejections(err error) []*sluicev1.AdmissionRejection {
	for _, d := range status.Convert(err).Details() {
		if r, ok := d.(*sluicev1.AdmissionRejections); ok {
			return r.GetRejections()
		}
	}
	return nil
}
