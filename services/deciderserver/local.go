package deciderserver

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// localConn is an in-process grpc.ClientConnInterface onto the server's DeciderService and
// AdminService, for a gateway that embeds the decider (`sluice gateway -embed-decider`): a
// call takes the same Decide slot (-max-concurrent-decides), passes the same interceptor chain
// (metrics with protocol "in-process", recovery, error mapping, auth against the outgoing
// metadata's bearer token) and reaches the same handler as a call over the network, without
// serialising, a transport or a second process. Messages are copied (proto.Merge) in both
// directions, so neither side shares memory with the other, as over a wire. Streaming calls
// are not served (neither service has any).
type localConn struct {
	methods map[string]localMethod
	chain   *chain
	shed    *shedder
}

type localMethod struct {
	srv     any
	handler grpc.MethodHandler
}

var _ grpc.ClientConnInterface = (*localConn)(nil)

func newLocalConn(ch *chain, shed *shedder, decider sluicev1.DeciderServiceServer, admin sluicev1.AdminServiceServer) *localConn {
	c := &localConn{methods: map[string]localMethod{}, chain: ch, shed: shed}
	for _, svc := range []struct {
		desc *grpc.ServiceDesc
		srv  any
	}{{&sluicev1.DeciderService_ServiceDesc, decider}, {&sluicev1.AdminService_ServiceDesc, admin}} {
		for _, m := range svc.desc.Methods {
			c.methods["/"+svc.desc.ServiceName+"/"+m.MethodName] = localMethod{srv: svc.srv, handler: m.Handler}
		}
	}
	return c
}

// Invoke runs one unary call in process.
func (c *localConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "method %s is not served in process", method)
	}
	in, ok1 := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok1 || !ok2 {
		return status.Errorf(codes.Internal, "%s: request %T and reply %T must be protobuf messages", method, args, reply)
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	ctx = context.WithValue(ctx, protocolKey{}, protoLocal)
	if method == decideProcedure {
		if !c.shed.acquire() {
			c.shed.shed.WithLabelValues(protocols[protoLocal]).Inc()
			return grpcError(c.shed.err())
		}
		sl := &slot{s: c.shed}
		defer sl.release()
		ctx = context.WithValue(ctx, slotKey{}, sl)
	}
	dec := func(v any) error {
		pm, ok := v.(proto.Message)
		if !ok {
			return fmt.Errorf("%T is not a protobuf message", v)
		}
		proto.Merge(pm, in)
		return nil
	}
	resp, err := m.handler(m.srv, ctx, dec, c.chain.unary)
	if err != nil {
		return err
	}
	if pm, ok := resp.(proto.Message); ok {
		proto.Reset(out)
		proto.Merge(out, pm)
	}
	return nil
}

// NewStream is not served: the services have no streaming method.
func (c *localConn) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Errorf(codes.Unimplemented, "streaming method %s is not served in process", method)
}

// LocalConn is an in-process connection to this decider's DeciderService and AdminService
// (localConn): what an embedding gateway calls Decide and Release through. It is valid from
// New; calls made before Run serves work on the state New loaded.
func (s *Server) LocalConn() grpc.ClientConnInterface { return s.rpc.local }
