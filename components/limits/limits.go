// Package limits derives every wire-size limit of the decider and the gateway from one number,
// the largest token_ids list a Decide may carry (-max-token-ids), so the hops agree: a request
// the decider would accept is never refused by a smaller limit on the way, and a request too big
// for the decider is refused by the first hop that sees its size, before anyone parses it.
package limits

import (
	"fmt"
	"unicode/utf8"
)

// DefaultMaxTokenIDs is the default -max-token-ids of the decider and the gateway.
const DefaultMaxTokenIDs = 2 << 20

// Headroom is what a Decide may carry besides its token ids (model, keys, excluded engines), and
// the largest admin request (a whole configuration document) allowed.
const Headroom = 1 << 20

// Encoded sizes of one token id at most: a uint32 varint in the packed protobuf field; ten
// decimal digits and a separator (", ") in JSON.
const (
	protoBytesPerTokenID = 5
	jsonBytesPerTokenID  = 12
)

// Sizes are the limits derived from one MaxTokenIDs.
type Sizes struct {
	// MaxTokenIDs is the largest token_ids list a Decide may carry.
	MaxTokenIDs int
	// MaxMessageBytes bounds one protobuf message: the decider's gRPC MaxRecvMsgSize and the
	// gateway's gRPC client send limit. A Decide with MaxTokenIDs ids encodes within it.
	MaxMessageBytes int
	// MaxBodyBytes bounds one HTTP request body on the decider's HTTP port (REST, Connect; after
	// decompression too) and an inference request body at the gateway. A Decide with
	// MaxTokenIDs ids encodes within it as JSON.
	MaxBodyBytes int64
}

// For derives the limits for maxTokenIDs (> 0).
func For(maxTokenIDs int) Sizes {
	return Sizes{
		MaxTokenIDs:     maxTokenIDs,
		MaxMessageBytes: protoBytesPerTokenID*maxTokenIDs + Headroom,
		MaxBodyBytes:    int64(jsonBytesPerTokenID)*int64(maxTokenIDs) + Headroom,
	}
}

// Validate reports a MaxTokenIDs the derived limits cannot hold (they must fit an int32, which
// is what gRPC takes), naming the flag.
func Validate(maxTokenIDs int) error {
	const most = (1<<31 - 1 - Headroom) / jsonBytesPerTokenID
	if maxTokenIDs <= 0 || maxTokenIDs > most {
		return fmt.Errorf("-max-token-ids %d: must be between 1 and %d", maxTokenIDs, most)
	}
	return nil
}

// TooLarge is the message of a refused body: how big it was (or at least), the limit, and
// where the limit comes from.
func TooLarge(what string, size, limit int64) string {
	return fmt.Sprintf("%s of %d bytes exceeds the limit of %d bytes (derived from -max-token-ids: room for that many token ids "+
		"plus %d bytes); send fewer token ids or raise -max-token-ids on the decider and the gateway", what, size, limit, Headroom)
}

// MaxErrorMessageBytes bounds an error message the decider or the gateway sends: messages quote
// what the caller sent (a model name, an id, a field), and a 1 MB model name must not come back
// as a 1 MB error.
const MaxErrorMessageBytes = 2048

// Clip shortens s to at most n bytes (on a UTF-8 boundary), saying how much was cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes)", s[:cut], len(s)-cut)
}
