package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkDecisionHeaders measures what -decision-headers costs (an explained Decide and the
// headers) against the same gateway setup without it: two gateways on one decider and one
// fake engine, called alternately in one run. Reported: p50 latency of each and the ratio.
func BenchmarkDecisionHeaders(b *testing.B) {
	e1, e2 := newFakeEngine(b, "e1"), newFakeEngine(b, "e2")
	d := startDecider(b, []listEntry{{engine: e1, model: "m", role: "plain"}, {engine: e2, model: "m", role: "plain"}}, "")
	off := startGateway(b, d, nil)
	on := startGateway(b, d, func(c *Config) { c.DecisionHeaders = true })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	body := `{"model":"m","messages":[{"role":"user","content":"What is the capital of France? Answer briefly."}],"max_tokens":16}`
	call := func(g *Server) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, "http://"+g.Addr()+routeChat, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(t0)
	}
	for range 50 {
		call(off)
		call(on)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var offs, ons []time.Duration
	for i := range b.N {
		if i%2 == 0 {
			offs, ons = append(offs, call(off)), append(ons, call(on))
		} else {
			ons, offs = append(ons, call(on)), append(offs, call(off))
		}
	}
	b.StopTimer()
	p0, p1 := percentile(offs, 0.5), percentile(ons, 0.5)
	b.ReportMetric(float64(p0.Microseconds()), "p50_off_us")
	b.ReportMetric(float64(p1.Microseconds()), "p50_on_us")
	b.ReportMetric(float64(p1)/float64(p0), "on/off")
	waitLeases(b, d)
}
