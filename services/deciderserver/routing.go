package deciderserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// restRoutes knows which HTTP methods each REST path template serves, read from the OpenAPI
// document the gateway was generated with, so a request with another method can be answered
// 405 with the Allow header HTTP requires.
type restRoutes struct {
	templates []routeTemplate
}

type routeTemplate struct {
	segments []string // "{id}" matches one segment; the last may be "{id}:verb"
	methods  []string // upper case, sorted
}

// newRESTRoutes reads the paths of an OpenAPI v2 document.
func newRESTRoutes(openapi []byte) (*restRoutes, error) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi, &doc); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	r := &restRoutes{}
	for path, ops := range doc.Paths {
		t := routeTemplate{segments: strings.Split(strings.TrimPrefix(path, "/"), "/")}
		for m := range ops {
			t.methods = append(t.methods, strings.ToUpper(m))
		}
		slices.Sort(t.methods)
		r.templates = append(r.templates, t)
	}
	return r, nil
}

// allowed lists the methods served on the (escaped) request path, nil when no route matches.
// A template ending in a custom verb ("/v1/admin/engines/{id}:drain") is the resource the path
// names, so it wins over the plain one that would read "a2:drain" as an id.
func (r *restRoutes) allowed(escapedPath string) []string {
	segs := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	var plain, verb []string
	for _, t := range r.templates {
		if !t.match(segs) {
			continue
		}
		if strings.Contains(t.segments[len(t.segments)-1], "}:") {
			verb = append(verb, t.methods...)
		} else {
			plain = append(plain, t.methods...)
		}
	}
	out := plain
	if len(verb) > 0 {
		out = verb
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (t routeTemplate) match(segs []string) bool {
	if len(segs) != len(t.segments) {
		return false
	}
	for i, want := range t.segments {
		got := segs[i]
		if !strings.HasPrefix(want, "{") {
			if got != want {
				return false
			}
			continue
		}
		// "{id}" or "{id}:drain": a non-empty value, then the verb if any.
		_, verb, hasVerb := strings.Cut(want[strings.Index(want, "}")+1:], ":")
		if hasVerb {
			v, ok := strings.CutSuffix(got, ":"+verb)
			if !ok {
				return false
			}
			got = v
		}
		if got == "" {
			return false
		}
	}
	return true
}

// methodFilter answers 405 before the gateway routes a custom-verb path with a method its
// resource does not serve: the gateway alone would read it as the plain resource
// ("GET /v1/admin/versions/1:rollback" as GetVersion of version "1:rollback", a 400). Only
// paths whose last segment has a colon are looked up, so Decide pays one byte scan; other
// wrong methods reach routingErrorHandler.
func (r *restRoutes) methodFilter(mux *runtime.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p := req.URL.EscapedPath()
		if strings.IndexByte(p[strings.LastIndexByte(p, '/')+1:], ':') >= 0 {
			if allow := r.allowed(p); len(allow) > 0 && !slices.Contains(allow, req.Method) {
				_, m := runtime.MarshalerForRequest(mux, req)
				r.methodNotAllowed(req.Context(), mux, m, w, req, allow)
				return
			}
		}
		next.ServeHTTP(w, req)
	})
}

// routingErrorHandler answers requests the REST gateway has no handler for. The gateway's
// default maps "known path, other method" to Unimplemented, which is HTTP 501 — a server
// fault to every client and monitor. It is the client's: 405 Method Not Allowed, with Allow
// listing the path's methods. Unknown paths (404) and malformed ones (400) keep the default.
func (r *restRoutes) routingErrorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, req *http.Request, httpStatus int) {
	if httpStatus != http.StatusMethodNotAllowed {
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, req, httpStatus)
		return
	}
	r.methodNotAllowed(ctx, mux, m, w, req, r.allowed(req.URL.EscapedPath()))
}

// methodNotAllowed writes 405 with Allow and a status body like every other REST error.
func (r *restRoutes) methodNotAllowed(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, req *http.Request, allow []string) {
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
	}
	st := status.New(codes.Unimplemented, fmt.Sprintf("method %s is not allowed on %s; it serves %s", req.Method, req.URL.Path, strings.Join(allow, ", ")))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: "METHOD_NOT_ALLOWED", Domain: errorDomain}); err == nil {
		st = d
	}
	runtime.HTTPError(ctx, mux, m, w, req, &runtime.HTTPStatusError{HTTPStatus: http.StatusMethodNotAllowed, Err: st.Err()})
}
