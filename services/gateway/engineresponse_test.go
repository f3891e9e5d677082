package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// readBoth reads raw with readResponse and with http.ReadResponse, each answer's body to its
// end, and reports what differs: the fields, the body, the error, the bytes left after it.
func readBoth(t *testing.T, raw string, method string) (fast bool) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://engine/x", nil)
	type got struct {
		resp      *http.Response
		body      string
		err, berr string
		rest      string
	}
	read := func(f func(*bufio.Reader, *http.Request) (*http.Response, error)) got {
		br := bufio.NewReaderSize(strings.NewReader(raw), 4<<10)
		resp, err := f(br, req)
		var g got
		if err != nil {
			g.err = err.Error()
			return g
		}
		b, berr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if berr != nil {
			g.berr = berr.Error()
		}
		rest, _ := io.ReadAll(br)
		g.resp, g.body, g.rest = resp, string(b), string(rest)
		return g
	}
	a, b := read(readResponse), read(http.ReadResponse)
	if a.err != b.err || a.berr != b.berr || a.body != b.body || a.rest != b.rest {
		t.Fatalf("%q: readResponse err %q body %q (%q) rest %q; net/http err %q body %q (%q) rest %q",
			raw, a.err, a.body, a.berr, a.rest, b.err, b.body, b.berr, b.rest)
	}
	if a.resp == nil {
		return false
	}
	ra, rb := a.resp, b.resp
	if ra.Status != rb.Status || ra.StatusCode != rb.StatusCode || ra.Proto != rb.Proto || ra.ProtoMajor != rb.ProtoMajor ||
		ra.ProtoMinor != rb.ProtoMinor || ra.ContentLength != rb.ContentLength || ra.Close != rb.Close ||
		!reflect.DeepEqual(ra.Header, rb.Header) || !reflect.DeepEqual(ra.TransferEncoding, rb.TransferEncoding) ||
		!reflect.DeepEqual(ra.Trailer, rb.Trailer) || (ra.Body == http.NoBody) != (rb.Body == http.NoBody) {
		t.Fatalf("%q:\nreadResponse %+v\nnet/http     %+v", raw, ra, rb)
	}
	_, isLen := ra.Body.(*lengthBody)
	_, isChunked := ra.Body.(*chunkedBody)
	return isLen || isChunked || ra.Body == http.NoBody && rb.ContentLength == 0 && !strings.Contains(raw, "\r\nConnection")
}

var engineAnswers = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nDate: Tue, 01 Dec 2026 19:00:00 GMT\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5\r\nx-request-id: r1\r\n\r\nhello NEXT",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
	"HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno!",
	"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\noops",
	"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n0\r\n\r\nNEXT",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Tail: 1\r\n\r\nNEXT",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
	"HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3 \r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nTrailer: X-Tail\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Tail: 1\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\r\nto the end",
	"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 204 No Content\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 2000 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 20x OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 600 Odd\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nBad Name: a\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nX-Ctl: a\x01b\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nX-Tab: \ta\tb \r\nX-Empty:\r\nX-Multi: 1\r\nx-multi: 2\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nX-Utf8: caf\xc3\xa9\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nNoColon\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\n\nx",
	"",
	"garbage\r\n\r\n",
}

func TestReadResponseMatchesNetHTTP(t *testing.T) {
	fast := 0
	for _, raw := range engineAnswers {
		if readBoth(t, raw, http.MethodPost) {
			fast++
		}
		readBoth(t, raw, http.MethodHead)
	}
	t.Logf("%d of %d answers took the in-place path", fast, len(engineAnswers))
	if fast < 10 {
		t.Fatalf("only %d answers took the in-place path", fast)
	}
	// A header larger than the reader's buffer goes to net/http.
	big := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\nContent-Length: 1\r\n\r\nx"
	readBoth(t, big, http.MethodPost)
}

func FuzzReadResponse(f *testing.F) {
	for _, raw := range engineAnswers {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		readBoth(t, raw, http.MethodPost)
	})
}

func BenchmarkReadResponse(b *testing.B) {
	raw := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Tue, 01 Dec 2026 19:00:00 GMT\r\nContent-Length: 2\r\n\r\n{}")
	req, _ := http.NewRequest(http.MethodPost, "http://engine/x", nil)
	for _, impl := range []struct {
		name string
		f    func(*bufio.Reader, *http.Request) (*http.Response, error)
	}{{"gateway", readResponse}, {"net-http", http.ReadResponse}} {
		b.Run(impl.name, func(b *testing.B) {
			r := bytes.NewReader(raw)
			br := bufio.NewReader(r)
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(raw)
				br.Reset(r)
				resp, err := impl.f(br, req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
			}
		})
	}
}
