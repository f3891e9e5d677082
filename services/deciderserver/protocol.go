package deciderserver

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc/peer"
)

// The protocols a call can arrive by, the protocol label of sluice_decider_rpcs_total.
const (
	protoGRPC    = iota // native gRPC, on either port
	protoConnect        // Connect, HTTP port
	protoGRPCWeb        // gRPC-Web, HTTP port
	protoREST           // REST through grpc-gateway, HTTP port
	protoLocal          // in process, from an embedding gateway (local.go)
	numProtocols
)

var protocols = [numProtocols]string{"grpc", "connect", "grpc-web", "rest", "in-process"}

type protocolKey struct{}

// protocolOf tells the protocol a call came by: the HTTP port marks Connect and gRPC-Web calls
// in the request context (markProtocol), which grpc.Server.ServeHTTP hands to the handler; REST
// arrives over the in-process listener; anything else is native gRPC.
func protocolOf(ctx context.Context) int {
	if p, ok := ctx.Value(protocolKey{}).(int); ok {
		return p
	}
	if inProcess(ctx) {
		return protoREST
	}
	return protoGRPC
}

// inProcess reports whether a call arrived on the in-process listener (REST's).
func inProcess(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	return ok && p.LocalAddr != nil && p.LocalAddr.Network() == memNetwork
}

// markProtocol puts the protocol of a call on the HTTP port into its context for the observer,
// and makes a unary POST with a JSON or protobuf body a Connect call even without the
// Connect-Protocol-Version header, as Connect itself accepts it (curl users leave it out);
// vanguard would read it as REST otherwise, and these paths have no REST routes.
func markProtocol(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		protocol := protoConnect
		switch {
		case strings.HasPrefix(ct, "application/grpc-web"):
			protocol = protoGRPCWeb
		case strings.HasPrefix(ct, "application/grpc"):
			protocol = protoGRPC
		case r.Method == http.MethodPost && strings.HasPrefix(ct, "application/") && !strings.HasPrefix(ct, "application/connect+") &&
			r.Header.Get("Connect-Protocol-Version") == "":
			r.Header.Set("Connect-Protocol-Version", "1")
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), protocolKey{}, protocol)))
	})
}
