package decider

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// TestEveryProcedureHasAPermission: the permission table names every method of both services,
// so a new RPC cannot be served with a permission guessed from its name or route.
func TestEveryProcedureHasAPermission(t *testing.T) {
	for _, fd := range []protoreflect.FileDescriptor{sluicev1.File_sluice_v1_decider_proto, sluicev1.File_sluice_v1_admin_proto} {
		for i := range fd.Services().Len() {
			svc := fd.Services().Get(i)
			for j := range svc.Methods().Len() {
				procedure := "/" + string(svc.FullName()) + "/" + string(svc.Methods().Get(j).Name())
				if _, ok := procedurePermissions[procedure]; !ok {
					t.Errorf("procedurePermissions has no entry for %s", procedure)
				}
			}
		}
	}
}

// TestPermissionsAreTheSameOnEveryProtocol: a viewer token could ApplyConfig{validate_only}
// over Connect and gRPC but not over REST (which checked by path and verb). One table now
// decides for all three.
func TestPermissionsAreTheSameOnEveryProtocol(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	ctx := context.Background()
	gc := sluicev1.NewAdminServiceClient(grpcConn(t, srv))
	with := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	tests := []struct {
		name         string
		token        string
		validateOnly bool
		want         codes.Code
	}{
		{"viewer validates", viewerToken, true, codes.OK},
		{"viewer applies", viewerToken, false, codes.PermissionDenied},
		{"nobody validates", "", true, codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &sluicev1.ApplyConfigRequest{Document: threeBuckets, ValidateOnly: tt.validateOnly}
			_, gerr := gc.ApplyConfig(with(tt.token), req)
			_, cerr := adminClient(srv, tt.token).ApplyConfig(ctx, connect.NewRequest(req))
			body := `{"document": ` + string(mustJSON(threeBuckets)) + `, "validate_only": ` + map[bool]string{true: "true", false: "false"}[tt.validateOnly] + `}`
			rstatus, rbody := restCall(t, srv, "PUT", "/v1/admin/config", tt.token, body)
			wantHTTP := map[codes.Code]int{codes.OK: http.StatusOK, codes.PermissionDenied: http.StatusForbidden, codes.Unauthenticated: http.StatusUnauthorized}[tt.want]
			ccode := codes.OK
			if cerr != nil {
				ccode = codes.Code(connect.CodeOf(cerr))
			}
			if status.Code(gerr) != tt.want || ccode != tt.want || rstatus != wantHTTP {
				t.Errorf("ApplyConfig(validate_only=%v) as %q: gRPC %v, Connect %v, REST %d %v; want %v / HTTP %d on all three",
					tt.validateOnly, tt.token, gerr, cerr, rstatus, rbody, tt.want, wantHTTP)
			}
		})
	}
	if v := srv.Store().Current().Version; v != 1 {
		t.Errorf("version %d after validate-only and refused calls, want 1", v)
	}
}
