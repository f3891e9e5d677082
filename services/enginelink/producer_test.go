package enginelink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// failingTransport answers every round trip with err.
type failingTransport struct{ err error }

func (f failingTransport) RoundTrip(context.Context, net.Addr, kafka.Request) (kafka.Response, error) {
	return nil, f.err
}

// TestLeaderRetryMarksNoLeaderTemporary: kafka-go's writer retries only temporary errors, and
// "topic partition has no leader" (a restarted broker electing leaders) is not one, so every
// batch in that window was dropped. leaderRetry marks it (and a missing partition) temporary,
// keeping the error's identity, and leaves other errors alone.
func TestLeaderRetryMarksNoLeaderTemporary(t *testing.T) {
	t.Parallel()
	temporary := func(err error) bool {
		var te interface{ Temporary() bool }
		return errors.As(err, &te) && te.Temporary()
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("kafka.(*Client).Produce: %w", protocol.NewErrNoLeader("t", 1)), true},
		{protocol.NewErrNoPartition("t", 0), true},
		{errors.New("boom"), false},
	} {
		_, err := leaderRetry{failingTransport{c.err}}.RoundTrip(context.Background(), nil, nil)
		if got := temporary(err); got != c.want || !errors.Is(err, c.err) {
			t.Errorf("RoundTrip error %v: temporary %v (want %v), same error %v", c.err, got, c.want, errors.Is(err, c.err))
		}
	}
}
