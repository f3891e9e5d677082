package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/trace"
	"github.com/sluicehq/sluice/services/simengine"
)

func TestWordIsBijectiveBase26(t *testing.T) {
	for id, want := range map[uint32]string{0: "a", 25: "z", 26: "aa", 27: "ab", 701: "zz", 702: "aaa"} {
		if got := Word(id); got != want {
			t.Errorf("Word(%d) = %q, want %q", id, got, want)
		}
	}
	seen := map[string]uint32{}
	for id := range uint32(Vocab) {
		w := Word(id)
		if prev, ok := seen[w]; ok {
			t.Fatalf("Word(%d) = Word(%d) = %q", id, prev, w)
		}
		seen[w] = id
	}
}

// The prompt text is one simengine token per trace token, and requests sharing prefix block
// ids share exactly that token prefix, so the engines' cache sees the trace's sharing.
func TestPromptTextTokenizesOneToOne(t *testing.T) {
	a := trace.Request{Index: 0, InputTokens: 1000, BlockIDs: []int64{7, 8}}
	b := trace.Request{Index: 1, InputTokens: 900, BlockIDs: []int64{7, 9}}
	ta, tb := simengine.Tokenize(PromptText(a.TokenIDs(Vocab))), simengine.Tokenize(PromptText(b.TokenIDs(Vocab)))
	if len(ta) != 1000 || len(tb) != 900 {
		t.Fatalf("token counts %d and %d, want 1000 and 900", len(ta), len(tb))
	}
	common := 0
	for common < len(tb) && ta[common] == tb[common] {
		common++
	}
	if common < trace.BlockTokens || common > trace.BlockTokens+2 {
		t.Errorf("shared prefix %d tokens, want the first block (%d) and at most a chance collision more", common, trace.BlockTokens)
	}
}

func TestBodyCapsMaxTokens(t *testing.T) {
	r := trace.Request{InputTokens: 3, OutputTokens: 900, BlockIDs: []int64{1}}
	var got struct {
		Model         string `json:"model"`
		Prompt        string `json:"prompt"`
		MaxTokens     int    `json:"max_tokens"`
		Stream        bool   `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	b, err := Body(r, "m", 128, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Model != "m" || got.MaxTokens != 128 || !got.Stream || !got.StreamOptions.IncludeUsage || len(strings.Fields(got.Prompt)) != 3 {
		t.Errorf("body %s", b)
	}
	b, err = Body(r, "m", 128, true)
	if err != nil {
		t.Fatal(err)
	}
	var ids struct {
		Prompt []uint32 `json:"prompt"`
	}
	if err := json.Unmarshal(b, &ids); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids.Prompt, simengine.Tokenize(got.Prompt)) {
		t.Errorf("id prompt %v is not the engine's tokens of the text prompt %q", ids.Prompt, got.Prompt)
	}
	if n := MaxTokens(trace.Request{OutputTokens: 0}, 128); n != 1 {
		t.Errorf("MaxTokens of a 0-token output = %d, want 1", n)
	}
	if n := MaxTokens(trace.Request{OutputTokens: 900}, 0); n != 900 {
		t.Errorf("MaxTokens without a cap = %d, want 900", n)
	}
}

// fakeClock returns t0 + step·n on its n-th call.
func fakeClock(t0 time.Time, step time.Duration) func() time.Time {
	n := 0
	return func() time.Time {
		n++
		return t0.Add(time.Duration(n) * step)
	}
}

func TestReadStream(t *testing.T) {
	t0 := time.Unix(0, 0)
	stream := `data: {"choices":[{"index":0,"text":""}]}

: keep-alive
data: {"choices":[{"index":0,"text":" t1"}]}

data: {"choices":[{"index":0,"text":" t2"}]}

data: {"choices":[{"index":0,"text":"","finish_reason":"length"}]}

data: {"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":2,"total_tokens":102,"prompt_tokens_details":{"cached_tokens":64}}}

data: [DONE]

`
	res, err := ReadStream(strings.NewReader(stream), t0, fakeClock(t0, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// The clock is read once for the first text chunk (the 1st call) and once at [DONE].
	if res.TTFT != time.Millisecond || res.E2E != 2*time.Millisecond {
		t.Errorf("TTFT %v, E2E %v; want 1ms, 2ms", res.TTFT, res.E2E)
	}
	if res.PromptTokens != 100 || res.CachedTokens != 64 || res.CompletionTokens != 2 {
		t.Errorf("usage %+v", res)
	}

	for name, s := range map[string]string{
		"no usage": "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n",
		"no done":  "data: {\"choices\":[{\"text\":\"x\"}]}\n\n",
		"bad json": "data: {\"choices\":\n\n",
	} {
		if _, err := ReadStream(strings.NewReader(s), t0, time.Now); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Replay sends each request at its arrival, open loop: a slow answer does not delay the
// requests after it.
func TestReplayPacingIsOpenLoop(t *testing.T) {
	var mu sync.Mutex
	arrived := map[int]time.Duration{}
	start := time.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Prompt    string `json:"prompt"`
			MaxTokens int    `json:"max_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.URL.Path != "/v1/completions" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		n := len(strings.Fields(body.Prompt)) // the tests' requests have 1..4 tokens: their index+1
		mu.Lock()
		arrived[n-1] = time.Since(start)
		mu.Unlock()
		if n == 1 {
			time.Sleep(time.Second) // the first answer is slow
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\" t1\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":1}}}\n\ndata: [DONE]\n\n", n)
	}))
	defer srv.Close()
	var reqs []trace.Request
	for i, at := range []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond} {
		reqs = append(reqs, trace.Request{Index: i, Arrival: at, InputTokens: i + 1, OutputTokens: 5, BlockIDs: []int64{int64(i)}})
	}
	// slack is how late a send may be on a loaded machine (the race detector, parallel packages).
	const slack = 250 * time.Millisecond
	var progress []int
	var pmu sync.Mutex
	start = time.Now()
	res := Replay(context.Background(), Options{URL: srv.URL, Model: "m", Timeout: 5 * time.Second}, reqs, func(done int) {
		pmu.Lock()
		progress = append(progress, done)
		pmu.Unlock()
	})
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
		if r.Index != i || r.PromptTokens != i+1 || r.CachedTokens != 1 {
			t.Errorf("result %d: %+v", i, r)
		}
		if r.Lag < 0 || r.Lag > slack {
			t.Errorf("request %d sent %v after its arrival %v", i, r.Lag, reqs[i].Arrival)
		}
		if at := arrived[i]; at < reqs[i].Arrival || at > reqs[i].Arrival+slack {
			t.Errorf("request %d reached the server at %v, want at its arrival %v", i, at, reqs[i].Arrival)
		}
	}
	if res[0].E2E < time.Second || res[3].Sent > res[0].Sent+res[0].E2E {
		t.Errorf("request 3 (sent %v) waited for the slow request 0 (sent %v, took %v)", res[3].Sent, res[0].Sent, res[0].E2E)
	}
	slices.Sort(progress)
	if !slices.Equal(progress, []int{1, 2, 3, 4}) {
		t.Errorf("progress calls %v, want 1..4", progress)
	}
}

func TestReplayReportsHTTPErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no engine", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	res := Replay(context.Background(), Options{URL: srv.URL, Model: "m"}, []trace.Request{{InputTokens: 1, BlockIDs: []int64{1}}}, nil)
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "503") {
		t.Errorf("error %v, want the 503", res[0].Err)
	}
}
