package gateway

import (
	"bufio"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
)

func TestTTFTSLOHeaderReachesDecide(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	rd := startRecordingDecider(t, d)
	g := startGatewayAt(t, rd.addr, nil)
	for _, h := range []string{"250", " 1.5 ", "abc", "", "1e999"} {
		readAll(t, post(t, g, routeCompletions, `{"model":"m","prompt":"x"}`, ttftSLOHeader, h))
	}
	readAll(t, post(t, g, routeCompletions, `{"model":"m","prompt":"x"}`))
	want := []float64{250, 1.5, math.NaN(), -1, math.Inf(1), -1} // -1: unset
	got := rd.requests()
	if len(got) != len(want) {
		t.Fatalf("decider saw %d requests, want %d", len(got), len(want))
	}
	for i, r := range got {
		v, w := r.TtftSloMs, want[i]
		switch {
		case w == -1 && v != nil, w != -1 && v == nil,
			v != nil && math.IsNaN(w) != math.IsNaN(*v),
			v != nil && !math.IsNaN(w) && *v != w:
			t.Errorf("request %d: ttft_slo_ms = %v, want %v (-1: unset)", i, r.TtftSloMs, w)
		}
	}
	waitLeases(t, d)
}

// Over HTTP, end to end: the short bucket's engine holds a streaming request (about 1 s
// predicted), so a 500 ms target goes to the long bucket's idle engine; no target stays short.
// A header that is not a number is a 400 naming the field when ttft_slo is on, ignored when off.
func TestTTFTSLOHeaderOrdersBuckets(t *testing.T) {
	e1, e2 := newFakeEngine(t, "e1"), newFakeEngine(t, "e2")
	next, cancelled := make(chan struct{}), make(chan struct{})
	e1.setHandler(sseEngine(next, cancelled))
	buckets := `buckets:
  - {id: short, limits: {max: 4096}, groups: {plain: {worker_ids: [e1]}}}
  - {id: long, groups: {plain: {worker_ids: [e2]}}}
`
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}, {engine: e2, model: "m", role: "plain"}},
		buckets+"ttft_slo: {enabled: true, typical_request_tokens: 10000, default_prefill_tokens_per_s: 10000}\n")
	g := startGateway(t, d, nil)

	held := post(t, g, routeCompletions, `{"model":"m","stream":true,"prompt":"hold"}`)
	readEvent(t, bufio.NewReader(held.Body))
	engineOf := func(header ...string) string {
		t.Helper()
		e1.setHandler(nil)
		defer e1.setHandler(sseEngine(next, cancelled))
		resp := post(t, g, routeCompletions, `{"model":"m","prompt":"x"}`, header...)
		body := readAll(t, resp)
		var m struct{ Engine string }
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &m) != nil {
			t.Fatalf("POST %v = %d %s", header, resp.StatusCode, body)
		}
		return m.Engine
	}
	if got := engineOf(ttftSLOHeader, "500"); got != "e2" {
		t.Errorf("with %s: 500 the request went to %s, want e2 (the long bucket meets the target)", ttftSLOHeader, got)
	}
	if got := engineOf(); got != "e1" {
		t.Errorf("without a target the request went to %s, want e1 (capacity order)", got)
	}
	for _, h := range []string{"soon", "-1", "0"} {
		resp := post(t, g, routeCompletions, `{"model":"m","prompt":"x"}`, ttftSLOHeader, h)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusBadRequest || errorCode(t, body) != "INVALID_TTFT_SLO" || !strings.Contains(body, "ttft_slo_ms") {
			t.Errorf("with %s: %q = %d %s, want 400 INVALID_TTFT_SLO naming ttft_slo_ms", ttftSLOHeader, h, resp.StatusCode, body)
		}
	}
	close(next)
	readAll(t, held)
	waitLeases(t, d)

	off := startDecider(t, []listEntry{{engine: e2, model: "m", role: "plain"}}, "")
	resp := post(t, startGateway(t, off, nil), routeCompletions, `{"model":"m","prompt":"x"}`, ttftSLOHeader, "soon")
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Errorf("with ttft_slo off, %s: soon = %d %s, want 200", ttftSLOHeader, resp.StatusCode, body)
	}
	waitLeases(t, off)
}
