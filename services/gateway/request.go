package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/components/tokenids"
)

// Routes served by the gateway, used as the route metric label.
const (
	routeChat        = "/v1/chat/completions"
	routeCompletions = "/v1/completions"
	routeGenerate    = "/generate"
	routeModels      = "/v1/models"
)

// body is the part of an OpenAI or SGLang request body the gateway reads. The body itself is
// forwarded unchanged (PD adds the bootstrap fields; a completion's text prompt may go as
// token ids, Server.withPromptIDs).
type body struct {
	Model               string          `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Text                json.RawMessage `json:"text"`
	InputIDs            json.RawMessage `json:"input_ids"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	SamplingParams      json.RawMessage `json:"sampling_params"`
	Stream              bool            `json:"stream"`
	// LoRAPath is SGLang's adapter name: a string, or a list (one per prompt) for a batched
	// /generate. CacheSalt is the vLLM and SGLang cache salt.
	LoRAPath  json.RawMessage `json:"lora_path"`
	CacheSalt json.RawMessage `json:"cache_salt"`
	// Echo, Suffix and AddSpecialTokens change what a completion does with its prompt's text;
	// a body with any of them is forwarded with its text (promptIDsSpan).
	Echo             json.RawMessage `json:"echo"`
	Suffix           json.RawMessage `json:"suffix"`
	AddSpecialTokens json.RawMessage `json:"add_special_tokens"`
	// promptAt and promptEnd are where the prompt's value lies in the body, when the one-pass
	// scan read it (promptEnd 0 otherwise).
	promptAt, promptEnd int
}

// facts are the routing facts of one request, prepared once before the first Decide.
type facts struct {
	model  string
	stream bool
	// batch is the number of prompts of a batched /generate (a list text or input_ids); 0 for
	// a single prompt.
	batch int
	// prompt is what the tokenizer counts; ignored when ids is set.
	prompt prompt
	// known is set when the body carried token ids itself.
	known *tokens
	// maxOut is the output budget the body asked for; nil when it set none.
	maxOut *int64
	// lora is the LoRA adapter the body names beside its model (SGLang lora_path), and
	// cacheSalt its cache salt; "" for none. A model that is an adapter is the decider's to
	// resolve.
	lora, cacheSalt string
	// idsAt and idsEnd are where a /v1/completions prompt that may go to the engine as token
	// ids lies in the body (promptIDsSpan); idsEnd 0 when it may not.
	idsAt, idsEnd int
}

// requestError is a client error found in the body: 400 with an OpenAI-style error.
type requestError struct {
	param, code, msg string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(param, code, format string, args ...any) *requestError {
	return &requestError{param: param, code: code, msg: fmt.Sprintf(format, args...)}
}

// parseFacts reads the routing facts of a body sent to route; defaultModel applies to /generate
// bodies without a model.
func parseFacts(route string, raw []byte, defaultModel string) (*facts, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, badRequest("", "invalid_json", "the request body is empty; send a JSON object")
	}
	var b body
	if err := decodeBody(raw, &b); err != nil {
		return nil, bodyError(err)
	}
	if b.Model == "" && route == routeGenerate {
		b.Model = defaultModel
	}
	if b.Model == "" {
		return nil, badRequest("model", "missing_model", "you must provide a model parameter (the body's \"model\" field)")
	}
	f := &facts{model: b.Model, stream: b.Stream, prompt: prompt{model: b.Model}}
	var err error
	switch route {
	case routeChat:
		if f.prompt.texts, err = chatTexts(b.Messages); err != nil {
			return nil, err
		}
		f.prompt.messages = b.Messages
		f.maxOut, err = firstMax("max_completion_tokens", b.MaxCompletionTokens, "max_tokens", b.MaxTokens)
	case routeCompletions:
		err = f.readPrompt("prompt", b.Prompt, false)
		f.prompt.special = f.known == nil && !isFalse(b.AddSpecialTokens)
		if err == nil {
			f.maxOut, err = firstMax("max_tokens", b.MaxTokens, "", nil)
		}
		f.idsAt, f.idsEnd = promptIDsSpan(&b)
	case routeGenerate:
		if len(b.InputIDs) > 0 && !isNull(b.InputIDs) {
			err = f.readPrompt("input_ids", b.InputIDs, true)
		} else {
			err = f.readPrompt("text", b.Text, true)
			f.prompt.special = f.known == nil
		}
		if err == nil {
			f.maxOut, err = maxNewTokens(b.SamplingParams)
		}
	}
	if err != nil {
		return nil, err
	}
	if f.lora, err = firstString("lora_path", b.LoRAPath); err != nil {
		return nil, err
	}
	if f.cacheSalt, err = firstString("cache_salt", b.CacheSalt); err != nil {
		return nil, err
	}
	return f, nil
}

// firstString reads an optional field that is a string or, in a batched /generate, a list of
// them (one per prompt; null entries allowed): the first entry applies, since one Decide routes
// the whole batch. Absent, null or an empty list is "".
func firstString(field string, raw json.RawMessage) (string, error) {
	if len(raw) == 0 || isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var list []*string
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", badRequest(field, "invalid_"+field, "%s must be a string or a list of strings", field)
	}
	if len(list) == 0 || list[0] == nil {
		return "", nil
	}
	return *list[0], nil
}

// readPrompt reads a prompt field: a string, a list of strings, a list of token ids or a list
// of lists of token ids. A list of several prompts is a batch when batchable (SGLang /generate);
// otherwise (OpenAI completions) its prompts are counted together.
func (f *facts) readPrompt(field string, raw json.RawMessage, batchable bool) error {
	if len(raw) == 0 || isNull(raw) {
		return badRequest(field, "missing_"+field, "you must provide a %s parameter", field)
	}
	// A prompt of token ids, a common shape of a long one, is read by one scan: through
	// encoding/json it took three passes over the array (a failed decode as a string, then as
	// strings, each first checking the whole input) and a reflective decode of every number,
	// which a profile of a replay of long prompts put at most of the gateway's CPU during a
	// burst. Anything the scan does not take (an empty array, a negative or fractional id, ...)
	// goes the encoding/json way below, which also words the errors.
	if ids, ok := tokenids.Parse(raw); ok {
		f.known = &tokens{count: int64(len(ids)), ids: ids}
		return nil
	}
	// So is a prompt string without escapes (valid UTF-8, as plainString checks): its text is
	// its bytes, where encoding/json would check the whole value again, then unquote it.
	if plainString(raw) && raw[len(raw)-1] == '"' {
		f.prompt.texts = []string{string(raw[1 : len(raw)-1])}
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		f.prompt.texts = []string{s}
		return nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		f.prompt.texts = ss
		if batchable {
			f.batch = len(ss)
		}
		return nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		t, err := toTokenIDs(field, ids)
		if err != nil {
			return err
		}
		f.known = &t
		return nil
	}
	var lists [][]int64
	if err := json.Unmarshal(raw, &lists); err != nil {
		return badRequest(field, "invalid_"+field, "%s must be a string, a list of strings or a list of token ids", field)
	}
	if batchable {
		f.batch = len(lists)
	}
	var total int64
	for _, l := range lists {
		if _, err := toTokenIDs(field, l); err != nil {
			return err
		}
		total += int64(len(l))
	}
	if len(lists) == 1 {
		t, _ := toTokenIDs(field, lists[0])
		f.known = &t
		return nil
	}
	// Several prompts share no single prefix: count them, send no ids.
	f.known = &tokens{count: total}
	return nil
}

func toTokenIDs(field string, ids []int64) (tokens, error) {
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id > math.MaxUint32 {
			return tokens{}, badRequest(field, "invalid_"+field, "%s[%d] = %d is not a token id", field, i, id)
		}
		out[i] = uint32(id)
	}
	return tokens{count: int64(len(out)), ids: out}, nil
}

// chatTexts returns the text parts of a chat's messages in order: string contents, and the
// "text" of content parts.
func chatTexts(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, badRequest("messages", "missing_messages", "you must provide a messages parameter")
	}
	if texts, ok := chatTextsFast(raw); ok {
		return texts, nil
	}
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, badRequest("messages", "invalid_messages", "messages must be a list of message objects: %v", err)
	}
	texts := make([]string, 0, len(msgs))
	for i, m := range msgs {
		if len(m.Content) == 0 || isNull(m.Content) {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			texts = append(texts, s)
			continue
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "invalid_messages",
				"messages[%d].content must be a string or a list of content parts", i)
		}
		for _, p := range parts {
			if p.Type == "text" || p.Type == "" {
				texts = append(texts, p.Text)
			}
		}
	}
	return texts, nil
}

func firstMax(name1 string, v1 *int64, name2 string, v2 *int64) (*int64, error) {
	for _, c := range []struct {
		name string
		v    *int64
	}{{name1, v1}, {name2, v2}} {
		if c.v == nil {
			continue
		}
		if *c.v < 0 {
			return nil, badRequest(c.name, "invalid_"+c.name, "%s = %d must not be negative", c.name, *c.v)
		}
		return c.v, nil
	}
	return nil, nil
}

// maxNewTokens reads sampling_params.max_new_tokens; for a batch's list of sampling params it
// takes the largest.
func maxNewTokens(raw json.RawMessage) (*int64, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	type params struct {
		MaxNewTokens *int64 `json:"max_new_tokens"`
	}
	var list []params
	var one params
	if err := json.Unmarshal(raw, &one); err == nil {
		list = []params{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("sampling_params", "invalid_sampling_params", "sampling_params must be an object or a list of objects")
	}
	var out *int64
	for _, p := range list {
		v, err := firstMax("sampling_params.max_new_tokens", p.MaxNewTokens, "", nil)
		if err != nil {
			return nil, err
		}
		if v != nil && (out == nil || *v > *out) {
			out = v
		}
	}
	return out, nil
}

// expectedPeak is input + the output budget (per prompt of a batch), or nil when the budget is
// unknown. An overflow is a client error.
func expectedPeak(input int64, maxOut *int64, defaultMax int64, batch int) (*int64, error) {
	out := defaultMax
	if maxOut != nil {
		out = *maxOut
	}
	if maxOut == nil && defaultMax == 0 {
		return nil, nil
	}
	n := int64(max(batch, 1))
	if out > 0 && n > math.MaxInt64/out {
		return nil, badRequest("max_tokens", "token_overflow", "the output budget overflows int64")
	}
	out *= n
	if input > math.MaxInt64-out {
		return nil, badRequest("max_tokens", "token_overflow", "input tokens + max tokens overflow int64")
	}
	peak := input + out
	return &peak, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// isFalse reports whether raw is the JSON literal false.
func isFalse(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("false")) }

// promptIDsSpan is where the body's prompt lies when the engine may get it as the token ids the
// gateway's tokenizer found (Server.withPromptIDs): a string prompt the one-pass scan
// located, in a body without echo (whose answer repeats the prompt's text), a suffix, or
// add_special_tokens (which changes how the engine would tokenize it). (0, 0) otherwise.
func promptIDsSpan(b *body) (int, int) {
	set := func(v json.RawMessage) bool { return len(v) > 0 && !isNull(v) && string(v) != "false" }
	if b.promptEnd == 0 || b.Prompt[0] != '"' || set(b.Echo) || set(b.Suffix) || (len(b.AddSpecialTokens) > 0 && !isNull(b.AddSpecialTokens)) {
		return 0, 0
	}
	return b.promptAt, b.promptEnd
}
