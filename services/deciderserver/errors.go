package deciderserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/components/limits"
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
// It is the single place deciding codes; statusOf builds the one envelope (a google.rpc.Status)
// that every protocol carries: gRPC as is, Connect and gRPC-Web through vanguard, REST through
// grpc-gateway.
func classify(err error) (codes.Code, string, []protoadapt.MessageV1) {
	var (
		e    *decider.Error
		ve   *config.ValidationError
		ce   *config.ConflictError
		re   *requestError
		auth *authError
	)
	var over *overloadedError
	var wrong *wrongShardError
	switch {
	case errors.As(err, &wrong):
		return wrong.details()
	case errors.As(err, &over):
		return codes.ResourceExhausted, over.Error(), []protoadapt.MessageV1{
			&errdetails.ErrorInfo{Reason: "DECIDER_OVERLOADED", Domain: errorDomain,
				Metadata: map[string]string{"max_concurrent_decides": fmt.Sprint(over.limit)}},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(over.retryAfter)}}
	case errors.As(err, &auth):
		return auth.code, auth.message, []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: auth.reason, Domain: errorDomain}}
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
		// A cause from the driver names the database user, name and host:port: the caller gets
		// only what the store marked safe (an UnavailableError's Detail) and what to do.
		msg := fmt.Sprintf("%v: admin writes and version reads need the database, which cannot be reached", config.ErrUnavailable)
		var ue *config.UnavailableError
		if errors.As(err, &ue) {
			msg = fmt.Sprintf("%v: %s", config.ErrUnavailable, ue.Detail)
		}
		msg += fmt.Sprintf("; Decide keeps serving the configuration in force; retry in %v", storeRetryDelay)
		return codes.Unavailable, msg, []protoadapt.MessageV1{
			&errdetails.ErrorInfo{Reason: "CONFIG_STORE_UNAVAILABLE", Domain: errorDomain},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(storeRetryDelay)}}
	case errors.Is(err, config.ErrReadOnly):
		return codes.FailedPrecondition, err.Error() + ": start the decider with -config FILE or -postgres-dsn to change it",
			[]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: "CONFIG_READ_ONLY", Domain: errorDomain}}
	case errors.Is(err, config.ErrVersionNotFound):
		return codes.NotFound, err.Error(), []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: "CONFIG_VERSION_NOT_FOUND", Domain: errorDomain}}
	case errors.As(err, &e):
		info := &errdetails.ErrorInfo{Reason: e.Reason, Domain: errorDomain}
		if e.Stage != 0 || e.Metadata != nil {
			info.Metadata = make(map[string]string, len(e.Metadata)+1)
			maps.Copy(info.Metadata, e.Metadata)
			if e.Stage != 0 {
				info.Metadata["stage"] = e.Stage.String()
			}
		}
		details := []protoadapt.MessageV1{info}
		if e.Field != "" {
			details = append(details, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
				{Field: e.Field, Description: e.Message}}})
		}
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

// classifyClipped is classify with the message and field-violation descriptions bounded.
func classifyClipped(err error) (codes.Code, string, []protoadapt.MessageV1) {
	code, msg, details := classify(err)
	for _, d := range details {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, fv := range br.FieldViolations {
				fv.Field, fv.Description = limits.Clip(fv.Field, 256), limits.Clip(fv.Description, 512)
			}
		}
	}
	return code, limits.Clip(msg, limits.MaxErrorMessageBytes), details
}

// retryAfter returns the RetryInfo delay of st, rounded up to whole seconds for an HTTP
// Retry-After header.
func retryAfter(st *status.Status) (string, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			secs := int64(math.Ceil(ri.GetRetryDelay().AsDuration().Seconds()))
			return strconv.FormatInt(max(secs, 1), 10), true
		}
	}
	return "", false
}

// statusOf is the status an error is answered with on every protocol, details included. An
// error that already is a status (a gRPC library refusal) is kept as it is.
func statusOf(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	code, msg, details := classifyClipped(err)
	st := status.New(code, msg)
	if len(details) > 0 {
		if withDetails, derr := st.WithDetails(details...); derr == nil {
			st = withDetails
		}
	}
	return st
}

// grpcError is statusOf as an error.
func grpcError(err error) error { return statusOf(err).Err() }
