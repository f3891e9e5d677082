package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Every long-running command takes -pprof-addr: a simulated engine run through the CLI serves
// its profiles on the address given, and nothing there without the flag.
func TestPprofFlag(t *testing.T) {
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	if err := run(context.Background(), []string{"simengine", "-pprof-addr", "6060"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-pprof-addr") {
		t.Fatalf("-pprof-addr 6060: error %v; want one naming the flag", err)
	}
	for _, on := range []bool{true, false} {
		addr, prof := free(), free()
		args := []string{"simengine", "-addr", addr, "-log-level", "error"}
		if on {
			args = append(args, "-pprof-addr", ":"+strings.Split(prof, ":")[1])
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- run(ctx, args, io.Discard) }()
		var status string
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if resp, err := http.Get("http://" + addr + "/health"); err == nil {
				resp.Body.Close()
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		resp, err := http.Get("http://" + prof + "/debug/pprof/goroutine?debug=1")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			status = fmt.Sprintf("%s %q", resp.Status, b)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("simengine: %v", err)
		}
		if on && (err != nil || !strings.Contains(status, "goroutine profile")) {
			t.Errorf("with -pprof-addr: GET goroutine = %s, %v; want the goroutine profile", status, err)
		}
		if !on && err == nil {
			t.Errorf("without -pprof-addr something answered at %s: %s", prof, status)
		}
	}
}
