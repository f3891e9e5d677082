package config

import "testing"

func TestSubscribersLatestWins(t *testing.T) {
	t.Parallel()
	var s Subscribers
	ch, cancel := s.Subscribe()
	s.Publish(Snapshot{Version: 1})
	s.Publish(Snapshot{Version: 2}) // the reader has not read 1: it is replaced
	if got := (<-ch).Version; got != 2 {
		t.Errorf("received version %d, want 2 (latest wins)", got)
	}
	cancel()
	cancel() // idempotent
	if _, ok := <-ch; ok {
		t.Error("channel still open after unsubscribe")
	}
	s.Publish(Snapshot{Version: 3}) // no subscribers left: must not block or panic
}
