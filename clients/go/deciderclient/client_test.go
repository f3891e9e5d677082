package deciderclient

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// fakeDecider fails the first `fail` Decide calls with code, then succeeds.
type fakeDecider struct {
	sluicev1.UnimplementedDeciderServiceServer
	calls atomic.Int32
	fail  int32
	code  codes.Code
	auth  atomic.Value
	// deadline is the last Decide's deadline as its handler saw it (zero: none).
	deadline atomic.Value
}

func (f *fakeDecider) Decide(ctx context.Context, _ *sluicev1.DecideRequest) (*sluicev1.DecideResponse, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("authorization")) > 0 {
		f.auth.Store(md.Get("authorization")[0])
	}
	dl, _ := ctx.Deadline()
	f.deadline.Store(dl)
	if f.calls.Add(1) <= f.fail {
		st, _ := status.New(f.code, "busy").WithDetails(&errdetails.ErrorInfo{Reason: "ADMISSION_REJECTED", Domain: "sluice.dev"},
			&sluicev1.AdmissionRejections{Rejections: []*sluicev1.AdmissionRejection{{BucketId: "b", EngineId: "e", Limit: "max_running_requests"}}})
		return nil, st.Err()
	}
	return &sluicev1.DecideResponse{BucketId: "b"}, nil
}

func (f *fakeDecider) Release(context.Context, *sluicev1.ReleaseRequest) (*sluicev1.ReleaseResponse, error) {
	return &sluicev1.ReleaseResponse{Released: true}, nil
}

func serve(t *testing.T, f *fakeDecider) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	sluicev1.RegisterDeciderServiceServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestDecideRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		fail      int32
		code      codes.Code
		opts      []Option
		wantCode  codes.Code
		wantCalls int32
	}{
		{"no retry by default", 1, codes.Unavailable, nil, codes.Unavailable, 1},
		{"retries unavailable when asked", 2, codes.Unavailable, []Option{WithRetryUnavailable(3, time.Millisecond)}, codes.OK, 3},
		{"gives up after attempts", 5, codes.Unavailable, []Option{WithRetryUnavailable(3, time.Millisecond)}, codes.Unavailable, 3},
		{"never retries invalid argument", 5, codes.InvalidArgument, []Option{WithRetryUnavailable(3, time.Millisecond)}, codes.InvalidArgument, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeDecider{fail: tt.fail, code: tt.code}
			c, err := Dial(serve(t, f), tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "m"})
			if status.Code(err) != tt.wantCode || f.calls.Load() != tt.wantCalls {
				t.Errorf("Decide() = %v after %d calls, want %v after %d", status.Code(err), f.calls.Load(), tt.wantCode, tt.wantCalls)
			}
			if err != nil && (Reason(err) != "ADMISSION_REJECTED" || len(Rejections(err)) != 1) {
				t.Errorf("error details lost: reason %q rejections %v", Reason(err), Rejections(err))
			}
		})
	}
}

func TestTokenAndRelease(t *testing.T) {
	t.Parallel()
	f := &fakeDecider{}
	c, err := Dial(serve(t, f), WithToken("s3cret"), WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "m"}); err != nil {
		t.Fatal(err)
	}
	if got := f.auth.Load(); got != "Bearer s3cret" {
		t.Errorf("authorization = %v, want Bearer s3cret", got)
	}
	ok, err := c.Release(context.Background(), "lease", sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS)
	if err != nil || !ok {
		t.Errorf("Release = %v, %v", ok, err)
	}
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	c, err := Dial("127.0.0.1:1", WithTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "m"})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("Decide to a closed port = %v after %v, want a prompt error", err, time.Since(start))
	}
}

// TestAttemptTimeout: the default and a set timeout bound each attempt; WithTimeout(0) adds no
// bound, so the caller's deadline, or none, is the one the decider sees.
func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	callerDeadline := time.Now().Add(time.Hour)
	tests := []struct {
		name      string
		opts      []Option
		caller    bool // the caller's context carries callerDeadline
		wantNone  bool
		wantUntil time.Duration // the decider's deadline is at most this far ahead
		wantAt    time.Time     // or exactly this one
	}{
		{name: "default bounds the attempt by 1s", wantUntil: time.Second},
		{name: "a set timeout bounds it", opts: []Option{WithTimeout(200 * time.Millisecond)}, caller: true, wantUntil: 200 * time.Millisecond},
		{name: "zero adds no bound", opts: []Option{WithTimeout(0)}, wantNone: true},
		{name: "zero keeps the caller's", opts: []Option{WithTimeout(0), WithToken("t")}, caller: true, wantAt: callerDeadline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeDecider{}
			c, err := Dial(serve(t, f), tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if tt.caller {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, callerDeadline)
				defer cancel()
			}
			start := time.Now()
			if _, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "m"}); err != nil {
				t.Fatal(err)
			}
			got, _ := f.deadline.Load().(time.Time)
			switch {
			case tt.wantNone:
				if !got.IsZero() {
					t.Errorf("decider saw deadline %v, want none", got)
				}
			case !tt.wantAt.IsZero():
				// gRPC sends a timeout, not an instant: allow its rounding and the trip.
				if d := got.Sub(tt.wantAt); d < -time.Second || d > time.Second {
					t.Errorf("decider saw deadline %v, want the caller's %v", got, tt.wantAt)
				}
			default:
				if got.IsZero() || got.After(start.Add(tt.wantUntil+50*time.Millisecond)) {
					t.Errorf("decider saw deadline %v, want one within %v of %v", got, tt.wantUntil, start)
				}
			}
		})
	}
}
