package deciderserver

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
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

func errorInfoReason(details []any) string {
	for _, d := range details {
		if m, ok := d.(map[string]any); ok && m["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" {
			r, _ := m["reason"].(string)
			return r
		}
	}
	return ""
}

// TestRefusedCredentialsCarryErrorInfo: 401 and 403 had no ErrorInfo, unlike every other
// error; clients could not tell a missing token from a wrong role without parsing prose.
func TestRefusedCredentialsCarryErrorInfo(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	rest := []struct {
		name, method, path, token, reason string
		status                            int
	}{
		{"no token", "GET", "/v1/admin/buckets", "", "TOKEN_MISSING", 401},
		{"unknown token", "GET", "/v1/admin/buckets", "nope", "TOKEN_INVALID", 401},
		{"viewer writes", "DELETE", "/v1/admin/buckets/long", viewerToken, "ROLE_NOT_ALLOWED", 403},
	}
	for _, tt := range rest {
		status, body := restCall(t, srv, tt.method, tt.path, tt.token, "")
		details, _ := body["details"].([]any)
		if status != tt.status || errorInfoReason(details) != tt.reason {
			t.Errorf("%s: %s %s = %d %v, want %d with ErrorInfo reason %s", tt.name, tt.method, tt.path, status, body, tt.status, tt.reason)
		}
	}
	_, err := sluicev1.NewAdminServiceClient(grpcConn(t, srv)).DeleteBucket(metadata.AppendToOutgoingContext(context.Background(),
		"authorization", "Bearer "+viewerToken), &sluicev1.DeleteBucketRequest{Id: "long"})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || reasonOf(st) != "ROLE_NOT_ALLOWED" {
		t.Errorf("gRPC DeleteBucket as viewer = %v %q, want PermissionDenied ROLE_NOT_ALLOWED", st.Code(), reasonOf(st))
	}
	_, err = adminClient(srv, "").DeleteBucket(context.Background(), connect.NewRequest(&sluicev1.DeleteBucketRequest{Id: "long"}))
	var ce *connect.Error
	reason := ""
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			if v, _ := d.Value(); v != nil {
				if info, ok := v.(*errdetails.ErrorInfo); ok {
					reason = info.GetReason()
				}
			}
		}
	}
	if connect.CodeOf(err) != connect.CodeUnauthenticated || reason != "TOKEN_MISSING" {
		t.Errorf("Connect DeleteBucket without a token = %v (reason %q), want Unauthenticated TOKEN_MISSING", err, reason)
	}
}

// TestEchoedValuesAreTruncated: a 1 MB model name came back in a 1 MB error message.
func TestEchoedValuesAreTruncated(t *testing.T) {
	srv := startWith(t, fileConfig(t))
	huge := strings.Repeat("m", 1<<20)
	_, err := grpcClient(t, srv).Decide(context.Background(), &sluicev1.DecideRequest{Model: huge, InputTokens: 1, DryRun: true})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || reasonOf(st) != "UNKNOWN_MODEL" || len(st.Message()) > 4096 {
		t.Errorf("gRPC Decide(1 MB model) = %v %s with a %d-byte message, want InvalidArgument UNKNOWN_MODEL under 4 KiB", st.Code(), reasonOf(st), len(st.Message()))
	}
	code, body := restCall(t, srv, "POST", "/v1/decide", "", `{"model": "`+huge+`", "input_tokens": 1, "dry_run": true}`)
	if msg := messageOf(body); code != 400 || len(msg) > 4096 || !strings.Contains(msg, "more bytes") {
		t.Errorf("REST Decide(1 MB model) = %d with a %d-byte message, want 400 under 4 KiB saying it was cut", code, len(msg))
	}
	code, body = restCall(t, srv, "POST", "/v1/decide", "", `{"model": "m", "`+huge+`": 1}`)
	if msg := messageOf(body); code != 400 || len(msg) > 4096 {
		t.Errorf("REST Decide with a 1 MB unknown field name = %d with a %d-byte message, want 400 under 4 KiB", code, len(msg))
	}
}
