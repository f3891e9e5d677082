package simengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/components/tokenids"
)

// genRequest is the union of the bodies of /v1/chat/completions, /v1/completions and /generate
// that the simulation reads; every other field is ignored.
type genRequest struct {
	Model    string        `json:"model"`
	Messages []ChatMessage `json:"messages"`
	// Prompt (completions) is a string, a list of strings, a list of token ids or a list of lists.
	Prompt json.RawMessage `json:"prompt"`
	// Text and InputIDs are /generate's; InputIDs may be a list of lists (batched).
	Text     json.RawMessage `json:"text"`
	InputIDs json.RawMessage `json:"input_ids"`
	TokenIDs json.RawMessage `json:"token_ids"`

	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	SamplingParams      struct {
		MaxNewTokens *int `json:"max_new_tokens"`
	} `json:"sampling_params"`
	Stream        bool `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`

	// LoRAPath is SGLang's adapter selector: a name, or a list (batched) whose first is used.
	LoRAPath json.RawMessage `json:"lora_path"`
	// CacheSalt namespaces the request's prefix-cache blocks (vLLM's and SGLang's cache_salt).
	CacheSalt string `json:"cache_salt"`
	// DataParallelRank pins the request to a DP rank (SGLang's field); nil lets the engine
	// choose.
	DataParallelRank *int `json:"data_parallel_rank"`

	BootstrapHost json.RawMessage `json:"bootstrap_host"`
	BootstrapPort json.RawMessage `json:"bootstrap_port"`
	BootstrapRoom json.RawMessage `json:"bootstrap_room"`
}

// bootstrap is the PD handoff record of one request.
type bootstrap struct {
	Host string
	Port int
	Room uint64
}

// loraName returns the LoRA adapter the request runs with: SGLang's lora_path, else its model
// when that is one of adapters, else "" (the base model). A lora_path that names no served
// adapter is an error, as in SGLang.
func (r *genRequest) loraName(adapters []string) (string, error) {
	if len(r.LoRAPath) > 0 && string(r.LoRAPath) != "null" {
		var one string
		if err := json.Unmarshal(r.LoRAPath, &one); err != nil {
			var many []string
			if err := json.Unmarshal(r.LoRAPath, &many); err != nil || len(many) == 0 {
				return "", errors.New("lora_path: want an adapter name or a list of them")
			}
			one = many[0]
		}
		if one == "" {
			return "", nil
		}
		if !slices.Contains(adapters, one) {
			return "", fmt.Errorf("lora_path %q: not a served adapter (served: %v)", one, adapters)
		}
		return one, nil
	}
	if slices.Contains(adapters, r.Model) {
		return r.Model, nil
	}
	return "", nil
}

// dpRankHeader is vLLM's request header pinning a request to a DP rank.
const dpRankHeader = "X-data-parallel-rank"

// dpRank returns the DP rank the request asks for: the body's data_parallel_rank, else vLLM's
// X-data-parallel-rank header, else nil.
func (r *genRequest) dpRank(h http.Header) (*int, error) {
	if r.DataParallelRank != nil {
		return r.DataParallelRank, nil
	}
	v := h.Get(dpRankHeader)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return nil, fmt.Errorf("%s %q: want an integer", dpRankHeader, v)
	}
	return &n, nil
}

func (r *genRequest) maxTokens() int {
	for _, v := range []*int{r.MaxCompletionTokens, r.MaxTokens, r.SamplingParams.MaxNewTokens} {
		if v != nil {
			return *v
		}
	}
	return 0
}

// tokens returns the prompt's token ids: explicit ids first (token_ids, input_ids, a prompt of
// ids), else the toy tokenization of the prompt, text or messages. Batched inputs use their
// first element.
func (r *genRequest) tokens() ([]uint32, error) {
	for _, raw := range []json.RawMessage{r.TokenIDs, r.InputIDs, r.Prompt} {
		if ids, ok, err := tokenIDs(raw); err != nil || ok {
			return ids, err
		}
	}
	for _, raw := range []json.RawMessage{r.Prompt, r.Text} {
		if s, ok := firstString(raw); ok {
			return Tokenize(s), nil
		}
	}
	if len(r.Messages) > 0 {
		return TokenizeMessages(r.Messages), nil
	}
	return nil, errors.New("no prompt: give messages, prompt, text, input_ids or token_ids")
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// tokenIDs decodes a list of ids or a list of lists of ids (taking the first). ok is false when
// raw is absent or not a list of numbers.
func tokenIDs(raw json.RawMessage) ([]uint32, bool, error) {
	if isNull(raw) {
		return nil, false, nil
	}
	// A flat list of ids is read by one scan, as real engines take an id prompt without
	// tokenizing it (vLLM and SGLang validate the list and go on); through encoding/json a
	// 10,000-id prompt took longer here than tokenizing its text.
	if ids, ok := tokenids.Parse(raw); ok {
		return ids, true, nil
	}
	// Anything but a list is not ids: a text prompt of tens of KB went through two failed
	// decodes here (each a full validity pass) before it was read as text.
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '[' {
		return nil, false, nil
	}
	var flat []json.Number
	if err := json.Unmarshal(raw, &flat); err == nil {
		if len(flat) == 0 {
			return nil, false, nil
		}
		out := make([]uint32, len(flat))
		for i, n := range flat {
			v, err := strconv.ParseUint(n.String(), 10, 32)
			if err != nil {
				return nil, true, fmt.Errorf("token id %s: want an integer in 0..%d", n, math.MaxUint32)
			}
			out[i] = uint32(v)
		}
		return out, true, nil
	}
	var nested []json.RawMessage
	if err := json.Unmarshal(raw, &nested); err == nil && len(nested) > 0 {
		return tokenIDs(nested[0])
	}
	return nil, false, nil
}

func firstString(raw json.RawMessage) (string, bool) {
	if isNull(raw) {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
		return list[0], true
	}
	return "", false
}

// first unwraps a one-or-list value (SGLang batches send the bootstrap fields as lists).
func first(raw json.RawMessage) json.RawMessage {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
		return list[0]
	}
	return raw
}

// bootstrap returns the request's PD fields; ok is false when none is present, and an error
// names a field that is present but malformed or missing beside the others.
func (r *genRequest) bootstrap() (b bootstrap, ok bool, err error) {
	if isNull(r.BootstrapHost) && isNull(r.BootstrapPort) && isNull(r.BootstrapRoom) {
		return b, false, nil
	}
	var errs []error
	if err := json.Unmarshal(first(r.BootstrapHost), &b.Host); err != nil || b.Host == "" {
		errs = append(errs, errors.New("bootstrap_host: want a non-empty string"))
	}
	var port json.Number
	if err := json.Unmarshal(first(r.BootstrapPort), &port); err != nil {
		errs = append(errs, errors.New("bootstrap_port: want an integer port"))
	} else if p, err := strconv.ParseUint(port.String(), 10, 16); err != nil || p == 0 {
		errs = append(errs, fmt.Errorf("bootstrap_port %s: want 1..65535", port))
	} else {
		b.Port = int(p)
	}
	var room json.Number
	if err := json.Unmarshal(first(r.BootstrapRoom), &room); err != nil {
		errs = append(errs, errors.New("bootstrap_room: want an integer"))
	} else if v, err := strconv.ParseUint(room.String(), 10, 63); err != nil {
		errs = append(errs, fmt.Errorf("bootstrap_room %s: want an integer in [0, 2^63)", room))
	} else {
		b.Room = v
	}
	return b, true, errors.Join(errs...)
}
