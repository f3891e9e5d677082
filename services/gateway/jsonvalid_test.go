package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

var validSamples = []string{
	``, ` `, `{}`, `[]`, `{"a":1}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{1:2}`, `{"a":1 "b":2}`,
	`"x"`, `"\u00e9\n\t\"\\\/\b\f\r"`, `"\u00g0"`, `"\u00e"`, `"\x"`, "\"a\x01\"", "\"\xff\"", `"unterminated`, `"\`,
	`0`, `-0`, `01`, `-`, `1.`, `.5`, `1.5e`, `1.5e+`, `1.5e+3`, `1E-3`, `-12.50e10`, `1e5.`, `+1`, `0x10`, `1 2`,
	`true`, `false`, `null`, `tru`, `nul`, `True`, `nulll`, `[true,false,null]`, ` {"a" : [ 1 , { "b" : null } ] } `,
	"\t\r\n[\n]\n", `[[[]]]`, `[[[]]`, `[]]`, `{"a":{"b":{"c":[1,2,{"d":"e"}]}}}`, `{"a":[}`, `[{]}`, `{]`, `[}`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"model":"m","messages":[{"role":"user","content":"hello world!"}],"max_tokens":16,"stream":true}`,
}

func TestValidJSONMatchesEncodingJSON(t *testing.T) {
	for _, in := range append(validSamples, bodySamples...) {
		if got, want := validJSON([]byte(in)), json.Valid([]byte(in)); got != want {
			t.Errorf("validJSON(%.80q) = %v, json.Valid = %v", in, got, want)
		}
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, in := range append(append(validSamples[:len(validSamples)-3:len(validSamples)-3], bodySamples...), messageSamples...) {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid = %v", b, got, want)
		}
	})
}

func BenchmarkValidJSON(b *testing.B) {
	body := []byte(`{"model":"sim","max_tokens":16,"stream":false,"messages":[{"role":"system","content":"` + strings.Repeat("lorem ipsum ", 64) +
		`"},{"role":"user","content":"` + strings.Repeat("dolor sit ", 20) + `"}]}`)
	b.Run("validJSON", func(b *testing.B) {
		for range b.N {
			validJSON(body)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		for range b.N {
			json.Valid(body)
		}
	})
}

func TestJSONStringMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "sim", "meta-llama/Llama-3.1-8B-Instruct", `a"b`, `a\b`, "a\nb", "<tag>", "a&b", "é", "\u2028", "\x7f", "\xff", "model:v1"} {
		want, _ := json.Marshal(s)
		if got := jsonString(s); string(got) != string(want) {
			t.Errorf("jsonString(%q) = %s, want %s", s, got, want)
		}
	}
}
