package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserPage loads the bundle with the suite's configuration.
const browserPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>sluice client in a browser</title>
<script>window.SLUICE_CONFIG = %s;</script>
<script type="module" src="/bundle.js"></script>
</head><body></body></html>`

// browserResult is one check of clients/ts/tests/browser/suite.mjs.
type browserResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// runBrowser bundles clients/ts/tests/browser with esbuild, as a browser application bundles the
// package, serves it on a loopback origin that also proxies the decider's HTTP port (so the
// page's Connect and gRPC-Web calls are same-origin), and runs it in headless Chromium.
func runBrowser(t *testing.T, ctx context.Context, root string, d decider) {
	chromium := os.Getenv("SLUICE_TEST_CHROMIUM") // set by scripts/lib/chromium.sh
	if chromium == "" {
		var err error
		if chromium, err = exec.LookPath("chromium"); err != nil {
			need(t, "chromium is not on PATH", "scripts/test.sh installs it (scripts/lib/chromium.sh: apt-get install chromium)")
		}
	}
	ts := filepath.Join(root, "clients", "ts")
	bundle := filepath.Join(t.TempDir(), "bundle.js")
	run(t, ctx, ts, nil, filepath.Join(ts, "node_modules", ".bin", "esbuild"),
		"tests/browser/entry.mjs", "--bundle", "--format=esm", "--platform=browser", "--log-level=warning", "--outfile="+bundle)

	cfg, err := json.Marshal(map[string]string{"token": decideToken, "viewerToken": viewerToken})
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := url.Parse("http://" + d.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, browserPage, cfg)
	})
	mux.HandleFunc("GET /bundle.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		http.ServeFile(w, r, bundle)
	})
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	mux.Handle("POST /sluice.v1.DeciderService/", fullDuplex(proxy))
	mux.Handle("POST /sluice.v1.AdminService/", fullDuplex(proxy))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	// The page's base URL is its own origin: the suite reads it from location.
	page := srv.URL + "/"

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("headless", true), chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	tctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	start := time.Now()
	if err := chromedp.Do(tctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("open %s in %s: %v", page, chromium, err)
	}
	ua, err := chromedp.Run(tctx, chromedp.Evaluate[string](`navigator.userAgent`))
	if err != nil {
		t.Fatalf("read the browser's user agent: %v", err)
	}
	results, err := chromedp.Run(tctx, chromedp.Poll[[]browserResult](`window.__sluiceResults`, chromedp.WithPollingTimeout(60*time.Second)))
	if err != nil {
		t.Fatalf("run the browser suite in %s: %v", chromium, err)
	}
	t.Logf("%s: %d checks in %v", ua, len(results), time.Since(start).Round(time.Millisecond))
	if len(results) == 0 {
		t.Fatal("the browser suite reported no checks")
	}
	for _, r := range results {
		if r.OK {
			t.Logf("ok   %s", r.Name)
		} else {
			t.Errorf("FAIL %s: %s", r.Name, r.Error)
		}
	}
}

// fullDuplex lets h read the request body after it has started the response. The test proxy needs
// it. httputil.ReverseProxy sends the decider's response headers back as soon as they arrive, while
// its Transport may still be reading the page's request body: after the Content-Length bytes it
// reads once more to check that nothing follows. An HTTP/1 server closes a request body once its
// handler writes the response, so that read fails. The Transport then closes the connection to the
// decider, with the answer half copied. The page saw "UNAVAILABLE: network error", and the proxy
// logged "read error during body copy: use of closed network connection". Under CPU contention
// this happened about once in 25 runs, with the decider's answer complete and no request canceled.
func fullDuplex(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			http.Error(w, "test proxy: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, r)
	})
}
