// Package strictjson is the request decoding of every REST (grpc-gateway), Connect and gRPC-Web endpoint
// of the decider and the gateway: unknown JSON fields, unknown enum names and query parameters
// that name no field are refused.
package strictjson

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicehq/sluice/components/limits"
)

// Both JSON front ends (grpc-gateway's REST and Connect's JSON codec) discard unknown fields by
// default, so a typo such as "dryrun": true or "doc": "…" is silently ignored and the call does
// something else than asked (takes a real lease, applies an empty document), and an unknown
// enum name ("outcome": "NOPE") reads as the zero value. The decider refuses both, on every
// JSON route, with InvalidArgument (HTTP 400) naming the field.

// strictUnmarshal is the JSON decoding of every REST request (Connect's is VanguardCodec's,
// which needs the transcoder's type resolver).
var strictUnmarshal = protojson.UnmarshalOptions{DiscardUnknown: false}

// badJSON rewords a protojson error so it says what to fix.
func badJSON(m proto.Message, err error) error {
	return fmt.Errorf("request body is not a valid %s: %s; field names are the proto names (or their lowerCamelCase JSON names) "+
		"of the request, enum values their full names — unknown fields are refused, check the spelling against /openapi.json",
		m.ProtoReflect().Descriptor().FullName(), limits.Clip(err.Error(), 512))
}

// GatewayMarshaler is grpc-gateway's default marshaler (google.api.HttpBody passed through)
// with strict decoding, and with zero-valued scalars, lists and maps written out (so REST
// clients see every field) but unset messages and proto3 optional fields left out: the
// default's EmitUnpopulated writes them as null ("capturedAt": null), which the OpenAPI
// document's "type": "string" (Timestamp, Duration) or object schema does not allow.
func GatewayMarshaler() runtime.ServeMuxOption {
	return runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: &strictJSONPb{
		JSONPb: runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{EmitDefaultValues: true}, UnmarshalOptions: strictUnmarshal},
	}})
}

// strictJSONPb is runtime.JSONPb whose decode errors say what to fix.
type strictJSONPb struct {
	runtime.JSONPb
}

func (j *strictJSONPb) Unmarshal(data []byte, v any) error {
	return explainDecode(v, j.JSONPb.Unmarshal(data, v))
}

func (j *strictJSONPb) NewDecoder(r io.Reader) runtime.Decoder {
	d := j.JSONPb.NewDecoder(r)
	return runtime.DecoderFunc(func(v any) error { return explainDecode(v, d.Decode(v)) })
}

func explainDecode(v any, err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err // io.EOF: no body, which the gateway treats as an empty request
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("request body exceeds %d bytes, the limit derived from -max-token-ids", mbe.Limit)
	}
	if m, ok := v.(proto.Message); ok {
		return badJSON(m, err)
	}
	return err
}

// VanguardCodec is the JSON codec of Connect and gRPC-Web calls (vanguard.WithCodec): vanguard
// decodes a JSON request with it, refusing unknown fields and enum names like REST, and
// re-encodes it as protobuf for the gRPC server; answers are written without unpopulated
// fields, as Connect writes them. A refusal is InvalidArgument (HTTP 400) naming what to fix:
// vanguard reports any other decode error as Internal.
func VanguardCodec(res vanguard.TypeResolver) vanguard.Codec { return vanguardJSON{resolver: res} }

type vanguardJSON struct {
	resolver vanguard.TypeResolver
}

func (vanguardJSON) Name() string { return vanguard.CodecJSON }

func (c vanguardJSON) MarshalAppend(base []byte, msg proto.Message) ([]byte, error) {
	return protojson.MarshalOptions{Resolver: c.resolver}.MarshalAppend(base, msg)
}

func (c vanguardJSON) Unmarshal(data []byte, msg proto.Message) error {
	if len(data) == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("request body is empty: send a JSON object ({} for a request with no fields)"))
	}
	if err := (protojson.UnmarshalOptions{Resolver: c.resolver}).Unmarshal(data, msg); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, badJSON(msg, err))
	}
	return nil
}

// GatewayQueryParser is grpc-gateway's query parameter parser refusing a parameter that names
// no field of the request (?limitt=2 was ignored like an unknown JSON field). grpc-gateway keeps
// the parser process-wide, so every mux in the process gets it.
func GatewayQueryParser() runtime.ServeMuxOption {
	return runtime.SetQueryParameterParser(&queryParser{})
}

type queryParser struct{ runtime.DefaultQueryParser }

func (p *queryParser) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	for key := range values {
		path := strings.Split(key, ".")
		if filter != nil && filter.HasCommonPrefix(path) {
			continue // bound from the URL path
		}
		if !hasField(msg.ProtoReflect().Descriptor(), path) {
			return fmt.Errorf("unknown query parameter %q: %s has no such field; check the spelling against /openapi.json",
				limits.Clip(key, 128), msg.ProtoReflect().Descriptor().FullName())
		}
	}
	return p.DefaultQueryParser.Parse(msg, values, filter)
}

// hasField reports whether path (proto or JSON names, nested with dots) names a field of md.
func hasField(md protoreflect.MessageDescriptor, path []string) bool {
	for i, name := range path {
		f := md.Fields().ByName(protoreflect.Name(name))
		if f == nil {
			f = md.Fields().ByJSONName(name)
		}
		if f == nil {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		if f.Message() == nil || f.IsMap() {
			return false
		}
		md = f.Message()
	}
	return false
}
