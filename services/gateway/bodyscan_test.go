package gateway

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

var bodySamples = []string{
	`{"model":"m","messages":[{"role":"user","content":"hello world!"}],"max_tokens":16,"stream":true}`,
	`{"model":"m","prompt":"abc","max_tokens":null,"stream":false,"temperature":0.5,"tools":[{"a":{"b":"}]"}}]}`,
	` { "model" : "m\u00e9" , "prompt" : ["a","b"], "lora_path": null, "cache_salt":"s" } `,
	`{"Model":"m","prompt":"x"}`,
	`{"model":"a","model":"b"}`,
	`{"model":1}`, `{"model":null,"text":"t"}`, `{"stream":1}`, `{"stream":null}`,
	`{"max_tokens":1.5}`, `{"max_tokens":-3}`, `{"max_tokens":-0}`, `{"max_tokens":0}`, `{"max_tokens":123456789012345678}`, `{"max_tokens":-923372036854775808}`, `{"max_tokens":9223372036854775807}`, `{"max_tokens":1e2}`, `{"max_tokens":99999999999999999999}`, `{"max_completion_tokens":7,"max_tokens":3}`,
	`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":4}}`,
	`{"modeſ":"x"}`, `{"mod\u0065l":"x"}`, "{\"model\":\"\xff\"}",
	`null`, `[]`, `"x"`, `{}`, `{"model":"m"`, `{"model" "m"}`, ``, `{"a":[1,{"b":[2,"]"]}],"model":"m"}`,
}

var messageSamples = []string{
	`[{"role":"user","content":"hello"},{"role":"assistant","content":null},{"role":"user"}]`,
	`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]`,
	`[{"content":"a\nb"}]`, `[{"Content":"x"}]`, `[{"content":"a","content":"b"}]`, `[null]`, `["x"]`, `[]`,
	`[{"content":1}]`, "[{\"content\":\"\xff\"}]", `{"content":"x"}`,
}

// decodeBody gives exactly what json.Unmarshal gives: the same fields, the same error text.
func TestDecodeBodyMatchesEncodingJSON(t *testing.T) {
	for _, in := range bodySamples {
		checkDecodeBody(t, []byte(in))
	}
	var b body
	if !scanBody([]byte(bodySamples[0]), &b) {
		t.Error("a plain chat body took the slow path")
	}
}

func TestChatTextsFastMatchesEncodingJSON(t *testing.T) {
	for _, in := range messageSamples {
		checkChatTexts(t, []byte(in))
	}
	if _, ok := chatTextsFast([]byte(messageSamples[0])); !ok {
		t.Error("plain messages took the slow path")
	}
}

func FuzzDecodeBody(f *testing.F) {
	for _, in := range append(bodySamples, messageSamples...) {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkDecodeBody(t, raw)
		if json.Valid(raw) {
			checkChatTexts(t, raw)
		}
	})
}

func checkDecodeBody(t *testing.T, raw []byte) {
	t.Helper()
	var want, got body
	werr := json.Unmarshal(raw, &want)
	gerr := decodeBody(raw, &got)
	if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
		t.Errorf("decodeBody(%q) error %v; encoding/json: %v", raw, gerr, werr)
		return
	}
	// Where the scan found the prompt is its own (encoding/json says nothing of it): the
	// span must hold exactly the prompt's value.
	if got.promptEnd != 0 && string(raw[got.promptAt:got.promptEnd]) != string(got.Prompt) {
		t.Errorf("decodeBody(%q): prompt span [%d:%d] holds %q, the prompt is %q", raw, got.promptAt, got.promptEnd, raw[got.promptAt:got.promptEnd], got.Prompt)
	}
	got.promptAt, got.promptEnd = 0, 0
	if werr == nil && !reflect.DeepEqual(normal(want), normal(got)) {
		t.Errorf("decodeBody(%q) = %+v; encoding/json: %+v", raw, got, want)
	}
}

// normal makes empty raw members nil on both sides (encoding/json keeps none for absent ones).
func normal(b body) body {
	for _, r := range []*json.RawMessage{&b.Messages, &b.Prompt, &b.Text, &b.InputIDs, &b.SamplingParams, &b.LoRAPath, &b.CacheSalt,
		&b.Echo, &b.Suffix, &b.AddSpecialTokens} {
		if len(*r) == 0 {
			*r = nil
		}
	}
	return b
}

// slowChatTexts is chatTexts without the fast path.
func slowChatTexts(raw []byte) ([]string, error) {
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, err
	}
	var texts []string
	for _, m := range msgs {
		if len(m.Content) == 0 || isNull(m.Content) {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			texts = append(texts, s)
			continue
		}
		return nil, errNotPlain
	}
	return texts, nil
}

var errNotPlain = errors.New("content is not a string")

func checkChatTexts(t *testing.T, raw []byte) {
	t.Helper()
	fast, ok := chatTextsFast(raw)
	if !ok {
		return
	}
	want, err := slowChatTexts(raw)
	if err != nil || len(want) != len(fast) || (len(want) > 0 && !reflect.DeepEqual(want, fast)) {
		t.Errorf("chatTextsFast(%q) = %q; encoding/json: %q, %v", raw, fast, want, err)
	}
}
