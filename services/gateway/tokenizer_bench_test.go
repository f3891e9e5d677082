package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkTokenizers measures one prompt's token count (and ids) by each tokenizer mode, for a
// chat the size of the closed-loop peer benchmark's (~900 bytes) and a 7 KB prompt:
//   - estimate: bytes ÷ 4, no ids;
//   - hf: the pure-Go github.com/sugarme/tokenizer on testdata/tokenizer.json (ByteLevel BPE);
//   - engine: the /tokenize exchange with an in-process HTTP server answering precomputed ids,
//     over the gateway's own engine transport. The server's side runs in the same process, so
//     this is an upper bound on the gateway's part of the round trip.
//
// Run: go test -run '^$' -bench BenchmarkTokenizers -benchmem ./services/gateway/
func BenchmarkTokenizers(b *testing.B) {
	hf, err := loadHFTokenizer("testdata/tokenizer.json")
	if err != nil {
		b.Fatal(err)
	}
	sizes := map[string]string{
		"chat_900B":  strings.Repeat("You are a helpful assistant for the routing team. Answer briefly. ", 13),
		"prompt_7KB": strings.Repeat("the quick brown fox jumps over the lazy dog and routes a request ", 110),
	}
	for _, name := range []string{"chat_900B", "prompt_7KB"} {
		text := sizes[name]
		p := prompt{model: "m", texts: []string{text}, special: true}
		ids, err := hf.tokenize(context.Background(), p)
		if err != nil {
			b.Fatal(err)
		}
		answer := tokenizeAnswerJSON(ids.ids)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf := make([]byte, 32<<10)
			for {
				if _, err := r.Body.Read(buf); err != nil {
					break
				}
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(answer)
		}))
		rt := newH1Transport(newEngineTransport())
		et := newEngineTokenizer(engineDoer{&http.Client{Transport: rt}, rt}, srv.URL, nil, 5*time.Second)
		modes := []struct {
			mode string
			tk   tokenizer
		}{{"estimate", estimator{}}, {"hf", hf}, {"engine", et}}
		for _, m := range modes {
			b.Run(fmt.Sprintf("%s/%s", name, m.mode), func(b *testing.B) {
				for b.Loop() {
					if _, err := m.tk.tokenize(context.Background(), p); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(text)), "bytes")
				b.ReportMetric(float64(len(ids.ids)), "tokens")
			})
		}
		srv.Close()
	}
}

func tokenizeAnswerJSON(ids []uint32) []byte {
	var sb strings.Builder
	sb.WriteString(`{"tokens":[`)
	for i, id := range ids {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprint(&sb, id)
	}
	fmt.Fprintf(&sb, `],"count":%d,"max_model_len":4096}`, len(ids))
	return []byte(sb.String())
}
