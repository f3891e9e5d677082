package trace

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const sharedData = "../../testdata/traces/"

func TestReadMooncake(t *testing.T) {
	t.Parallel()
	in := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 3000, "input_length": 512, "output_length": 0, "hash_ids": [0]}
`
	reqs, err := ReadMooncake(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[1].Arrival != 3*time.Second || reqs[0].InputTokens != 600 || !slices.Equal(reqs[0].BlockIDs, []int64{0, 1}) {
		t.Fatalf("got %+v", reqs)
	}
	a, b := reqs[0].TokenIDs(32000), reqs[1].TokenIDs(32000)
	if len(a) != 600 || len(b) != 512 || !slices.Equal(a[:512], b) {
		t.Errorf("equal first block id must give an equal first block of tokens (len %d, %d)", len(a), len(b))
	}
	if slices.Equal(a[:88], a[512:]) {
		t.Errorf("different block ids gave equal tokens")
	}
	for _, tok := range a {
		if tok == 0 || tok >= 32000 {
			t.Fatalf("token %d outside [1, 32000)", tok)
		}
	}
	for _, bad := range []struct{ line, want string }{
		{`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0]}`, "want ceil(input_length/512) = 2"},
		{`{"timestamp": 0, "input_length": 600, "output_length": 5}`, "want timestamp, input_length"},
		{`{"timestamp": 0, "input_len": 600, "output_length": 5, "hash_ids": [0, 1]}`, "unknown field"},
		{`{"timestamp": 5, "input_length": 1, "output_length": 5, "hash_ids": [0]}` + "\n" + `{"timestamp": 1, "input_length": 1, "output_length": 5, "hash_ids": [0]}`, "arrival order"},
	} {
		if _, err := ReadMooncake(strings.NewReader(bad.line)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ReadMooncake(%s) = %v, want an error containing %q", bad.line, err, bad.want)
		}
	}
}

func TestReadAzure(t *testing.T) {
	t.Parallel()
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109"
	reqs, err := ReadAzure(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[1].Arrival != 4314579*time.Microsecond || reqs[1].BlockIDs != nil || reqs[1].OutputTokens != 109 {
		t.Fatalf("got %+v", reqs)
	}
	if a, b := reqs[0].TokenIDs(100), reqs[1].TokenIDs(100); len(a) != 374 || slices.Equal(a[:300], b[:300]) {
		t.Errorf("Azure requests must not share tokens")
	}
	if _, err := ReadAzure(strings.NewReader("TIME,a,b\n")); err == nil {
		t.Error("wrong header accepted")
	}
}

func TestWindowScale(t *testing.T) {
	t.Parallel()
	reqs := []Request{{Index: 0, Arrival: 0}, {Index: 1, Arrival: 10 * time.Second}, {Index: 2, Arrival: 20 * time.Second}}
	w := Window(reqs, 5*time.Second, 10*time.Second)
	if len(w) != 1 || w[0].Index != 1 || w[0].Arrival != 5*time.Second {
		t.Errorf("Window = %+v", w)
	}
	if s := Scale(reqs, 2); s[2].Arrival != 10*time.Second || reqs[2].Arrival != 20*time.Second {
		t.Errorf("Scale = %+v (input must not change)", s)
	}
}

// TestSharedTraces reads the real traces and checks the figures their README states.
func TestSharedTraces(t *testing.T) {
	t.Parallel()
	conv, err := Read(sharedData + "conversation_trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(conv) != 12031 {
		t.Errorf("conversation requests = %d, want 12031", len(conv))
	}
	seen := map[int64]bool{}
	var blocks, repeats int
	for _, r := range conv {
		for _, id := range r.BlockIDs {
			blocks++
			if seen[id] {
				repeats++
			}
			seen[id] = true
		}
	}
	if blocks != 288500 || len(seen) != 182790 {
		t.Errorf("blocks %d, distinct %d; want 288500, 182790", blocks, len(seen))
	}
	if hit := float64(repeats) / float64(blocks); hit < 0.365 || hit > 0.367 {
		t.Errorf("ideal hit rate %.4f, want 36.6%%", hit)
	}
	az, err := Read(sharedData + "AzureLLMInferenceTrace_conv.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(az) != 19366 || az[len(az)-1].Arrival < 3500*time.Second || az[len(az)-1].Arrival > 3503*time.Second {
		t.Errorf("azure: %d requests over %v, want 19366 over ~3502s", len(az), az[len(az)-1].Arrival)
	}
}

// TestReadNamesTheFile: an error reading a trace file names the file and the line.
func TestReadNamesTheFile(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(p, []byte(`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0], "x": 1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "trace "+p+": line 1: ") {
		t.Errorf("Read(%s) = %v, want an error naming the file and line 1", p, err)
	}
}
