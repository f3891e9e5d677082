package decider_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
	"github.com/sluicehq/sluice/state/slots"
)

// Build a decider over in-memory state, install a configuration document, route two requests
// and release their leases.
func Example() {
	// The registry, load table and in-flight tracker share one slot table.
	st := slots.NewTable()
	reg := registry.New(st)
	if err := reg.Replace([]registry.Engine{
		{ID: "a", URL: "http://a.test:8000", Models: []string{"llama"}, Role: registry.RolePlain},
		{ID: "b", URL: "http://b.test:8000", Models: []string{"llama"}, Role: registry.RolePlain},
	}); err != nil {
		panic(err)
	}
	load, err := loadtable.New(st, loadtable.Config{})
	if err != nil {
		panic(err)
	}
	leases, err := inflight.New(st, inflight.Config{}, nil)
	if err != nil {
		panic(err)
	}
	d, err := decider.New(slog.New(slog.DiscardHandler), reg, policy.Deps{Load: load, InFlight: leases}, leases, decider.Config{})
	if err != nil {
		panic(err)
	}

	// The decider routes nothing until a configuration is applied.
	doc, err := config.Parse([]byte(`
default_policy:
  plain: {type: round_robin}
`), config.FormatYAML)
	if err != nil {
		panic(err)
	}
	if err := d.Apply(config.Snapshot{Version: 1, Document: doc, Source: "example"}); err != nil {
		panic(err)
	}

	for range 2 {
		dec, err := d.Decide(context.Background(), policy.Request{Model: "llama", InputTokens: 512})
		if err != nil {
			panic(err)
		}
		fmt.Printf("bucket %s, engine %s at %s (%s), config version %d\n",
			dec.BucketID, dec.Plain.Engine.ID, dec.Plain.Engine.URL, dec.Plain.Reason, dec.ConfigVersion)
		// The caller releases the lease when the engine has answered.
		engines, released := d.Release(dec.Lease.ID)
		fmt.Println("released", engines, released)
	}
	// Output:
	// bucket plain, engine a at http://a.test:8000 (round_robin), config version 1
	// released [a] true
	// bucket plain, engine b at http://b.test:8000 (round_robin), config version 1
	// released [b] true
}

// Ask for an explanation: every bucket tried, in order, and what each stage's policy saw. Here
// the first bucket's only engine is at its in-flight cap, so the request moves on.
func ExampleDecider_Decide_explain() {
	d := newDecider(`
buckets:
  - id: busy
    groups: {plain: {worker_ids: [a], policy: {type: round_robin, admission: {max_inflight_requests: 1}}}}
  - id: spare
    rank: 1
    groups: {plain: {worker_ids: [b], policy: {type: round_robin}}}
`, "a", "b")
	ctx := context.Background()
	// The first request takes a's only in-flight slot and keeps its lease.
	if _, err := d.Decide(ctx, policy.Request{Model: "llama", InputTokens: 100}); err != nil {
		panic(err)
	}

	dec, err := d.Decide(ctx, policy.Request{Model: "llama", InputTokens: 100, DryRun: true, Explain: true})
	if err != nil {
		panic(err)
	}
	for _, a := range dec.Explain.Attempts {
		for _, s := range a.Stages {
			fmt.Printf("%s %s (%s): %s", a.BucketID, s.Role, s.Policy, s.Outcome)
			for _, c := range s.Candidates {
				if c.Rejection != "" {
					fmt.Printf(", %s refused at %s", c.EngineID, c.Rejection)
				}
			}
			if s.PickedEngineID != "" {
				fmt.Printf(", picked %s", s.PickedEngineID)
			}
			fmt.Println()
		}
	}
	fmt.Println("dry run lease:", dec.Lease.ID == "")
	// Output:
	// busy plain (round_robin): admission_rejected, a refused at max_inflight_requests
	// spare plain (round_robin): picked, picked b
	// dry run lease: true
}

// A request that cannot be routed returns a *decider.Error: its Kind selects the transport's
// status code, its Reason is the machine-readable detail.
func ExampleError() {
	d := newDecider(`
buckets:
  - id: short
    limits: {min: 0, max: 4096}
    groups: {plain: {}}
`, "a")
	_, err := d.Decide(context.Background(), policy.Request{Model: "llama", InputTokens: 10000})
	var e *decider.Error
	if errors.As(err, &e) {
		fmt.Println(e.Kind, e.Reason)
		fmt.Println(e.Message)
	}
	// Output:
	// invalid_argument NO_MATCHING_BUCKET
	// no bucket for model "llama" accepts input_tokens 10000 (buckets: short); the widest able to serve it, "short", takes input_tokens 0 to 4096
}

// Check refuses a document this decider cannot serve before anything changes: cache_aware needs
// the KV prefix index that KV-event ingestion provides, and this decider has none.
func ExampleDecider_Check() {
	d := newDecider("{}", "a")
	doc, err := config.Parse([]byte(`
default_policy:
  plain: {type: cache_aware}
`), config.FormatYAML)
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Check(doc))
	fmt.Println("still serving version", d.ConfigVersion())
	// Output:
	// bucket "plain" plain group: policy cache_aware needs a KV prefix index; start the decider with KV-event ingestion: invalid configuration
	// still serving version 1
}

// newDecider is Example's setup: a decider over plain engines of model "llama" with the given
// ids, with configuration document yaml applied as version 1.
func newDecider(yaml string, ids ...string) *decider.Decider {
	st := slots.NewTable()
	reg := registry.New(st)
	var engines []registry.Engine
	for _, id := range ids {
		engines = append(engines, registry.Engine{ID: id, URL: "http://" + id + ".test:8000", Models: []string{"llama"}, Role: registry.RolePlain})
	}
	if err := reg.Replace(engines); err != nil {
		panic(err)
	}
	load, err := loadtable.New(st, loadtable.Config{})
	if err != nil {
		panic(err)
	}
	leases, err := inflight.New(st, inflight.Config{}, nil)
	if err != nil {
		panic(err)
	}
	d, err := decider.New(slog.New(slog.DiscardHandler), reg, policy.Deps{Load: load, InFlight: leases}, leases, decider.Config{})
	if err != nil {
		panic(err)
	}
	doc, err := config.Parse([]byte(yaml), config.FormatYAML)
	if err != nil {
		panic(err)
	}
	if err := d.Apply(config.Snapshot{Version: 1, Document: doc, Source: "example"}); err != nil {
		panic(err)
	}
	return d
}
