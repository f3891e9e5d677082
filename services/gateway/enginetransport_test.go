package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// engineServer is a real HTTP server that counts the connections it accepted.
func engineServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func postEcho(t *testing.T, c *http.Client, url, body string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "r1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return string(b)
}

func echoHandler(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s %s %s", r.Method, r.URL.RequestURI(), r.Header.Get("X-Request-Id"), b)
}

func TestH1TransportReusesOneConnection(t *testing.T) {
	srv, conns := engineServer(t, echoHandler)
	tr := newH1Transport(newEngineTransport())
	c := &http.Client{Transport: tr}
	for i := range 20 {
		body := fmt.Sprintf(`{"n":%d}`, i)
		if got, want := postEcho(t, c, srv.URL+"/v1/chat/completions?x=1", body), "POST /v1/chat/completions?x=1 r1 "+body; got != want {
			t.Fatalf("answer %q, want %q", got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 20 sequential requests, want 1 (kept alive)", n)
	}
	tr.CloseIdleConnections()
}

func TestH1TransportEngineClosesConnections(t *testing.T) {
	// Connection: close on every answer, then an engine closing idle connections between
	// requests: every request must still succeed, on a fresh connection.
	srv, conns := engineServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		echoHandler(w, r)
	})
	c := &http.Client{Transport: newH1Transport(newEngineTransport())}
	for range 5 {
		if got := postEcho(t, c, srv.URL+"/x", "a"); got != "POST /x r1 a" {
			t.Fatalf("answer %q", got)
		}
	}
	if n := conns.Load(); n != 5 {
		t.Fatalf("%d connections, want 5 (the engine closed each)", n)
	}

	idle := httptest.NewUnstartedServer(http.HandlerFunc(echoHandler))
	idle.Config.IdleTimeout = 20 * time.Millisecond
	idle.Start()
	defer idle.Close()
	for range 4 {
		if got := postEcho(t, c, idle.URL+"/y", "b"); got != "POST /y r1 b" {
			t.Fatalf("answer %q", got)
		}
		time.Sleep(80 * time.Millisecond) // the engine closes the idle connection meanwhile
	}
}

func TestH1TransportStreamsChunks(t *testing.T) {
	release := make(chan struct{})
	srv, conns := engineServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	c := &http.Client{Transport: newH1Transport(newEngineTransport())}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/s", bytes.NewReader([]byte("{}")))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf)
	if err != nil || string(buf[:n]) != "data: 1\n\n" {
		t.Fatalf("first chunk %q, %v: want it before the stream ends", buf[:n], err)
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "data: [DONE]\n\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	resp.Body.Close()
	if got := postEcho(t, c, srv.URL+"/s", "{}"); got != "data: 1\n\n" {
		// the handler waits on a closed channel now: both chunks
		if got != "data: 1\n\ndata: [DONE]\n\n" {
			t.Fatalf("second stream %q", got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1 (a stream read to its end is reused)", n)
	}
}

func TestH1TransportCancelAndEarlyClose(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	srv, conns := engineServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			fmt.Fprint(w, "part")
			w.(http.Flusher).Flush()
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		echoHandler(w, r)
	})
	c := &http.Client{Transport: newH1Transport(newEngineTransport())}

	// A request cancelled mid-body unblocks its reader.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/hang", bytes.NewReader([]byte("{}")))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("reading a cancelled request's body succeeded")
	}
	resp.Body.Close()

	// A body closed before its end does not leave its connection in the pool.
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/hang", bytes.NewReader([]byte("{}")))
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := postEcho(t, c, srv.URL+"/ok", "z"); got != "POST /ok r1 z" {
		t.Fatalf("answer after an early close %q", got)
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (neither the cancelled nor the early-closed one reused)", n)
	}

	// A context already done fails before dialing.
	done, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	req, _ = http.NewRequestWithContext(done, http.MethodPost, srv.URL+"/ok", bytes.NewReader([]byte("{}")))
	if _, err := c.Do(req); err == nil {
		t.Fatal("a request with a done context succeeded")
	}

	// An engine that is down is an error, not a hang.
	dead := httptest.NewServer(http.HandlerFunc(echoHandler))
	url := dead.URL
	dead.Close()
	req, _ = http.NewRequest(http.MethodPost, url+"/x", bytes.NewReader([]byte("{}")))
	if _, err := c.Do(req); err == nil {
		t.Fatal("a request to a closed port succeeded")
	}
}

func TestH1TransportBodySizes(t *testing.T) {
	// Bodies around the socket buffer (a first write that takes only part of the request, the
	// rest written after) and above maxInlineBody (streamed through a bufio.Writer), each
	// echoed back whole on one kept-alive connection.
	srv, conns := engineServer(t, echoHandler)
	c := &http.Client{Transport: newH1Transport(newEngineTransport())}
	for _, n := range []int{1, 4 << 10, 100 << 10, maxInlineBody, maxInlineBody + 1, 1 << 20} {
		body := bytes.Repeat([]byte("abcdefghij"), n/10+1)[:n]
		if got, want := postEcho(t, c, srv.URL+"/b", string(body)), "POST /b r1 "+string(body); got != want {
			t.Fatalf("%d B body: answer of %d B, want %d B", n, len(got), len(want))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestH1TransportCancelBeforeTheAnswer(t *testing.T) {
	// The engine takes the request and never answers: cancelling the request must end the
	// wait for the answer's header, on a fresh and on a pooled connection.
	hang := make(chan struct{})
	srv, _ := engineServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/silent" {
			_, _ = io.ReadAll(r.Body)
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		echoHandler(w, r)
	})
	defer close(hang)
	c := &http.Client{Transport: newH1Transport(newEngineTransport())}
	for i := range 2 {
		if i == 1 && postEcho(t, c, srv.URL+"/ok", "z") != "POST /ok r1 z" { // pools a connection
			t.Fatal("echo failed")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/silent", bytes.NewReader([]byte("{}")))
		t0 := time.Now()
		_, err := c.Do(req)
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: error %v, want the context's deadline", i, err)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Fatalf("round %d: the cancelled request took %v", i, d)
		}
	}
}
