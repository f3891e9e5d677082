package gateway

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/components/tokenids"
)

func TestParseFacts(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	tests := []struct {
		name, route, body string
		want              *facts
		wantCode          string
	}{
		{"chat strings and parts", routeChat,
			`{"model":"m","stream":true,"max_tokens":5,"max_completion_tokens":9,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"x"}}]},{"role":"assistant","content":null}]}`,
			&facts{model: "m", stream: true, maxOut: i64(9), prompt: prompt{model: "m", texts: []string{"be brief", "hi"}}}, ""},
		{"completion string", routeCompletions, `{"model":"m","prompt":"abc","max_tokens":3}`,
			&facts{model: "m", maxOut: i64(3), prompt: prompt{model: "m", texts: []string{"abc"}, special: true}, idsAt: 22, idsEnd: 27}, ""},
		{"completion without special tokens", routeCompletions, `{"model":"m","prompt":"abc","add_special_tokens":false}`,
			&facts{model: "m", prompt: prompt{model: "m", texts: []string{"abc"}}}, ""},
		{"completion with special tokens said", routeCompletions, `{"model":"m","prompt":"abc","add_special_tokens":true}`,
			&facts{model: "m", prompt: prompt{model: "m", texts: []string{"abc"}, special: true}}, ""},
		{"completion strings are counted together", routeCompletions, `{"model":"m","prompt":["a","b"]}`,
			&facts{model: "m", prompt: prompt{model: "m", texts: []string{"a", "b"}, special: true}}, ""},
		{"completion token ids", routeCompletions, `{"model":"m","prompt":[5,6]}`,
			&facts{model: "m", prompt: prompt{model: "m"}, known: &tokens{count: 2, ids: []uint32{5, 6}}}, ""},
		{"generate batch of texts", routeGenerate, `{"model":"m","text":["a","b","c"],"sampling_params":[{"max_new_tokens":2},{"max_new_tokens":7}]}`,
			&facts{model: "m", batch: 3, maxOut: i64(7), prompt: prompt{model: "m", texts: []string{"a", "b", "c"}, special: true}}, ""},
		{"generate input ids", routeGenerate, `{"model":"m","input_ids":[1,2,3],"text":"ignored"}`,
			&facts{model: "m", prompt: prompt{model: "m"}, known: &tokens{count: 3, ids: []uint32{1, 2, 3}}}, ""},
		{"generate one list of ids", routeGenerate, `{"model":"m","input_ids":[[1,2]]}`,
			&facts{model: "m", batch: 1, prompt: prompt{model: "m"}, known: &tokens{count: 2, ids: []uint32{1, 2}}}, ""},
		{"sglang lora_path and cache_salt", routeGenerate, `{"model":"m","text":"x","lora_path":"sql-lora","cache_salt":"t-1"}`,
			&facts{model: "m", lora: "sql-lora", cacheSalt: "t-1", prompt: prompt{model: "m", texts: []string{"x"}, special: true}}, ""},
		{"batched lora_path takes the first", routeGenerate, `{"model":"m","text":["x","y"],"lora_path":["a",null]}`,
			&facts{model: "m", batch: 2, lora: "a", prompt: prompt{model: "m", texts: []string{"x", "y"}, special: true}}, ""},
		{"vllm cache_salt, null lora_path", routeChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"cache_salt":"s","lora_path":null}`,
			&facts{model: "m", cacheSalt: "s", prompt: prompt{model: "m", texts: []string{"x"}}}, ""},
		{"bad lora_path", routeGenerate, `{"model":"m","text":"x","lora_path":5}`, nil, "invalid_lora_path"},
		{"bad cache_salt", routeChat, `{"model":"m","messages":[],"cache_salt":{}}`, nil, "invalid_cache_salt"},
		{"missing model", routeChat, `{"messages":[]}`, nil, "missing_model"},
		{"not an object", routeChat, `[1]`, nil, "invalid_json"},
		{"missing messages", routeChat, `{"model":"m"}`, nil, "missing_messages"},
		{"bad content", routeChat, `{"model":"m","messages":[{"content":5}]}`, nil, "invalid_messages"},
		{"missing prompt", routeCompletions, `{"model":"m"}`, nil, "missing_prompt"},
		{"bad token id", routeCompletions, `{"model":"m","prompt":[-1]}`, nil, "invalid_prompt"},
		{"token id too large", routeGenerate, `{"model":"m","input_ids":[4294967296]}`, nil, "invalid_input_ids"},
		{"negative max_new_tokens", routeGenerate, `{"model":"m","text":"x","sampling_params":{"max_new_tokens":-2}}`, nil, "invalid_sampling_params.max_new_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFacts(tt.route, []byte(tt.body), "")
			if tt.wantCode != "" {
				var re *requestError
				if !errors.As(err, &re) || re.code != tt.wantCode {
					t.Fatalf("parseFacts() error = %v, want code %s", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != nil {
				got.prompt.messages = nil
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(facts{}, prompt{}, tokens{})); diff != "" {
				t.Errorf("parseFacts() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExpectedPeak(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	tests := []struct {
		name         string
		input        int64
		maxOut       *int64
		def          int64
		batch        int
		want         *int64
		wantOverflow bool
	}{
		{"asked", 10, i64(5), 100, 0, i64(15), false},
		{"default", 10, nil, 100, 0, i64(110), false},
		{"unknown", 10, nil, 0, 0, nil, false},
		{"zero asked", 10, i64(0), 0, 0, i64(10), false},
		{"batch", 10, i64(5), 0, 3, i64(25), false},
		{"overflow", 10, i64(math.MaxInt64 - 5), 0, 0, nil, true},
		{"batch overflow", 1, i64(math.MaxInt64 / 2), 0, 3, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := expectedPeak(tt.input, tt.maxOut, tt.def, tt.batch)
			if (err != nil) != tt.wantOverflow {
				t.Fatalf("expectedPeak() error = %v, want overflow %v", err, tt.wantOverflow)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("expectedPeak() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBootstrapInject(t *testing.T) {
	tests := []struct {
		name, url, body string
		port            uint32
		batch           int
		wantHost        any
		wantPort        any
	}{
		{"ipv4", "http://10.0.0.5:30000", `{"model":"m"}`, 8998, 0, "10.0.0.5", 8998.0},
		{"ipv6 bracketed", "http://[fd00::1]:30000/", " {\"model\":\"m\"} \n", 8998, 0, "[fd00::1]", 8998.0},
		{"hostname, no port known", "https://prefill.internal", `{}`, 0, 0, "prefill.internal", nil},
		{"batch", "http://h:1", `{"text":["a","b"]}`, 7, 2, []any{"h", "h"}, []any{7.0, 7.0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bs, err := newBootstrap(tt.url, tt.port, tt.batch)
			if err != nil {
				t.Fatal(err)
			}
			out, err := bs.inject([]byte(tt.body), tt.batch)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("inject() = %s: invalid JSON: %v", out, err)
			}
			if diff := cmp.Diff(tt.wantHost, got["bootstrap_host"]); diff != "" {
				t.Errorf("bootstrap_host mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantPort, got["bootstrap_port"]); diff != "" {
				t.Errorf("bootstrap_port mismatch (-want +got):\n%s", diff)
			}
			for _, r := range bs.rooms {
				if r >= 1<<63 {
					t.Errorf("room %d outside [0, 2^63)", r)
				}
			}
			if !strings.HasPrefix(string(out), strings.TrimSuffix(strings.TrimRight(tt.body, " \t\r\n"), "}")) {
				t.Errorf("inject() = %s changed the client's bytes", out)
			}
		})
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{`} {
		bs, _ := newBootstrap("http://h:1", 1, 0)
		if out, err := bs.inject([]byte(bad), 0); err == nil {
			t.Errorf("inject(%q) = %s, want an error", bad, out)
		}
	}
}

// FuzzParseFacts checks the body decoder never panics and that PD injection of any body it
// accepts yields valid JSON carrying the room.
func FuzzParseFacts(f *testing.F) {
	for _, s := range []string{`{"model":"m","messages":[{"content":"x"}]}`, `{"model":"m","prompt":[1,2]}`,
		`{"model":"m","text":["a"],"sampling_params":[{}]}`, `{"model":"m","input_ids":[[1],[2]]}`, `{}`, `{"model":"m","prompt":"\u00e9"} `,
		`{"model":"m","text":["a","b"],"lora_path":["x",null],"cache_salt":"s"}`, `{"model":"m","messages":[],"lora_path":"x"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, route := range []string{routeChat, routeCompletions, routeGenerate} {
			fa, err := parseFacts(route, []byte(body), "")
			if err != nil {
				continue
			}
			bs, _ := newBootstrap("http://[::1]:1", 2, fa.batch)
			out, err := bs.inject([]byte(body), fa.batch)
			if err != nil {
				t.Fatalf("inject(%q) of an accepted body: %v", body, err)
			}
			var m map[string]any
			if err := json.Unmarshal(out, &m); err != nil || m["bootstrap_room"] == nil {
				t.Fatalf("inject(%q) = %s: %v", body, out, err)
			}
		}
	})
}

func TestDefaultModelForGenerate(t *testing.T) {
	f, err := parseFacts(routeGenerate, []byte(`{"text":"hello world"}`), "sim-pd")
	if err != nil || f.model != "sim-pd" {
		t.Fatalf("parseFacts(/generate without model) = %+v, %v; want the default model", f, err)
	}
	if _, err := parseFacts(routeChat, []byte(`{"messages":[{"role":"user","content":"x"}]}`), "sim-pd"); err == nil {
		t.Error("the default model leaked into /v1/chat/completions, where the model is required")
	}
	if _, err := parseFacts(routeGenerate, []byte(`{"text":"x"}`), ""); err == nil {
		t.Error("/generate without a model and without -default-model was accepted")
	}
}

// FuzzScanPromptIDs checks that the token-id scan of readPrompt takes only what encoding/json
// reads as a non-empty list of uint32 ids, and reads it the same.
func FuzzScanPromptIDs(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, ` [ 0 , 4294967295 ] `, `[4294967296]`, `[-1]`, `[1.0]`, `[1e3]`, `[]`, `[01]`,
		`["a"]`, `[[1,2]]`, `[1,]`, `[1 2]`, `"12"`, `[1]x`, `[18446744073709551617]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !json.Valid([]byte(raw)) {
			return // readPrompt gets raw from a body already checked to be valid JSON
		}
		got, ok := tokenids.Parse([]byte(raw))
		var ref []int64
		refOK := json.Unmarshal([]byte(raw), &ref) == nil && len(ref) > 0
		var want tokens
		if refOK {
			var err error
			if want, err = toTokenIDs("prompt", ref); err != nil {
				refOK = false
			}
		}
		if !ok {
			return // encoding/json reads it, as before
		}
		if !refOK {
			t.Fatalf("tokenids.Parse(%q) = %v, but encoding/json does not read it as token ids", raw, got)
		}
		if !slices.Equal(got, want.ids) {
			t.Fatalf("tokenids.Parse(%q) = %v, encoding/json %v", raw, got, want.ids)
		}
	})
}

func TestScanPromptIDsTakesTheCommonShape(t *testing.T) {
	for _, raw := range []string{`[1,2,3]`, ` [ 0 ,	4294967295 ]
`} {
		if _, ok := tokenids.Parse([]byte(raw)); !ok {
			t.Errorf("tokenids.Parse(%q) left a plain id list to encoding/json", raw)
		}
	}
	for _, raw := range []string{`[]`, `[-1]`, `[1.5]`, `[1e3]`, `[4294967296]`, `["1"]`, `[[1]]`, `"1"`} {
		if ids, ok := tokenids.Parse([]byte(raw)); ok {
			t.Errorf("tokenids.Parse(%q) = %v, want it left to encoding/json", raw, ids)
		}
	}
}

// FuzzPlainPromptString checks readPrompt's shortcut for a prompt string without escapes: the
// text it takes is encoding/json's reading of the same value.
func FuzzPlainPromptString(f *testing.F) {
	for _, s := range []string{`"abc"`, `""`, `"a\"b"`, `"\u00e9"`, "\"\xff\"", `"é"`, `"a b"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !json.Valid([]byte(raw)) {
			return
		}
		var fa facts
		if err := fa.readPrompt("prompt", json.RawMessage(raw), true); err != nil || fa.known != nil {
			return
		}
		var want string
		if json.Unmarshal([]byte(raw), &want) != nil {
			return // a list of strings: encoding/json's path, unchanged
		}
		if len(fa.prompt.texts) != 1 || fa.prompt.texts[0] != want {
			t.Fatalf("readPrompt(%q) = %q, encoding/json %q", raw, fa.prompt.texts, want)
		}
	})
}

// BenchmarkParseFacts reads the facts of /v1/completions bodies with a long prompt of 10,000
// tokens (the Mooncake trace's median is ~9,000): as token ids (66 KB) and as words (73 KB).
func BenchmarkParseFacts(b *testing.B) {
	long := func(open, sep, close string, item func(int) string) []byte {
		var sb strings.Builder
		sb.WriteString(`{"model":"m","max_tokens":128,"stream":true,"stream_options":{"include_usage":true},"prompt":` + open)
		for i := range 10000 {
			if i > 0 {
				sb.WriteString(sep)
			}
			sb.WriteString(item(i * 7919 % 151936))
		}
		sb.WriteString(close + `}`)
		return []byte(sb.String())
	}
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"token_ids", long("[", ",", "]", strconv.Itoa)},
		{"text", long(`"`, " ", `"`, func(v int) string { return "w" + strconv.Itoa(v) })},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseFacts(routeCompletions, c.body, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
