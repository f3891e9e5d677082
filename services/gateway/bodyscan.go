package gateway

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// decodeBody is json.Unmarshal(raw, b) in one pass over the body without reflection for the
// common request: a valid JSON object whose members of interest have their exact lower-case
// names, appear once and hold plain values. The body's other members (sampling options,
// tools, ...) are skipped, not decoded. Anything else — invalid JSON, another top-level value,
// a key encoding/json would match case-insensitively, a repeated key, a value of the wrong
// type — goes to json.Unmarshal itself, so the result and the error text are always
// encoding/json's.
func decodeBody(raw []byte, b *body) error {
	if !validJSON(raw) || !scanBody(raw, b) {
		*b = body{}
		return json.Unmarshal(raw, b)
	}
	return nil
}

// bodyFields are the members decodeBody reads; a key equal to one of them but for case is
// left to encoding/json.
var bodyFields = [...]string{"model", "messages", "prompt", "text", "input_ids", "max_tokens", "max_completion_tokens",
	"sampling_params", "stream", "lora_path", "cache_salt", "echo", "suffix", "add_special_tokens"}

// scanBody fills b from raw, known to be valid JSON; false means "ask encoding/json".
func scanBody(raw []byte, b *body) bool {
	var seen [len(bodyFields)]bool
	return scanObject(raw, func(key, v []byte) bool {
		f := -1
		for i, name := range bodyFields {
			if string(key) == name {
				f = i
				break
			}
		}
		if f < 0 {
			for _, name := range bodyFields {
				if len(key) == len(name) && bytes.EqualFold(key, []byte(name)) {
					return false // encoding/json would match it case-insensitively
				}
			}
			return true
		}
		if seen[f] {
			return false
		}
		seen[f] = true
		switch bodyFields[f] {
		case "model":
			switch {
			case isNull(v):
			case plainString(v):
				b.Model = string(v[1 : len(v)-1])
			default:
				return json.Unmarshal(v, &b.Model) == nil
			}
		case "stream":
			switch string(v) {
			case "true":
				b.Stream = true
			case "false", "null":
			default:
				return false
			}
		case "max_tokens":
			return scanInt(v, &b.MaxTokens)
		case "max_completion_tokens":
			return scanInt(v, &b.MaxCompletionTokens)
		case "messages":
			b.Messages = v
		case "prompt":
			b.Prompt = v
			// v is raw[at:at+len(v)]: its offset from the capacities the slices share.
			b.promptAt = cap(raw) - cap(v)
			b.promptEnd = b.promptAt + len(v)
		case "text":
			b.Text = v
		case "input_ids":
			b.InputIDs = v
		case "sampling_params":
			b.SamplingParams = v
		case "lora_path":
			b.LoRAPath = v
		case "cache_salt":
			b.CacheSalt = v
		case "echo":
			b.Echo = v
		case "suffix":
			b.Suffix = v
		case "add_special_tokens":
			b.AddSpecialTokens = v
		}
		return true
	})
}

func scanInt(v []byte, dst **int64) bool {
	if isNull(v) {
		return true
	}
	var n int64
	// A plain decimal of up to 18 digits fits int64 and reads the same by hand; anything else
	// (a fraction, an exponent, a longer number) is encoding/json's to accept or refuse.
	if digits := bytes.TrimPrefix(v, []byte("-")); len(digits) > 0 && len(digits) <= 18 && allDigits(digits) {
		for _, c := range digits {
			n = n*10 + int64(c-'0')
		}
		if len(digits) != len(v) {
			n = -n
		}
		*dst = &n
		return true
	}
	if json.Unmarshal(v, &n) != nil {
		return false
	}
	*dst = &n
	return true
}

// scanObject calls member for each member of the object raw (valid JSON) in order, with the
// key's bytes between the quotes and the value's bytes; it stops with false when member does,
// or when raw is not an object or a key has escapes or non-ASCII bytes (encoding/json folds
// some of those onto ASCII names).
func scanObject(raw []byte, member func(key, v []byte) bool) bool {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	i = skipSpace(raw, i+1)
	if raw[i] == '}' {
		return true
	}
	for {
		end := skipString(raw, i)
		key := raw[i+1 : end-1]
		for _, c := range key {
			if c == '\\' || c >= 0x80 {
				return false
			}
		}
		i = skipSpace(raw, end)
		i = skipSpace(raw, i+1) // the ':'
		vend := skipValue(raw, i)
		if !member(key, raw[i:vend]) {
			return false
		}
		i = skipSpace(raw, vend)
		if raw[i] == '}' {
			return true
		}
		i = skipSpace(raw, i+1) // the ','
	}
}

// scanArray calls elem for each element of the array raw (valid JSON); false when raw is not
// an array or elem says stop.
func scanArray(raw []byte, elem func(v []byte) bool) bool {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return false
	}
	i = skipSpace(raw, i+1)
	if raw[i] == ']' {
		return true
	}
	for {
		end := skipValue(raw, i)
		if !elem(raw[i:end]) {
			return false
		}
		i = skipSpace(raw, end)
		if raw[i] == ']' {
			return true
		}
		i = skipSpace(raw, i+1)
	}
}

// skipString returns the index after the string starting at raw[i] (valid JSON).
func skipString(raw []byte, i int) int {
	for j := i + 1; j < len(raw); j++ {
		switch raw[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(raw)
}

// skipValue returns the index after the value starting at raw[i] (valid JSON).
func skipValue(raw []byte, i int) int {
	switch raw[i] {
	case '"':
		return skipString(raw, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(raw); j++ {
			switch raw[j] {
			case '"':
				j = skipString(raw, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(raw)
	}
	j := i
	for j < len(raw) {
		switch raw[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// chatTextsFast is chatTexts for messages that are objects whose content is absent, null or a
// string without escapes; false sends the messages through encoding/json (content parts,
// escapes, odd shapes), which then also words any error.
func chatTextsFast(raw []byte) ([]string, bool) {
	texts := make([]string, 0, 4)
	ok := scanArray(raw, func(m []byte) bool {
		var content []byte
		found := false
		if !scanObject(m, func(key, v []byte) bool {
			if string(key) == "content" {
				if found {
					return false
				}
				found, content = true, v
				return true
			}
			return len(key) != len("content") || !bytes.EqualFold(key, []byte("content"))
		}) {
			return false
		}
		switch {
		case !found || isNull(content):
		case plainString(content):
			texts = append(texts, string(content[1:len(content)-1]))
		default:
			return false
		}
		return true
	})
	return texts, ok
}

// plainString reports whether v is a JSON string that decodes to its own bytes: no escapes,
// and valid UTF-8 (encoding/json replaces invalid bytes with U+FFFD).
func plainString(v []byte) bool {
	return len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v)
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
