package deciderserver

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	goruntime "runtime"

	"connectrpc.com/vanguard"
	"connectrpc.com/vanguard/vanguardgrpc"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluicehq/sluice/components/limits"
	"github.com/sluicehq/sluice/components/strictjson"
	"github.com/sluicehq/sluice/gen/openapiv2"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// How each protocol reaches the one implementation of each service (docs/rpc.md says why):
//
//   - native gRPC, gRPC port: the gRPC server's own transport; the tap admits Decide calls.
//   - Connect, gRPC-Web and gRPC, HTTP port: vanguard transcodes the call to gRPC and hands it to
//     the same gRPC server through grpc.Server.ServeHTTP.
//   - REST, HTTP port: grpc-gateway decodes the JSON and calls the same gRPC server over an
//     in-process listener.
//
// So every call passes the gRPC server's one interceptor (chain.go) and leaves with one
// error envelope, a google.rpc.Status, which vanguard and grpc-gateway render in their protocol.

// memNetwork is the network of the in-process listener REST calls arrive on (bufconn's).
const memNetwork = "bufconn"

// rpcStack is the gRPC server with every service and the HTTP port's ways into it.
type rpcStack struct {
	grpc   *grpc.Server
	health *health.Server
	// mem is the in-process listener the REST gateway's connection (rest) dials.
	mem  *bufconn.Listener
	rest *grpc.ClientConn
	// connect serves Connect, gRPC-Web and gRPC on the HTTP port; gateway serves REST.
	connect, gateway http.Handler
	// local serves an embedding gateway in process (local.go).
	local *localConn
}

// rpcDeps are the chain's parts and the size limits.
type rpcDeps struct {
	logger *slog.Logger
	auth   *authenticator
	shed   *shedder
	reg    prometheus.Registerer
	sizes  limits.Sizes
}

// newRPCStack registers decider and admin (with health and reflection) on one gRPC server and
// builds the HTTP port's handlers in front of it.
func newRPCStack(d rpcDeps, decider sluicev1.DeciderServiceServer, admin sluicev1.AdminServiceServer) (*rpcStack, error) {
	r := &rpcStack{health: health.NewServer(), mem: bufconn.Listen(256 << 10)}
	ch := &chain{shed: d.shed, auth: d.auth, logger: d.logger}
	// Stream workers run calls on long-lived goroutines whose stacks have already grown: a
	// goroutine per call (grpc's default) starts at 8 KiB and copies its stack as Decide's
	// call depth grows it, which was the largest single cost of a Decide call under load
	// (runtime.copystack, 16 % of the decider's CPU in BENCHMARKS.md's closed-loop profile).
	// When every worker is busy a call gets its own goroutine as before.
	r.grpc = grpc.NewServer(grpc.InTapHandle(d.shed.tap), grpc.UnaryInterceptor(ch.unary), grpc.MaxRecvMsgSize(d.sizes.MaxMessageBytes),
		grpc.NumStreamWorkers(streamWorkers()), grpc.ForceServerCodecV2(newServerCodec()))
	r.local = newLocalConn(ch, d.shed, decider, admin)
	sluicev1.RegisterDeciderServiceServer(r.grpc, decider)
	sluicev1.RegisterAdminServiceServer(r.grpc, admin)
	healthpb.RegisterHealthServer(r.grpc, r.health)
	reflection.Register(r.grpc)
	// The listeners are bound before Run serves: until serving() a health check of the server
	// or of any of its services answers NOT_SERVING, never SERVING (grpc's default for "") or
	// NotFound (a service not yet listed).
	r.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	for svc := range r.grpc.GetServiceInfo() {
		r.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	var procedures []string
	for svc, info := range r.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			procedures = append(procedures, "/"+svc+"/"+m.Name)
		}
	}
	ch.counter = newCallCounter(d.reg, procedures)

	// No target compression: vanguard inflates request bodies itself, through cappedGzip.
	vg, err := vanguardgrpc.NewTranscoder(r.grpc, vanguard.WithCodec(strictjson.VanguardCodec), cappedGzip(d.sizes.MaxBodyBytes),
		vanguard.WithDefaultServiceOptions(vanguard.WithMaxMessageBufferBytes(uint32(d.sizes.MaxBodyBytes)), vanguard.WithNoTargetCompression()))
	if err != nil {
		return nil, fmt.Errorf("vanguard: %w", err)
	}
	r.connect = markProtocol(vg)

	r.rest, err = grpc.NewClient("passthrough:///in-process", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return r.mem.DialContext(ctx) }),
		grpc.WithIdleTimeout(0), // stay connected: the listener closes when the drain starts, the connection must not
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(d.sizes.MaxMessageBytes), grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		return nil, err
	}
	routes, err := newRESTRoutes(openapiv2.SluiceJSON)
	if err != nil {
		return nil, err
	}
	gw := runtime.NewServeMux(strictjson.GatewayMarshaler(), strictjson.GatewayQueryParser(),
		runtime.WithRoutingErrorHandler(routes.routingErrorHandler), runtime.WithOutgoingHeaderMatcher(restResponseHeader))
	ctx := context.Background()
	if err := sluicev1.RegisterDeciderServiceHandlerClient(ctx, gw, sluicev1.NewDeciderServiceClient(r.rest)); err != nil {
		return nil, err
	}
	if err := sluicev1.RegisterAdminServiceHandlerClient(ctx, gw, sluicev1.NewAdminServiceClient(r.rest)); err != nil {
		return nil, err
	}
	r.gateway = routes.methodFilter(gw, gw)
	return r, nil
}

// streamWorkers is the gRPC server's worker count: enough for the calls in progress on a busy
// replica (Decide does not block, so a few per core).
func streamWorkers() uint32 { return uint32(max(16, 4*goruntime.GOMAXPROCS(0))) }

// mount routes every service's procedures to the Connect handler and /v1/ to REST.
func (r *rpcStack) mount(mux *http.ServeMux) {
	for svc := range r.grpc.GetServiceInfo() {
		mux.Handle("/"+svc+"/", r.connect)
	}
	mux.Handle("/v1/", r.gateway)
}

// serving marks every service SERVING on the health service and connects REST's in-process
// connection, so a REST call still running when the drain closes the listener has it.
func (r *rpcStack) serving() {
	r.rest.Connect()
	r.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for svc := range r.grpc.GetServiceInfo() {
		r.health.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
}

// restResponseHeader forwards the chain's retry-after header to REST as Retry-After, and no
// other response metadata.
func restResponseHeader(key string) (string, bool) {
	if key == "retry-after" {
		return "Retry-After", true
	}
	return "", false
}
