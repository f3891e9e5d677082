package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ClosedOptions configures a closed-loop run: Clients callers, each sending its next small
// chat completion as soon as the last one answered, for Duration after Warmup.
type ClosedOptions struct {
	// URL is the router's base URL; requests go to URL/v1/chat/completions.
	URL, Model string
	Clients    int
	// Warmup runs the loop without counting; Duration is the measured part.
	Warmup, Duration time.Duration
	// MaxTokens is every request's max_tokens; Stream asks for an SSE answer.
	MaxTokens int
	Stream    bool
	// Prefixes is the number of distinct system prompts (PrefixWords words each) the requests
	// share; each user message adds SuffixWords words of its own. Cache-aware routing has
	// something to find; the bodies stay small (under 1 kB at the defaults of peerbench).
	Prefixes, PrefixWords, SuffixWords int
	// Timeout bounds one request.
	Timeout time.Duration
	// Seed makes the prompts the same for every system.
	Seed uint64
	// Measured, when set, is called when the measured part starts and ends (to read CPU).
	Measured func(start bool)
}

// ClosedResult is what a closed-loop run measured.
type ClosedResult struct {
	// Latencies of the successful measured requests; Errors counts the failed ones.
	Latencies []time.Duration
	Errors    int
	FirstErr  string
	// Elapsed is the measured part's length.
	Elapsed time.Duration
}

// ChatBodies makes n small chat completion bodies: a system message from one of
// o.Prefixes shared prompts and a user message of its own, in words the engines tokenize one
// token each.
func ChatBodies(o ClosedOptions, n int) [][]byte {
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	words := func(k int) string {
		ids := make([]uint32, k)
		for i := range ids {
			ids[i] = uint32(rng.IntN(Vocab))
		}
		return PromptText(ids)
	}
	prefixes := make([]string, max(o.Prefixes, 1))
	for i := range prefixes {
		prefixes[i] = words(o.PrefixWords)
	}
	out := make([][]byte, n)
	for i := range out {
		b, _ := json.Marshal(map[string]any{
			"model": o.Model, "max_tokens": o.MaxTokens, "stream": o.Stream,
			"messages": []map[string]string{{"role": "system", "content": prefixes[rng.IntN(len(prefixes))]},
				{"role": "user", "content": words(o.SuffixWords)}},
		})
		out[i] = b
	}
	return out
}

// Closed runs the closed loop. Every client walks its own slice of the same body list, so each
// system gets the same requests in the same per-client order.
func Closed(ctx context.Context, o ClosedOptions) ClosedResult {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: max(o.Clients, 2) * 2, DisableCompression: true}}
	defer client.CloseIdleConnections()
	const perClient = 4096
	bodies := ChatBodies(o, perClient*o.Clients)
	url := strings.TrimSuffix(o.URL, "/") + "/v1/chat/completions"

	// A call counts when it started inside the measured part; the loop ends at its end and
	// the calls then in flight finish (counted: they started inside).
	var measuring, stopping atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var res ClosedResult
	for c := range o.Clients {
		wg.Go(func() {
			var lats []time.Duration
			var errs int
			var first string
			for i := 0; !stopping.Load() && ctx.Err() == nil; i++ {
				counting := measuring.Load()
				t0 := time.Now()
				err := closedCall(ctx, client, url, bodies[c*perClient+i%perClient], o)
				d := time.Since(t0)
				switch {
				case !counting:
				case err != nil:
					errs++
					if first == "" {
						first = err.Error()
					}
				default:
					lats = append(lats, d)
				}
			}
			mu.Lock()
			res.Latencies = append(res.Latencies, lats...)
			res.Errors += errs
			if res.FirstErr == "" {
				res.FirstErr = first
			}
			mu.Unlock()
		})
	}
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	sleep(o.Warmup)
	if o.Measured != nil {
		o.Measured(true)
	}
	t0 := time.Now()
	measuring.Store(true)
	sleep(o.Duration)
	stopping.Store(true)
	res.Elapsed = time.Since(t0)
	if o.Measured != nil {
		o.Measured(false)
	}
	wg.Wait()
	return res
}

// closedCall sends one body and reads the whole answer; a non-200 or an answer without
// choices is an error.
func closedCall(ctx context.Context, client *http.Client, url string, body []byte, o ClosedOptions) error {
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, bytes.TrimSpace(b))
	}
	if o.Stream {
		if !bytes.Contains(b, []byte("data: [DONE]")) {
			return errors.New("stream ended without data: [DONE]")
		}
		return nil
	}
	if !bytes.Contains(b, []byte(`"choices"`)) {
		return fmt.Errorf("answer without choices: %.200s", b)
	}
	return nil
}
