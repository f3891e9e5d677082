package deciderserver

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// sizedMarshaler is a message with generated size and marshal methods (protoc-gen-go-vtproto,
// gen/sluice/v1/decider_vtproto.pb.go): the DeciderService's messages.
type sizedMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
}

// serverCodec is the gRPC server's codec: grpc's protobuf codec, except that the DeciderService's
// answers are encoded by their generated methods instead of protobuf-go's reflection-driven
// encoder. The bytes are the same (every field in field-number order, unknown fields last;
// TestServerCodecMatchesProto), and a Decide answer costs a fraction of the CPU and none of
// proto.Size's second walk (BENCHMARKS.md, "Decide over gRPC vs an empty echo"). Requests are
// decoded by protobuf-go as before, so what a request may hold (UTF-8 strings, unknown fields,
// sizes) is checked exactly as before; so is every other service's message.
type serverCodec struct{ proto encoding.CodecV2 }

func newServerCodec() serverCodec {
	return serverCodec{proto: encoding.GetCodecV2(grpcproto.Name)}
}

// Name is the protobuf codec's: the codec replaces it, it adds no content subtype.
func (serverCodec) Name() string { return grpcproto.Name }

func (c serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(sizedMarshaler)
	if !ok {
		return c.proto.Marshal(v)
	}
	// As grpc's protobuf codec: a small message gets its own slice, a large one a pooled
	// buffer the transport returns once written.
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if err := marshalSized(m, buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if err := marshalSized(m, *buf); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// marshalSized encodes m into buf, which is exactly m.SizeVT() long.
func marshalSized(m sizedMarshaler, buf []byte) error {
	n, err := m.MarshalToSizedBufferVT(buf)
	if err != nil {
		return fmt.Errorf("marshal %T: %w", m, err)
	}
	if n != len(buf) {
		return fmt.Errorf("marshal %T: wrote %d bytes of the %d its size promised", m, n, len(buf))
	}
	return nil
}

func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }
