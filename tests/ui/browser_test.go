// Package ui tests the decider's web console (/ui/, services/deciderserver/console) in a real
// headless Chromium driven over the DevTools protocol (chromedp), against the dev stack and
// against deciders with fleets of 64 and 1,000 engines. scripts/test.sh installs Chromium
// (scripts/lib/chromium.sh) and names it in SLUICE_TEST_CHROMIUM; screenshots of every page
// go to SLUICE_TEST_UI_ARTIFACTS, which the script keeps and prints.
package ui

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/testenv"
)

// chromiumPath is the browser to drive: SLUICE_TEST_CHROMIUM (scripts/test.sh sets it), or
// chromium on PATH. Without one the test fails, as scripts/test.sh always provides it; only a
// quick unit run outside CI (SLUICE_TEST_NO_SERVICES=1) skips.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_TEST_NO_SERVICES") == "1" && !testenv.InCI() {
		t.Skip("no Chromium (SLUICE_TEST_CHROMIUM unset, none on PATH; SLUICE_TEST_NO_SERVICES=1)")
	}
	t.Fatal("Chromium is required but SLUICE_TEST_CHROMIUM is unset and none is on PATH: run the tests through scripts/test.sh, which installs it (scripts/lib/chromium.sh)")
	return ""
}

// artifactsDir is where screenshots and figures go: SLUICE_TEST_UI_ARTIFACTS, or a directory
// under the system temp dir; it is kept after the test.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SLUICE_TEST_UI_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "sluice-ui-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser collects the console errors of one headless Chromium tab; the tab is the chromedp
// context newBrowser returns, passed to each helper.
type browser struct {
	t *testing.T

	mu     sync.Mutex
	errors []string
}

// newBrowser starts Chromium with one tab, stopped when the test ends.
func newBrowser(t *testing.T) (context.Context, *browser) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // tests run as root in CI containers
		chromedp.DisableGPU,
		chromedp.WindowSize(1440, 1000),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("no-proxy-server", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{t: t}
	listen := func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, fmt.Sprint(a.Value)+a.Description)
				}
				b.addError("console." + string(e.Type) + ": " + strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			b.addError("exception: " + msg)
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError {
				b.addError("log (" + string(e.Entry.Source) + "): " + e.Entry.Text + " " + e.Entry.URL)
			}
		}
	}
	if err := chromedp.Listen(ctx, listen); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start Chromium: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return ctx, b
}

func (b *browser) addError(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, s)
}

// takeErrors returns the console errors since the last call.
func (b *browser) takeErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.errors
	b.errors = nil
	return out
}

// noErrors fails the test if the page logged errors since the last check.
func (b *browser) noErrors(where string) {
	b.t.Helper()
	if errs := b.takeErrors(); len(errs) > 0 {
		b.t.Errorf("%s: the page logged errors:\n  %s", where, strings.Join(errs, "\n  "))
	}
}

// run runs actions with a deadline, failing the test with what was being done.
func (b *browser) run(tab context.Context, what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(tab, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail(tab, what, err)
	}
}

// value runs one action with a value, failing the test on error.
func value[T any](tab context.Context, b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.fail(tab, what, err)
	}
	return v
}

func (b *browser) fail(tab context.Context, what string, err error) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(tab, 5*time.Second)
	defer cancel()
	body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	b.t.Fatalf("%s: %v\npage text:\n%s\nconsole errors: %v", what, err, clip(body, 3000), b.takeErrors())
}

// waitFor waits until the CSS selector matches a node (rendered, not necessarily visible).
func waitFor(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitReady(chromedp.CSS(sel)) }

// poll waits until the JavaScript expression is truthy.
func poll(expr string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))(ctx, t)
		return chromedp.Void{}, err
	}
}

// eval runs JavaScript for its effect.
func eval(expr string) chromedp.Action[chromedp.Void] { return chromedp.Evaluate[chromedp.Void](expr) }

// click clicks the element the CSS selector matches.
func click(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }

// setValue sets an input's value.
func setValue(sel, v string) chromedp.Action[chromedp.Void] {
	return chromedp.SetValue(chromedp.CSS(sel), v)
}

// text returns the visible text of the element the CSS selector matches.
func (b *browser) text(tab context.Context, sel string) string {
	return value(tab, b, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// screenshot saves the whole page as name.png in the artifacts directory.
func (b *browser) screenshot(tab context.Context, name string) {
	b.t.Helper()
	png := value(tab, b, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(artifactsDir(b.t), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d KB)", path, len(png)/1024)
}

// count returns how many nodes match sel.
func (b *browser) count(tab context.Context, sel string) int {
	return value(tab, b, "count "+sel, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// pageFigures is what one page load cost: first render (ms after navigation start, when the
// page's data is drawn) and bytes transferred (document, assets and the page's API calls).
type pageFigures struct {
	Render float64 `json:"render"`
	// Ready is when the document and its script were loaded (DOMContentLoaded); API the time
	// spent in the page's data requests (their summed durations).
	Ready     float64 `json:"ready"`
	API       float64 `json:"api"`
	Transfer  float64 `json:"transfer"`
	Encoded   float64 `json:"encoded"`
	Resources float64 `json:"resources"`
}

// loadPage opens base?load=n#/page, a fresh document (the query makes it one) in the same
// origin as the last, and measures it.
func (b *browser) loadPage(tab context.Context, base, page string, n int) pageFigures {
	b.t.Helper()
	b.run(tab, "load "+page, 30*time.Second,
		chromedp.Navigate(fmt.Sprintf("%s?load=%d#/%s", base, n, page)),
		waitFor(fmt.Sprintf(`body[data-rendered=%q]`, page)))
	return value(tab, b, "figures of "+page, chromedp.Evaluate[pageFigures](fmt.Sprintf(`(() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource');
  const sum = (k) => (nav ? nav[k] : 0) + res.reduce((s, r) => s + r[k], 0);
  const api = res.filter((r) => /\/(ui\/api|v1)\//.test(r.name) && r.responseEnd > 0).reduce((s, r) => s + r.duration, 0);
  return {render: window.__sluiceConsole.firstRender[%q], ready: nav ? nav.domContentLoadedEventEnd : 0, api,
    transfer: sum('transferSize'), encoded: sum('encodedBodySize'), resources: res.length + 1};
})()`, page)))
}
