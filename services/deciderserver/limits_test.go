package deciderserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/components/limits"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// endless is a body of n bytes of a JSON string's content, produced lazily.
type endless struct{ n int64 }

var as = bytes.Repeat([]byte("a"), 64<<10)

func (e *endless) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(int64(len(p)), e.n)], as)
	e.n -= int64(k)
	return k, nil
}

func post(t *testing.T, url, contentType string, header http.Header, body io.Reader, length int64) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", contentType)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, string(raw)
}

// TestHTTPBodiesAreBounded: the HTTP port read any body (100 MB REST or Connect bodies were
// read and parsed; a 190 KB gzip body inflating to 200 MB was inflated). Every body is now
// bounded by the limit derived from -max-token-ids, and refused before it is parsed.
func TestHTTPBodiesAreBounded(t *testing.T) {
	cfg := fileConfig(t)
	cfg.MaxTokenIDs = 1000
	srv := startWith(t, cfg)
	limit := limits.For(cfg.MaxTokenIDs).MaxBodyBytes
	base := "http://" + srv.HTTPAddr()
	huge := 100 << 20

	// REST with a declared length: 413 without reading the body.
	code, _, body := post(t, base+"/v1/decide", "application/json", nil, io.MultiReader(strings.NewReader(`{"model": "`), &endless{int64(huge)}), int64(huge)+11)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "-max-token-ids") || !strings.Contains(body, "REQUEST_TOO_LARGE") {
		t.Errorf("REST 100 MB Content-Length = %d %.300s, want 413 naming the limit's origin", code, body)
	}
	// REST chunked: 413 at the first byte past the limit.
	code, _, body = post(t, base+"/v1/decide", "application/json", nil, io.MultiReader(strings.NewReader(`{"model": "`), &endless{limit}), -1)
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("REST chunked body over %d bytes = %d %.300s, want 413", limit, code, body)
	}
	// Connect JSON, declared and chunked: resource_exhausted.
	for _, length := range []int64{limit + 21, -1} {
		code, _, body = post(t, base+"/sluice.v1.DeciderService/Decide", "application/json", nil,
			io.MultiReader(strings.NewReader(`{"model": "`), &endless{limit + 8}, strings.NewReader(`"}`)), length)
		if code == http.StatusOK || !strings.Contains(body, "resource_exhausted") {
			t.Errorf("Connect body over %d bytes (Content-Length %d) = %d %.300s, want resource_exhausted", limit, length, code, body)
		}
	}
	// Connect gzip bomb (a few KB inflating to 32 times the limit): refused once the limit is
	// inflated, without inflating the rest (Connect would otherwise inflate it all to report
	// "message size N").
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	_, _ = io.Copy(zw, io.MultiReader(strings.NewReader(`{"model": "`), &endless{32 * limit}, strings.NewReader(`"}`)))
	_ = zw.Close()
	code, _, body = post(t, base+"/sluice.v1.DeciderService/Decide", "application/json", http.Header{"Content-Encoding": {"gzip"}}, bytes.NewReader(gz.Bytes()), int64(gz.Len()))
	if code == http.StatusOK || !strings.Contains(body, "resource_exhausted") || !strings.Contains(body, "unable to determine message size") {
		t.Errorf("Connect gzip body of %d bytes inflating to 32 times the limit = %d %.300s, want resource_exhausted without the inflated size", gz.Len(), code, body)
	}
	// A Decide with the most token ids allowed still fits, as JSON with the widest ids.
	ids := make([]uint32, cfg.MaxTokenIDs)
	for i := range ids {
		ids[i] = 4_000_000_000 + uint32(i)
	}
	idsJSON, _ := json.Marshal(ids)
	doc := `{"model": "chat", "input_tokens": 1000, "dry_run": true, "token_ids": ` + strings.ReplaceAll(string(idsJSON), ",", ", ") + `}`
	if code, _, body := post(t, base+"/v1/decide", "application/json", nil, strings.NewReader(doc), int64(len(doc))); code != 200 {
		t.Errorf("REST Decide with -max-token-ids widest ids (%d bytes) = %d %.300s, want 200", len(doc), code, body)
	}
	// One more id than allowed (short ids, so the body is well within the byte limit).
	var many strings.Builder
	many.WriteString(`{"model": "chat", "input_tokens": 1001, "dry_run": true, "token_ids": [1`)
	for range cfg.MaxTokenIDs {
		many.WriteString(",1")
	}
	many.WriteString("]}")
	code, _, body = post(t, base+"/v1/decide", "application/json", nil, strings.NewReader(many.String()), int64(many.Len()))
	if code != 400 || !strings.Contains(body, "TOO_MANY_TOKEN_IDS") || !strings.Contains(body, "1001 entries") {
		t.Errorf("REST Decide with %d token ids = %d %.300s, want 400 TOO_MANY_TOKEN_IDS", cfg.MaxTokenIDs+1, code, body)
	}
}

// TestGRPCTakesTheLargestValidDecide: gRPC kept its 4 MiB default, so the default
// -max-token-ids (2,097,152) was unreachable: such a Decide got RESOURCE_EXHAUSTED. It is
// accepted now, and one more token id is TOO_MANY_TOKEN_IDS, not a transport error.
func TestGRPCTakesTheLargestValidDecide(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	c := grpcClient(t, srv)
	n := DefaultConfig().MaxTokenIDs
	ids := make([]uint32, n+1)
	for i := range ids {
		ids[i] = 4_000_000_000 + uint32(i%1000) // five-byte varints: the widest encoding
	}
	resp, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "chat", InputTokens: int64(n), TokenIds: ids[:n], DryRun: true})
	if err != nil || resp.GetBucketId() != "long" {
		t.Errorf("gRPC Decide with %d token ids = %v, %v; want bucket long", n, resp.GetBucketId(), err)
	}
	_, err = c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "chat", InputTokens: int64(n + 1), TokenIds: ids, DryRun: true})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || reasonOf(st) != "TOO_MANY_TOKEN_IDS" {
		t.Errorf("gRPC Decide with %d token ids = %v %s, want InvalidArgument TOO_MANY_TOKEN_IDS", n+1, st.Code(), reasonOf(st))
	}
}

// TestCountTokenIDs: the byte scan that refuses an oversized REST token_ids list before it is
// parsed counts exactly the top-level list, whatever else the body holds.
func TestCountTokenIDs(t *testing.T) {
	tests := []struct {
		name, body string
		want       int
	}{
		{"snake case", `{"model": "m", "token_ids": [1, 2, 3]}`, 3},
		{"camel case", `{"tokenIds":["1","2"],"model":"m"}`, 2},
		{"empty list", `{"token_ids": []}`, 0},
		{"none", `{"model": "a,b,c", "exclude_engine_ids": ["x", "y"]}`, 0},
		{"key inside a string", `{"model": "\"token_ids\": [1,2,3]", "token_ids": [7]}`, 1},
		{"nested object first", `{"x": {"token_ids": [1, 2, 3, 4]}, "token_ids": [5, 6]}`, 2},
		{"escaped quote", `{"session_key": "a\",\"b", "token_ids": [1,2,3,4,5]}`, 5},
		{"not json", `token_ids: [1, 2]`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := countTokenIDs([]byte(tt.body)); got != tt.want {
				t.Errorf("countTokenIDs(%s) = %d, want %d", tt.body, got, tt.want)
			}
		})
	}
}
