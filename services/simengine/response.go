package simengine

import (
	"strings"

	"github.com/sluicehq/sluice/services/simengine/engine"
)

// responder renders one request's output in its route's shape: OpenAI chat, OpenAI text
// completion or SGLang /generate.
type responder struct {
	kind         routeKind
	model, id    string
	created      int64
	includeUsage bool
	text         strings.Builder // SGLang streams the cumulative text
	ids          []uint32
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usageOf(res engine.Result) *usage {
	u := &usage{PromptTokens: res.PromptTokens, CompletionTokens: res.CompletionTokens,
		TotalTokens: res.PromptTokens + res.CompletionTokens}
	u.PromptTokensDetails.CachedTokens = res.CachedTokens
	return u
}

func outputText(ids []uint32) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(detokenize(id))
	}
	return b.String()
}

// chunk is the SSE event of one token.
func (p *responder) chunk(tok engine.Token) any {
	piece := detokenize(tok.ID)
	switch p.kind {
	case kindChat:
		delta := map[string]any{"content": piece}
		if tok.Index == 0 {
			delta["role"] = "assistant"
		}
		return p.openAIChunk("chat.completion.chunk", map[string]any{"index": 0, "delta": delta, "finish_reason": nil}, nil)
	case kindCompletion:
		return p.openAIChunk("text_completion", map[string]any{"index": 0, "text": piece, "finish_reason": nil}, nil)
	}
	p.text.WriteString(piece)
	p.ids = append(p.ids, tok.ID)
	return map[string]any{"text": p.text.String(), "output_ids": p.ids,
		"meta_info": map[string]any{"id": p.id, "completion_tokens": len(p.ids), "finish_reason": nil}}
}

// closing are the events after the last token: OpenAI's finish chunk (and the usage chunk when
// asked); SGLang's last event carries the finish reason and usage in meta_info.
func (p *responder) closing(res engine.Result) []any {
	switch p.kind {
	case kindChat:
		out := []any{p.openAIChunk("chat.completion.chunk", map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": res.FinishReason}, nil)}
		if p.includeUsage {
			out = append(out, p.openAIChunk("chat.completion.chunk", nil, usageOf(res)))
		}
		return out
	case kindCompletion:
		out := []any{p.openAIChunk("text_completion", map[string]any{"index": 0, "text": "", "finish_reason": res.FinishReason}, nil)}
		if p.includeUsage {
			out = append(out, p.openAIChunk("text_completion", nil, usageOf(res)))
		}
		return out
	}
	return []any{p.final(res)}
}

func (p *responder) openAIChunk(object string, choice map[string]any, u *usage) map[string]any {
	m := map[string]any{"id": p.id, "object": object, "created": p.created, "model": p.model, "choices": []any{}}
	if choice != nil {
		m["choices"] = []any{choice}
	}
	if u != nil {
		m["usage"] = u
	}
	return m
}

// final is the whole non-streaming response.
func (p *responder) final(res engine.Result) any {
	text := outputText(res.OutputIDs)
	switch p.kind {
	case kindChat:
		return map[string]any{"id": p.id, "object": "chat.completion", "created": p.created, "model": p.model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text},
				"finish_reason": res.FinishReason}},
			"usage": usageOf(res)}
	case kindCompletion:
		return map[string]any{"id": p.id, "object": "text_completion", "created": p.created, "model": p.model,
			"choices": []any{map[string]any{"index": 0, "text": text, "finish_reason": res.FinishReason}},
			"usage":   usageOf(res)}
	}
	return map[string]any{"text": text, "output_ids": res.OutputIDs, "meta_info": map[string]any{
		"id": p.id, "prompt_tokens": res.PromptTokens, "completion_tokens": res.CompletionTokens,
		"cached_tokens": res.CachedTokens,
		"finish_reason": map[string]any{"type": res.FinishReason, "length": res.CompletionTokens},
		"e2e_latency":   res.Duration.Seconds(),
		"queue_time":    res.QueueTime.Seconds(),
		"prefill_time":  res.PrefillTime.Seconds(),
	}}
}
