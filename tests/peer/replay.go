// Package peer is the live comparison of sluice with the SGLang router (`make peer-bench`): a
// trace replay client that sends every request of a trace at its time-scaled arrival, open
// loop, as a streaming /v1/completions, and measures what the client sees (time to the first
// content chunk, end to end) and what the engine reports (prompt and cached tokens in the final
// usage chunk); the statistics over rounds; and the CPU time of a process tree from /proc.
// cmd/peerbench runs the engines and both routers around it.
package peer

import (
	"bufio"
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

	"github.com/sluicehq/sluice/internal/trace"
	"github.com/sluicehq/sluice/services/simengine"
)

// Vocab bounds the token ids prompts are built from (the simengine's vocabulary size).
const Vocab = 32000

// Word renders token id as one lowercase word ("a" … "zz…"): the simengine's tokenizer makes
// every run of letters one token, so PromptText of n ids is n tokens, equal id prefixes are
// equal text prefixes, and the SGLang router's character-level prefix tree sees the same sharing
// the engine's block cache does.
func Word(id uint32) string {
	var b [8]byte
	i := len(b)
	n := uint64(id)
	for {
		i--
		b[i] = byte('a' + n%26)
		n /= 26
		if n == 0 {
			return string(b[i:])
		}
		n-- // bijective base 26: "a".."z", "aa".."zz", ...
	}
}

// PromptText is the prompt of ids as text: their words separated by single spaces.
func PromptText(ids []uint32) string {
	var b strings.Builder
	b.Grow(len(ids) * 5)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Word(id))
	}
	return b.String()
}

// Options configures a replay.
type Options struct {
	// URL is the router's base URL (http://host:port); requests go to URL/v1/completions.
	URL string
	// Model is the "model" of every request.
	Model string
	// MaxTokensCap caps each request's max_tokens (the trace's output length); <= 0 is no cap.
	MaxTokensCap int
	// Timeout bounds one request, streaming included.
	Timeout time.Duration
	// Client sends the requests; nil is a client without a connection limit.
	Client *http.Client
	// PromptIDs sends each prompt as its token ids instead of its text (sluice's gateway then
	// needs no /tokenize; sglang-router 0.3.2 refuses an id-array prompt on /v1/completions).
	PromptIDs bool
	// Bodies, when set, are the requests' bodies (Bodies[i] for reqs[i], as Body makes them),
	// built before the replay so that building them does not delay the sends.
	Bodies [][]byte
}

// Result is what one request measured. Times are since the request was sent.
type Result struct {
	Index int
	// Sent is when the request was sent, relative to the replay's start; Lag is how late that
	// was against its scheduled arrival.
	Sent, Lag time.Duration
	// TTFT is the time to the first chunk with non-empty text; E2E the time to the end of the
	// stream.
	TTFT, E2E time.Duration
	// PromptTokens, CachedTokens and CompletionTokens come from the final usage chunk.
	PromptTokens, CachedTokens, CompletionTokens int
	// Err is why the request failed; nil when it streamed to [DONE] with a usage chunk.
	Err error
}

// MaxTokens is the max_tokens a request is sent with: its output length, at least 1, capped.
func MaxTokens(r trace.Request, limit int) int {
	n := max(r.OutputTokens, 1)
	if limit > 0 {
		n = min(n, limit)
	}
	return n
}

// Body is the JSON body of r's request: the prompt as text (PromptText), or as the token ids
// the simengine makes of that text when ids is set, so both forms are the same engine tokens.
func Body(r trace.Request, model string, maxTokensCap int, ids bool) ([]byte, error) {
	text := PromptText(r.TokenIDs(Vocab))
	var prompt any = text
	if ids {
		prompt = simengine.Tokenize(text)
	}
	return json.Marshal(map[string]any{
		"model": model, "prompt": prompt, "max_tokens": MaxTokens(r, maxTokensCap),
		"stream": true, "stream_options": map[string]any{"include_usage": true},
	})
}

// Replay sends every request at its arrival (after start; requests are in arrival order),
// each in its own goroutine, and returns when all have finished. progress, when not nil, is
// called after each request finishes with the number done.
func Replay(ctx context.Context, opt Options, reqs []trace.Request, progress func(done int)) []Result {
	client := opt.Client
	if client == nil {
		client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	}
	out := make([]Result, len(reqs))
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i, r := range reqs {
		if d := time.Until(start.Add(r.Arrival)); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				for j := i; j < len(reqs); j++ {
					out[j] = Result{Index: reqs[j].Index, Err: ctx.Err()}
				}
				wg.Wait()
				return out
			case <-timer.C:
			}
		}
		var body []byte
		var err error
		if opt.Bodies != nil {
			body = opt.Bodies[i]
		} else {
			body, err = Body(r, opt.Model, opt.MaxTokensCap, opt.PromptIDs)
		}
		sent := time.Since(start)
		if err != nil {
			out[i] = Result{Index: r.Index, Sent: sent, Err: err}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := send(ctx, client, opt, body)
			res.Index, res.Sent, res.Lag = r.Index, sent, sent-r.Arrival
			out[i] = res
			if progress != nil {
				mu.Lock()
				done++
				n := done
				mu.Unlock()
				progress(n)
			}
		}()
	}
	wg.Wait()
	return out
}

// send posts one request and reads its stream.
func send(ctx context.Context, client *http.Client, opt Options, body []byte) Result {
	if opt.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.Timeout)
		defer cancel()
	}
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(opt.URL, "/")+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return Result{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return Result{Err: err, E2E: time.Since(t0)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Result{Err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b)), E2E: time.Since(t0)}
	}
	res, err := ReadStream(resp.Body, t0, time.Now)
	res.Err = err
	return res
}

// chunk is the part of an OpenAI completion stream event the client reads.
type chunk struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// ReadStream reads an SSE completion stream to its "data: [DONE]", timing the first chunk
// with non-empty text (TTFT) and the end (E2E) from t0 with now, and taking the token counts
// from the usage chunk. A stream that ends without [DONE] or without usage is an error (the
// times read so far are kept).
func ReadStream(r io.Reader, t0 time.Time, now func() time.Time) (Result, error) {
	var res Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	gotUsage := false
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separators, comments, event: lines
		}
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			res.E2E = now().Sub(t0)
			if !gotUsage {
				return res, errors.New("stream ended without a usage chunk")
			}
			return res, nil
		}
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			res.E2E = now().Sub(t0)
			return res, fmt.Errorf("bad stream event %.120q: %w", data, err)
		}
		if res.TTFT == 0 {
			for _, ch := range c.Choices {
				if ch.Text != "" {
					res.TTFT = now().Sub(t0)
					break
				}
			}
		}
		if c.Usage != nil {
			gotUsage = true
			res.PromptTokens, res.CompletionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
			if c.Usage.PromptTokensDetails != nil {
				res.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
			}
		}
	}
	res.E2E = now().Sub(t0)
	if err := sc.Err(); err != nil {
		return res, err
	}
	return res, errors.New("stream ended without data: [DONE]")
}
