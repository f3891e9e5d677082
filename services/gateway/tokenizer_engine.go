package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/components/tokenids"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// engineLister lists the decider's engines; the AdminService client satisfies it.
type engineLister interface {
	ListEngines(ctx context.Context, in *sluicev1.ListEnginesRequest, opts ...grpc.CallOption) (*sluicev1.ListEnginesResponse, error)
}

// engineTokenizer asks an engine's /tokenize (vLLM and SGLang shape: {"model", "prompt"} or
// {"model", "messages"} → {"tokens": [...], "count": N}), so token ids are exactly the
// engine's, chat template included. Without a fixed URL it spreads the calls round-robin over
// the healthy engines of the model (plain or prefill, which see whole prompts; else any role),
// listed once and kept until a call to one of them fails, so no single engine answers every
// /tokenize of the fleet.
type engineTokenizer struct {
	client   httpDoer
	fixedURL string
	engines  engineLister
	timeout  time.Duration

	mu      sync.Mutex
	byModel map[string]*tokenizerEngines
}

// tokenizerEngines are the base URLs one model's /tokenize calls rotate over.
type tokenizerEngines struct {
	urls []string
	next atomic.Uint64
}

func (t *tokenizerEngines) pick() string { return t.urls[(t.next.Add(1)-1)%uint64(len(t.urls))] }

var _ tokenizer = (*engineTokenizer)(nil)

// httpDoer sends one HTTP exchange (*http.Client, engineDoer).
type httpDoer interface {
	Do(req *http.Request) (*http.Response, error)
}

func newEngineTokenizer(client httpDoer, fixedURL string, engines engineLister, timeout time.Duration) *engineTokenizer {
	return &engineTokenizer{client: client, fixedURL: strings.TrimRight(fixedURL, "/"), engines: engines, timeout: timeout,
		byModel: map[string]*tokenizerEngines{}}
}

// errNoTokenizerEngine means no engine serves the model, so none can tokenize for it.
var errNoTokenizerEngine = errors.New("no healthy engine serves the model")

func (e *engineTokenizer) tokenize(ctx context.Context, p prompt) (tokens, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	base, err := e.engineURL(ctx, p.model)
	if err != nil {
		return tokens{}, err
	}
	out, err := e.call(ctx, base, tokenizeBody(p))
	if err != nil {
		e.forget(p.model)
		return tokens{}, err
	}
	return out, nil
}

// tokenizeBody is the /tokenize request of p, written directly: the model as a JSON string,
// and the chat's messages as the client sent them (the gateway parsed them already, so they
// are valid JSON) or the prompt text joined, with add_special_tokens false when the request
// turned them off (vLLM's and SGLang's /tokenize add them to a prompt by default, as their
// completions do).
func tokenizeBody(p prompt) []byte {
	model := jsonString(p.model)
	if p.messages != nil {
		b := make([]byte, 0, len(model)+len(p.messages)+32)
		b = append(append(append(b, `{"model":`...), model...), `,"messages":`...)
		return append(append(b, p.messages...), '}')
	}
	text, _ := json.Marshal(strings.Join(p.texts, ""))
	b := make([]byte, 0, len(model)+len(text)+32)
	b = append(append(append(b, `{"model":`...), model...), `,"prompt":`...)
	b = append(b, text...)
	if !p.special {
		b = append(b, `,"add_special_tokens":false`...)
	}
	return append(b, '}')
}

// jsonString is json.Marshal(s): a string of plain printable ASCII (no quote, backslash or
// character encoding/json escapes for HTML) is only quoted, anything else is marshalled.
func jsonString(s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return b
		}
	}
	b := make([]byte, 0, len(s)+2)
	return append(append(append(b, '"'), s...), '"')
}

// tokenizeHeader is every /tokenize request's header, shared: the transports only read it.
var tokenizeHeader = http.Header{"Content-Type": {"application/json"}}

// answerPool holds /tokenize answer buffers.
var answerPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (e *engineTokenizer) call(ctx context.Context, base string, body []byte) (tokens, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return tokens{}, err
	}
	hreq.Header = tokenizeHeader
	resp, err := e.client.Do(hreq)
	if err != nil {
		return tokens{}, fmt.Errorf("tokenize at %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return tokens{}, fmt.Errorf("tokenize at %s: HTTP %d: %s", base, resp.StatusCode, bytes.TrimSpace(msg))
	}
	buf := answerPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 { // keep small buffers only
			buf.Reset()
			answerPool.Put(buf)
		}
	}()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return tokens{}, fmt.Errorf("tokenize at %s: read answer: %w", base, err)
	}
	out, err := parseTokenizeAnswer(buf.Bytes())
	if err != nil {
		return tokens{}, fmt.Errorf("tokenize at %s: decode answer: %w", base, err)
	}
	return out, nil
}

// parseTokenizeAnswer reads {"tokens": [...], "count": N, ...}: the common shape by a direct
// scan (an id array of thousands of numbers through encoding/json's reflection cost more than
// the HTTP exchange), anything else by encoding/json, which also words the errors.
func parseTokenizeAnswer(b []byte) (tokens, error) {
	if t, ok := scanTokenizeAnswer(b); ok {
		return t, nil
	}
	return decodeTokenizeAnswer(b)
}

// decodeTokenizeAnswer reads an answer with encoding/json: the fallback of parseTokenizeAnswer
// and the reference its fast scan must agree with (tests).
func decodeTokenizeAnswer(b []byte) (tokens, error) {
	var out struct {
		Tokens []uint32 `json:"tokens"`
		Count  *int64   `json:"count"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return tokens{}, err
	}
	if out.Tokens == nil && out.Count != nil {
		return tokens{count: *out.Count}, nil
	}
	return tokens{count: int64(len(out.Tokens)), ids: out.Tokens}, nil
}

// scanTokenizeAnswer is parseTokenizeAnswer's fast path: an object whose "tokens" is an array
// of integers in uint32 range and whose other members are numbers, strings, booleans or null
// (count, max_model_len, ...). It reports false for anything else, including a duplicate or
// malformed member, so encoding/json decides those.
func scanTokenizeAnswer(b []byte) (tokens, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return tokens{}, false
	}
	var ids []uint32
	seen := false
	for i = skipSpace(b, i+1); ; {
		if i < len(b) && b[i] == '}' && !seen && ids == nil {
			break // {} or a trailing comma is checked below
		}
		if i >= len(b) || b[i] != '"' {
			return tokens{}, false
		}
		end := bytes.IndexByte(b[i+1:], '"')
		if end < 0 {
			return tokens{}, false
		}
		key := b[i+1 : i+1+end]
		if bytes.IndexByte(key, '\\') >= 0 {
			return tokens{}, false
		}
		i = skipSpace(b, i+2+end)
		if i >= len(b) || b[i] != ':' {
			return tokens{}, false
		}
		i = skipSpace(b, i+1)
		var ok bool
		if string(key) == "tokens" {
			if seen {
				return tokens{}, false
			}
			seen = true
			if ids, i, ok = tokenids.ScanArray(b, i); !ok {
				return tokens{}, false
			}
		} else if i, ok = skipScalar(b, i); !ok {
			return tokens{}, false
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			break
		}
		return tokens{}, false
	}
	if skipSpace(b, i+1) != len(b) || !seen || ids == nil {
		return tokens{}, false // no tokens (count only, or null): encoding/json's path
	}
	return tokens{count: int64(len(ids)), ids: ids}, true
}

func skipSpace(b []byte, i int) int { return tokenids.SkipSpace(b, i) }

// skipScalar skips a JSON number, a string without escapes, true, false or null at b[i].
func skipScalar(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		end := bytes.IndexByte(b[i+1:], '"')
		if end < 0 || bytes.IndexByte(b[i+1:i+1+end], '\\') >= 0 {
			return i, false
		}
		return i + 2 + end, true
	case c == '-' || (c >= '0' && c <= '9'):
		j := i
		for j < len(b) && (b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || (b[j] >= '0' && b[j] <= '9')) {
			j++
		}
		if !json.Valid(b[i:j]) {
			return i, false
		}
		return j, true
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(b[i:], []byte(lit)) {
			return i + len(lit), true
		}
	}
	return i, false
}

func (e *engineTokenizer) engineURL(ctx context.Context, model string) (string, error) {
	if e.fixedURL != "" {
		return e.fixedURL, nil
	}
	e.mu.Lock()
	t, ok := e.byModel[model]
	e.mu.Unlock()
	if ok {
		return t.pick(), nil
	}
	resp, err := e.engines.ListEngines(ctx, &sluicev1.ListEnginesRequest{Model: model})
	if err != nil {
		return "", fmt.Errorf("list engines of model %q: %w", model, err)
	}
	urls := tokenizerEngineURLs(resp.GetEngines())
	if len(urls) == 0 {
		return "", fmt.Errorf("model %q: %w", model, errNoTokenizerEngine)
	}
	t = &tokenizerEngines{urls: urls}
	e.mu.Lock()
	e.byModel[model] = t
	e.mu.Unlock()
	return t.pick(), nil
}

// tokenizerEngineURLs are the healthy plain and prefill engines (they see whole prompts), or
// when there are none the healthy engines of any role, in the order listed (by id).
func tokenizerEngineURLs(engines []*sluicev1.Engine) []string {
	var whole, every []string
	for _, en := range engines {
		if !en.GetHealthy() {
			continue
		}
		u := strings.TrimRight(en.GetUrl(), "/")
		switch en.GetRole() {
		case sluicev1.Role_ROLE_PLAIN, sluicev1.Role_ROLE_PREFILL:
			whole = append(whole, u)
		}
		every = append(every, u)
	}
	if len(whole) > 0 {
		return whole
	}
	return every
}

// forget drops a model's engine list after a failed call, so the next call lists the engines
// again (the failed one may be gone or unhealthy by then).
func (e *engineTokenizer) forget(model string) {
	if e.fixedURL != "" {
		return
	}
	e.mu.Lock()
	delete(e.byModel, model)
	e.mu.Unlock()
}
