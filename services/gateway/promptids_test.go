package gateway

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestPromptForwardedAsTokenIDs: with -tokenizer engine, a /v1/completions text prompt reaches
// the engine as the ids its /tokenize gave, the rest of the body byte for byte; a body whose
// answer or tokenization depends on the text (echo, suffix, add_special_tokens), a chat, a
// prompt the client sent as ids, a failed /tokenize, and -forward-token-ids=false all forward
// the body as the client sent it.
func TestPromptForwardedAsTokenIDs(t *testing.T) {
	e := newFakeEngine(t, "e1")
	failTokenize := false
	e.setHandler(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path == "/tokenize" {
			if failTokenize {
				http.Error(w, "tokenizer down", http.StatusInternalServerError)
				return
			}
			_, _ = w.Write([]byte(`{"tokens":[101,7,4294967295],"count":3,"max_model_len":4096}`))
			return
		}
		e.answerJSON(w, r, body)
	})
	d := startDecider(t, []listEntry{{engine: e, model: "m", role: "plain"}}, "")
	on := startGateway(t, d, func(c *Config) { c.Tokenizer = TokenizerEngine })
	off := startGateway(t, d, func(c *Config) { c.Tokenizer = TokenizerEngine; c.ForwardTokenIDs = false })
	estimate := startGateway(t, d, nil)

	forwarded := func(g *Server, route, body string) string {
		t.Helper()
		resp := post(t, g, route, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: HTTP %d: %s", route, body, resp.StatusCode, readAll(t, resp))
		}
		readAll(t, resp)
		reqs := e.requests()
		last := reqs[len(reqs)-1]
		if last.path != route {
			t.Fatalf("the engine's last request went to %s, want %s", last.path, route)
		}
		return string(last.body)
	}
	const text = `{"model":"m", "prompt" : "the cat\u00e9 sat",` + "\n" + `"max_tokens":5,"stream":false}`
	for _, c := range []struct {
		name, body string
		g          *Server
		route      string
		want       string // "" = the body as sent
	}{
		{"text prompt", text, on, routeCompletions, `{"model":"m", "prompt" : [101,7,4294967295],` + "\n" + `"max_tokens":5,"stream":false}`},
		{"prompt last", `{"max_tokens":5,"prompt":"x y z"}`, on, routeCompletions, `{"max_tokens":5,"prompt":[101,7,4294967295]}`},
		{"echo false", `{"model":"m","prompt":"a","echo":false}`, on, routeCompletions, `{"model":"m","prompt":[101,7,4294967295],"echo":false}`},
		{"echo", `{"model":"m","prompt":"a","echo":true}`, on, routeCompletions, ""},
		{"suffix", `{"model":"m","prompt":"a","suffix":"b"}`, on, routeCompletions, ""},
		{"add_special_tokens", `{"model":"m","prompt":"a","add_special_tokens":false}`, on, routeCompletions, ""},
		{"list of one string", `{"model":"m","prompt":["a"]}`, on, routeCompletions, ""},
		{"ids from the client", `{"model":"m","prompt":[5,6]}`, on, routeCompletions, ""},
		{"chat", `{"model":"m","messages":[{"role":"user","content":"a"}]}`, on, routeChat, ""},
		{"flag off", text, off, routeCompletions, ""},
		{"estimate tokenizer", text, estimate, routeCompletions, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := c.body
			if c.name == "prompt last" {
				body = `{"model":"m",` + body[1:]
				c.want = `{"model":"m",` + c.want[1:]
			}
			want := c.want
			if want == "" {
				want = body
			}
			if got := forwarded(c.g, c.route, body); got != want {
				t.Errorf("the engine got\n%s\nwant\n%s", got, want)
			}
			if !json.Valid([]byte(want)) {
				t.Fatalf("bad test: %s is not JSON", want)
			}
		})
	}
	t.Run("tokenize failed", func(t *testing.T) {
		failTokenize = true
		defer func() { failTokenize = false }()
		if got := forwarded(on, routeCompletions, text); got != text {
			t.Errorf("after a failed /tokenize the engine got\n%s\nwant the body as sent", got)
		}
	})
	waitLeases(t, d)
}
