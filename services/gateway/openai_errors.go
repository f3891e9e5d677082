package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// Paths of the decider's REST mapping that the gateway proxies (proto/sluice/v1/sluice_api.yaml):
// they keep grpc-gateway's status shape. Every other path answers errors in OpenAI's shape.
var restPrefixes = []string{"/v1/decide", "/v1/release", "/v1/admin"}

// isRESTPath reports whether path belongs to the decider's REST mapping rather than to the
// OpenAI/SGLang surface.
func isRESTPath(path string) bool {
	for _, p := range restPrefixes {
		if path == p || strings.HasPrefix(path, p+"/") || strings.HasPrefix(path, p+":") {
			return true
		}
	}
	return false
}

// routingError answers a request no route matched (unknown path, or a method the path does not
// serve). On the OpenAI surface it is an OpenAI error — 404 `unknown_url` as OpenAI answers an
// unknown route, 405 `method_not_allowed` with Allow — so the openai packages raise their
// NotFoundError/APIStatusError instead of failing to parse grpc-gateway's {"code":5} body. REST
// paths keep grpc-gateway's answer.
func (s *Server) routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, status int) {
	if isRESTPath(r.URL.Path) {
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, status)
		return
	}
	switch status {
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		// grpc-gateway reports a known path with another method as 501 unless told otherwise;
		// to a client that is a 405.
		if allow := s.allowed(r.URL.Path); allow != "" {
			w.Header().Set("Allow", allow)
			writeAPIError(w, apiError{status: http.StatusMethodNotAllowed, typ: typeInvalidRequest, code: "method_not_allowed",
				message: fmt.Sprintf("%s %s is not served; use %s", r.Method, r.URL.Path, allow)})
			return
		}
		fallthrough
	case http.StatusNotFound:
		writeAPIError(w, apiError{status: http.StatusNotFound, typ: typeInvalidRequest, code: "unknown_url",
			message: fmt.Sprintf("Invalid URL (%s %s): sluice's gateway serves POST %s, %s and %s, GET %s and GET %s/{model}",
				r.Method, r.URL.Path, routeChat, routeCompletions, routeGenerate, routeModels, routeModels)})
	default:
		writeAPIError(w, apiError{status: status, typ: typeInvalidRequest, code: strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_"),
			message: fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, http.StatusText(status))})
	}
}

// allowed names the methods the OpenAI route at path serves, "" for no such route.
func (s *Server) allowed(path string) string {
	switch {
	case path == routeChat || path == routeCompletions || path == routeGenerate:
		return http.MethodPost
	case path == routeModels || strings.HasPrefix(path, routeModels+"/"):
		return http.MethodGet
	}
	return ""
}
