package deciderserver

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// fillMessage sets every field of m, recursively to depth levels of messages, with values
// derived from seed: scalars non-zero (and, every other seed, at their extremes), strings
// with multi-byte runes, repeated fields with two elements, and for each oneof the variant
// seed selects. A field added to the proto is filled without changing this function.
func fillMessage(m protoreflect.Message, seed, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if od.Fields().Get(seed%od.Fields().Len()) != fd {
				continue
			}
		}
		if fd.IsMap() {
			mp := m.Mutable(fd).Map()
			for j := range 2 {
				v := mp.NewValue()
				if vd := fd.MapValue(); vd.Kind() == protoreflect.MessageKind {
					fillMessage(v.Message(), seed+j+1, max(depth-1, 0))
				} else {
					v = scalarValue(vd, seed+j)
				}
				mp.Set(scalarValue(fd.MapKey(), seed+j).MapKey(), v)
			}
			continue
		}
		if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
			if depth == 0 {
				continue
			}
			if fd.IsList() {
				l := m.Mutable(fd).List()
				for j := range 2 {
					e := l.NewElement()
					fillMessage(e.Message(), seed+j+1, depth-1)
					l.Append(e)
				}
				continue
			}
			fillMessage(m.Mutable(fd).Message(), seed+i+1, depth-1)
			continue
		}
		if fd.IsList() {
			l := m.Mutable(fd).List()
			for j := range 2 {
				l.Append(scalarValue(fd, seed+j))
			}
			continue
		}
		m.Set(fd, scalarValue(fd, seed+i))
	}
}

// scalarValue is a non-zero value of fd's kind; odd seeds give the kind's extreme.
func scalarValue(fd protoreflect.FieldDescriptor, seed int) protoreflect.Value {
	big := seed%2 == 1
	pick := func(small, extreme int64) int64 {
		if big {
			return extreme
		}
		return small + int64(seed)
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(1 + seed%(vals.Len()-1)).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if big {
			return protoreflect.ValueOfInt32(math.MinInt32)
		}
		return protoreflect.ValueOfInt32(int32(3 + seed))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(pick(300, math.MinInt64))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if big {
			return protoreflect.ValueOfUint32(math.MaxUint32)
		}
		return protoreflect.ValueOfUint32(uint32(200 + seed))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if big {
			return protoreflect.ValueOfUint64(math.MaxUint64)
		}
		return protoreflect.ValueOfUint64(uint64(70000 + seed))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(seed) + 0.5)
	case protoreflect.DoubleKind:
		if big {
			return protoreflect.ValueOfFloat64(-math.MaxFloat64)
		}
		return protoreflect.ValueOfFloat64(float64(seed) + 0.25)
	case protoreflect.StringKind:
		if big {
			// a length past one varint byte
			return protoreflect.ValueOfString(fmt.Sprintf("%s-é€%d", strings.Repeat(string(fd.Name()), 200/len(fd.Name())+1), seed))
		}
		return protoreflect.ValueOfString(fmt.Sprintf("%c-é€%d", fd.Name()[0], seed))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(seed), 0, 0xff})
	}
	panic(fmt.Sprintf("no test value for %s (%s)", fd.FullName(), fd.Kind()))
}

// TestServerCodecMatchesProto checks that the server codec encodes each DeciderService message
// to the same bytes as protobuf-go, with every field set, each oneof variant, messages at
// their extremes and past grpc's pooling threshold, and unknown fields kept; and that messages
// without generated methods (the admin and health services') take grpc's codec unchanged.
func TestServerCodecMatchesProto(t *testing.T) {
	c := newServerCodec()
	stock := encoding.GetCodecV2(grpcproto.Name)
	var smallSeen, pooledSeen int
	msgs := []proto.Message{&sluicev1.DecideRequest{}, &sluicev1.DecideResponse{}, &sluicev1.ReleaseRequest{}, &sluicev1.ReleaseResponse{}}
	for _, proto0 := range msgs {
		for seed := range 6 {
			for _, depth := range []int{0, 1, 2, 5} {
				m := proto0.ProtoReflect().New().Interface()
				fillMessage(m.ProtoReflect(), seed, depth)
				if seed == 5 {
					m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 7))
				}
				name := fmt.Sprintf("%T/seed%d/depth%d", m, seed, depth)
				if _, ok := m.(sizedMarshaler); !ok {
					t.Fatalf("%s has no generated marshal methods: regenerate gen/ (make generate)", name)
				}
				want, err := proto.Marshal(m)
				if err != nil {
					t.Fatalf("%s: proto.Marshal: %v", name, err)
				}
				if mem.IsBelowBufferPoolingThreshold(len(want)) {
					smallSeen++
				} else {
					pooledSeen++
				}
				got, err := c.Marshal(m)
				if err != nil {
					t.Fatalf("%s: codec Marshal: %v", name, err)
				}
				if b := got.Materialize(); !bytes.Equal(b, want) {
					i := 0
					for i < min(len(b), len(want)) && b[i] == want[i] {
						i++
					}
					t.Errorf("%s: codec wrote %d bytes, protobuf-go %d; they differ from byte %d", name, len(b), len(want), i)
				}
				got.Free()
				// The codec's decoding is grpc's: the message round-trips.
				back := proto0.ProtoReflect().New().Interface()
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, back); err != nil || !proto.Equal(back, m) {
					t.Errorf("%s: round trip = %v (%v), want %v", name, back, err, m)
				}
			}
		}
	}
	if smallSeen == 0 || pooledSeen == 0 {
		t.Errorf("%d messages below grpc's pooling threshold and %d above: test both paths", smallSeen, pooledSeen)
	}
	// Past grpc's pooling threshold the answer goes into a pooled buffer.
	big := &sluicev1.DecideResponse{BucketId: strings.Repeat("b", 5000), LeaseId: "x"}
	if !mem.IsBelowBufferPoolingThreshold(proto.Size(big)) {
		got, err := c.Marshal(big)
		want, _ := proto.Marshal(big)
		if err != nil || !bytes.Equal(got.Materialize(), want) {
			t.Errorf("pooled answer: %v, bytes equal %v", err, bytes.Equal(got.Materialize(), want))
		}
		got.Free()
	} else {
		t.Error("a 5,000-byte answer is below grpc's pooling threshold; make it larger")
	}
	// Other messages: grpc's codec (maps in no set order, so compared decoded).
	other := &sluicev1.ListEnginesResponse{}
	fillMessage(other.ProtoReflect(), 0, 3)
	if _, ok := any(other).(sizedMarshaler); ok {
		t.Fatal("ListEnginesResponse has generated marshal methods; pick a message that has none")
	}
	got, err := c.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	back := &sluicev1.ListEnginesResponse{}
	if err := stock.Unmarshal(got, back); err != nil || !proto.Equal(back, other) || got.Len() != proto.Size(other) {
		t.Errorf("admin message through the codec: %v, %d bytes (want %d), equal after decoding %v", err, got.Len(), proto.Size(other), proto.Equal(back, other))
	}
	if _, err := c.Marshal(struct{}{}); err == nil {
		t.Error("Marshal of a non-message: no error")
	}
}

// TestServerCodecKeepsRequestChecks sends a Decide whose model is not UTF-8 on the wire:
// protobuf-go's decoder (which the codec keeps for requests) refuses it, as it did before the
// codec, instead of the decider looking the bytes up as a model.
func TestServerCodecKeepsRequestChecks(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// field 1 (model), length 2, bytes 0xff 0xfe: not UTF-8.
	raw := rawMessage(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff, 0xfe}))
	var resp sluicev1.DecideResponse
	err = conn.Invoke(context.Background(), "/sluice.v1.DeciderService/Decide", raw, &resp, grpc.ForceCodecV2(rawCodec{}))
	if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), "UTF-8") {
		t.Fatalf("Decide with a non-UTF-8 model = %v, want Internal naming invalid UTF-8 (grpc's unmarshal error)", err)
	}
}

// rawMessage is a request sent as the bytes it holds (rawCodec).
type rawMessage []byte

// rawCodec sends rawMessage bytes as they are and decodes answers with protobuf-go.
type rawCodec struct{}

func (rawCodec) Name() string { return grpcproto.Name }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawMessage))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}
