package gateway

import (
	"bytes"
	"encoding/json"
)

// validateOpenAI checks what OpenAI refuses but the routing facts do not cover, before any
// Decide is made: a chat without messages, and a choice count n the gateway cannot honour.
// Each refusal is a 400 naming the field, in OpenAI's error shape.
func validateOpenAI(route string, raw []byte, f *facts) error {
	if route == routeChat && isEmptyArray(f.prompt.messages) {
		return badRequest("messages", "empty_array",
			"Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	if route == routeChat || route == routeCompletions {
		return checkN(raw)
	}
	return nil
}

// checkN refuses n other than 1: one decision places one request on one engine with one output
// budget, and not every engine returns n choices (sluice's simulated ones do not), so the
// gateway says so instead of answering with fewer choices than asked. Only bodies that mention
// "n" are decoded again.
func checkN(raw []byte) error {
	if !bytes.Contains(raw, []byte(`"n"`)) {
		return nil
	}
	var b struct {
		N *json.Number `json:"n"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return badRequest("n", "invalid_type", "Invalid type for 'n': expected an integer: %v", err)
	}
	if b.N == nil {
		return nil
	}
	n, err := b.N.Int64()
	switch {
	case err != nil:
		return badRequest("n", "invalid_type", "Invalid type for 'n': expected an integer, but got %s", b.N.String())
	case n < 1:
		return badRequest("n", "integer_below_min_value", "Invalid 'n': integer below minimum value. Expected a value >= 1, but got %d instead.", n)
	case n > 1:
		return badRequest("n", "unsupported_value",
			"n = %d is not supported: the gateway routes each request to one engine for one completion; send %d requests (or omit n)", n, n)
	}
	return nil
}

func isEmptyArray(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) >= 2 && t[0] == '[' && t[len(t)-1] == ']' && len(bytes.TrimSpace(t[1:len(t)-1])) == 0
}
