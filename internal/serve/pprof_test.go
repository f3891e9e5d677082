package serve

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestPprofAddr(t *testing.T) {
	for in, want := range map[string]string{"": "", ":6060": "127.0.0.1:6060", "0.0.0.0:6060": "0.0.0.0:6060", "[::1]:7": "[::1]:7"} {
		got, err := PprofAddr(in)
		if err != nil || got != want {
			t.Errorf("PprofAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := PprofAddr("6060"); err == nil || !strings.Contains(err.Error(), "-pprof-addr") {
		t.Errorf("PprofAddr(6060) error = %v; want one naming -pprof-addr", err)
	}
}

// Off by default; on, a port alone binds loopback and the profiles answer; Close stops it.
func TestPprofServesProfiles(t *testing.T) {
	p, err := StartPprof("", nil)
	if p != nil || err != nil {
		t.Fatalf("StartPprof(\"\") = %v, %v; want nothing started", p, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p, err = StartPprof(":0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Errorf("StartPprof(:0) bound %s; want loopback", p.Addr())
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/profile?seconds=1", "/debug/pprof/cmdline"} {
		resp, err := http.Get("http://" + p.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(b) == 0 {
			t.Errorf("GET %s: %s, %d bytes", path, resp.Status, len(b))
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + p.Addr() + "/debug/pprof/"); err == nil {
		t.Error("pprof still answers after Close")
	}
}
