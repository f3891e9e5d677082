package decider

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/sluicehq/sluice/decider"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// errorDomain is the google.rpc.ErrorInfo domain of every error the decider returns.
const errorDomain = "sluice.dev"

// classify maps an error from the decider to a status code and its machine-readable details.
// It is the single place deciding codes; grpcError and connectError only change the envelope.
func classify(err error) (codes.Code, string, []protoadapt.MessageV1) {
	var e *decider.Error
	switch {
	case errors.As(err, &e):
		info := &errdetails.ErrorInfo{Reason: e.Reason, Domain: errorDomain}
		if e.Stage != 0 {
			info.Metadata = map[string]string{"stage": e.Stage.String()}
		}
		details := []protoadapt.MessageV1{info}
		if len(e.Rejections) > 0 {
			rj := &sluicev1.AdmissionRejections{}
			for _, r := range e.Rejections {
				rj.Rejections = append(rj.Rejections, &sluicev1.AdmissionRejection{
					BucketId: r.BucketID, Role: roleToProto(r.Role), EngineId: r.EngineID, Limit: r.Limit})
			}
			details = append(details, protoadapt.MessageV1Of(rj))
		}
		if ex := explainOf(err); ex != nil {
			details = append(details, protoadapt.MessageV1Of(explainToProto(ex)))
		}
		code := codes.Internal
		switch e.Kind {
		case decider.KindInvalidArgument:
			code = codes.InvalidArgument
		case decider.KindUnavailable:
			code = codes.Unavailable
		}
		return code, e.Error(), details
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, err.Error(), nil
	case errors.Is(err, context.Canceled):
		return codes.Canceled, err.Error(), nil
	}
	return codes.Internal, err.Error(), nil
}

// grpcError converts an error to a gRPC status with details (used by native gRPC and REST).
func grpcError(err error) error {
	code, msg, details := classify(err)
	st := status.New(code, msg)
	if len(details) > 0 {
		if withDetails, derr := st.WithDetails(details...); derr == nil {
			st = withDetails
		}
	}
	return st.Err()
}

// connectError converts an error to a Connect error with the same code and details.
func connectError(err error) error {
	code, msg, details := classify(err)
	ce := connect.NewError(connect.Code(code), errors.New(msg))
	for _, d := range details {
		if detail, derr := connect.NewErrorDetail(protoadapt.MessageV2Of(d)); derr == nil {
			ce.AddDetail(detail)
		}
	}
	return ce
}
