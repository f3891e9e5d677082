package deciderserver

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The interceptor chain every call of every protocol passes, outermost first:
//
//	shed.unary   returns the Decide slot the transport took (shed.go)
//	observer     counts the call by procedure, protocol and code; logs failures
//	recoverPanic answers a handler's panic Internal and logs it, instead of ending the process
//	mapErrors    turns the services' own errors into the one status envelope (errors.go)
//	auth.unary   checks the bearer token against the permission table (auth.go)
//	service      deciderService or adminService
//
// The observer sits outside mapErrors so it sees the code the caller gets, auth refusals
// included; auth sits inside mapErrors so its refusals get their ErrorInfo like any other error.
func unaryChain(sh *shedder, obs *observer, auth *authenticator) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(sh.unary, obs.unary, obs.recoverPanic, mapErrors, auth.unary)
}

// mapErrors answers a failed call with statusOf(err): code, clipped message and details. A
// retry hint (RetryInfo) also goes out as a retry-after header, which Connect callers get as
// the HTTP Retry-After header and REST callers through the gateway's header matcher.
func mapErrors(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil {
		return resp, nil
	}
	st := statusOf(err)
	if secs, ok := retryAfter(st); ok {
		_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", secs))
	}
	return nil, st.Err()
}

// recoverPanic keeps one faulty call from ending the process (net/http recovered REST and
// Connect handlers' panics when they ran on it; grpc-go does not).
func (o *observer) recoverPanic(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			o.logger.ErrorContext(ctx, "call panicked", slog.String("procedure", info.FullMethod), slog.Any("panic", r),
				slog.String("stack", string(debug.Stack())))
			resp, err = nil, status.Error(codes.Internal, "internal error: the decider failed this call; it is logged")
		}
	}()
	return handler(ctx, req)
}

// Protocols a call can arrive by, the protocol label of sluice_decider_rpcs_total.
const (
	protoGRPC    = "grpc"     // native gRPC, on either port
	protoConnect = "connect"  // Connect, HTTP port
	protoGRPCWeb = "grpc-web" // gRPC-Web, HTTP port
	protoREST    = "rest"     // REST through grpc-gateway, HTTP port
)

type protocolKey struct{}

// protocolOf names the protocol a call came by: the HTTP port marks Connect and gRPC-Web calls
// in the request context, which grpc.Server.ServeHTTP hands to the handler; REST arrives over
// the in-process listener; anything else is native gRPC.
func protocolOf(ctx context.Context) string {
	if p, ok := ctx.Value(protocolKey{}).(string); ok {
		return p
	}
	if p, ok := peer.FromContext(ctx); ok && p.LocalAddr != nil && p.LocalAddr.Network() == memNetwork {
		return protoREST
	}
	return protoGRPC
}

// observer is the chain's metrics and logging step.
type observer struct {
	logger *slog.Logger
	calls  *prometheus.CounterVec
}

func newObserver(logger *slog.Logger, reg prometheus.Registerer) *observer {
	o := &observer{logger: logger, calls: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_decider_rpcs_total",
		Help: "Calls of every procedure (DeciderService, AdminService, health, reflection) by protocol (grpc, connect, grpc-web, rest) and status code, refusals by authentication included.",
	}, []string{"procedure", "protocol", "code"})}
	reg.MustRegister(o.calls)
	return o
}

func (o *observer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	code := status.Code(err)
	protocol := protocolOf(ctx)
	o.calls.WithLabelValues(info.FullMethod, protocol, code.String()).Inc()
	if err != nil {
		// A server fault is worth a warning; a refused request only for debugging.
		level := slog.LevelDebug
		switch code {
		case codes.Internal, codes.Unknown, codes.DataLoss:
			level = slog.LevelWarn
		}
		if o.logger.Enabled(ctx, level) {
			o.logger.Log(ctx, level, "call failed", slog.String("procedure", info.FullMethod), slog.String("protocol", protocol),
				slog.String("code", code.String()), slog.Duration("took", time.Since(start)), slog.String("error", status.Convert(err).Message()))
		}
	}
	return resp, err
}
