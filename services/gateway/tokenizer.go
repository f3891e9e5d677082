package gateway

import (
	"context"
	"fmt"
	"strings"
)

// Tokenizer modes, the values of Config.Tokenizer ("hf:" is followed by a path).
const (
	TokenizerEstimate = "estimate"
	TokenizerEngine   = "engine"
	tokenizerHFPrefix = "hf:"
)

// tokenizerMode is a parsed Config.Tokenizer.
type tokenizerMode struct {
	kind string // TokenizerEstimate, TokenizerEngine or "hf"
	path string // the tokenizer.json path in "hf" mode
}

func parseTokenizerMode(s string) (tokenizerMode, error) {
	switch {
	case s == TokenizerEstimate || s == "":
		return tokenizerMode{kind: TokenizerEstimate}, nil
	case s == TokenizerEngine:
		return tokenizerMode{kind: TokenizerEngine}, nil
	case strings.HasPrefix(s, tokenizerHFPrefix) && len(s) > len(tokenizerHFPrefix):
		return tokenizerMode{kind: "hf", path: s[len(tokenizerHFPrefix):]}, nil
	}
	return tokenizerMode{}, fmt.Errorf("-tokenizer %q: use estimate, engine or hf:/path/to/tokenizer.json", s)
}

// prompt is the text of one request as a tokenizer sees it.
type prompt struct {
	// model is the request's model (engine mode asks an engine of that model).
	model string
	// texts are the text pieces: the prompt of a completion or /generate, or the text parts of
	// a chat's messages in order.
	texts []string
	// messages is the raw chat messages array; nil for completions and /generate.
	messages []byte
	// special is set when the engine adds its tokenizer's special tokens (a BOS, say) to the
	// text: a completion or /generate prompt, unless the body sets add_special_tokens false
	// (vLLM and SGLang encode such a prompt with add_special_tokens on by default; a chat's
	// template writes its own).
	special bool
}

// bytes is the length of the prompt's text content.
func (p prompt) bytes() int64 {
	var n int64
	for _, t := range p.texts {
		n += int64(len(t))
	}
	return n
}

// tokens is a tokenizer's answer: the count, and the ids when the tokenizer knows them (nil for
// the estimate).
type tokens struct {
	count int64
	ids   []uint32
}

// tokenizer counts the input tokens of one prompt. Implementations are safe for concurrent use.
type tokenizer interface {
	tokenize(ctx context.Context, p prompt) (tokens, error)
}

// estimator is the default tokenizer: ceil(bytes/4) of the text content, no token ids.
type estimator struct{}

var _ tokenizer = estimator{}

func (estimator) tokenize(_ context.Context, p prompt) (tokens, error) {
	return tokens{count: (p.bytes() + 3) / 4}, nil
}
