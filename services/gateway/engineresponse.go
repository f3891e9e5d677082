package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strings"
)

// readResponse reads an engine's answer header from br, as http.ReadResponse does. The common
// answer is parsed in place: HTTP/1.1, a final status other than 204 and 304 to a request that
// is not HEAD, a header already complete in the buffer with token names and no folded lines,
// no Connection or Trailer header, and exactly one of a Content-Length or "Transfer-Encoding:
// chunked". The header block becomes one string whose pieces are the map's values, where
// net/textproto allocates each value, keys and values of its own and a profile of the gateway
// under load showed http.ReadResponse at a tenth of the allocations. Anything else goes to
// http.ReadResponse, which then reads the answer from its first byte.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if _, err := br.Peek(1); err != nil || req.Method == http.MethodHead {
		return http.ReadResponse(br, req)
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return http.ReadResponse(br, req)
	}
	resp, ok := parseResponseHead(string(buf[:end+2]))
	if !ok {
		return http.ReadResponse(br, req)
	}
	_, _ = br.Discard(end + 4)
	resp.Request = req
	switch {
	case resp.ContentLength == 0:
		resp.Body = http.NoBody
	case resp.ContentLength > 0:
		resp.Body = &lengthBody{r: br, n: resp.ContentLength}
	default:
		resp.Body = &chunkedBody{r: br, cr: httputil.NewChunkedReader(br), resp: resp}
	}
	return resp, nil
}

// parseResponseHead parses the status line and header lines of head (each line ending in
// CRLF, without the empty line); ok is false for anything readResponse leaves to net/http.
func parseResponseHead(head string) (*http.Response, bool) {
	if strings.Count(head, "\n") != strings.Count(head, "\r\n") {
		return nil, false // a line ended by a bare LF, which net/textproto accepts
	}
	line, rest, _ := strings.Cut(head, "\r\n")
	status, ok := strings.CutPrefix(line, "HTTP/1.1 ")
	if !ok || len(status) < 3 || status[0] < '2' || status[0] > '5' || status[1] < '0' || status[1] > '9' ||
		status[2] < '0' || status[2] > '9' || len(status) > 3 && status[3] != ' ' {
		return nil, false
	}
	code := int(status[0]-'0')*100 + int(status[1]-'0')*10 + int(status[2]-'0')
	if code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}
	n := strings.Count(rest, "\r\n")
	hdr := make(http.Header, n)
	vals := make([]string, n)
	var length int64 = -1
	chunked := false
	for i := 0; rest != ""; i++ {
		line, rest, _ = strings.Cut(rest, "\r\n")
		k, v, found := strings.Cut(line, ":")
		if !found || !validHeaderName(k) {
			return nil, false // also a folded line (leading space), which net/http rejects
		}
		v = strings.Trim(v, " \t")
		for j := 0; j < len(v); j++ {
			if c := v[j]; c < ' ' && c != '\t' || c == 0x7f {
				return nil, false
			}
		}
		k = textproto.CanonicalMIMEHeaderKey(k)
		switch k {
		case "Connection", "Trailer":
			return nil, false
		case "Content-Length":
			if length >= 0 || chunked {
				return nil, false
			}
			if length = parseLength(v); length < 0 {
				return nil, false
			}
		case "Transfer-Encoding":
			if chunked || length >= 0 || v != "chunked" {
				return nil, false
			}
			chunked = true
			continue // net/http moves it to TransferEncoding
		}
		vals[i] = v
		if vs := hdr[k]; vs != nil {
			hdr[k] = append(vs, v)
		} else {
			hdr[k] = vals[i : i+1 : i+1]
		}
	}
	if length < 0 && !chunked {
		return nil, false // the body runs to the connection's end
	}
	resp := &http.Response{Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: hdr, ContentLength: length}
	if chunked {
		resp.TransferEncoding = []string{"chunked"}
	}
	return resp, true
}

// parseLength reads a Content-Length of plain decimal digits (at most 18); -1 otherwise.
func parseLength(v string) int64 {
	if v == "" || len(v) > 18 {
		return -1
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return -1
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n
}

// lengthBody is a body of n more bytes; like net/http's, it reports io.EOF with the last
// bytes and io.ErrUnexpectedEOF when the connection ends first.
type lengthBody struct {
	r *bufio.Reader
	n int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	k, err := b.r.Read(p)
	b.n -= int64(k)
	switch {
	case b.n == 0:
		return k, io.EOF
	case err == io.EOF:
		return k, io.ErrUnexpectedEOF
	}
	return k, err
}

func (*lengthBody) Close() error { return nil }

// chunkedBody is a chunked body; after the last chunk it reads the trailer section (merged
// into the response's Trailer, as net/http does) so the connection can carry the next request.
type chunkedBody struct {
	r    *bufio.Reader
	cr   io.Reader
	resp *http.Response
	err  error
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.cr.Read(p)
	if errors.Is(err, io.EOF) {
		if terr := b.readTrailer(); terr != nil {
			err = terr
		}
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

var errBadTrailer = errors.New("http: malformed trailer after the last chunk")

func (b *chunkedBody) readTrailer() error {
	if buf, err := b.r.Peek(2); err == nil && string(buf) == "\r\n" {
		_, _ = b.r.Discard(2)
		return nil
	}
	hdr, err := textproto.NewReader(b.r).ReadMIMEHeader()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return errBadTrailer
	}
	if b.resp.Trailer == nil {
		b.resp.Trailer = http.Header{}
	}
	for k, vs := range hdr {
		b.resp.Trailer[k] = vs
	}
	return nil
}

func (*chunkedBody) Close() error { return nil }
