package gateway

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sync"
	"testing"
)

var tokenizeAnswers = []string{
	`{"tokens":[7,8,9,10],"count":4,"max_model_len":4096}`,
	` { "tokens" : [ 0 , 4294967295 ] , "count" : 2 } `,
	`{"count":3,"tokens":[1,2,3],"model":"m","ok":true,"x":null,"f":-1.5e3}`,
	`{"tokens":[]}`,
	`{"count":12}`,
	`{"tokens":null,"count":5}`,
	`{"tokens":[4294967296]}`,
	`{"tokens":[-1]}`,
	`{"tokens":[1.5]}`,
	`{"tokens":[01]}`,
	`{"tokens":[1,]}`,
	`{"tokens":[1],}`,
	`{"tokens":[1]} x`,
	`{"tokens":[1],"tokens":[2]}`,
	`{"tok\u0065ns":[1]}`,
	`{"tokens":[1],"name":"a\"b"}`,
	`{"tokens":[1],"nested":{"a":[1]}}`,
	`{}`, `[]`, ``, `{"tokens":[1]`, `{"tokens"[1]}`, `{"tokens":[1] "count":1}`,
}

// The fast scan answers exactly what encoding/json answers whenever it answers at all, and
// parseTokenizeAnswer as a whole agrees with encoding/json on every input.
func TestParseTokenizeAnswer(t *testing.T) {
	for _, in := range tokenizeAnswers {
		checkTokenizeAnswer(t, []byte(in))
	}
	if _, ok := scanTokenizeAnswer([]byte(tokenizeAnswers[0])); !ok {
		t.Error("the common answer shape took the slow path")
	}
}

func FuzzParseTokenizeAnswer(f *testing.F) {
	for _, in := range tokenizeAnswers {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkTokenizeAnswer(t, b) })
}

func checkTokenizeAnswer(t *testing.T, b []byte) {
	t.Helper()
	want, werr := decodeTokenizeAnswer(b)
	if fast, ok := scanTokenizeAnswer(b); ok {
		if werr != nil || !reflect.DeepEqual(fast, want) {
			t.Errorf("scan(%q) = %v; encoding/json: %v, %v", b, fast, want, werr)
		}
	}
	got, err := parseTokenizeAnswer(b)
	if (err != nil) != (werr != nil) || (err == nil && !reflect.DeepEqual(got, want)) {
		t.Errorf("parseTokenizeAnswer(%q) = %v, %v; encoding/json: %v, %v", b, got, err, want, werr)
	}
}

func TestTokenizeBody(t *testing.T) {
	var got map[string]any
	if err := json.Unmarshal(tokenizeBody(prompt{model: `m"1`, texts: []string{"a\n", "<b>"}, special: true}), &got); err != nil ||
		got["model"] != `m"1` || got["prompt"] != "a\n<b>" || len(got) != 2 {
		t.Errorf("prompt body = %v, %v", got, err)
	}
	got = nil
	if err := json.Unmarshal(tokenizeBody(prompt{model: "m", texts: []string{"a"}}), &got); err != nil ||
		got["prompt"] != "a" || got["add_special_tokens"] != false || len(got) != 3 {
		t.Errorf("prompt body without special tokens = %v, %v", got, err)
	}
	got = nil
	if err := json.Unmarshal(tokenizeBody(prompt{model: "m", messages: []byte(` [{"role":"user","content":"hi"}] `)}), &got); err != nil ||
		got["model"] != "m" || len(got["messages"].([]any)) != 1 || len(got) != 2 {
		t.Errorf("chat body = %v, %v", got, err)
	}
}

// Without -tokenizer-url the /tokenize calls rotate over every healthy engine of the model
// instead of all going to the first one.
func TestEngineTokenizerSpreadsOverEngines(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	var list []listEntry
	for _, id := range []string{"e1", "e2", "e3"} {
		e := newFakeEngine(t, id)
		e.setHandler(func(w http.ResponseWriter, r *http.Request, body []byte) {
			if r.URL.Path == "/tokenize" {
				mu.Lock()
				calls[id]++
				mu.Unlock()
				_, _ = w.Write([]byte(`{"tokens":[1,2,3],"count":3}`))
				return
			}
			e.answerJSON(w, r, body)
		})
		list = append(list, listEntry{engine: e, model: "m", role: "plain"})
	}
	d := startDecider(t, list, "")
	g := startGateway(t, d, func(c *Config) { c.Tokenizer = TokenizerEngine })
	for range 6 {
		readAll(t, post(t, g, routeChat, `{"model":"m","messages":[{"role":"user","content":"hello"}]}`))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"e1", "e2", "e3"} {
		if calls[id] != 2 {
			t.Errorf("/tokenize calls by engine = %v, want 2 each", calls)
			break
		}
	}
	waitLeases(t, d)
}
