package gateway

import (
	"bufio"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkGatewayOverhead measures what the gateway adds (facts, Decide over gRPC to a real
// decider, forward, relay, Release) against the same client calling the same fake engine
// directly, interleaved in one run. Reported: p50 added latency of a plain non-streaming
// request, and p99 added time to the first SSE chunk of a streaming one.
func BenchmarkGatewayOverhead(b *testing.B) {
	e1 := newFakeEngine(b, "e1")
	e1.setHandler(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"chunk\":1}\n\n")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "data: {\"chunk\":2}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"}}]}`)
	})
	d := startDecider(b, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	g := startGateway(b, d, nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	direct, via := e1.url(), "http://"+g.Addr()

	plain := `{"model":"m","messages":[{"role":"user","content":"What is the capital of France? Answer briefly."}],"max_tokens":16}`
	stream := `{"model":"m","stream":true,"messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16}`
	call := func(base, body string, ttfb bool) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, base+routeChat, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var d time.Duration
		if ttfb {
			if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
				b.Fatal(err)
			}
			d = time.Since(t0)
			_, _ = io.Copy(io.Discard, resp.Body)
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			d = time.Since(t0)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return d
	}
	measure := func(b *testing.B, body string, ttfb bool, pct float64, unit string) {
		for range 50 { // warm connections on both paths
			call(direct, body, ttfb)
			call(via, body, ttfb)
		}
		b.ReportAllocs()
		b.ResetTimer()
		var ds, gs []time.Duration
		for range b.N {
			ds = append(ds, call(direct, body, ttfb))
			gs = append(gs, call(via, body, ttfb))
		}
		b.StopTimer()
		pd, pg := percentile(ds, pct), percentile(gs, pct)
		b.ReportMetric(float64(pd.Microseconds()), unit+"_direct_us")
		b.ReportMetric(float64(pg.Microseconds()), unit+"_gateway_us")
		b.ReportMetric(float64((pg - pd).Microseconds()), unit+"_added_us")
	}
	b.Run("plain", func(b *testing.B) { measure(b, plain, false, 0.50, "p50") })
	b.Run("stream_ttfb", func(b *testing.B) { measure(b, stream, true, 0.99, "p99_ttfb") })
	waitLeases(b, d)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}
