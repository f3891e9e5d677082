package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// h1Transport is the gateway's RoundTripper to engines. For the common request — plain http://,
// no proxy, a body of known length — it runs the HTTP/1.1 exchange on the calling goroutine over
// a pooled keep-alive connection: the request is written and the answer's header read in place,
// and the body is read by whoever reads resp.Body. net/http's Transport instead hands every
// request to two goroutines per connection (a write loop and a read loop), two wake-ups per
// request that a profile of the gateway under load showed at about a fifth of its CPU. Every
// other request (https, a proxy from the environment, a body of unknown length, a header value
// net/http would refuse) goes to the fallback net/http Transport unchanged.
//
// A connection returns to the pool only after its answer's body was read to the end and
// nothing cancelled the request; a body closed early, a failed exchange or "Connection: close"
// closes it. Before a pooled connection is reused, a non-blocking peek checks that the engine
// has not closed it meanwhile (net/http learns that from its read loop), so a POST is never
// written to a connection already known dead; a POST is never retried (it may have run). The
// peek, the request's one write and the wait for the answer are one pass through the runtime's
// poller (connPeeker.sendWait), which saves the read that would otherwise fail with EAGAIN.
type h1Transport struct {
	fallback    *http.Transport
	dialer      net.Dialer
	maxIdle     int           // idle connections kept per host
	idleTimeout time.Duration // an idle connection older than this is closed, not reused

	mu     sync.Mutex
	idle   map[string][]*h1Conn // by host:port, most recently used last
	closed bool
}

type h1Conn struct {
	c      net.Conn
	peek   *connPeeker
	br     *bufio.Reader
	bw     *bufio.Writer // made for a body too large for wbuf
	wbuf   []byte        // the request as written, kept for the next one
	reused bool          // it came from the pool: peek before writing
	idleAt time.Time
}

// maxInlineBody is the largest body sent from the connection's own buffer in the request's
// one write; a larger one is streamed through a bufio.Writer.
const maxInlineBody = 256 << 10

func newH1Transport(fallback *http.Transport) *h1Transport {
	return &h1Transport{
		fallback:    fallback,
		dialer:      net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		maxIdle:     fallback.MaxIdleConnsPerHost,
		idleTimeout: fallback.IdleConnTimeout,
		idle:        map[string][]*h1Conn{},
	}
}

// direct reports whether req takes the in-place path.
func (t *h1Transport) direct(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.User != nil || req.Close || req.Body == nil && req.ContentLength != 0 ||
		req.Body != nil && req.ContentLength <= 0 || len(req.TransferEncoding) > 0 || req.Header.Get("Expect") != "" {
		return false
	}
	if t.fallback.Proxy != nil {
		if u, err := t.fallback.Proxy(req); err != nil || u != nil {
			return false
		}
	}
	for k, vs := range req.Header {
		if !validHeaderName(k) {
			return false
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				return false
			}
		}
	}
	return true
}

func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.direct(req) {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeReqBody(req)
		return nil, err
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	inline := req.ContentLength <= maxInlineBody
	var msg []byte
	var pc *h1Conn
	var stop func() bool
	fail := func(err error) (*http.Response, error) {
		stop()
		pc.c.Close()
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		}
		return nil, err
	}
	for {
		if pc = t.get(addr); pc == nil {
			c, err := t.dialer.DialContext(ctx, "tcp", addr)
			if err != nil {
				closeReqBody(req)
				return nil, err
			}
			pc = &h1Conn{c: c, peek: newConnPeeker(c), br: bufio.NewReaderSize(c, 4<<10)}
		}
		if inline && msg == nil {
			var err error
			if msg, err = appendRequest(pc.wbuf[:0], req); err != nil {
				closeReqBody(req)
				pc.c.Close()
				return nil, err
			}
			closeReqBody(req)
		}
		// A cancelled request unblocks whatever read or write is in progress on the
		// connection, which is then closed instead of pooled.
		cpc := pc
		stop = context.AfterFunc(ctx, func() { _ = cpc.c.SetDeadline(time.Unix(1, 0)) })
		if !inline {
			if pc.reused && !pc.peek.connAlive() {
				stop()
				pc.c.Close()
				continue
			}
			if pc.bw == nil {
				pc.bw = bufio.NewWriterSize(pc.c, 4<<10)
			}
			err := writeRequest(pc.bw, req)
			closeReqBody(req)
			if err != nil {
				return fail(err)
			}
			break
		}
		// The peek (for a pooled connection), the write and the wait for the answer in one
		// pass through the poller (sendWait); whatever one write did not take is written here.
		sent, alive, err := pc.peek.sendWait(msg, pc.reused)
		if !alive {
			stop()
			pc.c.Close()
			continue // nothing was written: another connection may take the request
		}
		if err == nil && sent < len(msg) {
			_, err = pc.c.Write(msg[sent:])
		}
		if cap(msg) <= 64<<10 {
			pc.wbuf = msg[:0]
		} else {
			pc.wbuf = nil
		}
		if err != nil {
			return fail(err)
		}
		break
	}
	var resp *http.Response
	for {
		var err error
		if resp, err = readResponse(pc.br, req); err != nil {
			return fail(err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		resp.Body.Close() // an informational 1xx: the real answer follows
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return fail(errors.New("engine switched protocols"))
	}
	resp.Body = &h1Body{rc: resp.Body, t: t, pc: pc, addr: addr, stop: stop, reuse: !resp.Close, eof: resp.Body == http.NoBody}
	return resp, nil
}

// writeRequest writes req's request line, headers and body, then flushes once. A bufio.Writer's
// error sticks, so the Flush at the end reports a failed write of any piece.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	_, _ = bw.WriteString(req.Method)
	_ = bw.WriteByte(' ')
	_, _ = bw.WriteString(req.URL.RequestURI())
	_, _ = bw.WriteString(" HTTP/1.1\r\nHost: ")
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	_, _ = bw.WriteString(host)
	_, _ = bw.WriteString("\r\n")
	if _, ok := req.Header["User-Agent"]; !ok {
		_, _ = bw.WriteString("User-Agent: Go-http-client/1.1\r\n")
	}
	for k, vs := range req.Header {
		if k == "Host" || k == "Content-Length" || k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vs {
			_, _ = bw.WriteString(k)
			_, _ = bw.WriteString(": ")
			_, _ = bw.WriteString(v)
			_, _ = bw.WriteString("\r\n")
		}
	}
	if req.Body != nil {
		_, _ = bw.WriteString("Content-Length: ")
		var num [20]byte
		_, _ = bw.Write(strconv.AppendInt(num[:0], req.ContentLength, 10))
		_, _ = bw.WriteString("\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	if req.Body != nil {
		n, err := io.Copy(bw, io.LimitReader(req.Body, req.ContentLength))
		if err != nil {
			return err
		}
		if n != req.ContentLength {
			return errors.New("request body shorter than its Content-Length")
		}
	}
	return bw.Flush()
}

// appendRequest appends req as writeRequest writes it (request line, headers, body) to dst.
func appendRequest(dst []byte, req *http.Request) ([]byte, error) {
	dst = append(append(dst, req.Method...), ' ')
	dst = append(append(dst, req.URL.RequestURI()...), " HTTP/1.1\r\nHost: "...)
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	dst = append(append(dst, host...), "\r\n"...)
	if _, ok := req.Header["User-Agent"]; !ok {
		dst = append(dst, "User-Agent: Go-http-client/1.1\r\n"...)
	}
	for k, vs := range req.Header {
		if k == "Host" || k == "Content-Length" || k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vs {
			dst = append(append(append(append(dst, k...), ": "...), v...), "\r\n"...)
		}
	}
	if req.Body != nil {
		dst = append(dst, "Content-Length: "...)
		dst = append(strconv.AppendInt(dst, req.ContentLength, 10), "\r\n"...)
	}
	dst = append(dst, "\r\n"...)
	if req.Body != nil {
		n := len(dst)
		dst = slices.Grow(dst, int(req.ContentLength)+1)[:n+int(req.ContentLength)]
		if _, err := io.ReadFull(req.Body, dst[n:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return nil, errors.New("request body shorter than its Content-Length")
			}
			return nil, err
		}
	}
	return dst, nil
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// get takes the most recently used live idle connection to addr, closing stale ones.
func (t *h1Transport) get(addr string) *h1Conn {
	for {
		t.mu.Lock()
		conns := t.idle[addr]
		if len(conns) == 0 {
			t.mu.Unlock()
			return nil
		}
		pc := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		t.idle[addr] = conns[:len(conns)-1]
		t.mu.Unlock()
		if time.Since(pc.idleAt) < t.idleTimeout && pc.br.Buffered() == 0 {
			pc.reused = true
			return pc // the caller peeks that the engine has not closed it
		}
		pc.c.Close()
	}
}

// put pools a connection whose exchange ended cleanly.
func (t *h1Transport) put(addr string, pc *h1Conn) {
	pc.idleAt = time.Now()
	t.mu.Lock()
	if t.closed || len(t.idle[addr]) >= t.maxIdle {
		t.mu.Unlock()
		pc.c.Close()
		return
	}
	t.idle[addr] = append(t.idle[addr], pc)
	t.mu.Unlock()
}

// CloseIdleConnections closes the pooled connections of both paths.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*h1Conn{}
	t.mu.Unlock()
	for _, conns := range idle {
		for _, pc := range conns {
			pc.c.Close()
		}
	}
	t.fallback.CloseIdleConnections()
}

// h1Body is an answer's body; the connection goes back to the pool once it was read to the end.
type h1Body struct {
	rc    io.ReadCloser
	t     *h1Transport
	pc    *h1Conn
	addr  string
	stop  func() bool
	reuse bool

	mu   sync.Mutex
	eof  bool
	done bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.mu.Lock()
		b.eof = true
		b.mu.Unlock()
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return nil
	}
	b.done = true
	eof := b.eof
	b.mu.Unlock()
	// stop reports false when the request's context already fired: the connection's deadline
	// may be poisoned, so it is not reused.
	if b.stop() && eof && b.reuse {
		err := b.rc.Close()
		b.t.put(b.addr, b.pc)
		return err
	}
	// Close the connection first: net/http's body would otherwise drain the rest of the
	// answer, which for a stream may never end.
	b.pc.c.Close()
	b.rc.Close()
	return nil
}

// validHeaderName and validHeaderValue keep the in-place path to what net/http would send as
// is (token names; no CR, LF or NUL in values).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' || c == 0 {
			return false
		}
	}
	return true
}
