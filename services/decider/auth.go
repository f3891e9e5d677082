package decider

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/gen/sluice/v1/sluicev1connect"
)

// Token roles. An admin token may do everything a viewer token may.
const (
	RoleAdmin  = "admin"
	RoleViewer = "viewer"
	roleDecide = "decide"
)

// permission is what a procedure needs.
type permission int

const (
	permNone   permission = iota // health, reflection
	permDecide                   // Decide, Release: open unless a decide token is set
	permRead                     // admin reads: open unless admin/viewer tokens are set
	permWrite                    // admin writes: always an admin token
)

type token struct {
	hash [sha256.Size]byte
	role string
	id   string // short non-secret fingerprint for the version log
}

// principal is who a request authenticated as.
type principal struct {
	role, id string
}

type principalKey struct{}

// authenticator checks bearer tokens. Tokens are compared in constant time
// (over their SHA-256, so lengths leak nothing) and never logged.
type authenticator struct {
	tokens      []token
	readTokens  bool // any admin or viewer token configured
	adminTokens bool
	decideToken bool
}

// newAuthenticator gathers tokens from the flags and the tokens file.
func newAuthenticator(cfg Config) (*authenticator, error) {
	a := &authenticator{}
	add := func(role, secret string) {
		h := sha256.Sum256([]byte(secret))
		a.tokens = append(a.tokens, token{hash: h, role: role, id: role + "#" + hex.EncodeToString(h[:4])})
		switch role {
		case RoleAdmin:
			a.adminTokens, a.readTokens = true, true
		case RoleViewer:
			a.readTokens = true
		case roleDecide:
			a.decideToken = true
		}
	}
	for _, t := range splitTokens(cfg.AdminTokens) {
		add(RoleAdmin, t)
	}
	for _, t := range splitTokens(cfg.ViewerTokens) {
		add(RoleViewer, t)
	}
	if cfg.DecideToken != "" {
		add(roleDecide, cfg.DecideToken)
	}
	if cfg.AdminTokensFile != "" {
		f, err := os.Open(cfg.AdminTokensFile)
		if err != nil {
			return nil, fmt.Errorf("-admin-tokens-file: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			role, secret, ok := strings.Cut(line, ":")
			role, secret = strings.TrimSpace(role), strings.TrimSpace(secret)
			if !ok || secret == "" || (role != RoleAdmin && role != RoleViewer) {
				return nil, fmt.Errorf("-admin-tokens-file %s line %d: want role:token with role admin or viewer", cfg.AdminTokensFile, n)
			}
			add(role, secret)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("-admin-tokens-file: %w", err)
		}
	}
	return a, nil
}

func splitTokens(s string) []string {
	var out []string
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// lookup returns the token matching secret. Every configured token is
// compared so the time taken does not depend on which one matched.
func (a *authenticator) lookup(secret string) (token, bool) {
	h := sha256.Sum256([]byte(secret))
	var found token
	ok := 0
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(h[:], t.hash[:]) == 1 {
			found, ok = t, 1
		}
	}
	return found, ok == 1
}

// procedurePermission says what a gRPC/Connect procedure needs; req lets
// ApplyConfig with validate_only count as a read.
func procedurePermission(procedure string, req any) permission {
	switch {
	case strings.HasPrefix(procedure, "/"+sluicev1connect.DeciderServiceName+"/"):
		return permDecide
	case strings.HasPrefix(procedure, "/"+sluicev1connect.AdminServiceName+"/"):
		method := procedure[strings.LastIndex(procedure, "/")+1:]
		if strings.HasPrefix(method, "List") || strings.HasPrefix(method, "Get") {
			return permRead
		}
		if v, ok := req.(interface{ GetValidateOnly() bool }); ok && v.GetValidateOnly() {
			return permRead
		}
		return permWrite
	}
	return permNone
}

// httpPermission says what a REST (grpc-gateway) request needs: GETs under
// /v1/admin/ read, every other admin verb writes.
func httpPermission(r *http.Request) permission {
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/admin/") || r.URL.Path == "/v1/admin":
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return permRead
		}
		return permWrite
	case strings.HasPrefix(r.URL.Path, "/v1/"):
		return permDecide
	}
	return permNone
}

// authError is a refused credential; classify maps it.
type authError struct {
	code    codes.Code // Unauthenticated or PermissionDenied
	message string
}

func (e *authError) Error() string { return e.message }

// authorize checks the Authorization header value against perm and returns
// ctx carrying the principal.
func (a *authenticator) authorize(ctx context.Context, perm permission, authorization string) (context.Context, error) {
	if perm == permNone {
		return ctx, nil
	}
	secret, hasBearer := strings.CutPrefix(authorization, "Bearer ")
	if !hasBearer {
		secret, hasBearer = strings.CutPrefix(authorization, "bearer ")
	}
	secret = strings.TrimSpace(secret)
	var (
		tok   token
		valid bool
	)
	if hasBearer && secret != "" {
		tok, valid = a.lookup(secret)
	}
	unauthenticated := func(what string) error {
		if authorization == "" {
			return &authError{codes.Unauthenticated, what + " needs a bearer token (Authorization: Bearer <token>)"}
		}
		return &authError{codes.Unauthenticated, what + ": the bearer token is malformed or unknown"}
	}
	switch perm {
	case permDecide:
		if !a.decideToken {
			break
		}
		if !valid || (tok.role != roleDecide && tok.role != RoleAdmin) {
			return ctx, unauthenticated("Decide")
		}
	case permRead:
		if !a.readTokens && !valid {
			return context.WithValue(ctx, principalKey{}, principal{role: "anonymous", id: "anonymous"}), nil
		}
		if !valid {
			return ctx, unauthenticated("admin API read")
		}
		if tok.role != RoleAdmin && tok.role != RoleViewer {
			return ctx, &authError{codes.PermissionDenied, "admin API read: this token's role (" + tok.role + ") may not read the admin API; use a viewer or admin token"}
		}
	case permWrite:
		if !a.adminTokens && !valid {
			return ctx, &authError{codes.PermissionDenied, "admin API writes are disabled: start the decider with -admin-token or -admin-tokens-file"}
		}
		if !valid {
			return ctx, unauthenticated("admin API write")
		}
		if tok.role != RoleAdmin {
			return ctx, &authError{codes.PermissionDenied, "admin API write: a " + tok.role + " token may only read; use an admin token"}
		}
	}
	if valid {
		ctx = context.WithValue(ctx, principalKey{}, principal{role: tok.role, id: tok.id})
	}
	return ctx, nil
}

// author names the caller in the configuration version log.
func author(ctx context.Context) string {
	if p, ok := ctx.Value(principalKey{}).(principal); ok {
		return p.id
	}
	return "anonymous"
}

// grpcUnary is the native gRPC interceptor.
func (a *authenticator) grpcUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	var authz string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authz = v[0]
		}
	}
	ctx, err := a.authorize(ctx, procedurePermission(info.FullMethod, req), authz)
	if err != nil {
		return nil, grpcError(err)
	}
	return handler(ctx, req)
}

// connectInterceptor checks unary Connect, gRPC and gRPC-Web calls on the
// HTTP port.
func (a *authenticator) connectInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			ctx, err := a.authorize(ctx, procedurePermission(req.Spec().Procedure, req.Any()), req.Header().Get("Authorization"))
			if err != nil {
				return nil, connectError(err)
			}
			return next(ctx, req)
		}
	})
}

// gateway wraps the grpc-gateway mux: REST calls bypass the gRPC
// interceptor (the gateway calls the service in process), so they are
// checked here, by path and verb.
func (a *authenticator) gateway(mux *runtime.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, err := a.authorize(r.Context(), httpPermission(r), r.Header.Get("Authorization"))
		if err != nil {
			_, outbound := runtime.MarshalerForRequest(mux, r)
			runtime.HTTPError(r.Context(), mux, outbound, w, r, grpcError(err))
			return
		}
		mux.ServeHTTP(w, r.WithContext(ctx))
	})
}
