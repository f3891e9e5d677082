package deciderserver

import (
	"context"
	"testing"

	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// TestGRPCDecideLoRA: over the real gRPC stack, a model that names an adapter an engine declares
// is routed to that engine in its base model's buckets instead of failing UNKNOWN_MODEL, and
// lora_name beside the base model does the same; cache_salt is accepted.
func TestGRPCDecideLoRA(t *testing.T) {
	srv := startServer(t, "testdata/lora.yaml")
	c := grpcClient(t, srv)
	for _, req := range []*sluicev1.DecideRequest{
		{Model: "sql-lora", InputTokens: 10, DryRun: true},
		{Model: "llama", LoraName: "sql-lora", CacheSalt: "tenant-1", InputTokens: 10, DryRun: true},
	} {
		for range 4 { // without the restriction, base1 would be a candidate too
			resp, err := c.Decide(context.Background(), req)
			if err != nil {
				t.Fatalf("Decide(%v) = %v (%s)", req, err, reasonOf(status.Convert(err)))
			}
			if id := resp.GetPick().GetPlain().GetEngineId(); id != "lora1" {
				t.Errorf("Decide(%v) picked %s, want lora1 (the engine declaring sql-lora)", req, id)
			}
		}
	}
	if _, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "other-lora", InputTokens: 1}); reasonOf(status.Convert(err)) != "UNKNOWN_MODEL" {
		t.Errorf("Decide(undeclared adapter) = %v, want UNKNOWN_MODEL", err)
	}
}
