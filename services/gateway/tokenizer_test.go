package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

func TestHFTokenizer(t *testing.T) {
	tk, err := loadHFTokenizer("testdata/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		p    prompt
		want tokens
	}{
		{"text", prompt{texts: []string{"hello world!"}}, tokens{count: 3, ids: []uint32{260, 265, 34}}},
		{"chat parts joined by newlines", prompt{texts: []string{"hello", "hello"}}, tokens{count: 3, ids: []uint32{260, 11, 260}}},
		{"unmerged bytes", prompt{texts: []string{"hé"}}, tokens{count: 3, ids: []uint32{105, 196, 170}}},
		{"empty", prompt{}, tokens{count: 0, ids: []uint32{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tk.tokenize(context.Background(), tt.p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(tokens{})); diff != "" {
				t.Errorf("tokenize(%v) mismatch (-want +got):\n%s", tt.p.texts, diff)
			}
		})
	}
	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					if got, err := tk.tokenize(context.Background(), prompt{texts: []string{"hello world!"}}); err != nil || got.count != 3 {
						t.Errorf("tokenize = %v, %v", got, err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
	// tokenizer_bos.json is tokenizer.json with a Llama 3 style post-processor (ByteLevel, then a
	// TemplateProcessing that prepends a BOS, here id 0); the expected ids are what Hugging Face
	// tokenizers 0.23 encodes with add_special_tokens on and off.
	bos, err := loadHFTokenizer("testdata/tokenizer_bos.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		p    prompt
		want []uint32
	}{
		{prompt{texts: []string{"hello world!"}, special: true}, []uint32{0, 260, 265, 34}},
		{prompt{texts: []string{"hello world!"}}, []uint32{260, 265, 34}},
		{prompt{texts: []string{"hello", "hello"}}, []uint32{260, 11, 260}},
		{prompt{special: true}, []uint32{0}},
	} {
		got, err := bos.tokenize(context.Background(), tt.p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.ids, tt.want) || got.count != int64(len(tt.want)) {
			t.Errorf("BOS tokenizer: tokenize(%q, special %v) = %v (count %d), want %v", tt.p.texts, tt.p.special, got.ids, got.count, tt.want)
		}
	}
	for _, bad := range []string{"testdata/missing.json", "testdata"} {
		if _, err := loadHFTokenizer(bad); err == nil {
			t.Errorf("loadHFTokenizer(%q) succeeded, want an error", bad)
		}
	}
}

func TestGatewayTokenizerModes(t *testing.T) {
	e1 := newFakeEngine(t, "e1")
	var mu sync.Mutex
	var tokenizeBodies []string
	e1.setHandler(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path == "/tokenize" {
			mu.Lock()
			tokenizeBodies = append(tokenizeBodies, string(body))
			mu.Unlock()
			_, _ = w.Write([]byte(`{"tokens":[7,8,9,10],"count":4,"max_model_len":4096}`))
			return
		}
		e1.answerJSON(w, r, body)
	})
	d := startDecider(t, []listEntry{{engine: e1, model: "m", role: "plain"}}, "")
	rd := startRecordingDecider(t, d)
	chat := `{"model":"m","messages":[{"role":"user","content":"hello world!"}]}`

	t.Run("hf", func(t *testing.T) {
		g := startGatewayAt(t, rd.addr, func(c *Config) { c.Tokenizer = "hf:testdata/tokenizer.json" })
		readAll(t, post(t, g, routeCompletions, `{"model":"m","prompt":"hello world!","max_tokens":5}`, "X-Request-Id", "hf"))
		want := &sluicev1.DecideRequest{Model: "m", InputTokens: 3, ExpectedPeakTokens: proto.Int64(8), TokenIds: []uint32{260, 265, 34}, RequestId: "hf"}
		if diff := cmp.Diff(want, lastDecide(t, rd), protocmp.Transform()); diff != "" {
			t.Errorf("Decide mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("hf adds the special tokens the engine adds", func(t *testing.T) {
		g := startGatewayAt(t, rd.addr, func(c *Config) { c.Tokenizer = "hf:testdata/tokenizer_bos.json" })
		for _, tt := range []struct {
			route, body string
			want        []uint32
		}{
			{routeCompletions, `{"model":"m","prompt":"hello world!","max_tokens":5}`, []uint32{0, 260, 265, 34}},
			{routeCompletions, `{"model":"m","prompt":"hello world!","max_tokens":5,"add_special_tokens":false}`, []uint32{260, 265, 34}},
			{routeGenerate, `{"model":"m","text":"hello world!"}`, []uint32{0, 260, 265, 34}},
			// A chat's template writes its own special tokens, which the gateway does not apply.
			{routeChat, `{"model":"m","messages":[{"role":"user","content":"hello world!"}]}`, []uint32{260, 265, 34}},
		} {
			readAll(t, post(t, g, tt.route, tt.body, "X-Request-Id", "bos"))
			if got := lastDecide(t, rd); !slices.Equal(got.GetTokenIds(), tt.want) || got.GetInputTokens() != int64(len(tt.want)) {
				t.Errorf("%s %s: Decide token_ids %v input_tokens %d, want %v", tt.route, tt.body, got.GetTokenIds(), got.GetInputTokens(), tt.want)
			}
		}
	})
	t.Run("engine from ListEngines", func(t *testing.T) {
		g := startGatewayAt(t, rd.addr, func(c *Config) { c.Tokenizer = TokenizerEngine })
		for range 2 {
			readAll(t, post(t, g, routeChat, chat, "X-Request-Id", "eng"))
		}
		want := &sluicev1.DecideRequest{Model: "m", InputTokens: 4, TokenIds: []uint32{7, 8, 9, 10}, RequestId: "eng"}
		if diff := cmp.Diff(want, lastDecide(t, rd), protocmp.Transform()); diff != "" {
			t.Errorf("Decide mismatch (-want +got):\n%s", diff)
		}
		mu.Lock()
		defer mu.Unlock()
		var got struct {
			Model    string
			Messages []map[string]string
		}
		if len(tokenizeBodies) != 2 || json.Unmarshal([]byte(tokenizeBodies[0]), &got) != nil || got.Model != "m" || got.Messages[0]["content"] != "hello world!" {
			t.Errorf("/tokenize bodies = %q, want the chat's model and messages twice", tokenizeBodies)
		}
	})
	t.Run("engine down falls back to estimate", func(t *testing.T) {
		g := startGatewayAt(t, rd.addr, func(c *Config) { c.Tokenizer, c.TokenizerURL = TokenizerEngine, "http://127.0.0.1:1" })
		readAll(t, post(t, g, routeCompletions, `{"model":"m","prompt":"123456789"}`, "X-Request-Id", "fb"))
		want := &sluicev1.DecideRequest{Model: "m", InputTokens: 3, RequestId: "fb"}
		if diff := cmp.Diff(want, lastDecide(t, rd), protocmp.Transform()); diff != "" {
			t.Errorf("Decide mismatch (-want +got):\n%s", diff)
		}
		if n := metricValue(t, g.Addr(), "sluice_gateway_tokenizer_fallbacks_total"); n != 1 {
			t.Errorf("tokenizer fallbacks = %v, want 1", n)
		}
	})
	waitLeases(t, d)
}

func lastDecide(t *testing.T, rd *recordingDecider) *sluicev1.DecideRequest {
	t.Helper()
	reqs := rd.requests()
	if len(reqs) == 0 {
		t.Fatal("no Decide call recorded")
	}
	return reqs[len(reqs)-1]
}
