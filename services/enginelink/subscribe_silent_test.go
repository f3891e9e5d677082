package enginelink_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/silentpeer"
	"github.com/sluicehq/sluice/services/enginelink"
)

// TestKVSubscriberOfASilentPublisher: an engine whose KV endpoint accepts the connection and
// never sends its ZMTP greeting (a wedged engine, whose kernel still completes the TCP
// handshake; a kv_events_endpoint naming some other port) no longer holds the rank's SUB dial
// forever. The dial gives up within the handshake bound, the silent peer is given one
// connection at a time, a real publisher that takes the endpoint over once the silent one goes
// away is subscribed to and its batches forwarded, and the link stops at shutdown while another
// engine's endpoint is still silent. The old code waited in Dial for the greeting: the link's
// Run did not return after its context was cancelled.
func TestKVSubscriberOfASilentPublisher(t *testing.T) {
	defer enginelink.SetKVDialTimeout(300 * time.Millisecond)()
	moved, still := silentpeer.Listen(t), silentpeer.Listen(t)
	brokers := startBroker(t)
	cfg := testConfig(brokers)
	cfg.Engines = []enginelink.EngineSpec{
		{ID: "e1", Model: "m", KVEventsEndpoint: moved.Endpoint},
		{ID: "e2", Model: "m", KVEventsEndpoint: still.Endpoint},
	}
	c := consume(t, brokers, cfg.KVTopic)
	l, err := enginelink.New(testLogger(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	waitFor(t, "both silent peers to take a connection", func() bool { return moved.Accepted() >= 1 && still.Accepted() >= 1 })
	time.Sleep(2 * time.Second) // several handshake bounds and redials
	if n := still.Accepted(); n != 1 {
		t.Errorf("the silent peer took %d connections, want 1: a dial must not open another while an earlier one still waits for the greeting", n)
	}

	// The silent peer goes away and a real publisher binds its port.
	moved.HangUp()
	eng := newFakeEngine(t, engineOpts{PubEP: moved.Endpoint})
	warmUp(t, eng, c, "e1")

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancellation: the SUB dial to e2's silent endpoint still waits for its greeting")
	}
}
