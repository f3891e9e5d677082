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
	"time"

	"google.golang.org/grpc"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// engineLister lists the decider's engines; the AdminService client satisfies it.
type engineLister interface {
	ListEngines(ctx context.Context, in *sluicev1.ListEnginesRequest, opts ...grpc.CallOption) (*sluicev1.ListEnginesResponse, error)
}

// engineTokenizer asks an engine's /tokenize (vLLM and SGLang shape: {"model", "prompt"} or
// {"model", "messages"} → {"tokens": [...], "count": N}), so token ids are exactly the
// engine's, chat template included. Without a fixed URL it asks the first healthy engine of
// the model (plain or prefill preferred, ordered by id) and caches that choice per model
// until a call to it fails.
type engineTokenizer struct {
	client   *http.Client
	fixedURL string
	engines  engineLister
	timeout  time.Duration

	mu      sync.Mutex
	byModel map[string]string
}

var _ tokenizer = (*engineTokenizer)(nil)

func newEngineTokenizer(client *http.Client, fixedURL string, engines engineLister, timeout time.Duration) *engineTokenizer {
	return &engineTokenizer{client: client, fixedURL: strings.TrimRight(fixedURL, "/"), engines: engines, timeout: timeout,
		byModel: map[string]string{}}
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
	req := struct {
		Model    string          `json:"model"`
		Prompt   *string         `json:"prompt,omitempty"`
		Messages json.RawMessage `json:"messages,omitempty"`
	}{Model: p.model}
	if p.messages != nil {
		req.Messages = p.messages
	} else {
		text := strings.Join(p.texts, "")
		req.Prompt = &text
	}
	body, err := json.Marshal(req)
	if err != nil {
		return tokens{}, err
	}
	out, err := e.call(ctx, base, body)
	if err != nil {
		e.forget(p.model, base)
		return tokens{}, err
	}
	return out, nil
}

func (e *engineTokenizer) call(ctx context.Context, base string, body []byte) (tokens, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return tokens{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(hreq)
	if err != nil {
		return tokens{}, fmt.Errorf("tokenize at %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return tokens{}, fmt.Errorf("tokenize at %s: HTTP %d: %s", base, resp.StatusCode, bytes.TrimSpace(msg))
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
		Count  *int64   `json:"count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return tokens{}, fmt.Errorf("tokenize at %s: decode answer: %w", base, err)
	}
	if out.Tokens == nil && out.Count != nil {
		return tokens{count: *out.Count}, nil
	}
	return tokens{count: int64(len(out.Tokens)), ids: out.Tokens}, nil
}

func (e *engineTokenizer) engineURL(ctx context.Context, model string) (string, error) {
	if e.fixedURL != "" {
		return e.fixedURL, nil
	}
	e.mu.Lock()
	u, ok := e.byModel[model]
	e.mu.Unlock()
	if ok {
		return u, nil
	}
	resp, err := e.engines.ListEngines(ctx, &sluicev1.ListEnginesRequest{Model: model})
	if err != nil {
		return "", fmt.Errorf("list engines of model %q: %w", model, err)
	}
	u = firstTokenizerEngine(resp.GetEngines())
	if u == "" {
		return "", fmt.Errorf("model %q: %w", model, errNoTokenizerEngine)
	}
	e.mu.Lock()
	e.byModel[model] = u
	e.mu.Unlock()
	return u, nil
}

// firstTokenizerEngine picks the first healthy plain or prefill engine (they see whole
// prompts), else the first healthy engine of any role; engines arrive ordered by id.
func firstTokenizerEngine(engines []*sluicev1.Engine) string {
	var fallback string
	for _, en := range engines {
		if !en.GetHealthy() {
			continue
		}
		switch en.GetRole() {
		case sluicev1.Role_ROLE_PLAIN, sluicev1.Role_ROLE_PREFILL:
			return strings.TrimRight(en.GetUrl(), "/")
		}
		if fallback == "" {
			fallback = strings.TrimRight(en.GetUrl(), "/")
		}
	}
	return fallback
}

func (e *engineTokenizer) forget(model, base string) {
	if e.fixedURL != "" {
		return
	}
	e.mu.Lock()
	if e.byModel[model] == base {
		delete(e.byModel, model)
	}
	e.mu.Unlock()
}
