package deciderserver

import (
	"context"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// chain is the one interceptor every call of every protocol passes. Its steps, outermost
// first:
//
//  1. shed: return the Decide slot the transport took (the tap, or the HTTP port's admission;
//     shed.go) as soon as the handler is done.
//  2. observe: count the call by procedure, protocol and the code the caller gets
//     (sluice_decider_rpcs_total), log failures: debug for refusals, warn for server faults.
//  3. recover: answer a handler's panic Internal and log it instead of ending the process
//     (net/http recovered REST and Connect handlers' panics when they ran on it; grpc-go does
//     not).
//  4. map errors: turn the services' own errors into the one status envelope (errors.go).
//  5. auth: check the bearer token against the permission table (auth.go); a refusal is
//     mapped by step 4 like any other error.
//
// The steps are one function rather than a grpc.ChainUnaryInterceptor of five: a chain of
// interceptors allocates a closure per step and call, on the path of every Decide.
type chain struct {
	shed    *shedder
	auth    *authenticator
	logger  *slog.Logger
	counter *callCounter
}

func (c *chain) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	if sl, ok := ctx.Value(slotKey{}).(*slot); ok {
		defer sl.release()
	}
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			c.logger.ErrorContext(ctx, "call panicked", slog.String("procedure", info.FullMethod), slog.Any("panic", r),
				slog.String("stack", string(debug.Stack())))
			resp, err = nil, status.Error(codes.Internal, "internal error: the decider failed this call; it is logged")
		}
		c.observe(ctx, info.FullMethod, start, err)
	}()
	authCtx, err := c.auth.authorize(ctx, procedurePermission(info.FullMethod, req), bearerOf(ctx))
	if err == nil {
		resp, err = handler(authCtx, req)
	}
	if err != nil {
		return nil, mapError(ctx, err)
	}
	return resp, nil
}

// mapError is statusOf(err) as an error. A retry hint (RetryInfo) also goes out as a
// retry-after header, which Connect callers get as the HTTP Retry-After header and REST callers
// through the gateway's header matcher.
func mapError(ctx context.Context, err error) error {
	st := statusOf(err)
	if secs, ok := retryAfter(st); ok {
		_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", secs))
	}
	return st.Err()
}

// bearerOf is the call's authorization metadata: native gRPC sends it so, vanguard passes the
// HTTP Authorization header of Connect and gRPC-Web calls on as metadata, and grpc-gateway
// forwards REST's. (metadata.FromIncomingContext would copy the whole metadata per call.)
func bearerOf(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c *chain) observe(ctx context.Context, procedure string, start time.Time, err error) {
	code := status.Code(err)
	protocol := protocolOf(ctx)
	c.counter.inc(procedure, protocol, code)
	if err == nil {
		return
	}
	level := slog.LevelDebug
	switch code {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		level = slog.LevelWarn
	}
	if c.logger.Enabled(ctx, level) {
		c.logger.Log(ctx, level, "call failed", slog.String("procedure", procedure), slog.String("protocol", protocols[protocol]),
			slog.String("code", code.String()), slog.Duration("took", time.Since(start)), slog.String("error", status.Convert(err).Message()))
	}
}

// The protocols a call can arrive by, the protocol label of sluice_decider_rpcs_total.
const (
	protoGRPC    = iota // native gRPC, on either port
	protoConnect        // Connect, HTTP port
	protoGRPCWeb        // gRPC-Web, HTTP port
	protoREST           // REST through grpc-gateway, HTTP port
	numProtocols
)

var protocols = [numProtocols]string{"grpc", "connect", "grpc-web", "rest"}

type protocolKey struct{}

// protocolOf tells the protocol a call came by: the HTTP port marks Connect and gRPC-Web calls
// in the request context (markProtocol), which grpc.Server.ServeHTTP hands to the handler; REST
// arrives over the in-process listener; anything else is native gRPC.
func protocolOf(ctx context.Context) int {
	if p, ok := ctx.Value(protocolKey{}).(int); ok {
		return p
	}
	if p, ok := peer.FromContext(ctx); ok && p.LocalAddr != nil && p.LocalAddr.Network() == memNetwork {
		return protoREST
	}
	return protoGRPC
}

// callCounter is sluice_decider_rpcs_total with the children of the server's own procedures
// kept in arrays, so counting a call hashes no label values and takes no lock.
type callCounter struct {
	vec *prometheus.CounterVec
	mu  sync.Mutex // serializes creating a child
	// byProcedure is filled at construction and read-only after; a cell is set once.
	byProcedure map[string]*callCells
}

type callCells [numProtocols][codes.Unauthenticated + 1]atomic.Pointer[counterBox]

type counterBox struct{ prometheus.Counter }

func newCallCounter(reg prometheus.Registerer, procedures []string) *callCounter {
	c := &callCounter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_decider_rpcs_total",
		Help: "Calls of every procedure (DeciderService, AdminService, health, reflection) by protocol (grpc, connect, grpc-web, rest) and status code, refusals by authentication included.",
	}, []string{"procedure", "protocol", "code"}),
		byProcedure: map[string]*callCells{}}
	for _, p := range procedures {
		c.byProcedure[p] = new(callCells)
	}
	reg.MustRegister(c.vec)
	return c
}

func (c *callCounter) inc(procedure string, protocol int, code codes.Code) {
	cells, ok := c.byProcedure[procedure]
	if !ok || code > codes.Unauthenticated {
		c.vec.WithLabelValues(procedure, protocols[protocol], code.String()).Inc()
		return
	}
	cell := &cells[protocol][code]
	box := cell.Load()
	if box == nil {
		c.mu.Lock()
		if box = cell.Load(); box == nil {
			box = &counterBox{c.vec.WithLabelValues(procedure, protocols[protocol], code.String())}
			cell.Store(box)
		}
		c.mu.Unlock()
	}
	box.Inc()
}
