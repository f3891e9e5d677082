package deciderserver

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/internal/flagenv"

	"google.golang.org/grpc/codes"

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
	for _, t := range flagenv.List(cfg.AdminTokens) {
		add(RoleAdmin, t)
	}
	for _, t := range flagenv.List(cfg.ViewerTokens) {
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

// procedurePermissions is the one permission table: what each procedure needs, whichever
// protocol carries it (native gRPC, Connect/gRPC-Web, REST through grpc-gateway).
var procedurePermissions = map[string]permission{
	sluicev1connect.DeciderServiceDecideProcedure:  permDecide,
	sluicev1connect.DeciderServiceReleaseProcedure: permDecide,

	sluicev1connect.AdminServiceListEnginesProcedure:  permRead,
	sluicev1connect.AdminServiceGetEngineProcedure:    permRead,
	sluicev1connect.AdminServiceGetConfigProcedure:    permRead,
	sluicev1connect.AdminServiceListVersionsProcedure: permRead,
	sluicev1connect.AdminServiceGetVersionProcedure:   permRead,
	sluicev1connect.AdminServiceListBucketsProcedure:  permRead,
	sluicev1connect.AdminServiceGetBucketProcedure:    permRead,

	sluicev1connect.AdminServiceApplyConfigProcedure:    permWrite, // permRead with validate_only
	sluicev1connect.AdminServiceRollbackProcedure:       permWrite,
	sluicev1connect.AdminServiceCreateBucketProcedure:   permWrite,
	sluicev1connect.AdminServiceReplaceBucketProcedure:  permWrite,
	sluicev1connect.AdminServiceDeleteBucketProcedure:   permWrite,
	sluicev1connect.AdminServiceRegisterEngineProcedure: permWrite,
	sluicev1connect.AdminServiceUpdateEngineProcedure:   permWrite,
	sluicev1connect.AdminServiceDrainEngineProcedure:    permWrite,
	sluicev1connect.AdminServiceRemoveEngineProcedure:   permWrite,
}

// procedurePermission says what a procedure ("/sluice.v1.AdminService/ApplyConfig") needs,
// from procedurePermissions; req lets ApplyConfig with validate_only count as a read. A
// procedure of our services missing from the table needs an admin token (fail closed); other
// services (health, reflection) are open.
func procedurePermission(procedure string, req any) permission {
	if perm, ok := procedurePermissions[procedure]; ok {
		if procedure == sluicev1connect.AdminServiceApplyConfigProcedure {
			if v, ok := req.(interface{ GetValidateOnly() bool }); ok && v.GetValidateOnly() {
				return permRead
			}
		}
		return perm
	}
	if strings.HasPrefix(procedure, "/"+sluicev1connect.DeciderServiceName+"/") || strings.HasPrefix(procedure, "/"+sluicev1connect.AdminServiceName+"/") {
		return permWrite
	}
	return permNone
}

// authError is a refused credential; classify maps it.
type authError struct {
	code    codes.Code // Unauthenticated or PermissionDenied
	reason  string     // the ErrorInfo reason: TOKEN_MISSING, TOKEN_INVALID, ROLE_NOT_ALLOWED, ADMIN_WRITES_DISABLED
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
			return &authError{codes.Unauthenticated, "TOKEN_MISSING", what + " needs a bearer token (Authorization: Bearer <token>)"}
		}
		return &authError{codes.Unauthenticated, "TOKEN_INVALID", what + ": the bearer token is malformed or unknown"}
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
			return ctx, &authError{codes.PermissionDenied, "ROLE_NOT_ALLOWED", "admin API read: this token's role (" + tok.role + ") may not read the admin API; use a viewer or admin token"}
		}
	case permWrite:
		if !a.adminTokens && !valid {
			return ctx, &authError{codes.PermissionDenied, "ADMIN_WRITES_DISABLED", "admin API writes are disabled: start the decider with -admin-token or -admin-tokens-file"}
		}
		if !valid {
			return ctx, unauthenticated("admin API write")
		}
		if tok.role != RoleAdmin {
			return ctx, &authError{codes.PermissionDenied, "ROLE_NOT_ALLOWED", "admin API write: a " + tok.role + " token may only read; use an admin token"}
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
