package deciderserver

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// localConn is an in-process grpc.ClientConnInterface onto the server's DeciderService and
// AdminService, for a gateway that embeds the decider (`sluice gateway -embed-decider`): a
// call takes the same Decide slot (-max-concurrent-decides), passes the same interceptor chain
// (metrics with protocol "in-process", recovery, error mapping, auth against the outgoing
// metadata's bearer token) and reaches the same handler as a call over the network, without
// serialising, a transport or a second process. Messages are copied (copyMessage) in both
// directions, so neither side shares memory with the other, as over a wire. Streaming calls
// are not served (neither service has any).
type localConn struct {
	methods map[string]localMethod
	chain   *chain
	unary   grpc.UnaryServerInterceptor // chain.unary, bound once: a method value allocates
	shed    *shedder
}

type localMethod struct {
	srv     any
	handler grpc.MethodHandler
}

var _ grpc.ClientConnInterface = (*localConn)(nil)

func newLocalConn(ch *chain, shed *shedder, decider sluicev1.DeciderServiceServer, admin sluicev1.AdminServiceServer) *localConn {
	c := &localConn{methods: map[string]localMethod{}, chain: ch, unary: ch.unary, shed: shed}
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
		copyMessage(pm, in)
		return nil
	}
	resp, err := m.handler(m.srv, ctx, dec, c.unary)
	if err != nil {
		return err
	}
	if pm, ok := resp.(proto.Message); ok {
		proto.Reset(out)
		copyMessage(out, pm)
	}
	return nil
}

// copyMessage copies src into dst, an empty message of the same type, sharing no memory with
// it. The request path's messages (Decide's and Release's requests and answers) are copied
// field by field — proto.Merge walks them by reflection, which a profile of the embedded
// gateway showed at 5 % of its CPU; anything else, or a message carrying unknown fields, goes
// through proto.Merge. TestCopyMessageMatchesMerge fills every field of those messages, so a
// field added to the API and not here fails it.
func copyMessage(dst, src proto.Message) {
	if len(src.ProtoReflect().GetUnknown()) == 0 {
		switch d := dst.(type) {
		case *sluicev1.DecideRequest:
			if s, ok := src.(*sluicev1.DecideRequest); ok {
				copyDecideRequest(d, s)
				return
			}
		case *sluicev1.DecideResponse:
			if s, ok := src.(*sluicev1.DecideResponse); ok && copyDecideResponse(d, s) {
				return
			}
			proto.Reset(d)
		case *sluicev1.ReleaseRequest:
			if s, ok := src.(*sluicev1.ReleaseRequest); ok {
				d.LeaseId, d.Outcome, d.FailedEngineIds = s.GetLeaseId(), s.GetOutcome(), slices.Clone(s.GetFailedEngineIds())
				return
			}
		case *sluicev1.ReleaseResponse:
			if s, ok := src.(*sluicev1.ReleaseResponse); ok {
				d.Released = s.GetReleased()
				return
			}
		}
	}
	proto.Merge(dst, src)
}

func copyDecideRequest(d, s *sluicev1.DecideRequest) {
	d.Model = s.GetModel()
	d.InputTokens = s.GetInputTokens()
	d.ExpectedPeakTokens = clonePtr(s.ExpectedPeakTokens)
	d.TokenIds = slices.Clone(s.GetTokenIds())
	d.SessionKey = s.GetSessionKey()
	d.RoutingKey = s.GetRoutingKey()
	d.RequestId = s.GetRequestId()
	d.DryRun = s.GetDryRun()
	d.Explain = s.GetExplain()
	d.ExcludeEngineIds = slices.Clone(s.GetExcludeEngineIds())
	d.LoraName = s.GetLoraName()
	d.CacheSalt = s.GetCacheSalt()
	d.TtftSloMs = clonePtr(s.TtftSloMs)
}

// copyDecideResponse copies a decision; it reports false (leaving d for proto.Merge) when a
// nested message carries unknown fields. The explanation, present only when asked for, is
// cloned by reflection.
func copyDecideResponse(d, s *sluicev1.DecideResponse) bool {
	d.BucketId = s.GetBucketId()
	d.ConfigVersion = s.GetConfigVersion()
	d.LeaseId = s.GetLeaseId()
	if p := s.GetPick(); p != nil {
		if len(p.ProtoReflect().GetUnknown()) != 0 {
			return false
		}
		d.Pick = &sluicev1.BucketPick{}
		switch k := p.GetKind().(type) {
		case *sluicev1.BucketPick_Plain:
			e, ok := cloneEnginePick(k.Plain)
			if !ok {
				return false
			}
			d.Pick.Kind = &sluicev1.BucketPick_Plain{Plain: e}
		case *sluicev1.BucketPick_Pd:
			pd := &sluicev1.PrefillDecodePick{}
			if k.Pd != nil {
				if len(k.Pd.ProtoReflect().GetUnknown()) != 0 {
					return false
				}
				var ok1, ok2 bool
				pd.Prefill, ok1 = cloneEnginePick(k.Pd.GetPrefill())
				pd.Decode, ok2 = cloneEnginePick(k.Pd.GetDecode())
				if !ok1 || !ok2 {
					return false
				}
			} else {
				pd = nil
			}
			d.Pick.Kind = &sluicev1.BucketPick_Pd{Pd: pd}
		case nil:
		default:
			return false
		}
	}
	if t := s.GetLeaseExpiresAt(); t != nil {
		if len(t.ProtoReflect().GetUnknown()) != 0 {
			return false
		}
		d.LeaseExpiresAt = &timestamppb.Timestamp{Seconds: t.GetSeconds(), Nanos: t.GetNanos()}
	}
	if x := s.GetExplain(); x != nil {
		d.Explain = proto.Clone(x).(*sluicev1.Explain)
	}
	return true
}

func cloneEnginePick(e *sluicev1.EnginePick) (*sluicev1.EnginePick, bool) {
	if e == nil {
		return nil, true
	}
	if len(e.ProtoReflect().GetUnknown()) != 0 {
		return nil, false
	}
	return &sluicev1.EnginePick{EngineId: e.GetEngineId(), Url: e.GetUrl(), Reason: e.GetReason(), BootstrapPort: e.GetBootstrapPort(),
		Role: e.GetRole()}, true
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// NewStream is not served: the services have no streaming method.
func (c *localConn) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Errorf(codes.Unimplemented, "streaming method %s is not served in process", method)
}

// LocalConn is an in-process connection to this decider's DeciderService and AdminService
// (localConn): what an embedding gateway calls Decide and Release through. It is valid from
// New; calls made before Run serves work on the state New loaded.
func (s *Server) LocalConn() grpc.ClientConnInterface { return s.rpc.local }
