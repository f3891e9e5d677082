package deciderserver

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/components/limits"
)

// connectJSON is the JSON codec of Connect and gRPC-Web calls on the HTTP port: vanguard
// decodes a JSON request with it (refusing unknown fields and enum names, like REST) and
// re-encodes it as protobuf for the gRPC server; answers are written without unpopulated
// fields, as Connect writes them. A refusal is InvalidArgument (HTTP 400) naming what to fix:
// vanguard reports any other decode error as Internal.
//
// It belongs beside strictjson's REST decoding (components/strictjson), which has the same
// rules and wording; it lives here until strictjson grows a vanguard codec.
type connectJSON struct {
	resolver vanguard.TypeResolver
}

var _ vanguard.Codec = connectJSON{}

func newConnectJSON(res vanguard.TypeResolver) vanguard.Codec { return connectJSON{resolver: res} }

func (connectJSON) Name() string { return vanguard.CodecJSON }

func (c connectJSON) MarshalAppend(base []byte, msg proto.Message) ([]byte, error) {
	return protojson.MarshalOptions{Resolver: c.resolver}.MarshalAppend(base, msg)
}

func (c connectJSON) Unmarshal(data []byte, msg proto.Message) error {
	if len(data) == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("request body is empty: send a JSON object ({} for a request with no fields)"))
	}
	if err := (protojson.UnmarshalOptions{Resolver: c.resolver}).Unmarshal(data, msg); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"request body is not a valid %s: %s; field names are the proto names (or their lowerCamelCase JSON names) "+
				"of the request, enum values their full names — unknown fields are refused, check the spelling against /openapi.json",
			msg.ProtoReflect().Descriptor().FullName(), limits.Clip(err.Error(), 512)))
	}
	return nil
}
