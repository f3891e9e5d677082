// Package vllm tests sluice against real vLLM engines: two vLLM CPU servers (from the venv
// scripts/lib/vllm.sh installs, serving the tiny random-weight model that
// scripts/vllm/make_tiny_model.py builds) behind the real gateway and decider, with enginelink
// carrying their ZMQ KV events (on one bound socket) and their /metrics load into the real
// Kafka broker. The tests run in scripts/test.sh's vLLM phase (see testenv.VLLM).
package vllm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// prefixWords is the length of the shared prefixes: each "alphaN" word is two tokens of the
// tiny tokenizer, so a prefix is six to seven 32-token blocks and a prompt stays well under
// the 512-token model length.
const prefixWords = 110

// indexTimeout bounds how long KV events take from an engine to the decider's index (ZMQ,
// enginelink, Kafka, ingest): well under a second normally.
const indexTimeout = 30 * time.Second

// TestVLLMEndToEnd runs the stack once and walks through the behaviours, one subtest per
// behaviour, each leaving the engines idle for the next. Subtests do not stop the run when
// one fails, so one report shows everything that is broken; the kill comes last.
func TestVLLMEndToEnd(t *testing.T) {
	env := testenv.VLLM(t)
	start := time.Now()
	s := startStack(t, env)
	t.Logf("stack up in %v (decider grpc %s http %s, gateway %s, enginelink %s binding %s, topics %s %s)",
		time.Since(start).Round(time.Second), s.deciderGRPC, s.deciderHTTP, s.gatewayAddr, s.linkHTTP, s.kvBind, s.loadTopic, s.kvTopic)
	f := &flow{s: s}
	for _, step := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"warm_up", f.warmUp},
		{"load", f.load},
		{"chat", f.chat},
		{"completion_as_token_ids", f.completionAsTokenIDs},
		{"prefix", f.prefix},
		{"local_tokenizer", f.localTokenizer},
		{"reset_prefix_cache", f.resetPrefixCache},
		{"link_restart_replays", f.linkRestartReplays},
		{"kill", f.kill},
	} {
		t0 := time.Now()
		t.Run(step.name, step.run)
		t.Logf("%s took %v", step.name, time.Since(t0).Round(time.Millisecond))
	}
	t.Logf("total %v", time.Since(start).Round(time.Second))
	t.Logf("enginelink's KV counters at the end:\n%s", s.linkKVCounters(t))
}

// flow carries what one step learns for later ones.
type flow struct {
	s   *stack
	seq int
	// holder is the engine that served (and cached) the prefix step's first prompt, and
	// holderPrompt a prompt sharing that prefix.
	holder, holderPrompt string
	// otherPrompt shares a prefix cached by the other engine only.
	otherPrompt string
}

var both = []string{engineA, engineB}

func other(id string) string {
	if id == engineA {
		return engineB
	}
	return engineA
}

// coldPrompt returns a prompt that shares no KV block with any other prompt of the run.
func (f *flow) coldPrompt(what string) string {
	f.seq++
	return fmt.Sprintf("cold%d %s %s: tell me something new", f.seq, proctest.RandomSuffix(), what)
}

// blockPrompt returns a cold prompt of more than one 32-token block, so that serving it makes
// the engine store a block and publish a KV-event batch.
func (f *flow) blockPrompt(what string) string {
	return f.coldPrompt(what) + " " + longText("pad", 24)
}

func longText(tag string, words int) string {
	var b strings.Builder
	for i := range words {
		fmt.Fprintf(&b, "%s%d ", tag, i)
	}
	return b.String()
}

// 0. Each engine answers a request sent to it directly. Its first KV-event batch goes out
// now, so a batch lost to ZMQ's slow joiner would show as a seq gap the link replays.
func (f *flow) warmUp(t *testing.T) {
	for _, id := range both {
		c := chatDirect(t, f.s.engines[id], f.coldPrompt("warm up "+id))
		t.Logf("%s answered directly: %d prompt tokens, %d completion tokens", id, c.Usage.PromptTokens, c.Usage.CompletionTokens)
	}
}

// (d) Load scraped from each engine's /metrics reaches the decider: GET /v1/admin/engines
// shows a known load whose KV capacity is the engine's num_gpu_blocks × block_size.
func (f *flow) load(t *testing.T) {
	s := f.s
	want := map[string]int64{}
	for _, id := range both {
		want[id] = kvCapacity(t, s.engines[id])
	}
	proctest.Eventually(t, poll, indexTimeout, "both engines' load (KV capacity from vllm:cache_config_info) in the decider", func() (bool, string) {
		engs := s.api.Engines(t)
		ok := true
		var state []string
		for _, id := range both {
			l := engs[id].GetLoad()
			ok = ok && l.GetLoadKnown() && l.GetKvCapacity() == want[id]
			state = append(state, fmt.Sprintf("%s known=%v kv_capacity=%d (want %d) kv_used=%d running=%d waiting=%d",
				id, l.GetLoadKnown(), l.GetKvCapacity(), want[id], l.GetKvUsed(), l.GetRunning(), l.GetWaiting()))
		}
		return ok, strings.Join(state, "; ")
	})
	for _, id := range both {
		l := s.api.Engines(t)[id].GetLoad()
		if l.GetKvUsed() < 0 || l.GetKvUsed() > l.GetKvCapacity() {
			t.Errorf("%s kv_used %d outside [0, kv_capacity %d]", id, l.GetKvUsed(), l.GetKvCapacity())
		}
		t.Logf("%s load in the decider: kv_capacity=%d kv_used=%d running=%d waiting=%d captured_at=%v",
			id, l.GetKvCapacity(), l.GetKvUsed(), l.GetRunning(), l.GetWaiting(), l.GetCapturedAt().AsTime().Format(time.RFC3339Nano))
	}
}

// (a) A chat completion through the gateway is served by one of the engines.
func (f *flow) chat(t *testing.T) {
	s := f.s
	var c completion
	eng := s.servedBy(t, both, func() { c = s.chat(t, "Hello there, this is a plain request.") })
	if c.Choices[0].FinishReason == "" || c.Usage.CompletionTokens == 0 || c.Model != modelName {
		t.Errorf("completion from %s: finish_reason %q, %d completion tokens, model %q; want a finished %s completion",
			eng, c.Choices[0].FinishReason, c.Usage.CompletionTokens, c.Model, modelName)
	}
	t.Logf("served by %s: %d prompt tokens, %d completion tokens, content %q", eng, c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Choices[0].Message.Content)
}

// (a') A /v1/completions text prompt through the gateway reaches vLLM as the token ids the
// engine's /tokenize gave (-forward-token-ids, on with -tokenizer engine), and vLLM answers it
// exactly as it answers the text sent directly: the same prompt token count (its /tokenize adds
// the special tokens its completions add) and, greedy, the same text. The engine that served
// the gateway's request is then asked directly, with the text and with the ids.
func (f *flow) completionAsTokenIDs(t *testing.T) {
	s := f.s
	prompt := f.coldPrompt("completion") + " " + longText("gamma", 20)
	body, _ := json.Marshal(map[string]any{"model": modelName, "prompt": prompt, "max_tokens": maxTokens, "temperature": 0})
	var viaGateway textCompletion
	eng := s.servedBy(t, both, func() { viaGateway = postCompletion(t, "gateway", "http://"+s.gatewayAddr, body) })
	direct := postCompletion(t, eng, s.engines[eng].url(), body)
	if viaGateway.Usage.PromptTokens != direct.Usage.PromptTokens || viaGateway.Choices[0].Text != direct.Choices[0].Text {
		t.Errorf("through the gateway (to %s): %d prompt tokens, text %q; sent directly: %d prompt tokens, text %q — want the same answer",
			eng, viaGateway.Usage.PromptTokens, viaGateway.Choices[0].Text, direct.Usage.PromptTokens, direct.Choices[0].Text)
	}
	ids := tokenizePrompt(t, s.engines[eng], prompt)
	if len(ids) != direct.Usage.PromptTokens {
		t.Errorf("/tokenize gives %d ids for the prompt, the completion counted %d prompt tokens", len(ids), direct.Usage.PromptTokens)
	}
	idsBody, _ := json.Marshal(map[string]any{"model": modelName, "prompt": ids, "max_tokens": maxTokens, "temperature": 0})
	if asIDs := postCompletion(t, eng, s.engines[eng].url(), idsBody); asIDs.Choices[0].Text != direct.Choices[0].Text {
		t.Errorf("%s answers the ids %q and the text %q", eng, asIDs.Choices[0].Text, direct.Choices[0].Text)
	}
	t.Logf("served by %s: %d prompt tokens, text %q both ways", eng, direct.Usage.PromptTokens, direct.Choices[0].Text)
}

// (b) A request sharing a long prefix with an earlier one lands on the engine whose KV events
// reported that prefix. Checked for both engines: the second's first request is sent to it
// directly, so only its KV events can draw the follow-up there.
func (f *flow) prefix(t *testing.T) {
	s := f.s
	p1 := longText("alpha", prefixWords)
	holder := s.servedBy(t, both, func() { s.chat(t, p1+"first question about alpha") })
	f.holder, f.holderPrompt = holder, p1+"second question about alpha"
	f.checkPrefixHit(t, holder, p1+"first question about alpha", f.holderPrompt)

	o := other(holder)
	p2 := longText("beta", prefixWords)
	chatDirect(t, s.engines[o], p2+"first question about beta")
	f.otherPrompt = p2 + "second question about beta"
	f.checkPrefixHit(t, o, p2+"first question about beta", f.otherPrompt)
}

// (b') A gateway that tokenizes locally with the model's tokenizer.json (-tokenizer hf:) finds
// the prefix a completion cached on an engine: its ids are the engine's, the BOS the
// tokenizer's post-processor prepends to a plain prompt included (scripts/vllm's model adds
// one, as Llama tokenizers do), so they hash to the blocks the engine reported. Without the
// BOS, every block of every lookup would miss.
func (f *flow) localTokenizer(t *testing.T) {
	s := f.s
	g := s.startGateway(t, "gateway-hf", "-tokenizer", "hf:"+filepath.Join(s.model, "tokenizer.json"), "-decision-headers")
	holder := engineA
	p := longText("gamma", prefixWords)
	first, second := p+"first question about gamma", p+"second question about gamma"
	ids2 := tokenizePrompt(t, s.engines[holder], second)
	wantBlocks := sharedBlocks(t, tokenizePrompt(t, s.engines[holder], first), ids2)
	body := func(prompt string) []byte {
		b, _ := json.Marshal(map[string]any{"model": modelName, "prompt": prompt, "max_tokens": maxTokens})
		return b
	}
	postCompletion(t, holder, s.engines[holder].url(), body(first))
	proctest.Eventually(t, poll, indexTimeout, holder+"'s KV events for the first completion in the index", func() (bool, string) {
		d := s.api.DryRun(t, modelName, ids2)
		return proctest.Matched(d, holder) >= wantBlocks*blockSize, fmt.Sprintf("want >= %d matched tokens on %s; %s", wantBlocks*blockSize, holder, proctest.Candidates(d))
	})
	c, h := postCompletionHeader(t, "gateway-hf", "http://"+g, body(second))
	matched, _ := strconv.ParseInt(h.Get("X-Sluice-Matched-Tokens"), 10, 64)
	if h.Get("X-Sluice-Engine") != holder || matched < wantBlocks*blockSize {
		t.Errorf("through the hf: gateway: engine %q, %d matched tokens (reason %q); want %s with >= %d (the engine's ids start %v)",
			h.Get("X-Sluice-Engine"), matched, h.Get("X-Sluice-Reason"), holder, wantBlocks*blockSize, ids2[:min(4, len(ids2))])
	}
	if c.Usage.PromptTokens != len(ids2) || int64(c.Usage.PromptTokensDetails.CachedTokens) < wantBlocks*blockSize {
		t.Errorf("on %s: %d prompt tokens (%d cached), want %d with >= %d cached", holder, c.Usage.PromptTokens, c.Usage.PromptTokensDetails.CachedTokens, len(ids2), wantBlocks*blockSize)
	}
	t.Logf("hf: gateway sent it to %s with %d matched tokens; the engine reused %d of %d", h.Get("X-Sluice-Engine"), matched, c.Usage.PromptTokensDetails.CachedTokens, c.Usage.PromptTokens)
}

// sharedBlocks is the number of full blocks of the prefix ids1 and ids2 share: what the engine
// cached and reported for the first prompt and the decider matches for the second, in whole
// blocks. It fails the test below 4 blocks.
func sharedBlocks(t *testing.T, ids1, ids2 []uint32) int64 {
	t.Helper()
	shared := 0
	for shared < len(ids1) && shared < len(ids2) && ids1[shared] == ids2[shared] {
		shared++
	}
	blocks := int64(shared / blockSize)
	if blocks < 4 {
		t.Fatalf("prompts share only %d tokens (%d blocks of %d); the test wants at least 4 blocks", shared, blocks, blockSize)
	}
	return blocks
}

// checkPrefixHit waits until the decider's KV index (fed only through enginelink and Kafka)
// makes holder the cache candidate for second, then sends second through the gateway and
// checks that holder served it from its cache.
func (f *flow) checkPrefixHit(t *testing.T, holder, first, second string) {
	t.Helper()
	s := f.s
	e := s.engines[holder]
	ids2 := tokenize(t, e, second)
	wantBlocks := sharedBlocks(t, tokenize(t, e, first), ids2)
	start := time.Now()
	proctest.Eventually(t, poll, indexTimeout, holder+"'s KV events make it the cache candidate", func() (bool, string) {
		d := s.api.DryRun(t, modelName, ids2)
		p := d.GetPick().GetPlain()
		return p.GetEngineId() == holder && p.GetReason() == "cache_candidate" && proctest.Matched(d, holder) >= wantBlocks*blockSize,
			fmt.Sprintf("%s; want %s with >= %d matched tokens; %s", proctest.PlainPick(d), holder, wantBlocks*blockSize, proctest.Candidates(d))
	})
	t.Logf("%s's KV events (%d shared blocks) reached the decider's index after %v", holder, wantBlocks, time.Since(start).Round(time.Millisecond))
	var c completion
	got := s.servedBy(t, both, func() { c = s.chat(t, second) })
	if got != holder {
		t.Errorf("request sharing %d blocks of prefix with %s's cache went to %s", wantBlocks, holder, got)
	}
	if cached := int64(c.Usage.PromptTokensDetails.CachedTokens); cached < wantBlocks*blockSize {
		t.Errorf("request on %s reused %d cached prompt tokens, want >= %d (of %d prompt tokens)", got, cached, wantBlocks*blockSize, c.Usage.PromptTokens)
	}
}

// (c) POST /reset_prefix_cache on the holder clears its residency in the decider: vLLM
// emits AllBlocksCleared, which reaches the index through enginelink and Kafka. The other
// engine's residency stays.
func (f *flow) resetPrefixCache(t *testing.T) {
	s := f.s
	if f.holder == "" {
		t.Skip("the prefix step found no holder")
	}
	e := s.engines[f.holder]
	resp, err := quick.Post(e.url()+"/reset_prefix_cache", "application/json", nil)
	if err != nil {
		t.Fatalf("POST %s /reset_prefix_cache: %v", f.holder, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s /reset_prefix_cache = %s (is VLLM_SERVER_DEV_MODE=1 set?)", f.holder, resp.Status)
	}
	// vLLM queues the AllBlocksCleared event and publishes it with the next batch, which
	// the scheduler only produces while it has work: an idle engine needs a request.
	chatDirect(t, e, f.coldPrompt("after the reset"))
	ids := tokenize(t, e, f.holderPrompt)
	start := time.Now()
	proctest.Eventually(t, poll, indexTimeout, f.holder+"'s AllBlocksCleared drops its residency in the decider", func() (bool, string) {
		d := s.api.DryRun(t, modelName, ids)
		return proctest.Matched(d, f.holder) == 0 && d.GetPick().GetPlain().GetReason() != "cache_candidate",
			proctest.PlainPick(d) + "; " + proctest.Candidates(d)
	})
	t.Logf("%s's residency cleared in the decider after %v", f.holder, time.Since(start).Round(time.Millisecond))
	o := other(f.holder)
	if d := s.api.DryRun(t, modelName, tokenize(t, s.engines[o], f.otherPrompt)); d.GetPick().GetPlain().GetEngineId() != o || proctest.Matched(d, o) == 0 {
		t.Errorf("after %s's reset, %s's own cached prefix is no longer credited: %s; %s", f.holder, o, proctest.PlainPick(d), proctest.Candidates(d))
	}
}

// Enginelink restarting loses nothing, and the replay socket is what makes that so:
//   - batches an engine publishes while no link is bound are not dropped: its connecting ZMQ
//     PUB keeps its pipe (and the old subscription) across the reconnect and delivers them to
//     the new link once it binds;
//   - the new link starts a new epoch for every engine, on which the decider clears the
//     engine's residency, and the first live batch (seq > 0) makes the link replay the
//     engine's history from seq 0 through vLLM's replay socket (replay_endpoint).
//
// So afterwards the decider credits the engine with a prefix cached before the restart
// (known only through the replay) and one cached while the link was down (queued). The
// restarted link runs in fleet mode: it learns the engines and their endpoints from the
// decider's registry instead of flags.
func (f *flow) linkRestartReplays(t *testing.T) {
	s := f.s
	if f.holder == "" || f.otherPrompt == "" {
		t.Skip("the prefix step cached no prefixes")
	}
	x := other(f.holder) // not the one just reset: its history holds a prefix
	e := s.engines[x]
	s.link.Stop()
	t.Logf("stopped enginelink (%v)", s.link.Err())
	p3 := longText("gamma", prefixWords)
	chatDirect(t, e, p3+"first question about gamma") // published while no link is bound
	s.link = s.procs.Start(t, "enginelink-fleet", nil, s.bin, s.linkArgs(true)...)
	s.waitHTTP(t, s.link, "http://"+s.linkHTTP+"/readyz") // ready once it has read the registry

	before := tokenize(t, e, f.otherPrompt)                    // cached before the restart
	during := tokenize(t, e, p3+"second question about gamma") // cached while the link was down
	want := int64(4 * blockSize)
	credited := func() (bool, string) {
		db, dd := s.api.DryRun(t, modelName, before), s.api.DryRun(t, modelName, during)
		return proctest.Matched(db, x) >= want && proctest.Matched(dd, x) >= want,
			fmt.Sprintf("prefix from before the restart: %s; from while it was down: %s; %s", proctest.PlainPick(db), proctest.PlainPick(dd), proctest.Candidates(dd))
	}
	// Should nothing have been queued, a live batch is what starts the replay: requests that
	// each publish one are sent until the decider knows both prefixes.
	const attempts = 5
	start := time.Now()
	for attempt := 1; ; attempt++ {
		var ok bool
		var last string
		for deadline := time.Now().Add(5 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			ok, last = credited()
		}
		if ok {
			t.Logf("%v after the restart (%d extra request(s)) the decider credits %s with both prefixes", time.Since(start).Round(time.Millisecond), attempt-1, x)
			break
		}
		if attempt == attempts {
			t.Fatalf("after the restart and %d requests to %s the decider does not credit it with both prefixes (want >= %d tokens each): %s\nenginelink's KV counters:\n%s",
				attempts-1, x, want, last, s.linkKVCounters(t))
		}
		chatDirect(t, e, f.blockPrompt(fmt.Sprintf("after the link restart %d", attempt)))
	}
	t.Logf("restarted enginelink's KV counters:\n%s", s.linkKVCounters(t))
	// The decider's view cannot tell a replayed batch from a live one; enginelink's own
	// counter can (when it exports it under this name).
	replayed := scrape(t, "http://"+s.linkHTTP+"/metrics", "sluice_enginelink_kv_batches_forwarded_total")
	found := false
	for _, smp := range replayed {
		if smp.labels["engine"] == x && smp.labels["source"] == "replay" {
			found = true
			if smp.value == 0 {
				t.Errorf("the restarted enginelink forwarded no replayed batch of %s", x)
			}
		}
	}
	if !found {
		t.Logf("enginelink exports no sluice_enginelink_kv_batches_forwarded_total{source=\"replay\"}: replay not checked directly")
	}
	if got := s.servedBy(t, both, func() { s.chat(t, f.otherPrompt) }); got != x {
		t.Errorf("request sharing the replayed prefix went to %s, want %s", got, x)
	}
}

// (e) SIGKILL of an engine (its whole process group) routes requests around it: the one a
// cold prompt would go to is killed, and cold requests through the gateway then all succeed
// on the other; the decider marks the dead one unhealthy.
func (f *flow) kill(t *testing.T) {
	s := f.s
	probe := tokenize(t, s.engines[engineA], f.coldPrompt("probe"))
	victim := s.api.DryRun(t, modelName, probe).GetPick().GetPlain().GetEngineId()
	if victim != engineA && victim != engineB {
		t.Fatalf("dry run of a cold prompt picked %q", victim)
	}
	survivor := other(victim)
	s.engines[victim].proc.Kill()
	t.Logf("killed %s (SIGKILL to its process group); %s survives", victim, survivor)

	const requests = 4
	before := served(t, s.engines[survivor])
	for i := range requests {
		s.chat(t, f.coldPrompt(fmt.Sprintf("after the kill %d", i)))
	}
	proctest.Eventually(t, poll, 30*time.Second, fmt.Sprintf("%s finished all %d requests sent after the kill", survivor, requests), func() (bool, string) {
		d := served(t, s.engines[survivor]) - before
		return d == requests, fmt.Sprintf("%s finished %v", survivor, d)
	})
	proctest.Eventually(t, poll, indexTimeout, "the decider marks "+victim+" unhealthy", func() (bool, string) {
		e := s.api.Engines(t)[victim]
		return !e.GetHealthy(), fmt.Sprintf("healthy=%v reason=%q", e.GetHealthy(), e.GetHealthReason())
	})
	if d := s.api.DryRun(t, modelName, probe); d.GetPick().GetPlain().GetEngineId() != survivor {
		t.Errorf("after the kill a cold prompt goes to %s, want %s; %s", proctest.PlainPick(d), survivor, proctest.Candidates(d))
	}
	resp, err := quick.Get(s.engines[survivor].url() + "/health")
	if err != nil {
		t.Fatalf("%s /health after the kill: %v", survivor, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("%s /health after the kill = %s", survivor, resp.Status)
	}
}
