package proctest

import (
	"net/http"
	"testing"
	"time"
)

// WaitHTTP polls url with client until it answers 200, failing the test after timeout, or
// early if p exits (its log's tail is in the message).
func WaitHTTP(t testing.TB, client *http.Client, p *Process, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if !p.Running() {
			t.Fatalf("%s exited during start-up (%v); see its log (%s) below", p.Name, p.waitErr, p.LogPath)
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within %v: GET %s: %s", p.Name, timeout, url, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Eventually polls cond every poll until it holds, failing after timeout with cond's last
// description of what it saw. The timeout is a deadline for a slow machine, not a measure.
func Eventually(t testing.TB, poll, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v; last seen: %s", what, timeout, state)
		}
		time.Sleep(poll)
	}
}
