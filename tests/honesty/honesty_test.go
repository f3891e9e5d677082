package honesty

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/trace"
)

// TestLiveAndSimulatedAgreeOnHits replays a small synthetic conversation trace (requests that
// share leading blocks) through a live two-engine stack and through sluice simulate. It asserts
// what a loaded machine cannot change: every request is served on both sides, and both see the
// same prefix sharing (hit blocks > 0, equal prompt sizes). Timing is reported, not asserted.
func TestLiveAndSimulatedAgreeOnHits(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a live stack")
	}
	var b strings.Builder
	for i := range 24 {
		// Conversations of three turns: turn k repeats the conversation's earlier blocks.
		conv, turn := i/3, i%3
		ids := []string{"0"}
		for k := 0; k <= turn; k++ {
			ids = append(ids, fmt.Sprint(1000*(conv+1)+k))
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 4, "hash_ids": [%s]}`+"\n", 250*i, 512*len(ids), strings.Join(ids, ", "))
	}
	reqs, err := trace.ReadMooncake(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	reqs = Capped(reqs, 4)
	s := Settings{Engines: 2, Policy: "cache_aware", MaxTokensCap: 4, ReportInterval: 500 * time.Millisecond, KVLag: 100 * time.Millisecond,
		Timeout: time.Minute}
	ctx := context.Background()
	live, err := Live(ctx, s, reqs, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sim, err := Simulated(ctx, s, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		name string
		o    Outcome
	}{{"live", live}, {"sim ", sim}} {
		t.Logf("%s: %d requests, %d errors, block hit rate %.4f, TTFT p50 %v p90 %v, engine-side p50 %v", side.name, side.o.Requests, side.o.Errors,
			side.o.BlockHitRate, side.o.TTFT50, side.o.TTFT90, side.o.EngineTTFT50)
	}
	if live.Requests != len(reqs) || live.Errors != 0 || sim.Requests != len(reqs) || sim.Errors != 0 {
		t.Fatalf("served: live %d of %d (%d errors, first %q), simulated %d (%d errors)", live.Requests-live.Errors, len(reqs), live.Errors,
			live.FirstErr, sim.Requests-sim.Errors, sim.Errors)
	}
	if live.BlockHitRate <= 0 || sim.BlockHitRate <= 0 {
		t.Errorf("block hit rate live %.4f, simulated %.4f: both should see the shared prefixes", live.BlockHitRate, sim.BlockHitRate)
	}
	var prompt int
	for _, r := range reqs {
		prompt += r.InputTokens
	}
	if live.PromptTok != int64(prompt) {
		t.Errorf("live prompt tokens %d, want the trace's %d", live.PromptTok, prompt)
	}
	if live.EngineTTFT50 <= 0 {
		t.Errorf("no engine-side TTFT recorded")
	}
	// Request by request: each live request is matched to the engine that ran it, and the engine
	// model fed the live routing at the instants the engines got each request finds the same
	// cached prefix for every one (the live engine runs the model).
	replay := replayLive(live.Runs, func(r Run) time.Duration { return r.Submitted })
	for i, r := range live.Runs {
		if r.Engine == "" || r.Prompt != reqs[i].InputTokens || r.Tokens == nil {
			t.Errorf("live request %d: engine %q, prompt %d tokens (want %d): not matched to its engine run", i, r.Engine, r.Prompt, reqs[i].InputTokens)
			continue
		}
		if replay[i].Cached != r.Cached {
			t.Errorf("request %d on %s: %d tokens cached live, %d in the model's replay of the live arrivals", i, r.Engine, r.Cached, replay[i].Cached)
		}
	}
	if sim.Runs[0].Engine == "" || len(sim.Runs) != len(reqs) {
		t.Errorf("simulated runs %+v: want one per request with its engine", sim.Runs[:min(len(sim.Runs), 2)])
	}
	var diag strings.Builder
	Diagnose(&diag, s.Policy, live, sim)
	for _, want := range []string{"same engine chosen", "| live engines |", "| model, live routing, trace arrivals |"} {
		if !strings.Contains(diag.String(), want) {
			t.Errorf("diagnosis lacks %q:\n%s", want, diag.String())
		}
	}
}

func TestCompareAndCheck(t *testing.T) {
	t.Parallel()
	live := Outcome{BlockHitRate: 0.10, TTFT50: 100 * time.Millisecond, EngineTTFT50: 80 * time.Millisecond}
	in := Compare("a", live, Outcome{BlockHitRate: 0.105, TTFT50: 90 * time.Millisecond})
	if !in.HitOK || !in.TTOK || !in.EngineOK || in.HitRel < 0.049 || in.HitRel > 0.051 {
		t.Errorf("within: %+v", in)
	}
	out := Compare("b", live, Outcome{BlockHitRate: 0.08, TTFT50: 130 * time.Millisecond})
	if out.HitOK || out.TTOK || out.EngineOK {
		t.Errorf("outside: %+v", out)
	}
	if err := Check([]Row{in}); err != nil {
		t.Errorf("Check(within) = %v", err)
	}
	if err := Check([]Row{in, out}); !errors.Is(err, ErrOutside) || !strings.Contains(err.Error(), "b") {
		t.Errorf("Check(outside) = %v, want ErrOutside naming b", err)
	}
	var b strings.Builder
	if err := Table(&b, []Row{in, out}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| a | live stack |", "| b | sluice simulate |", "+5.0 % (within ±10 %)", "**outside**"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	// No live hit: never "within".
	if r := Compare("c", Outcome{}, Outcome{BlockHitRate: 0.1}); r.HitOK || r.TTOK || r.EngineOK {
		t.Errorf("empty live side compared as within: %+v", r)
	}
}
