package serve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := Listen("test-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// A drain fails readiness first, closes every listener at once, waits for the first server's
// in-flight request before draining the second, and Run returns nil.
func TestRunDrainsInOrder(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var events []string
	note := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	slow := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(started)
		<-release
		note("slow request done")
		_, _ = w.Write([]byte("ok"))
	})}
	other := &http.Server{Handler: http.NotFoundHandler()}
	slowLis, otherLis := listen(t), listen(t)
	second := HTTP(other, otherLis)
	drain := second.drain
	second.drain = func(ctx context.Context) error {
		note("other drains")
		return drain(ctx)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ShutdownTimeout: 5 * time.Second, OnServing: func() { note("serving") }, OnDrain: func() { note("drain") }},
			HTTP(slow, slowLis), second)
	}()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + slowLis.Addr().String())
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-started
	cancel()
	// Both listeners close at once, the second too although it drains last.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", otherLis.Addr().String(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the second listener still accepts after the drain started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if b := <-got; b != "ok" {
		t.Errorf("in-flight request = %q, want it to finish with ok", b)
	}
	want := "serving, drain, slow request done, other drains"
	if s := strings.Join(events, ", "); s != want {
		t.Errorf("events = %s, want %s", s, want)
	}
}

// A request still running at the deadline is cut, and Run returns nil within the deadline.
func TestRunCutsAtTheDeadline(t *testing.T) {
	started := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	})}
	lis := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Options{ShutdownTimeout: 200 * time.Millisecond}, HTTP(srv, lis)) }()
	go func() {
		if resp, err := http.Get("http://" + lis.Addr().String()); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil after cutting at the deadline", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Run took %v after cancel, want about the 200ms deadline", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the deadline")
	}
}

type failingListener struct{ net.Listener }

func (failingListener) Accept() (net.Conn, error) { return nil, errors.New("accept broke") }

// A listener that fails ends Run with the error, naming the server, after draining the others.
func TestRunReturnsAServeError(t *testing.T) {
	lis := listen(t)
	drained := false
	err := Run(context.Background(), Options{ShutdownTimeout: time.Second, OnDrain: func() { drained = true }},
		Accept("bootstrap listener", failingListener{lis}, func(c net.Conn) { c.Close() }))
	if err == nil || !strings.Contains(err.Error(), "bootstrap listener: accept broke") || !drained {
		t.Errorf("Run = %v (drained %v), want the accept error naming the server, after a drain", err, drained)
	}
}

func TestListenNamesTheFlag(t *testing.T) {
	lis := listen(t)
	defer lis.Close()
	_, err := Listen("grpc-addr", lis.Addr().String())
	if err == nil || !strings.HasPrefix(err.Error(), "-grpc-addr "+lis.Addr().String()+": ") {
		t.Errorf("Listen on a used address = %v, want an error naming -grpc-addr", err)
	}
}
