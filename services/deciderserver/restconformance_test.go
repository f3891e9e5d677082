package deciderserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// restRaw sends a REST request (JSON content type, then header name/value pairs) and returns the
// response with its body read.
func restRaw(t *testing.T, srv *Server, method, path, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+srv.HTTPAddr()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

// Found by schemathesis: the gateway wrote unset messages as null ("capturedAt": null for an
// engine without a load report), where the OpenAPI document says "type": "string".
func TestRESTWritesNoNulls(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/admin/engines", ""},
		{"GET", "/v1/admin/engines/a1", ""},
		{"POST", "/v1/decide", `{"model": "chat", "input_tokens": 10, "dry_run": true}`},
		{"POST", "/v1/decide", `{"model": "pd-chat", "input_tokens": 10, "dry_run": true, "explain": true}`},
	} {
		resp, raw := restRaw(t, srv, c.method, c.path, c.body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s = %d %s, want 200", c.method, c.path, resp.StatusCode, raw)
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		if p := nullAt(v, ""); p != "" {
			t.Errorf("%s %s: null at %s in %s", c.method, c.path, p, raw)
		}
	}
	// Zero values are still written out, so REST clients see every scalar field.
	_, raw := restRaw(t, srv, "GET", "/v1/admin/engines/a1", "")
	if !bytes.Contains(raw, []byte(`"loadKnown":false`)) || !bytes.Contains(raw, []byte(`"running":"0"`)) {
		t.Errorf("GET /v1/admin/engines/a1 = %s, want zero-valued load fields written out", raw)
	}
}

// nullAt returns the path of the first JSON null in v, or "".
func nullAt(v any, path string) string {
	switch v := v.(type) {
	case nil:
		return path
	case map[string]any:
		for k, e := range v {
			if p := nullAt(e, path+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for _, e := range v {
			if p := nullAt(e, path+"[]"); p != "" {
				return p
			}
		}
	}
	return ""
}

// Found by schemathesis: a REST path with a method it does not serve answered 501 Not
// Implemented (the gateway's Unimplemented), a server fault, and a custom-verb path with
// another method was read as the plain resource (GET .../1:rollback: a 400 about the version).
func TestRESTMethodNotAllowed(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"TRACE", "/v1/decide", 405, "POST"},
		{"GET", "/v1/release", 405, "POST"},
		{"PATCH", "/v1/admin/buckets/short", 405, "DELETE, GET, PUT"},
		{"GET", "/v1/admin/versions/1:rollback", 405, "POST"},
		{"DELETE", "/v1/admin/engines/a1:drain", 405, "POST"},
		{"OPTIONS", "/v1/admin/engines/a1", 405, "DELETE, GET, PUT"},
		{"GET", "/v1/admin/engines/a1", 200, ""},
		{"GET", "/v1/admin/no-such-route", 404, ""},
	} {
		resp, raw := restRaw(t, srv, c.method, c.path, "")
		if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s = %d Allow %q (%s), want %d Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), raw, c.status, c.allow)
			continue
		}
		if c.status == 405 && !bytes.Contains(raw, []byte(`"reason":"METHOD_NOT_ALLOWED"`)) {
			t.Errorf("%s %s body = %s, want ErrorInfo METHOD_NOT_ALLOWED", c.method, c.path, raw)
		}
	}
}
