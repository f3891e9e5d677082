package deciderserver

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// fillAll sets every field of m (recursively, the choice-th member of each oneof) to a
// non-default value, so a copy that forgets a field differs from proto.Merge's.
func fillAll(t *testing.T, m protoreflect.Message, choice, depth int) {
	t.Helper()
	if depth > 6 {
		return
	}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && od.Fields().Get(choice%od.Fields().Len()) != fd {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			k := scalar(fd.MapKey(), 1).MapKey()
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v := mp.NewValue()
				fillAll(t, v.Message(), choice, depth+1)
				mp.Set(k, v)
			} else {
				mp.Set(k, scalar(fd.MapValue(), 1))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for n := 1; n <= 2; n++ {
				if fd.Kind() == protoreflect.MessageKind {
					v := l.NewElement()
					fillAll(t, v.Message(), choice, depth+1)
					l.Append(v)
				} else {
					l.Append(scalar(fd, n))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			fillAll(t, m.Mutable(fd).Message(), choice, depth+1)
		default:
			m.Set(fd, scalar(fd, 1))
		}
	}
}

func scalar(fd protoreflect.FieldDescriptor, n int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(min(n, vals.Len()-1)).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(40 + n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(6400 + n))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(320 + n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(640 + n))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(n) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n) + 0.25)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("%s-%d", fd.Name(), n))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fmt.Sprintf("%s-%d", fd.Name(), n)))
	}
	panic(fmt.Sprintf("field %s: kind %v", fd.FullName(), fd.Kind()))
}

// copyMessage gives what proto.Merge gives for every field of the request path's messages
// (each oneof member in turn, with and without unknown fields), and shares no memory with its
// source.
func TestCopyMessageMatchesMerge(t *testing.T) {
	types := []proto.Message{&sluicev1.DecideRequest{}, &sluicev1.DecideResponse{}, &sluicev1.ReleaseRequest{},
		&sluicev1.ReleaseResponse{}, &sluicev1.ListEnginesRequest{}}
	for _, typ := range types {
		for choice := range 2 {
			for _, unknown := range []bool{false, true} {
				name := fmt.Sprintf("%s/choice%d/unknown=%v", typ.ProtoReflect().Descriptor().Name(), choice, unknown)
				t.Run(name, func(t *testing.T) {
					src := typ.ProtoReflect().New().Interface()
					fillAll(t, src.ProtoReflect(), choice, 0)
					if unknown {
						src.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 5))
					}
					want := typ.ProtoReflect().New().Interface()
					proto.Merge(want, src)
					got := typ.ProtoReflect().New().Interface()
					copyMessage(got, src)
					if !proto.Equal(got, want) {
						t.Fatalf("copyMessage gave\n%v\nwant (proto.Merge)\n%v", got, want)
					}
					// Changing the source afterwards leaves the copy as it was.
					fillAll(t, src.ProtoReflect(), choice+1, 0)
					overwrite(src.ProtoReflect())
					if !proto.Equal(got, want) {
						t.Fatalf("the copy changed with its source:\n%v\nwant\n%v", got, want)
					}
				})
			}
		}
	}
}

// overwrite changes every element of src's lists and every nested message's strings in place.
func overwrite(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Kind() == protoreflect.MessageKind {
					overwrite(l.Get(i).Message())
				} else {
					l.Set(i, scalar(fd, 7))
				}
			}
		case fd.IsMap():
		case fd.Kind() == protoreflect.MessageKind:
			overwrite(v.Message())
		default:
			m.Set(fd, scalar(fd, 7))
		}
		return true
	})
}
