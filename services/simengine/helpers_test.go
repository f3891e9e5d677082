package simengine

import "github.com/sluicehq/sluice/services/simengine/engine"

func engineRequest(tokens []uint32, maxTokens int) engine.Request {
	return engine.Request{TokenIDs: tokens, MaxTokens: maxTokens}
}
