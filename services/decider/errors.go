package decider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/decider"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/config"
)

// storeRetryDelay is the RetryInfo hint on an unavailable configuration store.
const storeRetryDelay = 2 * time.Second

// requestError is a refusal decided in this package (a missing bucket, a
// mismatched id): a code, a machine-readable reason and a message.
type requestError struct {
	code    codes.Code
	reason  string
	message string
}

func (e *requestError) Error() string { return e.message }

func notFound(reason, format string, args ...any) error {
	return &requestError{code: codes.NotFound, reason: reason, message: fmt.Sprintf(format, args...)}
}

func invalidArgument(reason, format string, args ...any) error {
	return &requestError{code: codes.InvalidArgument, reason: reason, message: fmt.Sprintf(format, args...)}
}

// errorDomain is the google.rpc.ErrorInfo domain of every error the decider returns.
const errorDomain = "sluice.dev"

// classify maps an error from the decider to a status code and its machine-readable details.
// It is the single place deciding codes; grpcError and connectError only change the envelope.
func classify(err error) (codes.Code, string, []protoadapt.MessageV1) {
	var (
		e    *decider.Error
		ve   *config.ValidationError
		ce   *config.ConflictError
		re   *requestError
		auth *authError
	)
	var over *overloadedError
	switch {
	case errors.As(err, &over):
		return codes.ResourceExhausted, over.Error(), []protoadapt.MessageV1{
			&errdetails.ErrorInfo{Reason: "DECIDER_OVERLOADED", Domain: errorDomain,
				Metadata: map[string]string{"max_concurrent_decides": fmt.Sprint(over.limit)}},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(over.retryAfter)}}
	case errors.As(err, &auth):
		return auth.code, auth.message, nil
	case errors.As(err, &re):
		return re.code, re.message, []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: re.reason, Domain: errorDomain}}
	case errors.As(err, &ve):
		br := &errdetails.BadRequest{}
		for _, p := range ve.Problems {
			field := p.Path
			if field == "" {
				field = "document"
			}
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: field, Description: p.Message})
		}
		return codes.InvalidArgument, err.Error(), []protoadapt.MessageV1{
			&errdetails.ErrorInfo{Reason: "CONFIG_INVALID", Domain: errorDomain}, br}
	case errors.As(err, &ce):
		return codes.FailedPrecondition, fmt.Sprintf("%v: re-read version %d and retry", err, ce.Current), []protoadapt.MessageV1{
			&errdetails.ErrorInfo{Reason: "CONFIG_VERSION_CONFLICT", Domain: errorDomain,
				Metadata: map[string]string{"current_version": fmt.Sprint(ce.Current)}}}
	case errors.Is(err, config.ErrUnavailable):
		return codes.Unavailable, err.Error(), []protoadapt.MessageV1{
			&errdetails.ErrorInfo{Reason: "CONFIG_STORE_UNAVAILABLE", Domain: errorDomain},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(storeRetryDelay)}}
	case errors.Is(err, config.ErrReadOnly):
		return codes.FailedPrecondition, err.Error() + ": start the decider with -config FILE or -postgres-dsn to change it",
			[]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: "CONFIG_READ_ONLY", Domain: errorDomain}}
	case errors.Is(err, config.ErrVersionNotFound):
		return codes.NotFound, err.Error(), []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: "CONFIG_VERSION_NOT_FOUND", Domain: errorDomain}}
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
