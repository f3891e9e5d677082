// Package e2e tests sluice end to end: the sluice binary, built once, runs as real processes
// (a decider on the real Postgres and Kafka broker that scripts/test.sh starts, a gateway, and
// simulated engines publishing load reports and KV events to Kafka) on loopback ports, and the
// test speaks to the gateway the way an OpenAI client does.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"
)

// prefixWords is the length of the shared prefixes: each word is one token of the simengine's
// tokenizer, so well over 1024 tokens.
const prefixWords = 1200

// TestEndToEnd runs the stack once and walks through what issue 6 asks of it, one subtest per
// behaviour, in an order where each leaves the stack idle for the next. Subtests do not stop
// the run when one fails, so one report shows every behaviour that is broken.
func TestEndToEnd(t *testing.T) {
	start := time.Now()
	s := startStack(t)
	t.Logf("stack up in %v (decider grpc %s http %s, gateway %s, topics %s %s)", time.Since(start).Round(time.Millisecond),
		s.deciderGRPC, s.deciderHTTP, s.gatewayAddr, s.loadTopic, s.kvTopic)
	f := &flow{s: s, sessions: map[string]string{}}
	for _, step := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"plain", f.plain},
		{"pd", f.pd},
		{"sessions", f.sessionsStick},
		{"prefix", f.prefix},
		{"load", f.load},
		{"decider_sigkill", f.deciderSIGKILL},
		{"kill_and_restart", f.killAndRestart},
		{"leases_drain", f.leasesDrain},
	} {
		t0 := time.Now()
		t.Run(step.name, step.run)
		t.Logf("%s took %v", step.name, time.Since(t0).Round(time.Millisecond))
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// flow carries what one step learns for later ones.
type flow struct {
	s *stack
	// sessions maps each session key of the sessions step to the engine it stuck to.
	sessions map[string]string
	seq      int
}

// coldPrompt returns a prompt that shares no KV block with any other prompt of the run.
func (f *flow) coldPrompt(what string) string {
	f.seq++
	return fmt.Sprintf("cold%d %s %s: tell me something new", f.seq, proctest.RandomSuffix(), what)
}

func longText(tag string, words int) string {
	var b strings.Builder
	for i := range words {
		fmt.Fprintf(&b, "%s%d ", tag, i)
	}
	return b.String()
}

// otherPlain returns the plain engine that is not id.
func otherPlain(id string) string {
	if id == plainA {
		return plainB
	}
	return plainA
}

// coldDefault waits until both plain engines report themselves idle (a report taken while an
// earlier step's request ran would otherwise steer the choice), then returns where the
// decider sends a chat prompt that no engine has cached, with that prompt's token ids.
func (f *flow) coldDefault(t *testing.T) (string, []uint32) {
	t.Helper()
	proctest.Eventually(t, poll, 10*time.Second, "plain engines report idle", func() (bool, string) {
		engs := f.s.api.Engines(t)
		var state []string
		idle := true
		for _, id := range []string{plainA, plainB} {
			l := engs[id].GetLoad()
			idle = idle && l.GetLoadKnown() && l.GetRunning() == 0 && l.GetWaiting() == 0 && l.GetInflight() == 0
			state = append(state, fmt.Sprintf("%s known=%v running=%d waiting=%d inflight=%d", id, l.GetLoadKnown(), l.GetRunning(), l.GetWaiting(), l.GetInflight()))
		}
		return idle, strings.Join(state, "; ")
	})
	ids := f.s.tokenize(t, plainB, f.coldPrompt("probe"))
	d := f.s.api.DryRun(t, modelChat, ids)
	pick := d.GetPick().GetPlain()
	if pick.GetReason() != "no_cache_candidate" {
		t.Fatalf("dry run of a cold prompt = %s, want reason no_cache_candidate; candidates: %s", proctest.PlainPick(d), proctest.Candidates(d))
	}
	return pick.GetEngineId(), ids
}

// 1. A plain chat completion goes through the gateway to a plain simengine and comes back.
func (f *flow) plain(t *testing.T) {
	s := f.s
	before := s.requestCounts(t)
	c := s.chat(t, modelChat, "Hello there, this is a plain request.")
	eng := c.engine()
	if eng != plainA && eng != plainB {
		t.Fatalf("completion id %q names engine %q, want %s or %s", c.ID, eng, plainA, plainB)
	}
	after := s.requestCounts(t)
	for _, id := range []string{plainA, plainB} {
		want := before[id]
		if id == eng {
			want++
		}
		if after[id] != want {
			t.Errorf("%s served %d requests, want %d (the completion came from %s)", id, after[id]-before[id], want-before[id], eng)
		}
	}
	if c.Choices[0].Message.Content == "" || c.Usage.CompletionTokens == 0 || c.Choices[0].FinishReason == "" {
		t.Errorf("completion has no content: %+v", c)
	}
	if lr := s.lastRequest(t, eng); lr.Path != "/v1/chat/completions" || lr.PromptTokens != c.Usage.PromptTokens || lr.BootstrapRoom != nil {
		t.Errorf("%s last request = %+v, want /v1/chat/completions with %d prompt tokens and no bootstrap fields", eng, lr, c.Usage.PromptTokens)
	}
}

// 2. A request for the PD model goes to the prefill and the decode engine with the same
// bootstrap record naming the prefill engine; the client gets decode's SSE stream.
func (f *flow) pd(t *testing.T) {
	s := f.s
	preBefore, decBefore := s.lastRequest(t, prefill).Requests, s.lastRequest(t, decode).Requests
	st := s.chatStream(t, modelPD, "Disaggregated hello: stream me the answer.")
	pre, dec := s.lastRequest(t, prefill), s.lastRequest(t, decode)
	if pre.Requests != preBefore+1 || dec.Requests != decBefore+1 {
		t.Fatalf("requests seen: prefill +%d, decode +%d; want +1 each", pre.Requests-preBefore, dec.Requests-decBefore)
	}
	if pre.BootstrapRoom == nil || dec.BootstrapRoom == nil || *pre.BootstrapRoom != *dec.BootstrapRoom {
		t.Errorf("bootstrap_room: prefill %v, decode %v; want the same room on both", deref(pre.BootstrapRoom), deref(dec.BootstrapRoom))
	}
	wantPort := s.engines[prefill].bootstrapPort
	for _, lr := range []lastRequest{pre, dec} {
		if lr.BootstrapHost != "127.0.0.1" || lr.BootstrapPort == nil || *lr.BootstrapPort != wantPort {
			t.Errorf("%s saw bootstrap %s:%v, want the prefill engine's 127.0.0.1:%d", lr.EngineID, lr.BootstrapHost, deref(lr.BootstrapPort), wantPort)
		}
	}
	if !strings.HasPrefix(st.contentType, "text/event-stream") {
		t.Errorf("Content-Type %q, want text/event-stream", st.contentType)
	}
	var text strings.Builder
	for _, c := range st.chunks {
		if c.engine() != decode {
			t.Errorf("SSE chunk %q comes from %q, want %s", c.ID, c.engine(), decode)
		}
		if len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
		}
	}
	if len(st.chunks) < 2 || text.Len() == 0 || !st.done || st.afterDone != 0 {
		t.Errorf("stream: %d chunks, text %q, [DONE] %v (%d events after it); want token chunks then [DONE] last",
			len(st.chunks), text.String(), st.done, st.afterDone)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return "none"
	}
	return *p
}

// 3. Requests carrying x-session-id stay on the engine their session was bound to.
func (f *flow) sessionsStick(t *testing.T) {
	s := f.s
	for _, session := range []string{"s1", "s2", "s3", "s4"} {
		for turn := range 4 {
			before := s.requestCounts(t)
			c := s.chat(t, modelSession, fmt.Sprintf("session %s turn %d: %s", session, turn, f.coldPrompt("session")), "x-session-id", session)
			eng := c.engine()
			if after := s.requestCounts(t); after[eng] != before[eng]+1 {
				t.Errorf("session %s turn %d: completion names %s but its request count went %d -> %d", session, turn, eng, before[eng], after[eng])
			}
			bound, ok := f.sessions[session]
			if !ok {
				f.sessions[session] = eng
				continue
			}
			if eng != bound {
				t.Errorf("session %s turn %d served by %s, want %s (where its first request went)", session, turn, eng, bound)
			}
		}
	}
	t.Logf("session bindings: %v", f.sessions)
}

// 4. A request sharing a long prefix with an earlier one lands on the engine that served (and
// cached) the earlier one, once that engine's KV events reached the decider through Kafka.
// It is checked for both plain engines, so both KV formats (protobuf and vLLM msgpack) count,
// and at least one of them is not where a cold prompt would go.
func (f *flow) prefix(t *testing.T) {
	s := f.s
	coldTo, _ := f.coldDefault(t)
	t.Logf("a cold prompt would go to %s", coldTo)

	// Through the gateway: the first request is served wherever the decider says.
	p1 := longText("alpha", prefixWords)
	first := s.chat(t, modelChat, p1+"first question about alpha")
	holder := first.engine()
	f.checkPrefixHit(t, holder, p1+"second question about alpha")

	// The other engine: its first request is sent to it directly (the gateway would not
	// choose it for a cold prompt), so its cache and KV events alone must draw the second.
	other := otherPlain(holder)
	p2 := longText("beta", prefixWords)
	seed := chatBody(modelChat, p2+"first question about beta", false, 0)
	resp, err := quick.Post(s.engines[other].url()+"/v1/chat/completions", "application/json", strings.NewReader(string(seed)))
	if err != nil {
		t.Fatalf("seed %s directly: %v", other, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("seed %s directly: %s", other, resp.Status)
	}
	f.checkPrefixHit(t, other, p2+"second question about beta")
}

// checkPrefixHit waits until the decider's KV index (fed only by Kafka) makes holder the
// cache candidate for content, then sends content through the gateway and checks it landed on
// holder and reused its cached prefix.
func (f *flow) checkPrefixHit(t *testing.T, holder, content string) {
	t.Helper()
	s := f.s
	ids := s.tokenize(t, holder, content)
	start := time.Now()
	proctest.Eventually(t, poll, 20*time.Second, "KV events of "+holder+" make it the cache candidate", func() (bool, string) {
		d := s.api.DryRun(t, modelChat, ids)
		p := d.GetPick().GetPlain()
		return p.GetEngineId() == holder && p.GetReason() == "cache_candidate" && proctest.Matched(d, holder) >= 1024,
			proctest.PlainPick(d) + "; " + proctest.Candidates(d)
	})
	t.Logf("%s's KV events reached the decider's index after %v", holder, time.Since(start).Round(time.Millisecond))
	c := s.chat(t, modelChat, content)
	if c.engine() != holder {
		t.Errorf("request sharing a %d-token prefix with %s's cache went to %s", len(ids), holder, c.engine())
	}
	if got := c.Usage.PromptTokensDetails.CachedTokens; got < 1024 {
		t.Errorf("request on %s reused %d cached prompt tokens, want >= 1024 (of %d)", c.engine(), got, c.Usage.PromptTokens)
	}
}

// 5. Load reports change decisions: long streams sent straight to the engine a cold prompt
// would go to (so the decider's own in-flight count knows nothing of them) make it report
// running requests through Kafka, and cold requests and new sessions then go to the other.
func (f *flow) load(t *testing.T) {
	s := f.s
	busy, coldIDs := f.coldDefault(t)
	idle := otherPlain(busy)
	for i := range 5 { // the baseline: with both engines idle, cold prompts go to busy
		if d := s.api.DryRun(t, modelChat, coldIDs); d.GetPick().GetPlain().GetEngineId() != busy {
			t.Fatalf("dry run %d with both engines idle = %s, want %s as the first time; candidates: %s", i, proctest.PlainPick(d), busy, proctest.Candidates(d))
		}
	}
	const streams = 4
	ctx, cancel := context.WithCancel(context.Background())
	var held []<-chan struct{}
	defer func() {
		cancel()
		for _, done := range held {
			<-done
		}
	}()
	for i := range streams {
		held = append(held, holdStream(ctx, t, s.engines[busy], fmt.Sprintf("hold %d: %s", i, f.coldPrompt("long"))))
	}
	start := time.Now()
	proctest.Eventually(t, poll, 15*time.Second, busy+"'s load report (running >= 4) moves cold prompts to "+idle, func() (bool, string) {
		e := s.api.Engines(t)[busy]
		d := s.api.DryRun(t, modelChat, coldIDs)
		return e.GetLoad().GetRunning() >= streams && d.GetPick().GetPlain().GetEngineId() == idle,
			fmt.Sprintf("%s reported running %d; dry run: %s; %s", busy, e.GetLoad().GetRunning(), proctest.PlainPick(d), proctest.Candidates(d))
	})
	t.Logf("%s's load report reached the decider after %v", busy, time.Since(start).Round(time.Millisecond))
	if e := s.api.Engines(t)[busy]; e.GetLoad().GetInflight() != 0 {
		t.Errorf("decider counts %d requests in flight on %s, want 0: the streams bypass the gateway, only load reports tell of them",
			e.GetLoad().GetInflight(), busy)
	}
	for i := range 10 {
		if d := s.api.DryRun(t, modelChat, coldIDs); d.GetPick().GetPlain().GetEngineId() != idle {
			t.Errorf("dry run %d under load = %s, want %s; candidates: %s", i, proctest.PlainPick(d), idle, proctest.Candidates(d))
		}
	}
	for i := range 3 {
		if c := s.chat(t, modelChat, f.coldPrompt("under load")); c.engine() != idle {
			t.Errorf("cold request %d under load went to %s, want %s (%s reports %d running)", i, c.engine(), idle, busy, streams)
		}
	}
	if c := s.chat(t, modelSession, f.coldPrompt("new session"), "x-session-id", "s-new"); c.engine() != idle {
		t.Errorf("a new session under load was bound to %s, want %s", c.engine(), idle)
	}
	for session, bound := range f.sessions {
		if c := s.chat(t, modelSession, f.coldPrompt("bound session"), "x-session-id", session); c.engine() != bound {
			t.Errorf("session %s moved from %s to %s under load", session, bound, c.engine())
		}
	}
	cancel()
	proctest.Eventually(t, poll, 15*time.Second, busy+" reports idle again", func() (bool, string) {
		e := s.api.Engines(t)[busy]
		return e.GetLoad().GetRunning() == 0, fmt.Sprintf("running %d waiting %d", e.GetLoad().GetRunning(), e.GetLoad().GetWaiting())
	})
}

// 6. SIGKILL the engine cold prompts go to: requests keep succeeding (the gateway retries
// once on another engine and reports the failure, which opens the breaker), the probe marks it
// unhealthy, and once restarted on the same port it is a candidate again.
func (f *flow) killAndRestart(t *testing.T) {
	s := f.s
	victim, coldIDs := f.coldDefault(t)
	survivor := otherPlain(victim)
	deciderMetrics, gatewayMetrics := "http://"+s.deciderHTTP+"/metrics", "http://"+s.gatewayAddr+"/metrics"
	openedBefore, _ := metric(t, deciderMetrics, "sluice_decider_breaker_opened_total")
	retriesBefore, _ := metric(t, gatewayMetrics, "sluice_gateway_retries_total")

	s.engines[victim].proc.Kill()
	t.Logf("killed %s (SIGKILL)", victim)
	opened := openedBefore
	for i := 0; i < 20 && opened == openedBefore; i++ {
		if c := s.chat(t, modelChat, f.coldPrompt("after kill")); c.engine() != survivor {
			t.Errorf("request %d after the kill served by %s, want %s", i, c.engine(), survivor)
		}
		opened, _ = metric(t, deciderMetrics, "sluice_decider_breaker_opened_total")
	}
	retries, _ := metric(t, gatewayMetrics, "sluice_gateway_retries_total")
	if opened == openedBefore || retries == retriesBefore {
		t.Errorf("after the kill: breaker openings %v -> %v, gateway retries %v -> %v; want both to grow (dispatch failures reported through Release)",
			openedBefore, opened, retriesBefore, retries)
	}
	proctest.Eventually(t, poll, 15*time.Second, "the probe marks "+victim+" unhealthy", func() (bool, string) {
		e := s.api.Engines(t)[victim]
		return !e.GetHealthy() && strings.Contains(e.GetHealthReason(), "health probe failing"),
			fmt.Sprintf("healthy %v reason %q", e.GetHealthy(), e.GetHealthReason())
	})
	for i := range 5 {
		if d := s.api.DryRun(t, modelChat, coldIDs); d.GetPick().GetPlain().GetEngineId() != survivor {
			t.Errorf("dry run %d with %s dead = %s; candidates: %s", i, victim, proctest.PlainPick(d), proctest.Candidates(d))
		}
		if c := s.chat(t, modelChat, f.coldPrompt("while dead")); c.engine() != survivor {
			t.Errorf("request %d while %s is dead served by %s", i, victim, c.engine())
		}
	}

	s.startEngine(t, s.engines[victim])
	t.Logf("restarted %s on %s", victim, s.engines[victim].url())
	proctest.Eventually(t, poll, 20*time.Second, victim+" healthy again", func() (bool, string) {
		e := s.api.Engines(t)[victim]
		return e.GetHealthy(), fmt.Sprintf("healthy %v reason %q", e.GetHealthy(), e.GetHealthReason())
	})
	// Each round sends a cold chat (cache_aware: the less pressured engine) and the first
	// request of a new session (session_aware: power-of-two, random on a tie); the engine is a
	// candidate again once either lands on it.
	var served []string
	proctest.Eventually(t, poll, 20*time.Second, "a request lands on the restarted "+victim, func() (bool, string) {
		c := s.chat(t, modelChat, f.coldPrompt("after restart"))
		f.seq++
		n := s.chat(t, modelSession, f.coldPrompt("after restart"), "x-session-id", fmt.Sprintf("after-restart-%d", f.seq))
		served = append(served, "chat:"+c.engine(), "session:"+n.engine())
		return c.engine() == victim || n.engine() == victim, fmt.Sprintf("served by %v", served)
	})
	t.Logf("after the restart: %v", served)
}

// 5b. A decider killed with SIGKILL and started again on the same snapshot directory answers
// exactly as before: the same engine and the same matched prefix for every cached prompt of
// the run (restored from its last snapshot plus the Kafka tail), and the gateway serves again.
func (f *flow) deciderSIGKILL(t *testing.T) {
	s := f.s
	var prompts [][]uint32
	for _, holder := range []string{plainA, plainB} {
		content := longText("sigkill-"+holder+"-", prefixWords)
		c := s.chat(t, modelChat, content)
		ids := s.tokenize(t, holder, content)
		proctest.Eventually(t, poll, 20*time.Second, "the warm prompt's blocks are indexed", func() (bool, string) {
			d := s.api.DryRun(t, modelChat, ids)
			return proctest.Matched(d, c.engine()) >= 1024, proctest.Candidates(d)
		})
		prompts = append(prompts, ids)
	}
	answer := func(ids []uint32) string {
		d := s.api.DryRun(t, modelChat, ids)
		return proctest.PlainPick(d) + " matched a=" + fmt.Sprint(proctest.Matched(d, plainA)) + " b=" + fmt.Sprint(proctest.Matched(d, plainB))
	}
	var before []string
	for _, ids := range prompts {
		before = append(before, answer(ids))
	}
	snapsMetric := "http://" + s.deciderHTTP + "/metrics"
	written, _ := metric(t, snapsMetric, "sluice_ingest_snapshots_written_total")
	proctest.Eventually(t, poll, 10*time.Second, "a snapshot written after the prompts were indexed", func() (bool, string) {
		n, _ := metric(t, snapsMetric, "sluice_ingest_snapshots_written_total")
		return n >= written+1, fmt.Sprintf("%v snapshots written", n)
	})
	s.decider.Kill()
	t.Log("killed the decider (SIGKILL)")
	s.startDecider(t)
	var after []string
	proctest.Eventually(t, poll, 20*time.Second, "the restarted decider answers as before", func() (bool, string) {
		after = after[:0]
		for _, ids := range prompts {
			after = append(after, answer(ids))
		}
		return fmt.Sprint(after) == fmt.Sprint(before), fmt.Sprintf("before %v, after %v", before, after)
	})
	t.Logf("answers after the restart: %v", after)
	if log, err := os.ReadFile(s.decider.LogPath); err != nil || !strings.Contains(string(log), "restored snapshot") {
		t.Errorf("the restarted decider's log does not say it restored a snapshot (%v); see %s", err, s.decider.LogPath)
	}
	proctest.Eventually(t, poll, 20*time.Second, "the gateway serves through the restarted decider", func() (bool, string) {
		resp, err := quick.Post("http://"+s.gatewayAddr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"chat","messages":[{"role":"user","content":"after the decider restart"}],"max_tokens":2}`))
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// 7. Every lease of the run was released: the decider holds none and counts nothing in flight.
func (f *flow) leasesDrain(t *testing.T) {
	s := f.s
	deciderMetrics := "http://" + s.deciderHTTP + "/metrics"
	proctest.Eventually(t, poll, 10*time.Second, "leases drain to zero", func() (bool, string) {
		var busy []string
		for id, e := range s.api.Engines(t) {
			if n := e.GetLoad().GetInflight(); n != 0 {
				busy = append(busy, fmt.Sprintf("%s inflight %d", id, n))
			}
		}
		leases, found := metric(t, deciderMetrics, "sluice_decider_leases")
		if !found || leases != 0 {
			busy = append(busy, fmt.Sprintf("sluice_decider_leases %v (exported %v)", leases, found))
		}
		return len(busy) == 0, strings.Join(busy, "; ")
	})
	if expired, _ := metric(t, deciderMetrics, "sluice_decider_leases_expired_total"); expired != 0 {
		t.Errorf("sluice_decider_leases_expired_total = %v, want 0: every lease should have been released, none expired", expired)
	}
}
