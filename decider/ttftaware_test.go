package decider

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

func TestDecideExplainTTFTAware(t *testing.T) {
	t.Parallel()
	// No KV index: ttft_aware is accepted and estimates every engine cold.
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain), engine("b", registry.RolePlain)})
	f.apply(`
default_policy:
  plain: {type: ttft_aware, typical_request_tokens: 1000, default_prefill_tokens_per_s: 1000}
`)
	f.running("a", 0)
	if err := f.load.Apply(loadtable.Report{EngineID: "b", Epoch: 1, Seq: 1, CapturedAt: time.Now(), Waiting: 2, KVCapacityTokens: 100}); err != nil {
		t.Fatal(err)
	}
	dec, err := f.d.Decide(context.Background(), policy.Request{Model: "m", InputTokens: 500, Explain: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	st := dec.Explain.Attempts[0].Stages[0]
	if dec.Plain.Engine.ID != "a" || dec.Plain.Reason != policy.ReasonLeastTTFT || st.Policy != "ttft_aware" {
		t.Fatalf("Decide = %s (%s) by %s, want a (least_ttft) by ttft_aware", dec.Plain.Engine.ID, dec.Plain.Reason, st.Policy)
	}
	// b: 2 waiting × 1000 tokens / 1000 tokens/s + 500 / 1000 = 2.5 s; a: 0.5 s.
	var b policy.CandidateNote
	for _, c := range st.Candidates {
		if c.EngineID == "b" {
			b = c
		}
	}
	if b.TTFT.Estimate != 2500*time.Millisecond || !strings.Contains(b.Note, "ttft 2.5s") || !strings.Contains(st.Detail, "no KV index") {
		t.Errorf("b = %+v, detail %q", b, st.Detail)
	}
}
