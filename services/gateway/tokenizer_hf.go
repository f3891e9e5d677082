package gateway

import (
	"context"
	"fmt"
	"os"
	"strings"

	hftokenizer "github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/pretrained"
)

// hfTokenizer counts tokens with a Hugging Face tokenizer.json loaded by the pure-Go
// github.com/sugarme/tokenizer (BPE, WordPiece, WordLevel and Unigram models, with their
// normalizers and pre-tokenizers, and post-processors such as the BOS a Llama tokenizer's
// TemplateProcessing adds). A plain prompt is encoded with the tokenizer's special tokens when
// the engine would add them (prompt.special), so its ids are the engine's and its prefix
// blocks hash as the engine's KV events do; without them every lookup of a BOS-adding model
// missed from the first block. A chat is encoded as its text parts joined by newlines, without
// special tokens: no chat template is applied, so token ids approximate what the engine sees
// for chats.
type hfTokenizer struct {
	tk *hftokenizer.Tokenizer
}

var _ tokenizer = (*hfTokenizer)(nil)

// loadHFTokenizer reads path; a missing, unreadable or unsupported file is an error naming the
// flag.
func loadHFTokenizer(path string) (t *hfTokenizer, err error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("-tokenizer hf:%s: %w", path, err)
	}
	defer func() {
		// The library panics on some shapes it does not support rather than returning an error.
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("-tokenizer hf:%s: unsupported tokenizer.json: %v", path, r)
		}
	}()
	tk, err := pretrained.FromFile(path)
	if err != nil {
		return nil, fmt.Errorf("-tokenizer hf:%s: %w", path, err)
	}
	return &hfTokenizer{tk: tk}, nil
}

func (h *hfTokenizer) tokenize(_ context.Context, p prompt) (out tokens, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = tokens{}, fmt.Errorf("hf tokenizer: %v", r)
		}
	}()
	enc, err := h.tk.EncodeSingle(strings.Join(p.texts, "\n"), p.special)
	if err != nil {
		return tokens{}, fmt.Errorf("hf tokenizer: %w", err)
	}
	ids := make([]uint32, len(enc.Ids))
	for i, id := range enc.Ids {
		if id < 0 {
			return tokens{}, fmt.Errorf("hf tokenizer: negative token id %d", id)
		}
		ids[i] = uint32(id)
	}
	return tokens{count: int64(len(ids)), ids: ids}, nil
}
