package simengine

import (
	"hash/fnv"
	"strings"
	"unicode"
)

// Vocab is the toy tokenizer's vocabulary size.
const Vocab = 32000

// Tokenize is the simengine's deterministic toy tokenizer: each run of letters or digits is a
// token, each other non-space character is a token of its own, and a token's id is the FNV-1a
// hash of its text modulo Vocab. The server uses it for every request without token ids and
// serves it at /tokenize, so a gateway that asks /tokenize gets exactly the ids the engine
// caches and reports in its KV events.
func Tokenize(text string) []uint32 {
	var out []uint32
	word := -1
	flush := func(end int) {
		if word >= 0 {
			out = append(out, tokenID(text[word:end]))
			word = -1
		}
	}
	for i, r := range text {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if word < 0 {
				word = i
			}
		case unicode.IsSpace(r):
			flush(i)
		default:
			flush(i)
			out = append(out, tokenID(string(r)))
		}
	}
	flush(len(text))
	return out
}

// ChatMessage is one message of a chat request; Content is text or an array of parts.
type ChatMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// TokenizeMessages tokenizes a chat as "<role>: <content>\n" per message, the text parts of
// array contents joined by spaces.
func TokenizeMessages(msgs []ChatMessage) []uint32 {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(contentText(m.Content))
		b.WriteString("\n")
	}
	return Tokenize(b.String())
}

func contentText(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var parts []string
		for _, p := range v {
			if m, ok := p.(map[string]any); ok {
				if s, ok := m["text"].(string); ok {
					parts = append(parts, s)
				}
			}
		}
		return strings.Join(parts, " ")
	}
	return ""
}

func tokenID(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32() % Vocab
}

// detokenize renders generated token ids as text, one " tNNN" word per token.
func detokenize(id uint32) string {
	return " t" + itoa(uint64(id))
}

func itoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
