package deciderserver

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/protoadapt"

	"github.com/sluicehq/sluice/components/limits"
)

// limitBodies bounds every request body on the HTTP port to max bytes (limits.Sizes.MaxBodyBytes),
// so no caller can make the decider read or parse more than the largest valid request.
//
// REST (/v1/) bodies are read here, before grpc-gateway parses anything: a declared
// Content-Length above max is answered 413 without reading a byte, a longer chunked body at the
// first byte past max. Connect, gRPC and gRPC-Web bodies are cut at max+1 bytes; vanguard's
// message buffer limit (the same max) and cappedGzip (after decompression) answer
// ResourceExhausted.
//
// A REST Decide whose token_ids list is longer than maxTokenIDs is answered 400
// TOO_MANY_TOKEN_IDS from a byte scan, before the seconds protojson would spend parsing it.
func limitBodies(next http.Handler, max int64, maxTokenIDs int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			// One byte of slack: vanguard reads max+1 bytes to tell a body of exactly max from a
			// longer one, and answers the longer one ResourceExhausted itself.
			r.Body = http.MaxBytesReader(w, r.Body, max+1)
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > max {
			bodyTooLarge(w, r.ContentLength, max)
			return
		}
		raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			bodyTooLarge(w, max+1, max)
			return
		case err != nil:
			http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/v1/decide" && bytes.Count(raw, []byte(",")) >= maxTokenIDs {
			if n := countTokenIDs(raw); n > maxTokenIDs {
				writeStatus(w, http.StatusBadRequest, status.New(codes.InvalidArgument, fmt.Sprintf(
					"token_ids has %d entries, above the cap of %d; omit token_ids or raise -max-token-ids", n, maxTokenIDs)),
					&errdetails.ErrorInfo{Reason: "TOO_MANY_TOKEN_IDS", Domain: errorDomain})
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		next.ServeHTTP(w, r)
	})
}

// countTokenIDs counts the entries of the top-level "token_ids" (or "tokenIds") array of a
// JSON object with a single pass over the bytes, or returns 0 when there is none or the body is
// not shaped like that (the JSON decoder then reports what is wrong).
func countTokenIDs(raw []byte) int {
	depth, inString, escaped := 0, false, false
	keyStart, lastKey := -1, ""
	inIDs, n, sawValue := false, 0, false
	for i, c := range raw {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if depth == 1 && keyStart >= 0 {
					lastKey = string(raw[keyStart:i])
				}
				if inIDs {
					sawValue = true
				}
			}
			continue
		}
		switch c {
		case '"':
			inString, keyStart = true, -1
			if depth == 1 {
				keyStart = i + 1
			}
		case '{', '[':
			depth++
			if depth == 2 && c == '[' && (lastKey == "token_ids" || lastKey == "tokenIds") {
				inIDs, n, sawValue = true, 0, false
			}
		case '}', ']':
			if inIDs && depth == 2 {
				if sawValue {
					n++
				}
				return n
			}
			depth--
		case ',':
			if inIDs && depth == 2 {
				n++
				sawValue = false
			}
		case ' ', '\t', '\r', '\n', ':':
		default:
			if inIDs {
				sawValue = true
			}
		}
	}
	return 0
}

// bodyTooLarge answers 413 with a google.rpc.Status body like every other REST error
// (code RESOURCE_EXHAUSTED, ErrorInfo reason REQUEST_TOO_LARGE).
func bodyTooLarge(w http.ResponseWriter, size, max int64) {
	what := "request body"
	if size == max+1 {
		what = "request body (at least)"
	}
	w.Header().Set("Connection", "close") // the rest of the body is not read
	writeStatus(w, http.StatusRequestEntityTooLarge, status.New(codes.ResourceExhausted, limits.TooLarge(what, size, max)),
		&errdetails.ErrorInfo{Reason: "REQUEST_TOO_LARGE", Domain: errorDomain, Metadata: map[string]string{"limit_bytes": fmt.Sprint(max)}})
}

// writeStatus writes st with details as the JSON google.rpc.Status body grpc-gateway uses.
func writeStatus(w http.ResponseWriter, httpStatus int, st *status.Status, details ...protoadapt.MessageV1) {
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	body, _ := protojson.Marshal(st.Proto())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(body)
}

// cappedGzip is the HTTP port's gzip (vanguard decompresses Connect, gRPC-Web and gRPC request
// bodies before the gRPC server sees them) with a hard cap: a stock gzip reader inflates
// whatever it is given, so a 190 KB request inflating to 200 MB would cost 200 MB of inflation.
// This one fails with ResourceExhausted once max bytes are out.
func cappedGzip(max int64) vanguard.TranscoderOption {
	return vanguard.WithCompression("gzip",
		func() connect.Compressor { return gzip.NewWriter(io.Discard) },
		func() connect.Decompressor { return &cappedReader{max: max} },
	)
}

type cappedReader struct {
	gz   *gzip.Reader
	max  int64
	read int64
}

func (c *cappedReader) Reset(r io.Reader) error {
	c.read = 0
	if c.gz == nil {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		c.gz = gz
		return nil
	}
	return c.gz.Reset(r)
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.gz == nil {
		return 0, io.ErrUnexpectedEOF
	}
	if c.read > c.max {
		return 0, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"decompressed message is larger than %d bytes (derived from -max-token-ids); the rest was not inflated, so unable to determine message size", c.max))
	}
	if room := c.max + 1 - c.read; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.gz.Read(p)
	c.read += int64(n)
	return n, err
}

func (c *cappedReader) Close() error {
	if c.gz == nil {
		return nil
	}
	return c.gz.Close()
}
