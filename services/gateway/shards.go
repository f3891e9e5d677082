package gateway

import (
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/clients/go/deciderclient"
	"github.com/sluicehq/sluice/components/limits"
)

// Model-sharded deciders (docs/decisions.md, "Model-sharded deciders"): the gateway sends each
// request's Decide to -decider-addr until a decider answers WRONG_SHARD naming the deciders of
// the model's shard; from then on that model's Decide and Release go to those deciders (round
// robin over them), and a later WRONG_SHARD from them (the model moved) routes it again. With
// no shards in the configuration no decider answers WRONG_SHARD and every call goes to
// -decider-addr, as before.

// newShardRouter returns the router over home, dialing shard deciders with home's options
// and the message size limits of -decider-addr's connection.
func newShardRouter(home *deciderclient.Client, copts []deciderclient.Option, sizes limits.Sizes) *deciderclient.Sharded {
	opts := append(copts[:len(copts):len(copts)], deciderclient.WithDialOptions(
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(sizes.MaxMessageBytes), grpc.MaxCallRecvMsgSize(sizes.MaxMessageBytes))))
	return deciderclient.NewSharded(home, opts...)
}
