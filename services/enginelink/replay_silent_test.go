package enginelink_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/silentpeer"
	"github.com/sluicehq/sluice/services/enginelink"
)

// TestReplayFromASilentPeerDoesNotStallTheStream: a replay socket that accepts the connection
// and never sends its ZMTP greeting (a stopped engine, a kv_replay_endpoint that names some other
// port) fails each replay within -replay-timeout, so the gaps stay visible and the live stream
// goes on, instead of the rank's stream waiting forever behind the first replay; later replays
// to it fail at once rather than piling up connections on it.
func TestReplayFromASilentPeerDoesNotStallTheStream(t *testing.T) {
	silentEP, accepted := silentListener(t)
	eng := newFakeEngine(t, engineOpts{Replay: false})
	brokers := startBroker(t)
	cfg := testConfig(brokers)
	cfg.ReplayTimeout = 300 * time.Millisecond
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: eng.pubEP, KVReplayEndpoint: silentEP}}
	c := consume(t, brokers, cfg.KVTopic)
	l := runLink(t, cfg)

	warmUp(t, eng, c, "e1") // the connect-time replay meets the silent peer first
	for range 3 {
		eng.lose(1)
		eng.lose(1)
		last := eng.publish(1)
		waitFor(t, "the batch after a gap", func() bool {
			r := c.records("e1")
			return len(r) > 0 && r[len(r)-1].seq() == last
		})
	}
	if got := metricValue(t, l.Registry(), "sluice_enginelink_kv_replay_requests_total", map[string]string{"result": "error"}); got < 4 {
		t.Errorf("failed replays = %v, want at least 4 (one at connect, one per gap)", got)
	}
	if got := metricValue(t, l.Registry(), "sluice_enginelink_kv_gap_batches_total", map[string]string{"kind": "seq_jump", "outcome": "unrecovered"}); got < 6 {
		t.Errorf("unrecovered gap batches = %v, want at least 6 (2 per gap, none papered over)", got)
	}
	if n := accepted(); n != 1 {
		t.Errorf("the silent peer took %d connections, want 1: a replay must not dial again while an earlier dial still waits for the greeting", n)
	}
}

// silentListener is a silent peer (internal/silentpeer) held until the test ends: its endpoint
// and a count of the connections taken.
func silentListener(t *testing.T) (string, func() int64) {
	t.Helper()
	p := silentpeer.Listen(t)
	return p.Endpoint, p.Accepted
}
