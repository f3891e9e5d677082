package deciderserver

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
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
