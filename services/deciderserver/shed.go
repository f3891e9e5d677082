package deciderserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/gen/sluice/v1/sluicev1connect"
)

// Decide's procedure on every face: native gRPC and Connect share the full method name, REST
// has its own path.
const (
	decideProcedure = sluicev1connect.DeciderServiceDecideProcedure
	decideRESTPath  = "/v1/decide"
)

// errOverloaded is returned (as RESOURCE_EXHAUSTED with a RetryInfo) to a Decide call that
// arrives while MaxConcurrentDecides calls are in progress.
var errOverloaded = errors.New("decider overloaded")

// overloadedError carries the limit and the retry hint into the error mapping.
type overloadedError struct {
	limit      int64
	retryAfter time.Duration
}

func (e *overloadedError) Error() string {
	return fmt.Sprintf("decider overloaded: %d Decide calls are in progress on this replica (-max-concurrent-decides); retry after %s or on another replica",
		e.limit, e.retryAfter)
}

func (e *overloadedError) Unwrap() error { return errOverloaded }

// shedder bounds the Decide calls in progress on one replica, across gRPC, Connect, gRPC-Web
// and REST, and answers the excess at once instead of queueing it: at overload a queue only
// adds latency to every call, while a shed call costs microseconds and its caller can go to
// another replica. A call holds its slot from the moment the transport sees it until its
// response is written. For native gRPC the check runs in the transport's tap, before the
// request is read or a goroutine started for it.
type shedder struct {
	limit      int64
	retryAfter time.Duration
	inFlight   atomic.Int64
	shed       *prometheus.CounterVec // by protocol
}

func newShedder(limit int, retryAfter time.Duration, reg prometheus.Registerer) *shedder {
	s := &shedder{limit: int64(limit), retryAfter: retryAfter,
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decider_shed_total",
			Help: "Decide calls answered RESOURCE_EXHAUSTED at once because -max-concurrent-decides calls were in progress, by protocol.",
		}, []string{"protocol"})}
	reg.MustRegister(s.shed, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_decider_decides_in_progress",
		Help: "Decide calls in progress on this replica (all protocols), bounded by -max-concurrent-decides.",
	}, func() float64 { return float64(s.inFlight.Load()) }))
	return s
}

// acquire takes a slot, or reports false when none is free. A limit of 0 never sheds.
func (s *shedder) acquire() bool {
	n := s.inFlight.Add(1)
	if s.limit > 0 && n > s.limit {
		s.inFlight.Add(-1)
		return false
	}
	return true
}

func (s *shedder) release() { s.inFlight.Add(-1) }

func (s *shedder) err() error { return &overloadedError{limit: s.limit, retryAfter: s.retryAfter} }

// slot is one held Decide slot of a native gRPC call; release returns it once.
type slot struct {
	s    *shedder
	done atomic.Bool
}

func (sl *slot) release() {
	if sl.done.CompareAndSwap(false, true) {
		sl.s.release()
	}
}

type slotKey struct{}

// tap is the gRPC server's InTapHandle, run for calls on its own transport: native gRPC, and
// REST over the in-process listener, which http admitted already (vanguard's calls reach the
// server through ServeHTTP, which runs no tap). The slot is returned by the chain (chain.go)
// as soon as the handler returns, before the response is written, so a client's next call never
// finds its previous one still counted, and in any case when the stream's context ends (a call that fails before
// reaching the handler, e.g. on a malformed message).
func (s *shedder) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName != decideProcedure {
		return ctx, nil
	}
	if inProcess(ctx) {
		return ctx, nil
	}
	if !s.acquire() {
		s.shed.WithLabelValues("grpc").Inc()
		return nil, grpcError(s.err())
	}
	sl := &slot{s: s}
	context.AfterFunc(ctx, sl.release)
	return context.WithValue(ctx, slotKey{}, sl), nil
}

// http wraps the HTTP port's handler: Connect, gRPC-Web and gRPC over HTTP for the Decide
// procedure, and the REST route. It admits (or sheds) before anything reads the body, so the
// slot is held from the first byte; the call then reaches the gRPC server without a second
// admission. Shed Connect-family calls get the protocol's own resource_exhausted error (written
// here from the same status, since the call never reaches vanguard); shed REST calls get 503
// with Retry-After and the same JSON status body grpc-gateway writes for other errors.
func (s *shedder) http(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != decideProcedure && r.URL.Path != decideRESTPath {
			next.ServeHTTP(w, r)
			return
		}
		if s.acquire() {
			defer s.release()
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int((s.retryAfter+time.Second-1)/time.Second))))
		st := statusOf(s.err())
		if r.URL.Path == decideProcedure {
			s.shed.WithLabelValues("connect").Inc()
			ce := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
			for _, d := range st.Proto().GetDetails() {
				if detail, err := connect.NewErrorDetail(d); err == nil {
					ce.AddDetail(detail)
				}
			}
			_ = connect.NewErrorWriter().Write(w, r, ce)
			return
		}
		s.shed.WithLabelValues("rest").Inc()
		body, _ := protojson.Marshal(st.Proto())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(body)
	})
}
