package deciderstate

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/components/ingest"
	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/decider/policy"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/clock"
	"github.com/sluicehq/sluice/state/config"
)

// TestVirtualClockAndHooks builds the state on a manual clock, feeds a load record through the
// ingester's Apply, and checks freshness follows the manual clock, Decide takes a lease, and an
// engine leaving the configuration leaves the load table.
func TestVirtualClockAndHooks(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	st, err := New(Config{LoadFreshness: 5 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	brokers := []string{"unused.invalid:0"}
	in, err := st.NewIngestion(quiet, IngestConfig{Load: ingest.Config{Brokers: brokers}, KV: ingest.Config{Brokers: brokers}}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.BuildDecider(quiet, in, decider.Config{}); err != nil {
		t.Fatal(err)
	}
	engines := []config.EngineSpec{
		{ID: "a", URL: "http://a.invalid", Models: []string{"m"}, Role: config.RolePlain},
		{ID: "b", URL: "http://b.invalid", Models: []string{"m"}, Role: config.RolePlain},
	}
	doc := &config.Document{Engines: engines, DefaultPolicy: &config.StagePolicies{Plain: &config.PolicySpec{Type: config.PolicyCacheAware}}}
	if err := st.Apply(config.Snapshot{Version: 1, Document: doc}); err != nil {
		t.Fatal(err)
	}
	v, err := proto.Marshal(&sluicev1.LoadReport{EngineId: "a", DpSize: 1, Epoch: 1, Seq: 1, CapturedAt: timestamppb.New(t0),
		RunningRequests: 3, KvCapacityTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	in.Load.Apply(kafka.Message{Key: []byte("a"), Value: v})
	a, _ := st.Registry.Snapshot().Get("a")
	if view, ok := st.Load.Snapshot().View(a.Slot); !ok || view.Running != 3 {
		t.Fatalf("load of a after Apply: %+v, %v; want running 3", view, ok)
	}
	clk.Advance(6 * time.Second)
	if _, ok := st.Load.Snapshot().View(a.Slot); ok {
		t.Error("load of a still fresh 6 s later on the manual clock (freshness 5 s)")
	}
	dec, err := st.Decider.Decide(context.Background(), policy.Request{Model: "m", InputTokens: 4, TokenIDs: []uint32{1, 2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	if dec.Lease.ID == "" || !dec.Lease.Expires.After(clk.Now()) || dec.Lease.Expires.After(clk.Now().Add(time.Hour)) {
		t.Errorf("lease %+v: want an id and an expiry by the manual clock", dec.Lease)
	}
	doc2 := &config.Document{Engines: engines[1:]}
	if err := st.Apply(config.Snapshot{Version: 2, Document: doc2}); err != nil {
		t.Fatal(err)
	}
	if ids := st.Load.Engines(); len(ids) != 0 {
		t.Errorf("load table engines after a left: %v, want none", ids)
	}
}
