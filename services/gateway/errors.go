package gateway

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/clients/go/deciderclient"
	"github.com/sluicehq/sluice/components/limits"
)

// apiError is an OpenAI-style error answer: {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	status  int
	message string
	typ     string
	param   string
	code    string
	// retryAfter, when positive, is sent as Retry-After (rounded up to seconds).
	retryAfter time.Duration
}

// Error types, as OpenAI names them.
const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
	typeUnavailable    = "service_unavailable_error"
	typeUpstream       = "upstream_error"
)

func writeAPIError(w http.ResponseWriter, e apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(e.retryAfter.Seconds()))))
	}
	w.WriteHeader(e.status)
	var payload struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	payload.Error.Message, payload.Error.Type, payload.Error.Code = limits.Clip(e.message, limits.MaxErrorMessageBytes), e.typ, e.code
	if e.param != "" {
		payload.Error.Param = &e.param
	}
	_ = json.NewEncoder(w).Encode(payload)
}

// reasonUnknownModel is the decider's ErrorInfo reason for a model no engine serves;
// codeModelNotFound is OpenAI's error code for it.
const (
	reasonUnknownModel = "UNKNOWN_MODEL"
	codeModelNotFound  = "model_not_found"
)

// decideError maps a Decide failure to the client's answer; it is the gateway's only mapping
// of decider statuses. InvalidArgument → 400 with the ErrorInfo reason as code (UNKNOWN_MODEL →
// 404 model_not_found, as OpenAI answers); Unavailable
// (buckets exhausted, or the decider unreachable), a replica shedding load (RESOURCE_EXHAUSTED
// DECIDER_OVERLOADED: its own retry hint) and DeadlineExceeded → 503 with Retry-After;
// everything else → 500.
func decideError(err error, retryAfter time.Duration) apiError {
	st := status.Convert(err)
	reason := deciderclient.Reason(err)
	switch st.Code() {
	case codes.InvalidArgument:
		if reason == reasonUnknownModel {
			// OpenAI answers a model it does not serve with 404 model_not_found; the openai
			// packages raise NotFoundError for it.
			return apiError{status: http.StatusNotFound, message: st.Message(), typ: typeInvalidRequest, param: "model", code: codeModelNotFound}
		}
		return apiError{status: http.StatusBadRequest, message: st.Message(), typ: typeInvalidRequest, code: orDefault(reason, "invalid_argument")}
	case codes.Unavailable:
		if reason == "" {
			return apiError{status: http.StatusServiceUnavailable, message: "decider unavailable: " + st.Message(), typ: typeUnavailable,
				code: "decider_unavailable", retryAfter: retryAfter}
		}
		return apiError{status: http.StatusServiceUnavailable, message: st.Message(), typ: typeUnavailable, code: reason, retryAfter: retryAfter}
	case codes.ResourceExhausted:
		if deciderclient.Overloaded(err) {
			if d := deciderclient.RetryDelay(err); d > 0 {
				retryAfter = d
			}
			return apiError{status: http.StatusServiceUnavailable, message: st.Message(), typ: typeUnavailable,
				code: "decider_overloaded", retryAfter: retryAfter}
		}
	case codes.DeadlineExceeded:
		return apiError{status: http.StatusServiceUnavailable, message: "decider did not answer in time", typ: typeUnavailable,
			code: "decider_timeout", retryAfter: retryAfter}
	}
	return apiError{status: http.StatusInternalServerError, message: "routing decision failed: " + st.Message(), typ: typeServer,
		code: orDefault(reason, "decider_"+codeName(st.Code()))}
}

func codeName(c codes.Code) string {
	b := []byte(c.String())
	out := make([]byte, 0, len(b)+4)
	for i, ch := range b {
		if ch >= 'A' && ch <= 'Z' {
			if i > 0 {
				out = append(out, '_')
			}
			ch += 'a' - 'A'
		}
		out = append(out, ch)
	}
	return string(out)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
